/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_taskpath.c - white-box tests of an empty task's path (issue 23), by counts, not times:
 *  - tasks pushed to a device whose worker is busy go through its inbox ring without its lock
 *    and without a wake-up, and the worker takes them from there in push order; past the
 *    ring's capacity they go to the queue under the lock, still in order;
 *  - a push to a sleeping worker wakes it (one wake-up), a push to a busy one does not;
 *  - the tasks a worker frees go back to the pool in batches, not one compare-and-swap each;
 *  - a Lua policy that never reads run times (lua:eager) has its tasks run with no clock read
 *    for it; one that reads them (lua:heft, batch.estimate) turns the timing on;
 *  - the policy's lock-free pending list loses no task pushed from several threads at once;
 *  - a worker with nothing queued under its lock takes from its inbox without the lock, and
 *    a task queued under the lock meanwhile (another priority) still comes first;
 *  - staging a task whose buffers are all allocated on a host node skips the allocation pass
 *    (one buffer lock fewer per buffer), and the chain's bytes are still right;
 *  - a worker asleep is woken once for a burst of pushes: while a wake-up is pending, pushes
 *    take neither its lock nor send another; a lone task pushed to a sleeping worker is run
 *    without any later push (no lost wake-up), one device or two sharing memory;
 *  - only a task that set run-time lengths has its length fields cleared on its return to the
 *    pool.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core.h"
#include "policy.h"
#include "test_util.h"

#define NTASKS 100

static atomic_int entered, ran;

/* test_gate_fn, telling the test it is running (the worker is busy, not asleep or polling) */
static int k_gate(const odx_host_launch *l)
{
	atomic_store(&entered, 1);
	return test_gate_fn(l);
}

static int k_empty(const odx_host_launch *l)
{
	(void)l;
	atomic_fetch_add(&ran, 1);
	return 0;
}

static void wait_flag(atomic_int *f)
{
	for (int i = 0; i < TEST_TIMEOUT_MS * 10 && !atomic_load(f); i++)
		usleep(100);
	if (!atomic_load(f))
		fail_msg("the gate kernel never started");
}

/* Closes the gate and runs the gate kernel on b: returns once device 0's worker is inside it
 * (busy: not asleep, not polling) until the test opens the gate. */
static void hold_worker(odx_context *ctx, odx_kernel *gate, odx_buffer *b)
{
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};

	atomic_store(test_gate(), 0);
	atomic_store(&entered, 0);
	assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(b, ODX_RW)}, 1, &o, NULL));
	wait_flag(&entered);
}

/* Waits (up to the test timeout) until device d's worker sleeps. */
static void wait_asleep(odx_context *ctx, int d)
{
	odx__device *dev = &ctx->devices[d];
	bool asleep = false;

	for (int i = 0; i < TEST_TIMEOUT_MS * 10 && !asleep; i++) {
		pthread_mutex_lock(&dev->lock);
		asleep = dev->sleeping;
		pthread_mutex_unlock(&dev->lock);
		if (!asleep)
			usleep(100);
	}
	if (!asleep)
		fail_msg("device %d's worker never went to sleep", d);
}

static void test_inbox_batch(void **state)
{
	static const char *const kv[] = {"host.devices", "1", "host.bind", "false", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *gate = test_host_kernel(ctx, "gate", p, 1, k_gate);
	odx_kernel *empty = test_host_kernel(ctx, "empty", NULL, 0, k_empty);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx__device *dev = &ctx->devices[0];
	uint64_t drains, tasks, wakes, flushes;
	odx_buffer *b;

	(void)state;
	atomic_store(&ran, 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	hold_worker(ctx, gate, b);
	flushes = atomic_load(&dev->ret_flushes);
	drains = atomic_load(&dev->inbox_drains);
	tasks = atomic_load(&dev->inbox_tasks);
	wakes = atomic_load(&dev->push_wakes);
	/* the worker is inside the gate: each push is one compare-and-swap, no lock, no wake-up */
	for (int i = 0; i < NTASKS; i++)
		assert_ok(odx_submit(ctx, empty, NULL, 0, &o, NULL));
	assert_int_equal(atomic_load(&dev->push_wakes), wakes);
	assert_int_equal(atomic_load(&dev->inbox_tasks), tasks);
	atomic_store(test_gate(), 1);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), NTASKS);
	printf("%d tasks pushed to a busy worker: %llu drains, %llu tasks from the ring, %llu "
	       "wake-ups\n",
	       NTASKS, (unsigned long long)(atomic_load(&dev->inbox_drains) - drains),
	       (unsigned long long)(atomic_load(&dev->inbox_tasks) - tasks),
	       (unsigned long long)(atomic_load(&dev->push_wakes) - wakes));
	/* all of them from the ring, none moved into the queue */
	assert_int_equal(atomic_load(&dev->inbox_tasks) - tasks, NTASKS);
	assert_int_equal(atomic_load(&dev->inbox_drains) - drains, 0);
	assert_int_equal(atomic_load(&dev->push_wakes), wakes);

	/* a push to a worker asleep wakes it: once (none if a spurious wake-up got it up first) */
	wait_asleep(ctx, 0);
	/* the gate and up to NTASKS tasks freed on the worker (others by this thread, when it
	 * dropped the last reference): whole batches of 32, and the rest when it went idle */
	flushes = atomic_load(&dev->ret_flushes) - flushes;
	printf("tasks freed on the worker went back to the pool in %llu batches\n",
	       (unsigned long long)flushes);
	assert_true(flushes >= 1 && flushes <= (NTASKS + 1) / 32 + 1);
	wakes = atomic_load(&dev->push_wakes);
	assert_ok(odx_submit(ctx, empty, NULL, 0, &o, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), NTASKS + 1);
	assert_true(atomic_load(&dev->push_wakes) - wakes <= 1);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

#define OVERFLOW (ODX__INBOX_CAP + 44)

static int seq[OVERFLOW];
static atomic_int nseq;

static int k_seq(const odx_host_launch *l)
{
	int n = atomic_fetch_add(&nseq, 1);

	if (n < OVERFLOW)
		seq[n] = *(const int32_t *)l->scalars[0];
	return 0;
}

/* More tasks than the ring holds, pushed while the worker is busy: the ring fills, the rest goes
 * to its overflow under the lock (no drain into the queue), the worker refills the ring from it
 * once it emptied the ring, and every task runs in submission order, all through the ring. */
static void test_inbox_full(void **state)
{
	static const char *const kv[] = {"host.devices", "1", "host.bind", "false", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	static const odx_param pi[] = {{ODX_ARG_I32, 0, "i"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *gate = test_host_kernel(ctx, "gate", p, 1, k_gate);
	odx_kernel *k = test_host_kernel(ctx, "seq", pi, 1, k_seq);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx__device *dev = &ctx->devices[0];
	uint64_t drains, tasks, refills;
	odx_buffer *b;

	(void)state;
	atomic_store(&nseq, 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	hold_worker(ctx, gate, b);
	drains = atomic_load(&dev->inbox_drains);
	tasks = atomic_load(&dev->inbox_tasks);
	for (int i = 0; i < OVERFLOW; i++)
		assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_I32(i)}, 1, &o, NULL));
	/* the pushes past the ring's capacity wait in the overflow; nothing was drained */
	assert_int_equal(atomic_load(&dev->over_n), OVERFLOW - ODX__INBOX_CAP);
	assert_int_equal(atomic_load(&dev->inbox_drains) - drains, 0);
	assert_int_equal(atomic_load(&dev->inbox_tasks) - tasks, 0);
	refills = atomic_load(&dev->over_refills);
	atomic_store(test_gate(), 1);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&nseq), OVERFLOW);
	for (int i = 0; i < OVERFLOW; i++)
		if (seq[i] != i)
			fail_msg("task %d ran in place %d", seq[i], i);
	/* every one through the ring: the overflow's 44 in one refill */
	assert_int_equal(atomic_load(&dev->inbox_tasks) - tasks, OVERFLOW);
	assert_int_equal(atomic_load(&dev->over_refills) - refills, 1);
	assert_int_equal(atomic_load(&dev->inbox_drains) - drains, 0);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

/* The worker took the gate with nothing else queued: the NTASKS pushed behind it, all through
 * the ring, are taken without its lock (counted: unlocked_takes), in order. Then a task of
 * priority 1, queued under the lock while the worker is busy, ahead of NTASKS more in the ring:
 * the worker looks under its lock first and runs it first; the rest still run in order. */
static void test_inbox_unlocked(void **state)
{
	static const char *const kv[] = {"host.devices", "1", "host.bind", "false", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	static const odx_param pi[] = {{ODX_ARG_I32, 0, "i"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *gate = test_host_kernel(ctx, "gate", p, 1, k_gate);
	odx_kernel *k = test_host_kernel(ctx, "seq", pi, 1, k_seq);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx_task_opts hi = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .priority = 1};
	odx__device *dev = &ctx->devices[0];
	uint64_t unlocked;
	odx_buffer *b;

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	for (int round = 0; round < 2; round++) {
		atomic_store(&nseq, 0);
		hold_worker(ctx, gate, b);
		unlocked = atomic_load(&dev->unlocked_takes);
		if (round == 1)
			assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_I32(-1)}, 1, &hi, NULL));
		for (int i = 0; i < NTASKS; i++)
			assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_I32(i)}, 1, &o, NULL));
		/* none taken while the worker is in the gate */
		assert_int_equal(atomic_load(&dev->unlocked_takes), unlocked);
		atomic_store(test_gate(), 1);
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
		unlocked = atomic_load(&dev->unlocked_takes) - unlocked;
		printf("round %d: %llu of %d tasks taken from the inbox without the lock\n", round,
		       (unsigned long long)unlocked, NTASKS);
		assert_int_equal(atomic_load(&nseq), NTASKS + round);
		if (round == 0) {
			assert_int_equal(unlocked, NTASKS);
		} else {
			assert_int_equal(seq[0], -1);
			/* the look under the lock took a batch with it; the rest without the lock */
			assert_true(unlocked >= 1 && unlocked < NTASKS);
		}
		for (int i = 0; i < NTASKS; i++)
			if (seq[i + round] != i)
				fail_msg("task %d ran in place %d", seq[i + round], i + round);
	}
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

static int k_add1(const odx_host_launch *l)
{
	int32_t *a = l->buffers[0], *b = l->buffers[1];

	a[0] += 1;
	b[0] += 2;
	return 0;
}

/* A chain of NTASKS tasks over two buffers on one host device: the first staging allocates
 * them, every later one finds both allocated and skips alloc_missing (counted per node); the
 * sums show every task saw its predecessor's bytes. */
static void test_stage_skips_alloc(void **state)
{
	static const char *const kv[] = {"host.devices", "1", "host.bind", "false", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}, {ODX_ARG_BUFFER, ODX_RW, "b"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *k = test_host_kernel(ctx, "add1", p, 2, k_add1);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	int m = ctx->devices[0].memnode;
	uint64_t skips = atomic_load(&ctx->memnodes[m].alloc_skips);
	int32_t va = 0, vb = 0;
	odx_buffer *a, *b;

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &a));
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	for (int i = 0; i < NTASKS; i++)
		assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_BUF(b, ODX_RW)}, 2,
				     &o, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	skips = atomic_load(&ctx->memnodes[m].alloc_skips) - skips;
	printf("%llu of %d stagings skipped the allocation pass\n", (unsigned long long)skips,
	       NTASKS);
	assert_true(skips >= NTASKS - 1 && skips <= NTASKS);
	assert_ok(odx_buffer_read(a, 0, &va, sizeof(va), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b, 0, &vb, sizeof(vb), TEST_TIMEOUT_MS));
	assert_int_equal(va, NTASKS);
	assert_int_equal(vb, 2 * NTASKS);
	odx_buffer_destroy(a);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

/* Runs NTASKS empty tasks under `policy`; returns whether its tasks were timed afterwards. */
static bool run_under(const char *policy)
{
	const char *const kv[] = {"host.devices", "2", "host.bind", "false", "policy", policy, NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *empty = test_host_kernel(ctx, "empty", NULL, 0, k_empty);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	bool timed;

	assert_non_null(ctx->policy);
	atomic_store(&ran, 0);
	for (int i = 0; i < NTASKS; i++)
		assert_ok(odx_submit(ctx, empty, NULL, 0, &o, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), NTASKS);
	timed = odx__policy_wants_times(ctx->policy);
	assert_ok(odx_close(ctx));
	return timed;
}

static void test_policy_times_only_when_read(void **state)
{
	(void)state;
	/* eager reads queue lengths and feasibility only */
	assert_false(run_under("lua:eager"));
	/* heft reads batch.estimate: its models need run times from its first batch on */
	assert_true(run_under("lua:heft"));
}

#define PER_THREAD 2000

static odx_kernel *shared_empty;

static void *submitter(void *arg)
{
	odx_context *ctx = arg;
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};

	for (int i = 0; i < PER_THREAD; i++)
		if (odx_submit(ctx, shared_empty, NULL, 0, &o, NULL) != 0)
			return (void *)1;
	return NULL;
}

static void test_policy_pending_threads(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false",
					 "policy", "lua:eager", NULL};
	odx_context *ctx = test_open_ctx(kv);
	pthread_t th[3];
	void *rc;

	(void)state;
	assert_non_null(ctx->policy);
	shared_empty = test_host_kernel(ctx, "empty", NULL, 0, k_empty);
	atomic_store(&ran, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, submitter, ctx), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pthread_join(th[i], &rc), 0);
		assert_null(rc);
	}
	/* a task lost between a push and a drain would keep this from returning */
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), 3 * PER_THREAD);
	assert_ok(odx_close(ctx));
}

#define BURST 100

/* A push to a sleeping worker with a wake-up pending neither takes the worker's lock nor sends
 * another. The test holds the worker's lock while it sleeps and plays the first waker itself
 * (marks the wake-up pending, bumps the futex word): the woken worker then waits for the lock,
 * so it cannot clear the mark or sleep again, and each of the 100 pushes after must skip (one
 * that took the lock would block here: the test times out; one that sent a wake-up is
 * counted). Then, with nothing held, bursts of pushes: no more wake-ups sent than sleeps
 * announced (one device: the worker holds its lock from announcing sleep to its wait). */
static void test_wake_pending(void **state)
{
	static const char *const kv[] = {"host.devices", "1", "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *empty = test_host_kernel(ctx, "empty", NULL, 0, k_empty);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx__device *dev = &ctx->devices[0];
	uint64_t wakes, sleeps;
	bool held = false;

	(void)state;
	atomic_store(&ran, 0);
	/* the worker asleep, its lock in this thread's hands (it sleeps without it) */
	for (int i = 0; i < 100 && !held; i++) {
		wait_asleep(ctx, 0);
		pthread_mutex_lock(&dev->lock);
		held = dev->sleeping && !atomic_load(&dev->wake_pending);
		if (!held)
			pthread_mutex_unlock(&dev->lock);
	}
	assert_true(held);
	atomic_store(&dev->wake_pending, true);
	odx__device_signal(dev);
	wakes = atomic_load(&dev->push_wakes);
	for (int i = 0; i < BURST; i++)
		assert_ok(odx_submit(ctx, empty, NULL, 0, &o, NULL));
	uint64_t sent = atomic_load(&dev->push_wakes) - wakes;
	bool still = dev->sleeping;
	pthread_mutex_unlock(&dev->lock);
	assert_int_equal(sent, 0);
	assert_true(still);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), BURST);

	for (int round = 0; round < 5; round++) {
		wait_asleep(ctx, 0);
		wakes = atomic_load(&dev->push_wakes);
		sleeps = atomic_load(&dev->sleeps);
		for (int i = 0; i < BURST; i++)
			assert_ok(odx_submit(ctx, empty, NULL, 0, &o, NULL));
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
		/* the first push found it asleep: it was woken */
		assert_true(atomic_load(&dev->push_wakes) - wakes >= 1);
		/* + 1: the sleep it was in when the burst began */
		assert_true(atomic_load(&dev->push_wakes) - wakes <=
			    atomic_load(&dev->sleeps) - sleeps + 1);
	}
	assert_int_equal(atomic_load(&ran), 6 * BURST);
	printf("6 bursts of %d pushes to a sleeping worker: %llu wake-ups, %llu sleeps in all\n",
	       BURST, (unsigned long long)atomic_load(&dev->push_wakes),
	       (unsigned long long)atomic_load(&dev->sleeps));
	assert_ok(odx_close(ctx));
}

#define LONE_ROUNDS 40

/* A lone task pushed to a worker that sleeps (or is about to) runs with no later push to wake it:
 * each round waits until every worker sleeps, submits one task and waits for it (bounded by the
 * test timeout: a lost wake-up fails the wait). With two devices sharing memory the tasks also
 * go through thief wake-ups. */
static void test_lone_task_wakes(void **state)
{
	static const char *const one[] = {"host.devices", "1", "host.bind", "false", NULL};
	static const char *const two[] = {"host.devices", "2", "host.bind", "false", NULL};
	static const char *const *const kvs[] = {one, two};

	(void)state;
	for (int k = 0; k < 2; k++) {
		odx_context *ctx = test_open_ctx(kvs[k]);
		odx_kernel *empty = test_host_kernel(ctx, "empty", NULL, 0, k_empty);
		odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
		uint64_t sleeps = 0;

		atomic_store(&ran, 0);
		for (int r = 0; r < LONE_ROUNDS; r++) {
			for (int d = 0; d < ctx->ndevices; d++)
				wait_asleep(ctx, d);
			assert_ok(odx_submit(ctx, empty, NULL, 0, &o, NULL));
			assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
			assert_int_equal(atomic_load(&ran), r + 1);
		}
		for (int d = 0; d < ctx->ndevices; d++)
			sleeps += atomic_load(&ctx->devices[d].sleeps);
		/* every round found the workers asleep */
		assert_true(sleeps >= LONE_ROUNDS);
		assert_ok(odx_close(ctx));
	}
}

static int k_set_length(const odx_host_launch *l)
{
	l->set_length(l, 0, ODX_WHOLE_BUFFER, 16);
	return 0;
}

/* The length and transfer fields are cleared on a task's return to the pool only when it set
 * any (odx__lengths_task_reset, counted in length_resets): 200 empty kernels and one that
 * writes a buffer clear none, one that sets a length clears its own. */
static void test_length_reset_only_when_used(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *empty = test_host_kernel(ctx, "empty", NULL, 0, k_empty);
	odx_kernel *setlen = test_host_kernel(ctx, "setlen", p, 1, k_set_length);
	odx_kernel *touch = test_host_kernel(ctx, "touch", p, 1, k_empty);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	uint64_t base;
	odx_buffer *b;
	int i;

	(void)state;
	atomic_store(&ran, 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	base = atomic_load(&ctx->length_resets);
	for (i = 0; i < 200; i++)
		assert_ok(odx_submit(ctx, empty, NULL, 0, &o, NULL));
	assert_ok(odx_submit(ctx, setlen, (odx_arg[]){ODX_BUF(b, ODX_RW)}, 1, &o, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), 200);
	size_t len = 0;
	assert_ok(odx_buffer_length(b, &len, TEST_TIMEOUT_MS));
	assert_int_equal(len, 16);
	/* the buffer holds its last writer until a later one replaces it (an empty kernel, which
	 * sets no length) */
	assert_ok(odx_submit(ctx, touch, (odx_arg[]){ODX_BUF(b, ODX_RW)}, 1, &o, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), 201);
	/* the last reference to a task may be dropped just after its completion is seen */
	for (i = 0; i < TEST_TIMEOUT_MS * 10 && atomic_load(&ctx->length_resets) == base; i++)
		usleep(100);
	assert_int_equal(atomic_load(&ctx->length_resets) - base, 1);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inbox_batch),
		cmocka_unit_test(test_inbox_full),
		cmocka_unit_test(test_inbox_unlocked),
		cmocka_unit_test(test_stage_skips_alloc),
		cmocka_unit_test(test_policy_times_only_when_read),
		cmocka_unit_test(test_policy_pending_threads),
		cmocka_unit_test(test_wake_pending),
		cmocka_unit_test(test_lone_task_wakes),
		cmocka_unit_test(test_length_reset_only_when_used),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
