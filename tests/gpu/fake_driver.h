/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_driver.h - what the two files of test_gpu_fake_driver share: the backend under test and
 * the helpers over the fake driver (test_gpu_fake_driver.c), and the cases of
 * test_gpu_fake_memory.c that main runs.
 */
#ifndef ODX_TESTS_GPU_FAKE_DRIVER_H
#define ODX_TESTS_GPU_FAKE_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "odx/odx.h"

extern const char *backend; /* "cuda" or "hip" (argv[1]) */
extern bool is_cuda;

/* Did the context's log (info and above) say `needle`? assert_logged fails the test if not. */
bool logged(const char *needle);
void assert_logged(const char *needle);
/* Sets the fake's knob FAKE_CUDA_<knob> / FAKE_HIP_<knob> in the environment. */
void fake_set(const char *knob, const char *value);
/* Every test's teardown: the fake's knobs unset, its live-object baseline taken again. */
int reset_env(void **state);
/* A page-locking counter of the fake (fake_common.h). */
long fake_stat(const char *name);
/* Every host<->device copy fails with `code` once `after` more succeeded (code 0: none). */
void fake_fail_copies(int code, long after);
/* A context on the fake driver (fails the test if it does not open). */
odx_context *open_fake(void);
/* Closes and checks that everything went back to the driver. */
void close_checked(odx_context *ctx);
/* The fake's axpy (entry odx_test_axpy), one variant of `image`, the first `nparams` of its four
 * parameters declared. */
odx_kernel *fake_kernel(odx_context *ctx, const char *image, int nparams);
/* An image the fake loads on its devices. */
const char *good_image(void);
/* Submits axpy on `device` (0: any) and waits; returns the task status, message in msg. */
int axpy(odx_context *ctx, odx_kernel *k, odx_buffer *x, odx_buffer *y, float a, int n, int device,
	 char *msg, size_t msglen);

/* ---- test_gpu_fake_memory.c ------------------------------------------------------------------ */

void fake_driver_host_register(void **state);
void fake_driver_host_register_two_devices(void **state);
void fake_driver_host_register_refused(void **state);
void fake_driver_host_register_shared(void **state);
void fake_driver_copy_sync_round_trip(void **state);
void fake_driver_copy_sync_kernel(void **state);
void fake_driver_copy_sync_partial(void **state);
void fake_driver_copy_sync_page_locked(void **state);
void fake_driver_copy_sync_failure(void **state);
void fake_driver_partition_fallback(void **state);

#endif /* ODX_TESTS_GPU_FAKE_DRIVER_H */
