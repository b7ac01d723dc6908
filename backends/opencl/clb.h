/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clb.h - internals of the OpenCL backend, shared by its files (never installed).
 *
 * The OpenCL library is opened at run time (dlopen "libOpenCL.so.1", the ICD loader); every
 * entry point the backend uses is listed once in CLB_API below, which gives its type and its slot
 * in the clb_api table filled with dlsym. Nothing calls the header's prototypes directly; they
 * serve only to check at compile time that the table's types match the vendor's.
 */
#ifndef ODX_BACKENDS_OPENCL_CLB_H
#define ODX_BACKENDS_OPENCL_CLB_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "lanes.h"
#include "log.h"
#include "odx/backend.h"

/* XX(name, return type, parenthesised parameter list): every OpenCL call the backend makes. */
#define CLB_API(XX)                                                                                \
	XX(clGetPlatformIDs, cl_int, (cl_uint, cl_platform_id *, cl_uint *))                       \
	XX(clGetPlatformInfo, cl_int,                                                              \
	   (cl_platform_id, cl_platform_info, size_t, void *, size_t *))                           \
	XX(clGetDeviceIDs, cl_int,                                                                 \
	   (cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *))                   \
	XX(clGetDeviceInfo, cl_int, (cl_device_id, cl_device_info, size_t, void *, size_t *))      \
	XX(clCreateContext, cl_context,                                                            \
	   (const cl_context_properties *, cl_uint, const cl_device_id *,                          \
	    void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))    \
	XX(clReleaseContext, cl_int, (cl_context))                                                 \
	XX(clCreateCommandQueue, cl_command_queue,                                                 \
	   (cl_context, cl_device_id, cl_command_queue_properties, cl_int *))                      \
	XX(clReleaseCommandQueue, cl_int, (cl_command_queue))                                      \
	XX(clFlush, cl_int, (cl_command_queue))                                                    \
	XX(clFinish, cl_int, (cl_command_queue))                                                   \
	XX(clCreateBuffer, cl_mem, (cl_context, cl_mem_flags, size_t, void *, cl_int *))           \
	XX(clReleaseMemObject, cl_int, (cl_mem))                                                   \
	XX(clCreateSubBuffer, cl_mem,                                                              \
	   (cl_mem, cl_mem_flags, cl_buffer_create_type, const void *, cl_int *))                  \
	XX(clEnqueueWriteBuffer, cl_int,                                                           \
	   (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint,              \
	    const cl_event *, cl_event *))                                                         \
	XX(clEnqueueReadBuffer, cl_int,                                                            \
	   (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,  \
	    cl_event *))                                                                           \
	XX(clEnqueueCopyBuffer, cl_int,                                                            \
	   (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event *,   \
	    cl_event *))                                                                           \
	XX(clEnqueueReadBufferRect, cl_int,                                                        \
	   (cl_command_queue, cl_mem, cl_bool, const size_t *, const size_t *, const size_t *,     \
	    size_t, size_t, size_t, size_t, void *, cl_uint, const cl_event *, cl_event *))        \
	XX(clEnqueueWriteBufferRect, cl_int,                                                       \
	   (cl_command_queue, cl_mem, cl_bool, const size_t *, const size_t *, const size_t *,     \
	    size_t, size_t, size_t, size_t, const void *, cl_uint, const cl_event *, cl_event *))  \
	XX(clEnqueueCopyBufferRect, cl_int,                                                        \
	   (cl_command_queue, cl_mem, cl_mem, const size_t *, const size_t *, const size_t *,      \
	    size_t, size_t, size_t, size_t, cl_uint, const cl_event *, cl_event *))                \
	XX(clEnqueueFillBuffer, cl_int,                                                            \
	   (cl_command_queue, cl_mem, const void *, size_t, size_t, size_t, cl_uint,               \
	    const cl_event *, cl_event *))                                                         \
	XX(clCreateProgramWithSource, cl_program,                                                  \
	   (cl_context, cl_uint, const char **, const size_t *, cl_int *))                         \
	XX(clCreateProgramWithBinary, cl_program,                                                  \
	   (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **,     \
	    cl_int *, cl_int *))                                                                   \
	XX(clBuildProgram, cl_int,                                                                 \
	   (cl_program, cl_uint, const cl_device_id *, const char *,                               \
	    void(CL_CALLBACK *)(cl_program, void *), void *))                                      \
	XX(clGetProgramInfo, cl_int, (cl_program, cl_program_info, size_t, void *, size_t *))      \
	XX(clGetProgramBuildInfo, cl_int,                                                          \
	   (cl_program, cl_device_id, cl_program_build_info, size_t, void *, size_t *))            \
	XX(clReleaseProgram, cl_int, (cl_program))                                                 \
	XX(clCreateKernel, cl_kernel, (cl_program, const char *, cl_int *))                        \
	XX(clReleaseKernel, cl_int, (cl_kernel))                                                   \
	XX(clGetKernelInfo, cl_int, (cl_kernel, cl_kernel_info, size_t, void *, size_t *))         \
	XX(clGetKernelArgInfo, cl_int,                                                             \
	   (cl_kernel, cl_uint, cl_kernel_arg_info, size_t, void *, size_t *))                     \
	XX(clGetKernelWorkGroupInfo, cl_int,                                                       \
	   (cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void *, size_t *))         \
	XX(clSetKernelArg, cl_int, (cl_kernel, cl_uint, size_t, const void *))                     \
	XX(clEnqueueNDRangeKernel, cl_int,                                                         \
	   (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,  \
	    cl_uint, const cl_event *, cl_event *))                                                \
	XX(clSetEventCallback, cl_int,                                                             \
	   (cl_event, cl_int, void(CL_CALLBACK *)(cl_event, cl_int, void *), void *))              \
	XX(clWaitForEvents, cl_int, (cl_uint, const cl_event *))                                   \
	XX(clReleaseEvent, cl_int, (cl_event))

#define CLB_TYPEDEF(name, ret, params) typedef ret(CL_API_CALL *clb_##name##_fn) params;
CLB_API(CLB_TYPEDEF)
#undef CLB_TYPEDEF

/* The entry points of one opened libOpenCL. */
typedef struct clb_api {
	void *lib; /* dlopen handle */
#define CLB_SLOT(name, ret, params) clb_##name##_fn name;
	CLB_API(CLB_SLOT)
#undef CLB_SLOT
} clb_api;

#define CLB_MAX_PLATFORMS 16
#define CLB_MAX_DEVICES 64
#define CLB_MAX_ARGS 64
/* Launches copy_sync_after claims at most (the others in flight are reported as usual). */
#define CLB_AFTER_MAX 32

/* One OpenCL context per platform, holding every selected device of it, so that copies between
 * those devices are a plain clEnqueueCopyBuffer. */
typedef struct clb_platform {
	cl_platform_id id;
	cl_context context;
	char name[128];
	char version[128];
} clb_platform;

typedef struct clb_state {
	const odx_backend_host *host;
	clb_api api;
	clb_platform platforms[CLB_MAX_PLATFORMS];
	int nplatforms;
	struct {
		cl_device_id id;
		int platform; /* index in platforms[] */
	} devices[CLB_MAX_DEVICES];
	int ndevices;
	char cache_dir[1024]; /* "" when caching is off */
} clb_state;

/* A queued command whose completion reaches the core through `done`. */
typedef struct clb_op {
	odx__lane_link link; /* in the completion thread's queue once its event fired */
	struct clb_dev *dev; /* whose completion thread delivers it */
	cl_event event;
	cl_int status; /* the event's final execution status */
	odx_backend_done_fn done;
	void *arg;
	char what[96]; /* "kernel 'axpy'", "copy host to device": for messages */
	/* A copy between devices of different contexts goes through host memory in two hops. */
	void *bounce;
	struct clb_dev *hop_dev;
	struct clb_buf *hop_dst;
	size_t hop_off, hop_n;
	int hop_stage; /* 0: reading into bounce, 1: writing it out */
	/* In flight (queued, its event not complete yet): the device's list, oldest first. */
	struct clb_op *fl_prev, *fl_next;
	bool fired;   /* its event callback ran */
	bool claimed; /* an application thread waits for it in progress(): it delivers it */
	bool dropped; /* its callback could not be set: nobody delivers it */
	bool launch;  /* a launch, on the compute queue (copy_sync_after waits behind these) */
} clb_op;

/* A device memory handle (what mem_alloc returns): the buffer and how many of its regions the
 * device's sub-buffer table holds (under the device's sub_lock). */
typedef struct clb_buf {
	cl_mem mem;
	size_t size;
	unsigned nsubs;
} clb_buf;

/* A slot of the sub-buffer table: the region [origin, origin + size) of `parent`. */
typedef struct clb_sub {
	clb_buf *parent; /* NULL: empty */
	size_t origin, size;
	cl_mem mem;
} clb_sub;

typedef struct clb_dev {
	clb_state *st;
	cl_device_id id;
	cl_context context;
	int platform;
	int odx_device;
	char name[128];
	/* Device, driver and platform versions, NUL-separated: what a compiled binary depends on. */
	char ident[640];
	size_t ident_len;
	cl_command_queue compute; /* in-order: kernels */
	cl_command_queue copy;	  /* in-order: transfers */
	uint64_t global_mem;
	uint64_t max_alloc;
	_Atomic uint64_t used;
	size_t mem_align; /* CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: sub-buffer origins */
	bool rect_copy_whole; /* 2D copies between devices name whole buffers (clb_copy_2d) */

	/* Sub-buffers of suballocated regions (subbuf.c), allocated on first use. */
	pthread_mutex_t sub_lock;
	clb_sub *subs;

	/* Completion thread: event callbacks hand finished commands to it, so that `done` never
	 * runs inside a driver thread or inside the call that queued the work. Its lock guards
	 * the fields below too. */
	odx__lane lane;
	pthread_cond_t idle_cond; /* inflight reached 0 */
	pthread_cond_t claim_cond; /* a claimed command's event fired (progress) */
	clb_op *fl_head, *fl_tail; /* commands in flight, oldest first */
	unsigned long inflight;
} clb_dev;

/* Argument kinds a kernel parameter accepts, from clGetKernelArgInfo (0: unknown). */
typedef struct clb_module {
	cl_program program;
	cl_kernel kernel;
	char entry[128];
	cl_uint nargs;
	odx_arg_kind arg_kind[CLB_MAX_ARGS]; /* 0 when the driver gave no argument info */
	char arg_type[CLB_MAX_ARGS][32];     /* the OpenCL type name, for messages */
	size_t max_group;		     /* CL_KERNEL_WORK_GROUP_SIZE on this device */
} clb_module;

/* ---- api.c ---- */
int clb_api_open(clb_api *api, char *reason, size_t reason_size);
void clb_api_close(clb_api *api);
const char *clb_err_name(cl_int err);
/* Translates `err` from `call` into an ODX code and, when msg is not NULL, writes "call on device
 * N (name): CL_NAME (number)" there; out-of-memory codes also give `bytes` when non-zero. Returns
 * 0 for CL_SUCCESS. */
int clb_check(cl_int err, const char *call, const clb_dev *dev, size_t bytes, char *msg,
	      size_t msg_size);
void clb_log(const clb_state *st, odx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- cache.c ---- */
/* Resolves opencl.cache_dir into st->cache_dir and creates it (0700); "" turns caching off. */
void clb_cache_init(clb_state *st);
/* The cache key of one build: source, device, driver, platform and build options. */
uint64_t clb_cache_key(const clb_dev *dev, const char *src, size_t len, const char *options,
		       uint64_t *check);
/* Reads the binary stored under `key` (malloc'ed into *bin); ODX_ENOENT when absent. */
int clb_cache_load(const clb_state *st, uint64_t key, uint64_t check, unsigned char **bin,
		   size_t *size, char *why, size_t why_size);
/* Stores a binary under `key`, atomically (temporary file, then rename). */
int clb_cache_store(const clb_state *st, uint64_t key, uint64_t check, const unsigned char *bin,
		    size_t size);
void clb_cache_path(const clb_state *st, uint64_t key, char *path, size_t path_size);

/* ---- subbuf.c ---- */
/* A region to name in a command: `mem` (the buffer or a sub-buffer of it), the offset `off`
 * inside it, and a sub-buffer evicted from the table to release once the command is queued. */
typedef struct clb_region_out {
	cl_mem mem;
	size_t off;
	cl_mem evicted;
} clb_region_out;
/* The n bytes at offset `off` of `b`: the buffer itself when they are all of it, else a cached
 * sub-buffer starting at `off` rounded down to mem_align. ODX_ERANGE outside the buffer; a
 * driver failure is written into msg. Call clb_region_done after queuing (or failing). */
int clb_region(clb_dev *d, clb_buf *b, size_t off, size_t n, clb_region_out *out, char *msg,
	       size_t msg_size);
void clb_region_done(clb_dev *d, clb_region_out *r);
/* Releases the cached sub-buffers of `b` (before it is freed). */
void clb_region_forget(clb_dev *d, clb_buf *b);
/* Releases every cached sub-buffer of the device (at device close). */
void clb_region_fini(clb_dev *d);

/* ---- program.c ---- */
int clb_module_load(void *dev, const odx_kernel_variant *variant, void **module, char *error,
		    size_t error_size);
void clb_module_unload(void *dev, void *module);

#endif /* ODX_BACKENDS_OPENCL_CLB_H */
