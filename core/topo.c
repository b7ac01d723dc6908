/* SPDX-License-Identifier: Apache-2.0 */
/* topo.c - machine topology through hwloc: core counts, memory, thread binding. */
#include <hwloc.h>
#include <stdlib.h>

#include "core.h"

struct odx__topo {
	hwloc_topology_t topo;
	unsigned npus;
	uint64_t memory;
	hwloc_cpuset_t allowed; /* the PUs this process may run on */
};

int odx__topo_open(odx__topo **out)
{
	odx__topo *t = calloc(1, sizeof(*t));

	if (!t)
		return ODX_ENOMEM;
	if (hwloc_topology_init(&t->topo) < 0)
		goto out_free;
	if (hwloc_topology_load(t->topo) < 0)
		goto out_destroy;
	/* Respect the affinity we were started with (taskset, cgroups, srun's binding). */
	t->allowed = hwloc_bitmap_alloc();
	if (!t->allowed || hwloc_get_cpubind(t->topo, t->allowed, HWLOC_CPUBIND_PROCESS) < 0 ||
	    hwloc_bitmap_iszero(t->allowed))
		hwloc_bitmap_copy(t->allowed, hwloc_topology_get_topology_cpuset(t->topo));
	t->npus = (unsigned)hwloc_bitmap_weight(t->allowed);
	if (t->npus == 0)
		t->npus = 1;
	t->memory = hwloc_get_root_obj(t->topo)->total_memory;
	*out = t;
	return 0;

out_destroy:
	hwloc_topology_destroy(t->topo);
out_free:
	free(t);
	return ODX_EIO;
}

void odx__topo_close(odx__topo *t)
{
	if (!t)
		return;
	hwloc_bitmap_free(t->allowed);
	hwloc_topology_destroy(t->topo);
	free(t);
}

unsigned odx__topo_pus(const odx__topo *t)
{
	return t->npus;
}

uint64_t odx__topo_memory(const odx__topo *t)
{
	return t->memory;
}

int odx__topo_bind_self(odx__topo *t, unsigned slot)
{
	hwloc_cpuset_t set;
	int pu, i = 0;
	int rc = ODX_ENODEV;

	/* The slot-th allowed PU, wrapping around. */
	slot %= t->npus;
	hwloc_bitmap_foreach_begin(pu, t->allowed)
	{
		if ((unsigned)i++ == slot)
			break;
	}
	hwloc_bitmap_foreach_end();
	set = hwloc_bitmap_alloc();
	if (!set)
		return ODX_ENOMEM;
	hwloc_bitmap_only(set, (unsigned)pu);
	if (hwloc_set_cpubind(t->topo, set, HWLOC_CPUBIND_THREAD) == 0)
		rc = 0;
	hwloc_bitmap_free(set);
	return rc;
}
