/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shuffle.c - odx_shuffle on one rank (docs/distributed.md, "Shuffle"): a copy of part 0 of
 * src[0] into dst[0], as a task of the graph. Parts whose length a host task set, a src without
 * parts, an empty part, a large part; a consumer that sees dst's length (ODX_LEN) and the counts;
 * the ODX_STATS line; a dst too small (ODX_ENOSPC naming the bytes, its consumer canceled);
 * argument checks; a src written by a Vulkan or OpenCL device
 * (staged through host memory); a dst spilled to disk afterwards with its length. The several-rank
 * cases are tests/dist/test_dist_shuffle.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"

static odx_context *open_with(const char *const *extra)
{
	const char *kv[] = {"backends", "host", "host.devices", "1",	"host.bind", "false",
			    "stats",	"true", "log",		"warn", NULL};

	return test_open_logged(kv, extra);
}

static int64_t i64_arg(const odx_host_launch *l, int i)
{
	return *(const int64_t *)l->scalars[i];
}

static uint32_t value(uint64_t seed, uint64_t i)
{
	return (uint32_t)((seed * 2654435761u) ^ (i * 40503u + 7));
}

/* gen(W src, I64 rows, I64 seed, I64 part): rows values, then the length of `part`
 * (ODX_WHOLE_BUFFER: of the buffer). */
static int gen_fn(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int64_t rows = i64_arg(l, 1), seed = i64_arg(l, 2);

	for (int64_t i = 0; i < rows; i++)
		x[i] = value((uint64_t)seed, (uint64_t)i);
	l->set_length(l, 0, (int)i64_arg(l, 3), (size_t)rows * sizeof(uint32_t));
	return 0;
}

/* consume(R dst, R counts, I64 n, W out): out = {n, length as the task saw it, counts[0], sum}. */
static int consume_fn(const odx_host_launch *l)
{
	const uint32_t *x = l->buffers[0];
	const uint64_t *counts = l->buffers[1];
	uint64_t *out = l->buffers[2], sum = 0;
	int64_t n = i64_arg(l, 2);

	for (int64_t i = 0; i < n; i++)
		sum += x[i];
	out[0] = (uint64_t)n;
	out[1] = l->buffer_lengths[0];
	out[2] = counts[0];
	out[3] = sum;
	return 0;
}

typedef struct kernels {
	odx_kernel *gen, *consume;
} kernels;

static kernels make_kernels(odx_context *ctx)
{
	odx_param gp[] = {{ODX_ARG_BUFFER, ODX_W, "src"},
			  {ODX_ARG_I64, 0, "rows"},
			  {ODX_ARG_I64, 0, "seed"},
			  {ODX_ARG_I64, 0, "part"}};
	odx_param cp[] = {{ODX_ARG_BUFFER, ODX_R, "dst"},
			  {ODX_ARG_BUFFER, ODX_R, "counts"},
			  {ODX_ARG_I64, 0, "n"},
			  {ODX_ARG_BUFFER, ODX_W, "out"}};
	odx_kernel_variant gv = {.backend = ODX_BACKEND_HOST,
				 .format = ODX_FORMAT_HOST_FN,
				 .host_fn = gen_fn};
	odx_kernel_variant cv = {.backend = ODX_BACKEND_HOST,
				 .format = ODX_FORMAT_HOST_FN,
				 .host_fn = consume_fn};
	kernels k;

	assert_ok(odx_kernel_create(ctx, "gen", gp, 4, &gv, 1, &k.gen));
	assert_ok(odx_kernel_create(ctx, "consume", cp, 4, &cv, 1, &k.consume));
	return k;
}

/* src (capacity cap rows; with one part, or none) gets `rows` rows; the shuffle copies them into
 * dst (dcap bytes); a consumer reads them. Returns the shuffle event's status; checks the rest
 * when it succeeded. */
static int one_shuffle(odx_context *ctx, kernels *k, size_t cap, size_t rows, size_t dcap,
		       bool parts, uint64_t seed)
{
	odx_buffer *src, *dst, *counts, *out;
	odx_partition one = {.kind = ODX_PART_BLOCKS, .elem_size = sizeof(uint32_t)};
	odx_event *ev = NULL;
	uint64_t o[4], sum = 0, cnt = 0;
	size_t len = 0, nb = rows * sizeof(uint32_t);
	uint32_t *got = malloc(nb + 4);
	int rc;

	assert_ok(odx_buffer_create(ctx, cap * sizeof(uint32_t), 0, &src));
	assert_ok(odx_buffer_create(ctx, dcap, 0, &dst));
	assert_ok(odx_buffer_create(ctx, sizeof(uint64_t), 0, &counts));
	assert_ok(odx_buffer_create(ctx, sizeof(o), 0, &out));
	if (parts)
		assert_ok(odx_buffer_set_parts(src, &one, 1));
	odx_arg g[] = {ODX_BUF(src, ODX_W), ODX_I64((int64_t)rows), ODX_I64((int64_t)seed),
		       ODX_I64(parts ? 0 : ODX_WHOLE_BUFFER)};
	assert_ok(odx_submit(ctx, k->gen, g, 4, NULL, NULL));
	assert_ok(odx_shuffle(ctx, &src, &dst, &counts, &(odx_task_opts){.tag = "shuf"}, &ev));
	odx_arg c[] = {ODX_BUF(dst, ODX_R), ODX_BUF(counts, ODX_R), ODX_LEN(0, sizeof(uint32_t)),
		       ODX_BUF(out, ODX_W)};
	odx_event *cev = NULL;
	assert_ok(odx_submit(ctx, k->consume, c, 4, NULL, &cev));
	rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
	if (rc == 0) {
		assert_ok(odx_event_wait(cev, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_length(dst, &len, TEST_TIMEOUT_MS));
		assert_int_equal(len, nb);
		assert_ok(odx_buffer_read(dst, 0, got, nb, TEST_TIMEOUT_MS));
		for (size_t i = 0; i < rows; i++) {
			if (got[i] != value(seed, i))
				fail_msg("dst row %zu is %u, %u expected", i, got[i],
					 value(seed, i));
			sum += got[i];
		}
		assert_ok(odx_buffer_read(counts, 0, &cnt, sizeof(cnt), TEST_TIMEOUT_MS));
		assert_int_equal(cnt, nb);
		assert_ok(odx_buffer_length(counts, &len, TEST_TIMEOUT_MS));
		assert_int_equal(len, sizeof(uint64_t));
		assert_ok(odx_buffer_read(out, 0, o, sizeof(o), TEST_TIMEOUT_MS));
		assert_int_equal(o[0], rows);
		assert_int_equal(o[1], nb);
		assert_int_equal(o[2], nb);
		assert_int_equal(o[3], sum);
	} else {
		/* its consumer is canceled by the failure */
		assert_int_equal(odx_event_wait(cev, TEST_TIMEOUT_MS), ODX_ECANCELED);
	}
	if (rc == ODX_ENOSPC) {
		char need[96];

		snprintf(need, sizeof(need),
			 "holds %zu bytes, but its parts from the 1 ranks take "
			 "%zu bytes",
			 dcap, nb);
		if (!strstr(odx_event_message(ev), need))
			fail_msg("the message does not say '%s': %s", need, odx_event_message(ev));
	}
	odx_event_release(ev);
	odx_event_release(cev);
	odx_buffer_destroy(src);
	odx_buffer_destroy(dst);
	odx_buffer_destroy(counts);
	odx_buffer_destroy(out);
	free(got);
	return rc;
}

static void test_copies(void **state)
{
	odx_context *ctx = open_with(NULL);
	kernels k = make_kernels(ctx);

	(void)state;
	assert_ok(one_shuffle(ctx, &k, 1000, 777, 4000, true, 1));  /* a part, room to spare */
	assert_ok(one_shuffle(ctx, &k, 1000, 1000, 4000, true, 2)); /* dst exactly full */
	assert_ok(one_shuffle(ctx, &k, 1000, 0, 4000, true, 3));    /* an empty part */
	assert_ok(one_shuffle(ctx, &k, 1000, 500, 2000, false, 4)); /* no parts: the length */
	/* larger than what a fabric callback copies itself (several ranks: on the worker) */
	assert_ok(one_shuffle(ctx, &k, 1 << 20, (1 << 20) - 3, 4 << 20, true, 5));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
	/* ODX_STATS: five shuffles, the bytes copied locally */
	assert_int_equal(test_stat_sum("shuffles:", "on this rank"), 5);
	assert_int_equal(test_stat_sum("shuffles:", "bytes copied locally"),
			 (777 + 1000 + 0 + 500 + (1 << 20) - 3) * sizeof(uint32_t));
}

/* A dst too small: ODX_ENOSPC with both sizes, reported by odx_wait_all, its consumer canceled;
 * a later shuffle into a buffer of the same size that fits works. */
static void test_too_small(void **state)
{
	odx_context *ctx = open_with(NULL);
	kernels k = make_kernels(ctx);

	(void)state;
	assert_int_equal(one_shuffle(ctx, &k, 1000, 1000, 3996, true, 6), ODX_ENOSPC);
	assert_int_equal(odx_wait_all(ctx, TEST_TIMEOUT_MS), ODX_ENOSPC);
	assert_non_null(strstr(odx_last_error(ctx), "take 4000 bytes"));
	assert_ok(one_shuffle(ctx, &k, 1000, 999, 3996, true, 7));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
}

/* What odx_shuffle refuses at the call, with nothing submitted. */
static void test_refusals(void **state)
{
	odx_context *ctx = open_with(NULL);
	odx_buffer *a, *b, *c, *small, *parted;
	odx_partition two = {.kind = ODX_PART_BLOCKS, .elem_size = 4};

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &a));
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	assert_ok(odx_buffer_create(ctx, 64, 0, &c));
	assert_ok(odx_buffer_create(ctx, 4, 0, &small));
	assert_ok(odx_buffer_create(ctx, 64, 0, &parted));
	assert_ok(odx_buffer_set_parts(parted, &two, 2));
	assert_int_equal(odx_shuffle(NULL, &a, &b, &c, NULL, NULL), ODX_EINVAL);
	assert_int_equal(odx_shuffle(ctx, NULL, &b, &c, NULL, NULL), ODX_EINVAL);
	assert_int_equal(odx_shuffle(ctx, &a, NULL, &c, NULL, NULL), ODX_EINVAL);
	assert_int_equal(odx_shuffle(ctx, &a, &a, &c, NULL, NULL), ODX_EINVAL);
	assert_int_equal(odx_shuffle(ctx, &a, &b, &b, NULL, NULL), ODX_EINVAL);
	assert_int_equal(odx_shuffle(ctx, &a, &b, &small, NULL, NULL), ODX_EINVAL);
	assert_non_null(strstr(odx_last_error(ctx), "counts[0] holds 4 bytes"));
	/* two parts where one rank needs one */
	assert_int_equal(odx_shuffle(ctx, &parted, &b, &c, NULL, NULL), ODX_EINVAL);
	assert_non_null(strstr(odx_last_error(ctx), "src[0] has 2 parts"));
	assert_int_equal(odx_shuffle(ctx, &a, &parted, &c, NULL, NULL), ODX_EINVAL);
	odx_buffer_destroy(c);
	assert_int_equal(odx_shuffle(ctx, &a, &b, &c, NULL, NULL), ODX_EINVAL);
	assert_ok(odx_shuffle(ctx, &a, &b, NULL, NULL, NULL)); /* counts may be NULL */
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
}

/* src written by a kernel on a Vulkan or OpenCL device: the shuffle reads it from host memory
 * (staged there), and dst is right. Skipped where neither backend has a device. */
static bool device_src_run(const char *backend)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	odx_kernel *fill;
	odx_buffer *src, *dst;
	char key[64], backends[64];
	const size_t n = 100000;
	uint32_t *got = malloc(n * sizeof(uint32_t));
	size_t len = 0;
	int gpu = -1;

	snprintf(key, sizeof(key), "%s.allow_cpu", backend);
	snprintf(backends, sizeof(backends), "host,%s", backend);
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "backends", backends));
	assert_ok(odx_config_set(cfg, "host.devices", "1"));
	assert_ok(odx_config_set(cfg, "host.bind", "false"));
	assert_ok(odx_config_set(cfg, key, "true"));
	if (odx_open(&ctx, cfg) != 0) {
		print_message("%s: cannot open a context: %s\n", backend, odx_config_error(cfg));
		odx_config_destroy(cfg);
		free(got);
		return false;
	}
	odx_config_destroy(cfg);
	for (int d = 0; d < odx_device_count(ctx) && gpu < 0; d++) {
		odx_device_info info;

		assert_ok(odx_device_get_info(ctx, d, &info));
		if (info.kind != ODX_BACKEND_HOST)
			gpu = d;
	}
	if (gpu < 0) {
		print_message("%s: no device of that backend here: skipped\n", backend);
		assert_ok(odx_close(ctx));
		free(got);
		return false;
	}
	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	assert_ok(odx_buffer_create(ctx, n * sizeof(uint32_t), 0, &src));
	assert_ok(odx_buffer_create(ctx, n * sizeof(uint32_t), 0, &dst));
	odx_arg a[] = {ODX_BUF(src, ODX_W), ODX_I32(0x5eed), ODX_I32((int32_t)n)};
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE,
			   .on_device = gpu,
			   .grid = {(uint32_t)(n + 63) / 64, 1, 1},
			   .block = {64, 1, 1}};
	assert_ok(odx_submit(ctx, fill, a, 3, &o, NULL));
	assert_ok(odx_shuffle(ctx, &src, &dst, NULL, NULL, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_length(dst, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, n * sizeof(uint32_t));
	assert_ok(odx_buffer_read(dst, 0, got, n * sizeof(uint32_t), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < n; i++)
		if (got[i] != 0x5eed)
			fail_msg("%s: dst[%zu] = %#x", backend, i, got[i]);
	assert_ok(odx_close(ctx));
	free(got);
	return true;
}

static void test_device_src(void **state)
{
	bool ran = false;

	(void)state;
	ran |= device_src_run("vulkan");
	ran |= device_src_run("opencl");
	if (!ran)
		skip();
}

/* Host memory of 1 MiB and a disk tier: dst (384 KiB, 300 KiB valid) is spilled by the buffers
 * written after it, then read back with its length and bytes. */
static void test_spilled_dst(void **state)
{
	char root[64] = "/tmp/odx-test-shuffle-XXXXXX";
	const char *kv[] = {"tier.host.limit",
			    "1MiB",
			    "tier.disk.limit",
			    "64MiB",
			    "tier.disk.path",
			    root,
			    NULL};
	odx_context *ctx;
	kernels k;
	odx_buffer *src, *dst, *other[6];
	odx_partition one = {.kind = ODX_PART_BLOCKS, .elem_size = sizeof(uint32_t)};
	const size_t rows = 75 * 1024, cap = 96 * 1024;
	uint32_t *got = malloc(rows * sizeof(uint32_t));
	size_t len = 0;

	(void)state;
	assert_non_null(mkdtemp(root));
	ctx = open_with(kv);
	k = make_kernels(ctx);
	assert_ok(odx_buffer_create(ctx, cap * sizeof(uint32_t), 0, &src));
	assert_ok(odx_buffer_create(ctx, cap * sizeof(uint32_t), 0, &dst));
	assert_ok(odx_buffer_set_parts(src, &one, 1));
	odx_arg g[] = {ODX_BUF(src, ODX_W), ODX_I64((int64_t)rows), ODX_I64(9), ODX_I64(0)};
	assert_ok(odx_submit(ctx, k.gen, g, 4, NULL, NULL));
	assert_ok(odx_shuffle(ctx, &src, &dst, NULL, NULL, NULL));
	odx_buffer_destroy(src);
	for (int i = 0; i < 6; i++) {
		odx_arg o[] = {ODX_BUF(NULL, ODX_W), ODX_I64((int64_t)cap), ODX_I64(10 + i),
			       ODX_I64(ODX_WHOLE_BUFFER)};

		assert_ok(odx_buffer_create(ctx, cap * sizeof(uint32_t), 0, &other[i]));
		o[0] = ODX_BUF(other[i], ODX_W);
		assert_ok(odx_submit(ctx, k.gen, o, 4, NULL, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_length(dst, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, rows * sizeof(uint32_t));
	assert_ok(odx_buffer_read(dst, 0, got, rows * sizeof(uint32_t), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < rows; i++)
		if (got[i] != value(9, i))
			fail_msg("dst row %zu is %u after the spill, %u expected", i, got[i],
				 value(9, i));
	for (int i = 0; i < 6; i++)
		odx_buffer_destroy(other[i]);
	assert_ok(odx_close(ctx));
	print_message("spills %llu, reloads %llu\n", test_stat_sum("disk tier", "spills"),
		      test_stat_sum("disk tier", "reloads"));
	assert_true(test_stat_sum("disk tier", "spills") > 0);
	rmdir(root);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copies),	    cmocka_unit_test(test_too_small),
		cmocka_unit_test(test_refusals),    cmocka_unit_test(test_device_src),
		cmocka_unit_test(test_spilled_dst),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
