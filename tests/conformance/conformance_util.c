/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conformance_util.c - the helpers of the backend conformance suite (conformance.h): built-in
 * kernels looked up once, launches, buffers, and comparisons against host references that fail
 * the test with the device and the element.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "conformance.h"
#include "test_util.h"

odx_kernel *builtin(const char *name)
{
	for (int i = 0; i < conf.nnames; i++) {
		if (strcmp(conf.names[i], name) != 0)
			continue;
		if (!conf.kernels[i])
			assert_ok(odx_kernel_builtin(conf.ctx, name, &conf.kernels[i]));
		return conf.kernels[i];
	}
	fail_msg("no built-in kernel %s", name);
	return NULL;
}

/* Submits a built-in kernel on `device` (-1: anywhere) and returns its event. */
odx_event *launch(const char *name, const odx_arg *args, int nargs, int device, uint32_t gx,
		  uint32_t gy, uint32_t bx, uint32_t by)
{
	odx_task_opts opts = {
		.flags = ODX_SUBMIT_ON_DEVICE,
		.on_device = device,
		.tag = name,
		.grid = {gx, gy, 1},
		.block = {bx, by, 1},
	};
	odx_event *ev = NULL;
	int rc = odx_submit(conf.ctx, builtin(name), args, nargs, &opts, &ev);

	if (rc != 0)
		fail_msg("odx_submit(%s) on device %d: %s: %s", name, device, odx_err_name(rc),
			 odx_last_error(conf.ctx));
	return ev;
}

void wait_ok(odx_event *ev, const char *what)
{
	int rc = odx_event_wait(ev, TEST_TIMEOUT_MS);

	if (rc != 0)
		fail_msg("%s: %s: %s", what, odx_err_name(rc), odx_event_message(ev));
	odx_event_release(ev);
}

odx_buffer *new_buffer(size_t size, const void *init)
{
	odx_buffer *b = NULL;

	assert_ok(odx_buffer_create(conf.ctx, size, 0, &b));
	if (init)
		assert_ok(odx_buffer_write(b, 0, init, size, TEST_TIMEOUT_MS));
	return b;
}

void read_all(odx_buffer *b, void *dst, size_t size)
{
	int rc = odx_buffer_read(b, 0, dst, size, TEST_TIMEOUT_MS);

	if (rc != 0)
		fail_msg("odx_buffer_read: %s: %s", odx_err_name(rc), odx_last_error(conf.ctx));
}

void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)test_mix(seed, i);
}

float rand_unit(uint64_t *rng)
{
	return (float)(test_rand(rng) >> 40) / (float)(1 << 24); /* [0, 1) */
}

void *xmalloc(size_t n)
{
	void *p = malloc(n);

	assert_non_null(p);
	return p;
}

/* A task that moves a buffer's valid copy onto `device` and leaves it the only valid one:
 * fill_u32 over no element, declared RW so that the bytes come along and count as written. */
void touch(odx_buffer *b, int device)
{
	odx_arg args[] = {ODX_BUF(b, ODX_RW), ODX_I32(0), ODX_I32(0)};

	odx_event_release(launch("odx.fill_u32", args, 3, device, 1, 1, 1, 1));
}

void check_f32(const char *what, int device, const float *got, const double *want, int n,
	       const double *scale, double rel)
{
	for (int i = 0; i < n; i++) {
		double s = scale ? scale[i] : fabs(want[i]);
		double err = fabs((double)got[i] - want[i]);

		if (!(err <= rel * s + 1e-30))
			fail_msg("%s on device %d: element %d is %.9g, reference %.9g (error %.3g, "
				 "allowed %.3g)",
				 what, device, i, (double)got[i], want[i], err, rel * s);
	}
}

void check_u32(const char *what, int device, const uint32_t *got, const uint32_t *want, int n)
{
	for (int i = 0; i < n; i++)
		if (got[i] != want[i])
			fail_msg("%s on device %d: element %d is 0x%08x, reference 0x%08x", what,
				 device, i, got[i], want[i]);
}

uint32_t fmix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}
