/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_place_cost.c - the Lua policy host alone: what one `place` call costs, per call and per
 * task, for batches of 1 to 64 tasks on two synthetic devices, with no runtime threads around
 * it (white box: odx__policy_place, as the context glue calls it). policy_overhead measures the
 * whole runtime; this isolates the part the policy host adds, which that measurement's noise
 * hides on a loaded machine. Median of REPEATS timed loops after a warm-up loop.
 *
 *	usage: policy_place_cost [-r REPEATS] [-c CALLS_PER_LOOP] [POLICY...]
 *	       (default policies: lua:eager lua:heft lua:lookahead)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "policy.h"

#define MAX_BATCH 64
#define MAX_REPEATS 64

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static const int batches[] = {1, 8, 32, 64};
	static const char *const defaults[] = {"lua:eager", "lua:heft", "lua:lookahead"};
	odx__policy_device devs[2] = {{"host", "dev0", 1u << 30}, {"host", "dev1", 1u << 30}};
	static odx__policy_task tasks[MAX_BATCH];
	static bool feasible[MAX_BATCH * 2];
	static uint64_t resident[MAX_BATCH * 2], missing[MAX_BATCH * 2];
	int queue[2] = {3, 5}, out[MAX_BATCH], repeats = 7, opt, i, p, b, r;
	long calls = 20000;

	while ((opt = getopt(argc, argv, "r:c:h")) != -1) {
		if (opt == 'r')
			repeats = atoi(optarg);
		else if (opt == 'c')
			calls = atol(optarg);
		else {
			fprintf(stderr, "usage: %s [-r REPEATS] [-c CALLS_PER_LOOP] [POLICY...]\n",
				argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (repeats < 1 || repeats > MAX_REPEATS || calls < 1)
		return 2;
	for (i = 0; i < MAX_BATCH * 2; i++)
		feasible[i] = true;
	for (i = 0; i < MAX_BATCH; i++) {
		missing[2 * i + 1] = 4096; /* the second device lacks a page of input */
		tasks[i] = (odx__policy_task){.kernel = "gemm", .tag = "", .bytes = 8192,
					      .feasible = &feasible[2 * i],
					      .resident = &resident[2 * i],
					      .missing = &missing[2 * i]};
	}
	for (p = 0; p < (optind < argc ? argc - optind : 3); p++) {
		const char *spec = optind < argc ? argv[optind + p] : defaults[p];
		odx__policy_params params = {.spec = spec, .ndevices = 2, .devices = devs,
					     .memory_limit = 8u << 20, .budget_ns = 1000000};
		odx__policy *h = NULL;
		char err[512];

		if (odx__policy_open(&h, &params, err, sizeof(err)) != 0 || !odx__policy_enabled(h)) {
			fprintf(stderr, "policy_place_cost: %s: %s\n", spec, err);
			return 1;
		}
		/* Calibrated models, as after a while in a real run. */
		for (i = 0; i < 20; i++) {
			odx__policy_feedback(h, "gemm", 0, 8192, 100000);
			odx__policy_feedback(h, "gemm", 1, 8192, 50000);
		}
		for (b = 0; b < (int)(sizeof(batches) / sizeof(batches[0])); b++) {
			int n = batches[b];
			long loop = calls / n > 100 ? calls / n : 100, k;
			double t[MAX_REPEATS];

			for (r = -1; r < repeats; r++) { /* r = -1: warm-up */
				double t0 = now_s();

				for (k = 0; k < loop; k++)
					odx__policy_place(h, tasks, n, queue, out);
				if (r >= 0)
					t[r] = (now_s() - t0) / (double)loop;
			}
			qsort(t, (size_t)repeats, sizeof(t[0]), cmp_double);
			printf("{\"bench\":\"policy_place_cost\",\"variant\":\"%s\",\"batch\":%d,"
			       "\"value\":%.3f,\"min\":%.3f,\"max\":%.3f,\"unit\":\"us/task\","
			       "\"per_call_us\":%.3f,\"repeats\":%d,\"failures\":%llu}\n",
			       spec, n, t[repeats / 2] * 1e6 / n, t[0] * 1e6 / n,
			       t[repeats - 1] * 1e6 / n, t[repeats / 2] * 1e6, repeats,
			       (unsigned long long)odx__policy_failures(h));
		}
		odx__policy_close(h);
	}
	return 0;
}
