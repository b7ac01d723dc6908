/* SPDX-License-Identifier: Apache-2.0 */
/*
 * soak.c - memory over a long run of small tasks (scripts/soak runs it; docs/performance.md,
 * "Memory over a long run").
 *
 * n empty host tasks go to W host devices of one thread each, in rounds of `round` tasks that
 * take turns between the three shapes of bench/task_overhead (no buffers; R shared + RW one of a
 * pool of 64; RW + RW of one chain), each round ended by odx_wait_all. After every round one line
 * goes to stdout: tasks so far, the resident set (/proc/self/statm) and the malloc heap
 * (mallinfo2: bytes in use, free in arenas, mmapped). The resident set right after the warm-up
 * is the baseline; the run fails (exit 1) if it ever grows more than `bound` KiB above it.
 *
 *	usage: soak [-n TASKS] [-w WORKERS] [-r ROUND] [-W WARMUP] [-b BOUND_KIB] [-m MAX_INFLIGHT]
 *		    [-s SHAPES] [-F]
 *
 * SHAPES is a string of shape numbers the rounds take in turn (default 012: 0 no buffers,
 * 1 R + RW pool, 2 RW + RW chain), to look at one shape alone.
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <odx/odx.h>

#define POOL_SIZE 64
#define BUFFER_BYTES 64

static void die(odx_context *ctx, int rc, const char *what)
{
	const char *why = odx_last_error(ctx);

	fprintf(stderr, "soak: %s failed: %s (%s)%s%s\n", what, odx_err_name(rc),
		odx_strerror(rc), why[0] ? ": " : "", why);
	exit(2);
}

static int empty_kernel(const odx_host_launch *l)
{
	(void)l;
	return 0;
}

/* The warm-up's gate: holds every task behind it while the submitter fills max_inflight. */
static int gate_kernel(const odx_host_launch *l)
{
	(void)l;
	usleep(300000);
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

/* Resident set in KiB, from /proc/self/statm (second field, in pages). */
static long rss_kib(void)
{
	long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long parse_count(const char *text)
{
	char *end;
	double v = strtod(text, &end); /* 1e8 as well as 100000000 */

	if (end == text || *end || v < 1 || v > 1e15)
		return -1;
	return (long)v;
}

int main(int argc, char **argv)
{
	long n = 100000000, round = 1000000, warmup = 2000000, bound = 8192, inflight = 65536;
	int workers = 2, opt, rc;
	bool fill = true; /* -F: no fill, to watch the high-water marks grow on their own */
	const char *shapes = "012"; /* the shapes rounds take turns between, by number */
	odx_kernel *k0, *k_r_rw, *k_rw_rw;
	odx_buffer *shared[2], *pool[POOL_SIZE];
	odx_context *ctx;
	odx_config *cfg;
	long base = -1, peak = 0, done = 0;
	double t0;
	char text[32];

	while ((opt = getopt(argc, argv, "n:w:r:W:b:m:s:Fh")) != -1) {
		long v = optarg && opt != 's' ? parse_count(optarg) : 0;

		if (opt == 'h' || (opt != 'h' && v < 0) || opt == '?') {
			fprintf(opt == 'h' ? stdout : stderr,
				"usage: %s [-n TASKS] [-w WORKERS] [-r ROUND] [-W WARMUP] "
				"[-b BOUND_KIB] [-m MAX_INFLIGHT] [-s SHAPES] [-F]\n",
				argv[0]);
			return opt == 'h' ? 0 : 2;
		}
		switch (opt) {
		case 'n': n = v; break;
		case 'w': workers = (int)v; break;
		case 'r': round = v; break;
		case 'W': warmup = v; break;
		case 'b': bound = v; break;
		case 'm': inflight = v; break;
		case 's': shapes = optarg; break;
		case 'F': fill = false; break;
		}
	}
	if ((rc = odx_config_create(&cfg)) < 0)
		die(NULL, rc, "odx_config_create");
	snprintf(text, sizeof(text), "%d", workers);
	if (odx_config_set(cfg, "backends", "host") || odx_config_set(cfg, "host.devices", text) ||
	    odx_config_set(cfg, "host.threads", "1"))
		die(NULL, ODX_ECONFIG, odx_config_error(cfg));
	snprintf(text, sizeof(text), "%ld", inflight);
	if (odx_config_set(cfg, "sched.max_inflight", text))
		die(NULL, ODX_ECONFIG, odx_config_error(cfg));
	if ((rc = odx_open(&ctx, cfg)) < 0)
		die(NULL, rc, "odx_open");
	odx_config_destroy(cfg);

	const odx_param r_rw[] = {{ODX_ARG_BUFFER, ODX_R, "in"}, {ODX_ARG_BUFFER, ODX_RW, "out"}};
	const odx_param rw_rw[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}, {ODX_ARG_BUFFER, ODX_RW, "b"}};
	k0 = make_kernel(ctx, "empty0", NULL, 0);
	k_r_rw = make_kernel(ctx, "empty_r_rw", r_rw, 2);
	k_rw_rw = make_kernel(ctx, "empty_rw_rw", rw_rw, 2);
	for (int i = 0; i < 2; i++)
		if ((rc = odx_buffer_create(ctx, BUFFER_BYTES, 0, &shared[i])) < 0)
			die(ctx, rc, "odx_buffer_create");
	for (int i = 0; i < POOL_SIZE; i++)
		if ((rc = odx_buffer_create(ctx, BUFFER_BYTES, 0, &pool[i])) < 0)
			die(ctx, rc, "odx_buffer_create");

	/*
	 * Warm-up, first part: what grows to a high-water mark is taken to it now, so growth after
	 * the warm-up means a leak. max_inflight tasks pile up behind one sleeping gate task: the
	 * task pool reaches its bound, the gate buffer's reader list its longest, the ready queues
	 * their deepest when the gate opens.
	 */
	if (fill) {
		const odx_param rw[] = {{ODX_ARG_BUFFER, ODX_RW, "g"}};
		const odx_kernel_variant variant = {
			.backend = ODX_BACKEND_HOST,
			.format = ODX_FORMAT_HOST_FN,
			.host_fn = gate_kernel,
		};
		odx_arg args[2] = {ODX_BUF(shared[1], ODX_RW)};
		odx_kernel *gate;

		if ((rc = odx_kernel_create(ctx, "gate", rw, 1, &variant, 1, &gate)) < 0)
			die(ctx, rc, "odx_kernel_create");
		if ((rc = odx_submit(ctx, gate, args, 1, NULL, NULL)) < 0)
			die(ctx, rc, "odx_submit");
		args[0] = ODX_BUF(shared[1], ODX_R);
		for (long i = 0; i < inflight - 1; i++) {
			args[1] = ODX_BUF(pool[i % POOL_SIZE], ODX_RW);
			if ((rc = odx_submit(ctx, k_r_rw, args, 2, NULL, NULL)) < 0)
				die(ctx, rc, "odx_submit");
		}
		if ((rc = odx_wait_all(ctx, -1)) < 0)
			die(ctx, rc, "odx_wait_all");
		printf("# filled: %ld tasks in flight at once, rss %ld KiB\n", inflight, rss_kib());
	}
	printf("# tasks rss_kib heap_used_kib heap_free_kib heap_mmap_kib seconds\n");
	t0 = now_s();
	for (long r = 0; done < n; r++) {
		long todo = n - done < round ? n - done : round;
		odx_arg args[2];
		struct mallinfo2 mi;
		long rss;

		for (long i = 0; i < todo; i++) {
			switch (shapes[r % strlen(shapes)] - '0') {
			case 0:
				rc = odx_submit(ctx, k0, NULL, 0, NULL, NULL);
				break;
			case 1:
				args[0] = ODX_BUF(shared[0], ODX_R);
				args[1] = ODX_BUF(pool[i % POOL_SIZE], ODX_RW);
				rc = odx_submit(ctx, k_r_rw, args, 2, NULL, NULL);
				break;
			default:
				args[0] = ODX_BUF(shared[0], ODX_RW);
				args[1] = ODX_BUF(shared[1], ODX_RW);
				rc = odx_submit(ctx, k_rw_rw, args, 2, NULL, NULL);
				break;
			}
			if (rc < 0)
				die(ctx, rc, "odx_submit");
		}
		if ((rc = odx_wait_all(ctx, -1)) < 0)
			die(ctx, rc, "odx_wait_all");
		done += todo;
		rss = rss_kib();
		mi = mallinfo2();
		printf("%ld %ld %zu %zu %zu %.1f\n", done, rss, mi.uordblks / 1024,
		       mi.fordblks / 1024, mi.hblkhd / 1024, now_s() - t0);
		fflush(stdout);
		if (done >= warmup && base < 0)
			base = rss;
		if (base >= 0 && rss > peak)
			peak = rss;
	}
	for (int i = 0; i < 2; i++)
		odx_buffer_destroy(shared[i]);
	for (int i = 0; i < POOL_SIZE; i++)
		odx_buffer_destroy(pool[i]);
	if ((rc = odx_close(ctx)) < 0)
		die(NULL, rc, "odx_close");
	if (base < 0) {
		printf("# %ld tasks: no sample after the warm-up of %ld tasks, nothing checked\n", n,
		       warmup);
		return 0;
	}
	printf("# after warm-up (%ld tasks): baseline %ld KiB, peak %ld KiB, growth %ld KiB, "
	       "bound %ld KiB: %s\n",
	       warmup, base, peak, peak - base, bound, peak - base <= bound ? "ok" : "EXCEEDED");
	return peak - base <= bound ? 0 : 1;
}
