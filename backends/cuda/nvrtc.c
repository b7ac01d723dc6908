/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvrtc.c - CUDA C++ source variants (ODX_FORMAT_CUDA_C) compiled through NVRTC, opened at run
 * time like the driver. The CUDA backend hands the result to cuModuleLoadDataEx like any image.
 *
 * Per device: SASS (nvrtcGetCUBIN) when NVRTC lists the device's architecture, so nothing is
 * left to the driver's JIT; PTX for the newest listed architecture below it when the device is
 * newer than this NVRTC (the driver JIT-compiles PTX forward); nothing when the device is older
 * than every listed one. A cubin also runs on a driver a minor release older than NVRTC, where
 * PTX would not (the driver reads PTX only up to its own ISA version).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "odx/backend.h"
#include "nvrtc_api.h"

#define NVRTC_MAX_ARCHS 64
/* Never unloaded: NVRTC carries its own C++ runtime, whose static allocations would be lost on
 * every dlclose (a context opening and closing NVRTC would leak each time). */
#define NVRTC_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)

struct cub_nvrtc {
	void *lib;
	char name[320];
	char describe[400];
	int major, minor;
	int archs[NVRTC_MAX_ARCHS]; /* ascending, as NVRTC lists them; narchs 0: unknown */
	int narchs;
	PFN_nvrtcGetErrorString nvrtcGetErrorString;
#define NVRTC_PFN_MEMBER(name, params) PFN_##name name;
	NVRTC_FUNCTIONS(NVRTC_PFN_MEMBER)
	NVRTC_OPTIONAL_FUNCTIONS(NVRTC_PFN_MEMBER)
#undef NVRTC_PFN_MEMBER
};

static const char *const nvrtc_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
					  "libnvrtc.so"};

/* dlopen of each soname, then of each under the toolkit directories; the first loader message
 * goes to `first` (a soname that is not installed says why better than a full path). */
static void *nvrtc_dlopen(char *name, size_t name_size, char *first, size_t first_size)
{
	const char *dirs[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
	size_t i, j;
	void *lib;

	for (i = 0; i < sizeof(nvrtc_names) / sizeof(nvrtc_names[0]); i++) {
		lib = dlopen(nvrtc_names[i], NVRTC_DLOPEN_FLAGS);
		if (lib) {
			snprintf(name, name_size, "%s", nvrtc_names[i]);
			return lib;
		}
		if (!first[0])
			snprintf(first, first_size, "%s", dlerror());
	}
	for (j = 0; j < sizeof(dirs) / sizeof(dirs[0]); j++) {
		if (!dirs[j] || !dirs[j][0])
			continue;
		for (i = 0; i < sizeof(nvrtc_names) / sizeof(nvrtc_names[0]); i++) {
			snprintf(name, name_size, "%s/lib64/%s", dirs[j], nvrtc_names[i]);
			lib = dlopen(name, NVRTC_DLOPEN_FLAGS);
			if (lib)
				return lib;
		}
	}
	return NULL;
}

int cub_nvrtc_open(const char *library, cub_nvrtc **out, char *reason, size_t n)
{
	cub_nvrtc *rt = calloc(1, sizeof(*rt));
	char first[256] = "";
	void *sym;
	int count = 0;

	if (!rt) {
		snprintf(reason, n, "out of memory");
		return ODX_ENOMEM;
	}
	if (library && library[0]) {
		snprintf(rt->name, sizeof(rt->name), "%s", library);
		rt->lib = dlopen(library, NVRTC_DLOPEN_FLAGS);
		if (!rt->lib) {
			snprintf(reason, n, "NVRTC %s (cuda.nvrtc_library) cannot be loaded: %s",
				 library, dlerror());
			goto out_free;
		}
	} else if (!(rt->lib = nvrtc_dlopen(rt->name, sizeof(rt->name), first, sizeof(first)))) {
		snprintf(reason, n,
			 "NVRTC was not found: %s (also tried libnvrtc.so.12, .so.11.2, .so, and "
			 "lib64/ under $CUDA_HOME, $CUDA_PATH and /usr/local/cuda; set "
			 "cuda.nvrtc_library)",
			 first);
		goto out_free;
	}
#define NVRTC_RESOLVE(fn, params)                                                                  \
	if (!(sym = dlsym(rt->lib, #fn))) {                                                        \
		snprintf(reason, n, "%s has no " #fn ": not NVRTC, or one too old", rt->name);     \
		goto out_close;                                                                    \
	}                                                                                          \
	memcpy(&rt->fn, &sym, sizeof(sym));
	NVRTC_FUNCTIONS(NVRTC_RESOLVE)
#undef NVRTC_RESOLVE
#define NVRTC_RESOLVE_OPTIONAL(fn, params)                                                         \
	if ((sym = dlsym(rt->lib, #fn)) != NULL)                                                   \
		memcpy(&rt->fn, &sym, sizeof(sym));
	NVRTC_OPTIONAL_FUNCTIONS(NVRTC_RESOLVE_OPTIONAL)
#undef NVRTC_RESOLVE_OPTIONAL
	if ((sym = dlsym(rt->lib, "nvrtcGetErrorString")) != NULL)
		memcpy(&rt->nvrtcGetErrorString, &sym, sizeof(sym));
	if (rt->nvrtcVersion(&rt->major, &rt->minor) != NVRTC_SUCCESS) {
		snprintf(reason, n, "%s: nvrtcVersion failed", rt->name);
		goto out_close;
	}
	if (rt->nvrtcGetNumSupportedArchs && rt->nvrtcGetSupportedArchs &&
	    rt->nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0 &&
	    count <= NVRTC_MAX_ARCHS && rt->nvrtcGetSupportedArchs(rt->archs) == NVRTC_SUCCESS)
		rt->narchs = count;
	snprintf(rt->describe, sizeof(rt->describe), "NVRTC %d.%d (%s)", rt->major, rt->minor,
		 rt->name);
	*out = rt;
	return 0;

out_close:
	dlclose(rt->lib);
out_free:
	free(rt);
	return ODX_EUNAVAIL;
}

void cub_nvrtc_close(cub_nvrtc *rt)
{
	if (!rt)
		return;
	dlclose(rt->lib);
	free(rt);
}

const char *cub_nvrtc_describe(const cub_nvrtc *rt)
{
	return rt->describe;
}

int cub_nvrtc_version(const cub_nvrtc *rt)
{
	return rt->major * 1000 + rt->minor * 10;
}

cub_nvrtc_plan_kind cub_nvrtc_plan(const cub_nvrtc *rt, int arch, int *target)
{
	int i, below = 0;

	*target = arch;
	if (!arch)
		return CUB_NVRTC_PTX;
	if (rt->narchs == 0) /* NVRTC before 11.2: try the device's own */
		return rt->nvrtcGetCUBIN ? CUB_NVRTC_CUBIN : CUB_NVRTC_PTX;
	for (i = 0; i < rt->narchs; i++) {
		if (rt->archs[i] == arch)
			return rt->nvrtcGetCUBIN ? CUB_NVRTC_CUBIN : CUB_NVRTC_PTX;
		if (rt->archs[i] < arch && rt->archs[i] > below)
			below = rt->archs[i];
	}
	if (!below) {
		*target = rt->archs[0];
		return CUB_NVRTC_NONE;
	}
	*target = below;
	return CUB_NVRTC_PTX;
}

static const char *nvrtc_err(const cub_nvrtc *rt, nvrtcResult rc)
{
	const char *s = rt->nvrtcGetErrorString ? rt->nvrtcGetErrorString(rc) : NULL;

	return s ? s : "NVRTC error";
}

/* The log's error lines ("x.cu(8): error: ..."), joined by " | ", or its first lines if none
 * says "error": the start of a message is what survives the core's cut. */
static void nvrtc_condense(const char *log, char *out, size_t n)
{
	size_t used = 0;
	int pass;

	out[0] = '\0';
	for (pass = 0; pass < 2 && used == 0; pass++) {
		const char *line = log;

		while (*line && used + 1 < n) {
			size_t len = strcspn(line, "\n");
			bool wanted = pass == 1 ||
				      (memmem(line, len, "error", 5) != NULL &&
				       !memmem(line, len, "detected in the compilation", 27));

			if (wanted && len > 0)
				used += (size_t)snprintf(out + used, n - used, "%s%.*s",
							 used ? " | " : "", (int)len, line);
			line += len + (line[len] == '\n');
		}
	}
	if (used >= n && n > 4)
		memcpy(out + n - 4, "...", 4);
}

int cub_nvrtc_compile(cub_nvrtc *rt, const char *src, size_t len, const char *entry, int arch,
		      cub_nvrtc_image *out, char *msg, size_t n, char **full_log)
{
	cub_nvrtc_plan_kind plan = cub_nvrtc_plan(rt, arch, &out->target);
	char option[64], prog_name[160], lines[1024];
	const char *opts[1] = {option};
	nvrtcProgram prog = NULL;
	size_t log_size = 0, size = 0;
	char *text = NULL, *log = NULL;
	nvrtcResult rc;
	int ret = 0;

	*full_log = NULL;
	out->code = NULL;
	out->size = 0;
	out->cubin = plan == CUB_NVRTC_CUBIN;
	if (plan == CUB_NVRTC_NONE) {
		snprintf(msg, n,
			 "%s cannot compile for sm_%d: the oldest architecture it targets is sm_%d "
			 "(give this device a PTX or cubin variant, or an older NVRTC)",
			 rt->describe, arch, out->target);
		return ODX_ENOVARIANT;
	}
	if (out->target)
		snprintf(option, sizeof(option), "--gpu-architecture=%s_%d",
			 plan == CUB_NVRTC_CUBIN ? "sm" : "compute", out->target);
	snprintf(prog_name, sizeof(prog_name), "%s.cu", entry && entry[0] ? entry : "odx_kernel");
	/* NVRTC reads the source up to a NUL, which a variant's code need not carry. */
	text = malloc(len + 1);
	if (!text) {
		snprintf(msg, n, "out of memory");
		return ODX_ENOMEM;
	}
	memcpy(text, src, len);
	text[len] = '\0';
	rc = rt->nvrtcCreateProgram(&prog, text, prog_name, 0, NULL, NULL);
	if (rc != NVRTC_SUCCESS) {
		snprintf(msg, n, "%s: nvrtcCreateProgram: %s (%d)", rt->describe, nvrtc_err(rt, rc),
			 rc);
		ret = rc == NVRTC_ERROR_OUT_OF_MEMORY ? ODX_ENOMEM : ODX_EBACKEND;
		goto out_free;
	}
	rc = rt->nvrtcCompileProgram(prog, out->target ? 1 : 0, opts);
	if (rt->nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1 &&
	    (log = malloc(log_size)) != NULL &&
	    rt->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) {
		free(log);
		log = NULL;
	}
	if (rc != NVRTC_SUCCESS) {
		nvrtc_condense(log ? log : "", lines, sizeof(lines));
		/* The log first: the core keeps the start of long messages. */
		snprintf(msg, n, "NVRTC log: %s; %s compiling %s%s%s: %s (%d)",
			 lines[0] ? lines : "(empty)", rt->describe, prog_name,
			 out->target ? " with " : "", out->target ? option : "", nvrtc_err(rt, rc),
			 rc);
		/* An architecture this NVRTC refuses is no fault of the source. */
		ret = rc == NVRTC_ERROR_INVALID_OPTION	? ODX_ENOVARIANT
		      : rc == NVRTC_ERROR_OUT_OF_MEMORY ? ODX_ENOMEM
							: ODX_EBACKEND;
		goto out_destroy;
	}
	if (out->cubin)
		rc = rt->nvrtcGetCUBINSize(prog, &size);
	else
		rc = rt->nvrtcGetPTXSize(prog, &size);
	if (rc == NVRTC_SUCCESS && size > 0 && (out->code = malloc(size)) != NULL)
		rc = out->cubin ? rt->nvrtcGetCUBIN(prog, out->code)
				: rt->nvrtcGetPTX(prog, out->code);
	if (rc != NVRTC_SUCCESS || !out->code) {
		snprintf(msg, n, "%s: %s of %s: %s (%d)", rt->describe,
			 out->cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX", prog_name,
			 rc != NVRTC_SUCCESS ? nvrtc_err(rt, rc) : "out of memory", rc);
		ret = rc != NVRTC_SUCCESS ? ODX_EBACKEND : ODX_ENOMEM;
		free(out->code);
		out->code = NULL;
		goto out_destroy;
	}
	out->size = size;

out_destroy:
	rt->nvrtcDestroyProgram(&prog);
out_free:
	free(text);
	/* Warnings of a successful compile are worth a debug line too. */
	if (log && log[0])
		*full_log = log;
	else
		free(log);
	return ret;
}
