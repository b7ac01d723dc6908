/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.h - the Lua policy host, as the rest of core sees it (docs/policies.md for the user's
 * view). The implementation lives in core/policy/ (policy_internal.h says which file holds
 * what); only those files include the Lua headers. Two layers:
 *
 *  - the host proper (odx__policy_open .. odx__policy_close): one sandboxed lua_State per
 *    policy, a capped allocator, a per-call CPU budget enforced by a watchdog thread, the
 *    performance models; it knows nothing of tasks or contexts, so the test harness
 *    (tests/policy/test_policy_harness.c) drives it with synthetic batches;
 *  - the context glue (odx__policy_ctx_*): ready tasks are appended to a pending list and
 *    whoever takes the policy lock drains the whole list into one `place` call (flat
 *    combining), then queues each task on the device chosen, or on the built-in policy's
 *    choice for the entries the policy left out or got wrong.
 *
 * The other hooks have C seams (odx__policy_evict, _prefetch, _place_rank below) that the tier
 * manager and the fabric call with flat candidate arrays; each returns < 0 when there is no Lua
 * policy, the hook is absent, or the call failed or answered wrongly, and the caller then uses its
 * own default. `on_tick` runs on a thread of the glue every policy.tick_ms.
 */
#ifndef ODX_CORE_POLICY_H
#define ODX_CORE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx/odx.h"

typedef struct odx__policy odx__policy;
typedef struct odx__task odx__task;

/* One device as policies see it (machine.devices[d] in init). Strings are copied. */
typedef struct odx__policy_device {
	const char *kind; /* "host", "cuda", ... */
	const char *name;
	uint64_t memory;  /* bytes */
} odx__policy_device;

typedef struct odx__policy_params {
	const char *spec;        /* "lua:NAME" (embedded) or a path to a .lua file */
	int ndevices;
	const odx__policy_device *devices;
	/* Memory nodes: device d's memory is node device_node[d] (0-based, < nnodes). NULL: device
	 * d on node d, nnodes = ndevices. Link bandwidths start at a nominal 10 GB/s. */
	int nnodes;
	const int *device_node;
	uint64_t memory_limit;   /* bytes the Lua state may allocate */
	uint64_t budget_ns;      /* CPU time of one hook call; loading gets 100 times this */
	uint64_t load_timeout_ns; /* wall-clock ceiling of loading and of lua_close; 0: 10 s */
	const char *model_dir;   /* "" or NULL: models are not persisted */
	/* Where messages go (may be NULL). `error` is true for failures, which the context also
	 * records as its last error. */
	void (*log)(void *user, odx_log_level level, bool error, const char *msg);
	void *log_user;
} odx__policy_params;

/* One ready task, as the host sees it. Arrays hold one entry per device. */
typedef struct odx__policy_task {
	const char *kernel;
	int priority;
	uint64_t bytes;          /* sum of its buffer arguments' sizes */
	const char *tag;
	const bool *feasible;
	const uint64_t *resident; /* bytes of its inputs already valid on the device */
	const uint64_t *missing;  /* bytes of its inputs the device would fetch first */
	/* Microseconds to fetch them from the nearest valid copies (measured link bandwidths);
	 * NULL: missing[d] over the fastest link into the device's node. */
	const double *transfer_us;
} odx__policy_task;

/* One eviction candidate: an idle replica on the memory node being freed. */
typedef struct odx__evict_cand {
	uint64_t buffer_id;
	uint64_t bytes;
	uint64_t last_use_ns;    /* odx__now_ns() of its last use (0: never used) */
	int priority;            /* higher: keep longer (e.g. wanted by a queued task) */
	bool dirty;              /* the only valid copy: evicting it writes it back first */
} odx__evict_cand;

/* One placed task waiting for its inputs. Arrays hold nbufs entries (its buffer arguments). */
typedef struct odx__prefetch_task {
	uint64_t task_id;
	int device;              /* 0-based device it is placed on */
	int priority;
	int nbufs;
	const uint64_t *buffer_ids;
	const uint64_t *missing_bytes; /* bytes of that buffer still to move onto the device (0: there) */
} odx__prefetch_task;

/* One task of a distributed submission, to be mapped to a rank. Arrays hold nbufs entries. */
typedef struct odx__rank_task {
	uint64_t task_id;
	const char *kernel;
	int priority;
	uint64_t bytes;          /* sum of its buffer arguments' sizes */
	const char *tag;         /* may be NULL */
	int nbufs;
	const int *owner_rank;   /* 0-based rank owning each buffer */
	const uint64_t *buf_bytes;
} odx__rank_task;

/*
 * Opens a host and loads the policy. A policy that fails to load still gives a host (returns 0,
 * the failure logged and described in err): it is disabled, every decision falls to the
 * built-in, and a corrected file is picked up by the reload check. Fails with ODX_ECONFIG only
 * for an unknown embedded name or an unreadable path, ODX_ENOMEM when out of memory.
 */
int odx__policy_open(odx__policy **out, const odx__policy_params *p, char *err, size_t errlen);
/* Persists the models (policy.model_dir) and frees everything. */
void odx__policy_close(odx__policy *h);

/*
 * Calls `place` once for tasks[0..n); queue[d] is the number of tasks queued on device d.
 * out[i] is the device chosen (0-based) or -1 where the built-in decides: the policy deferred
 * (0), failed, gave an invalid answer, or is disabled. Returns how many entries the policy
 * decided. Not thread-safe: one caller at a time (the glue holds its lock).
 */
int odx__policy_place(odx__policy *h, const odx__policy_task *tasks, int n, const int *queue,
		      int *out);
/* Records a completed task for the models; `on_complete` sees it with the next batch. Thread-safe. */
void odx__policy_feedback(odx__policy *h, const char *kernel, int device, uint64_t bytes,
			  uint64_t ns);
/* Re-reads the policy file if its modification time changed (at most every 100 ms unless
 * `force`); swaps the new version in only when it loads, initialises and passes its selftest. */
void odx__policy_check_reload(odx__policy *h, bool force);
bool odx__policy_enabled(const odx__policy *h);
/* Does anything read run times (the models)? False until the policy reads them or has a hook
 * that is shown them (policy_internal.h, want_times): until then workers read no clock per
 * task for it and odx__policy_feedback is not called. Lock-free. */
bool odx__policy_wants_times(const odx__policy *h);
/*
 * The other hooks on a host (the context seams below lock and call these; the test harness calls
 * them directly). One caller at a time, like odx__policy_place. Each returns < 0 when the policy
 * is disabled or lacks the hook, when the call fails (error, budget, memory) or when the answer
 * is invalid (the failure is counted and logged as for place); out arrays are then unspecified.
 *
 * evict: order[0..k) receives candidate indices, each at most once; returns k (0..n).
 * prefetch: order[0..k) receives window indices, each at most once; returns k.
 * place_rank: out_rank[i] is a 0-based rank or -1 where owner-computes decides (the policy left
 * it at 0, or the entry was invalid: then the call also counts as failed); returns how many
 * entries the policy decided. Runs under a deterministic instruction budget (policy.budget x
 * 100 instructions) and with odx.random reseeded from the batch's task ids, so that every rank
 * computes the same answer.
 * tick: queue[d] and done[d] (tasks completed on d since open) for on_tick; returns 0 or < 0.
 */
int odx__policy_host_evict(odx__policy *h, int memnode, uint64_t need, const odx__evict_cand *c,
			   int n, int *order);
int odx__policy_host_prefetch(odx__policy *h, const odx__prefetch_task *w, int n, int *order);
int odx__policy_host_place_rank(odx__policy *h, const odx__rank_task *b, int n, int nranks,
				int *out_rank);
int odx__policy_host_tick(odx__policy *h, const int *queue, const uint64_t *done);
/* Measured bandwidth of the link src_node -> dst_node (bytes/s > 0). Thread-safe; out-of-range
 * nodes and non-positive values are ignored. */
void odx__policy_host_set_bandwidth(odx__policy *h, int src_node, int dst_node,
				    double bytes_per_s);
/* The policy's display name (file path or lua:NAME). */
const char *odx__policy_name(const odx__policy *h);
/* Failed calls since open (test and stats). */
uint64_t odx__policy_failures(const odx__policy *h);

/* ---- context glue ---- */

/* One line for the context watchdog's state dump: the policy, and the hook it is running and
 * for how long, if any. Any thread; never blocks. */
void odx__policy_describe(odx_context *ctx, char *buf, size_t len);

/* Opens ctx->policy when the `policy` key names a Lua policy (after the devices are open). */
int odx__policy_ctx_open(odx_context *ctx, char *err, size_t errlen);
void odx__policy_ctx_close(odx_context *ctx);
/* A ready task: placed through the policy (batched; while every device has work it waits for
 * a device to run low, a full batch or the next tick); from odx__sched_push. May wait for a
 * hook call holding the policy's state, then place: never call it holding a device's queue lock
 * or ctx->shared_lock. */
void odx__policy_push(odx_context *ctx, odx__task *t);
/* A finished task, for the models and on_complete; places waiting tasks when its device runs
 * low (same locking rule as push); from odx__task_finish. */
void odx__policy_task_done(odx__task *t, int status);

/*
 * Seams for the tier manager and the fabric. Each is a no-op returning < 0 when the context has
 * no Lua policy, the policy lacks the hook, or the call fails or answers wrongly (C validates
 * every answer); the caller then uses its own default. Thread-safe: they wait for the policy's
 * Lua state (at most one placement batch or one hook call) and never place tasks themselves, so
 * they may be called with a memory node's or a buffer's lock held; never with a device's queue
 * lock or ctx->shared_lock, which a placement batch in progress needs to finish.
 */

/* evict(need, candidates, out): the policy orders up to n candidates (idle replicas on memory
 * node `memnode`) to free `need` bytes; writes indices into order[] (each at most once) and
 * returns how many. The caller evicts those first, then continues with its LRU order over the
 * rest if that did not free enough. < 0: the caller uses its LRU order. */
int odx__policy_evict(odx_context *ctx, int memnode, uint64_t need, const odx__evict_cand *c,
		      int n, int *order);
/* prefetch(window, out): which of the placed-but-waiting tasks' inputs to prefetch first;
 * writes task indices in order (each at most once) and returns how many. < 0: the caller's
 * default (submission order). */
int odx__policy_prefetch(odx_context *ctx, const odx__prefetch_task *w, int n, int *order);
/* place_rank(batch, out): deterministic task-to-rank mapping (every rank computes the same
 * answer); out_rank[i] a 0-based rank, or -1 where owner-computes decides. Returns how many
 * entries the policy decided; < 0: owner-computes for all. */
int odx__policy_place_rank(odx_context *ctx, const odx__rank_task *b, int n, int nranks,
			   int *out_rank);
/* Measured bandwidth of the link between two memory nodes, for the transfer estimates the
 * policy sees (batch.transfer, window.transfer, odx.bandwidth). No-op without a Lua policy. */
void odx__policy_set_bandwidth(odx_context *ctx, int src_node, int dst_node, double bytes_per_s);

#endif /* ODX_CORE_POLICY_H */
