/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_close_pending.c - nothing submitted is lost: close, destroy and back-pressure.
 *
 * odx_close with thousands of tasks pending runs them all (and the deferred destructions of
 * registered buffers, which write their contents back) before it returns, also with events still
 * held. A buffer destroyed while tasks still use it stays valid for them. With a small
 * sched.max_inflight, submission refuses (ODX_SUBMIT_NONBLOCK) or blocks once the bound is
 * reached; a "gate" kernel that waits for the test to open it keeps tasks in flight without
 * depending on timing.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

static atomic_long tasks_run;

/* ---- the gate ---------------------------------------------------------------------------- */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	bool entered;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};

static void gate_close(void)
{
	pthread_mutex_lock(&gate.lock);
	gate.open = false;
	gate.entered = false;
	pthread_mutex_unlock(&gate.lock);
}

static void gate_open(void)
{
	pthread_mutex_lock(&gate.lock);
	gate.open = true;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
}

/* Waits until `flag` is true, at most TEST_TIMEOUT_MS; returns false on timeout. */
static bool gate_wait_for(bool *flag)
{
	struct timespec deadline;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += TEST_TIMEOUT_MS / 1000;
	pthread_mutex_lock(&gate.lock);
	while (!*flag && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&gate.cond, &gate.lock, &deadline);
	rc = *flag;
	pthread_mutex_unlock(&gate.lock);
	return rc;
}

/* gate(): blocks its worker until the test opens the gate. */
static int gate_kernel(const odx_host_launch *l)
{
	pthread_mutex_lock(&gate.lock);
	gate.entered = true;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
	if (!gate_wait_for(&gate.open)) {
		snprintf(l->error, l->error_size, "gate: never opened");
		return 1;
	}
	atomic_fetch_add(&tasks_run, 1);
	return 0;
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* count(): counts. */
static int count_kernel(const odx_host_launch *l)
{
	(void)l;
	atomic_fetch_add(&tasks_run, 1);
	return 0;
}

/* step(RW buf, i64 k): x = x * 3 + k, counts. */
static int step_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	uint64_t k = (uint64_t)*(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(uint64_t); i++)
		p[i] = p[i] * 3 + k;
	atomic_fetch_add(&tasks_run, 1);
	return 0;
}

/* copy_add(R src, W dst, i64 k): dst = src + k, counts. */
static int copy_add_kernel(const odx_host_launch *l)
{
	const uint64_t *s = l->buffers[0];
	uint64_t *d = l->buffers[1];
	uint64_t k = (uint64_t)*(const int64_t *)l->scalars[2];

	for (size_t i = 0; i < l->buffer_sizes[1] / sizeof(uint64_t); i++)
		d[i] = s[i] + k;
	atomic_fetch_add(&tasks_run, 1);
	return 0;
}

static const odx_param step_params[] = {{ODX_ARG_BUFFER, ODX_RW, "buf"}, {ODX_ARG_I64, 0, "k"}};
static const odx_param copy_add_params[] = {
	{ODX_ARG_BUFFER, ODX_R, "src"}, {ODX_ARG_BUFFER, ODX_W, "dst"}, {ODX_ARG_I64, 0, "k"}};

static odx_context *open_ctx(const char *devices, const char *max_inflight)
{
	const char *kv[] = {
		"host.devices", devices, "host.threads", "1", "host.bind", "false",
		max_inflight ? "sched.max_inflight" : NULL, max_inflight, NULL,
	};

	atomic_store(&tasks_run, 0);
	gate_close();
	return test_open_ctx(kv);
}

/* ---- tests ------------------------------------------------------------------------------- */

/*
 * 2000 tasks in 20 chains over registered arrays plus runtime-owned buffers, every buffer
 * destroyed right after its last submission, then close without waiting: everything ran and the
 * arrays hold the final contents.
 */
static void test_close_completes_pending(void **state)
{
	enum { CHAINS = 20, LEN = 100, ELEMS = 16 };
	static uint64_t arrays[CHAINS][ELEMS], model[CHAINS][ELEMS];
	odx_context *ctx = open_ctx("2", NULL);
	odx_kernel *step = test_host_kernel(ctx, "step", step_params, 2, step_kernel);
	odx_kernel *copy_add = test_host_kernel(ctx, "copy_add", copy_add_params, 3,
						copy_add_kernel);
	odx_buffer *bufs[CHAINS], *scratch[CHAINS];
	long expected = 0;

	(void)state;
	for (int c = 0; c < CHAINS; c++) {
		for (int e = 0; e < ELEMS; e++)
			arrays[c][e] = model[c][e] = (uint64_t)(c * 100 + e);
		assert_ok(odx_buffer_register(ctx, arrays[c], sizeof(arrays[c]), 0, &bufs[c]));
		assert_ok(odx_buffer_create(ctx, sizeof(arrays[c]), 0, &scratch[c]));
	}
	/* interleave the chains: every chain advances one step per round */
	for (int r = 0; r < LEN; r++) {
		for (int c = 0; c < CHAINS; c++) {
			if (r % 10 == 9) {
				/* through a runtime-owned buffer and back */
				assert_ok(odx_submit(ctx, copy_add,
						     (odx_arg[]){ODX_BUF(bufs[c], 0),
								 ODX_BUF(scratch[c], 0),
								 ODX_I64(r)},
						     3, NULL, NULL));
				assert_ok(odx_submit(ctx, copy_add,
						     (odx_arg[]){ODX_BUF(scratch[c], 0),
								 ODX_BUF(bufs[c], 0), ODX_I64(1)},
						     3, NULL, NULL));
				for (int e = 0; e < ELEMS; e++)
					model[c][e] += (uint64_t)r + 1;
				expected += 2;
			} else {
				assert_ok(odx_submit(ctx, step,
						     (odx_arg[]){ODX_BUF(bufs[c], 0), ODX_I64(r)},
						     2, NULL, NULL));
				for (int e = 0; e < ELEMS; e++)
					model[c][e] = model[c][e] * 3 + (uint64_t)r;
				expected += 1;
			}
		}
		/* the scratch buffers go away in the middle of the stream: fresh ones follow */
		if (r == LEN / 2) {
			for (int c = 0; c < CHAINS; c++) {
				assert_ok(odx_buffer_destroy(scratch[c]));
				assert_ok(odx_buffer_create(ctx, sizeof(arrays[c]), 0,
							    &scratch[c]));
			}
		}
	}
	for (int c = 0; c < CHAINS; c++) {
		assert_ok(odx_buffer_destroy(bufs[c]));
		assert_ok(odx_buffer_destroy(scratch[c]));
	}
	assert_ok(odx_close(ctx));

	assert_int_equal(atomic_load(&tasks_run), expected);
	for (int c = 0; c < CHAINS; c++) {
		for (int e = 0; e < ELEMS; e++) {
			if (arrays[c][e] != model[c][e])
				fail_msg("chain %d element %d is %llu after close, expected %llu", c,
					 e, (unsigned long long)arrays[c][e],
					 (unsigned long long)model[c][e]);
		}
	}
}

/* Close with events still held by the caller: close frees them; every task ran. */
static void test_close_with_events_held(void **state)
{
	enum { TASKS = 200 };
	odx_context *ctx = open_ctx("2", NULL);
	odx_kernel *step = test_host_kernel(ctx, "step", step_params, 2, step_kernel);
	odx_buffer *b;
	odx_event *ev[TASKS];

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	for (int i = 0; i < TASKS; i++)
		assert_ok(odx_submit(ctx, step, (odx_arg[]){ODX_BUF(b, 0), ODX_I64(i)}, 2, NULL,
				     &ev[i]));
	/* some waited for, some released, most still held */
	assert_ok(odx_event_wait(ev[10], TEST_TIMEOUT_MS));
	for (int i = 0; i < 20; i++)
		odx_event_release(ev[i]);
	assert_ok(odx_close(ctx));
	assert_int_equal(atomic_load(&tasks_run), TASKS);
	assert_ok(odx_close(NULL));
}

/* A buffer destroyed while the tasks that read it are pending stays valid for them. */
static void test_destroy_while_in_use(void **state)
{
	enum { READERS = 10, ELEMS = 512 };
	odx_context *ctx = open_ctx("1", NULL);
	odx_kernel *gk = test_host_kernel(ctx, "gate", NULL, 0, gate_kernel);
	odx_kernel *step = test_host_kernel(ctx, "step", step_params, 2, step_kernel);
	odx_kernel *copy_add = test_host_kernel(ctx, "copy_add", copy_add_params, 3,
						copy_add_kernel);
	uint64_t init[ELEMS], got[ELEMS];
	odx_buffer *src, *dst[READERS];

	(void)state;
	for (int e = 0; e < ELEMS; e++)
		init[e] = (uint64_t)e * 7;
	assert_ok(odx_buffer_create(ctx, sizeof(init), 0, &src));
	assert_ok(odx_buffer_write(src, 0, init, sizeof(init), TEST_TIMEOUT_MS));
	for (int i = 0; i < READERS; i++)
		assert_ok(odx_buffer_create(ctx, sizeof(init), 0, &dst[i]));

	/* the gate holds the only worker: nothing below can have run at destroy time */
	assert_ok(odx_submit(ctx, gk, NULL, 0, NULL, NULL));
	assert_ok(odx_submit(ctx, step, (odx_arg[]){ODX_BUF(src, 0), ODX_I64(1)}, 2, NULL, NULL));
	for (int i = 0; i < READERS; i++)
		assert_ok(odx_submit(ctx, copy_add,
				     (odx_arg[]){ODX_BUF(src, 0), ODX_BUF(dst[i], 0), ODX_I64(i)},
				     3, NULL, NULL));
	assert_ok(odx_buffer_destroy(src));
	assert_true(gate_wait_for(&gate.entered));
	assert_int_equal(atomic_load(&tasks_run), 0);
	gate_open();
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&tasks_run), 2 + READERS);

	for (int i = 0; i < READERS; i++) {
		assert_ok(odx_buffer_read(dst[i], 0, got, sizeof(got), TEST_TIMEOUT_MS));
		for (int e = 0; e < ELEMS; e++)
			assert_int_equal(got[e], init[e] * 3 + 1 + (uint64_t)i);
		assert_ok(odx_buffer_destroy(dst[i]));
	}
	assert_ok(odx_close(ctx));
}

/* NONBLOCK submissions are refused with ODX_EAGAIN once sched.max_inflight tasks are unfinished. */
static void test_backpressure_nonblock(void **state)
{
	odx_context *ctx = open_ctx("1", "16");
	odx_kernel *gk = test_host_kernel(ctx, "gate", NULL, 0, gate_kernel);
	odx_kernel *count = test_host_kernel(ctx, "count", NULL, 0, count_kernel);
	odx_event *const sentinel = (odx_event *)(uintptr_t)0x99;
	odx_event *ev = sentinel;
	odx_task_opts nonblock = {.flags = ODX_SUBMIT_NONBLOCK};
	long accepted = 0;
	int rc = 0;

	(void)state;
	assert_ok(odx_submit(ctx, gk, NULL, 0, NULL, NULL));
	assert_true(gate_wait_for(&gate.entered));
	while (accepted < 1000) {
		rc = odx_submit(ctx, count, NULL, 0, &nonblock, &ev);
		if (rc != 0)
			break;
		odx_event_release(ev);
		ev = sentinel;
		accepted++;
	}
	assert_rc(rc, ODX_EAGAIN);
	assert_ptr_equal(ev, sentinel);
	/* the gate plus what was accepted: the bound, give or take the runtime's own slack */
	if (accepted + 1 < 16 || accepted + 1 > 20)
		fail_msg("ODX_EAGAIN with %ld tasks in flight, max_inflight is 16", accepted + 1);
	/* still refused while the gate holds */
	assert_rc(odx_submit(ctx, count, NULL, 0, &nonblock, NULL), ODX_EAGAIN);
	assert_int_equal(atomic_load(&tasks_run), 0);

	gate_open();
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&tasks_run), accepted + 1);
	/* room again */
	assert_ok(odx_submit(ctx, count, NULL, 0, &nonblock, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&tasks_run), accepted + 2);
	assert_ok(odx_close(ctx));
}

struct submitter {
	odx_context *ctx;
	odx_kernel *count;
	int n;
	atomic_int submitted;
	int rc;
};

static void *submitter_thread(void *arg)
{
	struct submitter *s = arg;

	for (int i = 0; i < s->n; i++) {
		s->rc = odx_submit(s->ctx, s->count, NULL, 0, NULL, NULL);
		if (s->rc != 0)
			break;
		atomic_fetch_add(&s->submitted, 1);
	}
	return NULL;
}

/* Blocking submissions stop at the bound while the gate holds, and all finish once it opens. */
static void test_backpressure_blocks(void **state)
{
	odx_context *ctx = open_ctx("1", "16");
	odx_kernel *gk = test_host_kernel(ctx, "gate", NULL, 0, gate_kernel);
	struct submitter s = {.ctx = ctx, .n = 500};
	pthread_t th;
	int polls = 0;

	(void)state;
	s.count = test_host_kernel(ctx, "count", NULL, 0, count_kernel);
	assert_ok(odx_submit(ctx, gk, NULL, 0, NULL, NULL));
	assert_true(gate_wait_for(&gate.entered));
	assert_int_equal(pthread_create(&th, NULL, submitter_thread, &s), 0);
	/* wait (bounded) until the submitter filled the window: gate + 15 = 16 in flight */
	while (atomic_load(&s.submitted) < 15 && polls++ < TEST_TIMEOUT_MS) {
		struct timespec ms = {0, 1000000};

		nanosleep(&ms, NULL);
	}
	/* nothing finishes while the gate holds, so no more can have been accepted */
	assert_int_equal(atomic_load(&s.submitted), 15);
	gate_open();
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_ok(s.rc);
	assert_int_equal(atomic_load(&s.submitted), s.n);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&tasks_run), s.n + 1);
	assert_ok(odx_close(ctx));
}

/* Close right after submissions that are held back by the gate. */
static void test_close_behind_gate(void **state)
{
	odx_context *ctx = open_ctx("1", NULL);
	odx_kernel *gk = test_host_kernel(ctx, "gate", NULL, 0, gate_kernel);
	odx_kernel *count = test_host_kernel(ctx, "count", NULL, 0, count_kernel);

	(void)state;
	assert_ok(odx_submit(ctx, gk, NULL, 0, NULL, NULL));
	for (int i = 0; i < 100; i++)
		assert_ok(odx_submit(ctx, count, NULL, 0, NULL, NULL));
	assert_true(gate_wait_for(&gate.entered));
	gate_open();
	assert_ok(odx_close(ctx));
	assert_int_equal(atomic_load(&tasks_run), 101);
}

/* A kernel destroyed while its tasks are pending: they still run. */
static void test_kernel_destroy_pending(void **state)
{
	odx_context *ctx = open_ctx("1", NULL);
	odx_kernel *gk = test_host_kernel(ctx, "gate", NULL, 0, gate_kernel);
	odx_kernel *count = test_host_kernel(ctx, "count", NULL, 0, count_kernel);

	(void)state;
	assert_ok(odx_submit(ctx, gk, NULL, 0, NULL, NULL));
	for (int i = 0; i < 10; i++)
		assert_ok(odx_submit(ctx, count, NULL, 0, NULL, NULL));
	assert_ok(odx_kernel_destroy(count));
	assert_ok(odx_kernel_destroy(gk));
	assert_true(gate_wait_for(&gate.entered));
	gate_open();
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&tasks_run), 11);
	assert_ok(odx_close(ctx));
}

/*
 * Timeouts while the gate holds the writer: waits report ODX_ETIMEDOUT without side effects, a
 * read or write that timed out does nothing, and everything completes once the gate opens.
 */
static void test_timeouts(void **state)
{
	enum { ELEMS = 64 };
	odx_context *ctx = open_ctx("1", NULL);
	odx_kernel *gate_rw = test_host_kernel(
		ctx, "gate_rw", (odx_param[]){{ODX_ARG_BUFFER, ODX_RW, "buf"}}, 1, gate_kernel);
	uint64_t init[ELEMS], got[ELEMS], other[ELEMS];
	odx_buffer *b;
	odx_event *ev;

	(void)state;
	for (int e = 0; e < ELEMS; e++) {
		init[e] = (uint64_t)e;
		other[e] = 1000;
	}
	assert_ok(odx_buffer_create(ctx, sizeof(init), 0, &b));
	assert_ok(odx_buffer_write(b, 0, init, sizeof(init), TEST_TIMEOUT_MS));
	assert_ok(odx_submit(ctx, gate_rw, (odx_arg[]){ODX_BUF(b, 0)}, 1, NULL, &ev));
	assert_true(gate_wait_for(&gate.entered));

	assert_rc(odx_event_query(ev), ODX_EAGAIN);
	assert_rc(odx_event_wait(ev, 0), ODX_ETIMEDOUT);
	assert_rc(odx_event_wait(ev, 1), ODX_ETIMEDOUT);
	assert_rc(odx_wait_all(ctx, 0), ODX_ETIMEDOUT);
	assert_rc(odx_wait_all(ctx, 1), ODX_ETIMEDOUT);
	memset(got, 0xee, sizeof(got));
	assert_rc(odx_buffer_read(b, 0, got, sizeof(got), 0), ODX_ETIMEDOUT);
	assert_rc(odx_buffer_read(b, 0, got, sizeof(got), 1), ODX_ETIMEDOUT);
	for (int e = 0; e < ELEMS; e++)
		assert_true(got[e] == 0xeeeeeeeeeeeeeeeeull);
	/* a write that timed out is not applied later */
	assert_rc(odx_buffer_write(b, 0, other, sizeof(other), 0), ODX_ETIMEDOUT);
	assert_rc(odx_buffer_write(b, 0, other, sizeof(other), 1), ODX_ETIMEDOUT);
	assert_int_equal(atomic_load(&tasks_run), 0);

	gate_open();
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	assert_ok(odx_event_query(ev));
	odx_event_release(ev);
	/* timeouts are not task failures */
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	assert_memory_equal(got, init, sizeof(init));
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_close(ctx));
}

static int order_log[8];
static atomic_int order_n;

/* order(i32 id): logs the order in which tasks run. */
static int order_kernel(const odx_host_launch *l)
{
	int slot = atomic_fetch_add(&order_n, 1);

	if (slot < 8)
		order_log[slot] = *(const int32_t *)l->scalars[0];
	return 0;
}

/* Among ready tasks of one device, a higher priority runs first; equal priorities in FIFO order. */
static void test_priority_order(void **state)
{
	static const int prio[6] = {0, 5, 1, 5, -2, 1};
	static const int want[6] = {1, 3, 2, 5, 0, 4};
	odx_context *ctx = open_ctx("1", NULL);
	odx_kernel *gk = test_host_kernel(ctx, "gate", NULL, 0, gate_kernel);
	odx_kernel *ok = test_host_kernel(ctx, "order", (odx_param[]){{ODX_ARG_I32, 0, "id"}}, 1,
					  order_kernel);

	(void)state;
	atomic_store(&order_n, 0);
	assert_ok(odx_submit(ctx, gk, NULL, 0, &(odx_task_opts){.priority = 100}, NULL));
	assert_true(gate_wait_for(&gate.entered));
	for (int i = 0; i < 6; i++)
		assert_ok(odx_submit(ctx, ok, (odx_arg[]){ODX_I32(i)}, 1,
				     &(odx_task_opts){.priority = prio[i],
						      .flags = ODX_SUBMIT_ON_DEVICE,
						      .on_device = 0},
				     NULL));
	gate_open();
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&order_n), 6);
	for (int i = 0; i < 6; i++) {
		if (order_log[i] != want[i])
			fail_msg("position %d ran task %d (priority %d), expected task %d "
				 "(priority %d)",
				 i, order_log[i], prio[order_log[i]], want[i], prio[want[i]]);
	}
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_close_completes_pending),
		cmocka_unit_test(test_close_with_events_held),
		cmocka_unit_test(test_destroy_while_in_use),
		cmocka_unit_test(test_backpressure_nonblock),
		cmocka_unit_test(test_backpressure_blocks),
		cmocka_unit_test(test_close_behind_gate),
		cmocka_unit_test(test_kernel_destroy_pending),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_priority_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
