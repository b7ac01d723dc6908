/* SPDX-License-Identifier: Apache-2.0 */
/*
 * context.c - opening and closing a context: configuration, topology, backends, devices, memory
 * nodes, workers; and the introspection calls (backends, devices, memory nodes, configuration).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "policy.h"
#include "mem/spill.h"

/* Under `backends = auto`, GPU backends come first and host last; backends found as modules
 * that ODX does not know by name go before host. */
static const char *const auto_order[] = {"cuda", "hip", "vulkan", "opencl"};
#define NAUTO ((int)(sizeof(auto_order) / sizeof(auto_order[0])))
#define MAX_BACKENDS 32

ODX_API const char *odx_backend_kind_name(odx_backend_kind kind)
{
	static const char *names[] = {"host", "cuda", "hip", "vulkan", "opencl"};

	if (kind < 0 || kind >= ODX_BACKEND_KIND_COUNT)
		return "?";
	return names[kind];
}

/* A backend's kind: its descriptor's constant, or its own name for a kind without one (a
 * vendor odx.h does not list declares ODX_BACKEND_OTHER). */
static void backend_kind(const odx_backend_descriptor *desc, odx_backend_kind *kind,
			 const char **name)
{
	bool known = desc->kind >= 0 && desc->kind < ODX_BACKEND_KIND_COUNT;

	*kind = known ? desc->kind : ODX_BACKEND_OTHER;
	*name = known ? odx_backend_kind_name(desc->kind) : desc->name;
}

/* ---- callbacks offered to backends ---------------------------------------------------------- */

static int env_bind_thread(void *core, unsigned slot)
{
	odx_context *ctx = core;

	return ctx->bind ? odx__topo_bind_self(ctx->topo, slot) : 0;
}

static void env_log(void *core, odx_log_level level, const char *msg)
{
	odx__log(core, level, "%s", msg);
}

static void env_error_detail(void *core, const char *msg)
{
	(void)core;
	odx__backend_detail_set(msg);
}

static int env_config_str(void *core, const char *key, const char **out)
{
	odx_context *ctx = core;
	int rc = odx__config_has(ctx->config, key, 's');

	if (rc == 0)
		*out = odx__config_str(ctx->config, key);
	return rc;
}

static int env_config_int(void *core, const char *key, int64_t *out)
{
	odx_context *ctx = core;
	int rc = odx__config_has(ctx->config, key, 'i');

	if (rc == 0)
		*out = odx__config_int(ctx->config, key);
	return rc;
}

static int env_config_bool(void *core, const char *key, bool *out)
{
	odx_context *ctx = core;
	int rc = odx__config_has(ctx->config, key, 'b');

	if (rc == 0)
		*out = odx__config_bool(ctx->config, key);
	return rc;
}

static int env_config_size(void *core, const char *key, uint64_t percent_of, uint64_t *out)
{
	odx_context *ctx = core;
	int rc = odx__config_has(ctx->config, key, 'z');

	if (rc == 0)
		*out = odx__config_size(ctx->config, key, percent_of);
	return rc;
}

/* ---- opening -------------------------------------------------------------------------------- */

/* The backends to try, in order: the user's list, or every one we know of under auto. */
static int backend_names(const char *list, char **names, int max)
{
	char *found[MAX_BACKENDS];
	int n = 0, nfound, i, j;

	if (strcmp(list, "auto") != 0) {
		const char *p = list;

		while (*p && n < max) {
			size_t len = strcspn(p, ",");

			if ((names[n] = strndup(p, len)) != NULL)
				n++;
			p += len;
			p += *p == ',';
		}
		return n;
	}
	nfound = odx__backend_list(found, MAX_BACKENDS);
	for (i = 0; i < NAUTO && n < max; i++)
		if ((names[n] = strdup(auto_order[i])) != NULL)
			n++;
	/* Modules found that are not named above, then host. */
	for (j = 0; j < nfound; j++) {
		bool known = strcmp(found[j], "host") == 0;

		for (i = 0; i < NAUTO; i++)
			known = known || strcmp(found[j], auto_order[i]) == 0;
		if (!known && n < max)
			names[n++] = found[j];
		else
			free(found[j]);
	}
	if (n < max && (names[n] = strdup("host")) != NULL)
		n++;
	return n;
}

static int open_backends(odx_context *ctx, odx_backend_host *env, char *err, size_t errlen)
{
	const char *list = odx__config_str(ctx->config, "backends");
	bool automatic = strcmp(list, "auto") == 0;
	char *names[MAX_BACKENDS];
	int n, i, rc = 0;

	n = backend_names(list, names, MAX_BACKENDS);
	ctx->backends = calloc((size_t)n + 1, sizeof(*ctx->backends));
	if (!ctx->backends) {
		for (i = 0; i < n; i++)
			free(names[i]);
		return ODX_ENOMEM;
	}
	for (i = 0; i < n; i++) {
		odx__backend_slot *slot = &ctx->backends[ctx->nbackends++];

		slot->name = names[i];
		if (rc) /* an earlier named backend failed: list the rest, open nothing */
			continue;
		if (odx__backend_find(slot->name, &slot->module, slot->reason,
				      sizeof(slot->reason)) == 0) {
			slot->ops = slot->module.desc->ops;
			slot->available = slot->ops->open(env, &slot->state, slot->reason,
							  sizeof(slot->reason)) == 0;
			/* The backend fills it: it may leave no NUL. */
			slot->reason[sizeof(slot->reason) - 1] = '\0';
			if (slot->available) {
				slot->ndevices = slot->ops->device_count(slot->state);
				if (slot->ndevices <= 0) {
					slot->ops->close(slot->state);
					slot->available = false;
					snprintf(slot->reason, sizeof(slot->reason),
						 "the driver opened but reports no device");
				}
			}
		}
		if (slot->available)
			continue;
		odx__log(ctx, ODX_LOG_INFO, "backend %s unavailable: %s", slot->name,
			 slot->reason);
		if (!automatic) {
			snprintf(err, errlen,
				 "backend '%s' (asked for by 'backends = %s') is unavailable: %s",
				 slot->name, list, slot->reason);
			rc = ODX_EUNAVAIL;
		}
	}
	return rc;
}

/* The host memory node nearest to a device: its PCI slot's NUMA node; for a host device, the
 * node of the cores its threads are bound to (or would be, with host.bind); else node 0. */
static int device_near(odx_context *ctx, const odx__device *dev)
{
	int k;

	if (ctx->nhost <= 1)
		return 0;
	if (dev->kind == ODX_BACKEND_HOST)
		k = odx__topo_numa_of_pu_slot(ctx->topo, odx__device_bind_slot(dev));
	else
		k = odx__topo_numa_of_pci(ctx->topo, dev->props.pci_bus_id);
	return k >= 0 && k < ctx->nhost ? k : 0;
}

/* A device's queue lock is held for a few instructions, by its worker, the submitting thread and
 * a thief in turn: one that finds it taken spins a moment (glibc's adaptive mutex) rather than
 * sleep in the kernel at once (a futex wait and its wake-up cost microseconds, the hold
 * nanoseconds). */
static void queue_lock_init(pthread_mutex_t *lock)
{
	pthread_mutexattr_t attr;

	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(lock, &attr);
	pthread_mutexattr_destroy(&attr);
}

static int open_devices(odx_context *ctx, char *err, size_t errlen)
{
	/* host.memnode=shared: host devices run on the host node of their NUMA node, as CPU
	 * cores share RAM; private: each gets a node of its own, as a discrete device has. */
	bool shared = strcmp(odx__config_str(ctx->config, "host.memnode"), "shared") == 0;
	int total = 0, b, i, rc;

	for (b = 0; b < ctx->nbackends; b++)
		if (ctx->backends[b].available)
			total += ctx->backends[b].ndevices;
	if (total == 0) {
		snprintf(err, errlen, "no device: no backend could be opened (see odx info)");
		return ODX_ENODEV;
	}
	/* aligned: each device's inbox has a cache line of its own (core.h) */
	ctx->devices = aligned_alloc(_Alignof(odx__device), (size_t)total * sizeof(*ctx->devices));
	if (ctx->devices)
		memset(ctx->devices, 0, (size_t)total * sizeof(*ctx->devices));
	ctx->nhost = odx__topo_numa_count(ctx->topo);
	ctx->memnodes = calloc((size_t)total + (size_t)ctx->nhost, sizeof(*ctx->memnodes));
	if (!ctx->devices || !ctx->memnodes)
		return ODX_ENOMEM;
	/* Host RAM first, one memory node per NUMA node, each with the memory local to it. */
	for (i = 0; i < ctx->nhost; i++)
		ctx->memnodes[i] = (odx__memnode){
			.kind = ODX_MEMNODE_HOST,
			.near = i,
			.capacity = odx__topo_numa_memory(ctx->topo, i),
		};
	ctx->nmemnodes = ctx->nhost;
	for (b = 0; b < ctx->nbackends; b++) {
		odx__backend_slot *slot = &ctx->backends[b];

		for (i = 0; slot->available && i < slot->ndevices; i++) {
			odx__device *dev = &ctx->devices[ctx->ndevices];
			char lane[96];

			dev->index = ctx->ndevices;
			dev->ops = slot->ops;
			backend_kind(slot->module.desc, &dev->kind, &dev->kind_name);
			queue_lock_init(&dev->lock);
			rc = slot->ops->device_open(slot->state, i, dev->index, &dev->props,
						    &dev->bdev);
			if (rc) {
				char detail[ODX__MSG_MAX];

				pthread_mutex_destroy(&dev->lock);
				odx__backend_detail_take(detail, sizeof(detail));
				snprintf(err, errlen, "backend %s: device %d failed to open: %s%s%s",
					 slot->name, i, odx_strerror(rc), detail[0] ? ": " : "",
					 detail);
				return rc;
			}
			/* Fixed-size texts the backend filled may lack their NUL. */
			dev->props.name[sizeof(dev->props.name) - 1] = '\0';
			dev->props.pci_bus_id[sizeof(dev->props.pci_bus_id) - 1] = '\0';
			snprintf(dev->name, sizeof(dev->name), "%s", dev->props.name);
			if (shared && dev->kind == ODX_BACKEND_HOST) {
				/* Its replicas are the host node's: nothing to copy or keep twice
				 * between host devices, one accounting of that RAM. */
				dev->memnode = device_near(ctx, dev);
			} else {
				dev->memnode = ctx->nmemnodes;
				ctx->memnodes[ctx->nmemnodes++] = (odx__memnode){
					.kind = ODX_MEMNODE_DEVICE,
					.device = dev,
					.near = device_near(ctx, dev),
					.capacity = dev->props.memory_bytes,
				};
			}
			snprintf(lane, sizeof(lane), "device %d compute (%s)", dev->index,
				 dev->name);
			dev->compute_trace = odx__lane_trace_new(ctx, lane, 0, 2 * dev->index + 1);
			snprintf(lane, sizeof(lane), "device %d copy", dev->index);
			dev->copy_trace = odx__lane_trace_new(ctx, lane, 0, 2 * dev->index + 2);
			ctx->ndevices++;
		}
	}
	for (i = 0; i < ctx->ndevices; i++)
		ctx->drivable |= ODX_BACKEND_HAS_OP(ctx->devices[i].ops, odx_backend_ops, progress) &&
				 odx__config_bool(ctx->config, "sched.caller_progress");
	ctx->bytes_copied =
		calloc((size_t)ctx->nmemnodes * (size_t)ctx->nmemnodes, sizeof(*ctx->bytes_copied));
	return ctx->bytes_copied ? 0 : ODX_ENOMEM;
}

static int apply_settings(odx_context *ctx, char *err, size_t errlen)
{
	static const odx_log_level levels[] = {ODX_LOG_NONE, ODX_LOG_ERROR, ODX_LOG_WARN,
					       ODX_LOG_INFO, ODX_LOG_DEBUG};
	static const char *names[] = {"none", "error", "warn", "info", "debug"};
	const char *log = odx__config_str(ctx->config, "log");
	const char *policy = odx__config_str(ctx->config, "policy");
	const char *trace = odx__config_str(ctx->config, "trace");
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(log, names[i]) == 0)
			ctx->log_level = levels[i];
	ctx->log_fn = odx__config_log_fn(ctx->config, &ctx->log_user);
	ctx->stats = odx__config_bool(ctx->config, "stats");
	ctx->bind = odx__config_bool(ctx->config, "host.bind");
	ctx->max_inflight = (long)odx__config_int(ctx->config, "sched.max_inflight");
	ctx->idle_spin_ns = 1000u * (uint64_t)odx__config_int(ctx->config, "sched.idle_spin_us");
	ctx->steal = odx__config_bool(ctx->config, "sched.steal");
	if (trace[0]) {
		ctx->tracing = true;
		ctx->trace_path = strdup(trace);
		if (!ctx->trace_path)
			return ODX_ENOMEM;
	}
	/* A Lua policy (lua:NAME or a .lua path, checked by config.c) is opened once the devices
	 * are (odx__policy_ctx_open); least_loaded decides whatever it leaves out. */
	ctx->sched = odx__sched_find(policy);
	if (!ctx->sched)
		ctx->sched = odx__sched_find("least_loaded");
	ctx->use_shared = ctx->sched->shared_queue;
	return 0;
}

static void context_free(odx_context *ctx);

static int context_open(odx_context **out, const odx_config *cfg);

/*
 * SIGXFSZ is held back on the calling thread for the whole of open: the file writes open makes
 * (the spill probe, shared-memory files a fabric provider sizes) fail with EFBIG instead of
 * killing the process under a file-size limit, and every thread ODX starts meanwhile (workers,
 * I/O, fabric, policy) inherits the blocked signal for good (see spill.h).
 */
ODX_API int odx_open(odx_context **out, const odx_config *cfg)
{
	odx__fsize_guard guard;
	int rc;

	odx__fsize_guard_begin(&guard);
	rc = context_open(out, cfg);
	odx__fsize_guard_end(&guard);
	return rc;
}

static int context_open(odx_context **out, const odx_config *cfg)
{
	odx_context *ctx;
	char err[ODX__MSG_MAX] = "";
	int rc;

	if (!out)
		return ODX_EINVAL;
	/* aligned as its type asks: its hot fields sit on cache lines of their own (core.h) */
	ctx = aligned_alloc(_Alignof(odx_context), sizeof(*ctx));
	if (!ctx)
		return ODX_ENOMEM;
	memset(ctx, 0, sizeof(*ctx));
	pthread_mutex_init(&ctx->shared_lock, NULL);
	pthread_mutex_init(&ctx->pool_lock, NULL);
	pthread_mutex_init(&ctx->wait_lock, NULL);
	pthread_cond_init(&ctx->wait_cond, NULL);
	pthread_mutex_init(&ctx->submit_lock, NULL);
	pthread_mutex_init(&ctx->objects_lock, NULL);
	pthread_mutex_init(&ctx->pf_lock, NULL);
	pthread_mutex_init(&ctx->error_lock, NULL);
	ctx->t_open = odx__now_ns();

	rc = odx__config_load(cfg, NULL, &ctx->config, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = apply_settings(ctx, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = odx__topo_open(&ctx->topo);
	if (rc) {
		snprintf(err, sizeof(err), "hwloc could not read the machine's topology");
		goto out_fail;
	}
	odx__dist_share_host(ctx);
	ctx->benv = (odx_backend_host){
		.size = sizeof(odx_backend_host),
		.abi_version = ODX_BACKEND_ABI_VERSION,
		.host_cores = ctx->share_pus ? ctx->share_pus : odx__topo_pus(ctx->topo),
		.host_memory = odx__topo_memory(ctx->topo),
		.core = ctx,
		.config_str = env_config_str,
		.config_int = env_config_int,
		.config_bool = env_config_bool,
		.config_size = env_config_size,
		.bind_thread = env_bind_thread,
		.log = env_log,
		.error_detail = env_error_detail,
	};
	rc = open_backends(ctx, &ctx->benv, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = open_devices(ctx, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = odx__tier_open(ctx, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = odx__dist_open(ctx, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = odx__policy_ctx_open(ctx, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = odx__workers_start(ctx);
	if (rc) {
		snprintf(err, sizeof(err), "cannot start worker threads");
		goto out_fail;
	}
	odx__log(ctx, ODX_LOG_INFO, "context open: %d devices, policy %s", ctx->ndevices,
		 ctx->policy ? odx__policy_name(ctx->policy) : ctx->sched->name);
	*out = ctx;
	odx__set_open_error("");
	return 0;

out_fail:
	if (!err[0])
		snprintf(err, sizeof(err), "%s", odx_strerror(rc));
	odx__config_set_error(cfg, err);
	odx__set_open_error(err);
	{
		void *user = NULL;
		odx_log_fn fn = odx__config_api_log_fn(cfg, &user);

		/* The configuration may be what failed, so the sink comes from the API or
		 * from ODX_LOG being set at all. */
		if (fn)
			fn(user, ODX_LOG_ERROR, err);
		else if (getenv("ODX_LOG") && strcmp(getenv("ODX_LOG"), "none") != 0)
			fprintf(stderr, "odx error: odx_open: %s\n", err);
	}
	context_free(ctx);
	return rc;
}

/* ---- closing -------------------------------------------------------------------------------- */

static void context_free(odx_context *ctx)
{
	int i;

	odx__dist_close(ctx); /* when odx_open failed after joining */
	odx__tier_stop(ctx);
	/* Prefetch requests that never started hold their buffers: they go now. */
	odx__prefetch_close(ctx);
	/* Copies the runtime started on its own (write-backs, prefetches, spills) finish first:
	 * their callbacks use the devices and the buffers. */
	odx__transfers_drain(ctx);
	odx__workers_stop(ctx);
	odx__policy_ctx_close(ctx); /* before kernels go: its last events name them */
	odx__buffers_release_all(ctx);
	odx__tier_close(ctx); /* the spill area goes once no buffer has a copy there */
	odx__kernels_free_all(ctx);
	for (i = 0; i < ctx->ndevices; i++) {
		odx__device *dev = &ctx->devices[i];

		dev->ops->device_close(dev->bdev);
		odx__queue_free(&dev->ready);
		free(dev->staged);
		free(dev->over);
		pthread_mutex_destroy(&dev->lock);
	}
	for (i = 0; i < ctx->nbackends; i++) {
		odx__backend_slot *slot = &ctx->backends[i];

		if (slot->available)
			slot->ops->close(slot->state);
		odx__backend_unload(&slot->module);
		free(slot->name);
	}
	for (i = 0; i < ctx->nslabs; i++) {
		odx__task *slab = ctx->slabs[i];

		for (int j = 0; j < 256; j++)
			pthread_mutex_destroy(&slab[j].lock);
		free(slab);
	}
	odx__queue_free(&ctx->shared);
	odx__trace_free(ctx);
	odx__topo_close(ctx->topo);
	odx__config_free(ctx->config);
	free(ctx->slabs);
	free(ctx->bytes_copied);
	free(ctx->devices);
	free(ctx->memnodes);
	free(ctx->backends);
	free(ctx->trace_path);
	pthread_mutex_destroy(&ctx->shared_lock);
	pthread_mutex_destroy(&ctx->pool_lock);
	pthread_mutex_destroy(&ctx->wait_lock);
	pthread_cond_destroy(&ctx->wait_cond);
	pthread_mutex_destroy(&ctx->submit_lock);
	pthread_mutex_destroy(&ctx->objects_lock);
	pthread_mutex_destroy(&ctx->pf_lock);
	pthread_mutex_destroy(&ctx->error_lock);
	free(ctx);
}

ODX_API int odx_close(odx_context *ctx)
{
	odx__fsize_guard guard;
	int rc = 0;

	if (!ctx)
		return 0;
	/* The trace file and the policy's model file are written here, on the caller's thread. */
	odx__fsize_guard_begin(&guard);
	/* Buffers the user never destroyed are destroyed now, in program order, so registered
	 * memory gets its latest contents back. Then finish everything: a task failure was already
	 * reported through its event and the log; close itself succeeded. */
	odx__buffers_destroy_all(ctx);
	odx_wait_all(ctx, -1);
	ctx->closing = true;
	if (ctx->tracing)
		rc = odx__trace_write(ctx, ctx->trace_path);
	if (ctx->stats)
		odx__stats_print(ctx);
	odx__dist_close(ctx); /* after this rank's sends and receives, with a final barrier */
	context_free(ctx);
	odx__fsize_guard_end(&guard);
	return rc;
}

/* ---- introspection -------------------------------------------------------------------------- */

ODX_API int odx_backend_count(odx_context *ctx)
{
	return ctx ? ctx->nbackends : ODX_EINVAL;
}

ODX_API int odx_backend_get_info(odx_context *ctx, int index, odx_backend_info *out)
{
	const odx__backend_slot *slot;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, index >= 0 && index < ctx->nbackends, "index");
	ODX__CHECK_ARG(ctx, out, "out");
	slot = &ctx->backends[index];
	*out = (odx_backend_info){
		.name = slot->name,
		.available = slot->available,
		.reason = slot->available ? "" : slot->reason,
		.device_count = slot->available ? slot->ndevices : 0,
		.origin = slot->module.desc ? slot->module.path : "",
		.description = slot->module.desc && slot->module.desc->description
				       ? slot->module.desc->description
				       : "",
	};
	return 0;
}

ODX_API int odx_device_count(odx_context *ctx)
{
	return ctx ? ctx->ndevices : ODX_EINVAL;
}

uint64_t odx__device_memory(const odx_context *ctx, int d)
{
	const odx__device *dev = &ctx->devices[d];

	/* A host device sharing a host node has that node's memory. */
	return ctx->memnodes[dev->memnode].device == dev ? dev->props.memory_bytes
							 : ctx->memnodes[dev->memnode].capacity;
}

ODX_API int odx_device_get_info(odx_context *ctx, int device, odx_device_info *out)
{
	const odx__device *dev;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, device >= 0 && device < ctx->ndevices, "device");
	ODX__CHECK_ARG(ctx, out, "out");
	dev = &ctx->devices[device];
	*out = (odx_device_info){
		.index = device,
		.kind = dev->kind,
		.name = dev->name,
		.memory_bytes = odx__device_memory(ctx, device),
		.memnode = dev->memnode,
		.compute_lanes = dev->props.compute_lanes,
		.copy_lanes = dev->props.copy_lanes,
		.threads = dev->props.threads,
		.kind_name = dev->kind_name,
	};
	return 0;
}

ODX_API int odx_memnode_count(odx_context *ctx)
{
	return ctx ? ctx->nmemnodes : ODX_EINVAL;
}

ODX_API int odx_memnode_get_info(odx_context *ctx, int memnode, odx_memnode_info *out)
{
	const odx__memnode *node;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, memnode >= 0 && memnode < ctx->nmemnodes, "memnode");
	ODX__CHECK_ARG(ctx, out, "out");
	node = &ctx->memnodes[memnode];
	*out = (odx_memnode_info){
		.index = memnode,
		.kind = node->kind,
		.device = node->device ? node->device->index : -1,
		.capacity_bytes = node->capacity,
		.used_bytes = atomic_load(&node->used),
	};
	return 0;
}

ODX_API int odx_memnode_near(odx_context *ctx, int memnode)
{
	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, memnode >= 0 && memnode < ctx->nmemnodes, "memnode");
	return ctx->memnodes[memnode].near;
}

ODX_API int odx_memnode_numa(odx_context *ctx, int memnode)
{
	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, memnode >= 0 && memnode < ctx->nmemnodes, "memnode");
	return odx__topo_numa_os_index(ctx->topo, ctx->memnodes[memnode].near);
}

ODX_API int odx_config_describe(odx_context *ctx, odx_config_visit_fn fn, void *user)
{
	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, fn, "fn");
	odx__config_foreach(ctx->config, fn, user);
	return 0;
}
