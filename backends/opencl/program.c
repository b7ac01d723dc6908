/* SPDX-License-Identifier: Apache-2.0 */
/*
 * program.c - OpenCL C variants built for one device: from the binary cache when it holds a
 * usable binary, else from source (and then stored in the cache); the kernel object and what its
 * parameters accept, so that launch can refuse a mismatched task before the driver sees it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clb.h"

/* Argument info lets launch check types; it is standard since OpenCL 1.2. */
#define CLB_BUILD_OPTIONS "-cl-kernel-arg-info"

/* The build log of `prog` on the device (malloc'ed, "" when there is none); NULL if no memory. */
static char *clb_build_log(clb_dev *d, cl_program prog)
{
	const clb_api *cl = &d->st->api;
	size_t size = 0;
	char *log;

	if (cl->clGetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) !=
	    CL_SUCCESS)
		size = 0;
	log = calloc(1, size + 1);
	if (log && size > 0 &&
	    cl->clGetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, size, log, NULL) !=
		    CL_SUCCESS)
		log[0] = '\0';
	return log;
}

/* Skips a leading "path/to/file.cl:" in a log line: drivers compile from temporary files whose
 * names say nothing to the user and would crowd the message out. */
static size_t clb_skip_file(const char *line, size_t len)
{
	const char *p = memmem(line, len, ".cl:", 4);
	const char *start = p;

	if (!p)
		return 0;
	while (start > line && start[-1] != ' ')
		start--;
	/* Only a path (it has a slash or starts the line) is dropped, with what precedes it. */
	if (start != line && !memchr(start, '/', (size_t)(p - start)))
		return 0;
	return (size_t)(p + 4 - line);
}

/*
 * Squeezes a compiler log into one line for an error message, which the core keeps short: lines
 * that carry "error" come first (they name the culprit, e.g. the undeclared identifier), the
 * others only if there are none; file names, the "N errors generated" summary, newlines and runs
 * of blanks go.
 */
static void clb_condense_log(const char *log, char *out, size_t out_size)
{
	size_t n = 0;
	int pass;

	out[0] = '\0';
	for (pass = 0; pass < 2 && n == 0; pass++) {
		const char *line = log;

		while (*line && n + 1 < out_size) {
			size_t len = strcspn(line, "\n");
			bool wanted = pass == 1 || (memmem(line, len, "error", 5) != NULL &&
						    !memmem(line, len, " generated", 10));
			size_t i = wanted ? clb_skip_file(line, len) : len;

			for (; i < len && n + 1 < out_size; i++) {
				char c = line[i] == '\t' ? ' ' : line[i];

				if (c == ' ' && (n == 0 || out[n - 1] == ' '))
					continue;
				out[n++] = c;
			}
			if (wanted && n > 0 && n + 3 < out_size && out[n - 1] != ' ') {
				memcpy(out + n, " | ", 3);
				n += 3;
			}
			line += len + (line[len] == '\n');
		}
	}
	/* Drop the trailing separator. */
	while (n > 0 && (out[n - 1] == ' ' || out[n - 1] == '|'))
		n--;
	out[n] = '\0';
}

/* Builds a program from source; on failure writes the condensed compiler log into `error`. */
static int clb_build_source(clb_dev *d, const odx_kernel_variant *v, cl_program *out, char *error,
			    size_t error_size)
{
	const clb_api *cl = &d->st->api;
	const char *src = v->code;
	size_t len = v->code_size;
	cl_program prog;
	cl_int err;
	char *log, line[1024];
	int rc;

	/* Lengths given: the source need not be NUL-terminated. */
	prog = cl->clCreateProgramWithSource(d->context, 1, &src, &len, &err);
	if (err != CL_SUCCESS)
		return clb_check(err, "clCreateProgramWithSource", d, 0, error, error_size);
	err = cl->clBuildProgram(prog, 1, &d->id, CLB_BUILD_OPTIONS, NULL, NULL);
	if (err == CL_SUCCESS) {
		*out = prog;
		return 0;
	}
	rc = clb_check(err, "clBuildProgram", d, 0, NULL, 0);
	log = clb_build_log(d, prog);
	clb_condense_log(log ? log : "", line, sizeof(line));
	/* The log first: the core keeps only the start of long messages. */
	snprintf(error, error_size, "OpenCL C build failed: %s (%s %d)",
		 line[0] ? line : "the compiler gave no log", clb_err_name(err), (int)err);
	/* The message is cut to fit the core's buffer; the whole log goes to the log sink. */
	clb_log(d->st, ODX_LOG_WARN, "opencl: build of '%s' failed on device %d (%s):\n%s",
		v->entry ? v->entry : "?", d->odx_device, d->name, log ? log : "");
	free(log);
	d->st->api.clReleaseProgram(prog);
	return rc;
}

/* Tries the cached binary; any failure leaves *out alone and the caller builds from source. */
static bool clb_build_cached(clb_dev *d, uint64_t key, uint64_t check, cl_program *out)
{
	const clb_api *cl = &d->st->api;
	unsigned char *bin = NULL;
	const unsigned char *binp;
	size_t size = 0;
	cl_int err, status = CL_SUCCESS;
	cl_program prog;
	char why[1200], path[1100];
	int rc;

	rc = clb_cache_load(d->st, key, check, &bin, &size, why, sizeof(why));
	if (rc == ODX_ENOENT)
		return false;
	if (rc) {
		clb_log(d->st, ODX_LOG_WARN, "opencl: ignoring cached binary: %s", why);
		return false;
	}
	binp = bin;
	prog = cl->clCreateProgramWithBinary(d->context, 1, &d->id, &size, &binp, &status, &err);
	free(bin);
	clb_cache_path(d->st, key, path, sizeof(path));
	if (err != CL_SUCCESS || status != CL_SUCCESS) {
		clb_log(d->st, ODX_LOG_WARN,
			"opencl: cached binary %s refused by the driver (%s): "
			"building from source",
			path, clb_err_name(err != CL_SUCCESS ? err : status));
		if (err == CL_SUCCESS)
			cl->clReleaseProgram(prog);
		return false;
	}
	/* A binary still has to be built (linked) for the device before kernels exist. */
	err = cl->clBuildProgram(prog, 1, &d->id, CLB_BUILD_OPTIONS, NULL, NULL);
	if (err != CL_SUCCESS) {
		clb_log(d->st, ODX_LOG_WARN,
			"opencl: cached binary %s does not build (%s): "
			"building from source",
			path, clb_err_name(err));
		cl->clReleaseProgram(prog);
		return false;
	}
	clb_log(d->st, ODX_LOG_DEBUG, "opencl: device %d: program loaded from cache file %s",
		d->odx_device, path);
	*out = prog;
	return true;
}

/* Stores the device's binary of a program just built from source. Best effort. */
static void clb_store_binary(clb_dev *d, cl_program prog, uint64_t key, uint64_t check)
{
	const clb_api *cl = &d->st->api;
	unsigned char *bin;
	size_t size = 0;
	char path[1100];

	if (!d->st->cache_dir[0])
		return;
	/* One device in the program: one size, one binary. */
	if (cl->clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, NULL) !=
		    CL_SUCCESS ||
	    size == 0)
		return;
	bin = malloc(size);
	if (!bin)
		return;
	if (cl->clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof(bin), &bin, NULL) ==
		    CL_SUCCESS &&
	    clb_cache_store(d->st, key, check, bin, size) == 0) {
		clb_cache_path(d->st, key, path, sizeof(path));
		clb_log(d->st, ODX_LOG_DEBUG, "opencl: device %d: program stored in cache file %s",
			d->odx_device, path);
	}
	free(bin);
}

/* Maps an OpenCL parameter to the ODX argument kind it takes (0: no way to tell). */
static odx_arg_kind clb_arg_kind(clb_dev *d, clb_module *m, cl_uint i)
{
	const clb_api *cl = &d->st->api;
	cl_kernel_arg_address_qualifier aq;
	static const struct {
		const char *type;
		odx_arg_kind kind;
	} scalars[] = {
		{"int", ODX_ARG_I32},	{"uint", ODX_ARG_I32},	 {"unsigned int", ODX_ARG_I32},
		{"long", ODX_ARG_I64},	{"ulong", ODX_ARG_I64},	 {"unsigned long", ODX_ARG_I64},
		{"float", ODX_ARG_F32}, {"double", ODX_ARG_F64},
	};
	size_t k;

	m->arg_type[i][0] = '\0';
	if (cl->clGetKernelArgInfo(m->kernel, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof(aq), &aq,
				   NULL) != CL_SUCCESS)
		return 0;
	if (cl->clGetKernelArgInfo(m->kernel, i, CL_KERNEL_ARG_TYPE_NAME, sizeof(m->arg_type[i]),
				   m->arg_type[i], NULL) != CL_SUCCESS)
		snprintf(m->arg_type[i], sizeof(m->arg_type[i]), "?");
	if (aq == CL_KERNEL_ARG_ADDRESS_GLOBAL || aq == CL_KERNEL_ARG_ADDRESS_CONSTANT)
		return ODX_ARG_BUFFER;
	for (k = 0; k < sizeof(scalars) / sizeof(scalars[0]); k++)
		if (strcmp(m->arg_type[i], scalars[k].type) == 0)
			return scalars[k].kind;
	/* __local pointers, images, vectors, typedef'd names: launch leaves them to the driver. */
	return 0;
}

/* Creates the entry point's kernel; a missing one is reported with the kernels that exist. */
static int clb_make_kernel(clb_dev *d, clb_module *m, char *error, size_t error_size)
{
	const clb_api *cl = &d->st->api;
	char names[512] = "", *log;
	cl_int err;
	cl_uint i;

	m->kernel = cl->clCreateKernel(m->program, m->entry, &err);
	if (err != CL_SUCCESS) {
		int rc = clb_check(err, "clCreateKernel", d, 0, NULL, 0);
		char line[512];

		cl->clGetProgramInfo(m->program, CL_PROGRAM_KERNEL_NAMES, sizeof(names), names,
				     NULL);
		log = clb_build_log(d, m->program);
		clb_condense_log(log ? log : "", line, sizeof(line));
		snprintf(error, error_size,
			 "no kernel '%s' in the OpenCL C program (%s %d); it defines: %s%s%s",
			 m->entry, clb_err_name(err), (int)err, names[0] ? names : "nothing",
			 line[0] ? "; compiler log: " : "", line);
		free(log);
		return rc;
	}
	err = cl->clGetKernelInfo(m->kernel, CL_KERNEL_NUM_ARGS, sizeof(m->nargs), &m->nargs, NULL);
	if (err != CL_SUCCESS)
		return clb_check(err, "clGetKernelInfo(CL_KERNEL_NUM_ARGS)", d, 0, error,
				 error_size);
	if (m->nargs > CLB_MAX_ARGS) {
		snprintf(error, error_size, "kernel '%s' has %u parameters (at most %d)", m->entry,
			 (unsigned)m->nargs, CLB_MAX_ARGS);
		return ODX_EINVAL;
	}
	for (i = 0; i < m->nargs; i++)
		m->arg_kind[i] = clb_arg_kind(d, m, i);
	if (cl->clGetKernelWorkGroupInfo(m->kernel, d->id, CL_KERNEL_WORK_GROUP_SIZE,
					 sizeof(m->max_group), &m->max_group, NULL) != CL_SUCCESS)
		m->max_group = 0;
	return 0;
}

int clb_module_load(void *dev, const odx_kernel_variant *v, void **module, char *error,
		    size_t error_size)
{
	clb_dev *d = dev;
	clb_module *m;
	uint64_t key = 0, check = 0;
	bool cached = false;
	int rc;

	if (v->format != ODX_FORMAT_OPENCL_C || !v->code || v->code_size == 0) {
		snprintf(error, error_size,
			 "the OpenCL backend runs OpenCL C source variants only "
			 "(format %d given)",
			 (int)v->format);
		return ODX_EINVAL;
	}
	if (!v->entry || !v->entry[0] || strlen(v->entry) >= sizeof(m->entry)) {
		snprintf(error, error_size, "an OpenCL C variant needs its kernel's name as entry");
		return ODX_EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return ODX_ENOMEM;
	snprintf(m->entry, sizeof(m->entry), "%s", v->entry);
	if (d->st->cache_dir[0]) {
		key = clb_cache_key(d, v->code, v->code_size, CLB_BUILD_OPTIONS, &check);
		cached = clb_build_cached(d, key, check, &m->program);
	}
	if (!cached) {
		rc = clb_build_source(d, v, &m->program, error, error_size);
		if (rc)
			goto out_free;
		clb_store_binary(d, m->program, key, check);
	}
	rc = clb_make_kernel(d, m, error, error_size);
	if (rc)
		goto out_release;
	*module = m;
	return 0;

out_release:
	clb_module_unload(d, m);
	return rc;
out_free:
	free(m);
	return rc;
}

void clb_module_unload(void *dev, void *module)
{
	clb_dev *d = dev;
	clb_module *m = module;

	if (m->kernel)
		d->st->api.clReleaseKernel(m->kernel);
	if (m->program)
		d->st->api.clReleaseProgram(m->program);
	free(m);
}
