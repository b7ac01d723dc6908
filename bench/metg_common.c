/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metg_common.c - the driver both METG programs share (metg.h): options, the busy loop's
 * calibration, step counts, verification and the JSON lines. metg_odx.c and metg_starpu.c add
 * only the runtime calls.
 *
 *	usage: metg_RUNTIME -C [-c REPS]
 *	       metg_RUNTIME -i ITERS [-c NS_PER_ITER] [-w WORKERS] [-W WIDTH]... [-P PATTERN]...
 *	                    [-r RADIX] [-d SECONDS] [-N MAX_TASKS] [-R REPEATS] [-T STEPS]
 *
 * One JSON object per graph run on stdout:
 *   {"bench":"metg","runtime":"odx","pattern":"stencil_1d","width":4,"workers":2,...,
 *    "task_us":10.2,"wall_s":0.11,"efficiency":0.93,"verified":true}
 * efficiency = tasks * task_us / (wall * workers), task_us = iters * ns_per_iter / 1000: the
 * time one task takes alone on one core, from the calibration (-c, or measured here).
 *
 * Started as several ranks (metg_odx under scripts/odx-run, metg_starpu_mpi under mpirun), -w is
 * the workers of each rank, "workers" in the lines counts them all, and rank 0 prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "metg.h"

#define MAX_WIDTHS 8
#define CALIBRATE_ITERS 200000 /* ~0.3 ms per sample on a 3 GHz core */
#define CALIBRATE_SAMPLES 31

uint64_t *metg_records;
int metg_rank, metg_nranks = 1;

static const char *const pattern_names[METG_PATTERN_COUNT] = {"trivial", "stencil_1d", "nearest",
							      "fft", "tree"};

const char *metg_pattern_name(enum metg_pattern p)
{
	return p < METG_PATTERN_COUNT ? pattern_names[p] : "?";
}

double metg_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int clamp_add(int *deps, int n, int j, int width)
{
	if (j >= 0 && j < width)
		deps[n++] = j;
	return n;
}

int metg_deps(const struct metg_graph *g, long t, int i, int deps[METG_MAX_DEPS])
{
	int n = 0, w = g->width;

	if (t == 0)
		return 0;
	switch (g->pattern) {
	case METG_TRIVIAL:
		return 0;
	case METG_STENCIL_1D:
		for (int j = i - 1; j <= i + 1; j++)
			n = clamp_add(deps, n, j, w);
		return n;
	case METG_NEAREST:
		for (int j = i - g->radix / 2; j <= i + (g->radix - 1) / 2; j++)
			n = clamp_add(deps, n, j, w);
		return n;
	case METG_FFT: {
		int sets = 0;

		while ((1 << sets) < w)
			sets++;
		if (sets == 0) /* width 1: the point reads itself */
			return clamp_add(deps, 0, i, w);
		int d = 1 << ((t + sets - 1) % sets);
		n = clamp_add(deps, n, i - d, w);
		n = clamp_add(deps, n, i, w);
		return clamp_add(deps, n, i + d, w);
	}
	case METG_TREE:
		deps[0] = i / 2;
		return 1;
	default:
		return 0;
	}
}

long metg_tasks(const struct metg_graph *g)
{
	long n = 0, t;

	/* the ramp of a tree, then full steps */
	for (t = 0; t < g->steps && metg_width_at(g, t) < g->width; t++)
		n += metg_width_at(g, t);
	return n + (g->steps - t) * g->width;
}

/* Best single-core time of one busy-loop iteration, in ns: the least disturbed of many samples
 * (on a loaded machine the median would count other processes' time as the task's). */
static double calibrate(int samples)
{
	double best = 1e30;
	uint64_t x = 1;

	for (int s = 0; s < samples; s++) {
		double t0 = metg_now_s();
		x = metg_burn(x, CALIBRATE_ITERS);
		double dt = metg_now_s() - t0;

		if (dt < best)
			best = dt;
	}
	if (x == 0) /* keeps x alive; practically never true */
		fprintf(stderr, "metg: calibration hash was 0\n");
	return best / CALIBRATE_ITERS * 1e9;
}

/* The closed form must match the loop, or every verification would be wrong. */
static int self_check(void)
{
	static const uint64_t its[] = {0, 1, 2, 3, 7, 64, 1000, 4097};

	for (size_t k = 0; k < sizeof(its) / sizeof(its[0]); k++) {
		uint64_t seed = metg_mix(k, its[k]);

		if (metg_burn(seed, its[k]) != metg_jump(seed, its[k])) {
			fprintf(stderr, "metg: metg_jump disagrees with metg_burn at %llu iterations\n",
				(unsigned long long)its[k]);
			return -1;
		}
	}
	return 0;
}

/* Evaluates the graph in step order on this thread, with the loop jumped ahead, and compares
 * every task's recorded value; prints the first mismatch. On several ranks each rank checks the
 * tasks it ran (its columns' records: its inputs came over the fabric), and every rank fails if
 * one found a mismatch. */
static int verify(const struct metg_graph *g, uint64_t *expect)
{
	const uint64_t *inputs[METG_MAX_DEPS];
	int deps[METG_MAX_DEPS];
	long bad = 0, first = -1;

	for (long t = 0; t < g->steps; t++) {
		for (int i = 0; i < metg_width_at(g, t); i++) {
			int n = metg_deps(g, t, i, deps);
			uint64_t id = (uint64_t)(t * g->width + i);

			for (int k = 0; k < n; k++)
				inputs[k] = &expect[(t - 1) * g->width + deps[k]];
			expect[id] = metg_jump(metg_seed(id, inputs, n), g->iters);
			if (metg_owner(g, i) == metg_rank && expect[id] != metg_records[id] &&
			    bad++ == 0)
				first = (long)id;
		}
	}
	if (metg_nranks > 1 && metg_rt_sum(bad) > 0 && !bad)
		return -1; /* another rank found it, and says so */
	if (bad) {
		fprintf(stderr,
			"metg: %s: rank %d: WRONG RESULT: %ld of %ld tasks differ from the "
			"sequential evaluation; first: task (t=%ld, i=%ld) got %016llx, expected "
			"%016llx\n",
			metg_runtime_name, metg_rank, bad, metg_tasks(g), first / g->width,
			first % g->width, (unsigned long long)metg_records[first],
			(unsigned long long)expect[first]);
		return -1;
	}
	return 0;
}

/* One run of g, verified. Records are cleared first so that a task that never ran fails. */
static int run_checked(const struct metg_graph *g, uint64_t *expect, double *submit_s,
		       double *total_s)
{
	memset(metg_records, 0xa5, sizeof(uint64_t) * g->steps * g->width);
	if (metg_rt_run(g, submit_s, total_s) != 0)
		return -1;
	return verify(g, expect);
}

static int parse_pattern(const char *s)
{
	for (int p = 0; p < METG_PATTERN_COUNT; p++)
		if (strcmp(s, pattern_names[p]) == 0)
			return p;
	return -1;
}

static void usage(FILE *out, const char *argv0)
{
	fprintf(out,
		"usage: %s -C [-c SAMPLES]\n"
		"       %s -i ITERS [-c NS_PER_ITER] [-w WORKERS] [-W WIDTH]... [-P PATTERN]...\n"
		"          [-r RADIX] [-d SECONDS] [-N MAX_TASKS] [-T STEPS] [-R REPEATS]\n"
		"  -C            print the busy loop's calibration (ns per iteration) and exit\n"
		"  -i ITERS      busy-loop iterations per task (the task size)\n"
		"  -c NS         ns per iteration to count a task's time with (default: measured here;\n"
		"                with -C: the number of samples, default %d)\n"
		"  -w WORKERS    workers, one thread each (default 2; per rank on several)\n"
		"  -W WIDTH      graph width (repeatable; default 2 and 4)\n"
		"  -P PATTERN    trivial, stencil_1d, nearest, fft, tree (repeatable; default all)\n"
		"  -r RADIX      nearest's radix (default 5; 3 is stencil_1d)\n"
		"  -d SECONDS    ideal duration of one graph: sets the steps (default 0.1)\n"
		"  -N MAX_TASKS  at most this many tasks per graph (default 100000)\n"
		"  -T STEPS      exactly this many steps (overrides -d and -N)\n"
		"  -R REPEATS    timed runs of each graph (default 1), after one untimed warm-up\n",
		argv0, argv0, CALIBRATE_SAMPLES);
}

int metg_main(int argc, char **argv)
{
	int widths[MAX_WIDTHS], nwidths = 0, want[METG_PATTERN_COUNT] = {0}, any_pattern = 0;
	int workers = 2, radix = 5, repeats = 1, calibrate_only = 0, opt;
	long max_tasks = 100000, fixed_steps = 0;
	double ns_per_iter = 0, target_s = 0.1;
	long long iters = -1;

	while ((opt = getopt(argc, argv, "Ci:c:w:W:P:r:d:N:T:R:h")) != -1) {
		switch (opt) {
		case 'C':
			calibrate_only = 1;
			break;
		case 'i':
			iters = strtoll(optarg, NULL, 0);
			break;
		case 'c':
			ns_per_iter = strtod(optarg, NULL);
			break;
		case 'w':
			workers = atoi(optarg);
			break;
		case 'W':
			if (nwidths == MAX_WIDTHS || (widths[nwidths++] = atoi(optarg)) < 1) {
				fprintf(stderr, "metg: bad -W '%s'\n", optarg);
				return 2;
			}
			break;
		case 'P': {
			int p = parse_pattern(optarg);

			if (p < 0) {
				fprintf(stderr, "metg: unknown pattern '%s'\n", optarg);
				return 2;
			}
			want[p] = any_pattern = 1;
			break;
		}
		case 'r':
			radix = atoi(optarg);
			break;
		case 'd':
			target_s = strtod(optarg, NULL);
			break;
		case 'N':
			max_tasks = strtol(optarg, NULL, 0);
			break;
		case 'T':
			fixed_steps = strtol(optarg, NULL, 0);
			break;
		case 'R':
			repeats = atoi(optarg);
			break;
		case 'h':
			usage(stdout, argv[0]);
			return 0;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (self_check() != 0)
		return 1;
	if (calibrate_only) {
		int samples = ns_per_iter >= 1 ? (int)ns_per_iter : CALIBRATE_SAMPLES;

		printf("{\"bench\":\"metg_calibrate\",\"ns_per_iter\":%.6f,\"samples\":%d}\n",
		       calibrate(samples), samples);
		return 0;
	}
	if (optind < argc || iters < 0 || workers < 1 || repeats < 1 || radix < 1 ||
	    radix > METG_MAX_DEPS || target_s <= 0 || max_tasks < 1 || fixed_steps < 0 ||
	    ns_per_iter < 0) {
		usage(stderr, argv[0]);
		return 2;
	}
	if (nwidths == 0) {
		widths[nwidths++] = 2;
		widths[nwidths++] = 4;
	}
	for (int p = 0; p < METG_PATTERN_COUNT; p++)
		want[p] |= !any_pattern;
	if (ns_per_iter == 0)
		ns_per_iter = calibrate(CALIBRATE_SAMPLES);
	/* a task's time alone on one core: the unit of the efficiency */
	double task_s = (double)iters * ns_per_iter * 1e-9;

	char sched[128] = "";
	if (metg_rt_open(workers, sched, sizeof(sched)) != 0)
		return 1;

	/* Several ranks must build the same graphs, whose steps follow from the task time: rank
	 * 0's calibration (in femtoseconds per iteration) counts on every rank. */
	if (metg_nranks > 1) {
		long fs = metg_rt_sum(metg_rank == 0 ? (long)(ns_per_iter * 1e6 + 0.5) : 0);

		ns_per_iter = fs * 1e-6;
		task_s = (double)iters * ns_per_iter * 1e-9;
	}

	int rc = 0;
	for (int wi = 0; wi < nwidths && rc == 0; wi++) {
		for (int p = 0; p < METG_PATTERN_COUNT && rc == 0; p++) {
			if (!want[p])
				continue;
			/* No data: owner-computes has nothing to place its tasks by (ODX would run
			 * them all on rank 0), so a trivial graph is not a graph over ranks. */
			if (p == METG_TRIVIAL && metg_nranks > 1) {
				if (metg_rank == 0 && any_pattern)
					fprintf(stderr, "metg: trivial skipped on %d ranks (no data to "
						"place its tasks by)\n", metg_nranks);
				continue;
			}
			struct metg_graph g = {.pattern = p, .width = widths[wi], .radix = radix,
					       .iters = (uint64_t)iters};
			/* steps for about target_s of ideal time on `workers` cores */
			double ideal_step_s = task_s * g.width / (workers * metg_nranks);
			long steps = ideal_step_s > 0 ? (long)(target_s / ideal_step_s) : max_tasks;

			if (steps * g.width > max_tasks)
				steps = max_tasks / g.width;
			g.steps = fixed_steps ? fixed_steps : (steps < 8 ? 8 : steps);

			uint64_t *expect = malloc(sizeof(uint64_t) * g.steps * g.width);
			metg_records = malloc(sizeof(uint64_t) * g.steps * g.width);
			if (!expect || !metg_records) {
				fprintf(stderr, "metg: out of memory for %ld steps\n", g.steps);
				return 1;
			}

			/* untimed warm-up on a tenth of the steps: threads, pools, caches */
			struct metg_graph warm = g;
			double submit_s, total_s;
			warm.steps = g.steps / 10 < 4 ? 4 : g.steps / 10;
			if (warm.steps > g.steps)
				warm.steps = g.steps;
			rc = run_checked(&warm, expect, &submit_s, &total_s);

			for (int r = 0; r < repeats && rc == 0; r++) {
				rc = run_checked(&g, expect, &submit_s, &total_s);
				if (rc != 0)
					break;
				long tasks = metg_tasks(&g);
				double eff = tasks * task_s / (total_s * workers * metg_nranks);

				if (metg_rank != 0)
					continue;
				printf("{\"bench\":\"metg\",\"runtime\":\"%s\",\"sched\":\"%s\","
				       "\"pattern\":\"%s\",\"width\":%d,\"workers\":%d,\"ranks\":%d,"
				       "\"radix\":%d,\"steps\":%ld,\"tasks\":%ld,\"iters\":%lld,"
				       "\"ns_per_iter\":%.6f,\"task_us\":%.4f,\"wall_s\":%.6f,"
				       "\"submit_s\":%.6f,\"us_per_task_wall\":%.4f,"
				       "\"efficiency\":%.5f,\"verified\":true}\n",
				       metg_runtime_name, sched, metg_pattern_name(g.pattern), g.width,
				       workers * metg_nranks, metg_nranks,
				       g.pattern == METG_NEAREST ? radix : 0, g.steps, tasks, iters, ns_per_iter, task_s * 1e6, total_s, submit_s,
				       total_s * 1e6 / tasks, eff);
				fflush(stdout);
			}
			free(expect);
			free(metg_records);
			metg_records = NULL;
		}
	}
	metg_rt_close();
	return rc ? 1 : 0;
}
