/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api.c - the OpenCL library opened at run time, and the one place where cl_int codes become
 * ODX_E* codes.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "clb.h"

/* The table's types must be the vendor's: a mismatch would be a silent ABI bug at run time. */
#define CLB_CHECK_TYPE(name, ret, params)                                                          \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&name), clb_##name##_fn),           \
		       #name " has another type in CL/cl.h");
CLB_API(CLB_CHECK_TYPE)
#undef CLB_CHECK_TYPE

int clb_api_open(clb_api *api, char *reason, size_t reason_size)
{
	static const char *const sonames[] = {"libOpenCL.so.1", "libOpenCL.so"};
	const char *missing = NULL;
	size_t i;

	memset(api, 0, sizeof(*api));
	/* The soname first: the unversioned link exists only where the -dev package is. Never
	 * unloaded: drivers (PoCL's CUDA device among them) cannot initialise twice in a process,
	 * and a second context would find their devices gone. */
	for (i = 0; i < sizeof(sonames) / sizeof(sonames[0]) && !api->lib; i++)
		api->lib = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!api->lib) {
		snprintf(reason, reason_size, "libOpenCL.so.1 not found (no OpenCL ICD loader): %s",
			 dlerror());
		return ODX_EUNAVAIL;
	}
	/* The ICD loader exports every core entry point and dispatches to the platform's own. */
#define CLB_RESOLVE(name, ret, params)                                                             \
	*(void **)&api->name = dlsym(api->lib, #name);                                             \
	if (!api->name && !missing)                                                                \
		missing = #name;
	CLB_API(CLB_RESOLVE)
#undef CLB_RESOLVE
	if (missing) {
		snprintf(reason, reason_size,
			 "libOpenCL.so.1 lacks %s (an OpenCL 1.2 loader is needed)", missing);
		clb_api_close(api);
		return ODX_EUNAVAIL;
	}
	return 0;
}

void clb_api_close(clb_api *api)
{
	if (api->lib)
		dlclose(api->lib);
	api->lib = NULL;
}

/* XX(name, value): the codes of OpenCL 1.0 to 3.0 and the ICD loader's. Numbers, not macros:
 * the header only defines the newer ones for a newer target version. */
#define CLB_ERRORS(XX)                                                                             \
	XX(CL_SUCCESS, 0)                                                                          \
	XX(CL_DEVICE_NOT_FOUND, -1)                                                                \
	XX(CL_DEVICE_NOT_AVAILABLE, -2)                                                            \
	XX(CL_COMPILER_NOT_AVAILABLE, -3)                                                          \
	XX(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4)                                                   \
	XX(CL_OUT_OF_RESOURCES, -5)                                                                \
	XX(CL_OUT_OF_HOST_MEMORY, -6)                                                              \
	XX(CL_PROFILING_INFO_NOT_AVAILABLE, -7)                                                    \
	XX(CL_MEM_COPY_OVERLAP, -8)                                                                \
	XX(CL_IMAGE_FORMAT_MISMATCH, -9)                                                           \
	XX(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10)                                                     \
	XX(CL_BUILD_PROGRAM_FAILURE, -11)                                                          \
	XX(CL_MAP_FAILURE, -12)                                                                    \
	XX(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13)                                                   \
	XX(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14)                                      \
	XX(CL_COMPILE_PROGRAM_FAILURE, -15)                                                        \
	XX(CL_LINKER_NOT_AVAILABLE, -16)                                                           \
	XX(CL_LINK_PROGRAM_FAILURE, -17)                                                           \
	XX(CL_DEVICE_PARTITION_FAILED, -18)                                                        \
	XX(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19)                                                  \
	XX(CL_INVALID_VALUE, -30)                                                                  \
	XX(CL_INVALID_DEVICE_TYPE, -31)                                                            \
	XX(CL_INVALID_PLATFORM, -32)                                                               \
	XX(CL_INVALID_DEVICE, -33)                                                                 \
	XX(CL_INVALID_CONTEXT, -34)                                                                \
	XX(CL_INVALID_QUEUE_PROPERTIES, -35)                                                       \
	XX(CL_INVALID_COMMAND_QUEUE, -36)                                                          \
	XX(CL_INVALID_HOST_PTR, -37)                                                               \
	XX(CL_INVALID_MEM_OBJECT, -38)                                                             \
	XX(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39)                                                \
	XX(CL_INVALID_IMAGE_SIZE, -40)                                                             \
	XX(CL_INVALID_SAMPLER, -41)                                                                \
	XX(CL_INVALID_BINARY, -42)                                                                 \
	XX(CL_INVALID_BUILD_OPTIONS, -43)                                                          \
	XX(CL_INVALID_PROGRAM, -44)                                                                \
	XX(CL_INVALID_PROGRAM_EXECUTABLE, -45)                                                     \
	XX(CL_INVALID_KERNEL_NAME, -46)                                                            \
	XX(CL_INVALID_KERNEL_DEFINITION, -47)                                                      \
	XX(CL_INVALID_KERNEL, -48)                                                                 \
	XX(CL_INVALID_ARG_INDEX, -49)                                                              \
	XX(CL_INVALID_ARG_VALUE, -50)                                                              \
	XX(CL_INVALID_ARG_SIZE, -51)                                                               \
	XX(CL_INVALID_KERNEL_ARGS, -52)                                                            \
	XX(CL_INVALID_WORK_DIMENSION, -53)                                                         \
	XX(CL_INVALID_WORK_GROUP_SIZE, -54)                                                        \
	XX(CL_INVALID_WORK_ITEM_SIZE, -55)                                                         \
	XX(CL_INVALID_GLOBAL_OFFSET, -56)                                                          \
	XX(CL_INVALID_EVENT_WAIT_LIST, -57)                                                        \
	XX(CL_INVALID_EVENT, -58)                                                                  \
	XX(CL_INVALID_OPERATION, -59)                                                              \
	XX(CL_INVALID_GL_OBJECT, -60)                                                              \
	XX(CL_INVALID_BUFFER_SIZE, -61)                                                            \
	XX(CL_INVALID_MIP_LEVEL, -62)                                                              \
	XX(CL_INVALID_GLOBAL_WORK_SIZE, -63)                                                       \
	XX(CL_INVALID_PROPERTY, -64)                                                               \
	XX(CL_INVALID_IMAGE_DESCRIPTOR, -65)                                                       \
	XX(CL_INVALID_COMPILER_OPTIONS, -66)                                                       \
	XX(CL_INVALID_LINKER_OPTIONS, -67)                                                         \
	XX(CL_INVALID_DEVICE_PARTITION_COUNT, -68)                                                 \
	XX(CL_INVALID_PIPE_SIZE, -69)                                                              \
	XX(CL_INVALID_DEVICE_QUEUE, -70)                                                           \
	XX(CL_INVALID_SPEC_ID, -71)                                                                \
	XX(CL_MAX_SIZE_RESTRICTION_EXCEEDED, -72)                                                  \
	XX(CL_PLATFORM_NOT_FOUND_KHR, -1001)

const char *clb_err_name(cl_int err)
{
	switch (err) {
#define CLB_ERR_CASE(name, value)                                                                  \
	case value:                                                                                \
		return #name;
		CLB_ERRORS(CLB_ERR_CASE)
#undef CLB_ERR_CASE
	default:
		return "CL_?";
	}
}

static int clb_translate(cl_int err)
{
	switch (err) {
	case CL_SUCCESS:
		return 0;
	case CL_MEM_OBJECT_ALLOCATION_FAILURE:
	case CL_OUT_OF_RESOURCES:
	case CL_OUT_OF_HOST_MEMORY:
		return ODX_ENOMEM;
	case CL_DEVICE_NOT_FOUND:
	case CL_DEVICE_NOT_AVAILABLE:
	case CL_COMPILER_NOT_AVAILABLE:
	case CL_LINKER_NOT_AVAILABLE:
	case -1001: /* CL_PLATFORM_NOT_FOUND_KHR */
		return ODX_EUNAVAIL;
	case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST:
		return ODX_ECANCELED;
	/* A program that does not build or lacks the entry point is the driver's verdict on the
	 * user's code, not a bad call: reported as a backend error with the compiler log. */
	case CL_BUILD_PROGRAM_FAILURE:
	case CL_COMPILE_PROGRAM_FAILURE:
	case CL_LINK_PROGRAM_FAILURE:
	case CL_INVALID_BINARY:
	case CL_INVALID_PROGRAM_EXECUTABLE:
	case CL_INVALID_KERNEL_NAME:
	case CL_INVALID_KERNEL_DEFINITION:
		return ODX_EBACKEND;
	default:
		/* The CL_INVALID_* block: arguments the backend passed were refused. */
		if (err <= CL_INVALID_VALUE && err >= -72)
			return ODX_EINVAL;
		return ODX_EBACKEND;
	}
}

int clb_check(cl_int err, const char *call, const clb_dev *dev, size_t bytes, char *msg,
	      size_t msg_size)
{
	int rc = clb_translate(err);
	char where[192] = "";

	if (rc == 0 || !msg || msg_size == 0)
		return rc;
	if (dev)
		snprintf(where, sizeof(where), " on device %d (%s)", dev->odx_device, dev->name);
	if (rc == ODX_ENOMEM && bytes > 0)
		snprintf(msg, msg_size, "%s%s: %s (%d) for %zu bytes", call, where,
			 clb_err_name(err), (int)err, bytes);
	else
		snprintf(msg, msg_size, "%s%s: %s (%d)", call, where, clb_err_name(err), (int)err);
	return rc;
}

void clb_log(const clb_state *st, odx_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	odx__backend_vlog(st->host, level, fmt, ap);
	va_end(ap);
}
