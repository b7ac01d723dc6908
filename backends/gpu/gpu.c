/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu.c - the GPU skeleton: the backend ABI over a gpu_vendor table (see gpu.h for the design):
 * errors and device loss, the driver and its devices, memory, page-locked host memory, modules
 * and launches. The lanes and the copies queued on them are gpu_lane.c.
 *
 * Threads per device: the core's worker (launches, allocations, module loads), one completion
 * thread per lane (compute, h2d, d2h) and one issue thread per copy lane (gpu_lane.c).
 *
 * Page-locked host memory (host_register, host_alloc) is kept in one list per process, because
 * the driver's registrations are per process: see "page-locked host memory" below.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

typedef struct gpu_module {
	gpu_handle mod;
	gpu_handle fn;
	char entry[128];
	int checked;             /* 0: arguments not checked yet, 1: they match, <0: they do not */
	char check_msg[256];
} gpu_module;

/*
 * Host memory the driver keeps page-locked for us; copies from and to it skip the staging blocks.
 * Process-wide, like the driver's own bookkeeping: a portable registration holds for every context
 * of the process and a second registration of the same pages is refused, so the devices of one
 * ODX context, and the contexts of one process, share one registration per range, counted. (One
 * driver per process: this file is compiled into each vendor's module separately.)
 */
typedef enum gpu_pinned_kind {
	GPU_PINNED_REGISTERED, /* host_register: ours, unregistered with the last reference */
	GPU_PINNED_FOREIGN,    /* host_register found the pages locked already: left alone, and
				* staged (how long and how much of it stays locked is not ours) */
	GPU_PINNED_ALLOC,      /* host_alloc memory, until gpu_host_free */
} gpu_pinned_kind;

typedef struct gpu_pinned {
	struct gpu_pinned *next;
	char *base;
	size_t size;
	int refs;                /* host_register calls not undone yet */
	gpu_pinned_kind kind;
} gpu_pinned;

/* pinned_lock guards the list (held briefly: the issue threads look ranges up); reg_lock
 * serialises the driver calls that change it, which can take long for a large range. */
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pinned_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static gpu_pinned *pinned_ranges;


void gpu_log(const gpu_state *st, odx_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	odx__backend_vlog(st->env, level, fmt, ap);
	va_end(ap);
}

/* ---- errors and device loss ---------------------------------------------------------------- */

int gpu_fail(const gpu_state *st, gpu_dev *d, gpu_call call, int native, char *msg, size_t n)
{
	const gpu_vendor *v = st->v;
	const char *name = v->err_name(st->api, native);
	const char *text = v->err_string(st->api, native);
	bool sticky = false;
	int rc = v->translate(native, &sticky);

	snprintf(msg, n, "%s: %s (%d)%s%s", v->calls[call], name ? name : "unknown error", native,
		 text ? ": " : "", text ? text : "");
	if (sticky && d) {
		pthread_mutex_lock(&d->lost_lock);
		if (atomic_load(&d->lost) == 0) {
			snprintf(d->lost_msg, sizeof(d->lost_msg), "%s", msg);
			atomic_store(&d->lost, native);
			gpu_log(st, ODX_LOG_ERROR,
				"%s device %d (%s) is lost: %s; every further operation on it "
				"fails with ODX_EDEVLOST",
				v->label, d->index, d->name, msg);
		}
		pthread_mutex_unlock(&d->lost_lock);
		rc = ODX_EDEVLOST;
	}
	return rc;
}

/* ODX_EDEVLOST with the first error in msg if the device is lost, else 0. */
int gpu_check_lost(gpu_dev *d, char *msg, size_t n)
{
	if (atomic_load(&d->lost) == 0)
		return 0;
	pthread_mutex_lock(&d->lost_lock);
	snprintf(msg, n, "%s device %d (%s) was lost after an earlier error: %s",
		 d->st->v->label, d->index, d->name, d->lost_msg);
	pthread_mutex_unlock(&d->lost_lock);
	return ODX_EDEVLOST;
}

int gpu_make_current(gpu_dev *d, char *msg, size_t n)
{
	int native = d->st->v->make_current(d->st->api, d->index, d->info.ctx);

	return native ? gpu_fail(d->st, d, GPU_CALL_MAKE_CURRENT, native, msg, n) : 0;
}

/* ---- driver and devices ------------------------------------------------------------------------ */

int gpu_open(const gpu_vendor *v, const odx_backend_host *env, void **state, char *reason,
	     size_t n)
{
	gpu_state *st = calloc(1, sizeof(*st));
	char msg[GPU_MSG_MAX];
	int64_t spin_us = 20;
	int rc, native, count = 0;

	if (!st) {
		snprintf(reason, n, "out of memory");
		return ODX_ENOMEM;
	}
	st->v = v;
	st->env = env;
	rc = v->open(env, &st->api, reason, n);
	if (rc) {
		free(st);
		return rc;
	}
	native = v->device_count(st->api, &count);
	if (native) {
		rc = gpu_fail(st, NULL, GPU_CALL_DEVICE_COUNT, native, msg, sizeof(msg));
		snprintf(reason, n, "%s", msg);
		v->close(st->api);
		free(st);
		return rc == ODX_EUNAVAIL ? rc : ODX_EUNAVAIL;
	}
	if (count <= 0) {
		snprintf(reason, n, "the %s driver opened but reports no device", v->label);
		v->close(st->api);
		free(st);
		return ODX_EUNAVAIL;
	}
	/* The same bound the core's workers poll for before sleeping. */
	if (env->config_int)
		env->config_int(env->core, "sched.idle_spin_us", &spin_us);
	st->poll_ns = spin_us > 0 ? (uint64_t)spin_us * 1000u : 0;
	st->ndevices = count;
	gpu_log(st, ODX_LOG_INFO, "%s backend: %d device%s", v->label, count, count == 1 ? "" : "s");
	*state = st;
	return 0;
}

void gpu_close(void *state)
{
	gpu_state *st = state;

	st->v->close(st->api);
	free(st);
}

int gpu_device_count(void *state)
{
	return ((gpu_state *)state)->ndevices;
}

int gpu_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
		    void **out)
{
	gpu_state *st = state;
	const gpu_vendor *v = st->v;
	gpu_dev *d = calloc(1, sizeof(*d));
	char msg[GPU_MSG_MAX];
	int rc, native;

	if (!d)
		return ODX_ENOMEM;
	d->st = st;
	d->index = index;
	d->odx_device = odx_device;
	pthread_mutex_init(&d->lost_lock, NULL);
	pthread_mutex_init(&d->aux_lock, NULL);
	native = v->device_open(st->api, index, props, &d->info);
	if (native) {
		rc = gpu_fail(st, NULL, GPU_CALL_DEVICE_OPEN, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_ERROR, "%s device %d cannot be opened: %s", v->label, index,
			msg);
		pthread_mutex_destroy(&d->lost_lock);
		pthread_mutex_destroy(&d->aux_lock);
		free(d);
		return rc;
	}
	snprintf(d->name, sizeof(d->name), "%s", props->name);
	rc = gpu_make_current(d, msg, sizeof(msg));
	if (!rc && (native = v->stream_create(st->api, &d->aux_stream)) != 0)
		rc = gpu_fail(st, d, GPU_CALL_STREAM_CREATE, native, msg, sizeof(msg));
	if (!rc)
		rc = gpu_lane_init(d, &d->compute, "compute", false, msg, sizeof(msg));
	if (!rc)
		rc = gpu_lane_init(d, &d->h2d, "h2d", true, msg, sizeof(msg));
	if (!rc)
		rc = gpu_lane_init(d, &d->d2h, "d2h", true, msg, sizeof(msg));
	if (rc) {
		gpu_log(st, ODX_LOG_ERROR, "%s device %d (%s) cannot be set up: %s", v->label,
			index, d->name, msg);
		gpu_device_close(d);
		return rc;
	}
	/* Leave the driver some room (local memory, launch resources) below what is free now. */
	if (d->info.free_bytes && d->info.free_bytes < props->memory_bytes)
		props->memory_bytes = d->info.free_bytes;
	props->memory_bytes -= props->memory_bytes / 20;
	props->compute_lanes = 1;
	props->copy_lanes = 2;
	props->threads = 0;
	props->host_visible = false;
	/* One compute stream, its events waited for in order by one thread. */
	props->ordered_compute = true;
	/* What cuMemAlloc and hipMalloc guarantee, enough for any vector access of a kernel. */
	props->mem_align = 256;
	gpu_log(st, ODX_LOG_INFO,
		"%s device %d: %s, %.1f GiB usable, PCI %s, arch %d, staging %dx%u MiB per copy "
		"lane",
		v->label, index, d->name, (double)props->memory_bytes / (1u << 30),
		props->pci_bus_id[0] ? props->pci_bus_id : "?", d->info.arch, GPU_STAGE_BLOCKS,
		GPU_STAGE_BLOCK >> 20);
	*out = d;
	return 0;
}

void gpu_device_close(void *dev)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];

	gpu_make_current(d, msg, sizeof(msg));
	if (d->compute.dev)
		gpu_lane_fini(&d->compute);
	if (d->h2d.dev)
		gpu_lane_fini(&d->h2d);
	if (d->d2h.dev)
		gpu_lane_fini(&d->d2h);
	if (d->aux_stream)
		st->v->stream_destroy(st->api, d->aux_stream);
	st->v->device_close(st->api, d->index, d->info.ctx);
	pthread_mutex_destroy(&d->lost_lock);
	pthread_mutex_destroy(&d->aux_lock);
	free(d);
}

/* ---- memory ------------------------------------------------------------------------------------ */

int gpu_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	uint64_t p = 0;
	int rc, native;

	if ((rc = gpu_check_lost(d, msg, sizeof(msg))) != 0 ||
	    (rc = gpu_make_current(d, msg, sizeof(msg))))
		goto out_log;
	native = st->v->mem_alloc(st->api, &p, size);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_MEM_ALLOC, native, msg, sizeof(msg));
		goto out_log;
	}
	if (zero) {
		/* On a stream of its own, waited for here: the memory is zero before any lane
		 * can use it. */
		pthread_mutex_lock(&d->aux_lock);
		native = st->v->memset_async(st->api, p, 0, size, d->aux_stream);
		if (native)
			rc = gpu_fail(st, d, GPU_CALL_MEMSET, native, msg, sizeof(msg));
		else if ((native = st->v->stream_sync(st->api, d->aux_stream)) != 0)
			rc = gpu_fail(st, d, GPU_CALL_STREAM_SYNC, native, msg, sizeof(msg));
		pthread_mutex_unlock(&d->aux_lock);
		if (rc) {
			st->v->mem_free(st->api, p);
			goto out_log;
		}
	}
	*handle = p;
	return 0;

out_log:
	gpu_log(st, rc == ODX_ENOMEM ? ODX_LOG_WARN : ODX_LOG_ERROR,
		"%s device %d (%s): allocation of %zu bytes failed: %s", st->v->label, d->index,
		d->name, size, msg);
	if (ODX_BACKEND_HAS_OP(st->env, odx_backend_host, error_detail))
		st->env->error_detail(st->env->core, msg);
	return rc;
}

void gpu_mem_free(void *dev, uint64_t handle, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	int native;

	if (gpu_make_current(d, msg, sizeof(msg)) != 0)
		return;
	native = st->v->mem_free(st->api, handle);
	if (native && atomic_load(&d->lost) == 0) {
		gpu_fail(st, d, GPU_CALL_MEM_FREE, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_WARN, "%s device %d: freeing %zu bytes: %s", st->v->label,
			d->index, size, msg);
	}
}

/* ---- page-locked host memory ------------------------------------------------------------------ */

/* The host_register entry for exactly this range (host_alloc entries are not counted). Called
 * with pinned_lock held. */
static gpu_pinned *pinned_find(const void *base, size_t size)
{
	gpu_pinned *e;

	for (e = pinned_ranges; e; e = e->next)
		if (e->base == base && e->size == size && e->kind != GPU_PINNED_ALLOC)
			return e;
	return NULL;
}

static void pinned_add(gpu_pinned *e)
{
	pthread_mutex_lock(&pinned_lock);
	e->next = pinned_ranges;
	pinned_ranges = e;
	pthread_mutex_unlock(&pinned_lock);
}

/* Called with pinned_lock held. */
static void pinned_unlink(gpu_pinned *e)
{
	gpu_pinned **pp;

	for (pp = &pinned_ranges; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			return;
		}
}

/* Do the `n` bytes at `p` lie in memory the driver keeps page-locked for our copies? The core
 * unregisters a range only once no copy of it is queued, so the answer holds until the copy's
 * done callback. */
bool gpu_pinned_covers(const void *p, size_t n)
{
	const char *c = p;
	gpu_pinned *e;
	bool yes = false;

	pthread_mutex_lock(&pinned_lock);
	for (e = pinned_ranges; e && !yes; e = e->next)
		yes = e->kind != GPU_PINNED_FOREIGN && c >= e->base && n <= e->size &&
		      (size_t)(c - e->base) <= e->size - n;
	pthread_mutex_unlock(&pinned_lock);
	return yes;
}

/*
 * ABI 1.3: page-locks application memory (portable: for every context of the process), once per
 * range per process; the devices and contexts that register the same range again only count it.
 * Memory the driver finds locked already (the application's own registration or pinned
 * allocation, or a registered buffer sharing its pages) is accepted as it is, never unregistered
 * by us, and copied through the staging blocks. Any other failure costs only speed: the native
 * error is logged here, the core logs what it means.
 */
int gpu_host_register(void *dev, void *ptr, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e;
	int rc, native;

	if ((rc = gpu_check_lost(d, msg, sizeof(msg))) != 0)
		goto out_log;
	pthread_mutex_lock(&pinned_reg_lock);
	pthread_mutex_lock(&pinned_lock);
	e = pinned_find(ptr, size);
	if (e)
		e->refs++;
	pthread_mutex_unlock(&pinned_lock);
	if (e)
		goto out_unlock;
	e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(msg, sizeof(msg), "out of memory");
		rc = ODX_ENOMEM;
		goto out_unlock;
	}
	*e = (gpu_pinned){.base = ptr, .size = size, .refs = 1, .kind = GPU_PINNED_REGISTERED};
	if ((rc = gpu_make_current(d, msg, sizeof(msg))) != 0)
		goto out_free;
	native = st->v->host_register(st->api, ptr, size);
	if (native && native == st->v->already_registered) {
		gpu_fail(st, d, GPU_CALL_HOST_REGISTER, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_INFO,
			"%s device %d (%s): %zu bytes at %p are page-locked already (%s): left as "
			"they are, copies of them go through the staging blocks",
			st->v->label, d->index, d->name, size, ptr, msg);
		e->kind = GPU_PINNED_FOREIGN;
	} else if (native) {
		rc = gpu_fail(st, d, GPU_CALL_HOST_REGISTER, native, msg, sizeof(msg));
		goto out_free;
	}
	pinned_add(e);
	goto out_unlock;

out_free:
	free(e);
out_unlock:
	pthread_mutex_unlock(&pinned_reg_lock);
	if (!rc)
		return 0;
out_log:
	gpu_log(st, rc == ODX_ENOSYS ? ODX_LOG_INFO : ODX_LOG_WARN,
		"%s device %d (%s): page-locking %zu bytes at %p: %s", st->v->label, d->index,
		d->name, size, ptr, msg);
	return rc;
}

void gpu_host_unregister(void *dev, void *ptr, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e;
	bool last = false;
	int rc = 0, native;

	pthread_mutex_lock(&pinned_reg_lock);
	pthread_mutex_lock(&pinned_lock);
	e = pinned_find(ptr, size);
	if (e && --e->refs == 0) {
		pinned_unlink(e);
		last = true;
	}
	pthread_mutex_unlock(&pinned_lock);
	if (!e) {
		gpu_log(st, ODX_LOG_WARN, "%s device %d: %zu bytes at %p were never page-locked",
			st->v->label, d->index, size, ptr);
	} else if (last) {
		if (e->kind == GPU_PINNED_REGISTERED) {
			rc = gpu_make_current(d, msg, sizeof(msg));
			if (!rc && (native = st->v->host_unregister(st->api, ptr)) != 0)
				rc = gpu_fail(st, d, GPU_CALL_HOST_UNREGISTER, native, msg,
					      sizeof(msg));
			if (rc)
				gpu_log(st, ODX_LOG_WARN,
					"%s device %d (%s): unlocking %zu bytes at %p: %s",
					st->v->label, d->index, d->name, size, ptr, msg);
		}
		free(e);
	}
	pthread_mutex_unlock(&pinned_reg_lock);
}

/* Pinned host memory for the core's staging pool (ABI 1.2); copies from and to it need no
 * bounce. */
int gpu_host_alloc(void *dev, size_t size, void **ptr)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e;
	void *p = NULL;
	int rc, native;

	if ((rc = gpu_check_lost(d, msg, sizeof(msg))) != 0 ||
	    (rc = gpu_make_current(d, msg, sizeof(msg))))
		goto out_log;
	native = st->v->host_alloc(st->api, &p, size);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_HOST_ALLOC, native, msg, sizeof(msg));
		goto out_log;
	}
	/* Without its record the memory only loses the direct path. */
	e = calloc(1, sizeof(*e));
	if (e) {
		*e = (gpu_pinned){.base = p, .size = size, .refs = 1, .kind = GPU_PINNED_ALLOC};
		pinned_add(e);
	}
	*ptr = p;
	return 0;

out_log:
	gpu_log(st, ODX_LOG_WARN, "%s device %d (%s): %zu bytes of pinned host memory: %s",
		st->v->label, d->index, d->name, size, msg);
	if (ODX_BACKEND_HAS_OP(st->env, odx_backend_host, error_detail))
		st->env->error_detail(st->env->core, msg);
	return rc;
}

void gpu_host_free(void *dev, void *ptr, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e, **pp;
	int native;

	if (!ptr)
		return;
	pthread_mutex_lock(&pinned_lock);
	for (pp = &pinned_ranges; (e = *pp) != NULL; pp = &e->next)
		if (e->base == ptr && e->kind == GPU_PINNED_ALLOC) {
			*pp = e->next;
			free(e);
			break;
		}
	pthread_mutex_unlock(&pinned_lock);
	if (gpu_make_current(d, msg, sizeof(msg)) != 0)
		return;
	native = st->v->host_free(st->api, ptr);
	if (native && atomic_load(&d->lost) == 0) {
		gpu_fail(st, d, GPU_CALL_HOST_FREE, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_WARN, "%s device %d: freeing %zu bytes of pinned memory: %s",
			st->v->label, d->index, size, msg);
	}
}

/* ---- modules and launches ---------------------------------------------------------------------- */

bool gpu_can_run(void *dev, const odx_kernel_variant *variant)
{
	gpu_dev *d = dev;

	return d->st->v->can_run(d->st->api, d, variant);
}

int gpu_module_load(void *dev, const odx_kernel_variant *variant, void **module, char *error,
		    size_t error_size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX], log[2048];
	gpu_module *m;
	int rc, native;

	if ((rc = gpu_check_lost(d, error, error_size)) != 0)
		return rc;
	if (!variant->entry || !variant->entry[0]) {
		snprintf(error, error_size, "the %s variant names no entry point", st->v->label);
		return ODX_EINVAL;
	}
	if ((rc = gpu_make_current(d, error, error_size)) != 0)
		return rc;
	m = calloc(1, sizeof(*m));
	if (!m)
		return ODX_ENOMEM;
	snprintf(m->entry, sizeof(m->entry), "%s", variant->entry);
	log[0] = '\0';
	native = st->v->module_load(st->api, d, variant, &m->mod, log, sizeof(log));
	if (native < 0) {
		/* Refused before the vendor's loader (a compiler's verdict): no native code. */
		snprintf(error, error_size, "%s; device arch %d", log, d->info.arch);
		free(m);
		return native;
	}
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_MODULE_LOAD, native, msg, sizeof(msg));
		snprintf(error, error_size, "%s; %s; device arch %d", msg, log, d->info.arch);
		free(m);
		return rc;
	}
	native = st->v->module_function(st->api, m->mod, m->entry, &m->fn);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_MODULE_FUNCTION, native, msg, sizeof(msg));
		snprintf(error, error_size,
			 "%s(\"%s\"): %s (is the kernel declared extern \"C\" and __global__?)",
			 st->v->calls[GPU_CALL_MODULE_FUNCTION], m->entry, msg);
		st->v->module_unload(st->api, m->mod);
		free(m);
		return rc;
	}
	if (log[0])
		gpu_log(st, ODX_LOG_DEBUG, "%s device %d: loaded '%s': %s", st->v->label, d->index,
			m->entry, log);
	*module = m;
	return 0;
}

void gpu_module_unload(void *dev, void *module)
{
	gpu_dev *d = dev;
	gpu_module *m = module;
	char msg[GPU_MSG_MAX];

	if (gpu_make_current(d, msg, sizeof(msg)) == 0)
		d->st->v->module_unload(d->st->api, m->mod);
	free(m);
}

static size_t arg_bytes(odx_arg_kind k)
{
	return k == ODX_ARG_I32 || k == ODX_ARG_F32 ? 4 : 8;
}

static const char *arg_kind_name(odx_arg_kind k)
{
	switch (k) {
	case ODX_ARG_BUFFER:
		return "a buffer (device pointer)";
	case ODX_ARG_I32:
		return "an i32";
	case ODX_ARG_I64:
		return "an i64";
	case ODX_ARG_F32:
		return "an f32";
	default:
		return "an f64";
	}
}

/* Compares the task's arguments with the kernel's parameters, where the vendor can tell them
 * (cuFuncGetParamInfo, CUDA 12.4+): a mismatch would otherwise be a silent wrong result or a
 * fault. Once per module: every task of a kernel has the same signature. */
static int check_args(gpu_dev *d, gpu_module *m, const odx_backend_launch *l)
{
	const gpu_vendor *v = d->st->v;
	size_t size;
	int i, native;

	if (m->checked == 0 && v->param_size) {
		m->checked = 1;
		for (i = 0; i <= l->nargs && m->checked == 1; i++) {
			native = v->param_size(d->st->api, m->fn, i, &size);
			if (native == -1)
				break; /* the driver cannot tell */
			if (i == l->nargs) {
				if (native == 0)
					snprintf(m->check_msg, sizeof(m->check_msg),
						 "kernel '%s' takes more than the %d arguments the "
						 "task passes",
						 m->entry, l->nargs);
				m->checked = native == 0 ? -1 : 1;
			} else if (native != 0) {
				snprintf(m->check_msg, sizeof(m->check_msg),
					 "kernel '%s' takes %d parameters, the task passes %d",
					 m->entry, i, l->nargs);
				m->checked = -1;
			} else if (size != arg_bytes(l->args[i].kind)) {
				snprintf(m->check_msg, sizeof(m->check_msg),
					 "parameter %d of kernel '%s' is %zu bytes, the task passes "
					 "%s (%zu bytes)",
					 i, m->entry, size, arg_kind_name(l->args[i].kind),
					 arg_bytes(l->args[i].kind));
				m->checked = -1;
			}
		}
	}
	if (m->checked < 0) {
		snprintf(l->error, l->error_size, "%s", m->check_msg);
		return ODX_EINVAL;
	}
	return 0;
}

int gpu_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	gpu_module *m = l->module;
	union {
		uint64_t ptr;
		int32_t i32;
		int64_t i64;
		float f32;
		double f64;
	} vals[GPU_MAX_ARGS];
	void *params[GPU_MAX_ARGS + 1];
	char msg[GPU_MSG_MAX];
	gpu_pending *p;
	int i, rc, native;

	if ((rc = gpu_check_lost(d, l->error, l->error_size)) != 0) {
		l->native = atomic_load(&d->lost);
		return rc;
	}
	if (!m) {
		snprintf(l->error, l->error_size, "no module was loaded for this variant");
		return ODX_EINVAL;
	}
	if (l->nargs > GPU_MAX_ARGS) {
		snprintf(l->error, l->error_size, "%d arguments (at most %d)", l->nargs,
			 GPU_MAX_ARGS);
		return ODX_EINVAL;
	}
	if ((rc = check_args(d, m, l)) != 0)
		return rc;
	for (i = 0; i < l->nargs; i++) {
		const odx_backend_arg *a = &l->args[i];

		switch (a->kind) {
		case ODX_ARG_BUFFER:
			/* ABI 1.2: device pointers take arithmetic, so a suballocated argument is
			 * its chunk's pointer plus the offset. */
			vals[i].ptr = a->mem + a->v.offset;
			break;
		case ODX_ARG_I32:
			vals[i].i32 = a->v.i32;
			break;
		case ODX_ARG_I64:
			vals[i].i64 = a->v.i64;
			break;
		case ODX_ARG_F32:
			vals[i].f32 = a->v.f32;
			break;
		default:
			vals[i].f64 = a->v.f64;
			break;
		}
		params[i] = &vals[i];
	}
	params[l->nargs] = NULL;
	if ((rc = gpu_make_current(d, l->error, l->error_size)) != 0)
		return rc;
	if ((rc = gpu_pending_get(&d->compute, &p, l->error, l->error_size)) != 0)
		return rc;
	native = st->v->launch(st->api, m->fn, l->grid, l->block, d->compute.stream, params);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_LAUNCH, native, msg, sizeof(msg));
		snprintf(l->error, l->error_size, "%s (kernel '%s', grid %ux%ux%u, block %ux%ux%u)",
			 msg, m->entry, l->grid[0], l->grid[1], l->grid[2], l->block[0],
			 l->block[1], l->block[2]);
	} else if ((native = st->v->event_record(st->api, p->event, d->compute.stream)) != 0) {
		rc = gpu_fail(st, d, GPU_CALL_EVENT_RECORD, native, l->error, l->error_size);
	}
	if (native) {
		l->native = native;
		gpu_pending_recycle(&d->compute, p);
		return rc;
	}
	p->armed = true;
	p->done = done;
	p->arg = arg;
	gpu_pending_push(&d->compute, p);
	return ODX_BACKEND_PENDING;
}
