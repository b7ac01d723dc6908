/* SPDX-License-Identifier: Apache-2.0 */
/*
 * instance.c - the Vulkan loader's instance and the choice of physical devices: which devices
 * ODX can use, and why not when none is left.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkb.h"

bool vkb_has_ext(const VkExtensionProperties *exts, uint32_t n, const char *name)
{
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(exts[i].extensionName, name) == 0)
			return true;
	return false;
}

/* Why a physical device cannot serve ODX ("" if it can). */
static void vkb_device_unfit(vkb_state *st, VkPhysicalDevice pd, char *why, size_t n)
{
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
					.pNext = &f12};
	VkPhysicalDeviceProperties p;
	VkExtensionProperties *exts = NULL;
	VkQueueFamilyProperties *fams;
	uint32_t next = 0, nfam = 0, i;
	bool compute = false;

	why[0] = '\0';
	st->fn.vkGetPhysicalDeviceProperties(pd, &p);
	if (VK_API_VERSION_MINOR(p.apiVersion) < 2 && VK_API_VERSION_MAJOR(p.apiVersion) == 1) {
		snprintf(why, n, "%s supports Vulkan %u.%u only (1.2 needed)", p.deviceName,
			 VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
		return;
	}
	st->fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, NULL);
	fams = calloc(nfam ? nfam : 1, sizeof(*fams));
	if (!fams) {
		snprintf(why, n, "out of memory");
		return;
	}
	st->fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, fams);
	for (i = 0; i < nfam && !compute; i++)
		compute = (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
	free(fams);
	if (!compute) {
		snprintf(why, n, "%s has no compute queue", p.deviceName);
		return;
	}
	st->fn.vkGetPhysicalDeviceFeatures2(pd, &f2);
	if (!f12.timelineSemaphore) {
		snprintf(why, n, "%s lacks timeline semaphores", p.deviceName);
		return;
	}
	st->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &next, NULL);
	exts = calloc(next ? next : 1, sizeof(*exts));
	if (!exts) {
		snprintf(why, n, "out of memory");
		return;
	}
	st->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &next, exts);
	/* Arguments reach kernels through push descriptors (docs/kernel-abi.md). */
	if (!vkb_has_ext(exts, next, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
		snprintf(why, n, "%s lacks " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME, p.deviceName);
	free(exts);
}

static bool vkb_instance_has_layer(vkb_state *st, const char *name)
{
	PFN_vkEnumerateInstanceLayerProperties enum_layers =
		(PFN_vkEnumerateInstanceLayerProperties)st->gipa(
			NULL, "vkEnumerateInstanceLayerProperties");
	VkLayerProperties *layers;
	uint32_t n = 0, i;
	bool found = false;

	if (!enum_layers || enum_layers(&n, NULL) != VK_SUCCESS)
		return false;
	layers = calloc(n ? n : 1, sizeof(*layers));
	if (!layers)
		return false;
	if (enum_layers(&n, layers) == VK_SUCCESS)
		for (i = 0; i < n && !found; i++)
			found = strcmp(layers[i].layerName, name) == 0;
	free(layers);
	return found;
}

int vkb_create_instance(vkb_state *st, char *reason, size_t n)
{
	static const char *const layer = "VK_LAYER_KHRONOS_validation";
	static const char *const ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
	PFN_vkEnumerateInstanceVersion version_fn =
		(PFN_vkEnumerateInstanceVersion)st->gipa(NULL, "vkEnumerateInstanceVersion");
	PFN_vkCreateInstance create =
		(PFN_vkCreateInstance)st->gipa(NULL, "vkCreateInstance");
	VkDebugUtilsMessengerCreateInfoEXT mci = {
		.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
		.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
				   VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
		.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
			       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
		.pfnUserCallback = vkb_on_message,
		.pUserData = st,
	};
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "odx",
		.pEngineName = "odx",
		.engineVersion = VK_MAKE_API_VERSION(0, ODX_VERSION_MAJOR, ODX_VERSION_MINOR,
						     ODX_VERSION_PATCH),
		.apiVersion = VK_API_VERSION_1_2,
	};
	VkInstanceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
	};
	uint32_t version = VK_API_VERSION_1_0;
	PFN_vkCreateDebugUtilsMessengerEXT create_messenger;
	char msg[VKB_MSG_MAX];
	int rc;

	if (!create) {
		snprintf(reason, n, "libvulkan.so.1 has no vkCreateInstance");
		return ODX_EUNAVAIL;
	}
	if (version_fn)
		version_fn(&version);
	if (VK_API_VERSION_MAJOR(version) == 1 && VK_API_VERSION_MINOR(version) < 2) {
		snprintf(reason, n, "the Vulkan loader is version %u.%u; ODX needs 1.2",
			 VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
		return ODX_EUNAVAIL;
	}
	if (st->validation) {
		if (!vkb_instance_has_layer(st, layer)) {
			snprintf(reason, n, "vulkan.validation = true but %s is not installed",
				 layer);
			return ODX_EUNAVAIL;
		}
		/* Chained here too, so messages from instance creation itself are caught. */
		ci.pNext = &mci;
		ci.enabledLayerCount = 1;
		ci.ppEnabledLayerNames = &layer;
		ci.enabledExtensionCount = 1;
		ci.ppEnabledExtensionNames = &ext;
	}
	rc = vkb_check(create(&ci, NULL, &st->instance), "vkCreateInstance", msg, sizeof(msg));
	if (rc) {
		snprintf(reason, n, "%s%s", msg,
			 rc == ODX_EUNAVAIL ? " (no Vulkan driver installed?)" : "");
		return rc == ODX_EUNAVAIL ? rc : ODX_EUNAVAIL;
	}
#define VKB_LOAD_INSTANCE(name)                                                                    \
	st->fn.name = (PFN_##name)st->gipa(st->instance, #name);                                   \
	if (!st->fn.name) {                                                                        \
		snprintf(reason, n, "the Vulkan loader lacks %s", #name);                          \
		return ODX_EUNAVAIL;                                                               \
	}
	VKB_INSTANCE_FNS(VKB_LOAD_INSTANCE)
#undef VKB_LOAD_INSTANCE
	if (!st->validation)
		return 0;
	create_messenger = (PFN_vkCreateDebugUtilsMessengerEXT)st->gipa(
		st->instance, "vkCreateDebugUtilsMessengerEXT");
	st->destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)st->gipa(
		st->instance, "vkDestroyDebugUtilsMessengerEXT");
	if (!create_messenger || !st->destroy_messenger) {
		snprintf(reason, n, "vulkan.validation = true but " VK_EXT_DEBUG_UTILS_EXTENSION_NAME
				    " is missing");
		return ODX_EUNAVAIL;
	}
	rc = vkb_check(create_messenger(st->instance, &mci, NULL, &st->messenger),
		       "vkCreateDebugUtilsMessengerEXT", msg, sizeof(msg));
	if (rc)
		snprintf(reason, n, "%s", msg);
	return rc ? ODX_EUNAVAIL : 0;
}

/* Keeps the devices ODX can use; says why when none is left. */
int vkb_pick_devices(vkb_state *st, char *reason, size_t n)
{
	VkPhysicalDevice all[VKB_MAX_DEVICES];
	uint32_t count = VKB_MAX_DEVICES, i;
	char why[VKB_MSG_MAX] = "", cpu_names[256] = "", one[256];
	int ncpu = 0;

	VkResult r = st->fn.vkEnumeratePhysicalDevices(st->instance, &count, all);

	/* VK_INCOMPLETE: more devices than ODX takes; the first ones are used. */
	if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
		vkb_check(r, "vkEnumeratePhysicalDevices", reason, n);
		return ODX_EUNAVAIL;
	}
	for (i = 0; i < count; i++) {
		VkPhysicalDeviceProperties p;

		st->fn.vkGetPhysicalDeviceProperties(all[i], &p);
		if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && !st->allow_cpu) {
			/* CPU drivers are slower than the host backend: only when asked for. */
			snprintf(one, sizeof(one), "%s%s", ncpu++ ? ", " : "", p.deviceName);
			strncat(cpu_names, one, sizeof(cpu_names) - strlen(cpu_names) - 1);
			continue;
		}
		vkb_device_unfit(st, all[i], one, sizeof(one));
		if (one[0]) {
			size_t used = strlen(why);

			snprintf(why + used, sizeof(why) - used, "%s%s", used ? "; " : "", one);
			continue;
		}
		st->phys[st->ndevices++] = all[i];
	}
	if (st->ndevices > 0)
		return 0;
	if (count == 0)
		snprintf(reason, n, "no Vulkan device (the loader found no driver)");
	else if (why[0])
		snprintf(reason, n, "no usable Vulkan device: %s%s%s%s", why,
			 ncpu ? "; CPU devices skipped (" : "", ncpu ? cpu_names : "",
			 ncpu ? "): set vulkan.allow_cpu = true" : "");
	else
		snprintf(reason, n, "no Vulkan device; only CPU devices (%s): set "
				    "vulkan.allow_cpu = true",
			 cpu_names);
	return ODX_EUNAVAIL;
}
