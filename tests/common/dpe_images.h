/* SPDX-License-Identifier: Apache-2.0 */
/* dpe_images.h - the property engine's task kernel for devices, as built by tests/common. */
#ifndef ODX_TESTS_DPE_IMAGES_H
#define ODX_TESTS_DPE_IMAGES_H

#include "deps_property_engine.h"

/* Fills `dv` with every device variant of record_<k> this build made: OpenCL C always, SPIR-V
 * when glslc was found, CUDA fatbin + PTX when nvcc worked, HIP when clang could. */
void dpe_device_variants(dpe_variants *dv);

#endif /* ODX_TESTS_DPE_IMAGES_H */
