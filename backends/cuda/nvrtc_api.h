/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvrtc_api.h - the part of NVRTC, NVIDIA's run-time compiler for CUDA C++, that the CUDA backend
 * uses, declared from NVIDIA's published NVRTC documentation ("NVRTC API" reference: result codes,
 * program functions, supported architectures). NVIDIA's nvrtc.h is never included. NVRTC's
 * functions are plain C symbols with stable names, taken with dlsym from libnvrtc once a CUDA
 * source variant (ODX_FORMAT_CUDA_C) first needs them.
 *
 * Below the declarations: the backend's own compiler interface, implemented in nvrtc.c.
 */
#ifndef ODX_BACKENDS_CUDA_NVRTC_API_H
#define ODX_BACKENDS_CUDA_NVRTC_API_H

#include <stdbool.h>
#include <stddef.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

/* nvrtcResult values (the ones ODX names; nvrtcGetErrorString names them all) */
#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_OUT_OF_MEMORY 1
#define NVRTC_ERROR_INVALID_OPTION 5
#define NVRTC_ERROR_COMPILATION 6

/* Required. X(name, parameters), each returning nvrtcResult. */
#define NVRTC_FUNCTIONS(X)                                                                         \
	X(nvrtcVersion, (int *major, int *minor))                                                  \
	X(nvrtcCreateProgram,                                                                      \
	  (nvrtcProgram * prog, const char *src, const char *name, int numHeaders,                 \
	   const char *const *headers, const char *const *includeNames))                           \
	X(nvrtcDestroyProgram, (nvrtcProgram * prog))                                              \
	X(nvrtcCompileProgram, (nvrtcProgram prog, int numOptions, const char *const *options))    \
	X(nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t * logSizeRet))                        \
	X(nvrtcGetProgramLog, (nvrtcProgram prog, char *log))                                      \
	X(nvrtcGetPTXSize, (nvrtcProgram prog, size_t * ptxSizeRet))                               \
	X(nvrtcGetPTX, (nvrtcProgram prog, char *ptx))

/* Optional: the architecture list (CUDA 11.2+) and SASS output (CUDA 11.1+); NULL if absent. */
#define NVRTC_OPTIONAL_FUNCTIONS(X)                                                                \
	X(nvrtcGetNumSupportedArchs, (int *numArchs))                                              \
	X(nvrtcGetSupportedArchs, (int *supportedArchs))                                           \
	X(nvrtcGetCUBINSize, (nvrtcProgram prog, size_t * cubinSizeRet))                           \
	X(nvrtcGetCUBIN, (nvrtcProgram prog, char *cubin))

#define NVRTC_PFN_TYPEDEF(name, params) typedef nvrtcResult(*PFN_##name) params;
NVRTC_FUNCTIONS(NVRTC_PFN_TYPEDEF)
NVRTC_OPTIONAL_FUNCTIONS(NVRTC_PFN_TYPEDEF)
#undef NVRTC_PFN_TYPEDEF
typedef const char *(*PFN_nvrtcGetErrorString)(nvrtcResult result);

/* ---- the backend's compiler (nvrtc.c) ----------------------------------------------------- */

typedef struct cub_nvrtc cub_nvrtc;

/*
 * Opens libnvrtc: `library` alone when it is not empty (config key cuda.nvrtc_library), else
 * libnvrtc.so.13, .so.12, .so.11.2 and libnvrtc.so by soname, then the same names under
 * $CUDA_HOME/lib64, $CUDA_PATH/lib64 and /usr/local/cuda/lib64. Returns 0 with *out set, or
 * ODX_EUNAVAIL with what was tried and the loader's message in `reason` (*out not touched).
 */
int cub_nvrtc_open(const char *library, cub_nvrtc **out, char *reason, size_t n);
void cub_nvrtc_close(cub_nvrtc *rt);
/* "NVRTC 13.0 (libnvrtc.so.13)": static storage of rt. */
const char *cub_nvrtc_describe(const cub_nvrtc *rt);
/* NVRTC's version as the driver spells its own: 13000 for 13.0. */
int cub_nvrtc_version(const cub_nvrtc *rt);

/* What NVRTC builds for a device of compute capability `arch` (major * 10 + minor). */
typedef enum cub_nvrtc_plan_kind {
	CUB_NVRTC_NONE,	 /* the device is older than every architecture NVRTC targets */
	CUB_NVRTC_CUBIN, /* SASS for exactly this architecture */
	CUB_NVRTC_PTX,	 /* PTX for an older virtual architecture, JIT-compiled by the driver */
} cub_nvrtc_plan_kind;

/* The plan for `arch` (0: unknown, PTX at NVRTC's default), and in *target the architecture
 * compiled for; on CUB_NVRTC_NONE, *target is the oldest one NVRTC supports. */
cub_nvrtc_plan_kind cub_nvrtc_plan(const cub_nvrtc *rt, int arch, int *target);

/* A compiled image. `code` is malloc'd (the caller frees it); PTX ends in a NUL. */
typedef struct cub_nvrtc_image {
	void *code;
	size_t size;
	bool cubin; /* SASS (a cubin), else PTX text */
	int target; /* the sm_ or compute_ number compiled for; 0: NVRTC's default */
} cub_nvrtc_image;

/*
 * Compiles `len` bytes of CUDA C++ `src` (program name "<entry>.cu") for a device of `arch`,
 * following cub_nvrtc_plan. Returns 0 with *out filled, or a negative ODX code with the reason
 * in `msg`: ODX_EBACKEND with the compiler's error lines when the source does not compile,
 * ODX_ENOVARIANT when NVRTC cannot target the device. *full_log receives NVRTC's whole log when
 * it wrote one (malloc'd, the caller frees it; NULL otherwise).
 */
int cub_nvrtc_compile(cub_nvrtc *rt, const char *src, size_t len, const char *entry, int arch,
		      cub_nvrtc_image *out, char *msg, size_t n, char **full_log);

#endif /* ODX_BACKENDS_CUDA_NVRTC_API_H */
