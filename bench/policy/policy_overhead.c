/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_overhead.c - what a Lua scheduling policy adds per task, against the built-in C policy
 * and against StarPU's own schedulers, in the same run (BENCHMARKS.md, issue 6).
 *
 * One measurement is n empty host tasks with no buffers submitted from one thread to W host
 * devices of one thread each, from the first odx_submit to odx_wait_all returning, divided by n
 * (the question StarPU's async_tasks_overhead answers). Each round measures, in this order:
 *
 *   ODX  least_loaded   the built-in C policy (the default)
 *   ODX  lua:eager      the shipped Lua eager policy
 *   ODX  lua:heft       the shipped Lua earliest-finish-time policy
 *   StarPU eager        async_tasks_overhead -i n -b 0, STARPU_SCHED=eager, STARPU_NCPU=W
 *   StarPU dmda         the same with STARPU_SCHED=dmda (StarPU's earliest finish time)
 *
 * and the figures are medians over the rounds (ODX and StarPU alternate: A B A B). Ratios are
 * per round, then the median: "added" is the Lua policy minus least_loaded, "ratio" StarPU over
 * ODX (>1: ODX is faster), lua:eager against StarPU eager and lua:heft against dmda.
 *
 *	usage: policy_overhead [-n N] [-w WORKERS] [-r ROUNDS] [-s STARPU_BINARY | -s none]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <odx/odx.h>

#define MAX_ROUNDS 64
#define WARMUP_TASKS 10000
#define STARPU_DEFAULT "/usr/lib/x86_64-linux-gnu/starpu/examples/async_tasks_overhead"

enum { V_C, V_LUA_EAGER, V_LUA_HEFT, V_STARPU_EAGER, V_STARPU_DMDA, V_COUNT };

static const char *const names[V_COUNT] = {"least_loaded", "lua:eager", "lua:heft",
					   "starpu:eager", "starpu:dmda"};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int empty_kernel(const odx_host_launch *l)
{
	(void)l;
	return 0;
}

static void die(odx_context *ctx, int rc, const char *what)
{
	fprintf(stderr, "policy_overhead: %s failed: %s (%s)%s%s\n", what, odx_err_name(rc),
		odx_strerror(rc), ctx ? ": " : "", ctx ? odx_last_error(ctx) : "");
	exit(1);
}

/* Seconds per task of n empty tasks, in a context opened with `policy`, after a warm-up. */
static double run_odx(const char *policy, int workers, long n)
{
	const odx_kernel_variant variant = {
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_FN,
		.host_fn = empty_kernel,
	};
	odx_config *cfg;
	odx_context *ctx;
	odx_kernel *k;
	char text[32];
	double t0 = 0;
	int rc, pass;

	if ((rc = odx_config_create(&cfg)) < 0)
		die(NULL, rc, "odx_config_create");
	snprintf(text, sizeof(text), "%d", workers);
	if (odx_config_set(cfg, "backends", "host") || odx_config_set(cfg, "host.devices", text) ||
	    odx_config_set(cfg, "host.threads", "1") || odx_config_set(cfg, "policy", policy)) {
		fprintf(stderr, "policy_overhead: %s\n", odx_config_error(cfg));
		exit(1);
	}
	snprintf(text, sizeof(text), "%ld", n > WARMUP_TASKS ? n : WARMUP_TASKS);
	if (odx_config_set(cfg, "sched.max_inflight", text)) {
		fprintf(stderr, "policy_overhead: %s\n", odx_config_error(cfg));
		exit(1);
	}
	if ((rc = odx_open(&ctx, cfg)) < 0)
		die(NULL, rc, "odx_open");
	odx_config_destroy(cfg);
	if ((rc = odx_kernel_create(ctx, "empty", NULL, 0, &variant, 1, &k)) < 0)
		die(ctx, rc, "odx_kernel_create");
	/* Pass 0 warms up (threads, task pools, the policy's tables); pass 1 is timed. */
	for (pass = 0; pass < 2; pass++) {
		long count = pass ? n : WARMUP_TASKS, i;

		t0 = now_s();
		for (i = 0; i < count; i++)
			if ((rc = odx_submit(ctx, k, NULL, 0, NULL, NULL)) < 0)
				die(ctx, rc, "odx_submit");
		if ((rc = odx_wait_all(ctx, -1)) < 0)
			die(ctx, rc, "odx_wait_all");
	}
	t0 = (now_s() - t0) / (double)n;
	if ((rc = odx_close(ctx)) < 0)
		die(NULL, rc, "odx_close");
	return t0;
}

/* StarPU's async_tasks_overhead with scheduler `sched`: its "Per task" figure, in seconds. */
static double run_starpu(const char *bin, const char *sched, int workers, long n)
{
	char cmd[1024], line[512];
	double us = NAN;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "STARPU_SILENT=1 STARPU_SCHED=%s STARPU_NCPU=%d STARPU_NCUDA=0 STARPU_NOPENCL=0 "
		 "STARPU_NMPIMSTHREADS=0 '%s' -i %ld -b 0 2>&1",
		 sched, workers, bin, n);
	p = popen(cmd, "r");
	if (!p) {
		perror("policy_overhead: popen");
		exit(1);
	}
	while (fgets(line, sizeof(line), p))
		if (strncmp(line, "Per task:", 9) == 0)
			us = strtod(line + 9, NULL);
	if (pclose(p) != 0 || isnan(us)) {
		fprintf(stderr, "policy_overhead: '%s' gave no 'Per task' figure\n", cmd);
		exit(1);
	}
	return us * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median, min and max of v[0..n) (sorted in place). */
static void spread(double *v, int n, double *med, double *lo, double *hi)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	*med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*lo = v[0];
	*hi = v[n - 1];
}

int main(int argc, char **argv)
{
	static double t[V_COUNT][MAX_ROUNDS];
	const char *starpu = STARPU_DEFAULT;
	int workers = 2, rounds = 5, opt, r, v, nv;
	long n = 100000;

	while ((opt = getopt(argc, argv, "n:w:r:s:h")) != -1) {
		switch (opt) {
		case 'n':
			n = strtol(optarg, NULL, 0);
			break;
		case 'w':
			workers = atoi(optarg);
			break;
		case 'r':
			rounds = atoi(optarg);
			break;
		case 's':
			starpu = strcmp(optarg, "none") == 0 ? NULL : optarg;
			break;
		default:
			fprintf(stderr, "usage: %s [-n N] [-w WORKERS] [-r ROUNDS] "
					"[-s STARPU_BINARY | -s none]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (n < 1 || workers < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "policy_overhead: bad arguments\n");
		return 2;
	}
	if (starpu && access(starpu, X_OK) != 0) {
		fprintf(stderr, "policy_overhead: %s not found (apt-get install starpu-examples, or "
				"-s none)\n", starpu);
		return 77;
	}
	nv = starpu ? V_COUNT : V_STARPU_EAGER;
	/* Untimed warm-up of each side, then A B A B. */
	run_odx("least_loaded", workers, n / 10 + 1);
	if (starpu)
		run_starpu(starpu, "eager", workers, n / 10 + 1);
	for (r = 0; r < rounds; r++) {
		for (v = 0; v < nv; v++) {
			if (v < V_STARPU_EAGER)
				t[v][r] = run_odx(names[v], workers, n);
			else
				t[v][r] = run_starpu(starpu, v == V_STARPU_EAGER ? "eager" : "dmda",
						     workers, n);
		}
		fprintf(stderr, "round %d/%d:", r + 1, rounds);
		for (v = 0; v < nv; v++)
			fprintf(stderr, " %s %.3f", names[v], t[v][r] * 1e6);
		fprintf(stderr, " us/task\n");
	}
	for (v = 0; v < nv; v++) {
		double vals[MAX_ROUNDS], added[MAX_ROUNDS], ratio[MAX_ROUNDS];
		double med, lo, hi, amed, alo, ahi, rmed, rlo, rhi;
		int anchor = v == V_LUA_HEFT ? V_STARPU_DMDA : V_STARPU_EAGER;

		for (r = 0; r < rounds; r++) {
			vals[r] = t[v][r] * 1e6;
			added[r] = (t[v][r] - t[V_C][r]) * 1e6;
			ratio[r] = starpu ? t[anchor][r] / t[v][r] : 0;
		}
		spread(vals, rounds, &med, &lo, &hi);
		printf("{\"bench\":\"policy_overhead\",\"variant\":\"%s\",\"n\":%ld,\"workers\":%d,"
		       "\"rounds\":%d,\"value\":%.3f,\"min\":%.3f,\"max\":%.3f,\"unit\":\"us/task\"",
		       names[v], n, workers, rounds, med, lo, hi);
		if (v == V_LUA_EAGER || v == V_LUA_HEFT) {
			spread(added, rounds, &amed, &alo, &ahi);
			printf(",\"added_over_c\":%.3f,\"added_min\":%.3f,\"added_max\":%.3f,"
			       "\"goal_added\":0.5",
			       amed, alo, ahi);
		}
		if (starpu && v < V_STARPU_EAGER) {
			spread(ratio, rounds, &rmed, &rlo, &rhi);
			printf(",\"anchor\":\"starpu async_tasks_overhead -b 0, %s\","
			       "\"ratio\":%.2f,\"ratio_min\":%.2f,\"ratio_max\":%.2f,\"goal_ratio\":5",
			       names[anchor] + 7, rmed, rlo, rhi);
		}
		printf("}\n");
	}
	return 0;
}
