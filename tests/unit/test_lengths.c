/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lengths.c - run-time lengths (docs/sizes.md): a host task sets a buffer's length and its
 * successors see it (odx_host_launch.buffer_lengths, ODX_LEN, odx_buffer_length) in program
 * order; a length above the capacity fails the task with a message; length rules from a counts
 * buffer on host memory; parts with lengths (odx_buffer_set_parts): empty parts, one part holding
 * everything, rules for every part, refusals; only valid bytes move between memory nodes (exact
 * byte counters: a copy of the whole capacity fails them); buffers with lengths spilled to the
 * disk tier and reloaded. With TEST_LENGTHS_DEVICE=vulkan or opencl, the length rules run on
 * that device (odx.fill_u32 writing its own counts, odx.copy_u32 sized by ODX_LEN).
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"

/* One or two host devices with memory of their own (copies between them are real) or sharing
 * host RAM, plus extra pairs. */
static odx_context *open_host_mem(int devices, const char *memnode, const char *const *extra)
{
	char nd[8];
	const char *kv[] = {"backends",	 "host",  "host.devices", nd,
			    "host.bind", "false", "host.memnode", memnode,
			    "stats",	 "true",  "log",	  "warn",
			    NULL};

	snprintf(nd, sizeof(nd), "%d", devices);
	return test_open_logged(kv, extra);
}

static odx_context *open_host(int devices, const char *const *extra)
{
	return open_host_mem(devices, "private", extra);
}

static int64_t i64_arg(const odx_host_launch *l, int i)
{
	return *(const int64_t *)l->scalars[i];
}

/* ---- kernels ---------------------------------------------------------------------------------- */

/* (buf RW, I64 bytes, I64 part, I64 seed): writes byte i = seed + i over [0, bytes) of the part
 * (part -1: the buffer), then sets that length. RW: it keeps the other parts' bytes. The part's place is the caller's: parts here are
 * equal blocks of buffer_sizes[0] / nparts, nparts given as the high 32 bits of `part`. */
static int produce_fn(const odx_host_launch *l)
{
	unsigned char *x = l->buffers[0];
	int64_t bytes = i64_arg(l, 1), p = i64_arg(l, 2), seed = i64_arg(l, 3);
	int part = (int)(int32_t)(p & 0xffffffff), nparts = (int)(p >> 32);
	size_t off = part >= 0 ? (size_t)part * (l->buffer_sizes[0] / (size_t)nparts) : 0;

	for (int64_t i = 0; i < bytes && off + (size_t)i < l->buffer_sizes[0]; i++)
		x[off + (size_t)i] = (unsigned char)(seed + i);
	l->set_length(l, 0, part, (size_t)bytes);
	return 0;
}

static odx_kernel *produce_kernel(odx_context *ctx)
{
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "buf"},
				      {ODX_ARG_I64, 0, "bytes"},
				      {ODX_ARG_I64, 0, "part"},
				      {ODX_ARG_I64, 0, "seed"}};

	return test_host_kernel(ctx, "produce", p, 4, produce_fn);
}

static void produce(odx_context *ctx, odx_kernel *k, odx_buffer *b, int64_t bytes, int part,
		    int nparts, int64_t seed, int device, odx_event **ev)
{
	odx_arg a[] = {ODX_BUF(b, 0), ODX_I64(bytes),
		       ODX_I64((int64_t)((uint64_t)(uint32_t)nparts << 32 | (uint32_t)part)),
		       ODX_I64(seed)};
	odx_task_opts o = {.flags = device >= 0 ? ODX_SUBMIT_ON_DEVICE : 0, .on_device = device};

	assert_ok(odx_submit(ctx, k, a, 4, &o, ev));
}

/* (buf W, I64 seed): every part p of 4 at once, byte j of it seed + p + j over its length
 * {0, 300 + seed, 5, all of it}[p]: one version, never a half-set one. */
static int parts_fn(const odx_host_launch *l)
{
	unsigned char *x = l->buffers[0];
	int64_t seed = i64_arg(l, 1);
	size_t pcap = l->buffer_sizes[0] / 4;
	size_t len[4] = {0, 300 + (size_t)seed, 5, pcap};

	for (int p = 0; p < 4; p++) {
		for (size_t j = 0; j < len[p]; j++)
			x[(size_t)p * pcap + j] = (unsigned char)(seed + p + (int64_t)j);
		l->set_length(l, 0, p, len[p]);
	}
	return 0;
}

/* (buf R, I64 n, out W): out = {buffer_lengths[0], n, sum of bytes [0, buffer_lengths[0])}. */
static int observe_fn(const odx_host_launch *l)
{
	const unsigned char *x = l->buffers[0];
	int64_t *out = l->buffers[1];
	int64_t sum = 0;

	for (size_t i = 0; i < l->buffer_lengths[0]; i++)
		sum += x[i];
	out[0] = (int64_t)l->buffer_lengths[0];
	out[1] = i64_arg(l, 1);
	out[2] = sum;
	return 0;
}

static odx_kernel *observe_kernel(odx_context *ctx)
{
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_R, "buf"},
				      {ODX_ARG_I64, 0, "n"},
				      {ODX_ARG_BUFFER, ODX_W, "out"}};

	return test_host_kernel(ctx, "observe", p, 3, observe_fn);
}

/* observe(b) on `device` (-1: any), its out read back: {length, ODX_LEN(b, 4), byte sum}. */
static void observe(odx_context *ctx, odx_kernel *k, odx_buffer *b, int device, int64_t got[3])
{
	odx_buffer *out;
	odx_task_opts o = {.flags = device >= 0 ? ODX_SUBMIT_ON_DEVICE : 0, .on_device = device};

	assert_ok(odx_buffer_create(ctx, 3 * sizeof(int64_t), 0, &out));
	{
		odx_arg a[] = {ODX_BUF(b, 0), ODX_LEN(0, 4), ODX_BUF(out, 0)};

		assert_ok(odx_submit(ctx, k, a, 3, &o, NULL));
	}
	assert_ok(odx_buffer_read(out, 0, got, 3 * sizeof(int64_t), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_destroy(out));
}

static int64_t seed_sum(int64_t seed, int64_t bytes)
{
	int64_t s = 0;

	for (int64_t i = 0; i < bytes; i++)
		s += (unsigned char)(seed + i);
	return s;
}

/* (data W, counts W, I64 nparts, I64 unit): counts[i] = (i * 3 + 1) % 5 for i < nparts, whose
 * rules then make lengths of it (in `unit` bytes); data filled with 0x5a. */
static int counts_fn(const odx_host_launch *l)
{
	unsigned char *x = l->buffers[0];
	uint32_t *c = l->buffers[1];
	int64_t n = i64_arg(l, 2);

	memset(x, 0x5a, l->buffer_sizes[0]);
	for (int64_t i = 0; i < n; i++)
		c[i] = (uint32_t)((i * 3 + 1) % 5);
	return 0;
}

static odx_kernel *counts_kernel(odx_context *ctx)
{
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_W, "data"},
				      {ODX_ARG_BUFFER, ODX_W, "counts"},
				      {ODX_ARG_I64, 0, "n"},
				      {ODX_ARG_I64, 0, "unit"}};

	return test_host_kernel(ctx, "counts", p, 4, counts_fn);
}

/* ---- a host task sets a length, successors see it ------------------------------------------- */

static void test_set_length_seen_in_order(void **state)
{
	odx_context *ctx = open_host(1, NULL);
	odx_kernel *prod = produce_kernel(ctx), *obs = observe_kernel(ctx);
	odx_buffer *b;
	int64_t got[3];
	size_t len = 0;

	(void)state;
	assert_ok(odx_buffer_create(ctx, 4096, 0, &b));
	/* A new buffer's length is its capacity. */
	assert_ok(odx_buffer_length(b, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, 4096);

	/* Two writers, each followed by a reader: every reader sees its own writer's length,
	 * never the later one's (program order). */
	produce(ctx, prod, b, 40, -1, 0, 3, -1, NULL);
	observe(ctx, obs, b, -1, got);
	assert_int_equal(got[0], 40);
	assert_int_equal(got[1], 10);
	assert_int_equal(got[2], seed_sum(3, 40));
	assert_ok(odx_buffer_length(b, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, 40);

	produce(ctx, prod, b, 1001, -1, 0, 7, -1, NULL);
	observe(ctx, obs, b, -1, got);
	produce(ctx, prod, b, 0, -1, 0, 7, -1, NULL);
	{
		int64_t after[3];

		observe(ctx, obs, b, -1, after);
		assert_int_equal(after[0], 0);
		assert_int_equal(after[1], 0);
	}
	assert_int_equal(got[0], 1001);
	assert_int_equal(got[1], 250); /* 1001 / 4, rounded down */
	assert_int_equal(got[2], seed_sum(7, 1001));

	/* A host write extends the length to the end of what it wrote. */
	{
		unsigned char bytes[16] = {0};

		assert_ok(odx_buffer_write(b, 100, bytes, sizeof(bytes), TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_length(b, &len, TEST_TIMEOUT_MS));
		assert_int_equal(len, 116);
		assert_ok(odx_buffer_write(b, 0, bytes, 8, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_length(b, &len, TEST_TIMEOUT_MS));
		assert_int_equal(len, 116);
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
}

static void test_length_above_capacity_fails(void **state)
{
	odx_context *ctx = open_host(1, NULL);
	odx_kernel *prod = produce_kernel(ctx), *obs = observe_kernel(ctx);
	odx_buffer *b, *out;
	odx_event *ev = NULL, *ev2 = NULL;
	size_t len = 0;

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	assert_ok(odx_buffer_create(ctx, 24, 0, &out));
	produce(ctx, prod, b, 65, -1, 0, 1, -1, &ev);
	{
		odx_arg a[] = {ODX_BUF(b, 0), ODX_LEN(0, 4), ODX_BUF(out, 0)};

		assert_ok(odx_submit(ctx, obs, a, 3, NULL, &ev2));
	}
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_contains(odx_event_message(ev), "length 65 bytes of argument 0");
	assert_contains(odx_event_message(ev), "above its capacity of 64 bytes");
	/* Its reader does not run on what it left. */
	assert_rc(odx_event_wait(ev2, TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_rc(odx_buffer_length(b, &len, TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_contains(odx_last_error(ctx), "above its capacity");
	odx_event_release(ev);
	odx_event_release(ev2);
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	assert_ok(odx_close(ctx));
}

/* ---- length rules --------------------------------------------------------------------------- */

static void test_rules_on_host(void **state)
{
	odx_context *ctx = open_host(1, NULL);
	odx_kernel *k = counts_kernel(ctx), *obs = observe_kernel(ctx);
	odx_buffer *data, *counts;
	odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	size_t len = 0, lens[4];
	int64_t got[3];

	(void)state;
	assert_ok(odx_buffer_create(ctx, 1024, 0, &data));
	assert_ok(odx_buffer_create(ctx, 64, 0, &counts));
	{
		/* counts[2] = 2: data's length becomes 2 x 100 bytes */
		odx_length_rule r = {.arg = 0,
				     .from_arg = 1,
				     .index = 2,
				     .unit = 100,
				     .part = ODX_WHOLE_BUFFER};
		odx_task_opts o = {.flags = ODX_SUBMIT_LENGTHS, .lengths = &r, .nlengths = 1};
		odx_arg a[] = {ODX_BUF(data, 0), ODX_BUF(counts, 0), ODX_I64(4), ODX_I64(1)};

		assert_ok(odx_submit(ctx, k, a, 4, &o, NULL));
	}
	observe(ctx, obs, data, -1, got);
	assert_int_equal(got[0], 200);
	assert_int_equal(got[1], 50);
	assert_int_equal(got[2], 200 * 0x5a);
	assert_ok(odx_buffer_length(data, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, 200);

	/* Every part from counts[1 + i]: {4, 2, 0, 3} x 64 bytes. */
	assert_ok(odx_buffer_set_parts(data, &blocks, 4));
	{
		odx_length_rule r = {.arg = 0,
				     .from_arg = 1,
				     .index = 1,
				     .unit = 64,
				     .part = ODX_ALL_PARTS};
		odx_task_opts o = {.flags = ODX_SUBMIT_LENGTHS, .lengths = &r, .nlengths = 1};
		odx_arg a[] = {ODX_BUF(data, 0), ODX_BUF(counts, 0), ODX_I64(5), ODX_I64(1)};

		assert_ok(odx_submit(ctx, k, a, 4, &o, NULL));
	}
	assert_ok(odx_buffer_part_lengths(data, lens, 4, TEST_TIMEOUT_MS));
	assert_int_equal(lens[0], 256);
	assert_int_equal(lens[1], 128);
	assert_int_equal(lens[2], 0);
	assert_int_equal(lens[3], 192);
	assert_ok(odx_buffer_length(data, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, 576);

	/* A count above a part's capacity fails the task and says which. */
	{
		odx_length_rule r = {.arg = 0, .from_arg = 1, .index = 0, .unit = 300, .part = 1};
		odx_task_opts o = {.flags = ODX_SUBMIT_LENGTHS, .lengths = &r, .nlengths = 1};
		odx_arg a[] = {ODX_BUF(data, 0), ODX_BUF(counts, 0), ODX_I64(5), ODX_I64(1)};
		odx_event *ev;

		/* counts[0] = 1: 300 bytes into a part of 256 */
		assert_ok(odx_submit(ctx, k, a, 4, &o, &ev));
		assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
		assert_contains(odx_event_message(ev), "length rule 0: length 300 bytes of part 1");
		assert_contains(odx_event_message(ev), "capacity of 256 bytes");
		odx_event_release(ev);
	}
	odx_wait_all(ctx, TEST_TIMEOUT_MS);

	/* Refused at submission: rules that cannot apply. */
	{
		odx_length_rule bad[] = {
			{.arg = 2, .from_arg = 1, .part = ODX_WHOLE_BUFFER}, /* not a buffer */
			{.arg = 0, .from_arg = 1, .index = 16, .part = 0},   /* counts too short */
			{.arg = 0, .from_arg = 1, .part = ODX_WHOLE_BUFFER}, /* it has parts */
			{.arg = 0, .from_arg = 1, .part = 4},		     /* no part 4 */
		};
		odx_arg a[] = {ODX_BUF(data, 0), ODX_BUF(counts, 0), ODX_I64(5), ODX_I64(1)};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			odx_task_opts o = {.flags = ODX_SUBMIT_LENGTHS,
					   .lengths = &bad[i],
					   .nlengths = 1};

			assert_rc(odx_submit(ctx, k, a, 4, &o, NULL), ODX_EINVAL);
		}
		/* Without the flag the fields are not read. */
		odx_task_opts o = {.lengths = bad, .nlengths = 4};

		assert_ok(odx_submit(ctx, k, a, 4, &o, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
}

/* ---- parts with lengths ---------------------------------------------------------------------- */

static void test_parts(void **state)
{
	odx_context *ctx = open_host(1, NULL);
	odx_kernel *prod = produce_kernel(ctx), *obs = observe_kernel(ctx);
	odx_buffer *b, *parts[2];
	odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	size_t lens[4], len;
	int64_t got[3];

	(void)state;
	assert_ok(odx_buffer_create(ctx, 4096, 0, &b));
	/* 1024 elements make 1024 parts of one at most, not 1025 */
	assert_rc(odx_buffer_set_parts(b, &blocks, 1025), ODX_EINVAL);
	assert_ok(odx_buffer_set_parts(b, &blocks, 4));
	assert_ok(odx_buffer_part_lengths(b, lens, 4, TEST_TIMEOUT_MS));
	for (int i = 0; i < 4; i++)
		assert_int_equal(lens[i], 1024); /* initially its capacity */
	assert_rc(odx_buffer_part_lengths(b, lens, 3, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_rc(odx_buffer_partition(b, &blocks, 2, parts, TEST_TIMEOUT_MS), ODX_EBUSY);

	/* Empty parts and one part holding everything. */
	produce(ctx, prod, b, 0, 0, 4, 1, -1, NULL);
	produce(ctx, prod, b, 1024, 1, 4, 2, -1, NULL);
	produce(ctx, prod, b, 0, 2, 4, 3, -1, NULL);
	produce(ctx, prod, b, 0, 3, 4, 4, -1, NULL);
	assert_ok(odx_buffer_part_lengths(b, lens, 4, TEST_TIMEOUT_MS));
	assert_int_equal(lens[0], 0);
	assert_int_equal(lens[1], 1024);
	assert_int_equal(lens[2], 0);
	assert_int_equal(lens[3], 0);
	assert_ok(odx_buffer_length(b, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, 1024);
	observe(ctx, obs, b, -1, got);
	assert_int_equal(got[0], 1024); /* the sum of the part lengths */
	assert_int_equal(got[1], 256);

	/* A whole-buffer length on a buffer with parts fails the task, and so does a part it does
	 * not have (each on a buffer of its own: a reader-writer after a failed writer would only
	 * be canceled). */
	for (int c = 0; c < 2; c++) {
		odx_buffer *f;
		odx_event *ev;

		assert_ok(odx_buffer_create(ctx, 4096, 0, &f));
		assert_ok(odx_buffer_set_parts(f, &blocks, 4));
		produce(ctx, prod, f, 8, c == 0 ? -1 : 5, 4, 1, -1, &ev);
		assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
		assert_contains(odx_event_message(ev),
				c == 0 ? "has 4 parts: set their lengths" : "has no part 5");
		odx_event_release(ev);
		assert_ok(odx_buffer_destroy(f));
	}
	odx_wait_all(ctx, TEST_TIMEOUT_MS);

	/* A new layout: lengths back to capacities; none: the length is the capacity. */
	{
		size_t sizes[] = {100, 200, 3796};
		odx_partition exp = {.kind = ODX_PART_BLOCKS, .sizes = sizes};

		produce(ctx, prod, b, 10, 0, 4, 1, -1, NULL);
		assert_ok(odx_buffer_set_parts(b, &exp, 3));
		assert_ok(odx_buffer_part_lengths(b, lens, 3, TEST_TIMEOUT_MS));
		assert_int_equal(lens[0], 100);
		assert_int_equal(lens[2], 3796);
		assert_ok(odx_buffer_set_parts(b, NULL, 0));
		assert_ok(odx_buffer_length(b, &len, TEST_TIMEOUT_MS));
		assert_int_equal(len, 4096);
		assert_rc(odx_buffer_part_lengths(b, lens, 3, TEST_TIMEOUT_MS), ODX_EINVAL);
	}
	/* A partitioned buffer takes no layout. */
	assert_ok(odx_buffer_partition(b, &blocks, 2, parts, TEST_TIMEOUT_MS));
	assert_rc(odx_buffer_set_parts(b, &blocks, 4), ODX_EBUSY);
	assert_rc(odx_buffer_set_parts(parts[0], &blocks, 2), ODX_ENOSYS);
	assert_ok(odx_buffer_unpartition(b, TEST_TIMEOUT_MS));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
}

/* ---- only valid bytes move ------------------------------------------------------------------ */

/* Bytes copied from device a's memory node to device b's, from the statistics printed at close
 * (exact counts). */
static unsigned long long link_bytes(int from_node, int to_node)
{
	char what[64];

	snprintf(what, sizeof(what), "copied memory node %d -> %d:", from_node, to_node);
	return test_stat_sum(what, " bytes)");
}

static void test_only_valid_bytes_move(void **state)
{
	const size_t cap = 1 << 20, pcap = cap / 4;
	odx_context *ctx = open_host(2, NULL);
	odx_kernel *prod = produce_kernel(ctx), *obs = observe_kernel(ctx);
	odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	odx_device_info d0, d1;
	odx_buffer *plain, *withparts;
	int64_t got[3];

	(void)state;
	assert_ok(odx_device_get_info(ctx, 0, &d0));
	assert_ok(odx_device_get_info(ctx, 1, &d1));
	assert_ok(odx_buffer_create(ctx, cap, 0, &plain));
	assert_ok(odx_buffer_create(ctx, cap, 0, &withparts));
	assert_ok(odx_buffer_set_parts(withparts, &blocks, 4));

	/* Written on device 0, read on device 1: 4096 of 1 MiB cross. */
	produce(ctx, prod, plain, 4096, -1, 0, 9, 0, NULL);
	observe(ctx, obs, plain, 1, got);
	assert_int_equal(got[0], 4096);
	assert_int_equal(got[2], seed_sum(9, 4096));

	/* Parts: {100, 0, all of it, 7} bytes valid, each its own part's prefix. */
	produce(ctx, prod, withparts, 100, 0, 4, 1, 0, NULL);
	produce(ctx, prod, withparts, 0, 1, 4, 2, 0, NULL);
	produce(ctx, prod, withparts, (int64_t)pcap, 2, 4, 3, 0, NULL);
	produce(ctx, prod, withparts, 7, 3, 4, 4, 0, NULL);
	{
		/* Read on device 1: its valid prefixes arrive at their places. */
		unsigned char *host = malloc(cap);
		size_t lens[4];

		observe(ctx, obs, withparts, 1, got);
		assert_int_equal(got[0], 100 + pcap + 7);
		assert_ok(odx_buffer_part_lengths(withparts, lens, 4, TEST_TIMEOUT_MS));
		assert_int_equal(lens[2], pcap);
		assert_ok(odx_buffer_read(withparts, 0, host, cap, TEST_TIMEOUT_MS));
		for (size_t i = 0; i < 100; i++)
			assert_int_equal(host[i], (unsigned char)(1 + i));
		for (size_t i = 0; i < pcap; i++)
			assert_int_equal(host[2 * pcap + i], (unsigned char)(3 + i));
		for (size_t i = 0; i < 7; i++)
			assert_int_equal(host[3 * pcap + i], (unsigned char)(4 + i));
		free(host);
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
	/* Exactly the valid bytes crossed between the devices: a whole copy would be 2 MiB. */
	print_message("device %d -> %d: %llu bytes\n", d0.memnode, d1.memnode,
		      link_bytes(d0.memnode, d1.memnode));
	assert_int_equal(link_bytes(d0.memnode, d1.memnode), 4096 + 100 + pcap + 7);
}

/* ---- spilled and reloaded --------------------------------------------------------------------- */

static char spill_root[256];

static void test_spilled_with_lengths(void **state)
{
	enum {
		N = 12
	};
	const size_t cap = 256 << 10, pcap = cap / 4;
	odx_context *ctx;
	odx_kernel *prod, *parts;
	odx_buffer *b[N];
	odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	unsigned char *host = malloc(cap);
	unsigned long long spilled, spills, reloaded, reloads, valid_max = 0;

	(void)state;
	snprintf(spill_root, sizeof(spill_root), "/tmp/odx-test-lengths-XXXXXX");
	assert_non_null(mkdtemp(spill_root));
	{
		const char *kv[] = {
			"tier.host.limit", "1MiB", "tier.disk.limit", "64MiB", "tier.disk.path",
			spill_root,	   NULL};

		/* Sharing host RAM: its copies there are the buffers' only ones, so they spill. */
		ctx = open_host_mem(1, "shared", kv);
	}
	prod = produce_kernel(ctx);
	{
		static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_W, "buf"},
					      {ODX_ARG_I64, 0, "seed"}};

		parts = test_host_kernel(ctx, "parts", p, 2, parts_fn);
	}
	/* 3 MiB of capacity in 1 MiB of host RAM; even buffers plain, odd ones with parts. */
	for (int i = 0; i < N; i++) {
		assert_ok(odx_buffer_create(ctx, cap, 0, &b[i]));
		if (i % 2) {
			odx_arg a[] = {ODX_BUF(b[i], 0), ODX_I64(i)};

			assert_ok(odx_buffer_set_parts(b[i], &blocks, 4));
			assert_ok(odx_submit(ctx, parts, a, 2, NULL, NULL));
			if (305 + (unsigned long long)i + pcap > valid_max)
				valid_max = 305 + (unsigned long long)i + pcap;
		} else {
			produce(ctx, prod, b[i], 1000 + 13 * i, -1, 0, i, -1, NULL);
			if (1000ull + 13ull * (unsigned)i > valid_max)
				valid_max = 1000ull + 13ull * (unsigned)i;
		}
	}
	/* Every buffer read back once all were made (the first ones went to disk meanwhile and
	 * are reloaded): its valid bytes intact. */
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++) {
		assert_ok(odx_buffer_read(b[i], 0, host, cap, TEST_TIMEOUT_MS));
		if (i % 2) {
			for (size_t j = 0; j < 300 + (size_t)i; j++)
				assert_int_equal(host[pcap + j], (unsigned char)(i + 1 + (int)j));
			for (size_t j = 0; j < 5; j++)
				assert_int_equal(host[2 * pcap + j],
						 (unsigned char)(i + 2 + (int)j));
			for (size_t j = 0; j < pcap; j++)
				assert_int_equal(host[3 * pcap + j],
						 (unsigned char)(i + 3 + (int)j));
			{
				size_t lens[4];

				assert_ok(odx_buffer_part_lengths(b[i], lens, 4, TEST_TIMEOUT_MS));
				assert_int_equal(lens[1], 300 + (size_t)i);
				assert_int_equal(lens[3], pcap);
			}
		} else {
			for (size_t j = 0; j < 1000 + 13 * (size_t)i; j++)
				assert_int_equal(host[j], (unsigned char)(i + (int)j));
		}
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
	spilled = test_stat_sum("disk tier", "bytes spilled");
	spills = test_stat_sum("disk tier", "spills");
	reloaded = test_stat_sum("disk tier", "bytes reloaded");
	reloads = test_stat_sum("disk tier", "reloads");
	print_message("%llu spills, %llu bytes; %llu reloads, %llu bytes\n", spills, spilled,
		      reloads, reloaded);
	assert_true(spills > 0 && reloads > 0);
	/* Each spill and reload moved at most its buffer's valid bytes: a whole buffer is 256 KiB,
	 * more than any buffer's valid bytes. */
	assert_true(spilled <= spills * valid_max);
	assert_true(reloaded <= reloads * valid_max);
	rmdir(spill_root);
	free(host);
}

/* ---- length rules on a Vulkan or OpenCL device ---------------------------------------------- */

static void test_rules_on_device(void **state)
{
	const char *kind = getenv("TEST_LENGTHS_DEVICE");
	odx_context *ctx;
	odx_kernel *fill, *copy;
	odx_buffer *buf, *out, *parted;
	odx_device_info info;
	int dev = -1;
	uint32_t got[1024];
	size_t len = 0, lens[4];

	(void)state;
	if (!kind || !*kind) {
		skip();
		return;
	}
	ctx = test_open_ctx((const char *const[]){"log", "warn", NULL});
	for (int d = 0; d < odx_device_count(ctx); d++) {
		assert_ok(odx_device_get_info(ctx, d, &info));
		if (!strcmp(info.kind_name, kind))
			dev = d;
	}
	if (dev < 0) {
		print_message("no %s device here\n", kind);
		assert_ok(odx_close(ctx));
		skip();
		return;
	}
	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	assert_ok(odx_kernel_builtin(ctx, "odx.copy_u32", &copy));
	assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &buf));
	assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &out));
	{
		/* fill writes 100 into every word; word 3 is also the count: 100 x 4 bytes */
		odx_length_rule r = {.arg = 0,
				     .from_arg = 0,
				     .index = 3,
				     .unit = 4,
				     .part = ODX_WHOLE_BUFFER};
		odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE | ODX_SUBMIT_LENGTHS,
				   .on_device = dev,
				   .lengths = &r,
				   .nlengths = 1,
				   .grid = {16},
				   .block = {64}};
		odx_arg a[] = {ODX_BUF(buf, 0), ODX_I32(100), ODX_I32(1024)};

		assert_ok(odx_submit(ctx, fill, a, 3, &o, NULL));
	}
	{
		/* The copy on the device takes n from the length. */
		odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE,
				   .on_device = dev,
				   .grid = {16},
				   .block = {64}};
		odx_arg a[] = {ODX_BUF(buf, 0), ODX_BUF(out, 0), ODX_LEN(0, 4)};

		assert_ok(odx_submit(ctx, copy, a, 3, &o, NULL));
	}
	assert_ok(odx_buffer_length(buf, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, 400);
	assert_ok(odx_buffer_read(out, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int i = 0; i < 1024; i++)
		if (got[i] != (i < 100 ? 100u : 0u))
			fail_msg("out[%d] = %u: the copy was not sized by the length", i, got[i]);

	/* Every part's length from the device's own output: 4 parts of 1 KiB, 16 x 4 bytes each. */
	assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &parted));
	{
		odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
		odx_length_rule r = {.arg = 0,
				     .from_arg = 0,
				     .index = 0,
				     .unit = 4,
				     .part = ODX_ALL_PARTS};
		odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE | ODX_SUBMIT_LENGTHS,
				   .on_device = dev,
				   .lengths = &r,
				   .nlengths = 1,
				   .grid = {16},
				   .block = {64}};
		odx_arg a[] = {ODX_BUF(parted, 0), ODX_I32(16), ODX_I32(1024)};

		assert_ok(odx_buffer_set_parts(parted, &blocks, 4));
		assert_ok(odx_submit(ctx, fill, a, 3, &o, NULL));
	}
	assert_ok(odx_buffer_part_lengths(parted, lens, 4, TEST_TIMEOUT_MS));
	for (int i = 0; i < 4; i++)
		assert_int_equal(lens[i], 64);
	/* A count above the capacity: the task fails with the rule's message. */
	{
		odx_length_rule r = {.arg = 0,
				     .from_arg = 0,
				     .index = 0,
				     .unit = 4,
				     .part = ODX_WHOLE_BUFFER};
		odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE | ODX_SUBMIT_LENGTHS,
				   .on_device = dev,
				   .lengths = &r,
				   .nlengths = 1,
				   .grid = {16},
				   .block = {64}};
		odx_arg a[] = {ODX_BUF(buf, 0), ODX_I32(5000), ODX_I32(1024)};
		odx_event *ev;

		assert_ok(odx_submit(ctx, fill, a, 3, &o, &ev));
		assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
		assert_contains(odx_event_message(ev), "length 20000 bytes of argument 0");
		odx_event_release(ev);
	}
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_set_length_seen_in_order),
		cmocka_unit_test(test_length_above_capacity_fails),
		cmocka_unit_test(test_rules_on_host),
		cmocka_unit_test(test_parts),
		cmocka_unit_test(test_only_valid_bytes_move),
		cmocka_unit_test(test_spilled_with_lengths),
		cmocka_unit_test(test_rules_on_device),
	};

	if (getenv("TEST_LENGTHS_DEVICE") && *getenv("TEST_LENGTHS_DEVICE")) {
		const struct CMUnitTest dev_tests[] = {cmocka_unit_test(test_rules_on_device)};

		return cmocka_run_group_tests(dev_tests, NULL, NULL);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
