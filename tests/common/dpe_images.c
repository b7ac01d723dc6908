/* SPDX-License-Identifier: Apache-2.0 */
/* dpe_images.c - see dpe_images.h. DPE_SPIRV, DPE_CUDA and DPE_HIP come from meson. */
#include <string.h>

#include "dpe_images.h"

#define DECLARE(name)                                                                              \
	extern const unsigned char name[];                                                         \
	extern const size_t name##_size;

DECLARE(dpe_cl_record)
#if DPE_SPIRV
DECLARE(dpe_spv_record_1)
DECLARE(dpe_spv_record_2)
DECLARE(dpe_spv_record_3)
#endif
#if DPE_CUDA
DECLARE(dpe_cubin_record)
DECLARE(dpe_ptx_record)
#endif
#if DPE_HIP
DECLARE(dpe_hipco_record)
#endif

static void add(dpe_variants *dv, int k, odx_backend_kind backend, odx_variant_format format,
		const unsigned char *code, size_t size, const char *entry)
{
	dv->v[k - 1][dv->n[k - 1]++] = (odx_kernel_variant){
		.backend = backend,
		.format = format,
		.code = code,
		.code_size = size,
		.entry = entry,
	};
}

void dpe_device_variants(dpe_variants *dv)
{
	static const char *const entries[] = {"record_1", "record_2", "record_3"};

	memset(dv, 0, sizeof(*dv));
	for (int k = 1; k <= DPE_MAXARGS; k++) {
		const char *entry = entries[k - 1];

		add(dv, k, ODX_BACKEND_OPENCL, ODX_FORMAT_OPENCL_C, dpe_cl_record,
		    dpe_cl_record_size, entry);
#if DPE_CUDA
		add(dv, k, ODX_BACKEND_CUDA, ODX_FORMAT_CUBIN, dpe_cubin_record,
		    dpe_cubin_record_size, entry);
		add(dv, k, ODX_BACKEND_CUDA, ODX_FORMAT_PTX, dpe_ptx_record, dpe_ptx_record_size,
		    entry);
#endif
#if DPE_HIP
		add(dv, k, ODX_BACKEND_HIP, ODX_FORMAT_HIP_CO, dpe_hipco_record,
		    dpe_hipco_record_size, entry);
#endif
	}
#if DPE_SPIRV
	add(dv, 1, ODX_BACKEND_VULKAN, ODX_FORMAT_SPIRV, dpe_spv_record_1, dpe_spv_record_1_size,
	    "main");
	add(dv, 2, ODX_BACKEND_VULKAN, ODX_FORMAT_SPIRV, dpe_spv_record_2, dpe_spv_record_2_size,
	    "main");
	add(dv, 3, ODX_BACKEND_VULKAN, ODX_FORMAT_SPIRV, dpe_spv_record_3, dpe_spv_record_3_size,
	    "main");
#endif
}
