/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_harness.c - runs a policy's Lua test (policies/NAME.test.lua) against the policy,
 * through the same host the runtime uses (docs/policies.md, "Testing a policy").
 *
 *   test_policy_harness POLICY TEST.lua
 *
 * POLICY is lua:NAME (embedded) or a path. Exits 0 when the test file ran to its end.
 *
 * The harness is test code and lives here, not in libodx: it opens the policy with the host's
 * own functions (odx__policy_open, odx__policy_place, the odx__policy_host_* hooks) and reaches
 * a few of its internals (the sandbox, the completion queue, queue lengths) through
 * core/policy/policy_internal.h, linked from odx_internal_dep.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "core.h"
#include "policy/policy_internal.h"

typedef struct harness {
	const char *spec;
	odx__policy *h;
	char last[ODX__MSG_MAX];
	bool verbose;
} harness;

static void harness_log(void *user, odx_log_level level, bool error, const char *msg)
{
	harness *hs = user;

	if (error)
		snprintf(hs->last, sizeof(hs->last), "%s", msg);
	if (hs->verbose)
		fprintf(stderr, "[policy %d] %s\n", (int)level, msg);
}

static harness *harness_of(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

static lua_Integer field_int(lua_State *L, int t, const char *k, lua_Integer def)
{
	lua_Integer v;

	lua_getfield(L, t, k);
	v = luaL_optinteger(L, -1, def);
	lua_pop(L, 1);
	return v;
}

/* harness.open{devices = {"host", {kind=, name=, memory=}, ...}, budget_us=, memory_limit=}:
 * true, or false and the load error. */
static int harness_open(lua_State *L)
{
	harness *hs = harness_of(L);
	odx__policy_device devs[64];
	char names[64][32], err[ODX__MSG_MAX] = "";
	odx__policy_params p;
	int nodes[64], nnodes = 0, nd, d, rc;

	luaL_checktype(L, 1, LUA_TTABLE);
	lua_getfield(L, 1, "devices");
	luaL_checktype(L, -1, LUA_TTABLE);
	nd = (int)lua_rawlen(L, -1);
	luaL_argcheck(L, nd >= 1 && nd <= 64, 1, "1 to 64 devices");
	for (d = 0; d < nd; d++) {
		lua_rawgeti(L, -1, d + 1);
		snprintf(names[d], sizeof(names[d]), "dev%d", d);
		devs[d] = (odx__policy_device){.kind = "host", .name = names[d], .memory = 1ull << 30};
		if (lua_isstring(L, -1)) {
			devs[d].kind = lua_tostring(L, -1);
		} else if (lua_istable(L, -1)) {
			lua_getfield(L, -1, "kind");
			if (lua_isstring(L, -1))
				devs[d].kind = lua_tostring(L, -1);
			lua_getfield(L, -2, "name");
			if (lua_isstring(L, -1))
				devs[d].name = lua_tostring(L, -1);
			lua_pop(L, 2);
			devs[d].memory = (uint64_t)field_int(L, -1, "memory", 1ll << 30);
		}
		nodes[d] = lua_istable(L, -1) ? (int)field_int(L, -1, "node", d + 1) - 1 : d;
		luaL_argcheck(L, nodes[d] >= 0 && nodes[d] < 64, 1, "node: 1 to 64");
		nnodes = nodes[d] + 1 > nnodes ? nodes[d] + 1 : nnodes;
		lua_pop(L, 1); /* the strings stay alive in the machine table */
	}
	p = (odx__policy_params){
		.spec = hs->spec,
		.ndevices = nd,
		.devices = devs,
		.nnodes = nnodes,
		.device_node = nodes,
		.memory_limit = (uint64_t)field_int(L, 1, "memory_limit", 8 << 20),
		.budget_ns = 1000u * (uint64_t)field_int(L, 1, "budget_us", 1000),
		.log = harness_log,
		.log_user = hs,
	};
	odx__policy_close(hs->h);
	hs->h = NULL;
	hs->last[0] = '\0';
	rc = odx__policy_open(&hs->h, &p, err, sizeof(err));
	if (rc)
		return luaL_error(L, "harness.open: %s", err);
	lua_pushboolean(L, odx__policy_enabled(hs->h));
	if (!odx__policy_enabled(hs->h)) {
		lua_pushstring(L, err);
		return 2;
	}
	return 1;
}

static uint64_t row_value(lua_State *L, int t, const char *k, int d, uint64_t def)
{
	uint64_t v = def;

	lua_getfield(L, t, k);
	if (lua_istable(L, -1)) {
		lua_rawgeti(L, -1, d + 1);
		if (lua_isboolean(L, -1))
			v = (uint64_t)lua_toboolean(L, -1);
		else if (lua_isinteger(L, -1))
			v = (uint64_t)lua_tointeger(L, -1);
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	return v;
}

/* Pushes the answer of an order hook: the 1-based list, or nil and the failure. */
static int push_order(lua_State *L, harness *hs, int rc, const int *order)
{
	int i;

	if (rc < 0) {
		lua_pushnil(L);
		lua_pushstring(L, hs->last[0] ? hs->last : odx_strerror(rc));
		return 2;
	}
	lua_createtable(L, rc, 0);
	for (i = 0; i < rc; i++) {
		lua_pushinteger(L, order[i] + 1);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/* push_order for a per-task answer, plus the failure the policy host recorded during the call
 * (the C fallback answered those entries): the answers, and that message as a second value. */
static int push_answer(lua_State *L, harness *hs, int rc, const int *out, uint64_t before)
{
	int nret = push_order(L, hs, rc, out);

	if (nret == 1 && odx__policy_failures(hs->h) != before) {
		lua_pushstring(L, hs->last);
		return 2;
	}
	return nret;
}

/* harness.place(tasks [, queue]): the answers (1-based devices, 0 for the built-in) and the
 * failure message of this call, if any. */
static int harness_place(lua_State *L)
{
	harness *hs = harness_of(L);
	odx__policy_task tasks[POL_BATCH_MAX];
	static bool feas[POL_BATCH_MAX * 64];
	static uint64_t res[POL_BATCH_MAX * 64], mis[POL_BATCH_MAX * 64];
	int queue[64], out[POL_BATCH_MAX], n, nd, i, d;
	uint64_t before;

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 1, LUA_TTABLE);
	nd = hs->h->nd;
	n = (int)lua_rawlen(L, 1);
	luaL_argcheck(L, n <= POL_BATCH_MAX, 1, "too many tasks");
	for (d = 0; d < nd; d++) {
		queue[d] = 0;
		if (lua_istable(L, 2)) {
			lua_rawgeti(L, 2, d + 1);
			queue[d] = (int)luaL_optinteger(L, -1, 0);
			lua_pop(L, 1);
		}
	}
	for (i = 0; i < n; i++) {
		int t;

		lua_rawgeti(L, 1, i + 1);
		t = lua_gettop(L);
		luaL_checktype(L, t, LUA_TTABLE);
		lua_getfield(L, t, "kernel");
		tasks[i] = (odx__policy_task){
			.kernel = lua_isstring(L, -1) ? lua_tostring(L, -1) : "k",
			.priority = (int)field_int(L, t, "priority", 0),
			.bytes = (uint64_t)field_int(L, t, "bytes", 0),
			.tag = "",
			.feasible = &feas[i * nd],
			.resident = &res[i * nd],
			.missing = &mis[i * nd],
		};
		for (d = 0; d < nd; d++) {
			feas[i * nd + d] = row_value(L, t, "feasible", d, 1) != 0;
			res[i * nd + d] = row_value(L, t, "resident", d, 0);
			mis[i * nd + d] = row_value(L, t, "missing", d,
						    tasks[i].bytes > res[i * nd + d]
							    ? tasks[i].bytes - res[i * nd + d]
							    : 0);
		}
		/* the kernel string stays referenced by the caller's task table */
		lua_settop(L, t - 1);
	}
	before = odx__policy_failures(hs->h);
	hs->last[0] = '\0';
	odx__policy_place(hs->h, tasks, n, queue, out);
	return push_answer(L, hs, n, out, before);
}

/* harness.complete(kernel, device, bytes, us): one completed task for the model. */
static int harness_complete(lua_State *L)
{
	harness *hs = harness_of(L);
	const char *k = luaL_checkstring(L, 1);
	lua_Integer d = luaL_checkinteger(L, 2);

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_argcheck(L, d >= 1 && d <= hs->h->nd, 2, "no such device");
	/* The kernel name must outlive the event: models copy it when processed, right here. */
	odx__policy_feedback(hs->h, k, (int)d - 1, (uint64_t)luaL_checkinteger(L, 3),
			     (uint64_t)(luaL_checknumber(L, 4) * 1000.0));
	pol_process_events(hs->h);
	return 0;
}

#define HARNESS_BUFS 16 /* buffers per task in the harness's synthetic lists */

/* Reads list `k` of a task table: up to HARNESS_BUFS tables, `f1` and `f2` of each. */
static int read_bufs(lua_State *L, int t, const char *k, const char *f1, uint64_t *v1,
		     const char *f2, uint64_t *v2)
{
	int n = 0;

	lua_getfield(L, t, k);
	if (lua_istable(L, -1)) {
		n = (int)lua_rawlen(L, -1);
		luaL_argcheck(L, n <= HARNESS_BUFS, 1, "too many buffers");
		for (int j = 0; j < n; j++) {
			lua_rawgeti(L, -1, j + 1);
			luaL_checktype(L, -1, LUA_TTABLE);
			v1[j] = (uint64_t)field_int(L, -1, f1, 0);
			v2[j] = (uint64_t)field_int(L, -1, f2, 0);
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);
	return n;
}

/* harness.evict(need, {{id=, bytes=, last_use=ns, priority=, dirty=}, ...} [, node]): the
 * order (1-based), or nil and the failure. */
static int harness_evict(lua_State *L)
{
	harness *hs = harness_of(L);
	odx__evict_cand c[POL_BATCH_MAX];
	int order[POL_BATCH_MAX], n, i, rc;
	lua_Integer need = luaL_checkinteger(L, 1);

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 2, LUA_TTABLE);
	n = (int)lua_rawlen(L, 2);
	luaL_argcheck(L, n <= POL_BATCH_MAX, 2, "too many candidates");
	for (i = 0; i < n; i++) {
		lua_rawgeti(L, 2, i + 1);
		luaL_checktype(L, -1, LUA_TTABLE);
		c[i] = (odx__evict_cand){
			.buffer_id = (uint64_t)field_int(L, -1, "id", i + 1),
			.bytes = (uint64_t)field_int(L, -1, "bytes", 0),
			.last_use_ns = (uint64_t)field_int(L, -1, "last_use", 0),
			.priority = (int)field_int(L, -1, "priority", 0),
		};
		lua_getfield(L, -1, "dirty");
		c[i].dirty = lua_toboolean(L, -1);
		lua_pop(L, 2);
	}
	hs->last[0] = '\0';
	rc = odx__policy_host_evict(hs->h, (int)luaL_optinteger(L, 3, 1) - 1, (uint64_t)need, c, n,
				    order);
	return push_order(L, hs, rc, order);
}

/* harness.prefetch({{task=, device=, priority=, buffers={{id=, missing=}, ...}}, ...}
 * [, queue]): the order (1-based), or nil and the failure. */
static int harness_prefetch(lua_State *L)
{
	harness *hs = harness_of(L);
	static odx__prefetch_task w[POL_BATCH_MAX];
	static uint64_t ids[POL_BATCH_MAX][HARNESS_BUFS], miss[POL_BATCH_MAX][HARNESS_BUFS];
	int order[POL_BATCH_MAX], n, i, rc;

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 1, LUA_TTABLE);
	n = (int)lua_rawlen(L, 1);
	luaL_argcheck(L, n <= POL_BATCH_MAX, 1, "too many tasks");
	for (i = 0; i < hs->h->nd && lua_istable(L, 2); i++) {
		lua_rawgeti(L, 2, i + 1);
		hs->h->qnow[i] = (int)luaL_optinteger(L, -1, 0);
		lua_pop(L, 1);
	}
	for (i = 0; i < n; i++) {
		lua_rawgeti(L, 1, i + 1);
		luaL_checktype(L, -1, LUA_TTABLE);
		w[i] = (odx__prefetch_task){
			.task_id = (uint64_t)field_int(L, -1, "task", i + 1),
			.device = (int)field_int(L, -1, "device", 1) - 1,
			.priority = (int)field_int(L, -1, "priority", 0),
			.buffer_ids = ids[i],
			.missing_bytes = miss[i],
		};
		w[i].nbufs = read_bufs(L, lua_gettop(L), "buffers", "id", ids[i], "missing", miss[i]);
		lua_pop(L, 1);
	}
	hs->last[0] = '\0';
	rc = odx__policy_host_prefetch(hs->h, w, n, order);
	return push_order(L, hs, rc, order);
}

/* harness.place_rank({{task=, kernel=, priority=, bytes=, tag=, buffers={{owner=, bytes=},
 * ...}}, ...}, nranks): the ranks (1-based, 0 where owner-computes decides) and the failure of
 * this call, if any; nil and the failure when the whole call fell back. */
static int harness_place_rank(lua_State *L)
{
	harness *hs = harness_of(L);
	static odx__rank_task b[POL_BATCH_MAX];
	static uint64_t owner64[POL_BATCH_MAX][HARNESS_BUFS], bytes[POL_BATCH_MAX][HARNESS_BUFS];
	static int owner[POL_BATCH_MAX][HARNESS_BUFS];
	int out[POL_BATCH_MAX], n, i, j, rc, nranks = (int)luaL_checkinteger(L, 2);
	uint64_t before;

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 1, LUA_TTABLE);
	n = (int)lua_rawlen(L, 1);
	luaL_argcheck(L, n <= POL_BATCH_MAX, 1, "too many tasks");
	for (i = 0; i < n; i++) {
		lua_rawgeti(L, 1, i + 1);
		luaL_checktype(L, -1, LUA_TTABLE);
		b[i] = (odx__rank_task){
			.task_id = (uint64_t)field_int(L, -1, "task", i + 1),
			.priority = (int)field_int(L, -1, "priority", 0),
			.bytes = (uint64_t)field_int(L, -1, "bytes", 0),
			.owner_rank = owner[i],
			.buf_bytes = bytes[i],
		};
		lua_getfield(L, -1, "kernel");
		b[i].kernel = lua_isstring(L, -1) ? lua_tostring(L, -1) : "k";
		lua_getfield(L, -2, "tag");
		b[i].tag = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
		lua_pop(L, 2); /* the strings stay referenced by the caller's task table */
		b[i].nbufs = read_bufs(L, lua_gettop(L), "buffers", "owner", owner64[i], "bytes",
				       bytes[i]);
		for (j = 0; j < b[i].nbufs; j++)
			owner[i][j] = (int)owner64[i][j] - 1;
		lua_pop(L, 1);
	}
	before = odx__policy_failures(hs->h);
	hs->last[0] = '\0';
	rc = odx__policy_host_place_rank(hs->h, b, n, nranks, out);
	return push_answer(L, hs, rc < 0 ? rc : n, out, before);
}

/* harness.tick([queue [, done]]): true, or false and the failure. */
static int harness_tick(lua_State *L)
{
	harness *hs = harness_of(L);
	int queue[64] = {0}, i, rc;
	uint64_t done[64] = {0};

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	for (i = 0; i < hs->h->nd; i++) {
		if (lua_istable(L, 1)) {
			lua_rawgeti(L, 1, i + 1);
			queue[i] = (int)luaL_optinteger(L, -1, 0);
			lua_pop(L, 1);
		}
		if (lua_istable(L, 2)) {
			lua_rawgeti(L, 2, i + 1);
			done[i] = (uint64_t)luaL_optinteger(L, -1, 0);
			lua_pop(L, 1);
		}
	}
	hs->last[0] = '\0';
	rc = odx__policy_host_tick(hs->h, queue, done);
	lua_pushboolean(L, rc == 0);
	if (rc == 0)
		return 1;
	lua_pushstring(L, hs->last[0] ? hs->last : odx_strerror(rc));
	return 2;
}

/* harness.bandwidth(src, dst, bytes_per_s): a measured link (1-based memory nodes). */
static int harness_bandwidth(lua_State *L)
{
	harness *hs = harness_of(L);

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	odx__policy_host_set_bandwidth(hs->h, (int)luaL_checkinteger(L, 1) - 1,
				       (int)luaL_checkinteger(L, 2) - 1, luaL_checknumber(L, 3));
	return 0;
}

static int harness_failures(lua_State *L)
{
	harness *hs = harness_of(L);

	lua_pushinteger(L, hs->h ? (lua_Integer)odx__policy_failures(hs->h) : 0);
	lua_pushboolean(L, hs->h && odx__policy_enabled(hs->h));
	return 2;
}

static int harness_run(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{"open", harness_open},
		{"place", harness_place},
		{"complete", harness_complete},
		{"failures", harness_failures},
		{"evict", harness_evict},
		{"prefetch", harness_prefetch},
		{"place_rank", harness_place_rank},
		{"tick", harness_tick},
		{"bandwidth", harness_bandwidth},
		{NULL, NULL},
	};
	harness *hs = lua_touserdata(L, 1);
	const char *path = lua_tostring(L, 2);

	pol_sandbox(L, false);
	if (luaL_loadfilex(L, path, "t") != LUA_OK)
		lua_error(L);
	luaL_newlibtable(L, funcs);
	lua_pushlightuserdata(L, hs);
	luaL_setfuncs(L, funcs, 1);
	lua_call(L, 1, 0);
	return 0;
}

/*
 * Runs the Lua test file `test_path` in a sandboxed state with a harness table as its argument
 * (docs/policies.md, "Testing a policy"): harness.open(machine) opens the policy `spec` on a
 * synthetic machine, harness.place(tasks, queue) returns the answers, harness.complete(...)
 * feeds the model; harness.evict, .prefetch, .place_rank and .tick call the other hooks through
 * the odx__policy_host_* functions, harness.bandwidth sets a measured link. Returns 0, or
 * ODX_EINVAL with the failure (file, line, traceback) in err.
 */
static int harness_test_run(const char *spec, const char *test_path, char *err, size_t errlen)
{
	harness hs = {.spec = spec, .verbose = getenv("ODX_POLICY_TEST_VERBOSE") != NULL};
	lua_State *L = luaL_newstate();
	int rc;

	if (!L)
		return ODX_ENOMEM;
	*(odx__policy **)lua_getextraspace(L) = NULL;
	lua_pushcfunction(L, pol_traceback);
	lua_pushcfunction(L, harness_run);
	lua_pushlightuserdata(L, &hs);
	lua_pushstring(L, test_path);
	rc = lua_pcall(L, 2, 0, 1);
	if (rc != LUA_OK)
		snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
	lua_close(L);
	odx__policy_close(hs.h);
	return rc == LUA_OK ? 0 : ODX_EINVAL;
}

int main(int argc, char **argv)
{
	char err[4096];

	if (argc != 3) {
		fprintf(stderr, "usage: %s POLICY TEST.lua\n", argv[0]);
		return 2;
	}
	if (harness_test_run(argv[1], argv[2], err, sizeof(err)) != 0) {
		fprintf(stderr, "FAIL %s on %s:\n%s\n", argv[2], argv[1], err);
		return 1;
	}
	printf("ok %s on %s\n", argv[2], argv[1]);
	return 0;
}
