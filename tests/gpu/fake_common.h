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
 */
#ifndef ODX_TESTS_GPU_FAKE_COMMON_H
#define ODX_TESTS_GPU_FAKE_COMMON_H

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

#endif /* ODX_TESTS_GPU_FAKE_COMMON_H */
