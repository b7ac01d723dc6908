/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_common.h - what the fake CUDA driver and the fake HIP runtime share: environment knobs,
 * allocation counters and the "kernels" they run on host memory.
 *
 * A fake image is text: "ODXFAKE:<arch>" (e.g. "ODXFAKE:sm_90" or "ODXFAKE:gfx90a"); it loads
 * only on a device of that arch (else "no binary for GPU") and provides two functions:
 *   odx_test_axpy(x, y, float a, int n): y[i] = a * x[i] + y[i] for i < n (also under the
 *   standard kernel's name, odx_axpy_f32, for real images of it)
 *   odx_test_fault(p): an illegal address (the launch poisons the context)
 * "ODXFAKE:badptx" fails like invalid PTX, with a JIT log.
 *
 * Page-locked host memory is tracked like a driver does: pinned allocations (page-aligned) and
 * registered ranges, a registration refused when it shares a page with either. Every async copy
 * is classified by its host side (registered, pinned allocation, pageable) and counted; the
 * tests read the counters through fake_cuda_stat / fake_hip_stat.
 *
 * Blocking copies (ABI 1.3 copy_sync) are told apart by their thread: the test marks its own
 * thread (fake_cuda_mark_caller / fake_hip_mark_caller), where only copy_sync issues copies, the
 * lanes issuing theirs on threads of their own. fake_cuda_fail_copies / fake_hip_fail_copies(code,
 * after) make every host<->device copy fail with `code` once `after` more have succeeded (code 0:
 * none fails); an illegal address (700) also poisons the context, as a faulting copy would.
 */
#ifndef ODX_TESTS_GPU_FAKE_COMMON_H
#define ODX_TESTS_GPU_FAKE_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

enum { FAKE_FN_AXPY = 1, FAKE_FN_FAULT = 2 };

typedef struct fake_module {
	char arch[32];
	int fns[2];
} fake_module;

static long fake_env(const char *name, long def)
{
	const char *v = getenv(name);

	return v && *v ? strtol(v, NULL, 0) : def;
}

/* 0 and the function id, or -1 if the module has no such function. */
static int fake_function(const char *name)
{
	/* The test's own axpy and the standard kernel set's (same parameters). */
	if (strcmp(name, "odx_test_axpy") == 0 || strcmp(name, "odx_axpy_f32") == 0)
		return FAKE_FN_AXPY;
	if (strcmp(name, "odx_test_fault") == 0)
		return FAKE_FN_FAULT;
	return -1;
}

/* Runs a fake kernel. Returns 0, or 1 for an illegal address. */
static int fake_run(int fn, void **params)
{
	if (fn == FAKE_FN_AXPY) {
		const float *x = (const float *)(uintptr_t) * (uint64_t *)params[0];
		float *y = (float *)(uintptr_t) * (uint64_t *)params[1];
		float a = *(float *)params[2];
		int n = *(int *)params[3], i;

		for (i = 0; i < n; i++)
			y[i] = a * x[i] + y[i];
		return 0;
	}
	return 1;
}

/* ---- page-locked host memory ---------------------------------------------------------------- */

#define FAKE_PAGE 4096u
#define FAKE_MAX_PINNED 256

enum { FAKE_PAGEABLE = 0, FAKE_PIN_ALLOC = 1, FAKE_PIN_REGISTERED = 2 };

typedef struct fake_pinned {
	uintptr_t base;
	size_t size; /* 0: free slot */
	int kind;
} fake_pinned;

static pthread_mutex_t fake_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_pinned fake_pins[FAKE_MAX_PINNED];

/* What the tests read (fake_*_stat): counters since the library was loaded. */
static const char *const fake_stat_names[] = {
	"register_calls",   /* every host-register call, refused ones too */
	"registered",       /* ranges registered now */
	"unregister_calls", /* successful unregistrations */
	"register_flags",   /* flags of the last registration */
	"direct_copies",    /* async copies whose host side is a registered range */
	"pinned_copies",    /* ... a pinned allocation (staging blocks, the core's pool) */
	"pageable_copies",  /* ... neither */
	"caller_copies",    /* async copies issued on the marked thread (copy_sync), any host side */
	"caller_pageable",  /* ... of them, with pageable memory on the host side */
};
enum {
	FAKE_STAT_REGISTER_CALLS,
	FAKE_STAT_REGISTERED,
	FAKE_STAT_UNREGISTER_CALLS,
	FAKE_STAT_REGISTER_FLAGS,
	FAKE_STAT_DIRECT_COPIES,
	FAKE_STAT_PINNED_COPIES,
	FAKE_STAT_PAGEABLE_COPIES,
	FAKE_STAT_CALLER_COPIES,
	FAKE_STAT_CALLER_PAGEABLE,
	FAKE_STAT_COUNT
};
static atomic_long fake_stats[FAKE_STAT_COUNT];

static _Thread_local int fake_on_caller; /* set on the thread the test marked */
static atomic_int fake_copy_error;       /* injected: what failing copies return */
static atomic_long fake_copy_ok_left;    /* copies that still succeed before they fail */

static void fake_fail_copies(int code, long after)
{
	atomic_store(&fake_copy_ok_left, after);
	atomic_store(&fake_copy_error, code);
}

/* 0, or the injected error this copy fails with. */
static int fake_copy_fault(void)
{
	int code = atomic_load(&fake_copy_error);

	if (!code || atomic_fetch_sub(&fake_copy_ok_left, 1) > 0)
		return 0;
	return code;
}

static long fake_stat_get(const char *name)
{
	for (int i = 0; i < FAKE_STAT_COUNT; i++)
		if (strcmp(name, fake_stat_names[i]) == 0)
			return atomic_load(&fake_stats[i]);
	return -1;
}

/* Records a pinned range: 0, or 1 when it shares a page with one already there (nothing
 * recorded), or -1 when the table is full. */
static int fake_pin_add(const void *p, size_t size, int kind)
{
	uintptr_t lo = (uintptr_t)p / FAKE_PAGE * FAKE_PAGE;
	uintptr_t hi = ((uintptr_t)p + size + FAKE_PAGE - 1) / FAKE_PAGE * FAKE_PAGE;
	int i, slot = -1, rc = 0;

	pthread_mutex_lock(&fake_pin_lock);
	for (i = 0; i < FAKE_MAX_PINNED && rc == 0; i++) {
		fake_pinned *e = &fake_pins[i];
		uintptr_t elo = e->base / FAKE_PAGE * FAKE_PAGE;
		uintptr_t ehi = (e->base + e->size + FAKE_PAGE - 1) / FAKE_PAGE * FAKE_PAGE;

		if (!e->size) {
			if (slot < 0)
				slot = i;
		} else if (lo < ehi && elo < hi) {
			rc = 1;
		}
	}
	if (rc == 0 && slot < 0)
		rc = -1;
	if (rc == 0)
		fake_pins[slot] = (fake_pinned){(uintptr_t)p, size, kind};
	pthread_mutex_unlock(&fake_pin_lock);
	return rc;
}

/* Forgets the range of this kind that starts at p: 0, or -1 if there is none. */
static int fake_pin_remove(const void *p, int kind)
{
	int i, rc = -1;

	pthread_mutex_lock(&fake_pin_lock);
	for (i = 0; i < FAKE_MAX_PINNED && rc; i++)
		if (fake_pins[i].size && fake_pins[i].base == (uintptr_t)p &&
		    fake_pins[i].kind == kind) {
			fake_pins[i].size = 0;
			rc = 0;
		}
	pthread_mutex_unlock(&fake_pin_lock);
	return rc;
}

/* Counts an async copy by what its host side is. */
static void fake_count_copy(const void *host, size_t n)
{
	uintptr_t p = (uintptr_t)host;
	int i, kind = FAKE_PAGEABLE;

	pthread_mutex_lock(&fake_pin_lock);
	for (i = 0; i < FAKE_MAX_PINNED && kind == FAKE_PAGEABLE; i++)
		if (fake_pins[i].size && p >= fake_pins[i].base &&
		    p + n <= fake_pins[i].base + fake_pins[i].size)
			kind = fake_pins[i].kind;
	pthread_mutex_unlock(&fake_pin_lock);
	if (kind == FAKE_PIN_REGISTERED)
		atomic_fetch_add(&fake_stats[FAKE_STAT_DIRECT_COPIES], 1);
	else if (kind == FAKE_PIN_ALLOC)
		atomic_fetch_add(&fake_stats[FAKE_STAT_PINNED_COPIES], 1);
	else
		atomic_fetch_add(&fake_stats[FAKE_STAT_PAGEABLE_COPIES], 1);
	if (fake_on_caller) {
		atomic_fetch_add(&fake_stats[FAKE_STAT_CALLER_COPIES], 1);
		if (kind == FAKE_PAGEABLE)
			atomic_fetch_add(&fake_stats[FAKE_STAT_CALLER_PAGEABLE], 1);
	}
}

/* Pinned allocations are whole pages, as a driver's are. */
static void *fake_pinned_alloc(size_t n)
{
	size_t size = (n + FAKE_PAGE - 1) / FAKE_PAGE * FAKE_PAGE;
	void *p = aligned_alloc(FAKE_PAGE, size ? size : FAKE_PAGE);

	if (p && fake_pin_add(p, n ? n : 1, FAKE_PIN_ALLOC) != 0) {
		free(p);
		p = NULL;
	}
	return p;
}

static void fake_pinned_free(void *p)
{
	fake_pin_remove(p, FAKE_PIN_ALLOC);
	free(p);
}

/* Registration as the drivers do it: 0, `already` when the range shares a page with pinned
 * memory, `invalid` for a null or empty range or unknown flags, `no_memory` when the fake's
 * table is full. */
static int fake_register(void *p, size_t n, unsigned flags, int already, int invalid, int no_memory)
{
	int rc;

	atomic_fetch_add(&fake_stats[FAKE_STAT_REGISTER_CALLS], 1);
	if (!p || !n || (flags & ~0xfu))
		return invalid;
	rc = fake_pin_add(p, n, FAKE_PIN_REGISTERED);
	if (rc)
		return rc > 0 ? already : no_memory;
	atomic_store(&fake_stats[FAKE_STAT_REGISTER_FLAGS], (long)flags);
	atomic_fetch_add(&fake_stats[FAKE_STAT_REGISTERED], 1);
	return 0;
}

/* 0, or `not_registered` unless `p` starts a registered range. */
static int fake_unregister(void *p, int not_registered)
{
	if (fake_pin_remove(p, FAKE_PIN_REGISTERED) != 0)
		return not_registered;
	atomic_fetch_sub(&fake_stats[FAKE_STAT_REGISTERED], 1);
	atomic_fetch_add(&fake_stats[FAKE_STAT_UNREGISTER_CALLS], 1);
	return 0;
}

#endif /* ODX_TESTS_GPU_FAKE_COMMON_H */
