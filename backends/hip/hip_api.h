/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hip_api.h - the part of the HIP runtime API that ODX uses, declared from AMD's published HIP
 * API reference. Only the types, constants and function-pointer types used here; AMD's headers
 * are never included. libamdhip64.so is opened with dlopen and each function taken with dlsym.
 * HIP keeps CUDA's numbering for the error codes below.
 */
#ifndef ODX_BACKENDS_HIP_API_H
#define ODX_BACKENDS_HIP_API_H

#include <stddef.h>
#include <stdint.h>

typedef int hipError_t;
typedef int hipDevice_t;
typedef void *hipDeviceptr_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;

/* hipError_t values */
#define hipSuccess 0
#define hipErrorInvalidValue 1
#define hipErrorOutOfMemory 2
#define hipErrorNotInitialized 3
#define hipErrorDeinitialized 4
#define hipErrorInsufficientDriver 35
#define hipErrorNoDevice 100
#define hipErrorInvalidDevice 101
#define hipErrorInvalidImage 200
#define hipErrorInvalidContext 201
#define hipErrorNoBinaryForGpu 209
#define hipErrorInvalidKernelFile 218
#define hipErrorFileNotFound 301
#define hipErrorSharedObjectInitFailed 303
#define hipErrorInvalidHandle 400
#define hipErrorNotFound 500
#define hipErrorNotReady 600
#define hipErrorIllegalAddress 700
#define hipErrorLaunchOutOfResources 701
#define hipErrorLaunchTimeOut 702
#define hipErrorAssert 710
#define hipErrorHostMemoryAlreadyRegistered 712
#define hipErrorHostMemoryNotRegistered 713
#define hipErrorLaunchFailure 719
#define hipErrorNotSupported 801
#define hipErrorUnknown 999

/* Flags */
#define hipStreamNonBlocking 0x1
#define hipEventBlockingSync 0x1
#define hipEventDisableTiming 0x2
#define hipHostMallocPortable 0x1
#define hipHostRegisterPortable 0x1

/* hipMemcpyKind values */
typedef int hipMemcpyKind;
#define hipMemcpyHostToDevice 1
#define hipMemcpyDeviceToHost 2
#define hipMemcpyDeviceToDevice 3

/* X(name, parameters): every function is required and returns hipError_t. */
#define HIPB_FUNCTIONS(X)                                                                          \
	X(hipInit, (unsigned int flags))                                                           \
	X(hipDriverGetVersion, (int *driverVersion))                                               \
	X(hipGetDeviceCount, (int *count))                                                         \
	X(hipDeviceGet, (hipDevice_t * device, int ordinal))                                       \
	X(hipDeviceGetName, (char *name, int len, hipDevice_t device))                             \
	X(hipDeviceTotalMem, (size_t * bytes, hipDevice_t device))                                 \
	X(hipDeviceGetPCIBusId, (char *pciBusId, int len, int device))                             \
	X(hipSetDevice, (int deviceId))                                                            \
	X(hipMemGetInfo, (size_t * free, size_t *total))                                           \
	X(hipStreamCreateWithFlags, (hipStream_t * stream, unsigned int flags))                    \
	X(hipStreamDestroy, (hipStream_t stream))                                                  \
	X(hipStreamSynchronize, (hipStream_t stream))                                              \
	X(hipEventCreateWithFlags, (hipEvent_t * event, unsigned flags))                           \
	X(hipEventDestroy, (hipEvent_t event))                                                     \
	X(hipEventRecord, (hipEvent_t event, hipStream_t stream))                                  \
	X(hipEventQuery, (hipEvent_t event))                                                       \
	X(hipEventSynchronize, (hipEvent_t event))                                                 \
	X(hipMalloc, (void **ptr, size_t size))                                                    \
	X(hipFree, (void *ptr))                                                                    \
	X(hipMemsetAsync, (void *dst, int value, size_t sizeBytes, hipStream_t stream))            \
	X(hipHostMalloc, (void **ptr, size_t size, unsigned int flags))                            \
	X(hipHostFree, (void *ptr))                                                                \
	X(hipHostRegister, (void *hostPtr, size_t sizeBytes, unsigned int flags))                  \
	X(hipHostUnregister, (void *hostPtr))                                                      \
	X(hipMemcpyHtoDAsync,                                                                      \
	  (hipDeviceptr_t dst, void *src, size_t sizeBytes, hipStream_t stream))                   \
	X(hipMemcpyDtoHAsync,                                                                      \
	  (void *dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream))                   \
	X(hipMemcpyPeerAsync, (void *dst, int dstDeviceId, const void *src, int srcDevice,         \
			       size_t sizeBytes, hipStream_t stream))                              \
	X(hipModuleLoadData, (hipModule_t * module, const void *image))                            \
	X(hipModuleUnload, (hipModule_t module))                                                   \
	X(hipModuleGetFunction, (hipFunction_t * function, hipModule_t module, const char *kname)) \
	X(hipModuleLaunchKernel,                                                                   \
	  (hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,   \
	   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                 \
	   unsigned int sharedMemBytes, hipStream_t stream, void **kernelParams, void **extra))


/* Optional: taken when the runtime has it (NULL otherwise). */
#define HIPB_OPTIONAL_FUNCTIONS(X)                                                                 \
	X(hipMemcpy2DAsync, (void *dst, size_t dpitch, const void *src, size_t spitch,             \
			     size_t width, size_t height, hipMemcpyKind kind, hipStream_t stream))

/* The two that return text. */
#define HIPB_STRING_FUNCTIONS(X)                                                                   \
	X(hipGetErrorName, (hipError_t error))                                                     \
	X(hipGetErrorString, (hipError_t error))

#define HIPB_PFN_TYPEDEF(name, params) typedef hipError_t (*PFN_##name) params;
HIPB_FUNCTIONS(HIPB_PFN_TYPEDEF)
HIPB_OPTIONAL_FUNCTIONS(HIPB_PFN_TYPEDEF)
#undef HIPB_PFN_TYPEDEF
#define HIPB_PFN_STRING_TYPEDEF(name, params) typedef const char *(*PFN_##name) params;
HIPB_STRING_FUNCTIONS(HIPB_PFN_STRING_TYPEDEF)
#undef HIPB_PFN_STRING_TYPEDEF

typedef struct hipb_table {
#define HIPB_PFN_MEMBER(name, params) PFN_##name name;
	HIPB_FUNCTIONS(HIPB_PFN_MEMBER)
	HIPB_OPTIONAL_FUNCTIONS(HIPB_PFN_MEMBER)
	HIPB_STRING_FUNCTIONS(HIPB_PFN_MEMBER)
#undef HIPB_PFN_MEMBER
} hipb_table;

#endif /* ODX_BACKENDS_HIP_API_H */
