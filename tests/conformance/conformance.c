/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conformance.c - the backend conformance suite: one program, the same for every backend.
 *
 * Which backend it tests comes from the environment only (ODX_BACKENDS=<name> and the backend's
 * own keys, e.g. ODX_VULKAN_ALLOW_CPU=true); the program adds no backend setting of its own. If
 * the backend cannot be opened (ODX_EUNAVAIL) it prints "SKIP: <backend> unavailable: <reason>"
 * and exits 77, which meson reports as skipped.
 *
 * What it checks, on every device of the context:
 *  - enumeration: devices exist and are of the backend's kind;
 *  - allocation of odd sizes, and byte-exact round trips with odd offsets and lengths through
 *    every direction the core can take (host -> device, device -> host, device -> device);
 *  - ordering on one lane (a chain of 100 dependent tasks), waits across lanes (tasks on two
 *    devices joined by a third);
 *  - every standard kernel against a host reference: integers bit-exact; floats within 1e-5
 *    relative (scale, axpy), 1e-3 relative (reduce), 1e-4 * sqrt(k) (gemm, relative to the sum
 *    of |a| |b| products);
 *  - the data kernels (partition count, scan, stable rank, scatter, private-count histogram,
 *    hash group-by with u32 and u64 keys over f32, f64 and i64 values, table overflow and
 *    regrowth, the combiner before a partition) against sequential references, exact
 *    (conformance_data.c);
 *  - 1000 tiny launches; two devices when the backend has them;
 *  - error paths: a kernel with only another backend's variant (ODX_ENOVARIANT), a wrong
 *    argument count (ODX_EINVAL), an unknown built-in name (ODX_ENOENT);
 *  - the dependency property test of tests/common on this backend, at a smaller scale.
 *
 * The helpers the files share (launches, buffers, comparisons) are conformance_util.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "conformance.h"
#include "deps_property_engine.h"
#include "dpe_images.h"
#include "odx/odx.h"
#include "test_util.h"

struct conformance_state conf = {.kind = -1};

/* ---- enumeration and memory -------------------------------------------------------------- */

static void test_enumeration(void **state)
{
	odx_backend_info bi;
	bool found = false;

	(void)state;
	assert_true(conf.ndev > 0);
	for (int d = 0; d < conf.ndev; d++) {
		odx_device_info di;

		assert_ok(odx_device_get_info(conf.ctx, d, &di));
		assert_int_equal(di.index, d);
		if (conf.kind >= 0 && (int)di.kind != conf.kind)
			fail_msg("device %d (%s) is a %s device, expected %s", d, di.name,
				 odx_backend_kind_name(di.kind), conf.backend);
		assert_true(di.name && *di.name);
		assert_true(di.memory_bytes > 0);
		assert_true(di.compute_lanes >= 1);
		assert_true(di.memnode >= 1 && di.memnode < odx_memnode_count(conf.ctx));
		print_message("device %d: %s, %s, %llu MiB\n", d, odx_backend_kind_name(di.kind),
			      di.name, (unsigned long long)(di.memory_bytes / MIB));
	}
	for (int b = 0; b < odx_backend_count(conf.ctx); b++) {
		assert_ok(odx_backend_get_info(conf.ctx, b, &bi));
		if (conf.kind < 0 || strcmp(bi.name, conf.backend) != 0)
			continue;
		found = true;
		assert_int_equal(bi.available, 1);
		assert_int_equal(bi.device_count, conf.ndev);
	}
	assert_true(conf.kind < 0 || found);
}

static void test_alloc_odd_sizes(void **state)
{
	static const size_t sizes[] = {1, 3, 4097, MIB + 7};

	(void)state;
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		uint8_t *want = xmalloc(n), *got = xmalloc(n);
		odx_buffer *b = new_buffer(n, NULL);

		/* a new buffer reads as zeros, also after a device touched it */
		memset(want, 0, n);
		touch(b, 0);
		read_all(b, got, n);
		assert_memory_equal(got, want, n);
		fill_random(want, n, n);
		assert_ok(odx_buffer_write(b, 0, want, n, TEST_TIMEOUT_MS));
		for (int d = 0; d < conf.ndev; d++) {
			/* a kernel over the whole words; the odd tail keeps its bytes since the
			 * task declares RW (a W task may leave what it does not write undefined) */
			uint32_t value = 0xa5000000u + (uint32_t)d;
			odx_arg args[] = {ODX_BUF(b, ODX_RW), ODX_I32((int32_t)value),
					  ODX_I32((int32_t)(n / 4))};

			touch(b, d);
			read_all(b, got, n);
			assert_memory_equal(got, want, n);
			wait_ok(launch("odx.fill_u32", args, 3, d, 8, 1, 64, 1), "fill_u32");
			for (size_t i = 0; i < n / 4; i++)
				memcpy(want + 4 * i, &value, 4);
			read_all(b, got, n);
			if (memcmp(got, want, n) != 0)
				fail_msg("buffer of %zu bytes on device %d: contents differ", n, d);
		}
		assert_ok(odx_buffer_destroy(b));
		free(want);
		free(got);
	}
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
}

/* Random host writes and reads at odd offsets, interleaved with tasks that move the valid copy
 * from device to device: every direction of transfer, byte-exact. */
static void test_round_trips(void **state)
{
	const size_t n = MIB + 13;
	uint8_t *model = xmalloc(n), *got = xmalloc(n), *src = xmalloc(n);
	uint64_t rng = 77;
	odx_buffer *b;

	(void)state;
	fill_random(model, n, 5);
	b = new_buffer(n, model);
	for (int step = 0; step < 60; step++) {
		size_t off = test_rand(&rng) % n;
		size_t len = 1 + test_rand(&rng) % (n - off);
		int d = step % conf.ndev;

		if (step % 7 == 3) {
			off = 0;
			len = n;
		}
		switch (test_rand_below(&rng, 3)) {
		case 0: /* host -> buffer at an odd place, then to a device */
			fill_random(src, len, (uint64_t)step + 1000);
			assert_ok(odx_buffer_write(b, off, src, len, TEST_TIMEOUT_MS));
			memcpy(model + off, src, len);
			touch(b, d);
			break;
		case 1: /* device -> host */
			touch(b, d);
			assert_ok(odx_buffer_read(b, off, got, len, TEST_TIMEOUT_MS));
			if (memcmp(got, model + off, len) != 0)
				fail_msg("step %d: read [%zu, +%zu) after device %d differs", step,
					 off, len, d);
			break;
		default: /* device -> device: two devices in a row, then host */
			touch(b, d);
			touch(b, (d + 1) % conf.ndev);
			assert_ok(odx_buffer_read(b, off, got, len, TEST_TIMEOUT_MS));
			if (memcmp(got, model + off, len) != 0)
				fail_msg("step %d: read [%zu, +%zu) after devices %d, %d differs",
					 step, off, len, d, (d + 1) % conf.ndev);
			break;
		}
	}
	read_all(b, got, n);
	assert_memory_equal(got, model, n);
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
	free(model);
	free(got);
	free(src);
}

/* ---- ordering ---------------------------------------------------------------------------- */

/* 100 dependent tasks on one device; the three operations do not commute, and each is exact
 * enough in IEEE arithmetic (x * 0.5, 1 * x + y, x * 3) to compare bit for bit. */
static void test_lane_ordering(void **state)
{
	enum {
		N = 4099,
		CHAIN = 100
	};
	float *ones = xmalloc(N * 4), *y = xmalloc(N * 4), *got = xmalloc(N * 4);

	(void)state;
	for (int i = 0; i < N; i++)
		ones[i] = 1.0f;
	for (int d = 0; d < conf.ndev; d++) {
		odx_buffer *bx = new_buffer(N * 4, ones);
		odx_buffer *by;

		for (int i = 0; i < N; i++)
			y[i] = (float)(i % 97);
		by = new_buffer(N * 4, y);
		for (int t = 0; t < CHAIN; t++) {
			if (t % 3 == 1) {
				odx_arg args[] = {ODX_BUF(bx, 0), ODX_BUF(by, 0), ODX_F32(1.0f),
						  ODX_I32(N)};

				odx_event_release(launch("odx.axpy_f32", args, 4, d, 5, 1, 64, 1));
				for (int i = 0; i < N; i++)
					y[i] = 1.0f * ones[i] + y[i];
			} else {
				float a = t % 3 == 0 ? 0.5f : 3.0f;
				odx_arg args[] = {ODX_BUF(by, 0), ODX_F32(a), ODX_I32(N)};

				odx_event_release(
					launch("odx.scale_f32", args, 3, d, 3, 1, 128, 1));
				for (int i = 0; i < N; i++)
					y[i] = a * y[i];
			}
		}
		read_all(by, got, N * 4);
		for (int i = 0; i < N; i++)
			if (f32_bits(got[i]) != f32_bits(y[i]))
				fail_msg("chain on device %d: element %d is %.9g, sequential order "
					 "gives %.9g",
					 d, i, (double)got[i], (double)y[i]);
		assert_ok(odx_buffer_destroy(bx));
		assert_ok(odx_buffer_destroy(by));
	}
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
	free(ones);
	free(y);
	free(got);
}

/* Two producers on two devices (or lanes), joined by a consumer on a third device (or the
 * first): the consumer must see both results. */
static void test_cross_lane_join(void **state)
{
	enum {
		N = 1 << 20
	};
	float *got = xmalloc(N * 4);

	(void)state;
	for (int round = 0; round < 4; round++) {
		int d0 = 0, d1 = conf.ndev > 1 ? 1 : 0, d2 = conf.ndev > 2 ? 2 : 0;
		odx_buffer *x = new_buffer(N * 4, NULL), *y = new_buffer(N * 4, NULL);
		odx_arg fx[] = {ODX_BUF(x, 0), ODX_I32((int32_t)f32_bits(2.0f + (float)round)),
				ODX_I32(N)};
		odx_arg fy[] = {ODX_BUF(y, 0), ODX_I32((int32_t)f32_bits(5.0f)), ODX_I32(N)};
		odx_arg ax[] = {ODX_BUF(x, 0), ODX_BUF(y, 0), ODX_F32(10.0f), ODX_I32(N)};
		odx_event *ea = launch("odx.fill_u32", fx, 3, d0, 64, 1, 256, 1);
		odx_event *eb = launch("odx.fill_u32", fy, 3, d1, 64, 1, 256, 1);
		odx_event *ec = launch("odx.axpy_f32", ax, 4, round % 2 ? d2 : -1, 64, 1, 256, 1);
		float want = 10.0f * (2.0f + (float)round) + 5.0f;

		wait_ok(ec, "join");
		/* the join completed only after both producers */
		assert_int_equal(odx_event_query(ea), 0);
		assert_int_equal(odx_event_query(eb), 0);
		odx_event_release(ea);
		odx_event_release(eb);
		read_all(y, got, N * 4);
		for (int i = 0; i < N; i++)
			if (got[i] != want)
				fail_msg("round %d: y[%d] = %g, want %g", round, i, (double)got[i],
					 (double)want);
		assert_ok(odx_buffer_destroy(x));
		assert_ok(odx_buffer_destroy(y));
	}
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
	free(got);
}

/* ---- the standard kernels against host references ----------------------------------------- */

static void kernel_fill_copy(int d, uint64_t *rng)
{
	enum {
		N = 10007,
		PAD = 3
	};
	uint32_t *init = xmalloc((N + PAD) * 4), *want = xmalloc((N + PAD) * 4);
	uint32_t *got = xmalloc((N + PAD) * 4);
	odx_buffer *a, *b;

	for (int i = 0; i < N + PAD; i++)
		init[i] = (uint32_t)test_rand(rng);
	a = new_buffer((N + PAD) * 4, init);
	b = new_buffer((N + PAD) * 4, NULL);
	{
		/* copy first: b = a over N words, b's padding stays zero (RW: kept) */
		odx_arg args[] = {ODX_BUF(a, 0), ODX_BUF(b, ODX_RW), ODX_I32(N)};

		wait_ok(launch("odx.copy_u32", args, 3, d, 7, 1, 64, 1), "copy_u32");
		memcpy(want, init, N * 4);
		memset(want + N, 0, PAD * 4);
		read_all(b, got, (N + PAD) * 4);
		check_u32("copy_u32", d, got, want, N + PAD);
	}
	{
		/* a grid too small for n: every work-item strides */
		odx_arg args[] = {ODX_BUF(a, ODX_RW), ODX_I32((int32_t)0xdeadbeefu), ODX_I32(N)};

		wait_ok(launch("odx.fill_u32", args, 3, d, 3, 1, 32, 1), "fill_u32");
		for (int i = 0; i < N; i++)
			want[i] = 0xdeadbeefu;
		memcpy(want + N, init + N, PAD * 4);
		read_all(a, got, (N + PAD) * 4);
		check_u32("fill_u32", d, got, want, N + PAD);
	}
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(b));
	free(init);
	free(want);
	free(got);
}

static void kernel_scale_axpy(int d, uint64_t *rng)
{
	enum {
		N = 10007
	};
	float *x = xmalloc(N * 4), *y = xmalloc(N * 4), *got = xmalloc(N * 4);
	double *want = xmalloc(N * sizeof(double));
	odx_buffer *bx, *by;

	for (int i = 0; i < N; i++) {
		x[i] = 2.0f * rand_unit(rng) - 1.0f;
		y[i] = 2.0f * rand_unit(rng) - 1.0f;
	}
	bx = new_buffer(N * 4, x);
	by = new_buffer(N * 4, y);
	{
		odx_arg args[] = {ODX_BUF(bx, 0), ODX_F32(1.7f), ODX_I32(N)};

		wait_ok(launch("odx.scale_f32", args, 3, d, 40, 1, 256, 1), "scale_f32");
		for (int i = 0; i < N; i++)
			want[i] = (double)1.7f * x[i];
		read_all(bx, got, N * 4);
		check_f32("scale_f32", d, got, want, N, NULL, 1e-5);
	}
	{
		/* y = -0.3 * (1.7 x) + y */
		odx_arg args[] = {ODX_BUF(bx, 0), ODX_BUF(by, 0), ODX_F32(-0.3f), ODX_I32(N)};
		double *scale = xmalloc(N * sizeof(double));

		wait_ok(launch("odx.axpy_f32", args, 4, d, 13, 1, 100, 1), "axpy_f32");
		for (int i = 0; i < N; i++) {
			double ax = (double)-0.3f * (float)(1.7f * x[i]);

			want[i] = ax + y[i];
			/* relative to the operands: the sum may cancel */
			scale[i] = fabs(ax) + fabs((double)y[i]);
		}
		read_all(by, got, N * 4);
		check_f32("axpy_f32", d, got, want, N, scale, 1e-5);
		free(scale);
	}
	assert_ok(odx_buffer_destroy(bx));
	assert_ok(odx_buffer_destroy(by));
	free(x);
	free(y);
	free(got);
	free(want);
}

static void kernel_reduce(int d, uint64_t *rng)
{
	static const struct {
		int n;
		uint32_t grid, block;
	} cases[] = {{100003, 64, 256}, {1000, 7, 100}, {1, 1, 1}, {5000, 300, 32}};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int n = cases[c].n;
		uint32_t grid = cases[c].grid;
		float *x = xmalloc((size_t)n * 4), *partial = xmalloc(grid * 4);
		double want = 0, sum = 0;
		odx_buffer *bx, *bp;

		for (int i = 0; i < n; i++) {
			x[i] = rand_unit(rng);
			want += x[i];
		}
		bx = new_buffer((size_t)n * 4, x);
		bp = new_buffer(grid * 4, NULL);
		odx_arg args[] = {ODX_BUF(bx, 0), ODX_BUF(bp, 0), ODX_I32(n)};

		wait_ok(launch("odx.reduce_sum_f32", args, 3, d, grid, 1, cases[c].block, 1),
			"reduce_sum_f32");
		read_all(bp, partial, grid * 4);
		for (uint32_t i = 0; i < grid; i++)
			sum += partial[i];
		if (!(fabs(sum - want) <= 1e-3 * fabs(want)))
			fail_msg("reduce_sum_f32 on device %d (n %d, grid %u, block %u): %.9g, "
				 "reference %.9g",
				 d, n, grid, cases[c].block, sum, want);
		assert_ok(odx_buffer_destroy(bx));
		assert_ok(odx_buffer_destroy(bp));
		free(x);
		free(partial);
	}
}

static void kernel_gemm(int d, uint64_t *rng)
{
	static const int dims[][3] = {{67, 45, 83}, {16, 16, 16}, {1, 33, 5}, {128, 96, 200}};

	for (size_t c = 0; c < sizeof(dims) / sizeof(dims[0]); c++) {
		int m = dims[c][0], n = dims[c][1], k = dims[c][2];
		float *a = xmalloc((size_t)m * k * 4), *b = xmalloc((size_t)k * n * 4);
		float *got = xmalloc((size_t)m * n * 4);
		double *want = xmalloc((size_t)m * n * sizeof(double));
		double *scale = xmalloc((size_t)m * n * sizeof(double));
		odx_buffer *ba, *bb, *bc;

		for (int i = 0; i < m * k; i++)
			a[i] = 2.0f * rand_unit(rng) - 1.0f;
		for (int i = 0; i < k * n; i++)
			b[i] = 2.0f * rand_unit(rng) - 1.0f;
		for (int r = 0; r < m; r++) {
			for (int col = 0; col < n; col++) {
				double s = 0, abs_s = 0;

				for (int kk = 0; kk < k; kk++) {
					s += (double)a[r * k + kk] * b[kk * n + col];
					abs_s += fabs((double)a[r * k + kk] * b[kk * n + col]);
				}
				want[r * n + col] = s;
				scale[r * n + col] = abs_s * sqrt((double)k);
			}
		}
		ba = new_buffer((size_t)m * k * 4, a);
		bb = new_buffer((size_t)k * n * 4, b);
		bc = new_buffer((size_t)m * n * 4, NULL);
		odx_arg args[] = {ODX_BUF(ba, 0), ODX_BUF(bb, 0), ODX_BUF(bc, 0),
				  ODX_I32(m),	  ODX_I32(n),	  ODX_I32(k)};

		wait_ok(launch("odx.gemm_f32", args, 6, d, (uint32_t)(n + 15) / 16,
			       (uint32_t)(m + 15) / 16, 16, 16),
			"gemm_f32");
		read_all(bc, got, (size_t)m * n * 4);
		check_f32("gemm_f32", d, got, want, m * n, scale, 1e-4);
		assert_ok(odx_buffer_destroy(ba));
		assert_ok(odx_buffer_destroy(bb));
		assert_ok(odx_buffer_destroy(bc));
		free(a);
		free(b);
		free(got);
		free(want);
		free(scale);
	}
}

/* hash_partition -> histogram on the device (no host step between), groupby_sum. */
static void kernel_partition(int d, uint64_t *rng)
{
	enum {
		N = 10007,
		P = 13,
		K = 37
	};
	uint32_t *keys = xmalloc(N * 4), *buckets = xmalloc(N * 4), *got = xmalloc(N * 4);
	uint32_t counts0[P + 2], counts[P + 2], sums0[K], sums[K];
	int32_t *values = xmalloc(N * 4);
	odx_buffer *bk, *bb, *bc, *bv, *bs;

	for (int i = 0; i < N; i++) {
		keys[i] = (uint32_t)test_rand(rng);
		values[i] = (int32_t)(uint32_t)test_rand(rng); /* whole range: sums wrap */
	}
	for (int i = 0; i < P + 2; i++)
		counts0[i] = counts[i] = (uint32_t)i * 1000;
	bk = new_buffer(N * 4, keys);
	bb = new_buffer(N * 4, NULL);
	bc = new_buffer(sizeof(counts0), counts0);
	{
		odx_arg hp[] = {ODX_BUF(bk, 0), ODX_BUF(bb, 0), ODX_I32(N), ODX_I32(P)};
		/* bins P, P+1 get nothing: histogram over P + 2 bins ignores none, but only
		 * P of them are hit */
		odx_arg hi[] = {ODX_BUF(bb, 0), ODX_BUF(bc, 0), ODX_I32(N), ODX_I32(P + 2)};

		odx_event_release(launch("odx.hash_partition_u32", hp, 4, d, 16, 1, 64, 1));
		wait_ok(launch("odx.histogram_u32", hi, 4, d, 16, 1, 64, 1), "histogram_u32");
		for (int i = 0; i < N; i++) {
			buckets[i] = fmix32(keys[i]) % P;
			counts[buckets[i]]++;
		}
		read_all(bb, got, N * 4);
		check_u32("hash_partition_u32", d, got, buckets, N);
		read_all(bc, got, sizeof(counts));
		check_u32("histogram_u32", d, got, counts, P + 2);
	}
	{
		/* values >= nbins are ignored */
		odx_arg hi[] = {ODX_BUF(bk, 0), ODX_BUF(bc, 0), ODX_I32(N), ODX_I32(P + 2)};

		for (int i = 0; i < N; i++)
			keys[i] %= P + 4;
		assert_ok(odx_buffer_write(bk, 0, keys, N * 4, TEST_TIMEOUT_MS));
		wait_ok(launch("odx.histogram_u32", hi, 4, d, 5, 1, 128, 1), "histogram_u32");
		for (int i = 0; i < N; i++)
			if (keys[i] < P + 2)
				counts[keys[i]]++;
		read_all(bc, got, sizeof(counts));
		check_u32("histogram_u32 (out of range ignored)", d, got, counts, P + 2);
	}
	{
		for (int i = 0; i < N; i++)
			keys[i] = (uint32_t)test_rand(rng) % (K + 2); /* K, K+1 ignored */
		for (int i = 0; i < K; i++)
			sums0[i] = sums[i] = (uint32_t)test_rand(rng);
		assert_ok(odx_buffer_write(bk, 0, keys, N * 4, TEST_TIMEOUT_MS));
		bv = new_buffer(N * 4, values);
		bs = new_buffer(sizeof(sums0), sums0);
		odx_arg gb[] = {ODX_BUF(bk, 0), ODX_BUF(bv, 0), ODX_BUF(bs, 0), ODX_I32(N),
				ODX_I32(K)};

		wait_ok(launch("odx.groupby_sum_i32", gb, 5, d, 9, 1, 96, 1), "groupby_sum_i32");
		for (int i = 0; i < N; i++)
			if (keys[i] < K)
				sums[keys[i]] += (uint32_t)values[i];
		read_all(bs, got, sizeof(sums));
		check_u32("groupby_sum_i32", d, got, sums, K);
		assert_ok(odx_buffer_destroy(bv));
		assert_ok(odx_buffer_destroy(bs));
	}
	assert_ok(odx_buffer_destroy(bk));
	assert_ok(odx_buffer_destroy(bb));
	assert_ok(odx_buffer_destroy(bc));
	free(keys);
	free(buckets);
	free(got);
	free(values);
}

static void test_standard_kernels(void **state)
{
	(void)state;
	for (int d = 0; d < conf.ndev; d++) {
		uint64_t rng = 1234 + (uint64_t)d;

		kernel_fill_copy(d, &rng);
		kernel_scale_axpy(d, &rng);
		kernel_reduce(d, &rng);
		kernel_gemm(d, &rng);
		kernel_partition(d, &rng);
	}
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
}

/* ---- many launches, two devices --------------------------------------------------------- */

static void test_tiny_launches(void **state)
{
	enum {
		LAUNCHES = 1000,
		NBUF = 4,
		N = 3
	};
	odx_buffer *ones, *y[NBUF];
	float init[N] = {1, 1, 1}, got[N];

	(void)state;
	ones = new_buffer(sizeof(init), init);
	for (int b = 0; b < NBUF; b++)
		y[b] = new_buffer(sizeof(init), NULL);
	for (int i = 0; i < LAUNCHES; i++) {
		odx_arg args[] = {ODX_BUF(ones, 0), ODX_BUF(y[i % NBUF], 0), ODX_F32(1.0f),
				  ODX_I32(N)};

		/* every fifth placed by hand, the others by the policy */
		odx_event_release(
			launch("odx.axpy_f32", args, 4, i % 5 ? -1 : i / 5 % conf.ndev, 1, 1, 4, 1));
	}
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
	for (int b = 0; b < NBUF; b++) {
		read_all(y[b], got, sizeof(got));
		for (int i = 0; i < N; i++)
			if (got[i] != (float)(LAUNCHES / NBUF))
				fail_msg("buffer %d element %d: %g after %d additions of 1", b, i,
					 (double)got[i], LAUNCHES / NBUF);
		assert_ok(odx_buffer_destroy(y[b]));
	}
	assert_ok(odx_buffer_destroy(ones));
}

/* Data produced on one device and consumed on another, both ways. */
static void test_two_devices(void **state)
{
	enum {
		N = 65537
	};
	uint32_t *src, *got;

	(void)state;
	if (conf.ndev < 2) {
		print_message("one device: nothing to do\n");
		skip();
	}
	src = xmalloc(N * 4);
	got = xmalloc(N * 4);
	for (int i = 0; i < N; i++)
		src[i] = (uint32_t)test_mix(9, (uint64_t)i);
	for (int d = 0; d < conf.ndev; d++) {
		int e = (d + 1) % conf.ndev;
		odx_buffer *a = new_buffer(N * 4, src), *b = new_buffer(N * 4, NULL);
		odx_buffer *c = new_buffer(N * 4, NULL);
		odx_arg ab[] = {ODX_BUF(a, 0), ODX_BUF(b, 0), ODX_I32(N)};
		odx_arg bc[] = {ODX_BUF(b, 0), ODX_BUF(c, 0), ODX_I32(N)};

		odx_event_release(launch("odx.copy_u32", ab, 3, d, 64, 1, 256, 1));
		wait_ok(launch("odx.copy_u32", bc, 3, e, 64, 1, 256, 1), "copy on second device");
		read_all(c, got, N * 4);
		check_u32("copy via two devices", e, got, src, N);
		assert_ok(odx_buffer_destroy(a));
		assert_ok(odx_buffer_destroy(b));
		assert_ok(odx_buffer_destroy(c));
	}
	free(src);
	free(got);
}

/* ---- error paths ------------------------------------------------------------------------ */

static int never_called(const odx_host_launch *l)
{
	snprintf(l->error, l->error_size, "a host variant ran on a non-host device");
	return 1;
}

static void test_error_paths(void **state)
{
	static const char cl_src[] = "__kernel void nothing(__global uint *p) { }";
	const odx_param param = {ODX_ARG_BUFFER, ODX_RW, "p"};
	odx_kernel_variant other;
	odx_kernel *k = NULL, *dummy = (odx_kernel *)&other;
	odx_buffer *b = new_buffer(16, NULL);
	odx_arg one[] = {ODX_BUF(b, 0)};
	odx_arg two[] = {ODX_BUF(b, 0), ODX_I32(1)};

	(void)state;
	/* a kernel with only another backend's variant: host C unless this is the host backend,
	 * then OpenCL C */
	if (conf.kind == ODX_BACKEND_HOST)
		other = (odx_kernel_variant){.backend = ODX_BACKEND_OPENCL,
					     .format = ODX_FORMAT_OPENCL_C,
					     .code = cl_src,
					     .code_size = sizeof(cl_src) - 1,
					     .entry = "nothing"};
	else
		other = (odx_kernel_variant){.backend = ODX_BACKEND_HOST,
					     .format = ODX_FORMAT_HOST_FN,
					     .host_fn = never_called};
	if (conf.kind >= 0) {
		assert_ok(odx_kernel_create(conf.ctx, "other_backend_only", &param, 1, &other, 1, &k));
		assert_rc(odx_submit(conf.ctx, k, one, 1, NULL, NULL), ODX_ENOVARIANT);
		assert_ok(odx_kernel_destroy(k));
	}

	/* a wrong argument count is refused before anything runs */
	assert_rc(odx_submit(conf.ctx, builtin("odx.fill_u32"), two, 2, NULL, NULL), ODX_EINVAL);
	assert_rc(odx_submit(conf.ctx, builtin("odx.axpy_f32"), one, 1, NULL, NULL), ODX_EINVAL);
	/* unknown built-in names */
	assert_rc(odx_kernel_builtin(conf.ctx, "odx.no_such_kernel", &dummy), ODX_ENOENT);
	assert_ptr_equal(dummy, (odx_kernel *)&other);
	/* the list names every kernel, each registers */
	for (int i = 0; i < conf.nnames; i++)
		assert_non_null(builtin(conf.names[i]));
	assert_null(conf.names[conf.nnames]);
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
}

/* ---- the dependency property on this backend --------------------------------------------- */

static void test_deps_property(void **state)
{
	static dpe_variants dv;
	char name[96];
	dpe_options opt = {
		.name = name,
		.seed = 101,
		.graphs = test_scaled(40, 5),
		.variants = &dv,
	};

	(void)state;
	snprintf(name, sizeof(name), "conformance %s, %d device(s)", conf.backend, conf.ndev);
	dpe_device_variants(&dv);
	dpe_run(conf.ctx, &opt);
}

/* ---- main -------------------------------------------------------------------------------- */

static int expected_kind(const char *name)
{
	for (int k = 0; k < ODX_BACKEND_KIND_COUNT; k++)
		if (strcmp(name, odx_backend_kind_name((odx_backend_kind)k)) == 0)
			return k;
	return -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_enumeration),	cmocka_unit_test(test_alloc_odd_sizes),
		cmocka_unit_test(test_round_trips),	cmocka_unit_test(test_lane_ordering),
		cmocka_unit_test(test_cross_lane_join), cmocka_unit_test(test_standard_kernels),
		cmocka_unit_test(test_data_kernels),
		cmocka_unit_test(test_tiny_launches),	cmocka_unit_test(test_two_devices),
		cmocka_unit_test(test_error_paths),	cmocka_unit_test(test_deps_property),
	};
	const char *env = getenv("ODX_BACKENDS");
	odx_config *cfg = NULL;
	int rc;

	conf.backend = env && *env ? env : "default";
	conf.kind = expected_kind(conf.backend);
	conf.nnames = odx_kernel_builtin_list(&conf.names);
	if (conf.nnames > NBUILTIN) {
		fprintf(stderr, "conformance: %d built-in kernels, room for %d\n", conf.nnames,
			NBUILTIN);
		return 1;
	}
	/* the configuration comes from the environment; nothing backend-specific is added */
	if (odx_config_create(&cfg) != 0)
		return 1;
	rc = odx_open(&conf.ctx, cfg);
	if (rc == ODX_EUNAVAIL) {
		printf("SKIP: %s unavailable: %s\n", conf.backend, odx_config_error(cfg));
		odx_config_destroy(cfg);
		return 77;
	}
	if (rc != 0) {
		fprintf(stderr, "conformance: odx_open (backends %s): %s: %s\n", conf.backend,
			odx_err_name(rc), odx_config_error(cfg));
		odx_config_destroy(cfg);
		return 1;
	}
	odx_config_destroy(cfg);
	conf.ndev = odx_device_count(conf.ctx);
	if (conf.ndev > MAX_DEVICES)
		conf.ndev = MAX_DEVICES;
	printf("conformance: backend %s, %d device(s)\n", conf.backend, conf.ndev);
	rc = cmocka_run_group_tests_name(conf.backend, tests, NULL, NULL);
	if (odx_close(conf.ctx) != 0 && rc == 0)
		rc = 1;
	return rc;
}
