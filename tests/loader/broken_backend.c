/* SPDX-License-Identifier: Apache-2.0 */
/*
 * broken_backend.c - deliberately broken backend modules for the loader test. One source, built
 * several times with a different BROKEN_* define; each must be refused with a reason, never
 * crash the process, and never keep the other backends from loading.
 */
#include <stdio.h>

#include "odx/backend.h"

#define EXPORT __attribute__((visibility("default")))

static int fail_open(const odx_backend_host *host, void **state, char *reason, size_t n)
{
	(void)host;
	(void)state;
	snprintf(reason, n, "the fake device is unplugged");
	return ODX_EUNAVAIL;
}

static void nop_close(void *state)
{
	(void)state;
}

static int no_devices(void *state)
{
	(void)state;
	return 0;
}

/* Stubs that make a complete table; a refused module never gets them called. */
static int stub_open_dev(void *st, int i, int d, odx_backend_device_props *p, void **dev)
{
	(void)st, (void)i, (void)d, (void)p, (void)dev;
	return ODX_ENOSYS;
}

static void stub_close_dev(void *dev)
{
	(void)dev;
}

static int stub_alloc(void *dev, size_t size, bool zero, uint64_t *h)
{
	(void)dev, (void)size, (void)zero, (void)h;
	return ODX_ENOSYS;
}

static void stub_free(void *dev, uint64_t h, size_t size)
{
	(void)dev, (void)h, (void)size;
}

static int stub_h2d(void *dev, uint64_t dst, size_t off, const void *src, size_t n,
		    odx_backend_done_fn done, void *arg)
{
	(void)dev, (void)dst, (void)off, (void)src, (void)n, (void)done, (void)arg;
	return ODX_ENOSYS;
}

static int stub_d2h(void *dev, void *dst, uint64_t src, size_t off, size_t n,
		    odx_backend_done_fn done, void *arg)
{
	(void)dev, (void)dst, (void)src, (void)off, (void)n, (void)done, (void)arg;
	return ODX_ENOSYS;
}

static int stub_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg)
{
	(void)dev, (void)l, (void)done, (void)arg;
	return ODX_ENOSYS;
}

/* Complete, but open() fails: the reason must reach the user. */
static const odx_backend_ops full_ops = {
	.size = sizeof(odx_backend_ops),
	.open = fail_open,
	.close = nop_close,
	.device_count = no_devices,
	.device_open = stub_open_dev,
	.device_close = stub_close_dev,
	.mem_alloc = stub_alloc,
	.mem_free = stub_free,
	.copy_h2d = stub_h2d,
	.copy_d2h = stub_d2h,
	.launch = stub_launch,
};

/* Full size, but required operations left NULL. */
static const odx_backend_ops noops_ops = {
	.size = sizeof(odx_backend_ops),
	.open = fail_open,
	.close = nop_close,
	.device_count = no_devices,
};

/* From an "older" build: the table ends before mem_alloc, though its slots look filled. */
static const odx_backend_ops short_ops = {
	.size = offsetof(odx_backend_ops, mem_alloc),
	.open = fail_open,
	.close = nop_close,
	.device_count = no_devices,
	.device_open = stub_open_dev,
	.device_close = stub_close_dev,
	.mem_alloc = stub_alloc,
	.mem_free = stub_free,
	.copy_h2d = stub_h2d,
	.copy_d2h = stub_d2h,
	.launch = stub_launch,
};

static const odx_backend_descriptor desc __attribute__((unused)) = {
	.size = sizeof(odx_backend_descriptor),
#ifdef BROKEN_ABI
	.abi_version = ((ODX_BACKEND_ABI_MAJOR + 1) << 16),
#else
	.abi_version = ODX_BACKEND_ABI_VERSION,
#endif
	.name = BROKEN_NAME,
	.kind = ODX_BACKEND_HOST,
	.description = "a broken backend for the loader test",
#if defined(BROKEN_SHORT)
	.ops = &short_ops,
#elif defined(BROKEN_NOOPS)
	.ops = &noops_ops,
#else
	.ops = &full_ops,
#endif
};

#ifndef BROKEN_NO_ENTRY
EXPORT int odx_backend_entry(uint32_t core_abi_version, const odx_backend_descriptor **out);
EXPORT int odx_backend_entry(uint32_t core_abi_version, const odx_backend_descriptor **out)
{
	(void)core_abi_version;
	(void)short_ops, (void)noops_ops, (void)full_ops;
#ifdef BROKEN_REFUSE
	(void)out;
	return ODX_ENOSYS;
#else
	*out = &desc;
	return 0;
#endif
}
#else
EXPORT int odx_backend_entry_misspelt(void);
EXPORT int odx_backend_entry_misspelt(void)
{
	(void)desc;
	(void)short_ops, (void)noops_ops, (void)full_ops;
	return 0;
}
#endif
