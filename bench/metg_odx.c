/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metg_odx.c - the METG task graphs (metg.h) on ODX, written against the public API as a user
 * would: W host devices of one thread each (host.memnode left at its default, shared), the
 * default placement policy (or whatever ODX_POLICY says), one 8-byte buffer per point and ring
 * slot, dependencies inferred from the access modes (inputs ODX_R, the output ODX_W), one
 * odx_submit per task and one odx_wait_all per graph. bench/metg.sh runs it against
 * metg_starpu, the same graphs on StarPU.
 *
 * Under scripts/odx-run -n R it runs the graph over R ranks (bench/metg.sh -n R): column i's
 * buffers are owned by rank metg_owner(i), so its tasks run there and the fabric carries the
 * inputs that cross; odx_wait_all_ranks is the barrier before the clock starts and the wait
 * after the last submission.
 */
#include <stdio.h>
#include <string.h>

#include <odx/odx.h>

#include "metg.h"

const char *const metg_runtime_name = "odx";

static odx_context *ctx;
/* kernels[n]: n inputs (R) and one output (W); trivial: no buffers. Then (id, iters). */
static odx_kernel *kernels[METG_MAX_DEPS + 1];
static odx_kernel *trivial_kernel;

static void report(const char *what, int rc)
{
	const char *why = odx_last_error(ctx);

	fprintf(stderr, "metg_odx: %s failed: %s (%s)%s%s\n", what, odx_err_name(rc),
		odx_strerror(rc), why[0] ? ": " : "", why);
}

static int host_kernel(const odx_host_launch *l)
{
	const uint64_t *inputs[METG_MAX_DEPS];
	int nbuffers = l->nparams - 2;
	uint64_t id = (uint64_t)*(const int64_t *)l->scalars[l->nparams - 2];
	uint64_t iters = (uint64_t)*(const int64_t *)l->scalars[l->nparams - 1];

	/* buffers: the inputs in metg_deps order, then the output (none for trivial tasks) */
	for (int k = 0; k < nbuffers - 1; k++)
		inputs[k] = l->buffers[k];
	metg_task(id, iters, inputs, nbuffers > 0 ? nbuffers - 1 : 0,
		  nbuffers > 0 ? l->buffers[nbuffers - 1] : NULL);
	return 0;
}

static int make_kernel(int nbuffers, odx_kernel **out)
{
	const odx_kernel_variant variant = {
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_FN,
		.host_fn = host_kernel,
	};
	odx_param params[METG_MAX_DEPS + 3];
	char name[32];
	int np = 0;

	for (int k = 0; k < nbuffers; k++)
		params[np++] = (odx_param){ODX_ARG_BUFFER, k == nbuffers - 1 ? ODX_W : ODX_R, NULL};
	params[np++] = (odx_param){ODX_ARG_I64, 0, "id"};
	params[np++] = (odx_param){ODX_ARG_I64, 0, "iters"};
	snprintf(name, sizeof(name), "metg_%d", nbuffers);
	return odx_kernel_create(ctx, name, params, np, &variant, 1, out);
}

/* Notes the placement policy in use, as the context reports it. */
static void find_policy(void *user, const char *key, const char *value, const char *origin,
			const char *help)
{
	(void)origin;
	(void)help;
	if (strcmp(key, "policy") == 0)
		snprintf(user, 128, "%s", value);
}

int metg_rt_open(int workers, char *sched, size_t sched_size)
{
	odx_config *cfg;
	char text[16];
	int rc = odx_config_create(&cfg);

	if (rc < 0) {
		report("odx_config_create", rc);
		return -1;
	}
	snprintf(text, sizeof(text), "%d", workers);
	/* W workers like STARPU_NCPU=W: W host devices of one thread each */
	if ((rc = odx_config_set(cfg, "backends", "host")) < 0 ||
	    (rc = odx_config_set(cfg, "host.devices", text)) < 0 ||
	    (rc = odx_config_set(cfg, "host.threads", "1")) < 0) {
		fprintf(stderr, "metg_odx: configuration refused: %s\n", odx_config_error(cfg));
		odx_config_destroy(cfg);
		return -1;
	}
	rc = odx_open(&ctx, cfg);
	odx_config_destroy(cfg);
	if (rc < 0) {
		report("odx_open", rc);
		return -1;
	}
	metg_rank = odx_rank(ctx);
	metg_nranks = odx_size(ctx);
	char policy[128] = "?";
	odx_config_describe(ctx, find_policy, policy);
	snprintf(sched, sched_size, "%s", policy);

	for (int n = 1; n <= METG_MAX_DEPS + 1; n++)
		if ((rc = make_kernel(n, &kernels[n - 1])) < 0)
			goto fail;
	if ((rc = make_kernel(0, &trivial_kernel)) < 0)
		goto fail;
	return 0;
fail:
	report("odx_kernel_create", rc);
	odx_close(ctx);
	return -1;
}

int metg_rt_run(const struct metg_graph *g, double *submit_s, double *total_s)
{
	int nbuf = g->width * METG_RING, deps[METG_MAX_DEPS], rc = 0, made = 0;
	odx_buffer *bufs[METG_RING * 64];
	odx_arg args[METG_MAX_DEPS + 3];

	if (nbuf > (int)(sizeof(bufs) / sizeof(bufs[0]))) {
		fprintf(stderr, "metg_odx: width %d is too wide (at most 64)\n", g->width);
		return -1;
	}
	if (g->pattern != METG_TRIVIAL)
		for (; made < nbuf; made++) {
			if ((rc = odx_buffer_create(ctx, sizeof(uint64_t), 0, &bufs[made])) < 0) {
				report("odx_buffer_create", rc);
				goto out;
			}
			/* slot made / width, column made % width */
			if (metg_nranks > 1 &&
			    (rc = odx_buffer_set_owner(bufs[made], metg_owner(g, made % g->width))) < 0) {
				made++;
				report("odx_buffer_set_owner", rc);
				goto out;
			}
		}
	/* every rank starts together */
	if (metg_nranks > 1 && (rc = odx_wait_all_ranks(ctx, -1)) < 0) {
		report("odx_wait_all_ranks", rc);
		goto out;
	}

	double t0 = metg_now_s();
	for (long t = 0; t < g->steps; t++) {
		for (int i = 0; i < metg_width_at(g, t); i++) {
			int n = metg_deps(g, t, i, deps), nargs = 0;
			odx_kernel *kernel = trivial_kernel;

			if (g->pattern != METG_TRIVIAL) {
				for (int k = 0; k < n; k++)
					args[nargs++] = ODX_BUF(bufs[metg_slot(g, t - 1, deps[k])], ODX_R);
				args[nargs++] = ODX_BUF(bufs[metg_slot(g, t, i)], ODX_W);
				kernel = kernels[n];
			}
			args[nargs++] = ODX_I64(t * g->width + i);
			args[nargs++] = ODX_I64((int64_t)g->iters);
			if ((rc = odx_submit(ctx, kernel, args, nargs, NULL, NULL)) < 0) {
				report("odx_submit", rc);
				goto out_wait;
			}
		}
	}
	double t1 = metg_now_s();
	if ((rc = metg_nranks > 1 ? odx_wait_all_ranks(ctx, -1) : odx_wait_all(ctx, -1)) < 0)
		report("odx_wait_all", rc);
	*submit_s = t1 - t0;
	*total_s = metg_now_s() - t0;
	goto out;
out_wait:
	odx_wait_all(ctx, -1);
out:
	while (made > 0)
		odx_buffer_destroy(bufs[--made]);
	return rc < 0 ? -1 : 0;
}

long metg_rt_sum(long v)
{
	int64_t x = v;
	int rc = odx_allreduce(ctx, ODX_ARG_I64, ODX_REDUCE_SUM, &x, 1, -1);

	if (rc < 0) {
		report("odx_allreduce", rc);
		return v ? v : 1; /* counts as a failure */
	}
	return (long)x;
}

void metg_rt_close(void)
{
	int rc = odx_close(ctx);

	if (rc < 0)
		report("odx_close", rc);
	ctx = NULL;
}

int main(int argc, char **argv)
{
	return metg_main(argc, argv);
}
