/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.h - the Lua policy host (DESIGN section 8, docs/policies.md).
 *
 * policy.c is the only file that includes the Lua headers. It has two layers:
 *
 *  - the host proper (odx__policy_open .. odx__policy_close): one sandboxed lua_State per
 *    policy, a capped allocator, a per-call CPU budget enforced by a watchdog thread, the
 *    performance models; it knows nothing of tasks or contexts, so the test harness drives it
 *    with synthetic batches;
 *  - the context glue (odx__policy_ctx_*): ready tasks are appended to a pending list and
 *    whoever takes the policy lock drains the whole list into one `place` call (flat
 *    combining), then queues each task on the device chosen, or on the built-in policy's
 *    choice for the entries the policy left out or got wrong.
 *
 * Seams for later issues: `place_rank`, `prefetch` and `evict` are validated at load (they must
 * be functions if present) but never called yet; odx__policy_has_hook() tells the fabric and
 * tier code whether a policy defines one, and their calls go next to odx__policy_place.
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
	uint64_t memory_limit;   /* bytes the Lua state may allocate */
	uint64_t budget_ns;      /* CPU time of one hook call; loading gets 100 times this */
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
} odx__policy_task;

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
/* Is hook `name` ("place_rank", "prefetch", "evict", ...) defined by the running policy? */
bool odx__policy_has_hook(const odx__policy *h, const char *name);
/* The policy's display name (file path or lua:NAME). */
const char *odx__policy_name(const odx__policy *h);
/* Failed calls since open (test and stats). */
uint64_t odx__policy_failures(const odx__policy *h);

/* ---- context glue ---- */

/* Opens ctx->policy when the `policy` key names a Lua policy (after the devices are open). */
int odx__policy_ctx_open(odx_context *ctx, char *err, size_t errlen);
void odx__policy_ctx_close(odx_context *ctx);
/* A ready task: placed through the policy (batched); from odx__sched_push. */
void odx__policy_push(odx_context *ctx, odx__task *t);
/* A finished task, for the models and on_complete; from odx__task_finish. */
void odx__policy_task_done(odx__task *t, int status);

/* ---- test harness ---- */

/*
 * Runs the Lua test file `test_path` in a sandboxed state with a harness table as its argument
 * (docs/policies.md, "Testing a policy"): harness.open(machine) opens the policy `spec` on a
 * synthetic machine, harness.place(tasks, queue) returns the answers, harness.complete(...)
 * feeds the model. Returns 0, or ODX_EINVAL with the failure (file, line, traceback) in err.
 */
int odx__policy_test_run(const char *spec, const char *test_path, char *err, size_t errlen);

#endif /* ODX_CORE_POLICY_H */
