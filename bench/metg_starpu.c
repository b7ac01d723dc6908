/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metg_starpu.c - the METG task graphs (metg.h) on StarPU 1.3, written against its public API as
 * a user would: W CPU workers (conf.ncpus, and STARPU_NCPU=W from bench/metg.sh), no CUDA or
 * OpenCL, StarPU's default scheduler (lws, work stealing, unless STARPU_SCHED says otherwise;
 * the JSON lines name it), one 8-byte variable handle per point and ring slot, implicit
 * dependencies from the access modes (inputs STARPU_R, the output STARPU_W), one
 * starpu_task_insert per task and one starpu_task_wait_for_all per graph.
 *
 * Built a second time with METG_STARPU_MPI as metg_starpu_mpi: the same graphs on StarPU-MPI
 * under mpirun, as its users write them: every handle registered on every rank with
 * starpu_mpi_data_register (owner metg_owner(i), home memory on the owner only), one
 * starpu_mpi_task_insert per task (owner computes, implicit transfers), a barrier before the
 * clock starts and starpu_mpi_wait_for_all at the end.
 */
#include <stdio.h>
#include <string.h>

#include <starpu.h>
#ifdef METG_STARPU_MPI
#include <starpu_mpi.h>
#endif

#include "metg.h"

const char *const metg_runtime_name = "starpu";

static void cpu_kernel(void *buffers[], void *cl_arg)
{
	const uint64_t *inputs[METG_MAX_DEPS];
	int nbuffers = (int)STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
	uint64_t id, iters;

	starpu_codelet_unpack_args(cl_arg, &id, &iters);
	/* buffers: the inputs in metg_deps order, then the output (none for trivial tasks) */
	for (int k = 0; k < nbuffers - 1; k++)
		inputs[k] = (const uint64_t *)STARPU_VARIABLE_GET_PTR(buffers[k]);
	metg_task(id, iters, inputs, nbuffers > 0 ? nbuffers - 1 : 0,
		  nbuffers > 0 ? (uint64_t *)STARPU_VARIABLE_GET_PTR(buffers[nbuffers - 1]) : NULL);
}

static struct starpu_codelet codelet = {
	.where = STARPU_CPU,
	.cpu_funcs = {cpu_kernel},
	.cpu_funcs_name = {"metg_cpu_kernel"},
	.nbuffers = STARPU_VARIABLE_NBUFFERS,
	.name = "metg",
};

int metg_rt_open(int workers, char *sched, size_t sched_size)
{
	struct starpu_conf conf;
	int rc;

	starpu_conf_init(&conf);
	conf.ncpus = workers;
	conf.ncuda = 0;
	conf.nopencl = 0;
#ifdef METG_STARPU_MPI
	rc = starpu_mpi_init_conf(NULL, NULL, 1, MPI_COMM_WORLD, &conf);
	if (rc == 0) {
		starpu_mpi_comm_rank(MPI_COMM_WORLD, &metg_rank);
		starpu_mpi_comm_size(MPI_COMM_WORLD, &metg_nranks);
	}
#else
	rc = starpu_init(&conf);
#endif
	if (rc != 0) {
		fprintf(stderr, "metg_starpu: starpu_init failed: %s\n", strerror(-rc));
		return -1;
	}
	if ((int)starpu_cpu_worker_get_count() != workers)
		fprintf(stderr, "metg_starpu: warning: %u CPU workers, not %d (STARPU_NCPU?)\n",
			starpu_cpu_worker_get_count(), workers);
	struct starpu_sched_policy *policy = starpu_sched_ctx_get_sched_policy(0);
	snprintf(sched, sched_size, "%s%s", policy && policy->policy_name ? policy->policy_name : "?",
		 metg_nranks > 1 ? "+mpi" : "");
	return 0;
}

int metg_rt_run(const struct metg_graph *g, double *submit_s, double *total_s)
{
	static uint64_t values[METG_RING * 64];
	starpu_data_handle_t handles[METG_RING * 64];
	struct starpu_data_descr descr[METG_MAX_DEPS + 1];
	int nbuf = g->width * METG_RING, deps[METG_MAX_DEPS], rc = 0;

	if (nbuf > (int)(sizeof(handles) / sizeof(handles[0]))) {
		fprintf(stderr, "metg_starpu: width %d is too wide (at most 64)\n", g->width);
		return -1;
	}
	if (g->pattern == METG_TRIVIAL)
		nbuf = 0;
	for (int k = 0; k < nbuf; k++) {
#ifdef METG_STARPU_MPI
		int owner = metg_owner(g, k % g->width);

		/* memory on the owner; elsewhere StarPU-MPI allocates what it receives */
		if (owner == metg_rank)
			starpu_variable_data_register(&handles[k], STARPU_MAIN_RAM,
						      (uintptr_t)&values[k], sizeof(values[k]));
		else
			starpu_variable_data_register(&handles[k], -1, 0, sizeof(values[k]));
		starpu_mpi_data_register(handles[k], k, owner);
#else
		starpu_variable_data_register(&handles[k], STARPU_MAIN_RAM, (uintptr_t)&values[k],
					      sizeof(values[k]));
#endif
	}
#ifdef METG_STARPU_MPI
	starpu_mpi_barrier(MPI_COMM_WORLD); /* every rank starts together */
#endif

	double t0 = metg_now_s();
	for (long t = 0; t < g->steps && rc == 0; t++) {
		for (int i = 0; i < metg_width_at(g, t) && rc == 0; i++) {
			int n = metg_deps(g, t, i, deps), nd = 0;
			uint64_t id = (uint64_t)(t * g->width + i), iters = g->iters;

			if (g->pattern != METG_TRIVIAL) {
				for (int k = 0; k < n; k++)
					descr[nd++] = (struct starpu_data_descr){
						handles[metg_slot(g, t - 1, deps[k])], STARPU_R};
				descr[nd++] = (struct starpu_data_descr){handles[metg_slot(g, t, i)],
									 STARPU_W};
			}
#ifdef METG_STARPU_MPI
			rc = starpu_mpi_task_insert(MPI_COMM_WORLD, &codelet, STARPU_DATA_MODE_ARRAY,
						    descr, nd, STARPU_VALUE, &id, sizeof(id),
						    STARPU_VALUE, &iters, sizeof(iters), 0);
#else
			rc = starpu_task_insert(&codelet, STARPU_DATA_MODE_ARRAY, descr, nd,
						STARPU_VALUE, &id, sizeof(id), STARPU_VALUE, &iters,
						sizeof(iters), 0);
#endif
			if (rc != 0)
				fprintf(stderr, "metg_starpu: starpu_task_insert failed: %s\n",
					strerror(-rc));
		}
	}
	double t1 = metg_now_s();
#ifdef METG_STARPU_MPI
	starpu_mpi_wait_for_all(MPI_COMM_WORLD); /* every rank's tasks, then a barrier */
#else
	starpu_task_wait_for_all();
#endif
	*submit_s = t1 - t0;
	*total_s = metg_now_s() - t0;
	for (int k = 0; k < nbuf; k++)
		starpu_data_unregister(handles[k]);
	return rc == 0 ? 0 : -1;
}

long metg_rt_sum(long v)
{
#ifdef METG_STARPU_MPI
	long sum = v;

	if (MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
		return v ? v : 1; /* counts as a failure */
	return sum;
#else
	return v;
#endif
}

void metg_rt_close(void)
{
#ifdef METG_STARPU_MPI
	starpu_mpi_shutdown();
#else
	starpu_shutdown();
#endif
}

int main(int argc, char **argv)
{
	return metg_main(argc, argv);
}
