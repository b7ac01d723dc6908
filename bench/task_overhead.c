/* SPDX-License-Identifier: Apache-2.0 */
/*
 * task_overhead.c - what one empty task costs, from odx_submit to completion.
 *
 * n empty host tasks are submitted from one thread to W host devices of one thread each; the
 * figure is the time from the first odx_submit to odx_wait_all returning, divided by n (the
 * question StarPU's async_tasks_overhead answers), plus the submission time alone (as StarPU's
 * tasks_overhead reports it). Variants:
 *
 *   0buf        no buffers: pure scheduling cost, every task independent
 *   2buf        reads one shared buffer, read-writes buffer i % 64 of a pool: real dependencies
 *               (64 chains), yet plenty of parallelism
 *   2buf-chain  read-writes the same two buffers: one chain, as StarPU's `-b 2` runs it
 *   2buf-alt    the same chain, task i placed on device i % W: every dependency crosses
 *               devices (with host.memnode=private, each one is a copy between them)
 *
 * One JSON object per measurement on stdout (BENCHMARKS.md); scripts/bench adds the anchors.
 *
 *	usage: task_overhead [-n N]... [-w WORKERS] [-v VARIANT]... [-r REPEATS] [-m MAX_INFLIGHT]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <odx/odx.h>

#define POOL_SIZE 64	 /* RW buffers of the 2buf variant */
#define BUFFER_BYTES 64	 /* 16 floats, as StarPU's benchmark registers */
#define WARMUP_TASKS 10000
#define MAX_LIST 16

enum variant { VAR_0BUF, VAR_2BUF, VAR_2BUF_CHAIN, VAR_2BUF_ALT, VAR_COUNT };

static const char *const variant_names[VAR_COUNT] = {"0buf", "2buf", "2buf-chain", "2buf-alt"};

struct bench {
	odx_context *ctx;
	odx_kernel *empty0;	/* no parameters */
	odx_kernel *empty_r_rw; /* (R, RW) */
	odx_kernel *empty_rw_rw; /* (RW, RW) */
	odx_buffer *shared[2];
	odx_buffer *pool[POOL_SIZE];
};

static void die(odx_context *ctx, int rc, const char *what)
{
	/* with ctx NULL: why odx_open failed, if it did */
	const char *why = odx_last_error(ctx);

	fprintf(stderr, "task_overhead: %s failed: %s (%s)%s%s\n", what, odx_err_name(rc),
		odx_strerror(rc), why[0] ? ": " : "", why);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int empty_kernel(const odx_host_launch *l)
{
	(void)l;
	return 0;
}

static odx_kernel *make_kernel(odx_context *ctx, const char *name, const odx_param *params,
			       int nparams)
{
	const odx_kernel_variant variant = {
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_FN,
		.host_fn = empty_kernel,
	};
	odx_kernel *kernel;
	int rc = odx_kernel_create(ctx, name, params, nparams, &variant, 1, &kernel);

	if (rc < 0)
		die(ctx, rc, "odx_kernel_create");
	return kernel;
}

static void bench_open(struct bench *b, int workers, long max_inflight)
{
	odx_config *cfg;
	char text[32];
	int rc = odx_config_create(&cfg);

	if (rc < 0)
		die(NULL, rc, "odx_config_create");
	/* W devices of one thread each: W workers, like STARPU_NCPU=W. */
	const char *settings[][2] = {
		{"backends", "host"},
		{"host.devices", NULL},
		{"host.threads", "1"},
		{"sched.max_inflight", NULL},
	};
	for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
		const char *value = settings[i][1];

		if (!value) {
			snprintf(text, sizeof(text), "%ld", i == 1 ? (long)workers : max_inflight);
			value = text;
		}
		rc = odx_config_set(cfg, settings[i][0], value);
		if (rc < 0) {
			fprintf(stderr, "task_overhead: %s=%s refused: %s\n", settings[i][0], value,
				odx_config_error(cfg));
			exit(1);
		}
	}
	rc = odx_open(&b->ctx, cfg);
	if (rc < 0) {
		fprintf(stderr, "task_overhead: odx_open failed: %s (%s): %s\n", odx_err_name(rc),
			odx_strerror(rc), odx_config_error(cfg));
		exit(1);
	}
	odx_config_destroy(cfg);

	const odx_param r_rw[] = {{ODX_ARG_BUFFER, ODX_R, "in"}, {ODX_ARG_BUFFER, ODX_RW, "out"}};
	const odx_param rw_rw[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}, {ODX_ARG_BUFFER, ODX_RW, "b"}};
	b->empty0 = make_kernel(b->ctx, "empty0", NULL, 0);
	b->empty_r_rw = make_kernel(b->ctx, "empty_r_rw", r_rw, 2);
	b->empty_rw_rw = make_kernel(b->ctx, "empty_rw_rw", rw_rw, 2);

	for (int i = 0; i < 2; i++) {
		rc = odx_buffer_create(b->ctx, BUFFER_BYTES, 0, &b->shared[i]);
		if (rc < 0)
			die(b->ctx, rc, "odx_buffer_create");
	}
	for (int i = 0; i < POOL_SIZE; i++) {
		rc = odx_buffer_create(b->ctx, BUFFER_BYTES, 0, &b->pool[i]);
		if (rc < 0)
			die(b->ctx, rc, "odx_buffer_create");
	}
}

/* Submits n tasks of one variant and waits for them; returns the submit and total seconds. */
static void run_tasks(struct bench *b, enum variant v, long n, double *submit_s, double *total_s)
{
	int ndev = odx_device_count(b->ctx);
	odx_task_opts opts = {0};
	odx_arg args[2];
	odx_kernel *kernel;
	int nargs = 0, rc;

	switch (v) {
	case VAR_0BUF:
		kernel = b->empty0;
		break;
	case VAR_2BUF:
		kernel = b->empty_r_rw;
		nargs = 2;
		args[0] = ODX_BUF(b->shared[0], ODX_R);
		break;
	default:
		kernel = b->empty_rw_rw;
		nargs = 2;
		args[0] = ODX_BUF(b->shared[0], ODX_RW);
		args[1] = ODX_BUF(b->shared[1], ODX_RW);
		break;
	}

	double t0 = now_s();
	for (long i = 0; i < n; i++) {
		if (v == VAR_2BUF)
			args[1] = ODX_BUF(b->pool[i % POOL_SIZE], ODX_RW);
		opts.flags = ODX_SUBMIT_ON_DEVICE;
		opts.on_device = (int)(i % ndev);
		rc = odx_submit(b->ctx, kernel, nargs ? args : NULL, nargs,
				v == VAR_2BUF_ALT ? &opts : NULL, NULL);
		if (rc < 0)
			die(b->ctx, rc, "odx_submit");
	}
	double t1 = now_s();
	rc = odx_wait_all(b->ctx, -1);
	if (rc < 0)
		die(b->ctx, rc, "odx_wait_all");
	double t2 = now_s();

	*submit_s = t1 - t0;
	*total_s = t2 - t0;
}

static void bench_close(struct bench *b)
{
	odx_buffer *all[2 + POOL_SIZE];
	int rc;

	memcpy(all, b->shared, sizeof(b->shared));
	memcpy(all + 2, b->pool, sizeof(b->pool));
	for (int i = 0; i < 2 + POOL_SIZE; i++) {
		rc = odx_buffer_destroy(all[i]);
		if (rc < 0)
			die(b->ctx, rc, "odx_buffer_destroy");
	}
	rc = odx_close(b->ctx);
	if (rc < 0)
		die(NULL, rc, "odx_close");
}

static void usage(FILE *out, const char *argv0)
{
	fprintf(out,
		"usage: %s [-n N]... [-w WORKERS] [-v VARIANT]... [-r REPEATS] [-m MAX_INFLIGHT]\n"
		"  -n N             tasks per measurement (repeatable; default 100000, 1000000)\n"
		"  -w WORKERS       host devices of one thread each (default 2)\n"
		"  -v VARIANT       0buf, 2buf, 2buf-chain or 2buf-alt (repeatable; default all)\n"
		"  -r REPEATS       measurements of each (n, variant) in this process (default 1)\n"
		"  -m MAX_INFLIGHT  sched.max_inflight (default: the largest n, so submission\n"
		"                   never waits for execution, as in StarPU)\n",
		argv0);
}

int main(int argc, char **argv)
{
	long ns[MAX_LIST], max_inflight = 0;
	int nn = 0, workers = 2, repeats = 1, opt;
	int want[VAR_COUNT] = {0}, any_variant = 0;

	while ((opt = getopt(argc, argv, "n:w:v:r:m:h")) != -1) {
		switch (opt) {
		case 'n':
			if (nn == MAX_LIST || (ns[nn++] = strtol(optarg, NULL, 0)) < 1) {
				fprintf(stderr, "task_overhead: bad -n '%s'\n", optarg);
				return 2;
			}
			break;
		case 'w':
			workers = atoi(optarg);
			break;
		case 'r':
			repeats = atoi(optarg);
			break;
		case 'm':
			max_inflight = strtol(optarg, NULL, 0);
			break;
		case 'v': {
			int v = 0;

			while (v < VAR_COUNT && strcmp(optarg, variant_names[v]) != 0)
				v++;
			if (v == VAR_COUNT) {
				fprintf(stderr, "task_overhead: unknown variant '%s'\n", optarg);
				return 2;
			}
			want[v] = any_variant = 1;
			break;
		}
		case 'h':
			usage(stdout, argv[0]);
			return 0;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (optind < argc || workers < 1 || repeats < 1) {
		usage(stderr, argv[0]);
		return 2;
	}
	if (nn == 0) {
		ns[nn++] = 100000;
		ns[nn++] = 1000000;
	}
	for (int v = 0; v < VAR_COUNT; v++)
		want[v] |= !any_variant;
	if (max_inflight == 0)
		for (int i = 0; i < nn; i++)
			max_inflight = ns[i] > max_inflight ? ns[i] : max_inflight;
	if (max_inflight < 16)
		max_inflight = 16;

	struct bench b;
	double submit_s, total_s;
	bench_open(&b, workers, max_inflight);

	/* Untimed warm-up: thread start-up, first-touch of the task pools, caches. */
	for (int v = 0; v < VAR_COUNT; v++)
		if (want[v])
			run_tasks(&b, v, WARMUP_TASKS, &submit_s, &total_s);

	for (int i = 0; i < nn; i++) {
		for (int v = 0; v < VAR_COUNT; v++) {
			for (int r = 0; r < repeats && want[v]; r++) {
				run_tasks(&b, v, ns[i], &submit_s, &total_s);
				printf("{\"bench\":\"task_overhead\",\"variant\":\"host/%s/%ddev\","
				       "\"n\":%ld,\"value\":%.4f,\"unit\":\"us/task\","
				       "\"submit_us\":%.4f,\"workers\":%d,\"threads_per_worker\":1,"
				       "\"max_inflight\":%ld}\n",
				       variant_names[v], workers, ns[i], total_s / ns[i] * 1e6,
				       submit_s / ns[i] * 1e6, workers, max_inflight);
				fflush(stdout);
			}
		}
	}
	bench_close(&b);
	return 0;
}
