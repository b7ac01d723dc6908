/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.c - one logical device per physical device: its queues (a compute lane and a copy
 * lane), its properties for the core, device open and close.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkb.h"

/* Compute on a compute family (an async-compute one without graphics if offered); copies on a
 * transfer-only family if the device has one, else a second compute queue, else the same. */
static void vkb_pick_queues(vkb_dev *d, uint32_t *cfam, uint32_t *tfam, uint32_t *tindex)
{
	VkQueueFamilyProperties fams[16];
	uint32_t n = 16, i;

	d->st->fn.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &n, fams);
	*cfam = UINT32_MAX;
	for (i = 0; i < n; i++) {
		VkQueueFlags f = fams[i].queueFlags;

		if (!(f & VK_QUEUE_COMPUTE_BIT))
			continue;
		if (*cfam == UINT32_MAX || !(f & VK_QUEUE_GRAPHICS_BIT))
			*cfam = i;
		if (!(f & VK_QUEUE_GRAPHICS_BIT))
			break;
	}
	*tfam = *cfam;
	*tindex = fams[*cfam].queueCount > 1 ? 1 : 0;
	for (i = 0; i < n; i++)
		if ((fams[i].queueFlags & VK_QUEUE_TRANSFER_BIT) &&
		    !(fams[i].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT))) {
			*tfam = i;
			*tindex = 0;
			break;
		}
}

static int vkb_create_device(vkb_dev *d, char *msg, size_t msg_size)
{
	static const char *const exts[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
	const float priorities[2] = {1.0f, 1.0f};
	uint32_t cfam, tfam, tindex;
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceVulkan12Features have12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceFeatures2 have = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
					  .pNext = &have12};
	VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
					.pNext = &f12};
	VkDeviceQueueCreateInfo qci[2] = {
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1,
		 .pQueuePriorities = priorities},
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1,
		 .pQueuePriorities = priorities},
	};
	VkDeviceCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.pNext = &f2,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = qci,
		.enabledExtensionCount = 1,
		.ppEnabledExtensionNames = exts,
	};
	int rc;

	vkb_pick_queues(d, &cfam, &tfam, &tindex);
	qci[0].queueFamilyIndex = cfam;
	if (tfam != cfam) {
		qci[1].queueFamilyIndex = tfam;
		dci.queueCreateInfoCount = 2;
	} else if (tindex == 1) {
		qci[0].queueCount = 2;
	}
	/* 64-bit scalars when the device has them; kernels without them run everywhere. */
	d->st->fn.vkGetPhysicalDeviceFeatures2(d->phys, &have);
	f2.features.shaderInt64 = have.features.shaderInt64;
	f2.features.shaderFloat64 = have.features.shaderFloat64;
	/* 64-bit atomics on buffers: odx.hash_groupby's table (claims and sums) */
	f12.shaderBufferInt64Atomics = have12.shaderBufferInt64Atomics;
	f12.timelineSemaphore = VK_TRUE;
	rc = vkb_check(d->st->fn.vkCreateDevice(d->phys, &dci, NULL, &d->device), "vkCreateDevice",
		       msg, msg_size);
	if (rc)
		return rc;
#define VKB_LOAD_DEVICE(name)                                                                      \
	d->fn.name = (PFN_##name)d->st->fn.vkGetDeviceProcAddr(d->device, #name);                  \
	if (!d->fn.name) {                                                                         \
		snprintf(msg, msg_size, "the Vulkan driver lacks %s", #name);                      \
		return ODX_EUNAVAIL;                                                               \
	}
	VKB_DEVICE_FNS(VKB_LOAD_DEVICE)
#undef VKB_LOAD_DEVICE
	pthread_mutex_init(&d->queue_locks[0], NULL);
	pthread_mutex_init(&d->queue_locks[1], NULL);
	d->compute.other = &d->copy;
	d->copy.other = &d->compute;
	rc = vkb_lane_init(d, &d->compute, "compute", cfam, 0, &d->queue_locks[0], msg, msg_size);
	if (rc)
		return rc;
	/* The same VkQueue for both lanes needs one lock: queue access is externally synced. */
	return vkb_lane_init(d, &d->copy, "copy", tfam, tindex,
			     tfam == cfam && tindex == 0 ? &d->queue_locks[0] : &d->queue_locks[1],
			     msg, msg_size);
}

static void vkb_fill_props(vkb_dev *d, odx_backend_device_props *props)
{
	VkPhysicalDevicePushDescriptorPropertiesKHR push = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES_KHR};
	VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
					  .pNext = &push};
	VkPhysicalDevicePCIBusInfoPropertiesEXT pci = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
	VkPhysicalDeviceDriverProperties drv = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
	VkExtensionProperties exts[256];
	uint32_t next = 256, i;
	uint64_t heap = 0;

	d->st->fn.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &next, exts);
	/* The PCI address places the device in the hwloc topology, where the driver knows it. */
	if (vkb_has_ext(exts, next, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME))
		push.pNext = &pci;
	/* Which driver: lavapipe's loop budget (budget.c) */
	if (vkb_has_ext(exts, next, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME)) {
		drv.pNext = p2.pNext;
		p2.pNext = &drv;
	}
	d->st->fn.vkGetPhysicalDeviceProperties2(d->phys, &p2);
	d->limits = p2.properties.limits;
	d->llvmpipe = drv.driverID == VK_DRIVER_ID_MESA_LLVMPIPE ||
		      strncmp(p2.properties.deviceName, "llvmpipe", 8) == 0;
	d->max_push_descriptors = push.maxPushDescriptors;
	d->st->fn.vkGetPhysicalDeviceMemoryProperties(d->phys, &d->memprops);
	for (i = 0; i < d->memprops.memoryHeapCount; i++)
		if ((d->memprops.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
		    d->memprops.memoryHeaps[i].size > heap)
			heap = d->memprops.memoryHeaps[i].size;
	snprintf(d->name, sizeof(d->name), "%s", p2.properties.deviceName);
	snprintf(props->name, sizeof(props->name), "%s", p2.properties.deviceName);
	props->memory_bytes = heap;
	props->compute_lanes = 1;
	props->copy_lanes = 1;
	props->threads = 0;
	props->host_visible = false;
	/* One compute queue, a barrier before every launch, one completion thread reporting the
	 * launches in timeline order: both orders of ABI 1.1 hold. */
	props->ordered_compute = true;
	/* A descriptor's offset must be a multiple of minStorageBufferOffsetAlignment; 16 keeps
	 * vkCmdFillBuffer (4) and the 16-byte rounding of ranges whole. */
	d->mem_align = d->limits.minStorageBufferOffsetAlignment > 16
			       ? (uint32_t)d->limits.minStorageBufferOffsetAlignment
			       : 16;
	props->mem_align = d->mem_align;
	props->pci_bus_id[0] = '\0';
	if (push.pNext == &pci)
		snprintf(props->pci_bus_id, sizeof(props->pci_bus_id), "%04x:%02x:%02x.%x",
			 pci.pciDomain, pci.pciBus, pci.pciDevice, pci.pciFunction);
}

int vkb_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
		    void **out)
{
	vkb_state *st = state;
	vkb_dev *d;
	char msg[VKB_MSG_MAX];
	int rc;

	if (index < 0 || index >= st->ndevices)
		return ODX_ENODEV;
	d = calloc(1, sizeof(*d));
	if (!d)
		return ODX_ENOMEM;
	d->st = st;
	d->odx_device = odx_device;
	d->phys = st->phys[index];
	d->force_staging = st->force_staging;
	atomic_store(&d->msg_seen, 0);
	vkb_fill_props(d, props);
	rc = vkb_create_device(d, msg, sizeof(msg));
	if (rc) {
		/* device_open has no message buffer: the log carries the detail. */
		vkb_log(st, ODX_LOG_ERROR, "vulkan: cannot open %s: %s", d->name, msg);
		vkb_device_close(d);
		return rc;
	}
	vkb_log(st, ODX_LOG_INFO, "vulkan: device %d is %s%s", odx_device, d->name,
		d->compute.queue == d->copy.queue ? " (one queue for compute and copies)"
		: d->copy.family != d->compute.family ? " (dedicated transfer queue)"
						      : " (second compute queue for copies)");
	*out = d;
	return 0;
}

void vkb_device_close(void *dev)
{
	vkb_dev *d = dev;

	if (d->device) {
		d->fn.vkDeviceWaitIdle(d->device);
		vkb_lane_fini(d, &d->compute);
		vkb_lane_fini(d, &d->copy);
		pthread_mutex_destroy(&d->queue_locks[0]);
		pthread_mutex_destroy(&d->queue_locks[1]);
		d->fn.vkDestroyDevice(d->device, NULL);
	}
	free(d);
}
