/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_failure.c - how failures propagate, and what submission refuses.
 *
 * A kernel that returns nonzero fails its task with ODX_EKERNEL and its message; tasks that read
 * what it wrote (directly or further down the chain) are canceled with a message naming it, while
 * independent work and write-only successors run. odx_wait_all reports the first failure once.
 * Reads of a buffer whose last writer failed are refused until a write-only task rewrites it.
 * Malformed submissions are refused with ODX_EINVAL or ODX_ENOVARIANT, submit nothing, and leave
 * the context usable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define N 256 /* uint64 elements per buffer */

/* ---- kernels ----------------------------------------------------------------------------- */

/* fail(RW buf): scribbles, then fails. */
static int fail_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];

	p[0] = 0xdeadull;
	snprintf(l->error, l->error_size, "boom: the flux capacitor melted");
	return 7;
}

/* fail_read(R in, W out): fails without writing out. */
static int fail_read_kernel(const odx_host_launch *l)
{
	snprintf(l->error, l->error_size, "boom: refused to read");
	return 3;
}

/* fail_group(W buf, i32 bad): fills buf, but the call that covers group `bad` fails. */
static int fail_group_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	int32_t bad = *(const int32_t *)l->scalars[1];
	uint64_t groups = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];
	size_t n = l->buffer_sizes[0] / sizeof(uint64_t);

	for (uint64_t g = l->group_first; g < l->group_first + l->group_count; g++) {
		if (g == (uint64_t)bad) {
			snprintf(l->error, l->error_size, "boom: group %llu",
				 (unsigned long long)g);
			return 1;
		}
		for (size_t i = g * n / groups; i < (g + 1) * n / groups; i++)
			p[i] = g;
	}
	return 0;
}

/* fill(W buf, i64 v): every element = v. */
static int fill_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	int64_t v = *(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(uint64_t); i++)
		p[i] = (uint64_t)v;
	return 0;
}

/* copy(R src, W dst) */
static int copy_kernel(const odx_host_launch *l)
{
	memcpy(l->buffers[1], l->buffers[0], l->buffer_sizes[0]);
	return 0;
}

/* add(RW buf, i64 v) */
static int add_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	int64_t v = *(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(uint64_t); i++)
		p[i] += (uint64_t)v;
	return 0;
}

struct fixture {
	odx_context *ctx;
	odx_kernel *fail, *fail_read, *fail_group, *fill, *copy, *add;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	static const char *const kv[] = {
		"host.devices", "2", "host.threads", "2", "host.bind", "false", NULL,
	};

	assert_non_null(f);
	f->ctx = test_open_ctx(kv);
	f->fail = test_host_kernel(f->ctx, "fail", (odx_param[]){{ODX_ARG_BUFFER, ODX_RW, "buf"}},
				   1, fail_kernel);
	f->fail_read = test_host_kernel(f->ctx, "fail_read",
					(odx_param[]){{ODX_ARG_BUFFER, ODX_R, "in"},
						      {ODX_ARG_BUFFER, ODX_W, "out"}},
					2, fail_read_kernel);
	f->fail_group = test_host_kernel(f->ctx, "fail_group",
					 (odx_param[]){{ODX_ARG_BUFFER, ODX_W, "buf"},
						       {ODX_ARG_I32, 0, "bad"}},
					 2, fail_group_kernel);
	f->fill = test_host_kernel(f->ctx, "fill",
				   (odx_param[]){{ODX_ARG_BUFFER, ODX_W, "buf"},
						 {ODX_ARG_I64, 0, "v"}},
				   2, fill_kernel);
	f->copy = test_host_kernel(f->ctx, "copy",
				   (odx_param[]){{ODX_ARG_BUFFER, ODX_R, "src"},
						 {ODX_ARG_BUFFER, ODX_W, "dst"}},
				   2, copy_kernel);
	f->add = test_host_kernel(f->ctx, "add",
				  (odx_param[]){{ODX_ARG_BUFFER, ODX_RW, "buf"},
						{ODX_ARG_I64, 0, "v"}},
				  2, add_kernel);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	assert_ok(odx_close(f->ctx));
	free(f);
	return 0;
}

static odx_event *submit_ev(struct fixture *f, odx_kernel *k, const odx_arg *args, int nargs,
			    const char *tag)
{
	odx_event *ev = NULL;

	assert_ok(odx_submit(f->ctx, k, args, nargs, &(odx_task_opts){.tag = tag}, &ev));
	assert_non_null(ev);
	return ev;
}

static odx_buffer *new_buffer(struct fixture *f)
{
	odx_buffer *b = NULL;

	assert_ok(odx_buffer_create(f->ctx, N * sizeof(uint64_t), 0, &b));
	return b;
}

/* Every element of `b` equals `v`. */
static void expect_all(odx_buffer *b, uint64_t v)
{
	uint64_t got[N];

	assert_ok(odx_buffer_read(b, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++) {
		if (got[i] != v)
			fail_msg("element %d is %llu, expected %llu", i,
				 (unsigned long long)got[i], (unsigned long long)v);
	}
}

/* Reading `b` is refused with ODX_ECANCELED naming `cause`, and dst is not touched. */
static void expect_read_canceled(struct fixture *f, odx_buffer *b, const char *cause)
{
	uint64_t got[N];

	memset(got, 0xa5, sizeof(got));
	assert_rc(odx_buffer_read(b, 0, got, sizeof(got), TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_contains(odx_last_error(f->ctx), cause);
	for (int i = 0; i < N; i++)
		assert_true(got[i] == 0xa5a5a5a5a5a5a5a5ull);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_kernel_failure(void **state)
{
	struct fixture *f = *state;
	odx_buffer *a = new_buffer(f);
	odx_event *ev;

	ev = submit_ev(f, f->fill, (odx_arg[]){ODX_BUF(a, 0), ODX_I64(1)}, 2, "fill-a");
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	assert_ok(odx_event_query(ev));
	assert_string_equal(odx_event_message(ev), "");
	odx_event_release(ev);

	ev = submit_ev(f, f->fail, (odx_arg[]){ODX_BUF(a, 0)}, 1, "bad-task");
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_rc(odx_event_query(ev), ODX_EKERNEL);
	assert_contains(odx_event_message(ev), "the flux capacitor melted");
	assert_contains(odx_event_message(ev), "bad-task");
	assert_contains(odx_last_error(f->ctx), "bad-task");
	odx_event_release(ev);

	/* the first failure once, then a clean slate */
	assert_rc(odx_wait_all(f->ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));

	expect_read_canceled(f, a, "bad-task");
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* Readers of the failed task's output, and their readers, are canceled naming it. */
static void test_dependents_canceled(void **state)
{
	struct fixture *f = *state;
	odx_buffer *a = new_buffer(f), *b = new_buffer(f), *c = new_buffer(f), *d = new_buffer(f);
	odx_event *ev[5];
	static const char *const tags[] = {"dep-copy-ab", "dep-copy-bc", "dep-add-c", "dep-add-a"};

	ev[0] = submit_ev(f, f->fail, (odx_arg[]){ODX_BUF(a, ODX_RW)}, 1, "bad-task");
	ev[1] = submit_ev(f, f->copy, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(b, ODX_W)}, 2,
			  tags[0]);
	ev[2] = submit_ev(f, f->copy, (odx_arg[]){ODX_BUF(b, ODX_R), ODX_BUF(c, ODX_W)}, 2,
			  tags[1]);
	ev[3] = submit_ev(f, f->add, (odx_arg[]){ODX_BUF(c, ODX_RW), ODX_I64(1)}, 2, tags[2]);
	ev[4] = submit_ev(f, f->add, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_I64(1)}, 2, tags[3]);

	/* independent work submitted afterwards runs */
	odx_event *indep = submit_ev(f, f->fill, (odx_arg[]){ODX_BUF(d, 0), ODX_I64(5)}, 2,
				     "independent");

	assert_rc(odx_event_wait(ev[0], TEST_TIMEOUT_MS), ODX_EKERNEL);
	for (int i = 1; i < 5; i++) {
		int rc = odx_event_wait(ev[i], TEST_TIMEOUT_MS);

		if (rc != ODX_ECANCELED)
			fail_msg("%s: %s (%s), expected ODX_ECANCELED", tags[i - 1],
				 odx_err_name(rc), odx_event_message(ev[i]));
		assert_contains(odx_event_message(ev[i]), "bad-task");
	}
	assert_ok(odx_event_wait(indep, TEST_TIMEOUT_MS));
	expect_all(d, 5);

	/* every buffer whose last writer failed or was canceled refuses reads */
	expect_read_canceled(f, a, "bad-task");
	expect_read_canceled(f, b, "bad-task");
	expect_read_canceled(f, c, "bad-task");

	for (int i = 0; i < 5; i++)
		odx_event_release(ev[i]);
	odx_event_release(indep);
	assert_rc(odx_wait_all(f->ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_buffer_destroy(c));
	assert_ok(odx_buffer_destroy(d));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* A write-only task after a failed writer makes the buffer valid again. */
static void test_overwrite_after_failure(void **state)
{
	struct fixture *f = *state;
	odx_buffer *a = new_buffer(f), *b = new_buffer(f);
	odx_event *bad, *fill, *after;

	bad = submit_ev(f, f->fail, (odx_arg[]){ODX_BUF(a, 0)}, 1, "bad-task");
	fill = submit_ev(f, f->fill, (odx_arg[]){ODX_BUF(a, ODX_W), ODX_I64(9)}, 2, "rewrite");
	after = submit_ev(f, f->copy, (odx_arg[]){ODX_BUF(a, 0), ODX_BUF(b, 0)}, 2, "after");
	assert_rc(odx_event_wait(bad, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_event_wait(fill, TEST_TIMEOUT_MS));
	assert_ok(odx_event_wait(after, TEST_TIMEOUT_MS));
	expect_all(a, 9);
	expect_all(b, 9);
	odx_event_release(bad);
	odx_event_release(fill);
	odx_event_release(after);

	/* the same once the failure is already known when the rewrite is submitted */
	bad = submit_ev(f, f->fail, (odx_arg[]){ODX_BUF(a, 0)}, 1, "bad-task-2");
	assert_rc(odx_event_wait(bad, TEST_TIMEOUT_MS), ODX_EKERNEL);
	expect_read_canceled(f, a, "bad-task-2");
	fill = submit_ev(f, f->fill, (odx_arg[]){ODX_BUF(a, ODX_W), ODX_I64(11)}, 2, "rewrite-2");
	assert_ok(odx_event_wait(fill, TEST_TIMEOUT_MS));
	expect_all(a, 11);
	odx_event_release(bad);
	odx_event_release(fill);

	assert_rc(odx_wait_all(f->ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* Only read-after-write edges carry a failure: a task that merely read a buffer leaves it valid. */
static void test_failed_reader_cancels_nothing_upstream(void **state)
{
	struct fixture *f = *state;
	odx_buffer *in = new_buffer(f), *out = new_buffer(f);
	odx_event *bad, *war, *raw;

	assert_ok(odx_submit(f->ctx, f->fill, (odx_arg[]){ODX_BUF(in, 0), ODX_I64(3)}, 2, NULL,
			     NULL));
	bad = submit_ev(f, f->fail_read, (odx_arg[]){ODX_BUF(in, 0), ODX_BUF(out, 0)}, 2,
			"bad-reader");
	/* write after read of `in`: ordered after the failed task, not canceled */
	war = submit_ev(f, f->add, (odx_arg[]){ODX_BUF(in, 0), ODX_I64(1)}, 2, "war");
	/* read after write of `out`: canceled */
	raw = submit_ev(f, f->add, (odx_arg[]){ODX_BUF(out, 0), ODX_I64(1)}, 2, "raw");
	assert_rc(odx_event_wait(bad, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_contains(odx_event_message(bad), "refused to read");
	assert_ok(odx_event_wait(war, TEST_TIMEOUT_MS));
	assert_rc(odx_event_wait(raw, TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_contains(odx_event_message(raw), "bad-reader");
	expect_all(in, 4);
	expect_read_canceled(f, out, "bad-reader");
	odx_event_release(bad);
	odx_event_release(war);
	odx_event_release(raw);
	assert_rc(odx_wait_all(f->ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_destroy(in));
	assert_ok(odx_buffer_destroy(out));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* One failing chunk of a task split over threads fails the whole task. */
static void test_failure_in_one_chunk(void **state)
{
	struct fixture *f = *state;
	odx_buffer *a = new_buffer(f);
	odx_event *ev = NULL;

	assert_ok(odx_submit(f->ctx, f->fail_group, (odx_arg[]){ODX_BUF(a, 0), ODX_I32(5)}, 2,
			     &(odx_task_opts){.tag = "chunky", .grid = {8, 1, 1}}, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_contains(odx_event_message(ev), "boom: group 5");
	assert_contains(odx_event_message(ev), "chunky");
	odx_event_release(ev);
	/* a grid with no bad group succeeds */
	assert_ok(odx_submit(f->ctx, f->fail_group, (odx_arg[]){ODX_BUF(a, 0), ODX_I32(-1)}, 2,
			     &(odx_task_opts){.tag = "fine", .grid = {4, 2, 1}}, &ev));
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_rc(odx_wait_all(f->ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	{
		uint64_t got[N];

		assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
		for (int i = 0; i < N; i++)
			assert_int_equal(got[i], (uint64_t)i * 8 / N);
	}
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* Many failures: the tasks keep failing independently and wait_all reports one. */
static void test_many_failures(void **state)
{
	struct fixture *f = *state;
	odx_buffer *bufs[16], *good = new_buffer(f);

	for (int i = 0; i < 16; i++) {
		bufs[i] = new_buffer(f);
		assert_ok(odx_submit(f->ctx, f->fail, (odx_arg[]){ODX_BUF(bufs[i], 0)}, 1,
				     &(odx_task_opts){.tag = "bad-many"}, NULL));
		assert_ok(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(bufs[i], 0), ODX_I64(1)},
				     2, NULL, NULL));
		assert_ok(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(good, 0), ODX_I64(1)}, 2,
				     NULL, NULL));
	}
	assert_rc(odx_wait_all(f->ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	expect_all(good, 16);
	for (int i = 0; i < 16; i++) {
		expect_read_canceled(f, bufs[i], "bad-many");
		assert_ok(odx_buffer_destroy(bufs[i]));
	}
	assert_ok(odx_buffer_destroy(good));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* A kernel without a host variant is accepted, but submitting it is refused. */
static void test_no_variant(void **state)
{
	struct fixture *f = *state;
	static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
				  ".visible .entry scale(.param .u64 p) { ret; }\n";
	odx_kernel_variant cuda = {
		.backend = ODX_BACKEND_CUDA,
		.format = ODX_FORMAT_PTX,
		.code = ptx,
		.code_size = sizeof(ptx),
		.entry = "scale",
	};
	odx_event *const sentinel = (odx_event *)(uintptr_t)0x4321;
	odx_event *ev = sentinel;
	odx_kernel *k = NULL;
	odx_buffer *a = new_buffer(f);

	assert_ok(odx_kernel_create(f->ctx, "cuda_only",
				    (odx_param[]){{ODX_ARG_BUFFER, ODX_RW, "buf"}}, 1, &cuda, 1,
				    &k));
	assert_non_null(k);
	assert_rc(odx_submit(f->ctx, k, (odx_arg[]){ODX_BUF(a, 0)}, 1, NULL, &ev),
		  ODX_ENOVARIANT);
	assert_ptr_equal(ev, sentinel);
	assert_contains(odx_last_error(f->ctx), "cuda_only");
	/* nothing was submitted: nothing failed, the buffer is untouched and readable */
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	expect_all(a, 0);
	assert_ok(odx_kernel_destroy(k));
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* Malformed submissions are refused with ODX_EINVAL, touch no event and submit nothing. */
static void test_invalid_submissions(void **state)
{
	struct fixture *f = *state;
	odx_event *const sentinel = (odx_event *)(uintptr_t)0x4321;
	odx_event *ev = sentinel;
	odx_buffer *a = new_buffer(f), *b = new_buffer(f);
	odx_arg good[] = {ODX_BUF(a, ODX_RW), ODX_I64(1)};
	odx_arg bad_access = {.kind = ODX_ARG_BUFFER, .access = (odx_access)4, .v.buffer = a};

#define REFUSED(expr)                                                                              \
	do {                                                                                       \
		assert_rc((expr), ODX_EINVAL);                                                     \
		assert_ptr_equal(ev, sentinel);                                                    \
	} while (0)

	/* wrong number of arguments */
	REFUSED(odx_submit(f->ctx, f->add, good, 1, NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, 0), ODX_I64(1), ODX_I64(2)}, 3,
			   NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, good, 0, NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, good, -1, NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, NULL, 2, NULL, &ev));
	/* wrong kinds */
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_I64(1), ODX_BUF(a, 0)}, 2, NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, 0), ODX_I32(1)}, 2, NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, 0), ODX_F64(1)}, 2, NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, 0), ODX_BUF(b, 0)}, 2, NULL,
			   &ev));
	/* access less than declared, or not an access mode */
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_I64(1)}, 2, NULL,
			   &ev));
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, ODX_W), ODX_I64(1)}, 2, NULL,
			   &ev));
	REFUSED(odx_submit(f->ctx, f->copy, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(b, ODX_R)}, 2,
			   NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->copy, (odx_arg[]){ODX_BUF(a, ODX_W), ODX_BUF(b, ODX_W)}, 2,
			   NULL, &ev));
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){bad_access, ODX_I64(1)}, 2, NULL, &ev));
	/* NULL buffer, kernel, context */
	REFUSED(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(NULL, 0), ODX_I64(1)}, 2, NULL,
			   &ev));
	REFUSED(odx_submit(f->ctx, NULL, good, 2, NULL, &ev));
	REFUSED(odx_submit(NULL, f->add, good, 2, NULL, &ev));
	/* a device that does not exist */
	REFUSED(odx_submit(f->ctx, f->add, good, 2, &(odx_task_opts){.device = 3}, &ev));
	assert_contains(odx_last_error(f->ctx), "device");
	REFUSED(odx_submit(f->ctx, f->add, good, 2, &(odx_task_opts){.device = 1000}, &ev));
	REFUSED(odx_submit(f->ctx, f->add, good, 2, &(odx_task_opts){.device = -1}, &ev));
	/* the same through on_device, a plain index (the context has devices 0 and 1) */
	REFUSED(odx_submit(f->ctx, f->add, good, 2,
			   &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 2}, &ev));
	assert_contains(odx_last_error(f->ctx), "on_device");
	REFUSED(odx_submit(f->ctx, f->add, good, 2,
			   &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = -2}, &ev));
	/* both ways of pinning at once: refused, whichever device each names */
	REFUSED(odx_submit(
		f->ctx, f->add, good, 2,
		&(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0, .device = 1}, &ev));
	assert_contains(odx_last_error(f->ctx), "both");
#undef REFUSED

	/* nothing ran: no failure to report, `a` still zero */
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	expect_all(a, 0);

	/* the context still works, including access wider than declared and the last device */
	assert_ok(odx_submit(f->ctx, f->add, good, 2, &(odx_task_opts){.device = 2}, &ev));
	assert_true(ev != sentinel);
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_ok(odx_submit(f->ctx, f->add, good, 2,
			     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 1}, &ev));
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_ok(odx_submit(
		f->ctx, f->add, good, 2,
		&(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = ODX_DEVICE_ANY}, &ev));
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_ok(odx_submit(f->ctx, f->copy, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_BUF(b, ODX_RW)},
			     2, NULL, NULL));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	expect_all(a, 3);
	expect_all(b, 3);
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

/* After every kind of failure above, in one context, ordinary work still runs. */
static void test_usable_after_everything(void **state)
{
	struct fixture *f = *state;
	odx_buffer *a = new_buffer(f);

	test_kernel_failure(state);
	test_dependents_canceled(state);
	test_overwrite_after_failure(state);
	test_no_variant(state);
	test_invalid_submissions(state);
	for (int i = 0; i < 100; i++)
		assert_ok(odx_submit(f->ctx, f->add, (odx_arg[]){ODX_BUF(a, 0), ODX_I64(2)}, 2,
				     NULL, NULL));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
	expect_all(a, 200);
	odx_event_release(NULL);
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_wait_all(f->ctx, TEST_TIMEOUT_MS));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kernel_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dependents_canceled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_overwrite_after_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_reader_cancels_nothing_upstream, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_failure_in_one_chunk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_failures, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_variant, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid_submissions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_usable_after_everything, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
