/* SPDX-License-Identifier: Apache-2.0 */
/*
 * context.c - opening and closing a context: configuration, topology, backends, devices, memory
 * nodes, workers; and the introspection calls (backends, devices, memory nodes, configuration).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Every backend ODX knows, in the order `backends = auto` tries them. The ones not built yet say
 * so honestly instead of pretending. */
static const struct {
	const char *name;
	const odx__backend_ops *ops; /* NULL: not built into this library */
	const char *missing;
} known_backends[] = {
	{"cuda", NULL, "not built into this ODX (the CUDA backend is planned: issue 8)"},
	{"hip", NULL, "not built into this ODX (the HIP backend is planned: issue 8)"},
	{"vulkan", NULL, "not built into this ODX (the Vulkan backend is planned: issue 4)"},
	{"opencl", NULL, "not built into this ODX (the OpenCL backend is planned: issue 4)"},
	{"host", &odx__host_backend, NULL},
};
#define NKNOWN ((int)(sizeof(known_backends) / sizeof(known_backends[0])))

ODX_API const char *odx_backend_kind_name(odx_backend_kind kind)
{
	static const char *names[] = {"host", "cuda", "hip", "vulkan", "opencl"};

	if (kind < 0 || kind >= ODX_BACKEND_KIND_COUNT)
		return "?";
	return names[kind];
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

/* ---- opening -------------------------------------------------------------------------------- */

static bool list_has(const char *list, const char *word)
{
	size_t n = strlen(word);
	const char *p = list;

	while ((p = strstr(p, word)) != NULL) {
		if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
		p += n;
	}
	return false;
}

/* Position of `word` in the comma-separated list, for the user's order. */
static int list_pos(const char *list, const char *word)
{
	const char *p = list;
	int pos = 0;
	size_t n = strlen(word);

	for (;;) {
		if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return pos;
		p = strchr(p, ',');
		if (!p)
			return -1;
		p++;
		pos++;
	}
}

static int open_backends(odx_context *ctx, odx__backend_env *env, char *err, size_t errlen)
{
	const char *list = odx__config_str(ctx->config, "backends");
	bool automatic = strcmp(list, "auto") == 0;
	int order[NKNOWN], n = 0, i, j, rc;

	/* Named backends in the user's order; under auto, every known one in ours. */
	for (i = 0; i < NKNOWN; i++)
		if (automatic || list_has(list, known_backends[i].name))
			order[n++] = i;
	for (i = 1; !automatic && i < n; i++)
		for (j = i; j > 0 && list_pos(list, known_backends[order[j]].name) <
					     list_pos(list, known_backends[order[j - 1]].name);
		     j--) {
			int tmp = order[j];

			order[j] = order[j - 1];
			order[j - 1] = tmp;
		}
	ctx->backends = calloc((size_t)n, sizeof(*ctx->backends));
	if (!ctx->backends)
		return ODX_ENOMEM;
	for (i = 0; i < n; i++) {
		odx__backend_slot *slot = &ctx->backends[ctx->nbackends++];
		const char *name = known_backends[order[i]].name;

		slot->name = name;
		slot->ops = known_backends[order[i]].ops;
		if (!slot->ops) {
			snprintf(slot->reason, sizeof(slot->reason), "%s",
				 known_backends[order[i]].missing);
		} else {
			rc = slot->ops->open(env, &slot->state, slot->reason, sizeof(slot->reason));
			slot->available = rc == 0;
			if (rc == 0) {
				slot->ndevices = slot->ops->device_count(slot->state);
				if (slot->ndevices <= 0) {
					slot->available = false;
					snprintf(slot->reason, sizeof(slot->reason),
						 "the driver opened but reports no device");
				}
			}
		}
		if (!slot->available) {
			odx__log(ctx, ODX_LOG_INFO, "backend %s unavailable: %s", name,
				 slot->reason);
			if (!automatic) {
				snprintf(err, errlen,
					 "backend '%s' (asked for by 'backends = %s') is unavailable: "
					 "%s",
					 name, list, slot->reason);
				return ODX_EUNAVAIL;
			}
		}
	}
	return 0;
}

static int open_devices(odx_context *ctx, char *err, size_t errlen)
{
	int total = 0, b, i, rc;

	for (b = 0; b < ctx->nbackends; b++)
		if (ctx->backends[b].available)
			total += ctx->backends[b].ndevices;
	if (total == 0) {
		snprintf(err, errlen, "no device: no backend could be opened (see odx info)");
		return ODX_ENODEV;
	}
	ctx->devices = calloc((size_t)total, sizeof(*ctx->devices));
	ctx->memnodes = calloc((size_t)total + 1, sizeof(*ctx->memnodes));
	if (!ctx->devices || !ctx->memnodes)
		return ODX_ENOMEM;
	ctx->nmemnodes = 1;
	ctx->memnodes[0].kind = ODX_MEMNODE_HOST;
	ctx->memnodes[0].capacity = odx__topo_memory(ctx->topo);
	for (b = 0; b < ctx->nbackends; b++) {
		odx__backend_slot *slot = &ctx->backends[b];

		for (i = 0; slot->available && i < slot->ndevices; i++) {
			odx__device *dev = &ctx->devices[ctx->ndevices];
			char lane[96];

			dev->index = ctx->ndevices;
			dev->ops = slot->ops;
			pthread_mutex_init(&dev->lock, NULL);
			pthread_cond_init(&dev->cond, NULL);
			rc = slot->ops->device_open(slot->state, i, dev->index, &dev->props,
						    &dev->bdev);
			if (rc) {
				pthread_mutex_destroy(&dev->lock);
				pthread_cond_destroy(&dev->cond);
				snprintf(err, errlen, "backend %s: device %d failed to open: %s",
					 slot->ops->name, i, odx_strerror(rc));
				return rc;
			}
			snprintf(dev->name, sizeof(dev->name), "%s", dev->props.name);
			dev->memnode = ctx->nmemnodes;
			ctx->memnodes[ctx->nmemnodes++] = (odx__memnode){
				.kind = ODX_MEMNODE_DEVICE,
				.device = dev,
				.capacity = dev->props.memory_bytes,
			};
			snprintf(lane, sizeof(lane), "device %d compute (%s)", dev->index,
				 dev->name);
			dev->compute_trace = odx__lane_trace_new(ctx, lane, 0, 2 * dev->index + 1);
			snprintf(lane, sizeof(lane), "device %d copy", dev->index);
			dev->copy_trace = odx__lane_trace_new(ctx, lane, 0, 2 * dev->index + 2);
			ctx->ndevices++;
		}
	}
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
	if (trace[0]) {
		ctx->tracing = true;
		ctx->trace_path = strdup(trace);
		if (!ctx->trace_path)
			return ODX_ENOMEM;
	}
	ctx->sched = odx__sched_find(policy);
	if (!ctx->sched) {
		snprintf(err, errlen,
			 "policy '%s': Lua policies are not built into this ODX yet (planned: "
			 "issue 6); use eager, least_loaded or round_robin",
			 policy);
		return ODX_ECONFIG;
	}
	ctx->use_shared = ctx->sched->shared_queue;
	return 0;
}

static void context_free(odx_context *ctx);

ODX_API int odx_open(odx_context **out, const odx_config *cfg)
{
	odx_context *ctx;
	char err[ODX__MSG_MAX] = "";
	int rc;

	if (!out)
		return ODX_EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return ODX_ENOMEM;
	pthread_mutex_init(&ctx->shared_lock, NULL);
	pthread_mutex_init(&ctx->pool_lock, NULL);
	pthread_mutex_init(&ctx->wait_lock, NULL);
	pthread_cond_init(&ctx->wait_cond, NULL);
	pthread_mutex_init(&ctx->submit_lock, NULL);
	pthread_mutex_init(&ctx->objects_lock, NULL);
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
	ctx->benv = (odx__backend_env){
		.config = ctx->config,
		.host_cores = odx__topo_pus(ctx->topo),
		.host_memory = odx__topo_memory(ctx->topo),
		.core = ctx,
		.bind_thread = env_bind_thread,
		.log = env_log,
	};
	rc = open_backends(ctx, &ctx->benv, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = open_devices(ctx, err, sizeof(err));
	if (rc)
		goto out_fail;
	rc = odx__workers_start(ctx);
	if (rc) {
		snprintf(err, sizeof(err), "cannot start worker threads");
		goto out_fail;
	}
	odx__log(ctx, ODX_LOG_INFO, "context open: %d devices, policy %s", ctx->ndevices,
		 ctx->sched->name);
	*out = ctx;
	return 0;

out_fail:
	if (!err[0])
		snprintf(err, sizeof(err), "%s", odx_strerror(rc));
	odx__config_set_error(cfg, err);
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

	odx__workers_stop(ctx);
	odx__buffers_release_all(ctx);
	odx__kernels_free_all(ctx);
	for (i = 0; i < ctx->ndevices; i++) {
		odx__device *dev = &ctx->devices[i];

		dev->ops->device_close(dev->bdev);
		odx__queue_free(&dev->ready);
		free(dev->staged);
		pthread_mutex_destroy(&dev->lock);
		pthread_cond_destroy(&dev->cond);
	}
	for (i = 0; i < ctx->nbackends; i++)
		if (ctx->backends[i].available)
			ctx->backends[i].ops->close(ctx->backends[i].state);
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
	pthread_mutex_destroy(&ctx->error_lock);
	free(ctx);
}

ODX_API int odx_close(odx_context *ctx)
{
	int rc = 0;

	if (!ctx)
		return 0;
	/* Finish everything submitted, deferred destructions included. A task failure was already
	 * reported through its event and the log; close itself succeeded. */
	odx_wait_all(ctx, -1);
	ctx->closing = true;
	if (ctx->tracing)
		rc = odx__trace_write(ctx, ctx->trace_path);
	if (ctx->stats)
		odx__stats_print(ctx);
	context_free(ctx);
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
	};
	return 0;
}

ODX_API int odx_device_count(odx_context *ctx)
{
	return ctx ? ctx->ndevices : ODX_EINVAL;
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
		.kind = dev->ops->kind,
		.name = dev->name,
		.memory_bytes = dev->props.memory_bytes,
		.memnode = dev->memnode,
		.compute_lanes = dev->props.compute_lanes,
		.copy_lanes = dev->props.copy_lanes,
		.threads = dev->props.threads,
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

ODX_API int odx_config_describe(odx_context *ctx, odx_config_visit_fn fn, void *user)
{
	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, fn, "fn");
	odx__config_foreach(ctx->config, fn, user);
	return 0;
}
