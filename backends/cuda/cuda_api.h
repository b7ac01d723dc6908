/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_api.h - the part of the CUDA driver API that ODX uses, declared from NVIDIA's published
 * documentation (CUDA Driver API reference, "Data types" and "Error handling" sections). Only the
 * types, constants and function-pointer types used here are declared; NVIDIA's headers are never
 * included. Numeric values are the documented ones and never change between CUDA releases.
 *
 * Entry points are not linked: libcuda.so.1 is opened with dlopen and every function is resolved
 * through cuGetProcAddress at an explicit API version (CUB_API_VERSION), so the driver hands out
 * the variant (e.g. cuMemAlloc_v2) whose signature matches the ones below.
 */
#ifndef ODX_BACKENDS_CUDA_API_H
#define ODX_BACKENDS_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* The API version requested from cuGetProcAddress: the CUDA 12.0 signatures below. */
#define CUB_API_VERSION 12000

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef int CUjit_option;
typedef int CUdevice_attribute;
typedef int CUdriverProcAddressQueryResult;
typedef int CUmemorytype;
typedef struct CUarray_st *CUarray;

/* CUmemorytype values */
#define CU_MEMORYTYPE_HOST 0x01
#define CU_MEMORYTYPE_DEVICE 0x02

/* A 2D copy (cuMemcpy2DAsync), members in the documented order. The X and Y origins let a copy
 * start inside a pitched allocation; ODX passes the first byte itself and leaves them 0. */
typedef struct CUDA_MEMCPY2D {
	size_t srcXInBytes;
	size_t srcY;
	CUmemorytype srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	CUarray srcArray;
	size_t srcPitch;
	size_t dstXInBytes;
	size_t dstY;
	CUmemorytype dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	CUarray dstArray;
	size_t dstPitch;
	size_t WidthInBytes;
	size_t Height;
} CUDA_MEMCPY2D;

/* CUresult values */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_INSUFFICIENT_DRIVER 35
#define CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER 36
#define CUDA_ERROR_DEVICE_UNAVAILABLE 46
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_DEVICE_NOT_LICENSED 102
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NO_BINARY_FOR_GPU 209
#define CUDA_ERROR_ECC_UNCORRECTABLE 214
#define CUDA_ERROR_INVALID_PTX 218
#define CUDA_ERROR_NVLINK_UNCORRECTABLE 220
#define CUDA_ERROR_JIT_COMPILER_NOT_FOUND 221
#define CUDA_ERROR_UNSUPPORTED_PTX_VERSION 222
#define CUDA_ERROR_JIT_COMPILATION_DISABLED 223
#define CUDA_ERROR_FILE_NOT_FOUND 301
#define CUDA_ERROR_OPERATING_SYSTEM 304
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701
#define CUDA_ERROR_LAUNCH_TIMEOUT 702
#define CUDA_ERROR_CONTEXT_IS_DESTROYED 709
#define CUDA_ERROR_ASSERT 710
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define CUDA_ERROR_HARDWARE_STACK_ERROR 714
#define CUDA_ERROR_ILLEGAL_INSTRUCTION 715
#define CUDA_ERROR_MISALIGNED_ADDRESS 716
#define CUDA_ERROR_INVALID_ADDRESS_SPACE 717
#define CUDA_ERROR_INVALID_PC 718
#define CUDA_ERROR_LAUNCH_FAILED 719
#define CUDA_ERROR_NOT_PERMITTED 800
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_SYSTEM_NOT_READY 802
#define CUDA_ERROR_SYSTEM_DRIVER_MISMATCH 803
#define CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE 804
#define CUDA_ERROR_UNKNOWN 999

/* cuGetProcAddress flags and status */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

/* Flags */
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_PORTABLE 0x01

/* CUdevice_attribute values */
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

/* CUjit_option values */
#define CU_JIT_INFO_LOG_BUFFER 3
#define CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES 4
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

/* The two lookups exported by libcuda.so.1 (the only symbols taken with dlsym). */
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
					    cuuint64_t flags,
					    CUdriverProcAddressQueryResult *symbolStatus);
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char *symbol, void **pfn, int cudaVersion,
					    cuuint64_t flags);

/* Everything else, as resolved at CUB_API_VERSION. X(name, return, parameters) */
#define CUB_FUNCTIONS(X)                                                                           \
	X(cuInit, (unsigned int flags))                                                            \
	X(cuDriverGetVersion, (int *driverVersion))                                                \
	X(cuGetErrorName, (CUresult error, const char **pStr))                                     \
	X(cuGetErrorString, (CUresult error, const char **pStr))                                   \
	X(cuDeviceGetCount, (int *count))                                                          \
	X(cuDeviceGet, (CUdevice * device, int ordinal))                                           \
	X(cuDeviceGetName, (char *name, int len, CUdevice dev))                                    \
	X(cuDeviceTotalMem, (size_t * bytes, CUdevice dev))                                        \
	X(cuDeviceGetAttribute, (int *pi, CUdevice_attribute attrib, CUdevice dev))                \
	X(cuDeviceGetPCIBusId, (char *pciBusId, int len, CUdevice dev))                            \
	X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                              \
	X(cuDevicePrimaryCtxRelease, (CUdevice dev))                                               \
	X(cuCtxSetCurrent, (CUcontext ctx))                                                        \
	X(cuMemGetInfo, (size_t * free, size_t *total))                                            \
	X(cuStreamCreate, (CUstream * phStream, unsigned int Flags))                               \
	X(cuStreamDestroy, (CUstream hStream))                                                     \
	X(cuStreamSynchronize, (CUstream hStream))                                                 \
	X(cuEventCreate, (CUevent * phEvent, unsigned int Flags))                                  \
	X(cuEventDestroy, (CUevent hEvent))                                                        \
	X(cuEventRecord, (CUevent hEvent, CUstream hStream))                                       \
	X(cuEventQuery, (CUevent hEvent))                                                          \
	X(cuEventSynchronize, (CUevent hEvent))                                                    \
	X(cuMemAlloc, (CUdeviceptr * dptr, size_t bytesize))                                       \
	X(cuMemFree, (CUdeviceptr dptr))                                                           \
	X(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))  \
	X(cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags))                        \
	X(cuMemFreeHost, (void *p))                                                                \
	X(cuMemHostRegister, (void *p, size_t bytesize, unsigned int Flags))                       \
	X(cuMemHostUnregister, (void *p))                                                          \
	X(cuMemcpyHtoDAsync,                                                                       \
	  (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))        \
	X(cuMemcpyDtoHAsync,                                                                       \
	  (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))              \
	X(cuMemcpyPeerAsync, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,  \
			      CUcontext srcContext, size_t ByteCount, CUstream hStream))            \
	X(cuModuleLoadDataEx, (CUmodule * module, const void *image, unsigned int numOptions,      \
			       CUjit_option *options, void **optionValues))                        \
	X(cuModuleUnload, (CUmodule hmod))                                                         \
	X(cuModuleGetFunction, (CUfunction * hfunc, CUmodule hmod, const char *name))              \
	X(cuLaunchKernel,                                                                          \
	  (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,      \
	   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                 \
	   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))

/* Optional: resolved when the driver has them (NULL otherwise). */
#define CUB_OPTIONAL_FUNCTIONS(X)                                                                  \
	X(cuFuncGetParamInfo,                                                                      \
	  (CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize))            \
	X(cuMemcpy2DAsync, (const CUDA_MEMCPY2D *pCopy, CUstream hStream))

#define CUB_PFN_TYPEDEF(name, params) typedef CUresult (*PFN_##name) params;
CUB_FUNCTIONS(CUB_PFN_TYPEDEF)
CUB_OPTIONAL_FUNCTIONS(CUB_PFN_TYPEDEF)
#undef CUB_PFN_TYPEDEF

/* The resolved table. */
typedef struct cub_table {
#define CUB_PFN_MEMBER(name, params) PFN_##name name;
	CUB_FUNCTIONS(CUB_PFN_MEMBER)
	CUB_OPTIONAL_FUNCTIONS(CUB_PFN_MEMBER)
#undef CUB_PFN_MEMBER
} cub_table;

/* The lowest API version cuFuncGetParamInfo exists at. */
#define CUB_PARAM_INFO_VERSION 12040

#endif /* ODX_BACKENDS_CUDA_API_H */
