/* SPDX-License-Identifier: Apache-2.0 */
/* kernel.c - kernel registration: a name, a signature and one variant per backend kind. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define ODX__MAX_PARAMS 64

static void kernel_free(odx_kernel *k)
{
	int i;

	for (i = 0; i < k->nvariants; i++) {
		free((void *)k->variants[i].code);
		free((void *)k->variants[i].entry);
		free((void *)k->variants[i].backend_name);
	}
	for (i = 0; i < k->nparams; i++)
		free((void *)k->params[i].name);
	for (i = 0; k->device_module && i < k->ctx->ndevices; i++) {
		const odx__device *dev = &k->ctx->devices[i];

		if (k->device_module[i] && ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops,
							      module_unload))
			dev->ops->module_unload(dev->bdev, k->device_module[i]);
	}
	for (i = 0; k->module_error && i < k->ctx->ndevices; i++)
		free(k->module_error[i]);
	free(k->module_error);
	free(k->loaded_variant);
	free(k->device_module);
	free(k->variants);
	free(k->params);
	free(k->device_variant);
	free(k->name);
	free(k);
}

void odx__kernels_free_all(odx_context *ctx)
{
	odx_kernel *k;

	while ((k = ctx->kernels) != NULL) {
		ctx->kernels = k->next;
		kernel_free(k);
	}
}

static int check_params(odx_context *ctx, const char *name, const odx_param *params, int nparams)
{
	int i;

	for (i = 0; i < nparams; i++) {
		const odx_param *p = &params[i];

		if (p->kind < ODX_ARG_BUFFER || p->kind > ODX_ARG_F64)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_kernel_create: kernel '%s' parameter %d: bad kind %d",
					 name, i, (int)p->kind);
		if (p->kind == ODX_ARG_BUFFER && (p->access < ODX_R || p->access > ODX_RW))
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_kernel_create: kernel '%s' parameter %d: a buffer "
					 "needs access ODX_R, ODX_W or ODX_RW",
					 name, i);
	}
	return 0;
}

/* The legacy constant of kind `name`, or ODX_BACKEND_OTHER when it has none. */
static odx_backend_kind kind_of_name(const char *name)
{
	int k;

	for (k = 0; k < ODX_BACKEND_KIND_COUNT; k++)
		if (strcmp(name, odx_backend_kind_name((odx_backend_kind)k)) == 0)
			return (odx_backend_kind)k;
	return ODX_BACKEND_OTHER;
}

/* The copy names its backend kind both ways, consistently: backends built before backend_name
 * existed read only `backend`, newer ones and the core's matching read the name. */
static int copy_variant_kind(odx_context *ctx, const char *name, const odx_kernel_variant *in,
			     odx_kernel_variant *out)
{
	const char *kind;

	if (in->backend_name) {
		if (!in->backend_name[0])
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_kernel_create: kernel '%s': empty backend_name", name);
		kind = in->backend_name;
		out->backend = kind_of_name(kind);
	} else {
		if (in->backend < 0 || in->backend >= ODX_BACKEND_KIND_COUNT)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_kernel_create: kernel '%s': bad backend %d (name "
					 "other kinds with backend_name)",
					 name, (int)in->backend);
		kind = odx_backend_kind_name(in->backend);
	}
	out->backend_name = strdup(kind);
	return out->backend_name ? 0 : ODX_ENOMEM;
}

static int copy_variant(odx_context *ctx, const char *name, const odx_kernel_variant *in,
			odx_kernel_variant *out)
{
	int rc;

	*out = *in;
	out->code = NULL;
	out->entry = NULL;
	out->backend_name = NULL;
	rc = copy_variant_kind(ctx, name, in, out);
	if (rc)
		return rc;
	if (in->format == ODX_FORMAT_HOST_CALL && out->backend != ODX_BACKEND_HOST)
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_kernel_create: kernel '%s': a one-call variant "
				 "(ODX_FORMAT_HOST_CALL) is for backend host, not %s",
				 name, out->backend_name);
	if (in->format == ODX_FORMAT_HOST_FN || in->format == ODX_FORMAT_HOST_CALL) {
		if (!in->host_fn)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_kernel_create: kernel '%s': host variant without "
					 "host_fn",
					 name);
		return 0;
	}
	if (!in->code || in->code_size == 0)
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_kernel_create: kernel '%s': %s variant without code", name,
				 out->backend_name);
	out->code = malloc(in->code_size);
	if (!out->code)
		return ODX_ENOMEM;
	memcpy((void *)out->code, in->code, in->code_size);
	if (in->entry && !(out->entry = strdup(in->entry)))
		return ODX_ENOMEM;
	return 0;
}

/* The ABI minor the device's backend declared (0 when unknown, e.g. a test's fake device). */
static uint32_t device_abi_minor(const odx_context *ctx, const odx__device *dev)
{
	int b;

	for (b = 0; b < ctx->nbackends; b++) {
		const odx__backend_slot *slot = &ctx->backends[b];

		if (slot->available && slot->ops == dev->ops && slot->module.desc)
			return slot->module.desc->abi_version & 0xffff;
	}
	return 0;
}

/* A one-call variant needs a host backend of ABI 1.6 or later: an older one would run it
 * once per chunk of work-groups, several times per task. */
static bool runs_host_call(const odx_context *ctx, const odx__device *dev)
{
	return dev->kind == ODX_BACKEND_HOST && device_abi_minor(ctx, dev) >= 6;
}

static void bind_devices(odx_context *ctx, odx_kernel *k)
{
	int d, v;

	/* The first variant a device can run is its variant; order in the list is preference. */
	for (d = 0; d < ctx->ndevices; d++) {
		const odx__device *dev = &ctx->devices[d];

		k->device_variant[d] = -1;
		k->loaded_variant[d] = -1;
		for (v = 0; v < k->nvariants; v++) {
			const odx_kernel_variant *var = &k->variants[v];
			bool ok = ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, can_run)
					  ? dev->ops->can_run(dev->bdev, var)
					  : strcmp(var->backend_name, dev->kind_name) == 0;

			if (var->format == ODX_FORMAT_HOST_CALL)
				ok = ok && runs_host_call(ctx, dev);
			if (ok) {
				k->device_variant[d] = v;
				break;
			}
		}
	}
}

ODX_API int odx_kernel_create(odx_context *ctx, const char *name, const odx_param *params,
			      int nparams, const odx_kernel_variant *variants, int nvariants,
			      odx_kernel **out)
{
	odx_kernel *k;
	int i, rc;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, name && *name, "name");
	ODX__CHECK_ARG(ctx, nparams >= 0 && nparams <= ODX__MAX_PARAMS, "nparams");
	ODX__CHECK_ARG(ctx, nparams == 0 || params, "params");
	ODX__CHECK_ARG(ctx, nvariants > 0 && variants, "variants");
	ODX__CHECK_ARG(ctx, out, "out");
	rc = check_params(ctx, name, params, nparams);
	if (rc)
		return rc;

	k = calloc(1, sizeof(*k));
	if (!k)
		return odx__fail(ctx, ODX_ENOMEM, "odx_kernel_create: out of memory");
	k->ctx = ctx;
	k->name = strdup(name);
	k->params = calloc((size_t)nparams + 1, sizeof(*k->params));
	k->variants = calloc((size_t)nvariants, sizeof(*k->variants));
	k->device_variant = calloc((size_t)ctx->ndevices + 1, sizeof(int));
	k->device_module = calloc((size_t)ctx->ndevices + 1, sizeof(void *));
	k->module_error = calloc((size_t)ctx->ndevices + 1, sizeof(char *));
	k->loaded_variant = malloc(((size_t)ctx->ndevices + 1) * sizeof(int));
	if (!k->name || !k->params || !k->variants || !k->device_variant || !k->device_module ||
	    !k->module_error || !k->loaded_variant)
		goto out_nomem;
	for (i = 0; i < nparams; i++) {
		k->params[i] = params[i];
		k->params[i].name = NULL;
		if (params[i].name && !(k->params[i].name = strdup(params[i].name)))
			goto out_nomem;
		k->nbuffers += params[i].kind == ODX_ARG_BUFFER;
	}
	k->nparams = nparams;
	for (i = 0; i < nvariants; i++) {
		rc = copy_variant(ctx, name, &variants[i], &k->variants[i]);
		k->nvariants = i + 1;
		if (rc)
			goto out_free;
	}
	bind_devices(ctx, k);
	pthread_mutex_lock(&ctx->objects_lock);
	k->next = ctx->kernels;
	if (ctx->kernels)
		ctx->kernels->prev = k;
	ctx->kernels = k;
	pthread_mutex_unlock(&ctx->objects_lock);
	*out = k;
	return 0;

out_nomem:
	rc = odx__fail(ctx, ODX_ENOMEM, "odx_kernel_create: out of memory");
out_free:
	kernel_free(k);
	return rc;
}

ODX_API int odx_kernel_destroy(odx_kernel *kernel)
{
	odx_context *ctx;

	if (!kernel)
		return ODX_EINVAL;
	ctx = kernel->ctx;
	pthread_mutex_lock(&ctx->objects_lock);
	if (kernel->user_destroyed) {
		pthread_mutex_unlock(&ctx->objects_lock);
		return odx__fail(ctx, ODX_EINVAL, "odx_kernel_destroy: kernel '%s' destroyed twice",
				 kernel->name);
	}
	/* Tasks already submitted may still run it: the memory goes at close. */
	kernel->user_destroyed = true;
	pthread_mutex_unlock(&ctx->objects_lock);
	return 0;
}
