/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opencl.c - the OpenCL backend: platforms and devices through the ICD loader, buffers, two
 * in-order queues per device (compute and copy), and completion through event callbacks.
 *
 * Completion path: every queued command gets an event with a CL_COMPLETE callback. The callback
 * runs on a driver thread, so it only hands the command to the device's completion thread, which
 * calls the core's `done`. That keeps the core's callbacks (which may queue more copies) out of
 * driver threads and out of the queuing call, as the ABI requires. An application thread waiting
 * for the device (ABI 1.4 progress) claims the oldest command in flight instead: the callback
 * then wakes that thread, which calls `done` itself (one thread hand-off less).
 *
 * Memory handles point to a clb_buf (the cl_mem and its size). All selected devices of one
 * platform share one cl_context, so a buffer of one device is a valid source of
 * clEnqueueCopyBuffer on another. Launch arguments and copies at an offset (ABI 1.2) name
 * sub-buffers: see subbuf.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clb.h"
#include "copy2d.h"

/* ---- driver ------------------------------------------------------------------------------ */

static int clb_platform_str(clb_state *st, cl_platform_id p, cl_platform_info what, char *buf,
			    size_t size)
{
	buf[0] = '\0';
	return st->api.clGetPlatformInfo(p, what, size - 1, buf, NULL) == CL_SUCCESS ? 0 : -1;
}

/* Picks the usable devices of one platform; counts the CPU devices and the unusable ones it
 * skipped, for the reason given when none is left. */
static int clb_select_devices(clb_state *st, int pi, bool allow_cpu, int *skipped_cpu,
			      int *skipped_unusable)
{
	cl_device_id ids[CLB_MAX_DEVICES];
	cl_uint n = 0, i;
	cl_int err;
	int first = st->ndevices;

	err = st->api.clGetDeviceIDs(st->platforms[pi].id, CL_DEVICE_TYPE_ALL, CLB_MAX_DEVICES, ids,
				     &n);
	if (err == CL_DEVICE_NOT_FOUND)
		return 0;
	if (err != CL_SUCCESS)
		return -1;
	for (i = 0; i < n && st->ndevices < CLB_MAX_DEVICES; i++) {
		cl_device_type type = 0;
		cl_bool avail = CL_FALSE, compiler = CL_FALSE;

		st->api.clGetDeviceInfo(ids[i], CL_DEVICE_TYPE, sizeof(type), &type, NULL);
		st->api.clGetDeviceInfo(ids[i], CL_DEVICE_AVAILABLE, sizeof(avail), &avail, NULL);
		st->api.clGetDeviceInfo(ids[i], CL_DEVICE_COMPILER_AVAILABLE, sizeof(compiler),
					&compiler, NULL);
		/* Kernels come as OpenCL C source: a device without a compiler cannot run them. */
		if (!avail || !compiler) {
			(*skipped_unusable)++;
			continue;
		}
		/* A CPU driver competes with ODX's own host devices; used only when asked for. */
		if ((type & CL_DEVICE_TYPE_CPU) && !allow_cpu) {
			(*skipped_cpu)++;
			continue;
		}
		st->devices[st->ndevices].id = ids[i];
		st->devices[st->ndevices].platform = pi;
		st->ndevices++;
	}
	return st->ndevices - first;
}

static void clb_close(void *state)
{
	clb_state *st = state;
	int i;

	for (i = 0; i < st->nplatforms; i++)
		if (st->platforms[i].context)
			st->api.clReleaseContext(st->platforms[i].context);
	clb_api_close(&st->api);
	free(st);
}

static int clb_open(const odx_backend_host *host, void **state, char *reason, size_t reason_size)
{
	cl_platform_id ids[CLB_MAX_PLATFORMS];
	cl_uint nplat = 0, i;
	clb_state *st;
	bool allow_cpu = false;
	int skipped_cpu = 0, skipped_unusable = 0, rc;
	cl_int err;

	st = calloc(1, sizeof(*st));
	if (!st) {
		snprintf(reason, reason_size, "out of memory");
		return ODX_ENOMEM;
	}
	st->host = host;
	rc = clb_api_open(&st->api, reason, reason_size);
	if (rc) {
		free(st);
		return rc;
	}
	/* A core that does not know the key keeps the default: no CPU devices. */
	if (ODX_BACKEND_HAS_OP(host, odx_backend_host, config_bool))
		host->config_bool(host->core, "opencl.allow_cpu", &allow_cpu);

	err = st->api.clGetPlatformIDs(CLB_MAX_PLATFORMS, ids, &nplat);
	if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && nplat == 0)) {
		snprintf(reason, reason_size,
			 "no OpenCL platform: the ICD loader found no driver "
			 "(see /etc/OpenCL/vendors)");
		rc = ODX_EUNAVAIL;
		goto out_close;
	}
	if (err != CL_SUCCESS) {
		clb_check(err, "clGetPlatformIDs", NULL, 0, reason, reason_size);
		rc = ODX_EUNAVAIL;
		goto out_close;
	}
	for (i = 0; i < nplat && i < CLB_MAX_PLATFORMS; i++) {
		clb_platform *p = &st->platforms[st->nplatforms];
		cl_device_id devs[CLB_MAX_DEVICES];
		int first = st->ndevices, n, k;

		p->id = ids[i];
		clb_platform_str(st, ids[i], CL_PLATFORM_NAME, p->name, sizeof(p->name));
		clb_platform_str(st, ids[i], CL_PLATFORM_VERSION, p->version, sizeof(p->version));
		n = clb_select_devices(st, st->nplatforms, allow_cpu, &skipped_cpu,
				       &skipped_unusable);
		if (n <= 0)
			continue;
		/* One context for all of the platform's devices: direct copies between them. */
		for (k = 0; k < n; k++)
			devs[k] = st->devices[first + k].id;
		p->context = st->api.clCreateContext(NULL, (cl_uint)n, devs, NULL, NULL, &err);
		if (err != CL_SUCCESS) {
			char msg[256];

			clb_check(err, "clCreateContext", NULL, 0, msg, sizeof(msg));
			clb_log(st, ODX_LOG_WARN, "opencl: platform '%s' skipped: %s", p->name,
				msg);
			st->ndevices = first;
			continue;
		}
		st->nplatforms++;
	}
	if (st->ndevices == 0) {
		if (skipped_cpu > 0)
			snprintf(reason, reason_size,
				 "only CPU OpenCL devices (%d, e.g. PoCL; %d other device%s not "
				 "available or without a compiler); set opencl.allow_cpu = true "
				 "(ODX_OPENCL_ALLOW_CPU=true) to use them",
				 skipped_cpu, skipped_unusable, skipped_unusable == 1 ? "" : "s");
		else
			snprintf(reason, reason_size,
				 "no usable OpenCL device on %u platform%s (%d not available or "
				 "without a compiler)",
				 (unsigned)nplat, nplat == 1 ? "" : "s", skipped_unusable);
		rc = ODX_EUNAVAIL;
		goto out_close;
	}
	clb_cache_init(st);
	*state = st;
	return 0;

out_close:
	clb_close(st);
	return rc;
}

static int clb_device_count(void *state)
{
	return ((clb_state *)state)->ndevices;
}

/* ---- completion ---------------------------------------------------------------------------- */

/* d->lane.lock held: takes the oldest completed command the completion thread has not taken yet. */
static clb_op *clb_take_done(clb_dev *d)
{
	odx__lane_link *e = odx__lane_pop(&d->lane);

	return ODX__LANE_ENTRY(e, clb_op, link);
}

/* Calls a finished command's `done` (no lock held); returns with d->lane.lock held. */
static void clb_deliver(clb_dev *d, clb_op *op)
{
	char msg[256];

	d->st->api.clReleaseEvent(op->event);
	if (op->status < 0) {
		/* A negative execution status is the command's error code. */
		int rc = clb_check(op->status, op->what, d, 0, msg, sizeof(msg));

		op->done(op->arg, rc ? rc : ODX_EBACKEND, msg);
	} else {
		op->done(op->arg, 0, NULL);
	}
	free(op);

	pthread_mutex_lock(&d->lane.lock);
	if (--d->inflight == 0)
		pthread_cond_broadcast(&d->idle_cond);
}

static void *clb_completion_main(void *arg)
{
	clb_dev *d = arg;
	clb_op *op;

	pthread_mutex_lock(&d->lane.lock);
	for (;;) {
		odx__lane_wait(&d->lane);
		op = clb_take_done(d);
		if (!op)
			break; /* stopping, and every completion was delivered */
		pthread_mutex_unlock(&d->lane.lock);
		clb_deliver(d, op);
	}
	pthread_mutex_unlock(&d->lane.lock);
	return NULL;
}

/* d->lane.lock held: `op` leaves the in-flight list. */
static void clb_fl_unlink(clb_dev *d, clb_op *op)
{
	if (op->fl_prev)
		op->fl_prev->fl_next = op->fl_next;
	else
		d->fl_head = op->fl_next;
	if (op->fl_next)
		op->fl_next->fl_prev = op->fl_prev;
	else
		d->fl_tail = op->fl_prev;
	op->fl_prev = op->fl_next = NULL;
}

/*
 * ABI 1.4 progress: the calling thread claims the oldest command in flight and waits for its
 * event callback, which then wakes it instead of the completion thread; it delivers `done`. The
 * core declares no completion order for OpenCL devices, so delivering one command ahead of the
 * completion thread's list is allowed.
 */
static int clb_progress(void *dev, uint64_t timeout_ns)
{
	clb_dev *d = dev;
	clb_op *op;
	struct timespec ts;
	int rc = 0;

	odx__lane_deadline(&ts, timeout_ns);
	pthread_mutex_lock(&d->lane.lock);
	/* Completed already, and the completion thread has not got to it: deliver it here. */
	op = clb_take_done(d);
	if (op) {
		pthread_mutex_unlock(&d->lane.lock);
		clb_deliver(d, op);
		pthread_mutex_unlock(&d->lane.lock);
		return 1;
	}
	op = d->fl_head;
	if (!op || op->claimed || d->lane.stop) {
		pthread_mutex_unlock(&d->lane.lock);
		return 0;
	}
	op->claimed = true;
	while (!op->fired && !op->dropped && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&d->claim_cond, &d->lane.lock, &ts);
	if (!op->fired) {
		/* Not in time: its callback hands it to the completion thread as usual (or it was
		 * dropped, and its queuing call frees it once we let go). */
		op->claimed = false;
		pthread_cond_broadcast(&d->claim_cond);
		pthread_mutex_unlock(&d->lane.lock);
		return 0;
	}
	pthread_mutex_unlock(&d->lane.lock);
	clb_deliver(d, op);
	pthread_mutex_unlock(&d->lane.lock);
	return 1;
}

static void CL_CALLBACK clb_event_cb(cl_event ev, cl_int status, void *arg)
{
	clb_op *op = arg;
	clb_dev *d = op->dev;

	(void)ev;
	pthread_mutex_lock(&d->lane.lock);
	op->status = status;
	op->fired = true;
	clb_fl_unlink(d, op);
	if (op->claimed) {
		/* An application thread waits for this one (clb_progress): it delivers it. */
		pthread_cond_broadcast(&d->claim_cond);
	} else {
		odx__lane_push(&d->lane, &op->link);
	}
	pthread_mutex_unlock(&d->lane.lock);
}

static clb_op *clb_op_new(clb_dev *d, odx_backend_done_fn done, void *arg, const char *what)
{
	clb_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->dev = d;
	op->done = done;
	op->arg = arg;
	snprintf(op->what, sizeof(op->what), "%s", what);
	return op;
}

/*
 * Hands a just-queued command's event to the completion path and submits the queue. On failure
 * nothing will be reported: the caller returns the error and `done` is never called.
 */
static int clb_op_watch(clb_dev *d, cl_command_queue q, clb_op *op, cl_event ev)
{
	cl_int err;

	op->event = ev;
	pthread_mutex_lock(&d->lane.lock);
	d->inflight++;
	op->fl_prev = d->fl_tail;
	if (d->fl_tail)
		d->fl_tail->fl_next = op;
	else
		d->fl_head = op;
	d->fl_tail = op;
	pthread_mutex_unlock(&d->lane.lock);
	err = d->st->api.clSetEventCallback(ev, CL_COMPLETE, clb_event_cb, op);
	if (err != CL_SUCCESS) {
		/* The command is queued but unobserved: let it finish before the op is gone. */
		d->st->api.clWaitForEvents(1, &ev);
		d->st->api.clReleaseEvent(ev);
		pthread_mutex_lock(&d->lane.lock);
		clb_fl_unlink(d, op);
		/* A thread in progress() may have claimed it: it lets go before the op is freed. */
		op->dropped = true;
		pthread_cond_broadcast(&d->claim_cond);
		while (op->claimed)
			pthread_cond_wait(&d->claim_cond, &d->lane.lock);
		if (--d->inflight == 0)
			pthread_cond_broadcast(&d->idle_cond);
		pthread_mutex_unlock(&d->lane.lock);
		return clb_check(err, "clSetEventCallback", d, 0, NULL, 0);
	}
	/* Without a flush a driver may hold the command back until the queue fills. */
	d->st->api.clFlush(q);
	return 0;
}

/* ---- devices ------------------------------------------------------------------------------- */

static void clb_device_close(void *dev)
{
	clb_dev *d = dev;

	/* Everything queued completes and is delivered before the queues go. */
	if (d->copy)
		d->st->api.clFinish(d->copy);
	if (d->compute)
		d->st->api.clFinish(d->compute);
	if (d->lane.started) {
		pthread_mutex_lock(&d->lane.lock);
		while (d->inflight > 0)
			pthread_cond_wait(&d->idle_cond, &d->lane.lock);
		pthread_mutex_unlock(&d->lane.lock);
		odx__lane_stop(&d->lane);
	}
	clb_region_fini(d);
	if (d->copy)
		d->st->api.clReleaseCommandQueue(d->copy);
	if (d->compute)
		d->st->api.clReleaseCommandQueue(d->compute);
	pthread_mutex_destroy(&d->sub_lock);
	odx__lane_fini(&d->lane);
	pthread_cond_destroy(&d->idle_cond);
	pthread_cond_destroy(&d->claim_cond);
	free(d);
}

/* Appends a NUL-terminated device or platform string to the cache identity. */
static void clb_ident_add(clb_dev *d, const char *s)
{
	size_t len = strlen(s) + 1;

	if (d->ident_len + len > sizeof(d->ident))
		len = sizeof(d->ident) - d->ident_len;
	memcpy(d->ident + d->ident_len, s, len);
	d->ident_len += len;
}

static void clb_fill_ident(clb_dev *d)
{
	const clb_api *cl = &d->st->api;
	const clb_platform *p = &d->st->platforms[d->platform];
	char buf[256];

	clb_ident_add(d, d->name);
	buf[0] = '\0';
	cl->clGetDeviceInfo(d->id, CL_DEVICE_VERSION, sizeof(buf) - 1, buf, NULL);
	clb_ident_add(d, buf);
	buf[0] = '\0';
	cl->clGetDeviceInfo(d->id, CL_DRIVER_VERSION, sizeof(buf) - 1, buf, NULL);
	clb_ident_add(d, buf);
	clb_ident_add(d, p->name);
	clb_ident_add(d, p->version);
}

static int clb_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
			   void **out)
{
	clb_state *st = state;
	const clb_api *cl = &st->api;
	char msg[256];
	cl_ulong mem = 0, max_alloc = 0;
	cl_uint align_bits = 0;
	cl_int err;
	clb_dev *d;
	int rc;

	if (index < 0 || index >= st->ndevices)
		return ODX_EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return ODX_ENOMEM;
	d->st = st;
	d->id = st->devices[index].id;
	d->platform = st->devices[index].platform;
	d->context = st->platforms[d->platform].context;
	/* PoCL (3.1, Debian 12) crashes in clEnqueueCopyBufferRect when either buffer is a
	 * sub-buffer; its CPU devices keep a buffer and its sub-buffers in the same host memory, so
	 * a 2D copy there names the whole buffers instead (clb_copy_2d). */
	d->rect_copy_whole = strstr(st->platforms[d->platform].name, "Portable Computing") != NULL;
	d->odx_device = odx_device;
	odx__lane_init(&d->lane);
	pthread_cond_init(&d->idle_cond, NULL);
	pthread_cond_init(&d->claim_cond, NULL);
	pthread_mutex_init(&d->sub_lock, NULL);
	cl->clGetDeviceInfo(d->id, CL_DEVICE_NAME, sizeof(d->name) - 1, d->name, NULL);
	cl->clGetDeviceInfo(d->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(mem), &mem, NULL);
	cl->clGetDeviceInfo(d->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(max_alloc), &max_alloc,
			    NULL);
	d->global_mem = mem;
	d->max_alloc = max_alloc ? max_alloc : mem;
	/* Sub-buffer origins must be multiples of it (it is given in bits); 16 bytes at least,
	 * so that no vector access of a region reaches into the one before. */
	cl->clGetDeviceInfo(d->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(align_bits), &align_bits,
			    NULL);
	d->mem_align = align_bits / 8 > 16 ? align_bits / 8 : 16;
	clb_fill_ident(d);

	d->compute = cl->clCreateCommandQueue(d->context, d->id, 0, &err);
	if (err == CL_SUCCESS)
		d->copy = cl->clCreateCommandQueue(d->context, d->id, 0, &err);
	if (err != CL_SUCCESS) {
		rc = clb_check(err, "clCreateCommandQueue", d, 0, msg, sizeof(msg));
		clb_log(st, ODX_LOG_ERROR, "opencl: %s", msg);
		goto out_close;
	}
	/* Not logged, as before: the core reports a device that does not open. */
	rc = odx__lane_start(&d->lane, clb_completion_main, d, NULL, "completion", msg,
			     sizeof(msg));
	if (rc)
		goto out_close;

	snprintf(props->name, sizeof(props->name), "%s", d->name);
	props->memory_bytes = d->global_mem;
	props->compute_lanes = 1;
	props->copy_lanes = 1;
	props->threads = 0;
	props->pci_bus_id[0] = '\0';
	props->host_visible = false;
	props->mem_align = (uint32_t)d->mem_align;
	clb_log(st, ODX_LOG_INFO,
		"opencl: device %d: %s on %s, %llu MiB (at most %llu MiB per "
		"buffer)",
		odx_device, d->name, st->platforms[d->platform].name,
		(unsigned long long)(mem >> 20), (unsigned long long)(d->max_alloc >> 20));
	*out = d;
	return 0;

out_close:
	clb_device_close(d);
	return rc;
}

/* ---- memory -------------------------------------------------------------------------------- */

static int clb_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle)
{
	clb_dev *d = dev;
	const clb_api *cl = &d->st->api;
	const unsigned char pattern = 0;
	char msg[256];
	cl_event ev;
	cl_int err;
	cl_mem mem;
	clb_buf *b;
	int rc;

	/* Drivers allocate lazily and fail later, on first use: refuse what cannot fit now. */
	if (size == 0 || size > d->max_alloc ||
	    atomic_fetch_add(&d->used, size) + size > d->global_mem) {
		if (size != 0 && size <= d->max_alloc)
			atomic_fetch_sub(&d->used, size);
		clb_log(d->st, ODX_LOG_WARN,
			"opencl: device %d (%s): cannot allocate %zu bytes (%llu in use of %llu; "
			"at most %llu per buffer)",
			d->odx_device, d->name, size, (unsigned long long)atomic_load(&d->used),
			(unsigned long long)d->global_mem, (unsigned long long)d->max_alloc);
		if (ODX_BACKEND_HAS_OP(d->st->host, odx_backend_host, error_detail)) {
			snprintf(msg, sizeof(msg),
				 "%llu of %llu bytes in use, at most %llu per buffer",
				 (unsigned long long)atomic_load(&d->used),
				 (unsigned long long)d->global_mem,
				 (unsigned long long)d->max_alloc);
			d->st->host->error_detail(d->st->host->core, msg);
		}
		return size == 0 ? ODX_EINVAL : ODX_ENOMEM;
	}
	b = malloc(sizeof(*b));
	if (!b) {
		atomic_fetch_sub(&d->used, size);
		return ODX_ENOMEM;
	}
	mem = cl->clCreateBuffer(d->context, CL_MEM_READ_WRITE, size, NULL, &err);
	if (err != CL_SUCCESS)
		goto out_fail;
	if (zero) {
		/* Synchronous: a launch on the compute queue must not overtake the fill. */
		err = cl->clEnqueueFillBuffer(d->copy, mem, &pattern, 1, 0, size, 0, NULL, &ev);
		if (err == CL_SUCCESS) {
			err = cl->clWaitForEvents(1, &ev);
			cl->clReleaseEvent(ev);
		}
		if (err != CL_SUCCESS) {
			cl->clReleaseMemObject(mem);
			goto out_fail;
		}
	}
	*b = (clb_buf){.mem = mem, .size = size};
	*handle = (uint64_t)(uintptr_t)b;
	return 0;

out_fail:
	free(b);
	atomic_fetch_sub(&d->used, size);
	rc = clb_check(err, "clCreateBuffer", d, size, msg, sizeof(msg));
	clb_log(d->st, ODX_LOG_WARN, "opencl: %s", msg);
	if (ODX_BACKEND_HAS_OP(d->st->host, odx_backend_host, error_detail))
		d->st->host->error_detail(d->st->host->core, msg);
	return rc;
}

static void clb_mem_free(void *dev, uint64_t handle, size_t size)
{
	clb_dev *d = dev;
	clb_buf *b = (clb_buf *)(uintptr_t)handle;

	clb_region_forget(d, b);
	/* The driver keeps the object alive until commands still using it have finished. */
	d->st->api.clReleaseMemObject(b->mem);
	free(b);
	atomic_fetch_sub(&d->used, size);
}

/* ---- copies -------------------------------------------------------------------------------- */

static int clb_copy_h2d(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
			odx_backend_done_fn done, void *arg)
{
	clb_dev *d = dev;
	clb_op *op = clb_op_new(d, done, arg, "copy host to device");
	clb_region_out r;
	char msg[256];
	cl_event ev;
	cl_int err;
	int rc;

	if (!op)
		return ODX_ENOMEM;
	rc = clb_region(d, (clb_buf *)(uintptr_t)dst, dst_off, n, &r, msg, sizeof(msg));
	if (rc) {
		clb_log(d->st, ODX_LOG_ERROR, "opencl: device %d: copy to the device: %s",
			d->odx_device, msg);
		free(op);
		return rc;
	}
	err = d->st->api.clEnqueueWriteBuffer(d->copy, r.mem, CL_FALSE, r.off, n, src, 0, NULL,
					      &ev);
	clb_region_done(d, &r);
	if (err != CL_SUCCESS) {
		free(op);
		return clb_check(err, "clEnqueueWriteBuffer", d, n, NULL, 0);
	}
	rc = clb_op_watch(d, d->copy, op, ev);
	if (rc)
		free(op);
	return rc;
}

static int clb_copy_d2h(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
			odx_backend_done_fn done, void *arg)
{
	clb_dev *d = dev;
	clb_op *op = clb_op_new(d, done, arg, "copy device to host");
	clb_region_out r;
	char msg[256];
	cl_event ev;
	cl_int err;
	int rc;

	if (!op)
		return ODX_ENOMEM;
	rc = clb_region(d, (clb_buf *)(uintptr_t)src, src_off, n, &r, msg, sizeof(msg));
	if (rc) {
		clb_log(d->st, ODX_LOG_ERROR, "opencl: device %d: copy from the device: %s",
			d->odx_device, msg);
		free(op);
		return rc;
	}
	err = d->st->api.clEnqueueReadBuffer(d->copy, r.mem, CL_FALSE, r.off, n, dst, 0, NULL, &ev);
	clb_region_done(d, &r);
	if (err != CL_SUCCESS) {
		free(op);
		return clb_check(err, "clEnqueueReadBuffer", d, n, NULL, 0);
	}
	rc = clb_op_watch(d, d->copy, op, ev);
	if (rc)
		free(op);
	return rc;
}

/* A blocking copy on queue q: one hand-off to the driver and back, no event callback. */
static int clb_copy_blocking(clb_dev *d, cl_command_queue q, bool to_device, uint64_t mem,
			     size_t off, void *host, size_t n, char *error, size_t error_size)
{
	clb_region_out r;
	cl_int err;
	int rc;

	rc = clb_region(d, (clb_buf *)(uintptr_t)mem, off, n, &r, error, error_size);
	if (rc)
		return rc;
	err = to_device ? d->st->api.clEnqueueWriteBuffer(q, r.mem, CL_TRUE, r.off, n, host, 0,
							  NULL, NULL)
			: d->st->api.clEnqueueReadBuffer(q, r.mem, CL_TRUE, r.off, n, host, 0, NULL,
							 NULL);
	clb_region_done(d, &r);
	return clb_check(err, to_device ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", d, n,
			 error, error_size);
}

/* For a caller that waits anyway (ABI 1.3 copy_sync): on the copy queue. */
static int clb_copy_sync(void *dev, bool to_device, uint64_t mem, size_t off, void *host, size_t n,
			 char *error, size_t error_size)
{
	clb_dev *d = dev;

	return clb_copy_blocking(d, d->copy, to_device, mem, off, host, n, error, error_size);
}

/* How long copy_sync_after waits for the event callback of a launch that completed before its
 * copy: the driver calls it right after the launch ends, so this only bounds a late one. */
#define CLB_AFTER_WAIT_NS 100000000ull

/*
 * ABI 1.5 copy_sync_after: a blocking copy on the compute queue, which is in order, so it runs
 * after the launches queued there before it. The launches in flight are claimed first (as
 * progress claims one): their event callbacks then wake this thread instead of the completion
 * thread, and this thread delivers their `done` once the copy returned, so the core finds them
 * complete without another wait.
 */
static int clb_copy_sync_after(void *dev, bool to_device, uint64_t mem, size_t off, void *host,
			       size_t n, char *error, size_t error_size)
{
	clb_dev *d = dev;
	clb_op *mine[CLB_AFTER_MAX], *op;
	struct timespec ts;
	int i, k = 0, rc;

	pthread_mutex_lock(&d->lane.lock);
	for (op = d->fl_head; op && k < CLB_AFTER_MAX; op = op->fl_next)
		if (op->launch && !op->claimed && !d->lane.stop) {
			op->claimed = true;
			mine[k++] = op;
		}
	pthread_mutex_unlock(&d->lane.lock);

	rc = clb_copy_blocking(d, d->compute, to_device, mem, off, host, n, error, error_size);

	odx__lane_deadline(&ts, CLB_AFTER_WAIT_NS);
	pthread_mutex_lock(&d->lane.lock);
	for (i = 0; i < k; i++) {
		int w = 0;

		op = mine[i];
		while (!op->fired && !op->dropped && w != ETIMEDOUT)
			w = pthread_cond_timedwait(&d->claim_cond, &d->lane.lock, &ts);
		if (!op->fired) {
			/* Late, or dropped: the usual path reports it (see clb_progress). */
			op->claimed = false;
			pthread_cond_broadcast(&d->claim_cond);
			continue;
		}
		pthread_mutex_unlock(&d->lane.lock);
		clb_deliver(d, op); /* returns with d->lane.lock held */
	}
	/* Launches that completed before the copy was queued, and wait for the completion thread
	 * (probably these launches): delivered here too. */
	while ((op = clb_take_done(d)) != NULL) {
		pthread_mutex_unlock(&d->lane.lock);
		clb_deliver(d, op);
	}
	pthread_mutex_unlock(&d->lane.lock);
	return rc;
}

/* A hop of a staged copy is done: after the first, the bytes are in hop->bounce and go on to
 * the destination; after the second (or a failure), the core hears of it. */
static void clb_hop_done(void *arg, int status, const char *msg)
{
	clb_op *hop = arg;
	int rc;

	if (status == 0 && hop->hop_stage == 0) {
		hop->hop_stage = 1;
		rc = clb_copy_h2d(hop->hop_dev, (uint64_t)(uintptr_t)hop->hop_dst, hop->hop_off,
				  hop->bounce, hop->hop_n, clb_hop_done, hop);
		if (rc == 0)
			return;
		status = rc;
		msg = "could not queue the second hop of a copy between OpenCL contexts";
	}
	free(hop->bounce);
	hop->done(hop->arg, status, msg);
	free(hop);
}

/* Devices of different platforms share no context: read into host memory, then write. */
static int clb_copy_staged(clb_dev *d, clb_buf *dst, size_t dst_off, clb_dev *s, clb_buf *src,
			   size_t src_off, size_t n, odx_backend_done_fn done, void *arg)
{
	clb_op *hop = calloc(1, sizeof(*hop));
	int rc;

	if (!hop)
		return ODX_ENOMEM;
	hop->bounce = malloc(n);
	if (!hop->bounce) {
		free(hop);
		return ODX_ENOMEM;
	}
	hop->done = done;
	hop->arg = arg;
	hop->hop_dev = d;
	hop->hop_dst = dst;
	hop->hop_off = dst_off;
	hop->hop_n = n;
	rc = clb_copy_d2h(s, hop->bounce, (uint64_t)(uintptr_t)src, src_off, n, clb_hop_done, hop);
	if (rc) {
		free(hop->bounce);
		free(hop);
	}
	return rc;
}

static int clb_copy_d2d(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
			size_t src_off, size_t n, odx_backend_done_fn done, void *arg)
{
	clb_dev *d = dev, *s = src_dev;
	clb_region_out rs, rd;
	char msg[256];
	clb_op *op;
	cl_event ev;
	cl_int err;
	int rc;

	if (s->context != d->context)
		return clb_copy_staged(d, (clb_buf *)(uintptr_t)dst, dst_off, s,
				       (clb_buf *)(uintptr_t)src, src_off, n, done, arg);
	op = clb_op_new(d, done, arg, "copy device to device");
	if (!op)
		return ODX_ENOMEM;
	rc = clb_region(s, (clb_buf *)(uintptr_t)src, src_off, n, &rs, msg, sizeof(msg));
	if (rc == 0) {
		rc = clb_region(d, (clb_buf *)(uintptr_t)dst, dst_off, n, &rd, msg, sizeof(msg));
		if (rc)
			clb_region_done(s, &rs);
	}
	if (rc) {
		clb_log(d->st, ODX_LOG_ERROR, "opencl: device %d: copy between devices: %s",
			d->odx_device, msg);
		free(op);
		return rc;
	}
	/* Same context: the runtime moves the bytes between the devices itself. */
	err = d->st->api.clEnqueueCopyBuffer(d->copy, rs.mem, rd.mem, rs.off, rd.off, n, 0, NULL,
					     &ev);
	clb_region_done(s, &rs);
	clb_region_done(d, &rd);
	if (err != CL_SUCCESS) {
		free(op);
		return clb_check(err, "clEnqueueCopyBuffer", d, n, NULL, 0);
	}
	rc = clb_op_watch(d, d->copy, op, ev);
	if (rc)
		free(op);
	return rc;
}

/* The device side of a 2D copy: its region (clb_region), or on a device where a copy between
 * sub-buffers is broken (rect_copy_whole) and this is one, the whole buffer at the absolute
 * offset. */
static int clb_rect_region(clb_dev *d, bool with_host, clb_buf *b, size_t off, size_t n,
			   clb_region_out *out, char *msg, size_t msg_size)
{
	if (with_host || !d->rect_copy_whole)
		return clb_region(d, b, off, n, out, msg, msg_size);
	if (off > b->size || n > b->size - off) {
		snprintf(msg, msg_size, "%zu bytes at offset %zu of a %zu-byte allocation", n, off,
			 b->size);
		return ODX_ERANGE;
	}
	*out = (clb_region_out){.mem = b->mem, .off = off};
	return 0;
}

/*
 * ABI 1.7 copy_2d: clEnqueue{Write,Read,Copy}BufferRect on the copy queue, completed like the
 * 1D copies. A device side names the region from its first run to the end of its last (a cached
 * sub-buffer when that is not the whole allocation, as for the 1D copies: subbuf.c), and the
 * rectangle starts at the region's offset inside it: origin {off, 0, 0}, region {width, rows, 1},
 * row pitch the side's pitch; slice pitches 0 (one slice). Devices of different platforms share
 * no context: ODX_ENOSYS, and the core copies row by row through host memory.
 */
static int clb_copy_2d(void *dev, const odx_backend_copy2d *c, odx_backend_done_fn done, void *arg)
{
	clb_dev *d = dev, *s = c->src_dev ? c->src_dev : dev;
	const clb_api *cl = &d->st->api;
	const size_t region[3] = {c->width, c->rows, 1};
	size_t dspan = 0, sspan = 0, dorg[3] = {0, 0, 0}, sorg[3] = {0, 0, 0};
	clb_region_out rd = {0}, rs = {0};
	const char *call, *what;
	char msg[256] = "";
	clb_op *op;
	cl_event ev;
	cl_int err;
	int rc = odx__copy2d_check(c);

	if (rc)
		return rc;
	if (!c->src_host && !c->dst_host && s->context != d->context)
		return ODX_ENOSYS;
	odx__copy2d_span(c->width, c->rows, c->dst_pitch, &dspan);
	odx__copy2d_span(c->width, c->rows, c->src_pitch, &sspan);
	what = c->src_host ? "2D copy host to device"
	       : c->dst_host ? "2D copy device to host" : "2D copy device to device";
	op = clb_op_new(d, done, arg, what);
	if (!op)
		return ODX_ENOMEM;
	if (!c->dst_host)
		rc = clb_rect_region(d, c->src_host || c->dst_host, (clb_buf *)(uintptr_t)c->dst,
				     c->dst_off, dspan, &rd, msg, sizeof(msg));
	if (rc == 0 && !c->src_host)
		rc = clb_rect_region(s, c->src_host || c->dst_host, (clb_buf *)(uintptr_t)c->src,
				     c->src_off, sspan, &rs, msg, sizeof(msg));
	if (rc) {
		clb_log(d->st, ODX_LOG_ERROR, "opencl: device %d: %s: %s", d->odx_device, what, msg);
		goto out_regions;
	}
	dorg[0] = rd.off;
	sorg[0] = rs.off;
	if (c->src_host) {
		call = "clEnqueueWriteBufferRect";
		err = cl->clEnqueueWriteBufferRect(d->copy, rd.mem, CL_FALSE, dorg, sorg, region,
						   c->dst_pitch, 0, c->src_pitch, 0, c->src_host,
						   0, NULL, &ev);
	} else if (c->dst_host) {
		call = "clEnqueueReadBufferRect";
		err = cl->clEnqueueReadBufferRect(d->copy, rs.mem, CL_FALSE, sorg, dorg, region,
						  c->src_pitch, 0, c->dst_pitch, 0, c->dst_host, 0,
						  NULL, &ev);
	} else {
		/* Same context: the runtime moves the bytes between the devices itself. */
		call = "clEnqueueCopyBufferRect";
		err = cl->clEnqueueCopyBufferRect(d->copy, rs.mem, rd.mem, sorg, dorg, region,
						  c->src_pitch, 0, c->dst_pitch, 0, 0, NULL, &ev);
	}
	if (err != CL_SUCCESS) {
		rc = clb_check(err, call, d, c->width * c->rows, msg, sizeof(msg));
		clb_log(d->st, ODX_LOG_ERROR, "opencl: device %d: %s of %zu x %zu bytes: %s",
			d->odx_device, what, c->rows, c->width, msg);
		goto out_regions;
	}
	rc = clb_op_watch(d, d->copy, op, ev);
	if (rc == 0)
		op = NULL;

out_regions:
	/* Sub-buffers evicted while naming the regions: the command holds its own now. */
	if (!c->dst_host)
		clb_region_done(d, &rd);
	if (!c->src_host)
		clb_region_done(s, &rs);
	free(op);
	return rc;
}

/* ---- launch -------------------------------------------------------------------------------- */

/* Sets one argument; refuses a kind the kernel's parameter does not take. A buffer argument
 * names the region `r` (its evicted sub-buffer is released by the caller after queuing). */
static int clb_set_arg(clb_dev *d, clb_module *m, cl_uint i, const odx_backend_arg *a,
		       odx_backend_launch *l, clb_region_out *r)
{
	const void *value = &a->v;
	clb_buf *b;
	size_t size;
	cl_int err;
	int rc;

	if (m->arg_kind[i] != 0 && m->arg_kind[i] != a->kind) {
		snprintf(l->error, l->error_size,
			 "kernel '%s' parameter %u is '%s' (takes %s), the task passes %s",
			 m->entry, (unsigned)i, m->arg_type[i], odx_backend_arg_kind_name(m->arg_kind[i]),
			 odx_backend_arg_kind_name(a->kind));
		return ODX_EINVAL;
	}
	switch (a->kind) {
	case ODX_ARG_BUFFER:
		b = (clb_buf *)(uintptr_t)a->mem;
		if (!b) {
			snprintf(l->error, l->error_size, "argument %u: no buffer", (unsigned)i);
			return ODX_EINVAL;
		}
		/* ABI 1.2: the region at v.offset, as a sub-buffer unless it is all of b. */
		rc = clb_region(d, b, a->v.offset,
				a->size || a->v.offset > b->size ? a->size : b->size - a->v.offset,
				r, l->error, l->error_size);
		if (rc == 0 && r->off != 0) {
			snprintf(l->error, l->error_size,
				 "argument %u: offset %llu is not a multiple of %zu bytes",
				 (unsigned)i, (unsigned long long)a->v.offset, d->mem_align);
			rc = ODX_EINVAL;
		}
		if (rc) {
			if (rc == ODX_ERANGE)
				rc = ODX_EINVAL;
			return rc;
		}
		value = &r->mem;
		size = sizeof(r->mem);
		break;
	case ODX_ARG_I32:
	case ODX_ARG_F32:
		size = 4;
		break;
	case ODX_ARG_I64:
	case ODX_ARG_F64:
		size = 8;
		break;
	default:
		snprintf(l->error, l->error_size, "argument %u: unknown kind %d", (unsigned)i,
			 (int)a->kind);
		return ODX_EINVAL;
	}
	err = d->st->api.clSetKernelArg(m->kernel, i, size, value);
	if (err != CL_SUCCESS) {
		l->native = err;
		return clb_check(err, "clSetKernelArg", d, 0, l->error, l->error_size);
	}
	return 0;
}

static int clb_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg)
{
	clb_dev *d = dev;
	clb_module *m = l->module;
	size_t global[3], local[3], group = 1;
	clb_region_out regions[CLB_MAX_ARGS] = {0};
	char what[96];
	cl_event ev;
	cl_int err;
	clb_op *op;
	int i, rc;

	l->error[0] = '\0';
	if (!m) {
		snprintf(l->error, l->error_size, "no OpenCL program loaded for this kernel");
		return ODX_EINVAL;
	}
	/* The signature and the OpenCL C source are written apart: check they agree. */
	if (l->nargs != (int)m->nargs) {
		snprintf(
			l->error, l->error_size,
			"kernel '%s' takes %u arguments in its OpenCL C source, the task passes %d",
			m->entry, (unsigned)m->nargs, l->nargs);
		return ODX_EINVAL;
	}
	if (l->nargs > CLB_MAX_ARGS) {
		snprintf(l->error, l->error_size, "%d arguments (at most %d)", l->nargs,
			 CLB_MAX_ARGS);
		return ODX_EINVAL;
	}
	for (i = 0; i < l->nargs; i++) {
		rc = clb_set_arg(d, m, (cl_uint)i, &l->args[i], l, &regions[i]);
		if (rc)
			goto out_regions;
	}
	for (i = 0; i < 3; i++) {
		global[i] = (size_t)l->grid[i] * l->block[i];
		local[i] = l->block[i];
		group *= local[i];
	}
	if (m->max_group && group > m->max_group) {
		snprintf(l->error, l->error_size,
			 "kernel '%s': work-groups of %zu items, the device takes at most %zu",
			 m->entry, group, m->max_group);
		rc = ODX_EINVAL;
		goto out_regions;
	}
	snprintf(what, sizeof(what), "kernel '%s'", m->entry);
	op = clb_op_new(d, done, arg, what);
	if (!op) {
		rc = ODX_ENOMEM;
		goto out_regions;
	}
	op->launch = true;
	err = d->st->api.clEnqueueNDRangeKernel(d->compute, m->kernel, 3, NULL, global, local, 0,
						NULL, &ev);
	if (err != CL_SUCCESS) {
		free(op);
		l->native = err;
		rc = clb_check(err, "clEnqueueNDRangeKernel", d, 0, l->error, l->error_size);
		goto out_regions;
	}
	rc = clb_op_watch(d, d->compute, op, ev);
	if (rc) {
		free(op);
		snprintf(l->error, l->error_size, "cannot watch the launch's completion");
		goto out_regions;
	}
	rc = ODX_BACKEND_PENDING;

out_regions:
	/* Sub-buffers evicted while setting the arguments: the command holds its own now. */
	for (i = 0; i < l->nargs; i++)
		clb_region_done(d, &regions[i]);
	return rc;
}

static bool clb_can_run(void *dev, const odx_kernel_variant *v)
{
	(void)dev;
	return v->backend == ODX_BACKEND_OPENCL && v->format == ODX_FORMAT_OPENCL_C;
}

static const odx_backend_ops clb_ops = {
	.size = sizeof(odx_backend_ops),
	.open = clb_open,
	.close = clb_close,
	.device_count = clb_device_count,
	.device_open = clb_device_open,
	.device_close = clb_device_close,
	.mem_alloc = clb_mem_alloc,
	.mem_free = clb_mem_free,
	.copy_h2d = clb_copy_h2d,
	.copy_d2h = clb_copy_d2h,
	.copy_d2d = clb_copy_d2d,
	.copy_sync = clb_copy_sync,
	.progress = clb_progress,
	.copy_sync_after = clb_copy_sync_after,
	.copy_2d = clb_copy_2d,
	.module_load = clb_module_load,
	.module_unload = clb_module_unload,
	.launch = clb_launch,
	.can_run = clb_can_run,
};

static const odx_backend_descriptor clb_descriptor = {
	.size = sizeof(odx_backend_descriptor),
	.abi_version = ODX_BACKEND_ABI_VERSION,
	.name = "opencl",
	.kind = ODX_BACKEND_OPENCL,
	.description = "OpenCL through the ICD loader (libOpenCL.so.1), kernels from OpenCL C",
	.ops = &clb_ops,
};

ODX_BACKEND_DEFINE_ENTRY(clb_descriptor)
