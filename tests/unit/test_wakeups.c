/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wakeups.c - white-box: a thread waiting for the end of a task graph is woken when its
 * condition holds, not once per completed task (on a 2-core machine every needless wake-up of the
 * application thread takes a core from a worker).
 *
 * A gate task holds a chain of CHAIN tasks back until the test knows the waiter is asleep in
 * odx_wait_all (or odx_event_wait on the chain's last task); then the chain runs and the context's
 * wake-up counter (ctx->wakeups: returns from the wait's condition variable) must have moved by a
 * few, not by about CHAIN. Independent of timing: the chain cannot start before the waiter sleeps,
 * and whatever the interleaving the waiter's condition turns true once.
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
#include "test_util.h"

#define CHAIN 500
/* wake-ups allowed: the one that ends the wait, and a few from other broadcasts */
#define WAKEUPS_MAX 4

static int k_step(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];

	/* long enough that the woken waiter is back asleep before the next completion */
	usleep(20);
	x[0]++;
	return 0;
}

struct opener {
	odx_context *ctx;
	_Atomic int *kind; /* the waiter counter that says the waiter is in */
};

/* Opens the gate once the application thread waits (its counter raised, then asleep or about
 * to be: completions before it sleeps are seen by its condition check, not counted as wake-ups). */
static void *open_when_waiting(void *arg)
{
	struct opener *o = arg;

	for (int i = 0; i < 600000 && atomic_load(o->kind) == 0; i++)
		usleep(100);
	usleep(2000); /* into its condition variable (not needed for correctness: see above) */
	atomic_store(test_gate(), 1);
	return NULL;
}

static void run(bool event)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false", NULL};
	static const odx_param p[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *gate = test_host_kernel(ctx, "gate", p, 1, test_gate_fn);
	odx_kernel *step = test_host_kernel(ctx, "step", p, 1, k_step);
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
	odx_event *last = NULL;
	odx_buffer *b;
	uint32_t x = 0;
	pthread_t th;
	uint64_t before, woken;
	struct opener op = {ctx, event ? &ctx->waiters_targeted : &ctx->waiters_all};

	atomic_store(test_gate(), 0);
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(b, ODX_RW)}, 1, &o, NULL));
	for (int i = 0; i < CHAIN; i++)
		assert_ok(odx_submit(ctx, step, (odx_arg[]){ODX_BUF(b, ODX_RW)}, 1, &o,
				     i == CHAIN - 1 && event ? &last : NULL));
	assert_int_equal(pthread_create(&th, NULL, open_when_waiting, &op), 0);
	before = atomic_load(&ctx->wakeups);
	if (event)
		assert_ok(odx_event_wait(last, TEST_TIMEOUT_MS));
	else
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	woken = atomic_load(&ctx->wakeups) - before;
	pthread_join(th, NULL);
	assert_ok(odx_buffer_read(b, 0, &x, sizeof(x), TEST_TIMEOUT_MS));
	assert_int_equal(x, CHAIN);
	printf("%s: %llu wake-ups for %d tasks\n", event ? "odx_event_wait" : "odx_wait_all",
	       (unsigned long long)woken, CHAIN + 1);
	if (woken > WAKEUPS_MAX)
		fail_msg("the waiter was woken %llu times for one condition (%d at most)",
			 (unsigned long long)woken, WAKEUPS_MAX);
	if (last)
		odx_event_release(last);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

static void test_wait_all_wakeups(void **state)
{
	(void)state;
	run(false);
}

static void test_event_wait_wakeups(void **state)
{
	(void)state;
	run(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_all_wakeups),
		cmocka_unit_test(test_event_wait_wakeups),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
