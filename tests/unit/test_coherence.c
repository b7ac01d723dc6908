/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_coherence.c - the bytes a buffer holds, wherever its replicas live.
 *
 * A buffer is written on one device, read on another, read and partially overwritten from the
 * host, and read again on the first device (whose replica went stale): every step sees the latest
 * bytes. Replica placement is checked only where it is observable, through the used_bytes of the
 * memory nodes. The program runs twice: with reads and writes going straight to a device's copy
 * when host RAM holds none (tier.direct_access, the default), and with TEST_DIRECT_ACCESS=false
 * always through host RAM. Also: registered user memory gets the latest contents back when its buffer is
 * destroyed, new buffers read as zeros, and bad ranges or arguments are refused without effect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define MIB (1024 * 1024)

/* ---- kernels ----------------------------------------------------------------------------- */

static uint64_t pattern(uint64_t seed, size_t i)
{
	return test_mix(seed, i);
}

/* fill(W buf, i64 seed): buf[i] = pattern(seed, i) over every whole uint64. */
static int fill_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	uint64_t seed = (uint64_t)*(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(uint64_t); i++)
		p[i] = pattern(seed, i);
	return 0;
}

/* copy(R src, W dst): the whole of dst from src (sizes must match). */
static int copy_kernel(const odx_host_launch *l)
{
	if (l->buffer_sizes[0] != l->buffer_sizes[1]) {
		snprintf(l->error, l->error_size, "copy: %zu bytes into %zu", l->buffer_sizes[0],
			 l->buffer_sizes[1]);
		return 1;
	}
	memcpy(l->buffers[1], l->buffers[0], l->buffer_sizes[0]);
	return 0;
}

/* add(RW buf, i64 v): buf[i] += v. */
static int add_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	uint64_t v = (uint64_t)*(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(uint64_t); i++)
		p[i] += v;
	return 0;
}

/* tier.direct_access, from TEST_DIRECT_ACCESS (default true, as in ODX) */
static bool direct;

struct fixture {
	odx_context *ctx;
	odx_kernel *fill, *copy, *add;
};

static int setup(void **state)
{
	static struct fixture f;
	const char *e = getenv("TEST_DIRECT_ACCESS");
	const char *kv[] = {
		"host.devices", "2", "host.threads", "1", "host.bind", "false",
		"tier.direct_access", NULL, NULL,
	};

	direct = !e || strcmp(e, "false") != 0;
	kv[7] = direct ? "true" : "false";

	f.ctx = test_open_ctx(kv);
	f.fill = test_host_kernel(f.ctx, "fill",
				  (odx_param[]){{ODX_ARG_BUFFER, ODX_W, "buf"},
						{ODX_ARG_I64, 0, "seed"}},
				  2, fill_kernel);
	f.copy = test_host_kernel(f.ctx, "copy",
				  (odx_param[]){{ODX_ARG_BUFFER, ODX_R, "src"},
						{ODX_ARG_BUFFER, ODX_W, "dst"}},
				  2, copy_kernel);
	f.add = test_host_kernel(f.ctx, "add",
				 (odx_param[]){{ODX_ARG_BUFFER, ODX_RW, "buf"},
					       {ODX_ARG_I64, 0, "v"}},
				 2, add_kernel);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	assert_ok(odx_close(f->ctx));
	return 0;
}

/* Submits a task forced on `device` (-1: any) and waits for it; returns its status. */
static int run_on(struct fixture *f, odx_kernel *k, const odx_arg *args, int nargs, int device,
		  const char *tag)
{
	odx_task_opts opts = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = device, .tag = tag};
	odx_event *ev = NULL;
	int rc;

	assert_ok(odx_submit(f->ctx, k, args, nargs, &opts, &ev));
	assert_non_null(ev);
	rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
	if (rc != 0)
		print_error("task %s: %s: %s\n", tag, odx_err_name(rc), odx_event_message(ev));
	odx_event_release(ev);
	return rc;
}

static uint64_t used_bytes(odx_context *ctx, int memnode)
{
	odx_memnode_info info;

	assert_ok(odx_memnode_get_info(ctx, memnode, &info));
	assert_int_equal(info.index, memnode);
	return info.used_bytes;
}

static int memnode_of(odx_context *ctx, int device)
{
	odx_device_info info;

	assert_ok(odx_device_get_info(ctx, device, &info));
	return info.memnode;
}

static void expect_pattern(odx_buffer *buf, const uint64_t *want, size_t n, const char *what)
{
	uint64_t *got = calloc(n, sizeof(uint64_t));

	assert_non_null(got);
	assert_ok(odx_buffer_read(buf, 0, got, n * sizeof(uint64_t), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < n; i++) {
		if (got[i] != want[i])
			fail_msg("%s: element %zu is %016llx, expected %016llx", what, i,
				 (unsigned long long)got[i], (unsigned long long)want[i]);
	}
	free(got);
}

/* ---- tests ------------------------------------------------------------------------------- */

/*
 * Device 0 writes, device 1 reads, the host reads, the host overwrites a part, device 0 and then
 * device 1 (both with stale replicas) read again, then the two devices take turns modifying it.
 */
static void test_write_read_across_devices(void **state)
{
	struct fixture *f = *state;
	const size_t n = MIB / sizeof(uint64_t);
	const int m0 = memnode_of(f->ctx, 0), m1 = memnode_of(f->ctx, 1);
	uint64_t host0 = used_bytes(f->ctx, 0), base0 = used_bytes(f->ctx, m0),
		 base1 = used_bytes(f->ctx, m1);
	uint64_t *want = malloc(n * sizeof(uint64_t));
	uint64_t patch[64];
	odx_buffer *a, *b, *c, *d;

	assert_non_null(want);
	assert_int_not_equal(m0, 0);
	assert_int_not_equal(m1, 0);
	assert_int_not_equal(m0, m1);
	assert_ok(odx_buffer_create(f->ctx, MIB, 0, &a));
	assert_ok(odx_buffer_create(f->ctx, MIB, 0, &b));
	assert_ok(odx_buffer_create(f->ctx, MIB, 0, &c));
	assert_ok(odx_buffer_create(f->ctx, MIB, 0, &d));

	/* device 0 writes A: a replica is allocated on its memory node */
	assert_ok(run_on(f, f->fill, (odx_arg[]){ODX_BUF(a, ODX_W), ODX_I64(1)}, 2, 0, "fill-a"));
	assert_true(used_bytes(f->ctx, m0) >= base0 + MIB);

	/* device 1 copies A into B: A is brought over, B is allocated there */
	assert_ok(run_on(f, f->copy, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(b, ODX_W)}, 2, 1,
			 "copy-a-b"));
	assert_true(used_bytes(f->ctx, m1) >= base1 + 2 * (uint64_t)MIB);
	for (size_t i = 0; i < n; i++)
		want[i] = pattern(1, i);
	expect_pattern(b, want, n, "B copied on device 1");

	/* the host reads A: straight from a device's copy, or through a copy brought to host RAM */
	expect_pattern(a, want, n, "A read on the host");
	if (direct)
		assert_int_equal(used_bytes(f->ctx, 0), host0);
	else
		assert_true(used_bytes(f->ctx, 0) >= host0 + 2 * (uint64_t)MIB);

	/* the host overwrites 64 elements in the middle of A */
	for (size_t i = 0; i < 64; i++) {
		patch[i] = 0xabcdef0000000000ull + i;
		want[1000 + i] = patch[i];
	}
	assert_ok(odx_buffer_write(a, 1000 * sizeof(uint64_t), patch, sizeof(patch),
				   TEST_TIMEOUT_MS));
	expect_pattern(a, want, n, "A after a partial host write");

	/* device 0's replica of A is stale now */
	assert_ok(run_on(f, f->copy, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(c, ODX_W)}, 2, 0,
			 "copy-a-c"));
	expect_pattern(c, want, n, "C copied on device 0 after the host write");
	/* and so is device 1's */
	assert_ok(run_on(f, f->copy, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(d, ODX_W)}, 2, 1,
			 "copy-a-d"));
	expect_pattern(d, want, n, "D copied on device 1 after the host write");

	/* the devices take turns modifying A, each from the other's latest version */
	for (int i = 0; i < 20; i++) {
		char tag[16];

		snprintf(tag, sizeof(tag), "add-%d", i);
		assert_ok(run_on(f, f->add, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_I64(i + 1)}, 2,
				 i % 2, tag));
	}
	for (size_t i = 0; i < n; i++)
		want[i] += 210;
	expect_pattern(a, want, n, "A after 20 alternating adds");
	assert_ok(run_on(f, f->copy, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(b, ODX_W)}, 2, 1,
			 "copy-a-b-2"));
	expect_pattern(b, want, n, "B copied on device 1 after the adds");

	/* destroying every buffer gives the memory back */
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_buffer_destroy(c));
	assert_ok(odx_buffer_destroy(d));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	assert_int_equal(used_bytes(f->ctx, m0), base0);
	assert_int_equal(used_bytes(f->ctx, m1), base1);
	assert_int_equal(used_bytes(f->ctx, 0), host0);
	free(want);
}

/* Tasks without waiting in between: the same walk, only program order between the steps. */
static void test_pipelined_across_devices(void **state)
{
	struct fixture *f = *state;
	enum { N = 4096 };
	static uint64_t want[N], got[N];
	odx_buffer *a, *outs[8];
	odx_task_opts on0 = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0},
		      on1 = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 1};

	assert_ok(odx_buffer_create(f->ctx, sizeof(want), 0, &a));
	for (int i = 0; i < 8; i++)
		assert_ok(odx_buffer_create(f->ctx, sizeof(want), 0, &outs[i]));
	assert_ok(odx_submit(f->ctx, f->fill, (odx_arg[]){ODX_BUF(a, ODX_W), ODX_I64(7)}, 2, &on0,
			     NULL));
	for (int i = 0; i < 8; i++) {
		/* copy on alternating devices, then modify on the other one */
		assert_ok(odx_submit(f->ctx, f->copy,
				     (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(outs[i], ODX_W)}, 2,
				     i % 2 ? &on1 : &on0, NULL));
		assert_ok(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_I64(i)}, 2,
				     i % 2 ? &on0 : &on1, NULL));
	}
	for (int i = 0; i < 8; i++) {
		uint64_t added = (uint64_t)(i * (i - 1) / 2);

		for (size_t e = 0; e < N; e++)
			want[e] = pattern(7, e) + added;
		assert_ok(odx_buffer_read(outs[i], 0, got, sizeof(got), TEST_TIMEOUT_MS));
		assert_memory_equal(got, want, sizeof(want));
		assert_ok(odx_buffer_destroy(outs[i]));
	}
	for (size_t e = 0; e < N; e++)
		want[e] = pattern(7, e) + 28;
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	assert_memory_equal(got, want, sizeof(want));
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* Registered memory holds the initial contents and gets the final ones back on destruction. */
static void test_registered_write_back(void **state)
{
	struct fixture *f = *state;
	enum { N = 4096 };
	static uint64_t user[N], input[N], host_written[N];
	uint64_t patch[4] = {1, 2, 3, 4};
	odx_buffer *ub, *ib, *hb, *copy;
	uint64_t got[N];

	for (size_t i = 0; i < N; i++) {
		user[i] = i * 3;
		input[i] = ~(uint64_t)i;
		host_written[i] = 5;
	}
	assert_ok(odx_buffer_register(f->ctx, user, sizeof(user), 0, &ub));
	assert_ok(odx_buffer_register(f->ctx, input, sizeof(input), 0, &ib));
	assert_ok(odx_buffer_register(f->ctx, host_written, sizeof(host_written), 0, &hb));
	assert_int_equal(odx_buffer_size(ub), sizeof(user));
	assert_ok(odx_buffer_create(f->ctx, sizeof(input), 0, &copy));

	/* tasks on both devices modify `user`; `input` is only read (on device 1) */
	assert_ok(run_on(f, f->add, (odx_arg[]){ODX_BUF(ub, ODX_RW), ODX_I64(5)}, 2, 0, "add5"));
	assert_ok(run_on(f, f->add, (odx_arg[]){ODX_BUF(ub, ODX_RW), ODX_I64(7)}, 2, 1, "add7"));
	assert_ok(odx_submit(f->ctx, f->copy, (odx_arg[]){ODX_BUF(ib, ODX_R), ODX_BUF(copy, ODX_W)},
			     2, &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 1},
			     NULL));
	assert_ok(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(ub, ODX_RW), ODX_I64(100)}, 2,
			     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0},
			     NULL));
	assert_ok(odx_buffer_write(hb, 8 * sizeof(uint64_t), patch, sizeof(patch),
				   TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(copy, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < N; i++)
		assert_true(got[i] == ~(uint64_t)i);

	assert_ok(odx_buffer_destroy(ub));
	assert_ok(odx_buffer_destroy(ib));
	assert_ok(odx_buffer_destroy(hb));
	assert_ok(odx_buffer_destroy(copy));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	for (size_t i = 0; i < N; i++) {
		if (user[i] != i * 3 + 112)
			fail_msg("user[%zu] = %llu after write-back, expected %llu", i,
				 (unsigned long long)user[i], (unsigned long long)(i * 3 + 112));
		assert_true(input[i] == ~(uint64_t)i);
		assert_true(host_written[i] == (i >= 8 && i < 12 ? patch[i - 8] : 5));
	}
}

/* A registered buffer destroyed while a task that modifies it is pending. */
static void test_registered_destroy_pending(void **state)
{
	struct fixture *f = *state;
	enum { N = 512 };
	static uint64_t user[N];
	odx_buffer *ub;

	for (size_t i = 0; i < N; i++)
		user[i] = i;
	assert_ok(odx_buffer_register(f->ctx, user, sizeof(user), 0, &ub));
	for (int i = 0; i < 50; i++)
		assert_ok(odx_submit(
			f->ctx, f->add, (odx_arg[]){ODX_BUF(ub, ODX_RW), ODX_I64(1)}, 2,
			&(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = i % 2}, NULL));
	assert_ok(odx_buffer_destroy(ub));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	for (size_t i = 0; i < N; i++)
		assert_true(user[i] == i + 50);
}

/* New buffers read as zeros, from the host and from a device. */
static void test_new_buffer_reads_zeros(void **state)
{
	struct fixture *f = *state;
	enum { SIZE = 1000 };
	unsigned char got[SIZE], zeros[SIZE] = {0};
	unsigned char part[10];
	odx_buffer *a, *b, *c;

	assert_ok(odx_buffer_create(f->ctx, SIZE, 0, &a));
	assert_int_equal(odx_buffer_size(a), SIZE);
	memset(got, 0x5a, sizeof(got));
	assert_ok(odx_buffer_read(a, 0, got, SIZE, TEST_TIMEOUT_MS));
	assert_memory_equal(got, zeros, SIZE);

	/* read on device 1 by a task: the copy sees zeros too */
	assert_ok(odx_buffer_create(f->ctx, SIZE, 0, &b));
	assert_ok(odx_buffer_create(f->ctx, SIZE, 0, &c));
	assert_ok(run_on(f, f->copy, (odx_arg[]){ODX_BUF(b, ODX_R), ODX_BUF(a, ODX_W)}, 2, 1,
			 "copy-zeros"));
	memset(got, 0x5a, sizeof(got));
	assert_ok(odx_buffer_read(a, 0, got, SIZE, TEST_TIMEOUT_MS));
	assert_memory_equal(got, zeros, SIZE);

	/* a partial write leaves the rest zero */
	memset(part, 0xee, sizeof(part));
	assert_ok(odx_buffer_write(c, 500, part, sizeof(part), TEST_TIMEOUT_MS));
	memset(got, 0x5a, sizeof(got));
	assert_ok(odx_buffer_read(c, 0, got, SIZE, TEST_TIMEOUT_MS));
	for (size_t i = 0; i < SIZE; i++)
		assert_int_equal(got[i], i >= 500 && i < 510 ? 0xee : 0);

	/* and a device reading it sees the same */
	assert_ok(run_on(f, f->copy, (odx_arg[]){ODX_BUF(c, ODX_R), ODX_BUF(a, ODX_W)}, 2, 0,
			 "copy-partial"));
	memset(got, 0x5a, sizeof(got));
	assert_ok(odx_buffer_read(a, 0, got, SIZE, TEST_TIMEOUT_MS));
	for (size_t i = 0; i < SIZE; i++)
		assert_int_equal(got[i], i >= 500 && i < 510 ? 0xee : 0);

	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_buffer_destroy(c));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/*
 * New buffers read as zeros whatever memory their replicas get: small blocks (malloc), blocks of
 * 2 MiB and more (fresh pages, which skip the zero-fill), sizes either side of 2 MiB, and memory
 * just given back by a buffer full of other bytes. add(+1) reads the replica a task materialises,
 * so a skipped zero-fill over reused bytes shows as a value other than 1.
 */
static void test_new_buffer_zeros_reused_memory(void **state)
{
	struct fixture *f = *state;
	/* largest first: glibc's mmap threshold follows the largest block freed, so the smaller
	 * ones after it come from reused heap memory when ODX takes them from malloc */
	static const size_t sizes[] = {16 * MIB,    6 * MIB + 4104, 2 * MIB + 8, 2 * MIB,
				       2 * MIB - 8, 64 << 10,	    4096};

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s] / sizeof(uint64_t);
		uint64_t *got = malloc(sizes[s]);

		assert_non_null(got);
		for (int round = 0; round < 3; round++) {
			odx_buffer *a, *dirty;
			int dev = round % 2;

			/* bytes other than zeros in memory of this size, then given back */
			assert_ok(odx_buffer_create(f->ctx, sizes[s], 0, &dirty));
			assert_ok(run_on(f, f->fill,
					 (odx_arg[]){ODX_BUF(dirty, ODX_W), ODX_I64(round + 7)}, 2,
					 dev, "dirty"));
			assert_ok(odx_buffer_destroy(dirty));
			assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));

			assert_ok(odx_buffer_create(f->ctx, sizes[s], 0, &a));
			assert_ok(run_on(f, f->add, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_I64(1)}, 2,
					 dev, "add-new"));
			memset(got, 0x5a, sizes[s]);
			assert_ok(odx_buffer_read(a, 0, got, sizes[s], TEST_TIMEOUT_MS));
			for (size_t i = 0; i < n; i++)
				if (got[i] != 1)
					fail_msg("size %zu round %d: word %zu is %#llx, not 1",
						 sizes[s], round, i, (unsigned long long)got[i]);
			assert_ok(odx_buffer_destroy(a));
			assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
		}
		free(got);
	}
}

/* Reads and writes outside the buffer are refused and change nothing. */
static void test_out_of_range(void **state)
{
	struct fixture *f = *state;
	unsigned char init[64], got[64], src[16], dst[16];
	odx_buffer *a;

	for (size_t i = 0; i < sizeof(init); i++)
		init[i] = (unsigned char)(i + 1);
	memset(src, 0x77, sizeof(src));
	assert_ok(odx_buffer_create(f->ctx, sizeof(init), 0, &a));
	assert_ok(odx_buffer_write(a, 0, init, sizeof(init), TEST_TIMEOUT_MS));

	memset(dst, 0xcc, sizeof(dst));
	assert_rc(odx_buffer_read(a, 60, dst, 8, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_read(a, 64, dst, 1, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_read(a, 100, dst, 1, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_read(a, 0, dst, 65, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_read(a, SIZE_MAX, dst, 8, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_read(a, 8, dst, SIZE_MAX - 4, TEST_TIMEOUT_MS), ODX_ERANGE);
	for (size_t i = 0; i < sizeof(dst); i++)
		assert_int_equal(dst[i], 0xcc);

	assert_rc(odx_buffer_write(a, 60, src, 8, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_write(a, 64, src, 1, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_write(a, 0, src, 65, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_write(a, SIZE_MAX, src, 8, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_rc(odx_buffer_write(a, 8, src, SIZE_MAX - 4, TEST_TIMEOUT_MS), ODX_ERANGE);
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	assert_memory_equal(got, init, sizeof(init));

	/* the last bytes are in range */
	assert_ok(odx_buffer_write(a, 56, src, 8, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(a, 56, dst, 8, TEST_TIMEOUT_MS));
	assert_memory_equal(dst, src, 8);
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* Size 0, NULL and nonzero flags are refused; out is not touched; the message names the argument. */
static void test_invalid_arguments(void **state)
{
	struct fixture *f = *state;
	odx_buffer *const sentinel = (odx_buffer *)(uintptr_t)0x1234;
	odx_buffer *b = sentinel, *ok;
	uint64_t mem[4] = {0}, word = 0;

	assert_rc(odx_buffer_create(f->ctx, 0, 0, &b), ODX_EINVAL);
	assert_ptr_equal(b, sentinel);
	assert_contains(odx_last_error(f->ctx), "size");
	assert_rc(odx_buffer_create(f->ctx, 64, 0, NULL), ODX_EINVAL);
	assert_contains(odx_last_error(f->ctx), "out");
	assert_rc(odx_buffer_create(f->ctx, 64, 1, &b), ODX_EINVAL);
	assert_ptr_equal(b, sentinel);
	assert_contains(odx_last_error(f->ctx), "flags");
	assert_rc(odx_buffer_create(NULL, 64, 0, &b), ODX_EINVAL);
	assert_ptr_equal(b, sentinel);

	assert_rc(odx_buffer_register(f->ctx, NULL, 64, 0, &b), ODX_EINVAL);
	assert_ptr_equal(b, sentinel);
	assert_contains(odx_last_error(f->ctx), "ptr");
	assert_rc(odx_buffer_register(f->ctx, mem, 0, 0, &b), ODX_EINVAL);
	assert_ptr_equal(b, sentinel);
	assert_contains(odx_last_error(f->ctx), "size");
	assert_rc(odx_buffer_register(f->ctx, mem, sizeof(mem), 2, &b), ODX_EINVAL);
	assert_contains(odx_last_error(f->ctx), "flags");
	assert_rc(odx_buffer_register(f->ctx, mem, sizeof(mem), 0, NULL), ODX_EINVAL);
	assert_contains(odx_last_error(f->ctx), "out");
	assert_ptr_equal(b, sentinel);

	assert_ok(odx_buffer_create(f->ctx, 64, 0, &ok));
	assert_rc(odx_buffer_read(ok, 0, NULL, 8, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(f->ctx), "dst");
	assert_rc(odx_buffer_write(ok, 0, NULL, 8, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(f->ctx), "src");
	assert_rc(odx_buffer_read(NULL, 0, &word, 8, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_rc(odx_buffer_write(NULL, 0, &word, 8, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_int_equal(odx_buffer_size(NULL), 0);

	/* the context and the buffer still work */
	word = 42;
	assert_ok(odx_buffer_write(ok, 8, &word, 8, TEST_TIMEOUT_MS));
	word = 0;
	assert_ok(odx_buffer_read(ok, 8, &word, 8, TEST_TIMEOUT_MS));
	assert_int_equal(word, 42);
	assert_ok(odx_buffer_destroy(ok));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_read_across_devices),
		cmocka_unit_test(test_pipelined_across_devices),
		cmocka_unit_test(test_registered_write_back),
		cmocka_unit_test(test_registered_destroy_pending),
		cmocka_unit_test(test_new_buffer_reads_zeros),
		cmocka_unit_test(test_new_buffer_zeros_reused_memory),
		cmocka_unit_test(test_out_of_range),
		cmocka_unit_test(test_invalid_arguments),
	};
	/* Host devices sharing host RAM (coherence_shared): nothing is copied between them, so
	 * only the tests that do not count copies or memory per device. */
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(test_new_buffer_reads_zeros),
		cmocka_unit_test(test_new_buffer_zeros_reused_memory),
		cmocka_unit_test(test_out_of_range),
		cmocka_unit_test(test_invalid_arguments),
	};
	const char *memnode = getenv("ODX_HOST_MEMNODE");

	if (memnode && strcmp(memnode, "shared") == 0)
		return cmocka_run_group_tests_name("coherence_shared", shared, setup, teardown);
	return cmocka_run_group_tests(tests, setup, teardown);
}
