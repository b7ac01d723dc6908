/* SPDX-License-Identifier: Apache-2.0 */
/* topo.c - machine topology through hwloc: core counts, memory, NUMA nodes, device locality,
 * thread binding and memory binding. */
#include <hwloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core.h"

struct odx__topo {
	hwloc_topology_t topo;
	unsigned npus;
	uint64_t memory;
	hwloc_cpuset_t allowed; /* the PUs this process may run on */
	/* NUMA nodes with memory, in hwloc's logical order: one host memory node each */
	int nnuma;
	hwloc_obj_t *numa;
	bool thissystem; /* the topology describes this machine (not HWLOC_SYNTHETIC, XML) */
	bool membind;    /* memory can be bound to a NUMA node here */
};

/*
 * One hwloc topology for the process, loaded by the first context and kept: hwloc unloads its
 * plugins (libxml2, OpenCL, X11, ...) when the last topology is destroyed and loads them again
 * for the next one, so a program that opens contexts one after another (a test suite, a job in
 * steps) churned through them, each time leaving the unloaded libraries' thread-local blocks
 * behind, which LeakSanitizer crashed on. Read-only once loaded, which hwloc allows from any
 * number of threads; the environment (HWLOC_SYNTHETIC, HWLOC_XMLFILE) is read once, at that load.
 */
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;
static hwloc_topology_t shared_topo;
/* The same with PCI devices (device locality), loaded on first use, only on machines with
 * several NUMA nodes. */
static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;
static hwloc_topology_t io_topo;
static bool io_tried;

static void shared_load(void)
{
	if (hwloc_topology_init(&shared_topo) < 0) {
		shared_topo = NULL;
		return;
	}
	if (hwloc_topology_load(shared_topo) < 0) {
		hwloc_topology_destroy(shared_topo);
		shared_topo = NULL;
	}
}

/* Memory of at least this size is allocated bound to its NUMA node (mmap'ed pages of its own);
 * smaller blocks come from malloc and follow the kernel's first-touch rule. */
#define MEMBIND_MIN (64u << 10)

/* The NUMA nodes that have memory and are in the allowed set (cgroups, numactl). */
static int numa_open(odx__topo *t)
{
	int i, n = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_NUMANODE);
	const struct hwloc_topology_support *sup = hwloc_topology_get_support(t->topo);

	t->thissystem = hwloc_topology_is_thissystem(t->topo);
	t->numa = calloc((size_t)(n > 0 ? n : 1), sizeof(*t->numa));
	if (!t->numa)
		return ODX_ENOMEM;
	for (i = 0; i < n; i++) {
		hwloc_obj_t o = hwloc_get_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE, (unsigned)i);

		if (o && o->attr && o->attr->numanode.local_memory > 0)
			t->numa[t->nnuma++] = o;
	}
	/* Binding only pays with more than one node, and only means something on this machine. */
	t->membind = t->nnuma > 1 && t->thissystem && sup && sup->membind &&
		     sup->membind->alloc_membind && sup->membind->bind_membind;
	return 0;
}

int odx__topo_open(odx__topo **out)
{
	odx__topo *t = calloc(1, sizeof(*t));

	if (!t)
		return ODX_ENOMEM;
	pthread_once(&shared_once, shared_load);
	if (!shared_topo) {
		free(t);
		return ODX_EIO;
	}
	t->topo = shared_topo;
	/* Respect the affinity we were started with (taskset, cgroups, srun's binding). */
	t->allowed = hwloc_bitmap_alloc();
	if (!t->allowed || hwloc_get_cpubind(t->topo, t->allowed, HWLOC_CPUBIND_PROCESS) < 0 ||
	    hwloc_bitmap_iszero(t->allowed))
		hwloc_bitmap_copy(t->allowed, hwloc_topology_get_topology_cpuset(t->topo));
	t->npus = (unsigned)hwloc_bitmap_weight(t->allowed);
	if (t->npus == 0)
		t->npus = 1;
	t->memory = hwloc_get_root_obj(t->topo)->total_memory;
	if (numa_open(t) != 0) {
		odx__topo_close(t);
		return ODX_ENOMEM;
	}
	*out = t;
	return 0;
}

void odx__topo_close(odx__topo *t)
{
	if (!t)
		return;
	hwloc_bitmap_free(t->allowed);
	free(t->numa);
	free(t); /* the topology stays loaded for the next context (shared_topo) */
}

int odx__topo_numa_count(const odx__topo *t)
{
	return t->nnuma > 0 ? t->nnuma : 1;
}

uint64_t odx__topo_numa_memory(const odx__topo *t, int i)
{
	if (t->nnuma == 0)
		return t->memory;
	return t->numa[i]->attr->numanode.local_memory;
}

int odx__topo_numa_os_index(const odx__topo *t, int i)
{
	return t->nnuma == 0 ? 0 : (int)t->numa[i]->os_index;
}

/* The first of our NUMA nodes whose nodeset meets `nodeset`; -1 if none. */
static int numa_of_nodeset(const odx__topo *t, hwloc_const_nodeset_t nodeset)
{
	int i;

	for (i = 0; nodeset && i < t->nnuma; i++)
		if (hwloc_bitmap_isset(nodeset, t->numa[i]->os_index))
			return i;
	return -1;
}

/* The slot-th allowed PU, wrapping around. */
static int slot_pu(const odx__topo *t, unsigned slot)
{
	int pu, i = 0;

	slot %= t->npus;
	hwloc_bitmap_foreach_begin(pu, t->allowed)
	{
		if ((unsigned)i++ == slot)
			break;
	}
	hwloc_bitmap_foreach_end();
	return pu;
}

int odx__topo_numa_of_pu_slot(const odx__topo *t, unsigned slot)
{
	int pu, k;

	if (t->nnuma <= 1)
		return 0;
	pu = slot_pu(t, slot);
	for (k = 0; k < t->nnuma; k++)
		if (hwloc_bitmap_isset(t->numa[k]->cpuset, (unsigned)pu))
			return k;
	return 0;
}

int odx__topo_numa_of_pci(odx__topo *t, const char *busid)
{
	hwloc_obj_t o, anc;

	if (t->nnuma <= 1)
		return 0;
	if (!busid || !busid[0] || !t->thissystem)
		return -1;
	/* PCI discovery costs about 0.1 s: only for a machine with several nodes, once. */
	pthread_mutex_lock(&io_lock);
	if (!io_tried) {
		io_tried = true;
		if (hwloc_topology_init(&io_topo) < 0) {
			io_topo = NULL;
		} else if (hwloc_topology_set_io_types_filter(io_topo,
							      HWLOC_TYPE_FILTER_KEEP_IMPORTANT) < 0 ||
			   hwloc_topology_load(io_topo) < 0) {
			hwloc_topology_destroy(io_topo);
			io_topo = NULL;
		}
	}
	pthread_mutex_unlock(&io_lock);
	if (!io_topo || !(o = hwloc_get_pcidev_by_busidstring(io_topo, busid)))
		return -1;
	anc = hwloc_get_non_io_ancestor_obj(io_topo, o);
	if (!anc)
		return -1;
	/* The ancestor's nodeset names OS indexes, the same in both topologies. */
	return numa_of_nodeset(t, anc->nodeset);
}

int odx__topo_numa_of_self(odx__topo *t)
{
	hwloc_cpuset_t set;
	int k, rc = -1;

	if (t->nnuma <= 1)
		return 0;
	if (!t->thissystem || !(set = hwloc_bitmap_alloc()))
		return -1;
	if (hwloc_get_last_cpu_location(t->topo, set, HWLOC_CPUBIND_THREAD) == 0)
		for (k = 0; k < t->nnuma && rc < 0; k++)
			if (hwloc_bitmap_intersects(t->numa[k]->cpuset, set))
				rc = k;
	hwloc_bitmap_free(set);
	return rc;
}

int odx__topo_numa_of_area(odx__topo *t, const void *p, size_t len)
{
	hwloc_nodeset_t set;
	int rc = -1;

	if (t->nnuma <= 1)
		return 0;
	if (!t->thissystem || !(set = hwloc_bitmap_alloc()))
		return -1;
	if (hwloc_get_area_memlocation(t->topo, p, len, set, HWLOC_MEMBIND_BYNODESET) == 0)
		rc = numa_of_nodeset(t, set);
	hwloc_bitmap_free(set);
	return rc;
}

/*
 * Host copies of 2 MiB and more are asked to live in transparent huge pages (madvise, which is
 * all Debian's default THP mode "madvise" grants): a first touch then faults once per 2 MiB
 * instead of 512 times. A spilled copy's first write-back into host RAM is such a first touch,
 * many times slower in 4 KiB pages than a later one (docs/performance-log.md).
 */
#define HUGE_PAGE ((size_t)2 << 20)

static void want_huge_pages(void *p, size_t size)
{
#ifdef MADV_HUGEPAGE
	uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	uintptr_t end = ((uintptr_t)p + size) & ~(uintptr_t)(HUGE_PAGE - 1);

	if (end > a)
		madvise((void *)a, end - a, MADV_HUGEPAGE); /* advice: refused costs nothing */
#else
	(void)p;
	(void)size;
#endif
}

/*
 * Blocks of HUGE_PAGE and more come straight from mmap, 2 MiB-aligned: the kernel hands them out
 * zero-filled, so a new buffer's replica needs no memset (which at 4 x 16M rows took half the CPU
 * of the first group-by: every output page touched twice, once for zeros nobody read). glibc
 * served these sizes from mmap too until its sliding threshold (up to 32 MiB) sent them to the
 * heap, whose reused bytes are not zeros.
 */
static void *map_aligned(size_t size)
{
	size_t len = (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	uintptr_t p, a;
	void *m;

	m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	p = (uintptr_t)m;
	a = (p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	/* trim the slack on both sides so that the block is exactly [a, a + len) */
	if (a > p)
		munmap(m, a - p);
	if (p + HUGE_PAGE > a)
		munmap((void *)(a + len), p + HUGE_PAGE - a);
	return (void *)a;
}

void *odx__topo_alloc_on(odx__topo *t, int numa, size_t size, bool *zeroed)
{
	void *p;

	*zeroed = false;
	if (t->membind && size >= MEMBIND_MIN) {
		if (numa < 0 || numa >= t->nnuma)
			numa = 0;
		p = hwloc_alloc_membind(t->topo, size, t->numa[numa]->nodeset, HWLOC_MEMBIND_BIND,
					HWLOC_MEMBIND_BYNODESET);
		/* mmap'ed either way (page-aligned, zero-filled), so hwloc_free releases both */
		if (!p)
			p = hwloc_alloc(t->topo, size);
		*zeroed = p != NULL;
	} else if (size >= HUGE_PAGE) {
		/* aligned so that every 2 MiB of it can be one huge page */
		p = map_aligned(size);
		*zeroed = p != NULL;
	} else {
		return aligned_alloc(64, (size + 63) & ~(size_t)63);
	}
	if (p && size >= HUGE_PAGE)
		want_huge_pages(p, size);
	return p;
}

void odx__topo_free(odx__topo *t, void *p, size_t size)
{
	if (!p)
		return;
	if (t->membind && size >= MEMBIND_MIN)
		hwloc_free(t->topo, p, size);
	else if (size >= HUGE_PAGE)
		munmap(p, (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
	else
		free(p);
}

unsigned odx__topo_pus(const odx__topo *t)
{
	return t->npus;
}

uint64_t odx__topo_memory(const odx__topo *t)
{
	return t->memory;
}

/*
 * Ranks that share a host (odx-run, mpirun, srun start several on one machine) each take their
 * own slice of the PUs: slice i of n is the PUs [i*p/n, (i+1)*p/n) of the allowed ones in hwloc's
 * logical order, which keeps a core's hardware threads and a package's cores together. Each
 * rank's device threads bind within its slice (slot_pu, odx__topo_bind_self) and its host devices
 * size their thread count from it (odx__topo_pus): 2 ranks on 2 cores run one thread each on its
 * own core, instead of both binding their first thread to core 0.
 */
int odx__topo_share(odx__topo *t, int local_rank, int local_size, bool split_narrowed)
{
	hwloc_const_cpuset_t machine = hwloc_topology_get_allowed_cpuset(t->topo);
	hwloc_cpuset_t slice;
	unsigned first, last, i = 0;
	int pu;

	if (local_size <= 1 || local_rank < 0 || local_rank >= local_size)
		return 0;
	/* A mask narrower than the machine's, set by a launcher that binds (srun --cpu-bind,
	 * mpirun --bind-to): the launcher already chose this rank's cores. */
	if (!split_narrowed && machine && !hwloc_bitmap_isincluded(machine, t->allowed))
		return ODX__TOPO_LAUNCHER_BOUND;
	if ((unsigned)local_size > t->npus)
		return ODX__TOPO_TOO_FEW_PUS;
	first = (unsigned)local_rank * t->npus / (unsigned)local_size;
	last = (unsigned)(local_rank + 1) * t->npus / (unsigned)local_size;
	slice = hwloc_bitmap_alloc();
	if (!slice)
		return ODX_ENOMEM;
	hwloc_bitmap_foreach_begin(pu, t->allowed)
	{
		if (i >= first && i < last)
			hwloc_bitmap_set(slice, (unsigned)pu);
		i++;
	}
	hwloc_bitmap_foreach_end();
	hwloc_bitmap_free(t->allowed);
	t->allowed = slice;
	t->npus = last - first;
	return 0;
}

int odx__topo_cpuset_str(const odx__topo *t, char *buf, size_t n)
{
	return hwloc_bitmap_list_snprintf(buf, n, t->allowed) < 0 ? ODX_EIO : 0;
}

int odx__topo_bind_self(odx__topo *t, unsigned slot)
{
	hwloc_cpuset_t set;
	int pu = slot_pu(t, slot);
	int rc = ODX_ENODEV;

	set = hwloc_bitmap_alloc();
	if (!set)
		return ODX_ENOMEM;
	hwloc_bitmap_only(set, (unsigned)pu);
	if (hwloc_set_cpubind(t->topo, set, HWLOC_CPUBIND_THREAD) == 0)
		rc = 0;
	hwloc_bitmap_free(set);
	return rc;
}
