/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.c - the `odx` command: what ODX sees on this machine.
 *
 *	odx info		version, backends, devices, memory nodes, hwloc topology
 *	odx info --config	every configuration key with its value, origin and help
 *
 * The context is opened exactly as an application's would be (ODX_* variables, odx.conf), so
 * `odx info` answers "what would my program get here?".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include <odx/odx.h>

/* Exit codes: 0 success, 1 failure at run time, 2 bad command line. */
enum { EXIT_USAGE = 2 };

static void usage(FILE *out)
{
	fprintf(out,
		"usage: odx [--help] [--version] <command> [options]\n"
		"\n"
		"commands:\n"
		"  info            version, backends, devices, memory nodes and topology\n"
		"  info --config   every configuration key: effective value, origin and help\n"
		"\n"
		"The context is configured like any program's: ODX_* variables, then the\n"
		"config file ($ODX_CONFIG or ./odx.conf), then defaults.\n");
}

static void die(odx_context *ctx, int rc, const char *what)
{
	/* with ctx NULL: why odx_open failed, if it did */
	const char *why = odx_last_error(ctx);

	fprintf(stderr, "odx: %s failed: %s (%s)%s%s\n", what, odx_err_name(rc), odx_strerror(rc),
		why[0] ? ": " : "", why);
	exit(1);
}

/* "15.6 GiB": bytes in the largest binary unit that keeps the number at least 1. */
static const char *fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

static void print_backend(const odx_backend_info *info)
{
	if (info->available)
		printf("  %-8s available (%d device%s; %s)\n", info->name, info->device_count,
		       info->device_count == 1 ? "" : "s", info->origin);
	else
		printf("  %-8s not available: %s\n", info->name,
		       info->reason && *info->reason ? info->reason : "no reason given");
}

static void print_backends(odx_context *ctx)
{
	int count = odx_backend_count(ctx);
	if (count < 0)
		die(ctx, count, "odx_backend_count");

	odx_backend_info *infos = calloc(count ? count : 1, sizeof(*infos));
	if (!infos)
		die(ctx, ODX_ENOMEM, "calloc");
	for (int i = 0; i < count; i++) {
		int rc = odx_backend_get_info(ctx, i, &infos[i]);
		if (rc < 0)
			die(ctx, rc, "odx_backend_get_info");
	}

	/* In the order the library tries them (under `backends = auto`, every one it knows). */
	printf("backends:\n");
	for (int i = 0; i < count; i++)
		print_backend(&infos[i]);
	free(infos);
}

static void print_devices(odx_context *ctx)
{
	int count = odx_device_count(ctx);
	if (count < 0)
		die(ctx, count, "odx_device_count");

	printf("devices: %d\n", count);
	if (count > 0)
		printf("  %3s  %-7s %-32s %11s %7s %7s %7s\n", "#", "backend", "name", "memory",
		       "memnode", "lanes", "threads");
	for (int d = 0; d < count; d++) {
		odx_device_info info;
		char mem[32], lanes[32];
		int rc = odx_device_get_info(ctx, d, &info);
		if (rc < 0)
			die(ctx, rc, "odx_device_get_info");

		/* compute lanes + copy lanes */
		snprintf(lanes, sizeof(lanes), "%d+%d", info.compute_lanes, info.copy_lanes);
		printf("  %3d  %-7s %-32s %11s %7d %7s %7d\n", info.index,
		       info.kind_name, info.name,
		       fmt_bytes(info.memory_bytes, mem, sizeof(mem)), info.memnode, lanes,
		       info.threads);
	}
	if (count > 0)
		printf("  (lanes: compute+copy)\n");
}

static void print_memnodes(odx_context *ctx)
{
	int count = odx_memnode_count(ctx);
	if (count < 0)
		die(ctx, count, "odx_memnode_count");

	int ndev = odx_device_count(ctx);

	printf("memory nodes: %d\n", count);
	if (count > 0)
		printf("  %3s  %-7s %-12s %4s %11s %11s\n", "#", "kind", "devices", "numa",
		       "capacity", "used");
	for (int m = 0; m < count; m++) {
		odx_memnode_info info;
		char cap[32], used[32], dev[64] = "";
		size_t len = 0;
		int rc = odx_memnode_get_info(ctx, m, &info);
		if (rc < 0)
			die(ctx, rc, "odx_memnode_get_info");

		/* The devices that run on this node: a device's own memory, or host RAM that host
		 * devices share (host.memnode=shared). */
		for (int d = 0; d < ndev && len < sizeof(dev) - 8; d++) {
			odx_device_info di;

			if (odx_device_get_info(ctx, d, &di) == 0 && di.memnode == m)
				len += (size_t)snprintf(dev + len, sizeof(dev) - len, "%s%d",
							len ? "," : "", d);
		}
		if (len == 0)
			snprintf(dev, sizeof(dev), "-");
		/* host RAM: its NUMA node; a device: the NUMA node nearest to it */
		printf("  %3d  %-7s %-12s %4d %11s %11s\n", info.index,
		       info.kind == ODX_MEMNODE_HOST ? "host" : "device", dev,
		       odx_memnode_numa(ctx, m),
		       fmt_bytes(info.capacity_bytes, cap, sizeof(cap)),
		       fmt_bytes(info.used_bytes, used, sizeof(used)));
	}
}

/* The rank, the libfabric providers present and the one fabric.provider picks. */
static void print_fabric(odx_context *ctx)
{
	char text[4096];
	int rc = odx_fabric_describe(ctx, text, sizeof(text));

	printf("fabric:\n");
	if (rc < 0) {
		printf("  unavailable: %s\n", odx_last_error(ctx));
		return;
	}
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
		printf("  %s\n", line);
}

/* The machine as hwloc sees it, independently of what ODX made of it. */
static int print_topology(void)
{
	unsigned v = hwloc_get_api_version();
	hwloc_topology_t topo;
	hwloc_bitmap_t set;
	char *list = NULL;
	int ret = 0;

	printf("topology (hwloc API %u.%u.%u):\n", v >> 16, (v >> 8) & 0xff, v & 0xff);
	if (hwloc_topology_init(&topo) < 0) {
		fprintf(stderr, "odx: hwloc_topology_init failed\n");
		return -1;
	}
	if (hwloc_topology_load(topo) < 0) {
		fprintf(stderr, "odx: hwloc_topology_load failed\n");
		ret = -1;
		goto out_destroy_topology;
	}

	printf("  packages %d, NUMA nodes %d, cores %d, PUs %d\n",
	       hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE),
	       hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE),
	       hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE),
	       hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));

	hwloc_obj_t numa = NULL;
	while ((numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, numa))) {
		char mem[32];

		hwloc_bitmap_list_asprintf(&list, numa->cpuset);
		printf("  NUMA node %u: %s, PUs %s\n", numa->os_index,
		       fmt_bytes(numa->attr->numanode.local_memory, mem, sizeof(mem)),
		       list ? list : "?");
		free(list);
		list = NULL;
	}

	set = hwloc_bitmap_alloc();
	if (!set) {
		ret = -1;
		goto out_destroy_topology;
	}
	if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) < 0) {
		printf("  process cpuset: unknown (hwloc_get_cpubind failed)\n");
	} else {
		hwloc_bitmap_list_asprintf(&list, set);
		printf("  process cpuset: %s (%d PUs)\n", list ? list : "?",
		       hwloc_bitmap_weight(set));
		free(list);
	}
	hwloc_bitmap_free(set);
out_destroy_topology:
	hwloc_topology_destroy(topo);
	return ret;
}

static void print_config_key(void *user, const char *key, const char *value, const char *origin,
			     const char *help)
{
	(void)user;
	printf("  %-20s %-14s %-24s %s\n", key, *value ? value : "\"\"", origin, help);
}

static int cmd_info(int argc, char **argv)
{
	int show_config = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0) {
			show_config = 1;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "odx info: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return EXIT_USAGE;
		}
	}

	/* An (empty) config object only to learn why odx_open failed, if it does. */
	odx_config *cfg;
	odx_context *ctx;
	int rc = odx_config_create(&cfg);
	if (rc < 0)
		die(NULL, rc, "odx_config_create");
	rc = odx_open(&ctx, cfg);
	if (rc < 0) {
		fprintf(stderr, "odx: cannot open a context: %s (%s): %s\n", odx_err_name(rc),
			odx_strerror(rc), odx_config_error(cfg));
		odx_config_destroy(cfg);
		return 1;
	}
	odx_config_destroy(cfg);

	int ret = 0;
	if (show_config) {
		printf("configuration (precedence: api > env > file > default):\n");
		printf("  %-20s %-14s %-24s %s\n", "key", "value", "origin", "help");
		rc = odx_config_describe(ctx, print_config_key, NULL);
		if (rc < 0)
			die(ctx, rc, "odx_config_describe");
	} else {
		printf("odx %s\n", odx_version());
		print_backends(ctx);
		print_devices(ctx);
		print_memnodes(ctx);
	print_fabric(ctx);
		if (print_topology() < 0)
			ret = 1;
	}

	rc = odx_close(ctx);
	if (rc < 0)
		die(NULL, rc, "odx_close");
	return ret;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("odx %s\n", odx_version());
		return 0;
	}
	if (strcmp(argv[1], "info") == 0)
		return cmd_info(argc - 1, argv + 1);

	if (argv[1][0] == '-')
		fprintf(stderr, "odx: unknown option '%s'\n", argv[1]);
	else
		fprintf(stderr, "odx: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
