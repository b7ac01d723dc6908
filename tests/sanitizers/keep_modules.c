/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keep_modules.c - preloaded (LD_PRELOAD) into every process of the ASan stage of scripts/test:
 * dlclose keeps the module mapped.
 *
 * LeakSanitizer runs at exit and names each frame of a leak by the module that holds it. A driver
 * that was unloaded before then shows as "<unknown module>", which no suppression can match: the
 * Vulkan loader unloads the ICD (Mesa's lavapipe, libvulkan_lvp.so) at vkDestroyInstance, and
 * some Mesa builds leave small allocations behind, so every test that opened Vulkan (the Vulkan
 * suites, and the tests that only probe the backends) failed on such a machine. With every module
 * kept, the driver's own frames stay named and tests/sanitizers/lsan.supp applies, whatever
 * driver and build the machine has. Built without sanitizers: it also loads into the shells and
 * tools the tests start.
 */
int dlclose(void *handle);

int dlclose(void *handle)
{
	(void)handle;
	return 0;
}
