/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pipeline.c - SPIR-V shader modules and the compute pipelines cached per module.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkb.h"

int vkb_module_load(void *dev, const odx_kernel_variant *v, void **out, char *err,
		    size_t err_size)
{
	vkb_dev *d = dev;
	const char *entry = v->entry && v->entry[0] ? v->entry : "main";
	VkShaderModuleCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = v->code_size,
		.pCode = v->code,
	};
	vkb_module *m;
	char msg[VKB_MSG_MAX];
	int rc;

	if (v->format != ODX_FORMAT_SPIRV || !v->code) {
		snprintf(err, err_size, "the Vulkan backend runs SPIR-V variants only (format %d)",
			 (int)v->format);
		return ODX_EINVAL;
	}
	if (strlen(entry) >= sizeof(m->entry)) {
		snprintf(err, err_size, "entry point name too long");
		return ODX_EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return ODX_ENOMEM;
	snprintf(m->entry, sizeof(m->entry), "%s", entry);
	/* Checked here, before the driver sees it: a broken blob must not crash a driver. */
	rc = vkb_spirv_inspect(v->code, v->code_size, entry, &m->iface, err, err_size);
	if (rc)
		goto out_free;
	rc = vkb_check(d->fn.vkCreateShaderModule(d->device, &ci, NULL, &m->shader),
		       "vkCreateShaderModule", msg, sizeof(msg));
	if (rc) {
		snprintf(err, err_size, "%s", msg);
		rc = rc == ODX_ENOMEM ? rc : ODX_EBACKEND;
		goto out_free;
	}
	/* The validation layer checks the SPIR-V in this call: its verdict fails the load. */
	if (vkb_take_message(d, err, err_size)) {
		d->fn.vkDestroyShaderModule(d->device, m->shader, NULL);
		rc = ODX_EBACKEND;
		goto out_free;
	}
	pthread_mutex_init(&m->lock, NULL);
	*out = m;
	return 0;

out_free:
	free(m);
	return rc == ODX_EINVAL ? ODX_EBACKEND : rc;
}

void vkb_module_unload(void *dev, void *module)
{
	vkb_dev *d = dev;
	vkb_module *m = module;
	vkb_pipeline *p;

	while ((p = m->pipelines) != NULL) {
		m->pipelines = p->next;
		d->fn.vkDestroyPipeline(d->device, p->pipeline, NULL);
		d->fn.vkDestroyPipelineLayout(d->device, p->layout, NULL);
		if (p->set_layout)
			d->fn.vkDestroyDescriptorSetLayout(d->device, p->set_layout, NULL);
		free(p);
	}
	d->fn.vkDestroyShaderModule(d->device, m->shader, NULL);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static int vkb_pipeline_create(vkb_dev *d, vkb_module *m, const uint32_t block[3], int nbuffers,
			       uint32_t push_size, vkb_pipeline **out, char *msg, size_t msg_size)
{
	VkDescriptorSetLayoutBinding bindings[VKB_SPIRV_MAX_BINDINGS];
	VkDescriptorSetLayoutCreateInfo sci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
		.bindingCount = (uint32_t)nbuffers,
		.pBindings = bindings,
	};
	VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = push_size};
	VkPipelineLayoutCreateInfo lci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.pushConstantRangeCount = push_size ? 1 : 0,
		.pPushConstantRanges = &range,
	};
	/* The work-group size is specialisation constants 0, 1, 2 (docs/kernel-abi.md). */
	VkSpecializationMapEntry spec[3] = {
		{0, 0, 4},
		{1, 4, 4},
		{2, 8, 4},
	};
	VkSpecializationInfo si = {3, spec, sizeof(uint32_t) * 3, block};
	VkComputePipelineCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
			  .module = m->shader,
			  .pName = m->entry,
			  .pSpecializationInfo = &si},
	};
	vkb_pipeline *p = calloc(1, sizeof(*p));
	int rc, i;

	if (!p)
		return ODX_ENOMEM;
	memcpy(p->block, block, sizeof(p->block));
	p->nbuffers = nbuffers;
	p->push_size = push_size;
	for (i = 0; i < nbuffers; i++)
		bindings[i] = (VkDescriptorSetLayoutBinding){
			.binding = (uint32_t)i,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.descriptorCount = 1,
			.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		};
	if (nbuffers > 0) {
		rc = vkb_check(d->fn.vkCreateDescriptorSetLayout(d->device, &sci, NULL,
								  &p->set_layout),
			       "vkCreateDescriptorSetLayout", msg, msg_size);
		if (rc)
			goto out_free;
		lci.setLayoutCount = 1;
		lci.pSetLayouts = &p->set_layout;
	}
	rc = vkb_check(d->fn.vkCreatePipelineLayout(d->device, &lci, NULL, &p->layout),
		       "vkCreatePipelineLayout", msg, msg_size);
	if (rc)
		goto out_set_layout;
	pci.layout = p->layout;
	rc = vkb_check(d->fn.vkCreateComputePipelines(d->device, VK_NULL_HANDLE, 1, &pci, NULL,
						      &p->pipeline),
		       "vkCreateComputePipelines", msg, msg_size);
	if (rc)
		goto out_layout;
	*out = p;
	return 0;

out_layout:
	d->fn.vkDestroyPipelineLayout(d->device, p->layout, NULL);
out_set_layout:
	if (p->set_layout)
		d->fn.vkDestroyDescriptorSetLayout(d->device, p->set_layout, NULL);
out_free:
	free(p);
	return rc;
}

int vkb_pipeline_get(vkb_dev *d, vkb_module *m, const uint32_t block[3], int nbuffers,
		     uint32_t push_size, vkb_pipeline **out, char *msg, size_t msg_size)
{
	vkb_pipeline *p;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	for (p = m->pipelines; p; p = p->next)
		if (memcmp(p->block, block, sizeof(p->block)) == 0 && p->nbuffers == nbuffers &&
		    p->push_size == push_size)
			break;
	if (!p) {
		rc = vkb_pipeline_create(d, m, block, nbuffers, push_size, &p, msg, msg_size);
		if (rc == 0) {
			p->next = m->pipelines;
			m->pipelines = p;
		}
	}
	pthread_mutex_unlock(&m->lock);
	*out = p;
	return rc;
}
