/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_gpu_fake_memory.c - the memory cases of test_gpu_fake_driver, on the CUDA or HIP backend
 * over its fake driver: registered user memory (ABI 1.3 host_register: page-locked once per
 * range, copied without a bounce, unlocked once; a refusal costs only the direct path), reads and
 * writes straight to and from a device's copy (ABI 1.3 copy_sync: one driver copy per call on the
 * application's thread, or one per piece when staged; odd offsets; failures named with the native
 * error), and tiles of a partitioned buffer moved by the core's one-copy-per-run fallback (no 2D
 * copy). Results are labelled "fake driver": nothing here touches a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "../unit/test_util.h"
#include "fake_driver.h"

/* ---- registered user memory (ABI 1.3 host_register) ------------------------------------------ */

/* The fake's counters at one moment, to compare with later. `pageable` counts only the lanes'
 * copies: copy_sync's (on this thread) may hand small pageable copies to the driver. */
typedef struct pin_stats {
	long register_calls, registered, unregister_calls, direct, pinned, pageable;
} pin_stats;

static pin_stats pin_now(void)
{
	return (pin_stats){fake_stat("register_calls"),
			   fake_stat("registered"),
			   fake_stat("unregister_calls"),
			   fake_stat("direct_copies"),
			   fake_stat("pinned_copies"),
			   fake_stat("pageable_copies") - fake_stat("caller_pageable")};
}

static const char *register_call(void)
{
	return is_cuda ? "cuMemHostRegister" : "hipHostRegister";
}

/* x and y registered (page-aligned, more than one staging block), axpy on each device in turn:
 * one driver registration per range however many devices, copies straight from and to the
 * user's memory, the result written back into it, one unregistration per range. */
static void host_register_on(int ndevices)
{
	const int n = 3 * (1 << 20) + 5;
	const size_t bytes = (size_t)n * 4, alloc = (bytes + 4095) / 4096 * 4096;
	float *xs = aligned_alloc(4096, alloc), *ys = aligned_alloc(4096, alloc);
	char count[8], msg[1024];
	pin_stats before, after;
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *x, *y;
	int i, d;

	assert_non_null(xs);
	assert_non_null(ys);
	for (i = 0; i < n; i++) {
		xs[i] = (float)(i % 1000);
		ys[i] = (float)(i % 7);
	}
	snprintf(count, sizeof(count), "%d", ndevices);
	fake_set("DEVICE_COUNT", count);
	ctx = open_fake();
	assert_int_equal(odx_device_count(ctx), ndevices);
	k = fake_kernel(ctx, good_image(), 4);
	before = pin_now();
	assert_ok(odx_buffer_register(ctx, xs, bytes, 0, &x));
	assert_ok(odx_buffer_register(ctx, ys, bytes, 0, &y));
	after = pin_now();
	assert_int_equal(after.register_calls - before.register_calls, 2);
	assert_int_equal(after.registered - before.registered, 2);
	assert_int_equal(fake_stat("register_flags"), 1); /* portable */
	for (d = 1; d <= ndevices; d++)
		assert_rc(axpy(ctx, k, x, y, 1.0f, n, d, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_destroy(x));
	assert_ok(odx_buffer_destroy(y));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	after = pin_now();
	for (i = 0; i < n; i++)
		if (ys[i] != (float)ndevices * xs[i] + (float)(i % 7))
			fail_msg("y[%d] = %g after write-back, expected %g", i, ys[i],
				 (float)ndevices * xs[i] + (float)(i % 7));
	/* x went to the devices and y came back with no bounce; nothing pageable reached the
	 * driver's async copies. */
	assert_true(after.direct - before.direct >= 2);
	assert_int_equal(after.pageable - before.pageable, 0);
	assert_int_equal(after.unregister_calls - before.unregister_calls, 2);
	assert_int_equal(after.registered, before.registered);
	assert_int_equal(fake_stat("registered"), 0);
	assert_false(logged("could not page-lock"));
	close_checked(ctx);
	free(xs);
	free(ys);
}

void fake_driver_host_register(void **state)
{
	(void)state;
	host_register_on(1);
}

void fake_driver_host_register_two_devices(void **state)
{
	(void)state;
	host_register_on(2);
}

/* The driver refuses to page-lock: the buffer works as before through the staging blocks, the
 * core warns, the backend names the native error, nothing is unregistered. A refusal the
 * driver calls "not supported" is ODX_ENOSYS: the backend notes it, the core stays quiet. */
static void host_register_refused(const char *code, const char *native)
{
	enum { N = 5000 };
	float *xs = malloc(N * 4), *ys = malloc(N * 4);
	pin_stats before, after;
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *x, *y;
	char msg[1024], want[128];

	assert_non_null(xs);
	assert_non_null(ys);
	for (int i = 0; i < N; i++) {
		xs[i] = (float)i;
		ys[i] = 1.0f;
	}
	reset_env(NULL);
	fake_set("REGISTER_ERROR", code);
	ctx = open_fake();
	k = fake_kernel(ctx, good_image(), 4);
	before = pin_now();
	assert_ok(odx_buffer_register(ctx, xs, N * 4, 0, &x));
	assert_ok(odx_buffer_register(ctx, ys, N * 4, 0, &y));
	assert_int_equal(pin_now().register_calls - before.register_calls, 2);
	snprintf(want, sizeof(want), "%s: %s", register_call(), native);
	assert_logged(want);
	if (strcmp(code, "801") == 0)
		assert_false(logged("could not page-lock"));
	else
		assert_logged("could not page-lock");
	assert_rc(axpy(ctx, k, x, y, 3.0f, N, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_destroy(x));
	assert_ok(odx_buffer_destroy(y));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	after = pin_now();
	for (int i = 0; i < N; i++)
		if (ys[i] != 3.0f * (float)i + 1.0f)
			fail_msg("y[%d] = %g after write-back, expected %g", i, ys[i],
				 3.0f * (float)i + 1.0f);
	assert_int_equal(after.direct - before.direct, 0);
	assert_int_equal(after.pageable - before.pageable, 0);
	assert_true(after.pinned - before.pinned >= 2);
	assert_int_equal(after.unregister_calls - before.unregister_calls, 0);
	close_checked(ctx);
	free(xs);
	free(ys);
}

void fake_driver_host_register_refused(void **state)
{
	(void)state;
	host_register_refused("2", is_cuda ? "CUDA_ERROR_OUT_OF_MEMORY (2)"
					   : "hipErrorOutOfMemory (2)");
	host_register_refused("801", is_cuda ? "CUDA_ERROR_NOT_SUPPORTED (801)"
					     : "hipErrorNotSupported (801)");
}

/* Registrations that meet memory the driver has locked already. Two buffers sharing a page:
 * the second is "already registered", accepted without an error, never unregistered by ODX and
 * copied through the staging blocks. Two contexts registering the same range: one driver
 * registration, undone when the second context lets go, copies direct in both. */
void fake_driver_host_register_shared(void **state)
{
	enum { A = 1500, B = 500, N = 2000 }; /* floats: a shares its second page with b */
	float *mem = aligned_alloc(4096, 4 * 4096), *ys = malloc(N * 4);
	pin_stats before, mid, after;
	odx_context *ctx, *ctx2;
	odx_kernel *k, *k2;
	odx_buffer *a, *b, *y, *a2, *y2;
	char msg[1024];

	(void)state;
	assert_non_null(mem);
	assert_non_null(ys);
	for (int i = 0; i < A + B; i++)
		mem[i] = (float)(i % 100);
	ctx = open_fake();
	k = fake_kernel(ctx, good_image(), 4);
	before = pin_now();
	assert_ok(odx_buffer_register(ctx, mem, A * 4, 0, &a));
	assert_ok(odx_buffer_register(ctx, mem + A, B * 4, 0, &b));
	mid = pin_now();
	assert_int_equal(mid.register_calls - before.register_calls, 2);
	assert_int_equal(mid.registered - before.registered, 1);
	assert_logged("page-locked already");
	assert_logged(is_cuda ? "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712)"
			      : "hipErrorHostMemoryAlreadyRegistered (712)");
	assert_false(logged("could not page-lock"));
	/* b is read through the staging blocks: no direct copy. */
	assert_ok(odx_buffer_create(ctx, B * 4, 0, &y));
	assert_rc(axpy(ctx, k, b, y, 1.0f, B, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, ys, B * 4, TEST_TIMEOUT_MS));
	for (int i = 0; i < B; i++)
		assert_true(ys[i] == (float)((A + i) % 100));
	assert_int_equal(pin_now().direct - mid.direct, 0);
	/* a is read straight from the user's memory. */
	assert_ok(odx_buffer_destroy(y));
	assert_ok(odx_buffer_create(ctx, A * 4, 0, &y));
	assert_rc(axpy(ctx, k, a, y, 2.0f, A, 0, msg, sizeof(msg)), 0);
	assert_true(pin_now().direct - mid.direct >= 1);
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(pin_now().unregister_calls - before.unregister_calls, 0);

	/* A second context on the same range as a. */
	ctx2 = open_fake();
	k2 = fake_kernel(ctx2, good_image(), 4);
	mid = pin_now();
	assert_ok(odx_buffer_register(ctx2, mem, A * 4, 0, &a2));
	assert_int_equal(pin_now().register_calls - mid.register_calls, 0);
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(y));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(pin_now().unregister_calls - before.unregister_calls, 0);
	assert_ok(odx_close(ctx));
	/* Still page-locked for ctx2, whose copies still go direct. */
	mid = pin_now();
	assert_ok(odx_buffer_create(ctx2, A * 4, 0, &y2));
	assert_rc(axpy(ctx2, k2, a2, y2, 1.0f, A, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y2, 0, ys, A * 4, TEST_TIMEOUT_MS));
	for (int i = 0; i < A; i++)
		assert_true(ys[i] == (float)(i % 100));
	assert_true(pin_now().direct - mid.direct >= 1);
	assert_ok(odx_buffer_destroy(a2));
	assert_ok(odx_buffer_destroy(y2));
	assert_ok(odx_wait_all(ctx2, TEST_TIMEOUT_MS));
	after = pin_now();
	assert_int_equal(after.unregister_calls - before.unregister_calls, 1);
	assert_int_equal(fake_stat("registered"), 0);
	assert_int_equal(after.pageable - before.pageable, 0);
	close_checked(ctx2);
	free(mem);
	free(ys);
}

/* ---- reads and writes straight to and from a device's copy (ABI 1.3 copy_sync) --------------- */

/* GPU_SYNC_PIECE of backends/gpu/gpu.h: a pageable copy up to this size is one driver copy, a
 * larger one is staged in pieces of this size, one driver copy each. */
#define SYNC_PIECE ((size_t)2 << 20)
#define STAGE_BLOCKS 4 /* GPU_STAGE_BLOCKS: staging blocks per copy lane */

/* The copies of the fake at one moment: copy_sync's (issued on this thread, which main marked),
 * those of them from or to pageable memory, and every copy, the lanes' included. */
typedef struct sync_stats {
	long calls, pageable, all;
} sync_stats;

static sync_stats sync_now(void)
{
	return (sync_stats){fake_stat("caller_copies"), fake_stat("caller_pageable"),
			    fake_stat("direct_copies") + fake_stat("pinned_copies") +
				    fake_stat("pageable_copies")};
}

/* Since `before`: copy_sync made `calls` driver copies, `pageable` of them straight from or to
 * pageable memory, and the lanes none (the bytes took no other way). */
static void expect_sync_copies(sync_stats before, long calls, long pageable, const char *what)
{
	sync_stats now = sync_now();

	if (now.calls - before.calls != calls || now.pageable - before.pageable != pageable ||
	    now.all - before.all != calls)
		fail_msg(
			"%s: %ld driver copies on the caller's thread (%ld pageable) and %ld on the "
			"lanes; expected %ld (%ld pageable) and none",
			what, now.calls - before.calls, now.pageable - before.pageable,
			(now.all - before.all) - (now.calls - before.calls), calls, pageable);
}

/* The driver copies of one copy_sync of n pageable bytes, and how many of them are pageable. */
static long sync_calls(size_t n)
{
	return n <= SYNC_PIECE ? 1 : (long)((n + SYNC_PIECE - 1) / SYNC_PIECE);
}

static long sync_pageable(size_t n)
{
	return n <= SYNC_PIECE ? 1 : 0;
}

static uint64_t node_used(odx_context *ctx, int memnode)
{
	odx_memnode_info info;

	assert_ok(odx_memnode_get_info(ctx, memnode, &info));
	return info.used_bytes;
}

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131u + seed) ^ (i >> 13));
}

/* A new buffer written whole lands on the device (one device, room below the watermark) and is
 * read back from there: copy_sync both ways, no lane copy, no host copy. Sizes: straight to
 * the driver, one piece exactly, staged in pieces (fewer than the slots, and more: the slots
 * are reused). */
void fake_driver_copy_sync_round_trip(void **state)
{
	static const size_t sizes[] = {1, 4099, SYNC_PIECE, (5u << 20) + 7, (19u << 20) + 5};
	odx_context *ctx = open_fake();

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		unsigned char *in = malloc(n), *out = malloc(n);
		uint64_t host0 = node_used(ctx, 0), dev0 = node_used(ctx, 1);
		odx_buffer *b;
		sync_stats before;
		char what[64];

		assert_non_null(in);
		assert_non_null(out);
		fill_pattern(in, n, (unsigned)i);
		memset(out, 0, n);
		assert_ok(odx_buffer_create(ctx, n, 0, &b));
		snprintf(what, sizeof(what), "write of %zu bytes", n);
		before = sync_now();
		assert_ok(odx_buffer_write(b, 0, in, n, TEST_TIMEOUT_MS));
		expect_sync_copies(before, sync_calls(n), sync_pageable(n), what);
		assert_true(node_used(ctx, 1) >= dev0 + n);
		assert_int_equal(node_used(ctx, 0), host0);
		snprintf(what, sizeof(what), "read of %zu bytes", n);
		before = sync_now();
		assert_ok(odx_buffer_read(b, 0, out, n, TEST_TIMEOUT_MS));
		expect_sync_copies(before, sync_calls(n), sync_pageable(n), what);
		assert_memory_equal(out, in, n);
		assert_int_equal(node_used(ctx, 0), host0);
		assert_ok(odx_buffer_destroy(b));
		/* The destruction is a task: its memory is given back when it ran, and the next
		 * round's baseline must not count it. */
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
		free(in);
		free(out);
	}
	close_checked(ctx);
}

/* Kernels see what copy_sync wrote and copy_sync reads what they wrote: x and y written, axpy,
 * y read, all without a lane copy. */
void fake_driver_copy_sync_kernel(void **state)
{
	enum {
		N = 100003
	};
	float *xs = malloc(N * 4), *ys = malloc(N * 4), *out = malloc(N * 4);
	odx_context *ctx = open_fake();
	odx_kernel *k = fake_kernel(ctx, good_image(), 4);
	odx_buffer *x, *y;
	sync_stats before;
	char msg[1024];

	(void)state;
	for (int i = 0; i < N; i++) {
		xs[i] = (float)(i % 1000);
		ys[i] = (float)(i % 3);
	}
	assert_ok(odx_buffer_create(ctx, N * 4, 0, &x));
	assert_ok(odx_buffer_create(ctx, N * 4, 0, &y));
	before = sync_now();
	assert_ok(odx_buffer_write(x, 0, xs, N * 4, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(y, 0, ys, N * 4, TEST_TIMEOUT_MS));
	assert_rc(axpy(ctx, k, x, y, 2.0f, N, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, N * 4, TEST_TIMEOUT_MS));
	expect_sync_copies(before, 3, 3, "write x, write y, axpy, read y");
	for (int i = 0; i < N; i++)
		if (out[i] != 2.0f * xs[i] + ys[i])
			fail_msg("y[%d] = %g, expected %g", i, out[i], 2.0f * xs[i] + ys[i]);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
	free(xs);
	free(ys);
	free(out);
}

/* Partial writes and reads at odd offsets of a buffer living on the device, small (straight) and
 * large (staged), checked against a model of the buffer. */
void fake_driver_copy_sync_partial(void **state)
{
	const size_t n = (7u << 20) + 11;
	static const struct {
		size_t off, len;
	} writes[] = {{3, 5},
		      {4093, 10},
		      {1, 1},
		      {12345, (5u << 20) + 3},
		      {SYNC_PIECE - 1, 2},
		      {999, SYNC_PIECE + 1}};
	static const struct {
		size_t off, len;
	} reads[] = {{1001, 333}, {7, 1}, {777, (4u << 20) + 1}, {SYNC_PIECE + 3, SYNC_PIECE}};
	unsigned char *model = malloc(n), *src = malloc(n), *out = malloc(n);
	odx_context *ctx = open_fake();
	odx_buffer *b;
	sync_stats before;
	char what[96];
	size_t i;

	(void)state;
	assert_non_null(model);
	assert_non_null(src);
	assert_non_null(out);
	fill_pattern(model, n, 7);
	assert_ok(odx_buffer_create(ctx, n, 0, &b));
	assert_ok(odx_buffer_write(b, 0, model, n, TEST_TIMEOUT_MS));
	for (i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
		size_t off = writes[i].off, len = writes[i].len;

		fill_pattern(src, len, 100u + (unsigned)i);
		snprintf(what, sizeof(what), "write of %zu bytes at %zu", len, off);
		before = sync_now();
		assert_ok(odx_buffer_write(b, off, src, len, TEST_TIMEOUT_MS));
		expect_sync_copies(before, sync_calls(len), sync_pageable(len), what);
		memcpy(model + off, src, len);
	}
	for (i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		size_t off = reads[i].off, len = reads[i].len;

		memset(out, 0, len);
		snprintf(what, sizeof(what), "read of %zu bytes at %zu", len, off);
		before = sync_now();
		assert_ok(odx_buffer_read(b, off, out, len, TEST_TIMEOUT_MS));
		expect_sync_copies(before, sync_calls(len), sync_pageable(len), what);
		if (memcmp(out, model + off, len) != 0)
			fail_msg("%s: the bytes differ from the model", what);
	}
	assert_ok(odx_buffer_read(b, 0, out, n, TEST_TIMEOUT_MS));
	assert_memory_equal(out, model, n);
	assert_ok(odx_buffer_destroy(b));
	close_checked(ctx);
	free(model);
	free(src);
	free(out);
}

/* Page-locked host memory goes to the driver in one copy with no bounce, however large. The only
 * page-locked memory the API lets a test hand over is a registered buffer's: the API leaves it to
 * ODX while the buffer exists, so this reads and writes it only while nothing uses that buffer,
 * and writes back the bytes it already holds. */
void fake_driver_copy_sync_page_locked(void **state)
{
	const size_t n = 3 * SYNC_PIECE + 5, alloc = (n + 4095) / 4096 * 4096;
	unsigned char *mem = aligned_alloc(4096, alloc), *copy = malloc(n);
	odx_context *ctx = open_fake();
	odx_buffer *reg, *y;
	sync_stats before;
	long direct;

	(void)state;
	assert_non_null(mem);
	assert_non_null(copy);
	fill_pattern(mem, n, 3);
	memcpy(copy, mem, n);
	assert_ok(odx_buffer_register(ctx, mem, n, 0, &reg));
	assert_int_equal(fake_stat("registered"), 1);
	assert_ok(odx_buffer_create(ctx, n, 0, &y));
	direct = fake_stat("direct_copies");
	before = sync_now();
	assert_ok(odx_buffer_write(y, 0, mem, n, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(y, 0, mem, n, TEST_TIMEOUT_MS));
	expect_sync_copies(before, 2, 0, "write and read of page-locked memory");
	assert_int_equal(fake_stat("direct_copies") - direct, 2);
	assert_memory_equal(mem, copy, n);
	assert_ok(odx_buffer_destroy(y));
	assert_ok(odx_buffer_destroy(reg));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(fake_stat("registered"), 0);
	close_checked(ctx);
	free(mem);
	free(copy);
}

/* A copy the driver refuses fails the read or write with the native error in odx_last_error,
 * whether it is the one copy of a small transfer or a piece of a staged one; the device carries
 * on. A fault (an illegal address) loses the device: that read fails naming it, and the next ones
 * say the device was lost. */
void fake_driver_copy_sync_failure(void **state)
{
	const size_t small = 4099, big = (5u << 20) + 7;
	unsigned char *small_bytes = malloc(small), *big_bytes = malloc(big), *out = malloc(big);
	const char *h2d = is_cuda ? "cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE (1)"
				  : "hipMemcpyHtoDAsync: hipErrorInvalidValue (1)";
	const char *d2h = is_cuda ? "cuMemcpyDtoHAsync: CUDA_ERROR_INVALID_VALUE (1)"
				  : "hipMemcpyDtoHAsync: hipErrorInvalidValue (1)";
	const char *fault = is_cuda ? "CUDA_ERROR_ILLEGAL_ADDRESS (700)"
				    : "hipErrorIllegalAddress (700)";
	odx_context *ctx = open_fake();
	odx_buffer *a, *b, *c, *d;
	char want[128];

	(void)state;
	assert_non_null(small_bytes);
	assert_non_null(big_bytes);
	assert_non_null(out);
	fill_pattern(small_bytes, small, 1);
	fill_pattern(big_bytes, big, 2);
	assert_ok(odx_buffer_create(ctx, small, 0, &a));
	assert_ok(odx_buffer_create(ctx, big, 0, &b));
	assert_ok(odx_buffer_create(ctx, small, 0, &c));
	assert_ok(odx_buffer_create(ctx, big, 0, &d));
	assert_ok(odx_buffer_write(a, 0, small_bytes, small, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(b, 0, big_bytes, big, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(c, 0, small_bytes, small, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(d, 0, big_bytes, big, TEST_TIMEOUT_MS));

	/* Reads: the one copy of a small one; the third piece of a staged one (the first three are
	 * queued before any is waited for). */
	fake_fail_copies(1, 0);
	assert_rc(odx_buffer_read(a, 0, out, small, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), d2h);
	assert_contains(odx_last_error(ctx), "blocking d2h copy of 4099 bytes (at byte 0)");
	fake_fail_copies(1, 2);
	assert_rc(odx_buffer_read(b, 0, out, big, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), d2h);
	snprintf(want, sizeof(want), "blocking d2h copy of %zu bytes (at byte %zu)", big,
		 2 * SYNC_PIECE);
	assert_contains(odx_last_error(ctx), want);

	/* Writes: the one copy of a small one at an odd offset; the second piece of a staged one.
	 * Each leaves its buffer's only copy partly written, and says so. */
	fake_fail_copies(1, 0);
	assert_rc(odx_buffer_write(c, 5, big_bytes, 10, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), h2d);
	assert_contains(odx_last_error(ctx), "the bytes written may be partly there");
	fake_fail_copies(1, 1);
	assert_rc(odx_buffer_write(d, 1, big_bytes, big - 2, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), h2d);
	snprintf(want, sizeof(want), "blocking h2d copy of %zu bytes (at byte %zu)", big - 2,
		 SYNC_PIECE);
	assert_contains(odx_last_error(ctx), want);

	/* Nothing was lost: the buffers only read from are intact, and staged copies still run
	 * (more of them than a lane has staging blocks: each went back to its lane). */
	fake_fail_copies(0, 0);
	assert_ok(odx_buffer_read(a, 0, out, small, TEST_TIMEOUT_MS));
	assert_memory_equal(out, small_bytes, small);
	for (int i = 0; i < 2 * STAGE_BLOCKS; i++) {
		assert_ok(odx_buffer_write(b, 0, big_bytes, big, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_read(b, 0, out, big, TEST_TIMEOUT_MS));
	}
	assert_memory_equal(out, big_bytes, big);
	assert_false(logged("is lost"));

	/* A fault: the device is lost, its first error named, later copies refused. */
	fake_fail_copies(700, 0);
	assert_rc(odx_buffer_read(a, 0, out, small, TEST_TIMEOUT_MS), ODX_EDEVLOST);
	assert_contains(odx_last_error(ctx), fault);
	assert_logged("is lost");
	fake_fail_copies(0, 0);
	assert_rc(odx_buffer_read(a, 0, out, small, TEST_TIMEOUT_MS), ODX_EDEVLOST);
	assert_contains(odx_last_error(ctx), "was lost after an earlier error");
	assert_contains(odx_last_error(ctx), fault);
	assert_rc(odx_buffer_write(b, 3, big_bytes, big - 3, TEST_TIMEOUT_MS), ODX_EDEVLOST);
	assert_contains(odx_last_error(ctx), "was lost after an earlier error");
	odx_buffer_destroy(a);
	odx_buffer_destroy(b);
	odx_buffer_destroy(c);
	odx_buffer_destroy(d);
	assert_ok(odx_close(ctx));
	free(small_bytes);
	free(big_bytes);
	free(out);
}

/* Async copies the fake has seen, whatever their host side. */
static long fake_copies(void)
{
	return fake_stat("direct_copies") + fake_stat("pinned_copies") +
	       fake_stat("pageable_copies");
}

/*
 * Tiles of a partitioned matrix on a device whose driver has no 2D copy (the fakes export no
 * cuMemcpy2D / hipMemcpy2D, so copy_2d answers ODX_ENOSYS): the core's fallback moves each tile
 * between its runs inside the parent and the packed device copy with one 1D copy per run, both
 * ways. axpy on every tile on the device, a read of a tile from its device copy, then the parent
 * gathered: every element as computed here, the padding between tiles untouched.
 */
void fake_driver_partition_fallback(void **state)
{
	enum { ROWS = 40, COLS = 30, LD = 45, TR = 16, TC = 16, MT = 3, NT = 2 };
	odx_partition p = {.kind = ODX_PART_TILES, .elem_size = 4, .rows = ROWS, .cols = COLS,
			   .ld = LD, .tile_rows = TR, .tile_cols = TC};
	static float mat[LD * COLS], want[LD * COLS], got[LD * COLS], xs[TR * TC], tile[TR * TC];
	odx_context *ctx = open_fake();
	odx_kernel *k = fake_kernel(ctx, good_image(), 4);
	odx_buffer *a, *parts[MT * NT], *x;
	long copies, runs = 0;
	char msg[1024];

	(void)state;
	for (int e = 0; e < LD * COLS; e++)
		mat[e] = want[e] = (float)(e % 53);
	for (int e = 0; e < TR * TC; e++)
		xs[e] = (float)(e % 7) - 3.0f;
	assert_ok(odx_buffer_create(ctx, sizeof(mat), 0, &a));
	assert_ok(odx_buffer_write(a, 0, mat, sizeof(mat), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_partition(a, &p, MT * NT, parts, TEST_TIMEOUT_MS));
	copies = fake_copies();
	for (int j = 0; j < NT; j++)
		for (int i = 0; i < MT; i++) {
			int h = ROWS - i * TR < TR ? ROWS - i * TR : TR;
			int w = COLS - j * TC < TC ? COLS - j * TC : TC;

			/* y (the tile, packed on the device: column after column) += 2 x */
			assert_rc(axpy(ctx, k, x, parts[i + j * MT], 2.0f, h * w, 1, msg,
				       sizeof(msg)), 0);
			for (int c = 0; c < w; c++)
				for (int r = 0; r < h; r++)
					want[(j * TC + c) * LD + i * TR + r] += 2.0f * xs[c * h + r];
			runs += w;
		}
	/* A tile read from its device copy: its packed bytes. */
	assert_ok(odx_buffer_read(parts[1], 0, tile, (size_t)TR * TC * 4, TEST_TIMEOUT_MS));
	for (int c = 0; c < TC; c++)
		for (int r = 0; r < TR; r++)
			if (tile[c * TR + r] != want[c * LD + TR + r])
				fail_msg("tile (1, 0) element (%d, %d): %g, expected %g", r, c,
					 (double)tile[c * TR + r], (double)want[c * LD + TR + r]);
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	/* In, and back out at the unpartition: one driver copy per column each way. */
	if (fake_copies() - copies < 2 * runs)
		fail_msg("%ld driver copies for %ld tile columns moved both ways: not the "
			 "row-by-row fallback", fake_copies() - copies, runs);
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int e = 0; e < LD * COLS; e++)
		if (got[e] != want[e])
			fail_msg("element %d (row %d, column %d): %g, expected %g", e, e % LD,
				 e / LD, (double)got[e], (double)want[e]);
	odx_buffer_destroy(x);
	odx_buffer_destroy(a);
	close_checked(ctx);
}
