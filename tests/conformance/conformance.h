/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conformance.h - what the files of the backend conformance suite share: the context under test
 * and the helpers (conformance_util.c) that launch built-in kernels, move bytes and compare
 * results. conformance.c holds main and most cases; conformance_data.c the data kernels.
 */
#ifndef ODX_TESTS_CONFORMANCE_H
#define ODX_TESTS_CONFORMANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx/odx.h"

#define MIB (1024 * 1024)
#define MAX_DEVICES 16
#define NBUILTIN 32

/* The context under test, opened once by main (conformance.c). */
struct conformance_state {
	odx_context *ctx;
	const char *backend; /* $ODX_BACKENDS, or "default" */
	int kind;	     /* the expected odx_backend_kind, -1 if not one backend */
	int ndev;
	odx_kernel *kernels[NBUILTIN];
	const char *const *names;
	int nnames;
};
extern struct conformance_state conf;

/* The built-in kernel `name`, looked up once per run (fails the test if there is none). */
odx_kernel *builtin(const char *name);
/* Submits a built-in kernel on `device` (-1: anywhere) and returns its event. */
odx_event *launch(const char *name, const odx_arg *args, int nargs, int device, uint32_t gx,
		  uint32_t gy, uint32_t bx, uint32_t by);
/* Waits for `ev` (fails the test on an error or a timeout) and releases it. */
void wait_ok(odx_event *ev, const char *what);
/* A new buffer of `size` bytes, written from `init` when not NULL. */
odx_buffer *new_buffer(size_t size, const void *init);
/* Reads the first `size` bytes of `b` into dst. */
void read_all(odx_buffer *b, void *dst, size_t size);
void fill_random(uint8_t *p, size_t n, uint64_t seed);
/* A float in [0, 1). */
float rand_unit(uint64_t *rng);
/* malloc that fails the test instead of returning NULL. */
void *xmalloc(size_t n);
/* Moves the buffer's valid copy onto `device` and leaves it the only valid one. */
void touch(odx_buffer *b, int device);
/* Compares within `rel` relative to |want| (or to scale[i] when scale is not NULL). */
void check_f32(const char *what, int device, const float *got, const double *want, int n,
	       const double *scale, double rel);
/* Compares exactly. */
void check_u32(const char *what, int device, const uint32_t *got, const uint32_t *want, int n);
/* murmur3's 32-bit finaliser. */
uint32_t fmix32(uint32_t h);
uint32_t f32_bits(float f);

/* ---- conformance_data.c ------------------------------------------------------------------ */

/* The data kernels (docs/kernels.md, "Data kernels") on every device, against sequential
 * references. */
void test_data_kernels(void **state);

#endif /* ODX_TESTS_CONFORMANCE_H */
