/* SPDX-License-Identifier: Apache-2.0 */
/* deps_property_engine.c - see deps_property_engine.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "deps_property_engine.h"
#include "odx/odx.h"
#include "test_util.h"

#define NBUF 6	 /* shared buffers per graph */
#define NELEM 64 /* uint64 elements per shared buffer (DPE_NELEM in record.cl) */
#define NWIT 16	 /* uint64 elements per witness buffer (DPE_NWIT in record.cl) */
#define NTASK 40 /* operations per graph */
#define MAXARGS DPE_MAXARGS

/* ---- what a task does, shared by the kernel and the sequential reference ------------------- */

/* Mode of buffer slot i, packed two bits per slot. */
static int mode_of(int32_t modes, int i)
{
	return (modes >> (2 * i)) & 3;
}

/*
 * Applies task `id` to its `k` buffers and its witness for the work-groups
 * [first, first + count) of `groups`: group g owns the same share of every buffer's elements.
 * Reads of R buffers cover whole buffers (nothing writes them during the task).
 */
static void record_apply(int k, int32_t modes, uint64_t id, uint64_t *const *data, uint64_t *wit,
			 uint64_t groups, uint64_t first, uint64_t count)
{
	uint64_t reads = id;
	uint64_t lo = first * NELEM / groups, hi = (first + count) * NELEM / groups;
	uint64_t wlo = first * NWIT / groups, whi = (first + count) * NWIT / groups;

	for (int i = 0; i < k; i++) {
		if (mode_of(modes, i) != ODX_R)
			continue;
		for (int e = 0; e < NELEM; e++)
			reads = test_mix(reads, data[i][e]);
	}
	for (int i = 0; i < k; i++) {
		for (uint64_t e = lo; e < hi; e++) {
			switch (mode_of(modes, i)) {
			case ODX_W:
				data[i][e] = test_mix(test_mix(id, reads), e * 8 + (uint64_t)i);
				break;
			case ODX_RW:
				data[i][e] = data[i][e] * 31 + id + reads + e;
				break;
			default:
				break;
			}
		}
	}
	for (uint64_t e = wlo; e < whi; e++)
		wit[e] = test_mix(reads, e);
}

/* Signature: k shared buffers, the witness, i32 id, i32 modes. */
static int record_kernel(const odx_host_launch *l)
{
	int k = l->nparams - 3;
	uint64_t *data[MAXARGS];
	int32_t id, modes;
	uint64_t groups = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];

	if (k < 1 || k > MAXARGS || l->scalars[k + 1] == NULL || l->scalars[k + 2] == NULL) {
		snprintf(l->error, l->error_size, "record: bad launch (%d params)", l->nparams);
		return 1;
	}
	id = *(const int32_t *)l->scalars[k + 1];
	modes = *(const int32_t *)l->scalars[k + 2];
	for (int i = 0; i < k; i++) {
		if (l->buffer_sizes[i] != NELEM * sizeof(uint64_t) || l->scalars[i] != NULL) {
			snprintf(l->error, l->error_size, "record: buffer %d has %zu bytes", i,
				 l->buffer_sizes[i]);
			return 2;
		}
		data[i] = l->buffers[i];
	}
	if (l->buffer_sizes[k] != NWIT * sizeof(uint64_t)) {
		snprintf(l->error, l->error_size, "record: witness has %zu bytes",
			 l->buffer_sizes[k]);
		return 3;
	}
	if (l->group_count == 0 || l->group_first + l->group_count > groups) {
		snprintf(l->error, l->error_size, "record: groups [%llu, +%llu) of %llu",
			 (unsigned long long)l->group_first, (unsigned long long)l->group_count,
			 (unsigned long long)groups);
		return 4;
	}
	record_apply(k, modes, (uint64_t)id, data, l->buffers[k], groups, l->group_first,
		     l->group_count);
	return 0;
}

/* ---- one run ----------------------------------------------------------------------------- */

struct prop_run {
	const dpe_options *opt;
	odx_context *ctx;
	int ndevices;
	/* one kernel per (k, modes): index [k - 1][modes] */
	odx_kernel *kernels[MAXARGS][1 << (2 * MAXARGS)];
};

static odx_kernel *record_kernel_for(struct prop_run *run, int k, int32_t modes)
{
	odx_kernel_variant variants[1 + DPE_MAXVARIANTS];
	odx_param params[MAXARGS + 3];
	const dpe_variants *dv = run->opt->variants;
	odx_kernel *kernel = NULL;
	char name[64];
	int nv = 0;

	if (run->kernels[k - 1][modes])
		return run->kernels[k - 1][modes];
	for (int i = 0; i < k; i++)
		params[i] = (odx_param){ODX_ARG_BUFFER, (odx_access)mode_of(modes, i), "data"};
	params[k] = (odx_param){ODX_ARG_BUFFER, ODX_W, "witness"};
	params[k + 1] = (odx_param){ODX_ARG_I32, 0, "id"};
	params[k + 2] = (odx_param){ODX_ARG_I32, 0, "modes"};
	snprintf(name, sizeof(name), "record_%d_%d", k, (int)modes);
	variants[nv++] = (odx_kernel_variant){
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_FN,
		.host_fn = record_kernel,
	};
	for (int i = 0; dv && i < dv->n[k - 1]; i++)
		variants[nv++] = dv->v[k - 1][i];
	assert_ok(odx_kernel_create(run->ctx, name, params, k + 3, variants, nv, &kernel));
	assert_non_null(kernel);
	run->kernels[k - 1][modes] = kernel;
	return kernel;
}

static void check_equal(const struct prop_run *run, int graph, const char *what, int index,
			const uint64_t *got, const uint64_t *want, int n)
{
	for (int e = 0; e < n; e++) {
		if (got[e] != want[e])
			fail_msg("[%s] graph %d: %s %d element %d is %016llx, sequential order "
				 "gives %016llx",
				 run->opt->name, graph, what, index, e, (unsigned long long)got[e],
				 (unsigned long long)want[e]);
	}
}

/* Draws, runs and checks graph number `graph`. */
static void run_graph(struct prop_run *run, int graph)
{
	uint64_t rng = run->opt->seed * 1000003u + (uint64_t)graph;
	static uint64_t model[NBUF][NELEM], wit_model[NTASK][NWIT];
	uint64_t got[NELEM];
	odx_buffer *bufs[NBUF], *wits[NTASK];
	bool is_task[NTASK];

	/* shared buffers: random contents, or left as created (zeros) */
	for (int b = 0; b < NBUF; b++) {
		assert_ok(odx_buffer_create(run->ctx, NELEM * sizeof(uint64_t), 0, &bufs[b]));
		if (test_rand_below(&rng, 6) == 0) {
			memset(model[b], 0, sizeof(model[b]));
			continue;
		}
		for (int e = 0; e < NELEM; e++)
			model[b][e] = test_rand(&rng);
		assert_ok(
			odx_buffer_write(bufs[b], 0, model[b], sizeof(model[b]), TEST_TIMEOUT_MS));
	}

	for (int t = 0; t < NTASK; t++) {
		unsigned op = test_rand_below(&rng, 40);
		int b = (int)test_rand_below(&rng, NBUF);

		wits[t] = NULL;
		is_task[t] = false;
		if (op == 0) {
			/* host write of a random range, in program order */
			unsigned off = test_rand_below(&rng, NELEM);
			unsigned len = 1 + test_rand_below(&rng, NELEM - off);
			uint64_t src[NELEM];

			for (unsigned e = 0; e < len; e++)
				src[e] = test_rand(&rng);
			assert_ok(odx_buffer_write(bufs[b], off * sizeof(uint64_t), src,
						   len * sizeof(uint64_t), TEST_TIMEOUT_MS));
			memcpy(&model[b][off], src, len * sizeof(uint64_t));
			continue;
		}
		if (op == 1) {
			/* host read of a random range, in program order */
			unsigned off = test_rand_below(&rng, NELEM);
			unsigned len = 1 + test_rand_below(&rng, NELEM - off);

			assert_ok(odx_buffer_read(bufs[b], off * sizeof(uint64_t), got,
						  len * sizeof(uint64_t), TEST_TIMEOUT_MS));
			check_equal(run, graph, "host read of buffer", b, got, &model[b][off],
				    (int)len);
			continue;
		}

		/* a task over k distinct buffers */
		int k = 1 + (int)test_rand_below(&rng, MAXARGS);
		int slots[MAXARGS];
		int32_t modes = 0;
		odx_arg args[MAXARGS + 3];
		uint64_t *data[MAXARGS];
		uint32_t groups = 1u << test_rand_below(&rng, 4);
		char tag[32];
		odx_task_opts opts = {
			.priority = (int)test_rand_below(&rng, 3) - 1,
			.tag = tag,
			.grid = {groups, 1, 1},
		};

		for (int i = 0; i < k; i++) {
			bool fresh;

			do {
				slots[i] = (int)test_rand_below(&rng, NBUF);
				fresh = true;
				for (int j = 0; j < i; j++)
					fresh = fresh && slots[j] != slots[i];
			} while (!fresh);
			int mode = 1 + (int)test_rand_below(&rng, 3);
			/* the task may declare more than the kernel: RW for a W kernel */
			odx_access declared = (odx_access)mode;
			unsigned how = test_rand_below(&rng, 4);

			if (how == 0)
				declared = 0; /* as declared */
			else if (how == 1 && mode == ODX_W)
				declared = ODX_RW;
			modes |= mode << (2 * i);
			args[i] = ODX_BUF(bufs[slots[i]], declared);
			data[i] = model[slots[i]];
		}
		assert_ok(odx_buffer_create(run->ctx, NWIT * sizeof(uint64_t), 0, &wits[t]));
		args[k] = ODX_BUF(wits[t], ODX_W);
		args[k + 1] = ODX_I32(t);
		args[k + 2] = ODX_I32(modes);
		if (run->ndevices > 1 && test_rand_below(&rng, 6) == 0) {
			opts.flags |= ODX_SUBMIT_ON_DEVICE;
			opts.on_device = (int)test_rand_below(&rng, (unsigned)run->ndevices);
		}
		snprintf(tag, sizeof(tag), "g%d-t%d", graph, t);

		assert_ok(odx_submit(run->ctx, record_kernel_for(run, k, modes), args, k + 3, &opts,
				     NULL));
		record_apply(k, modes, (uint64_t)t, data, wit_model[t], 1, 0, 1);
		is_task[t] = true;
	}

	/* half the graphs drain first; the others rely on reads following program order */
	if (graph % 2 == 0)
		assert_ok(odx_wait_all(run->ctx, TEST_TIMEOUT_MS));
	for (int t = 0; t < NTASK; t++) {
		if (!is_task[t])
			continue;
		assert_ok(
			odx_buffer_read(wits[t], 0, got, NWIT * sizeof(uint64_t), TEST_TIMEOUT_MS));
		check_equal(run, graph, "witness of task", t, got, wit_model[t], NWIT);
		assert_ok(odx_buffer_destroy(wits[t]));
	}
	for (int b = 0; b < NBUF; b++) {
		assert_ok(odx_buffer_read(bufs[b], 0, got, sizeof(got), TEST_TIMEOUT_MS));
		check_equal(run, graph, "buffer", b, got, model[b], NELEM);
		assert_ok(odx_buffer_destroy(bufs[b]));
	}
	assert_ok(odx_wait_all(run->ctx, TEST_TIMEOUT_MS));
}

void dpe_run(odx_context *ctx, const dpe_options *o)
{
	struct prop_run run = {.opt = o, .ctx = ctx};

	run.ndevices = odx_device_count(ctx);
	assert_true(run.ndevices > 0);
	for (long g = 0; g < o->graphs; g++)
		run_graph(&run, (int)g);
	/* the kernels live until odx_close; destroying them here keeps the context reusable */
	for (int k = 0; k < MAXARGS; k++)
		for (int m = 0; m < (1 << (2 * MAXARGS)); m++)
			if (run.kernels[k][m])
				assert_ok(odx_kernel_destroy(run.kernels[k][m]));
}
