/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_overhead_vulkan.c - what ODX's Vulkan backend costs over hand-written Vulkan, in one
 * run: (1) 1000 small dispatches, each after a host-to-device write of its input; (2) one large
 * SAXPY with its uploads and the download of the result. The raw loop beside it does the same
 * with one device, host-visible buffers, push descriptors and a fence. One JSON line per figure.
 *
 * The raw side is the one place outside backends/vulkan that speaks Vulkan: it is the anchor
 * the backend is measured against, and like the backend it opens libvulkan.so.1 at run time.
 *
 * Usage: backend_overhead_vulkan [-n small_iterations] [-s saxpy_elements] [-r rounds]
 * The SPIR-V image (axpy: R x, RW y, i64 n, f32 a) comes from the build (AXPY_SPV).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "backend_overhead.h"

#define BLOCK 256

static void *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	void *p;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	p = malloc((size_t)n);
	if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
		free(p);
		p = NULL;
	}
	fclose(f);
	*size = (size_t)n;
	return p;
}

/* ---- raw Vulkan ------------------------------------------------------------------------------ */

#define VK_FNS(X)                                                                                  \
	X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceQueueFamilyProperties)                   \
	X(vkGetPhysicalDeviceMemoryProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)             \
	X(vkDestroyInstance)
#define VK_DFNS(X)                                                                                 \
	X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkGetBufferMemoryRequirements)                      \
	X(vkAllocateMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkCreateShaderModule)             \
	X(vkCreateDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkCreateComputePipelines)         \
	X(vkCreateCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer)                   \
	X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdPushDescriptorSetKHR)                      \
	X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkQueueSubmit)              \
	X(vkCreateFence) X(vkWaitForFences) X(vkResetFences) X(vkDeviceWaitIdle)                     \
	X(vkDestroyDevice)
#define VK_DECL(n) static PFN_##n n;
VK_FNS(VK_DECL)
VK_DFNS(VK_DECL)

#define VK_OK(expr)                                                                                \
	do {                                                                                       \
		VkResult r_ = (expr);                                                              \
		if (r_ != VK_SUCCESS) {                                                            \
			fprintf(stderr, "%s: VkResult %d\n", #expr, (int)r_);                      \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

typedef struct raw {
	VkDevice dev;
	VkQueue queue;
	VkPipelineLayout layout;
	VkPipeline pipe;
	VkCommandBuffer cmd;
	VkFence fence;
	VkPhysicalDeviceMemoryProperties mp;
} raw;

static void raw_buffer(raw *r, size_t size, VkBuffer *buf, void **map)
{
	VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
				  .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
	VkMemoryRequirements req;
	VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
	VkMemoryPropertyFlags need =
		VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	VkDeviceMemory mem;
	uint32_t t;

	VK_OK(vkCreateBuffer(r->dev, &bci, NULL, buf));
	vkGetBufferMemoryRequirements(r->dev, *buf, &req);
	for (t = 0; t < r->mp.memoryTypeCount; t++)
		if ((req.memoryTypeBits & (1u << t)) &&
		    (r->mp.memoryTypes[t].propertyFlags & need) == need)
			break;
	mai.allocationSize = req.size;
	mai.memoryTypeIndex = t;
	VK_OK(vkAllocateMemory(r->dev, &mai, NULL, &mem));
	VK_OK(vkBindBufferMemory(r->dev, *buf, mem, 0));
	VK_OK(vkMapMemory(r->dev, mem, 0, VK_WHOLE_SIZE, 0, map));
}

static void raw_dispatch(raw *r, VkBuffer x, VkBuffer y, int64_t n, float a, uint32_t groups)
{
	VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
				       .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
	VkDescriptorBufferInfo info[2] = {{x, 0, VK_WHOLE_SIZE}, {y, 0, VK_WHOLE_SIZE}};
	VkWriteDescriptorSet w[2];
	VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
			      .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
			      .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
	VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
			   .pCommandBuffers = &r->cmd};
	uint8_t push[16] = {0};

	for (int i = 0; i < 2; i++)
		w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
					      .dstBinding = (uint32_t)i, .descriptorCount = 1,
					      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
					      .pBufferInfo = &info[i]};
	memcpy(push, &n, 8);
	memcpy(push + 8, &a, 4);
	VK_OK(vkBeginCommandBuffer(r->cmd, &bi));
	vkCmdBindPipeline(r->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, r->pipe);
	vkCmdPushDescriptorSetKHR(r->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, r->layout, 0, 2, w);
	vkCmdPushConstants(r->cmd, r->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 12, push);
	vkCmdDispatch(r->cmd, groups, 1, 1);
	vkCmdPipelineBarrier(r->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
			     VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
	VK_OK(vkEndCommandBuffer(r->cmd));
	VK_OK(vkQueueSubmit(r->queue, 1, &si, r->fence));
	VK_OK(vkWaitForFences(r->dev, 1, &r->fence, VK_TRUE, UINT64_MAX));
	VK_OK(vkResetFences(r->dev, 1, &r->fence));
}

static void run_raw(const void *spv, size_t spv_size, int iters, size_t big, double *small_us,
		    double *saxpy_us)
{
	void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
	PFN_vkGetInstanceProcAddr gipa;
	PFN_vkCreateInstance create_instance;
	VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
				 .apiVersion = VK_API_VERSION_1_2};
	VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
				    .pApplicationInfo = &app};
	const char *ext = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
				       .queueCount = 1, .pQueuePriorities = &prio};
	VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
				  .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
				  .enabledExtensionCount = 1, .ppEnabledExtensionNames = &ext};
	VkPhysicalDeviceFeatures feats = {.shaderInt64 = VK_TRUE};
	VkDescriptorSetLayoutBinding b[2] = {
		{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
		{1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL}};
	VkDescriptorSetLayoutCreateInfo slci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
		.bindingCount = 2, .pBindings = b};
	VkPushConstantRange range = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 12};
	VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
					   .setLayoutCount = 1, .pushConstantRangeCount = 1,
					   .pPushConstantRanges = &range};
	VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
					 .codeSize = spv_size, .pCode = spv};
	uint32_t block[3] = {BLOCK, 1, 1};
	VkSpecializationMapEntry spec[3] = {{0, 0, 4}, {1, 4, 4}, {2, 8, 4}};
	VkSpecializationInfo si = {3, spec, sizeof(block), block};
	VkComputePipelineCreateInfo cpci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .pName = "main",
			  .pSpecializationInfo = &si}};
	VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
				       .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT};
	VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
					   .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
					   .commandBufferCount = 1};
	VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	VkInstance inst;
	VkPhysicalDevice pd;
	VkQueueFamilyProperties fams[16];
	VkDescriptorSetLayout sl;
	VkCommandPool pool;
	VkBuffer x, y;
	float *mx, *my, hx[SMALL_N], *bx, *by;
	uint32_t one = 1, nf = 16, fam = 0;
	raw r = {0};
	double t0;
	void *sym;

	if (!lib || !(sym = dlsym(lib, "vkGetInstanceProcAddr"))) {
		fprintf(stderr, "raw: libvulkan.so.1 not found\n");
		exit(1);
	}
	memcpy(&gipa, &sym, sizeof(gipa));
	create_instance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
	VK_OK(create_instance(&ici, NULL, &inst));
#define VK_LOAD(n) n = (PFN_##n)gipa(inst, #n);
	VK_FNS(VK_LOAD)
	if (vkEnumeratePhysicalDevices(inst, &one, &pd) < 0 || one == 0)
		exit(1);
	vkGetPhysicalDeviceQueueFamilyProperties(pd, &nf, fams);
	while (!(fams[fam].queueFlags & VK_QUEUE_COMPUTE_BIT))
		fam++;
	qci.queueFamilyIndex = fam;
	dci.pEnabledFeatures = &feats;
	vkGetPhysicalDeviceMemoryProperties(pd, &r.mp);
	VK_OK(vkCreateDevice(pd, &dci, NULL, &r.dev));
#define VK_DLOAD(n) n = (PFN_##n)vkGetDeviceProcAddr(r.dev, #n);
	VK_DFNS(VK_DLOAD)
	vkGetDeviceQueue(r.dev, fam, 0, &r.queue);
	VK_OK(vkCreateDescriptorSetLayout(r.dev, &slci, NULL, &sl));
	plci.pSetLayouts = &sl;
	VK_OK(vkCreatePipelineLayout(r.dev, &plci, NULL, &r.layout));
	VK_OK(vkCreateShaderModule(r.dev, &smci, NULL, &cpci.stage.module));
	cpci.layout = r.layout;
	VK_OK(vkCreateComputePipelines(r.dev, VK_NULL_HANDLE, 1, &cpci, NULL, &r.pipe));
	cpi.queueFamilyIndex = fam;
	VK_OK(vkCreateCommandPool(r.dev, &cpi, NULL, &pool));
	cai.commandPool = pool;
	VK_OK(vkAllocateCommandBuffers(r.dev, &cai, &r.cmd));
	VK_OK(vkCreateFence(r.dev, &fci, NULL, &r.fence));

	raw_buffer(&r, sizeof(hx), &x, (void **)&mx);
	raw_buffer(&r, sizeof(hx), &y, (void **)&my);
	for (int i = 0; i < SMALL_N; i++)
		hx[i] = 1.0f;
	memset(my, 0, sizeof(hx));
	raw_dispatch(&r, x, y, SMALL_N, 1.0f, 1); /* warm-up */
	t0 = now_us();
	for (int i = 0; i < iters; i++) {
		hx[0] = (float)i;
		memcpy(mx, hx, sizeof(hx));
		raw_dispatch(&r, x, y, SMALL_N, 1.0f, 1);
	}
	*small_us = (now_us() - t0) / iters;

	bx = malloc(big * sizeof(float));
	by = malloc(big * sizeof(float));
	for (size_t j = 0; j < big; j++) {
		bx[j] = (float)j;
		by[j] = 1.0f;
	}
	raw_buffer(&r, big * sizeof(float), &x, (void **)&mx);
	raw_buffer(&r, big * sizeof(float), &y, (void **)&my);
	t0 = now_us();
	memcpy(mx, bx, big * sizeof(float));
	memcpy(my, by, big * sizeof(float));
	raw_dispatch(&r, x, y, (int64_t)big, 2.0f, (uint32_t)((big + BLOCK - 1) / BLOCK));
	memcpy(by, my, big * sizeof(float));
	*saxpy_us = now_us() - t0;
	if (by[big - 1] != 2.0f * (float)(big - 1) + 1.0f)
		fprintf(stderr, "raw saxpy: wrong result %g\n", by[big - 1]);
	free(bx);
	free(by);
	/* Process exit releases the rest; the figures are what matters here. */
	vkDeviceWaitIdle(r.dev);
}

typedef struct sides {
	int iters;
	size_t big;
	const void *spv;
	size_t spv_size;
} sides;

static void odx_side(const void *arg, double *small_us, double *saxpy_us)
{
	const sides *s = arg;

	run_odx("vulkan", "vulkan.allow_cpu",
		&(odx_kernel_variant){.backend = ODX_BACKEND_VULKAN,
				      .format = ODX_FORMAT_SPIRV,
				      .code = s->spv,
				      .code_size = s->spv_size,
				      .entry = "main"},
		BLOCK, s->iters, s->big, small_us, saxpy_us);
}

static void raw_side(const void *arg, double *small_us, double *saxpy_us)
{
	const sides *s = arg;

	run_raw(s->spv, s->spv_size, s->iters, s->big, small_us, saxpy_us);
}

int main(int argc, char **argv)
{
	int rounds = 5, opt, rc;
	sides s = {.iters = 1000, .big = (size_t)1 << 22};
	double odx_small[MAX_ROUNDS], odx_saxpy[MAX_ROUNDS], raw_small[MAX_ROUNDS],
		raw_saxpy[MAX_ROUNDS];
	void *spv;

	while ((opt = getopt(argc, argv, "n:s:r:")) != -1) {
		if (opt == 'n')
			s.iters = atoi(optarg);
		else if (opt == 's')
			s.big = (size_t)atol(optarg);
		else if (opt == 'r')
			rounds = atoi(optarg);
		else
			return 2;
	}
	spv = read_file(getenv("ODX_BENCH_AXPY_SPV") ? getenv("ODX_BENCH_AXPY_SPV") : AXPY_SPV,
			&s.spv_size);
	if (!spv || s.iters <= 0 || s.big == 0 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "cannot read the SPIR-V image or bad arguments\n");
		return 1;
	}
	s.spv = spv;
	rc = run_rounds(odx_side, raw_side, &s, rounds, odx_small, odx_saxpy, raw_small,
			raw_saxpy);
	free(spv);
	if (rc)
		return rc;
	report("vulkan", "small_dispatch_with_copy", odx_small, raw_small, rounds);
	report("vulkan", "saxpy_large", odx_saxpy, raw_saxpy, rounds);
	return 0;
}
