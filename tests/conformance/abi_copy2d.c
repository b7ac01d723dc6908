/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_copy2d.c - backend ABI 1.7 conformance of copy_2d (odx_backend_copy2d), below the public
 * API: one backend module driven through its ops table (abi_module.c), its strided copies
 * checked byte for byte against the same copy done by memcpy here.
 *
 * usage: abi_copy2d BACKEND
 *   Exits 77 (skipped) when the backend cannot be opened here (no driver, no device), or when
 *   the module declares no copy_2d at all; says which.
 *
 * What it checks, for host -> device, device -> host and device -> device (on one device, and
 * between devices 0 and 1 when the backend has two): pitches larger than the width on both sides
 * (and equal to it on one), widths of 1, 3 and 4097 bytes, one run, 2048 runs, device memory at
 * nonzero pooled offsets (multiples of mem_align, as the core's suballocator hands out), and that
 * no byte outside the runs changes: the device allocation and the host buffer around the runs are
 * filled with a pattern first (different bytes at each position, so a run written one place off
 * shows), and the whole of both is compared after the copy. Refused requests (rows 0, a pitch
 * below the width) must come back ODX_EINVAL with nothing queued.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "abi_module.h"
#include "odx/backend.h"

/* A copy's geometry: `rows` runs of `width` bytes, `dev_pitch` apart in device memory (which
 * starts `dev_off` bytes into its allocation) and `host_pitch` apart in host memory. */
typedef struct geometry {
	size_t width, rows, dev_pitch, host_pitch;
	size_t dev_off_aligns; /* the device offset, in units of mem_align */
	const char *what;
} geometry;

static const geometry cases[] = {
	{1, 7, 5, 3, 1, "width 1"},
	{3, 1, 3, 3, 1, "width 3, one run, pitches equal to the width"},
	{3, 1, 40, 17, 2, "width 3, one run, pitches above the width"},
	{3, 9, 11, 8, 3, "width 3"},
	{4097, 5, 4097 + 64, 4097 + 3, 1, "width 4097"},
	{100, 10, 100, 131, 1, "contiguous on the device side"},
	{100, 10, 164, 100, 1, "contiguous on the host side"},
	{3, 2048, 16, 7, 1, "2048 runs of 3 bytes"},
	{1000, 2048, 4096, 1000 + 24, 2, "2048 runs of 1000 bytes (a 2048-column tile)"},
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

static struct {
	void *dev1;  /* device 1 when the backend has two, else NULL */
} g;

/* ---- helpers ------------------------------------------------------------------------------ */

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	assert_non_null(p);
	return p;
}

/* Position-dependent bytes: a run copied from or to a wrong place differs. */
static void pattern(unsigned char *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t x = (seed + i) * 0x9e3779b97f4a7c15ull;

		x ^= x >> 29;
		p[i] = (unsigned char)(x * 0xbf58476d1ce4e5b9ull >> 56);
	}
}

static size_t span_of(size_t width, size_t rows, size_t pitch)
{
	return pitch * (rows - 1) + width;
}

/* Compares a whole image with what it should be; names the first byte that differs and
 * whether it lies in a run (copied wrong) or outside all runs (touched). */
static void compare(const char *what, const char *side, const unsigned char *got,
		    const unsigned char *want, size_t n, size_t first, size_t width, size_t pitch,
		    size_t rows)
{
	for (size_t i = 0; i < n; i++) {
		if (got[i] == want[i])
			continue;
		bool in_run = i >= first && (i - first) / pitch < rows &&
			      (i - first) % pitch < width;
		fail_msg("%s: %s byte %zu is 0x%02x, expected 0x%02x (%s)", what, side, i, got[i],
			 want[i], in_run ? "inside a run: copied wrong" : "outside the runs: touched");
	}
}

/* Queues one copy_2d on `dev` and waits for it. */
static void run_copy(void *dev, const odx_backend_copy2d *c, const char *what)
{
	int rc;

	abi_expect_done();
	rc = abi.ops->copy_2d(dev, c, abi_on_done, abi_waiter());
	if (rc) {
		abi_on_done(abi_waiter(), 0, NULL); /* nothing was queued */
		fail_msg("%s: copy_2d: %s", what, odx_err_name(rc));
	}
	abi_wait_all();
}

/* An allocation of `total` bytes on `dev` (device 0 or 1) holding `img`. */
static uint64_t device_image(void *dev, const unsigned char *img, size_t total)
{
	uint64_t mem = 0;
	int rc;

	rc = abi.ops->mem_alloc(dev, total, false, &mem);
	if (rc)
		fail_msg("mem_alloc(%zu): %s: %s", total, odx_err_name(rc), abi.detail);
	abi_expect_done();
	rc = abi.ops->copy_h2d(dev, mem, 0, img, total, abi_on_done, abi_waiter());
	if (rc) {
		abi_on_done(abi_waiter(), 0, NULL);
		fail_msg("copy_h2d(%zu): %s", total, odx_err_name(rc));
	}
	abi_wait_all();
	return mem;
}

static void device_read(void *dev, unsigned char *img, uint64_t mem, size_t total)
{
	int rc;

	memset(img, 0, total);
	abi_expect_done();
	rc = abi.ops->copy_d2h(dev, img, mem, 0, total, abi_on_done, abi_waiter());
	if (rc) {
		abi_on_done(abi_waiter(), 0, NULL);
		fail_msg("copy_d2h(%zu): %s", total, odx_err_name(rc));
	}
	abi_wait_all();
}

/* ---- the three directions ----------------------------------------------------------------- */

static void case_h2d(const geometry *k)
{
	size_t off = k->dev_off_aligns * abi.align;
	size_t dspan = span_of(k->width, k->rows, k->dev_pitch);
	size_t hspan = span_of(k->width, k->rows, k->host_pitch);
	size_t total = off + dspan + abi.align + 5; /* a guarded tail behind the last run */
	unsigned char *src = xmalloc(hspan), *want = xmalloc(total), *got = xmalloc(total);
	char what[160];
	uint64_t mem;

	snprintf(what, sizeof(what), "host -> device, %s", k->what);
	pattern(src, hspan, 1);
	pattern(want, total, 2);
	mem = device_image(abi.dev, want, total);
	run_copy(abi.dev,
		 &(odx_backend_copy2d){.width = k->width, .rows = k->rows, .dst = mem,
				       .dst_off = off, .dst_pitch = k->dev_pitch, .src_host = src,
				       .src_pitch = k->host_pitch},
		 what);
	for (size_t r = 0; r < k->rows; r++)
		memcpy(want + off + r * k->dev_pitch, src + r * k->host_pitch, k->width);
	device_read(abi.dev, got, mem, total);
	compare(what, "device", got, want, total, off, k->width, k->dev_pitch, k->rows);
	abi.ops->mem_free(abi.dev, mem, total);
	free(src);
	free(want);
	free(got);
}

static void case_d2h(const geometry *k)
{
	size_t off = k->dev_off_aligns * abi.align;
	size_t dspan = span_of(k->width, k->rows, k->dev_pitch);
	size_t hspan = span_of(k->width, k->rows, k->host_pitch);
	size_t total = off + dspan + abi.align + 5;
	size_t hoff = 13, htotal = hoff + hspan + 29; /* guards before and behind in host memory */
	unsigned char *img = xmalloc(total), *back = xmalloc(total);
	unsigned char *got = xmalloc(htotal), *want = xmalloc(htotal);
	char what[160];
	uint64_t mem;

	snprintf(what, sizeof(what), "device -> host, %s", k->what);
	pattern(img, total, 3);
	mem = device_image(abi.dev, img, total);
	pattern(got, htotal, 4);
	memcpy(want, got, htotal);
	run_copy(abi.dev,
		 &(odx_backend_copy2d){.width = k->width, .rows = k->rows, .dst_host = got + hoff,
				       .dst_pitch = k->host_pitch, .src = mem, .src_off = off,
				       .src_pitch = k->dev_pitch},
		 what);
	for (size_t r = 0; r < k->rows; r++)
		memcpy(want + hoff + r * k->host_pitch, img + off + r * k->dev_pitch, k->width);
	compare(what, "host", got, want, htotal, hoff, k->width, k->host_pitch, k->rows);
	/* The source is only read. */
	device_read(abi.dev, back, mem, total);
	compare(what, "source device", back, img, total, 0, 0, 1, 0);
	abi.ops->mem_free(abi.dev, mem, total);
	free(img);
	free(back);
	free(got);
	free(want);
}

/* Device to device: the source on `sdev` (NULL in the request when it is device 0, as the ABI
 * allows, when `implicit`), the destination on device 0. The host pitch of the case is used as
 * the source's device pitch, so that the two pitches differ. */
static void case_d2d(const geometry *k, void *sdev, bool implicit, const char *label)
{
	size_t doff = k->dev_off_aligns * abi.align, soff = (k->dev_off_aligns + 1) * abi.align;
	size_t dspan = span_of(k->width, k->rows, k->dev_pitch);
	size_t sspan = span_of(k->width, k->rows, k->host_pitch);
	size_t dtotal = doff + dspan + abi.align + 5, stotal = soff + sspan + 7;
	unsigned char *simg = xmalloc(stotal), *want = xmalloc(dtotal), *got = xmalloc(dtotal);
	char what[160];
	uint64_t smem, dmem;

	snprintf(what, sizeof(what), "device -> device (%s), %s", label, k->what);
	pattern(simg, stotal, 5);
	pattern(want, dtotal, 6);
	smem = device_image(sdev, simg, stotal);
	dmem = device_image(abi.dev, want, dtotal);
	run_copy(abi.dev,
		 &(odx_backend_copy2d){.width = k->width, .rows = k->rows, .dst = dmem,
				       .dst_off = doff, .dst_pitch = k->dev_pitch,
				       .src_dev = implicit ? NULL : sdev, .src = smem,
				       .src_off = soff, .src_pitch = k->host_pitch},
		 what);
	for (size_t r = 0; r < k->rows; r++)
		memcpy(want + doff + r * k->dev_pitch, simg + soff + r * k->host_pitch, k->width);
	device_read(abi.dev, got, dmem, dtotal);
	compare(what, "destination device", got, want, dtotal, doff, k->width, k->dev_pitch,
		k->rows);
	abi.ops->mem_free(abi.dev, dmem, dtotal);
	abi.ops->mem_free(sdev, smem, stotal);
	free(simg);
	free(want);
	free(got);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_descriptor(void **state)
{
	(void)state;
	/* copy_2d came with 1.7: a module offering it declares 1.7 or later. */
	assert_true((abi.desc->abi_version & 0xffff) >= 7);
}

static void test_h2d(void **state)
{
	(void)state;
	for (size_t i = 0; i < NCASES; i++)
		case_h2d(&cases[i]);
}

static void test_d2h(void **state)
{
	(void)state;
	for (size_t i = 0; i < NCASES; i++)
		case_d2h(&cases[i]);
}

static void test_d2d_same_device(void **state)
{
	(void)state;
	for (size_t i = 0; i < NCASES; i++)
		case_d2d(&cases[i], abi.dev, i % 2 == 0, "one device");
}

static void test_d2d_two_devices(void **state)
{
	(void)state;
	if (!g.dev1) {
		printf("skipped: %s offers one device here, no copy between two\n", abi.name);
		skip();
	}
	for (size_t i = 0; i < NCASES; i++)
		case_d2d(&cases[i], g.dev1, false, "device 1 to device 0");
}

/* Requests the ABI does not allow are refused before anything is queued (no callback). */
static void test_refused(void **state)
{
	unsigned char host[64];
	uint64_t mem = abi_alloc(4 * abi.align);
	const odx_backend_copy2d bad[] = {
		{.width = 4, .rows = 0, .dst = mem, .dst_pitch = 4, .src_host = host,
		 .src_pitch = 4},
		{.width = 8, .rows = 2, .dst = mem, .dst_pitch = 4, .src_host = host,
		 .src_pitch = 8},
		{.width = 8, .rows = 2, .dst_host = host, .dst_pitch = 8, .src = mem,
		 .src_pitch = 7},
		{.width = 8, .rows = SIZE_MAX / 4, .dst = mem, .dst_pitch = 8, .src_host = host,
		 .src_pitch = 8},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = abi.ops->copy_2d(abi.dev, &bad[i], abi_on_done, abi_waiter());

		if (rc != ODX_EINVAL && rc != ODX_ERANGE)
			fail_msg("request %zu: copy_2d returned %s, expected ODX_EINVAL or "
				 "ODX_ERANGE",
				 i, odx_err_name(rc));
	}
	abi_wait_all(); /* fails if a callback came for a refused request */
	abi.ops->mem_free(abi.dev, mem, 4 * abi.align);
}

static int setup(void **state)
{
	odx_backend_device_props props;

	(void)state;
	if (abi_open(abi.name) != 0)
		return -1;
	if (!ODX_BACKEND_HAS_OP(abi.ops, odx_backend_ops, copy_2d))
		abi_skip("the module offers no copy_2d (the core copies tiles row by row)");
	if (abi.ops->device_count(abi.state) >= 2 &&
	    abi.ops->device_open(abi.state, 1, 1, &props, &g.dev1) != 0)
		g.dev1 = NULL;
	printf("%s: ABI %u.%u, device '%s', mem_align %u, %s\n", abi.name,
	       abi.desc->abi_version >> 16, abi.desc->abi_version & 0xffff, abi.props.name,
	       abi.props.mem_align, g.dev1 ? "two devices" : "one device");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (g.dev1)
		abi.ops->device_close(g.dev1);
	abi_close();
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_descriptor),	cmocka_unit_test(test_h2d),
		cmocka_unit_test(test_d2h),		cmocka_unit_test(test_d2d_same_device),
		cmocka_unit_test(test_d2d_two_devices), cmocka_unit_test(test_refused),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s BACKEND\n", argv[0]);
		return 2;
	}
	abi.name = argv[1];
	return cmocka_run_group_tests_name(abi.name, tests, setup, teardown);
}
