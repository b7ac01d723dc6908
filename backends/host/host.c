/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c - the CPU reference backend.
 *
 * Each host "device" behaves like a real one: its own memory node (separate allocations that the
 * core reaches only through handles and copies), a copy lane (a thread running memcpy jobs in
 * order and reporting completion asynchronously) and a compute lane (the core's worker thread plus
 * threads-1 helpers that split a launch's work-groups). So the whole asynchronous machinery of the
 * core runs for real without a GPU.
 *
 * A one-call variant (ODX_FORMAT_HOST_CALL, ABI 1.6) runs once on the launching thread instead,
 * with the helpers idle and at its disposal through a fork-join helper (odx_host_launch.run), and
 * with the launching thread's CPU affinity widened to the cores of all the device's threads while
 * it runs, so that threads a library starts from it (an OpenMP BLAS) are not confined to the one
 * core the worker is bound to.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../common/copy2d.h"
#include "odx/backend.h"

#define HOST_MAX_PARAMS 64
#define HOST_ERR_MAX 256

typedef struct host_state {
	const odx_backend_host *env;
	int ndevices;
	bool async;      /* host.async: a compute-lane thread, completion by callback */
	unsigned threads;
	unsigned cores;  /* the process's processing units, for the host.threads = 1 warning */
	uint64_t memory;
} host_state;

typedef struct host_job {
	struct host_job *next;
	void *dst;
	const void *src; /* NULL: fill dst with `byte` */
	size_t n;        /* bytes, or bytes per run of a strided copy (copy_2d) */
	size_t rows;     /* runs of a strided copy, 1 for a plain one */
	size_t dst_pitch, src_pitch;
	int byte;
	odx_backend_done_fn done;
	void *arg;
} host_job;

/* A launch queued on the asynchronous compute lane: everything copied out of the caller's
 * odx_backend_launch, which is valid only during the call. */
typedef struct host_exec {
	struct host_exec *next;
	const odx_kernel_variant *variant; /* NULL: a copy_sync_after (the fields below) */
	void *copy_dst;
	const void *copy_src;
	size_t copy_n;
	bool copied; /* set by the lane under copy_lock; the caller owns the item */
	odx_backend_arg args[HOST_MAX_PARAMS];
	odx_shape shapes[HOST_MAX_PARAMS]; /* ABI 1.7: per argument, when has_shapes */
	bool has_shapes;
	int nargs;
	uint32_t grid[3], block[3];
	int device;
	char tag[64];
	odx_backend_done_fn done;
	void *arg;
	/* ABI 1.8 (docs/sizes.md): per argument, its length at launch, when has_lengths; the
	 * core's set_length and its context */
	size_t lengths[HOST_MAX_PARAMS];
	bool has_lengths;
	void (*set_length)(void *ctx, int arg, int part, size_t bytes);
	void *set_length_ctx;
} host_exec;

/* What odx_host_launch.set_length reaches (length_state): the core's callback, and which
 * argument each buffer parameter is. */
typedef struct host_lengths {
	void (*set_length)(void *ctx, int arg, int part, size_t bytes);
	void *ctx;
	int nbuffers;
	int argof[HOST_MAX_PARAMS];
} host_lengths;

typedef struct host_dev host_dev;

typedef struct host_helper {
	host_dev *dev;
	unsigned index; /* 1 .. threads-1; the worker itself is 0 */
	pthread_t thread;
	char error[HOST_ERR_MAX];
} host_helper;

#define HOST_COPY_THREADS 2

struct host_dev {
	host_state *st;
	int odx_device;
	unsigned threads;
	unsigned bind_base;

	/* copy lane: two threads taking copies in queue order (they may finish out of order),
	 * started by the first copy: host devices sharing the host's memory (host.memnode =
	 * shared, the default) never copy between each other, so most never need them. Not on
	 * backends/common/lanes.h, whose lanes are one thread per queue with a lock of their own:
	 * here two threads share one queue, and copy_lock also guards the async compute lane's
	 * queue and copied_cond (copy_sync_after orders a copy behind queued launches). */
	pthread_t copy_thread[HOST_COPY_THREADS];
	unsigned copy_started;
	pthread_mutex_t copy_lock;
	pthread_cond_t copy_cond;
	host_job *head, *tail;
	bool copy_stop;

	/* asynchronous compute lane (host.async): one thread running launches in order */
	pthread_t compute_thread;
	bool compute_started;
	struct host_exec *exec_head, *exec_tail;
	bool compute_stop;
	pthread_cond_t copied_cond; /* a copy_sync_after's copy ran (under copy_lock) */

	/* compute helpers: one generation per split launch or fork-join run */
	host_helper *helpers;
	unsigned started; /* helpers running: 1 + started threads */
	unsigned bound;   /* helpers past their binding: their affinity is final */
	bool pool_busy;   /* a split launch or a fork-join run holds the helpers */
	bool forking;     /* this generation is a fork-join run (fork_*), not a split launch */
	odx_host_task_fn fork_fn;
	void *fork_arg;
	uint64_t fork_n;
	_Atomic uint64_t fork_next; /* the next index to hand out */
	atomic_bool fork_failed;   /* stop handing out indices */
	int fork_status;
	bool warned_one_thread;    /* the host.threads = 1 warning was logged */
	cpu_set_t helper_cpus;     /* the union of the helpers' affinities, once they are bound */
	bool have_helper_cpus;
	pthread_mutex_t pool_lock;
	pthread_cond_t work_cond;
	pthread_cond_t done_cond;
	uint64_t generation;
	unsigned remaining;
	unsigned chunks;
	uint64_t groups;
	const odx_host_launch *proto;
	odx_host_fn fn;
	int status;
	unsigned failed_chunk;
	bool pool_stop;
};

static int host_open(const odx_backend_host *env, void **state, char *reason, size_t reason_size)
{
	host_state *st = calloc(1, sizeof(*st));
	int64_t threads;

	if (!st) {
		snprintf(reason, reason_size, "out of memory");
		return ODX_ENOMEM;
	}
	int64_t ndevices = 1;

	st->env = env;
	threads = 0;
	st->memory = 0;
	/* Missing keys keep the defaults: an older core may not know them. */
	env->config_int(env->core, "host.devices", &ndevices);
	env->config_int(env->core, "host.threads", &threads);
	env->config_size(env->core, "host.memory", env->host_memory, &st->memory);
	env->config_bool(env->core, "host.async", &st->async);
	st->cores = env->host_cores;
	st->ndevices = ndevices > 0 ? (int)ndevices : 1;
	if (threads == 0)
		threads = env->host_cores / (unsigned)st->ndevices;
	st->threads = threads > 0 ? (unsigned)threads : 1;
	if (st->memory == 0)
		st->memory = env->host_memory / (uint64_t)st->ndevices;
	*state = st;
	return 0;
}

static void host_close(void *state)
{
	free(state);
}

static int host_device_count(void *state)
{
	return ((host_state *)state)->ndevices;
}

static void *copy_lane_main(void *arg)
{
	host_dev *d = arg;
	host_job *job;

	pthread_mutex_lock(&d->copy_lock);
	for (;;) {
		while (!d->head && !d->copy_stop)
			pthread_cond_wait(&d->copy_cond, &d->copy_lock);
		job = d->head;
		if (!job)
			break; /* stopping and drained */
		d->head = job->next;
		if (!d->head)
			d->tail = NULL;
		pthread_mutex_unlock(&d->copy_lock);
		if (job->src)
			odx__copy2d_memcpy(job->dst, job->dst_pitch, job->src, job->src_pitch,
					   job->n, job->rows);
		else
			memset(job->dst, job->byte, job->n);
		job->done(job->arg, 0, NULL);
		free(job);
		pthread_mutex_lock(&d->copy_lock);
	}
	pthread_mutex_unlock(&d->copy_lock);
	return NULL;
}

static void run_chunk(host_dev *d, odx_host_launch *l, unsigned chunk)
{
	uint64_t per = d->groups / d->chunks, extra = d->groups % d->chunks;
	int rc;

	/* The first `extra` chunks take one group more. */
	l->group_first = chunk * per + (chunk < extra ? chunk : extra);
	l->group_count = per + (chunk < extra ? 1 : 0);
	l->thread = (int)chunk;
	rc = d->fn(l);
	/* A kernel may fill its error text to the brim without a NUL: cut it at the last byte. */
	if (l->error_size > 0)
		l->error[l->error_size - 1] = '\0';
	if (rc != 0) {
		pthread_mutex_lock(&d->pool_lock);
		if (d->status == 0) {
			d->status = rc;
			d->failed_chunk = chunk;
		}
		pthread_mutex_unlock(&d->pool_lock);
	}
}

/* The fork-join thread index of the calling thread while it runs indices of a fork-join run, so
 * that a run called from inside one (done in order) passes the same index on. */
static _Thread_local int fork_thread = -1;

/* One participant of a fork-join run: takes indices until none is left or one failed. */
static void fork_work(host_dev *d, int thread)
{
	int saved = fork_thread;

	fork_thread = thread;
	while (!atomic_load_explicit(&d->fork_failed, memory_order_relaxed)) {
		uint64_t i = atomic_fetch_add(&d->fork_next, 1);
		int rc;

		if (i >= d->fork_n)
			break;
		rc = d->fork_fn(d->fork_arg, i, thread);
		if (rc != 0) {
			pthread_mutex_lock(&d->pool_lock);
			if (d->fork_status == 0)
				d->fork_status = rc;
			pthread_mutex_unlock(&d->pool_lock);
			atomic_store(&d->fork_failed, true);
		}
	}
	fork_thread = saved;
}

/* odx_host_launch.run where the helpers cannot take part: every index in order, here. */
static int run_in_order(const odx_host_launch *l, uint64_t n, odx_host_task_fn fn, void *arg)
{
	int thread = fork_thread >= 0 ? fork_thread : l->thread;
	uint64_t i;
	int rc;

	if (!fn)
		return ODX_EINVAL;
	for (i = 0; i < n; i++) {
		rc = fn(arg, i, thread);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* odx_host_launch.run of a one-call variant: the calling thread and the idle helpers take the
 * indices one at a time (uneven costs balance themselves). If the helpers are taken (a run from
 * inside fn, or from a second thread of the kernel) the indices run in order on the caller. */
static int run_forked(const odx_host_launch *l, uint64_t n, odx_host_task_fn fn, void *arg)
{
	host_dev *d = l->run_state;
	int rc;

	if (!fn)
		return ODX_EINVAL;
	pthread_mutex_lock(&d->pool_lock);
	if (d->pool_busy || d->threads <= 1 || n <= 1) {
		pthread_mutex_unlock(&d->pool_lock);
		return run_in_order(l, n, fn, arg);
	}
	d->pool_busy = true;
	d->forking = true;
	d->fork_fn = fn;
	d->fork_arg = arg;
	d->fork_n = n;
	atomic_store(&d->fork_next, 0);
	atomic_store(&d->fork_failed, false);
	d->fork_status = 0;
	d->chunks = n < d->threads ? (unsigned)n : d->threads;
	d->remaining = d->threads - 1;
	d->generation++;
	pthread_cond_broadcast(&d->work_cond);
	pthread_mutex_unlock(&d->pool_lock);

	fork_work(d, 0);

	pthread_mutex_lock(&d->pool_lock);
	while (d->remaining > 0)
		pthread_cond_wait(&d->done_cond, &d->pool_lock);
	rc = d->fork_status;
	d->forking = false;
	d->pool_busy = false;
	pthread_mutex_unlock(&d->pool_lock);
	return rc;
}

static void *helper_main(void *arg)
{
	host_helper *h = arg;
	host_dev *d = h->dev;
	uint64_t seen = 0;
	odx_host_launch l;

	if (d->st->env->bind_thread)
		d->st->env->bind_thread(d->st->env->core, d->bind_base + h->index);
	pthread_mutex_lock(&d->pool_lock);
	d->bound++;
	pthread_cond_broadcast(&d->done_cond);
	for (;;) {
		while (d->generation == seen && !d->pool_stop)
			pthread_cond_wait(&d->work_cond, &d->pool_lock);
		if (d->pool_stop)
			break;
		seen = d->generation;
		if (h->index < d->chunks && d->forking) {
			pthread_mutex_unlock(&d->pool_lock);
			fork_work(d, (int)h->index);
			pthread_mutex_lock(&d->pool_lock);
		} else if (h->index < d->chunks) {
			l = *d->proto;
			l.error = h->error;
			l.error_size = sizeof(h->error);
			h->error[0] = '\0';
			pthread_mutex_unlock(&d->pool_lock);
			run_chunk(d, &l, h->index);
			pthread_mutex_lock(&d->pool_lock);
		}
		if (--d->remaining == 0)
			pthread_cond_signal(&d->done_cond);
	}
	pthread_mutex_unlock(&d->pool_lock);
	return NULL;
}

static void host_device_close(void *dev);
static void *compute_lane_main(void *arg);

static int host_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
			    void **out)
{
	host_state *st = state;
	host_dev *d = calloc(1, sizeof(*d));
	unsigned i;

	if (!d)
		return ODX_ENOMEM;
	d->st = st;
	d->odx_device = odx_device;
	d->threads = st->threads;
	d->bind_base = (unsigned)index * st->threads;
	pthread_mutex_init(&d->copy_lock, NULL);
	pthread_cond_init(&d->copy_cond, NULL);
	pthread_cond_init(&d->copied_cond, NULL);
	pthread_mutex_init(&d->pool_lock, NULL);
	pthread_cond_init(&d->work_cond, NULL);
	pthread_cond_init(&d->done_cond, NULL);
	d->helpers = calloc(d->threads, sizeof(*d->helpers));
	if (!d->helpers)
		goto out_close;
	for (i = 1; i < d->threads; i++) {
		d->helpers[i].dev = d;
		d->helpers[i].index = i;
		if (pthread_create(&d->helpers[i].thread, NULL, helper_main, &d->helpers[i]) != 0)
			goto out_close;
		d->started = i;
	}
	/* A one-call variant widens its thread to the helpers' cores: wait until they are bound. */
	pthread_mutex_lock(&d->pool_lock);
	while (d->bound < d->started)
		pthread_cond_wait(&d->done_cond, &d->pool_lock);
	pthread_mutex_unlock(&d->pool_lock);
	CPU_ZERO(&d->helper_cpus);
	d->have_helper_cpus = d->started > 0;
	for (i = 1; i <= d->started; i++) {
		cpu_set_t one;

		if (pthread_getaffinity_np(d->helpers[i].thread, sizeof(one), &one) != 0)
			d->have_helper_cpus = false; /* more CPUs than cpu_set_t holds: no widening */
		else
			CPU_OR(&d->helper_cpus, &d->helper_cpus, &one);
	}
	if (st->async) {
		if (pthread_create(&d->compute_thread, NULL, compute_lane_main, d) != 0)
			goto out_close;
		d->compute_started = true;
	}
	snprintf(props->name, sizeof(props->name), "host device %d (%u thread%s%s)", index,
		 d->threads, d->threads == 1 ? "" : "s", st->async ? ", asynchronous" : "");
	props->memory_bytes = st->memory;
	props->compute_lanes = 1;
	props->copy_lanes = HOST_COPY_THREADS;
	props->threads = (int)d->threads;
	props->pci_bus_id[0] = '\0';
	props->host_visible = true;
	props->ordered_compute = st->async; /* one thread runs launches and reports them in order */
	props->mem_align = 64; /* what host_mem_alloc aligns to: a cache line */
	*out = d;
	return 0;

out_close:
	host_device_close(d);
	return ODX_ENOMEM;
}

static void host_device_close(void *dev)
{
	host_dev *d = dev;
	unsigned i;

	pthread_mutex_lock(&d->copy_lock);
	d->copy_stop = true;
	d->compute_stop = true;
	pthread_cond_broadcast(&d->copy_cond);
	pthread_mutex_unlock(&d->copy_lock);
	for (i = 0; i < d->copy_started; i++)
		pthread_join(d->copy_thread[i], NULL);
	if (d->compute_started)
		pthread_join(d->compute_thread, NULL);

	pthread_mutex_lock(&d->pool_lock);
	d->pool_stop = true;
	pthread_cond_broadcast(&d->work_cond);
	pthread_mutex_unlock(&d->pool_lock);
	for (i = 1; i <= d->started; i++)
		pthread_join(d->helpers[i].thread, NULL);
	free(d->helpers);
	pthread_mutex_destroy(&d->copy_lock);
	pthread_cond_destroy(&d->copy_cond);
	pthread_cond_destroy(&d->copied_cond);
	pthread_mutex_destroy(&d->pool_lock);
	pthread_cond_destroy(&d->work_cond);
	pthread_cond_destroy(&d->done_cond);
	free(d);
}

/* Allocations of 2 MiB and more (the memory pool's chunks) are 2 MiB-aligned and asked to live
 * in transparent huge pages (Debian's default THP mode grants them on madvise): one fault per
 * 2 MiB at first touch instead of 512, fewer TLB misses for kernels streaming through them, and
 * fresh mappings whatever glibc's mmap threshold has drifted to. */
#define HOST_HUGE_PAGE ((size_t)2 << 20)

static int host_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle)
{
	host_dev *d = dev;
	size_t align = size >= HOST_HUGE_PAGE ? HOST_HUGE_PAGE : 64;
	size_t rounded = (size + align - 1) & ~(align - 1);
	void *p = aligned_alloc(align, rounded ? rounded : 64);

	if (!p) {
		const odx_backend_host *env = d->st->env;

		if (ODX_BACKEND_HAS_OP(env, odx_backend_host, error_detail))
			env->error_detail(env->core, "the host's allocator refused that size");
		return ODX_ENOMEM;
	}
#ifdef MADV_HUGEPAGE
	if (align == HOST_HUGE_PAGE)
		madvise(p, rounded, MADV_HUGEPAGE); /* advice: refused costs nothing */
#endif
	if (zero)
		memset(p, 0, size);
	*handle = (uint64_t)(uintptr_t)p;
	return 0;
}

static void host_mem_free(void *dev, uint64_t handle, size_t size)
{
	(void)dev;
	(void)size;
	free((void *)(uintptr_t)handle);
}

/* Device memory is host memory. */
static int host_mem_map(void *dev, uint64_t handle, void **ptr)
{
	(void)dev;
	*ptr = (void *)(uintptr_t)handle;
	return 0;
}

/* copy_lock held: starts the copy lane's threads if none runs yet. One is enough to go on; a
 * later copy tries again when none could start. */
static int start_copy_lane(host_dev *d)
{
	while (d->copy_started < HOST_COPY_THREADS &&
	       pthread_create(&d->copy_thread[d->copy_started], NULL, copy_lane_main, d) == 0)
		d->copy_started++;
	return d->copy_started > 0 ? 0 : ODX_ENOMEM;
}

/* Queues `job` (malloc'ed; the lane frees it) on the copy lane, starting the lane on the first
 * copy; ODX_ENOMEM (job freed) when no lane thread could start. */
static int push_job(host_dev *d, host_job *job)
{
	pthread_mutex_lock(&d->copy_lock);
	if (d->copy_started == 0 && start_copy_lane(d) != 0) {
		pthread_mutex_unlock(&d->copy_lock);
		free(job);
		return ODX_ENOMEM;
	}
	if (d->tail)
		d->tail->next = job;
	else
		d->head = job;
	d->tail = job;
	/* Broadcast: the compute lane thread waits on the same condition. */
	pthread_cond_broadcast(&d->copy_cond);
	pthread_mutex_unlock(&d->copy_lock);
	return 0;
}

static int queue_job(host_dev *d, void *dst, const void *src, size_t n, int byte,
		     odx_backend_done_fn done, void *arg)
{
	host_job *job = malloc(sizeof(*job));

	if (!job)
		return ODX_ENOMEM;
	*job = (host_job){.dst = dst, .src = src, .n = n, .rows = 1, .dst_pitch = n, .src_pitch = n,
			  .byte = byte, .done = done, .arg = arg};
	return push_job(d, job);
}

static int host_copy_h2d(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
			 odx_backend_done_fn done, void *arg)
{
	return queue_job(dev, (char *)(uintptr_t)dst + dst_off, src, n, 0, done, arg);
}

static int host_copy_d2h(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
			 odx_backend_done_fn done, void *arg)
{
	return queue_job(dev, dst, (const char *)(uintptr_t)src + src_off, n, 0, done, arg);
}

static int host_copy_d2d(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
			 size_t src_off, size_t n, odx_backend_done_fn done, void *arg)
{
	(void)src_dev;
	return queue_job(dev, (char *)(uintptr_t)dst + dst_off,
			 (const char *)(uintptr_t)src + src_off, n, 0, done, arg);
}

/* ABI 1.7: a strided copy on the copy lane, like the others. Both sides are host pointers (a
 * host device's memory is host memory), so one direction covers h2d, d2h and d2d between host
 * devices, whichever device's memory the source is. */
static int host_copy_2d(void *dev, const odx_backend_copy2d *c, odx_backend_done_fn done,
			void *arg)
{
	host_job *job;
	int rc = odx__copy2d_check(c);

	if (rc)
		return rc;
	job = malloc(sizeof(*job));
	if (!job)
		return ODX_ENOMEM;
	*job = (host_job){
		.dst = c->dst_host ? c->dst_host : (char *)(uintptr_t)c->dst + c->dst_off,
		.src = c->src_host ? c->src_host : (const char *)(uintptr_t)c->src + c->src_off,
		.n = c->width,
		.rows = c->rows,
		.dst_pitch = c->dst_pitch,
		.src_pitch = c->src_pitch,
		.done = done,
		.arg = arg,
	};
	return push_job(dev, job);
}

/* Widens the calling thread's affinity to its own cores and its helpers' (the device's cores)
 * and keeps the old one in *saved. False when there is nothing to widen (one thread, binding
 * off) or the system refused: the kernel then runs with the thread's affinity as it is. */
static bool widen_affinity(host_dev *d, cpu_set_t *saved)
{
	cpu_set_t wide;

	if (!d->have_helper_cpus ||
	    pthread_getaffinity_np(pthread_self(), sizeof(*saved), saved) != 0)
		return false;
	CPU_OR(&wide, saved, &d->helper_cpus);
	if (CPU_EQUAL(&wide, saved))
		return false;
	return pthread_setaffinity_np(pthread_self(), sizeof(wide), &wide) == 0;
}

/* A one-call variant: once, on this thread, with the helpers idle for l->run. */
static int run_one_call(host_dev *d, const odx_kernel_variant *variant, odx_host_launch *l,
			int *native)
{
	const odx_backend_host *env = d->st->env;
	unsigned share = d->st->cores / (unsigned)d->st->ndevices;
	cpu_set_t saved;
	bool widened;
	int rc;

	/* host.threads = 1 on a machine with cores to spare: say so once, the call gets one. */
	if (d->threads == 1 && share > 1 && !d->warned_one_thread) {
		char msg[256];

		snprintf(msg, sizeof(msg),
			 "host device %d: one-call kernel runs on 1 thread (host.threads = 1) "
			 "while %u cores per device are available; set host.threads = 0 to give "
			 "it all of them",
			 d->odx_device, share);
		env->log(env->core, ODX_LOG_WARN, msg);
		d->warned_one_thread = true;
	}
	l->run = run_forked;
	widened = widen_affinity(d, &saved);
	rc = variant->host_fn(l);
	if (widened)
		pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	l->error[l->error_size - 1] = '\0'; /* the kernel's text may lack its NUL */
	*native = rc;
	return rc != 0 ? ODX_EKERNEL : 0;
}

/* odx_host_launch.set_length: buffer parameter `param` is the core's argument argof[param]. A
 * parameter that does not exist is passed on as argument -1, which the core refuses (failing the
 * task with a message), as it refuses everything else it cannot apply. */
static void host_set_length(const odx_host_launch *l, int param, int part, size_t bytes)
{
	const host_lengths *hl = l->length_state;

	if (!hl || !hl->set_length)
		return;
	hl->set_length(hl->ctx, param >= 0 && param < hl->nbuffers ? hl->argof[param] : -1, part,
		       bytes);
}

/* Runs a launch on the calling thread (plus the helpers); the kernel's message goes to `error`,
 * its return value to *native. `lengths` (per argument) and `hl` come from a core of ABI 1.8 or
 * later, else NULL. */
static int host_run(host_dev *d, const odx_kernel_variant *variant, const odx_backend_arg *args,
		    const odx_shape *shapes, const size_t *lengths, host_lengths *hl, int nargs,
		    const uint32_t grid[3], const uint32_t block[3], int device, const char *tag,
		    char *error, size_t error_size, int *native)
{
	void *bufs[HOST_MAX_PARAMS];
	size_t sizes[HOST_MAX_PARAMS], blens[HOST_MAX_PARAMS];
	odx_shape bshapes[HOST_MAX_PARAMS];
	odx_arg_kind kinds[HOST_MAX_PARAMS];
	const void *scalars[HOST_MAX_PARAMS];
	odx_host_launch l;
	uint64_t groups;
	int i, nb = 0;

	*native = 0;
	for (i = 0; i < nargs; i++) {
		const odx_backend_arg *a = &args[i];

		kinds[i] = a->kind;
		if (a->kind == ODX_ARG_BUFFER) {
			/* ABI 1.2: the argument starts v.offset bytes into the allocation. */
			bufs[nb] = (char *)(uintptr_t)a->mem + a->v.offset;
			sizes[nb] = a->size;
			/* ABI 1.7: the core's layout of the bytes (a tile inside its parent), or
			 * one run when it gave none. */
			if (shapes && shapes[i].count > 0)
				bshapes[nb] = shapes[i];
			else
				bshapes[nb] = (odx_shape){a->size, 1, a->size};
			/* ABI 1.8: its valid bytes; all of them from an older core. */
			blens[nb] = lengths ? lengths[i] : a->size;
			if (hl)
				hl->argof[nb] = i;
			nb++;
			scalars[i] = NULL;
		} else {
			scalars[i] = &a->v;
		}
	}
	/* The core refuses a grid whose group count overflows 64 bits; a direct caller of the
	 * backend might not have: checked multiplication, never a wrapped count. */
	if (__builtin_mul_overflow((uint64_t)grid[0] * grid[1], (uint64_t)grid[2], &groups)) {
		snprintf(error, error_size, "host backend: grid %u x %u x %u overflows 64 bits",
			 grid[0], grid[1], grid[2]);
		return ODX_EINVAL;
	}
	l = (odx_host_launch){
		.buffers = bufs,
		.buffer_sizes = sizes,
		.buffer_shapes = bshapes,
		.kinds = kinds,
		.scalars = scalars,
		.nparams = nargs,
		.grid = {grid[0], grid[1], grid[2]},
		.block = {block[0], block[1], block[2]},
		.group_first = 0,
		.group_count = groups,
		.device = device,
		.thread = 0,
		.tag = tag ? tag : "",
		.error = error,
		.error_size = error_size,
		.threads = (int)d->threads,
		.run = run_in_order, /* a split launch's helpers are busy with it */
		.run_state = d,
		.buffer_lengths = blens,
		.set_length = host_set_length,
		.length_state = hl,
	};
	if (hl)
		hl->nbuffers = nb;
	error[0] = '\0';
	if (variant->format == ODX_FORMAT_HOST_CALL)
		return run_one_call(d, variant, &l, native);
	if (d->threads <= 1 || groups <= 1) {
		/* The common case: run on the worker thread itself, no hand-off. */
		int rc = variant->host_fn(&l);

		error[error_size - 1] = '\0'; /* the kernel's text may lack its NUL */
		*native = rc;
		return rc != 0 ? ODX_EKERNEL : 0;
	}
	pthread_mutex_lock(&d->pool_lock);
	d->pool_busy = true;
	d->proto = &l;
	d->fn = variant->host_fn;
	d->groups = groups;
	d->chunks = groups < d->threads ? (unsigned)groups : d->threads;
	d->status = 0;
	d->remaining = d->threads - 1;
	d->generation++;
	pthread_cond_broadcast(&d->work_cond);
	pthread_mutex_unlock(&d->pool_lock);

	{
		/* Helpers copy the prototype; chunk 0 works on its own copy. */
		odx_host_launch mine = l;

		run_chunk(d, &mine, 0);
	}

	pthread_mutex_lock(&d->pool_lock);
	while (d->remaining > 0)
		pthread_cond_wait(&d->done_cond, &d->pool_lock);
	*native = d->status;
	if (d->status != 0 && d->failed_chunk != 0)
		snprintf(error, error_size, "%s", d->helpers[d->failed_chunk].error);
	d->pool_busy = false;
	pthread_mutex_unlock(&d->pool_lock);
	return *native != 0 ? ODX_EKERNEL : 0;
}

static void *compute_lane_main(void *arg)
{
	host_dev *d = arg;
	char error[HOST_ERR_MAX], msg[HOST_ERR_MAX + 64];
	host_exec *e;
	int rc, native;

	pthread_mutex_lock(&d->copy_lock);
	for (;;) {
		while (!d->exec_head && !d->compute_stop)
			pthread_cond_wait(&d->copy_cond, &d->copy_lock);
		e = d->exec_head;
		if (!e)
			break;
		d->exec_head = e->next;
		if (!d->exec_head)
			d->exec_tail = NULL;
		pthread_mutex_unlock(&d->copy_lock);
		if (!e->variant) {
			/* copy_sync_after: every launch before it ran and was reported. */
			memcpy(e->copy_dst, e->copy_src, e->copy_n);
			pthread_mutex_lock(&d->copy_lock);
			e->copied = true;
			pthread_cond_broadcast(&d->copied_cond);
			continue;
		}
		{
			host_lengths hl = {.set_length = e->set_length, .ctx = e->set_length_ctx};

			rc = host_run(d, e->variant, e->args, e->has_shapes ? e->shapes : NULL,
				      e->has_lengths ? e->lengths : NULL, &hl, e->nargs, e->grid,
				      e->block, e->device, e->tag, error, sizeof(error), &native);
		}
		if (rc)
			snprintf(msg, sizeof(msg), "%s (kernel returned %d)", error, native);
		/* In launch order, from this one thread: what ordered_compute promises. */
		e->done(e->arg, rc, rc ? msg : NULL);
		free(e);
		pthread_mutex_lock(&d->copy_lock);
	}
	pthread_mutex_unlock(&d->copy_lock);
	return NULL;
}

/* ABI 1.5: the copy is queued on the compute lane behind the launches there, which the lane
 * runs and reports in order, so when it ran they are reported too. Without an asynchronous
 * lane a launch completes inside its call and nothing can be in flight: a plain copy. */
static int host_copy_sync_after(void *dev, bool to_device, uint64_t mem, size_t off, void *host,
				size_t n, char *error, size_t error_size)
{
	host_dev *d = dev;
	char *p = (char *)(uintptr_t)mem + off;
	host_exec e = {.copy_dst = to_device ? (void *)p : host,
		       .copy_src = to_device ? (const void *)host : p,
		       .copy_n = n};

	(void)error;
	(void)error_size;
	if (!d->st->async) {
		memcpy(e.copy_dst, e.copy_src, n);
		return 0;
	}
	pthread_mutex_lock(&d->copy_lock);
	if (d->exec_tail)
		d->exec_tail->next = &e;
	else
		d->exec_head = &e;
	d->exec_tail = &e;
	pthread_cond_broadcast(&d->copy_cond);
	while (!e.copied)
		pthread_cond_wait(&d->copied_cond, &d->copy_lock);
	pthread_mutex_unlock(&d->copy_lock);
	return 0;
}

static int host_launch(void *dev, odx_backend_launch *bl, odx_backend_done_fn done, void *arg)
{
	host_dev *d = dev;
	const odx_shape *shapes = NULL;
	const size_t *lengths = NULL;
	host_lengths hl = {0};
	host_exec *e;

	if (bl->nargs > HOST_MAX_PARAMS) {
		snprintf(bl->error, bl->error_size, "host backend: %d parameters (at most %d)",
			 bl->nargs, HOST_MAX_PARAMS);
		return ODX_EINVAL;
	}
	/* odx_backend_launch.shapes exists only in a core of ABI 1.7 or later. */
	if ((d->st->env->abi_version & 0xffff) >= 7)
		shapes = bl->shapes;
	/* lengths and set_length exist only in a core of ABI 1.8 or later. */
	if ((d->st->env->abi_version & 0xffff) >= 8) {
		lengths = bl->lengths;
		hl.set_length = bl->set_length;
		hl.ctx = bl->set_length_ctx;
	}
	if (!d->st->async)
		return host_run(d, bl->variant, bl->args, shapes, lengths, &hl, bl->nargs, bl->grid,
				bl->block, bl->device, bl->tag, bl->error, bl->error_size,
				&bl->native);
	e = malloc(sizeof(*e));
	if (!e)
		return ODX_ENOMEM;
	e->next = NULL;
	e->variant = bl->variant;
	memcpy(e->args, bl->args, (size_t)bl->nargs * sizeof(*bl->args));
	e->has_shapes = shapes != NULL;
	if (shapes)
		memcpy(e->shapes, shapes, (size_t)bl->nargs * sizeof(*shapes));
	e->has_lengths = lengths != NULL;
	if (lengths)
		memcpy(e->lengths, lengths, (size_t)bl->nargs * sizeof(*lengths));
	e->set_length = hl.set_length;
	e->set_length_ctx = hl.ctx;
	e->nargs = bl->nargs;
	memcpy(e->grid, bl->grid, sizeof(e->grid));
	memcpy(e->block, bl->block, sizeof(e->block));
	e->device = bl->device;
	snprintf(e->tag, sizeof(e->tag), "%s", bl->tag ? bl->tag : "");
	e->done = done;
	e->arg = arg;
	/* The compute lane shares the copy lane's lock: one queue lock per device is plenty. */
	pthread_mutex_lock(&d->copy_lock);
	if (d->exec_tail)
		d->exec_tail->next = e;
	else
		d->exec_head = e;
	d->exec_tail = e;
	pthread_cond_broadcast(&d->copy_cond);
	pthread_mutex_unlock(&d->copy_lock);
	return ODX_BACKEND_PENDING;
}

/* Host variants only: work-group chunks and one-call variants (1.6). */
static bool host_can_run(void *dev, const odx_kernel_variant *variant)
{
	(void)dev;
	return variant->backend == ODX_BACKEND_HOST && (variant->format == ODX_FORMAT_HOST_FN ||
							variant->format == ODX_FORMAT_HOST_CALL);
}

static const odx_backend_ops host_ops = {
	.size = sizeof(odx_backend_ops),
	.open = host_open,
	.close = host_close,
	.device_count = host_device_count,
	.device_open = host_device_open,
	.device_close = host_device_close,
	.mem_alloc = host_mem_alloc,
	.mem_free = host_mem_free,
	.copy_h2d = host_copy_h2d,
	.copy_d2h = host_copy_d2h,
	.copy_d2d = host_copy_d2d,
	.launch = host_launch,
	.can_run = host_can_run,
	.mem_map = host_mem_map,
	.copy_sync_after = host_copy_sync_after,
	.copy_2d = host_copy_2d,
};

const odx_backend_descriptor odx__host_descriptor = {
	.size = sizeof(odx_backend_descriptor),
	.abi_version = ODX_BACKEND_ABI_VERSION,
	.name = "host",
	.kind = ODX_BACKEND_HOST,
	.description = "CPU reference backend: host devices with their own memory and lanes",
	.ops = &host_ops,
};

#ifdef ODX_BACKEND_MODULE
/* Built as libodx-backend-host.so: the same backend, found like any out-of-tree one. */
ODX_BACKEND_DEFINE_ENTRY(odx__host_descriptor)
#endif
