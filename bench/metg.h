/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metg.h - what bench/metg_odx.c and bench/metg_starpu.c share: the task graphs, the task's
 * compute-bound kernel, the runtime interface each side implements, and the common driver
 * (bench/metg_common.c: options, calibration, verification, JSON lines).
 *
 * The Task Bench idea (Slaughter et al., SC'20): a graph of `width` points over `steps` time
 * steps; task (t, i) reads the outputs of some tasks (t - 1, j) and burns a fixed amount of
 * compute. METG(50%) is the smallest task duration at which the runtime still keeps the workers
 * 50% busy; bench/metg.sh sweeps the task size and computes it.
 *
 * Dependency patterns (Task Bench's definitions; steps t >= 1, none at t = 0):
 *   trivial     no dependencies, no data: tasks only burn compute
 *   stencil_1d  (t, i) reads (t-1, j) for j in [i-1, i+1] clipped to [0, width)
 *   nearest     (t, i) reads (t-1, j) for j in [i - radix/2, i + (radix-1)/2] clipped; radix 3
 *               is stencil_1d exactly, so the default radix here is 5
 *   fft         butterflies: with S = ceil(log2 width) sets, step t uses d = 2^((t + S - 1) % S)
 *               and (t, i) reads (t-1, i-d), (t-1, i), (t-1, i+d), those inside [0, width)
 *   tree        a binary tree fanning out: step t has min(width, 2^t) points (1, 2, 4, ...,
 *               then width), and (t, i) reads its parent (t-1, i/2); once the width is reached
 *               every step fans each point of the lower half out to two
 *
 * Every task's value is a hash of its id and its inputs' values, then the calibrated busy loop
 * (an LCG iterated `iters` times): bit-exact, no floats, and checked after each run against a
 * sequential evaluation that jumps the LCG ahead in O(log iters) instead of running it.
 */
#ifndef ODX_BENCH_METG_H
#define ODX_BENCH_METG_H

#include <stddef.h>
#include <stdint.h>

#define METG_MAX_DEPS 16  /* inputs of one task at most (nearest's radix is bounded by it) */
#define METG_RING 4	  /* buffers per column: step t writes slot t % METG_RING */

enum metg_pattern {
	METG_TRIVIAL,
	METG_STENCIL_1D,
	METG_NEAREST,
	METG_FFT,
	METG_TREE,
	METG_PATTERN_COUNT
};

struct metg_graph {
	enum metg_pattern pattern;
	int width;      /* points per step */
	long steps;     /* time steps */
	int radix;      /* nearest only */
	uint64_t iters; /* busy-loop iterations per task */
};

/* Every task's value, indexed t * width + i; the kernels write it, the driver checks it. */
extern uint64_t *metg_records;

/* --- the task's kernel, identical on both sides -------------------------------------------- */

#define METG_LCG_MUL UINT64_C(6364136223846793005)
#define METG_LCG_ADD UINT64_C(1442695040888963407)

/* Folds v into the hash h (a 64-bit multiply-xorshift mixer). */
static inline uint64_t metg_mix(uint64_t h, uint64_t v)
{
	h ^= v + UINT64_C(0x9e3779b97f4a7c15);
	h *= UINT64_C(0xbf58476d1ce4e5b9);
	h ^= h >> 31;
	h *= UINT64_C(0x94d049bb133111eb);
	return h ^ (h >> 29);
}

/* The busy loop: one dependent multiply-add per iteration. The empty asm hides x from the
 * optimiser, so the loop cannot be folded into a closed form or vectorised away. */
static inline uint64_t metg_burn(uint64_t x, uint64_t iters)
{
	for (uint64_t n = 0; n < iters; n++) {
		x = x * METG_LCG_MUL + METG_LCG_ADD;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

/* What metg_burn(x, iters) returns, in O(log iters): the LCG's affine map raised to the
 * iters-th power by squaring, (m, a) o (m, a) = (m^2, a * (m + 1)). */
static inline uint64_t metg_jump(uint64_t x, uint64_t iters)
{
	uint64_t acc_mul = 1, acc_add = 0, mul = METG_LCG_MUL, add = METG_LCG_ADD;

	for (; iters; iters >>= 1) {
		if (iters & 1) {
			acc_mul *= mul;
			acc_add = acc_add * mul + add;
		}
		add *= mul + 1;
		mul *= mul;
	}
	return acc_mul * x + acc_add;
}

/* The seed of task `id` from its inputs' values, in the order metg_deps lists them. */
static inline uint64_t metg_seed(uint64_t id, const uint64_t *const *inputs, int ninputs)
{
	uint64_t h = metg_mix(UINT64_C(0x6d657467), id);

	for (int k = 0; k < ninputs; k++)
		h = metg_mix(h, *inputs[k]);
	return h;
}

/* The whole task: both runtimes' kernels call this with their buffers' pointers. Writes the
 * value to *output (NULL for trivial tasks) and to the record the driver checks. */
static inline void metg_task(uint64_t id, uint64_t iters, const uint64_t *const *inputs,
			     int ninputs, uint64_t *output)
{
	uint64_t v = metg_burn(metg_seed(id, inputs, ninputs), iters);

	if (output)
		*output = v;
	metg_records[id] = v;
}

/* --- the graphs ----------------------------------------------------------------------------- */

/* How many points step t has: `width`, except in a tree's first steps. Task (t, i) exists for
 * i < metg_width_at(g, t); its id stays t * width + i. */
static inline int metg_width_at(const struct metg_graph *g, long t)
{
	if (g->pattern == METG_TREE && t < 30 && (1L << t) < g->width)
		return (int)(1L << t);
	return g->width;
}

/* Tasks in the whole graph. */
long metg_tasks(const struct metg_graph *g);

/* The points of step t - 1 that task (t, i) reads, ascending, into deps; returns how many. */
int metg_deps(const struct metg_graph *g, long t, int i, int deps[METG_MAX_DEPS]);

/* Which of the width * METG_RING buffers step t's point i writes (and step t + 1 reads). */
static inline int metg_slot(const struct metg_graph *g, long t, int i)
{
	return (int)(t % METG_RING) * g->width + i;
}

const char *metg_pattern_name(enum metg_pattern p);

/* --- several ranks ---------------------------------------------------------------------------- */

/* This process's rank and the job's size, set by metg_rt_open (0 and 1 when run alone). */
extern int metg_rank, metg_nranks;

/* The rank that runs column i: it owns the column's buffers (contiguous blocks of columns, as
 * odx_owner_block deals them), and both runtimes run a task where the buffer it writes lives. */
static inline int metg_owner(const struct metg_graph *g, int i)
{
	return (int)((long)i * metg_nranks / g->width);
}

/* --- what each runtime implements ------------------------------------------------------------ */

/* The runtime's name in the JSON lines ("odx", "starpu"). */
extern const char *const metg_runtime_name;

/* Starts the runtime with `workers` workers of one thread each (on each rank, when the program
 * was started as several), sets metg_rank and metg_nranks. Fills `sched` with the scheduler or
 * placement policy in use. Returns 0, or nonzero after printing why. */
int metg_rt_open(int workers, char *sched, size_t sched_size);

/* Runs the whole graph: registers its width * METG_RING buffers, submits every task in step
 * order, waits for all of them, releases the buffers. Sets *submit_s (first submission to the
 * last) and *total_s (first submission to the end of the wait). Returns 0 or nonzero. On several
 * ranks every rank submits the whole graph (each runtime runs a task on its column's owner and
 * moves the inputs), the clock starts after a barrier and stops once every rank is done. */
int metg_rt_run(const struct metg_graph *g, double *submit_s, double *total_s);

/* v summed over the ranks, on every rank (v itself on one). */
long metg_rt_sum(long v);

void metg_rt_close(void);

/* The common main: both programs' main() is this. */
int metg_main(int argc, char **argv);

double metg_now_s(void);

#endif /* ODX_BENCH_METG_H */
