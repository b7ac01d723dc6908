/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_steal.c - white-box: scheduling between CPU devices that share one memory
 * (host.memnode = shared, the default).
 *
 *  - direct successor: a chain of tasks, held back by a gate until it is all submitted, runs
 *    entirely on the device that ran the gate: a worker whose completion makes the next task
 *    ready keeps it (placement prefers it on a tie), with no hand-off to the other worker, and
 *    runs it directly, outside its queue (every step counted in direct_runs);
 *  - work stealing: with round-robin placement, a task forced onto device 1 holds it until every
 *    other task has run, while half of them were placed behind it: only device 0 taking them
 *    from device 1's queue lets the hold end (a 60 s guard fails the test otherwise), and the
 *    tasks of each queue still run in the order they were queued (device 0 runs them all, one
 *    at a time: each queue's tasks, own or taken, in submission order);
 *  - past forced tasks: a thief takes the tasks it may take from behind ones forced onto the
 *    victim, in their order, leaving the forced ones in theirs;
 *  - no thief is woken for a task queued on a device whose worker is polling for work (counted
 *    wake-ups, with the device's state set by the test while its worker is held);
 *  - sched.steal = false: devices keep what was placed on them (the chain test's counts).
 * Independent of timing: each outcome follows from the order the test imposes.
 */
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
#include "test_util.h"

#define CHAIN 300
#define SPREAD 64

static atomic_int ran;

static int k_step(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];

	x[0]++;
	atomic_fetch_add(&ran, 1);
	return 0;
}

/* Which step ran n-th (steps record themselves in the order they ran). */
static int order[SPREAD];

static int k_step_at(const odx_host_launch *l)
{
	int n = atomic_load(&ran);

	order[n < SPREAD ? n : SPREAD - 1] = *(const int32_t *)l->scalars[1];
	return k_step(l);
}

/* Holds device 1 until every other task ran. */
static int k_hold(const odx_host_launch *l)
{
	int want = *(const int32_t *)l->scalars[1];

	for (int i = 0; i < 600000 && atomic_load(&ran) < want; i++)
		usleep(100);
	if (atomic_load(&ran) < want) {
		snprintf(l->error, l->error_size, "%d of %d tasks ran: nobody took the ones queued "
			 "behind this one", atomic_load(&ran), want);
		return 1;
	}
	return 0;
}

static void test_direct_successor(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *gate = test_host_kernel(ctx, "gate", p, 1, test_gate_fn);
	odx_kernel *step = test_host_kernel(ctx, "step", p, 1, k_step);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	uint64_t run0, run1;
	odx_buffer *b;
	uint32_t x = 0;

	(void)state;
	atomic_store(test_gate(), 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(b, ODX_RW)}, 1, &o, NULL));
	for (int i = 0; i < CHAIN; i++)
		assert_ok(odx_submit(ctx, step, (odx_arg[]){ODX_BUF(b, ODX_RW)}, 1, &o, NULL));
	atomic_store(test_gate(), 1);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b, 0, &x, sizeof(x), TEST_TIMEOUT_MS));
	assert_int_equal(x, CHAIN);
	run0 = atomic_load(&ctx->devices[0].tasks_run);
	run1 = atomic_load(&ctx->devices[1].tasks_run);
	printf("chain of %d after a gate: device 0 ran %llu, device 1 ran %llu\n", CHAIN,
	       (unsigned long long)run0, (unsigned long long)run1);
	/* the gate and every step on one device (the read ran on the caller's thread) */
	if (!((run0 >= CHAIN + 1 && run1 == 0) || (run1 >= CHAIN + 1 && run0 == 0)))
		fail_msg("the chain moved between the devices: %llu and %llu tasks",
			 (unsigned long long)run0, (unsigned long long)run1);
	/* and each step ran directly after the one whose completion made it ready, outside the
	 * queue: nothing else was ever queued there */
	assert_int_equal(atomic_load(&ctx->devices[run0 ? 0 : 1].direct_runs), CHAIN);
	assert_int_equal(atomic_load(&ctx->devices[run0 ? 1 : 0].direct_runs), 0);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

static void test_steal_from_held_device(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false",
					 "policy", "round_robin", NULL};
	static const odx_param ph[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_I32, 0, "want"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *hold = test_host_kernel(ctx, "hold", ph, 2, k_hold);
	odx_kernel *step = test_host_kernel(ctx, "step_at", ph, 2, k_step_at);
	odx_task_opts forced = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .device = 2};
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx_buffer *h, *b[SPREAD];
	uint64_t stolen;

	(void)state;
	atomic_store(&ran, 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &h));
	assert_ok(odx_submit(ctx, hold, (odx_arg[]){ODX_BUF(h, ODX_RW), ODX_I32(SPREAD)}, 2,
			     &forced, NULL));
	for (int i = 0; i < SPREAD; i++) {
		assert_ok(odx_buffer_create(ctx, 64, 0, &b[i]));
		assert_ok(odx_submit(ctx, step, (odx_arg[]){ODX_BUF(b[i], ODX_RW), ODX_I32(i)}, 2,
				     &o, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), SPREAD);
	/* round robin dealt the steps by parity: within each queue, submission order */
	for (int n = 0, last[2] = {-1, -1}; n < SPREAD; n++) {
		if (order[n] <= last[order[n] % 2])
			fail_msg("step %d ran after step %d of the same queue", order[n],
				 last[order[n] % 2]);
		last[order[n] % 2] = order[n];
	}
	stolen = atomic_load(&ctx->devices[0].stolen);
	printf("device 0 took %llu tasks from device 1's queue\n", (unsigned long long)stolen);
	/* round robin put about half behind the hold */
	assert_true(stolen >= SPREAD / 2 - 1);
	for (int i = 0; i < SPREAD; i++)
		odx_buffer_destroy(b[i]);
	odx_buffer_destroy(h);
	assert_ok(odx_close(ctx));
}

static int k_nothing(const odx_host_launch *l)
{
	(void)l;
	return 0;
}

#define PAST 6 /* steps taken past forced tasks: within the thief's look-ahead (8) */

/* A thief takes a task from behind tasks forced onto its victim (it may not take those): with
 * round robin every step lands on device 1 behind the hold, each followed by a task forced
 * there, so device 0 takes step k past k forced tasks, and the victim's queue keeps its order:
 * steps in submission order, every forced task still there after the hold. */
static void test_steal_past_forced(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false",
					 "policy", "round_robin", NULL};
	static const odx_param ph[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_I32, 0, "want"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *hold = test_host_kernel(ctx, "hold", ph, 2, k_hold);
	odx_kernel *step = test_host_kernel(ctx, "step_at", ph, 2, k_step_at);
	odx_kernel *late = test_host_kernel(ctx, "late", NULL, 0, k_nothing);
	odx_task_opts forced = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .device = 2};
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx_buffer *h, *b[PAST];

	(void)state;
	atomic_store(&ran, 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &h));
	assert_ok(odx_submit(ctx, hold, (odx_arg[]){ODX_BUF(h, ODX_RW), ODX_I32(PAST)}, 2,
			     &forced, NULL));
	for (int i = 0; i < PAST; i++) {
		assert_ok(odx_buffer_create(ctx, 64, 0, &b[i]));
		assert_ok(odx_submit(ctx, step, (odx_arg[]){ODX_BUF(b[i], ODX_RW), ODX_I32(i)}, 2,
				     &o, NULL));
		assert_ok(odx_submit(ctx, late, NULL, 0, &forced, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ran), PAST);
	for (int n = 0; n < PAST; n++)
		assert_int_equal(order[n], n);
	assert_int_equal(atomic_load(&ctx->devices[0].stolen), PAST);
	/* the hold and the forced tasks ran on device 1 */
	assert_int_equal(atomic_load(&ctx->devices[1].tasks_run), 1 + PAST);
	for (int i = 0; i < PAST; i++)
		odx_buffer_destroy(b[i]);
	odx_buffer_destroy(h);
	assert_ok(odx_close(ctx));
}

static atomic_int gate_entered;

static int k_gate_entered(const odx_host_launch *l)
{
	atomic_store(&gate_entered, 1);
	return test_gate_fn(l);
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

/* A task queued on a busy device wakes a sleeping peer to take it; one queued on a device whose
 * worker is polling for work (between two looks at its queue) does not: that worker takes it at
 * once, and a thief would find it gone. Device 1's worker is held in a gate, device 0's asleep
 * (sched.idle_spin_us = 0); the test marks device 1 polling, as its worker does around
 * poll_for_work, then not, and counts the thieves woken by a push to it in each state. */
static void test_no_thief_for_polling_worker(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false",
					 "sched.idle_spin_us", "0", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *gate = test_host_kernel(ctx, "gate", p, 1, k_gate_entered);
	odx_kernel *late = test_host_kernel(ctx, "late", NULL, 0, k_nothing);
	odx_task_opts on1 = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .device = 2};
	odx__device *dev1 = &ctx->devices[1];
	odx_buffer *h;
	uint64_t base;

	(void)state;
	atomic_store(test_gate(), 0);
	atomic_store(&gate_entered, 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &h));
	assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(h, ODX_RW)}, 1, &on1, NULL));
	for (int i = 0; i < TEST_TIMEOUT_MS * 10 && !atomic_load(&gate_entered); i++)
		usleep(100);
	assert_true(atomic_load(&gate_entered));
	wait_asleep(ctx, 0);

	base = atomic_load(&ctx->thief_wakes);
	pthread_mutex_lock(&dev1->lock);
	dev1->polling = true;
	pthread_mutex_unlock(&dev1->lock);
	assert_ok(odx_submit(ctx, late, NULL, 0, &on1, NULL));
	assert_int_equal(atomic_load(&ctx->thief_wakes), base);

	pthread_mutex_lock(&dev1->lock);
	dev1->polling = false;
	pthread_mutex_unlock(&dev1->lock);
	wait_asleep(ctx, 0);
	base = atomic_load(&ctx->thief_wakes);
	assert_ok(odx_submit(ctx, late, NULL, 0, &on1, NULL));
	assert_int_equal(atomic_load(&ctx->thief_wakes), base + 1);

	atomic_store(test_gate(), 1);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&dev1->tasks_run), 3);
	odx_buffer_destroy(h);
	assert_ok(odx_close(ctx));
}

/* Private memories (tests' emulation of discrete devices): nothing is stolen, since the task
 * would need its inputs copied; the hold is released by its own device's queue draining
 * instead... which it cannot: so only the chain case runs here, counting no steals. */
static void test_no_steal_between_private_memories(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false",
					 "host.memnode", "private", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *step = test_host_kernel(ctx, "step", p, 1, k_step);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx_buffer *b[SPREAD];

	(void)state;
	for (int i = 0; i < SPREAD; i++) {
		assert_ok(odx_buffer_create(ctx, 64, 0, &b[i]));
		assert_ok(odx_submit(ctx, step, (odx_arg[]){ODX_BUF(b[i], ODX_RW)}, 1, &o, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ctx->devices[0].stolen) + atomic_load(&ctx->devices[1].stolen),
			 0);
	for (int i = 0; i < SPREAD; i++)
		odx_buffer_destroy(b[i]);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_direct_successor),
		cmocka_unit_test(test_steal_from_held_device),
		cmocka_unit_test(test_steal_past_forced),
		cmocka_unit_test(test_no_thief_for_polling_worker),
		cmocka_unit_test(test_no_steal_between_private_memories),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
