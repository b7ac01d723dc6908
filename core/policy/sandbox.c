/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox.c - what a policy's Lua state can reach: the capped allocator, the odx.* library
 * (log, random, argmin, estimate, bandwidth), and the standard library trimmed and wrapped so
 * that nothing a policy calls runs outside its budget (docs/policies.md, "What a policy cannot
 * do"). The test harness's state is built by the same function, with no host behind it (the
 * library functions then fall back to their harness defaults).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "core.h"
#include "policy_internal.h"

/* ---- the sandbox ---------------------------------------------------------------------------- */

static void blk_link(pol_state *s, pol_blk *b)
{
	b->prev = &s->blocks;
	b->next = s->blocks.next;
	s->blocks.next->prev = b;
	s->blocks.next = b;
}

static void blk_unlink(pol_blk *b)
{
	b->prev->next = b->next;
	b->next->prev = b->prev;
}

/* Lua's allocator: capped at policy.memory_limit, every block on the state's list. The list
 * and malloc are inconsistent only inside the unsafe region, where no escape lands. */
void *pol_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	pol_state *s = ud;
	pol_escape *e = s->esc;
	pol_blk *b = ptr ? (pol_blk *)ptr - 1 : NULL, *nb;
	size_t old = ptr ? osize : 0;

	if (nsize > old && s->used + (nsize - old) > s->limit)
		return NULL;
	pol_unsafe_enter(e);
	if (b)
		blk_unlink(b);
	if (nsize == 0) {
		free(b);
		s->used -= old;
		pol_unsafe_leave(e);
		return NULL;
	}
	nb = realloc(b, sizeof(pol_blk) + nsize);
	if (!nb) {
		if (b)
			blk_link(s, b);
		pol_unsafe_leave(e);
		return nsize <= old ? ptr : NULL; /* Lua assumes shrinking never fails */
	}
	blk_link(s, nb);
	s->used = s->used - old + nsize;
	pol_unsafe_leave(e);
	return nb + 1;
}

int pol_traceback(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);

	if (!msg)
		msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
	luaL_traceback(L, L, msg, 1);
	return 1;
}

static odx__policy *host_of(lua_State *L)
{
	return *(odx__policy **)lua_getextraspace(L);
}

/* odx.log(...) and print(...): to the context's log, at info level. */
static int lua_odx_log(lua_State *L)
{
	odx__policy *h = host_of(L);
	luaL_Buffer b;
	int i, n = lua_gettop(L);

	luaL_buffinit(L, &b);
	for (i = 1; i <= n; i++) {
		if (i > 1)
			luaL_addchar(&b, '\t');
		luaL_tolstring(L, i, NULL);
		luaL_addvalue(&b);
	}
	luaL_pushresult(&b);
	/* The log takes the context's locks and stdio: no escape may land inside. */
	pol_unsafe_enter(pol_esc_now);
	if (h)
		pol_say(h, ODX_LOG_INFO, false, "policy %s: %.*s", h->display, ODX__MSG_MAX,
			lua_tostring(L, -1));
	else
		fprintf(stderr, "%.*s\n", ODX__MSG_MAX, lua_tostring(L, -1)); /* the harness's state */
	pol_unsafe_leave(pol_esc_now);
	return 0;
}

/* xorshift64*, seeded the same way on every run. */
static uint64_t next_random(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 2685821657736338717ull;
}

/* A uniform draw in [0, range] (range + 1 values, the full 64 bits when range is UINT64_MAX):
 * rejection of the draws that would bias the remainder; fewer than 2 draws on average. */
static uint64_t random_below(uint64_t *x, uint64_t range)
{
	uint64_t r = next_random(x), n = range + 1, floor_ok;

	if (range == UINT64_MAX)
		return r;
	floor_ok = (0 - n) % n; /* 2^64 mod n: draws below it are rejected */
	while (r < floor_ok)
		r = next_random(x);
	return r % n;
}

/* odx.random(): [0, 1); odx.random(m): 1..m; odx.random(m, n): m..n; odx.random(0): an integer
 * with all bits random (as math.random). Any bounds with m <= n, the full integer range
 * included; computed in unsigned arithmetic, so nothing overflows. */
static int lua_odx_random(lua_State *L)
{
	/* A state with no host (the test harness's): its own stream, same seed as a host's. */
	static _Thread_local uint64_t hostless_rng = 0x2545f4914f6cdd1dull;
	odx__policy *h = host_of(L);
	uint64_t *x = h ? h->rng_now : &hostless_rng;
	lua_Integer lo = 1, hi;

	if (lua_gettop(L) == 0) {
		lua_pushnumber(L, (lua_Number)(next_random(x) >> 11) * (1.0 / 9007199254740992.0));
		return 1;
	}
	hi = luaL_checkinteger(L, 1);
	if (lua_gettop(L) >= 2) {
		lo = hi;
		hi = luaL_checkinteger(L, 2);
	} else if (hi == 0) {
		lua_pushinteger(L, (lua_Integer)next_random(x));
		return 1;
	}
	luaL_argcheck(L, lo <= hi, lua_gettop(L) >= 2 ? 2 : 1, "interval is empty");
	lua_pushinteger(L, (lua_Integer)((uint64_t)lo + random_below(x, (uint64_t)hi - (uint64_t)lo)));
	return 1;
}

/* odx.argmin(row [, n]): index and value of the smallest number in row[1..n]; nil if none. n is
 * clamped to the row's raw length: the loop never runs past the entries that exist. */
static int lua_odx_argmin(lua_State *L)
{
	lua_Integer n, i, best = 0, len;
	lua_Number bestv = 0;

	luaL_checktype(L, 1, LUA_TTABLE);
	len = (lua_Integer)lua_rawlen(L, 1);
	n = luaL_optinteger(L, 2, len);
	if (n > len)
		n = len;
	for (i = 1; i <= n; i++) {
		int isnum;
		lua_Number v;

		if (lua_rawgeti(L, 1, i) != LUA_TNUMBER) {
			lua_pop(L, 1);
			continue;
		}
		v = lua_tonumberx(L, -1, &isnum);
		lua_pop(L, 1);
		if (isnum && (best == 0 || v < bestv)) {
			best = i;
			bestv = v;
		}
	}
	if (best == 0)
		return 0;
	lua_pushinteger(L, best);
	lua_pushnumber(L, bestv);
	return 2;
}

/* odx.estimate(kernel, device, bytes): mean and standard deviation in us, and the sample count;
 * nil when the model has no sample. */
static int lua_odx_estimate(lua_State *L)
{
	odx__policy *h = host_of(L);
	const char *k = luaL_checkstring(L, 1);
	lua_Integer d = luaL_checkinteger(L, 2);
	lua_Integer bytes = luaL_optinteger(L, 3, 0);
	pol_model *e;

	pol_want_times(h);
	if (d < 1 || d > h->nd || bytes < 0)
		return 0;
	e = pol_model_find(h, k, pol_str_hash(k), (int)d - 1, pol_size_bucket((uint64_t)bytes), false);
	if (!e || e->n == 0)
		return 0;
	lua_pushnumber(L, e->mean);
	lua_pushnumber(L, e->n > 1 ? sqrt(e->m2 / (double)(e->n - 1)) : 0);
	lua_pushinteger(L, (lua_Integer)e->n);
	return 3;
}

/* odx.bandwidth(src, dst): measured bytes/s of the link between two memory nodes (1-based);
 * math.huge within a node, nil for a node that does not exist. */
static int lua_odx_bandwidth(lua_State *L)
{
	odx__policy *h = host_of(L);
	lua_Integer a = luaL_checkinteger(L, 1), b = luaL_checkinteger(L, 2);

	if (!h || a < 1 || b < 1 || a > h->nnodes || b > h->nnodes)
		return 0;
	if (a == b)
		lua_pushnumber(L, HUGE_VAL);
	else
		lua_pushnumber(L, atomic_load_explicit(&h->bw[(a - 1) * h->nnodes + (b - 1)],
						       memory_order_relaxed));
	return 1;
}

/* ---- closing the hook-less holes (docs/policies.md, "What a policy cannot do") -------------- */

/* setmetatable without finalizers: Lua runs __gc with hooks off (during any allocation and at
 * lua_close), where no budget applies. Lua marks an object for finalization only when its
 * metatable has __gc as setmetatable is called, so refusing it here is enough; adding __gc to
 * the metatable later has no effect. */
static int sandbox_setmetatable(lua_State *L)
{
	int t = lua_type(L, 2);

	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
	if (t == LUA_TTABLE) {
		lua_pushliteral(L, "__gc");
		if (lua_rawget(L, 2) != LUA_TNIL)
			return luaL_error(L, "setmetatable: a metatable with __gc is not allowed in a "
					  "policy (finalizers run outside the budget)");
		lua_pop(L, 1);
	}
	if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
		return luaL_error(L, "cannot change a protected metatable");
	lua_settop(L, 2);
	lua_setmetatable(L, 1);
	return 1;
}

/* xpcall(f, msgh, ...) that runs msgh after the stack has unwound, as an ordinary call: Lua
 * runs a message handler before unwinding and, for an error raised by the budget hook, with
 * hooks off. The handler sees the error object, not the failing frames (no `debug` anyway). */
static int sandbox_xpcall(lua_State *L)
{
	int n = lua_gettop(L), i;

	luaL_checktype(L, 2, LUA_TFUNCTION);
	lua_pushvalue(L, 1);
	for (i = 3; i <= n; i++)
		lua_pushvalue(L, i);
	if (lua_pcall(L, n - 2 < 0 ? 0 : n - 2, LUA_MULTRET, 0) == LUA_OK) {
		lua_pushboolean(L, 1);
		lua_insert(L, n + 1);
		return lua_gettop(L) - n;
	}
	/* The handler's own failure (the budget's sticky error included) is the result. */
	lua_pushvalue(L, 2);
	lua_insert(L, n + 1);
	lua_pcall(L, 1, 1, 0);
	lua_pushboolean(L, 0);
	lua_insert(L, -2);
	return 2;
}

/* string.rep(s, n [, sep]) with an empty result answered at once: Lua's loops n times in C
 * copying nothing, which no allocation cap bounds. A non-empty result is bounded by the cap. */
static int sandbox_rep(lua_State *L)
{
	size_t l, lsep = 0;
	lua_Integer n;

	luaL_checklstring(L, 1, &l);
	n = luaL_checkinteger(L, 2);
	luaL_optlstring(L, 3, "", &lsep);
	if (n <= 0 || (l == 0 && (lsep == 0 || n == 1))) {
		lua_pushliteral(L, "");
		return 1;
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* The most elements a table library loop may move: more than the memory cap can hold means
 * a __len that lies or a range of holes, each element a C iteration no cap bounds. */
static lua_Integer max_range(lua_State *L)
{
	odx__policy *h = *(odx__policy **)lua_getextraspace(L);
	uint64_t lim = h ? h->limit / 8 : (1ull << 26);

	return (lua_Integer)(lim < 4096 ? 4096 : lim);
}

/* table.insert, table.remove: refused on a table whose length (with __len) exceeds max_range. */
static int sandbox_table_shift(lua_State *L)
{
	lua_Integer len;

	luaL_checktype(L, 1, LUA_TTABLE);
	len = luaL_len(L, 1);
	if (len > max_range(L))
		return luaL_error(L, "table length %I is more than a policy's memory can hold",
				  (LUAI_UACINT)len);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

/* table.move(a1, f, e, t [, a2]): refused for a range longer than max_range. */
static int sandbox_table_move(lua_State *L)
{
	lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);

	if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= (lua_Unsigned)max_range(L))
		return luaL_error(L, "table.move: range of %I elements is more than a policy's "
				  "memory can hold", (LUAI_UACINT)((lua_Unsigned)e - (lua_Unsigned)f));
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

/* Replaces lib[name] by a closure of `f` over the original function. */
static void wrap_lib(lua_State *L, int lib, const char *name, lua_CFunction f)
{
	lua_getfield(L, lib, name);
	lua_pushcclosure(L, f, 1);
	lua_setfield(L, lib, name);
}

/* Opens the allowed libraries and removes what a policy must not reach. */
void pol_sandbox(lua_State *L, bool with_odx)
{
	static const luaL_Reg libs[] = {
		{LUA_GNAME, luaopen_base},     {LUA_TABLIBNAME, luaopen_table},
		{LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
		{LUA_UTF8LIBNAME, luaopen_utf8},
	};
	static const char *const removed[] = {"dofile", "loadfile", "load", "collectgarbage",
					      "require", "warn"};
	size_t i;

	for (i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		luaL_requiref(L, libs[i].name, libs[i].func, 1);
		lua_pop(L, 1);
	}
	lua_pushglobaltable(L);
	for (i = 0; i < sizeof(removed) / sizeof(removed[0]); i++) {
		lua_pushnil(L);
		lua_setfield(L, -2, removed[i]);
	}
	lua_pushcfunction(L, lua_odx_log);
	lua_setfield(L, -2, "print");
	lua_pushcfunction(L, sandbox_setmetatable);
	lua_setfield(L, -2, "setmetatable");
	lua_pushcfunction(L, sandbox_xpcall);
	lua_setfield(L, -2, "xpcall");
	/* The string table is also the strings' __index: s:rep() gets the wrapper too. */
	lua_getfield(L, -1, LUA_STRLIBNAME);
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	wrap_lib(L, lua_gettop(L), "rep", sandbox_rep);
	lua_pop(L, 1);
	lua_getfield(L, -1, LUA_TABLIBNAME);
	wrap_lib(L, lua_gettop(L), "insert", sandbox_table_shift);
	wrap_lib(L, lua_gettop(L), "remove", sandbox_table_shift);
	wrap_lib(L, lua_gettop(L), "move", sandbox_table_move);
	lua_pop(L, 1);
	/* math.random is seeded from the clock: replace it with the deterministic one. */
	lua_getfield(L, -1, LUA_MATHLIBNAME);
	lua_pushcfunction(L, lua_odx_random);
	lua_setfield(L, -2, "random");
	lua_pushnil(L);
	lua_setfield(L, -2, "randomseed");
	lua_pop(L, 1);
	if (with_odx) {
		static const luaL_Reg odx_funcs[] = {
			{"log", lua_odx_log},
			{"random", lua_odx_random},
			{"argmin", lua_odx_argmin},
			{"estimate", lua_odx_estimate},
			{"bandwidth", lua_odx_bandwidth},
			{NULL, NULL},
		};

		luaL_newlib(L, odx_funcs);
		lua_setfield(L, -2, "odx");
	}
	lua_pop(L, 1);
	/* Lock the string metatable: getmetatable("") answers a string, not the table. */
	lua_pushliteral(L, "");
	lua_getmetatable(L, -1);
	lua_pushliteral(L, "locked");
	lua_setfield(L, -2, "__metatable");
	lua_pop(L, 2);
}
