/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops.c - the operations run inside a state (under lua_pcall, by pol_run_op): loading the file,
 * and for each hook filling the tables it reads and checking what it answers. The input tables
 * are made once per state and reused; place inputs are filled only once a policy has read them,
 * and then only the entries that changed (struct shadow). Every answer is validated here: a
 * policy never hands C an index or a device it did not check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "core.h"
#include "policy_internal.h"

#define RANK_INSTR_PER_US 100    /* place_rank's instruction budget per us of policy.budget */

/* ---- protected operations on a state -------------------------------------------------------- */

static void raw_setfield(lua_State *L, int t, const char *k)
{
	t = lua_absindex(L, t);
	lua_pushstring(L, k);
	lua_insert(L, -2);
	lua_rawset(L, t);
}

static int newref_table(lua_State *L, int narr)
{
	lua_createtable(L, narr, 0);
	return luaL_ref(L, LUA_REGISTRYINDEX);
}

static const char *const lazy_names[LAZY_LAST - LAZY_FIRST + 1] = {
	"kernel", "priority", "bytes", "tag", "feasible", "estimate", "transfer", "resident_bytes",
	"queue", "free_at",
};

static void fill_lazy(lua_State *L, pol_state *s, const struct pol_op_args *a, int t);

/* __index of a place batch: the first read of an input fills it and keeps it in the batch. */
static int batch_index(lua_State *L)
{
	pol_state *s = lua_touserdata(L, lua_upvalueindex(1));
	const char *k = lua_tostring(L, 2);
	int t;

	if (!k || lua_type(L, 2) != LUA_TSTRING || !s->place_args)
		return 0;
	for (t = LAZY_FIRST; t <= LAZY_LAST; t++)
		if (strcmp(k, lazy_names[t - LAZY_FIRST]) == 0)
			break;
	if (t > LAZY_LAST)
		return 0;
	s->lazy_used |= LAZY_BIT(t);
	if (t == T_ESTIMATE || t == T_FREE_AT)
		pol_want_times(s->h);
	fill_lazy(L, s, s->place_args, t);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
	lua_pushvalue(L, 2);
	lua_pushvalue(L, -2);
	lua_rawset(L, 1);
	return 1;
}

static void setup_tables(lua_State *L, pol_state *s)
{
	static const struct {
		int parent;
		const char *field;
	} fields[T_COUNT] = {
		[T_KERNEL] = {T_BATCH, "kernel"},     [T_PRIORITY] = {T_BATCH, "priority"},
		[T_BYTES] = {T_BATCH, "bytes"},       [T_TAG] = {T_BATCH, "tag"},
		[T_FEASIBLE] = {T_BATCH, "feasible"}, [T_ESTIMATE] = {T_BATCH, "estimate"},
		[T_TRANSFER] = {T_BATCH, "transfer"}, [T_RESIDENT] = {T_BATCH, "resident_bytes"},
		[T_QUEUE] = {T_BATCH, "queue"},       [T_FREE_AT] = {T_BATCH, "free_at"},
		[T_OUT_DEVICE] = {T_OUT, "device"},   [T_EV_KERNEL] = {T_EVENTS, "kernel"},
		[T_EV_DEVICE] = {T_EVENTS, "device"}, [T_EV_BYTES] = {T_EVENTS, "bytes"},
		[T_EV_US] = {T_EVENTS, "us"},
		[T_CAND_BUFFER] = {T_CAND, "buffer"}, [T_CAND_BYTES] = {T_CAND, "bytes"},
		[T_CAND_AGE] = {T_CAND, "age_us"},    [T_CAND_PRIORITY] = {T_CAND, "priority"},
		[T_CAND_DIRTY] = {T_CAND, "dirty"},   [T_EVICT_ORDER] = {T_EVICT_OUT, "order"},
		[T_WIN_TASK] = {T_WIN, "task"},       [T_WIN_DEVICE] = {T_WIN, "device"},
		[T_WIN_PRIORITY] = {T_WIN, "priority"}, [T_WIN_NBUFS] = {T_WIN, "nbufs"},
		[T_WIN_MISSING] = {T_WIN, "missing"}, [T_WIN_TRANSFER] = {T_WIN, "transfer"},
		[T_WIN_BUFFER] = {T_WIN, "buffer"},   [T_WIN_BUF_MISSING] = {T_WIN, "buffer_missing"},
		[T_WIN_FREE_AT] = {T_WIN, "free_at"}, [T_WIN_TASK_US] = {T_WIN, "task_us"},
		[T_PREFETCH_ORDER] = {T_PREFETCH_OUT, "order"},
		[T_RB_TASK] = {T_RB, "task"},         [T_RB_KERNEL] = {T_RB, "kernel"},
		[T_RB_PRIORITY] = {T_RB, "priority"}, [T_RB_BYTES] = {T_RB, "bytes"},
		[T_RB_TAG] = {T_RB, "tag"},           [T_RB_NBUFS] = {T_RB, "nbufs"},
		[T_RB_OWNER] = {T_RB, "owner"},       [T_RB_BUF_BYTES] = {T_RB, "buffer_bytes"},
		[T_RANK_OUT_RANK] = {T_RANK_OUT, "rank"},
		[T_TICK_QUEUE] = {T_TICK, "queue"},   [T_TICK_FREE_AT] = {T_TICK, "free_at"},
		[T_TICK_TASK_US] = {T_TICK, "task_us"}, [T_TICK_DONE] = {T_TICK, "done"},
	};
	int t;

	for (t = 0; t < T_COUNT; t++)
		s->ref_table[t] = newref_table(L, 0);
	for (t = 0; t < T_COUNT; t++) {
		if (!fields[t].field || (t >= LAZY_FIRST && t <= LAZY_LAST))
			continue;
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[fields[t].parent]);
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
		lua_setfield(L, -2, fields[t].field);
		lua_pop(L, 1);
	}
	for (t = 0; t < T_COUNT; t++) {
		if (t != T_BATCH && t != T_WIN && t != T_TICK)
			continue;
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
		lua_pushinteger(L, s->h->nd);
		lua_setfield(L, -2, "ndevices");
		lua_pop(L, 1);
	}
	/* The place inputs appear on first read (batch_index), then stay and are kept current. */
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[T_BATCH]);
	lua_createtable(L, 0, 2);
	lua_pushlightuserdata(L, s);
	lua_pushcclosure(L, batch_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushliteral(L, "locked");
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	lua_pop(L, 1);
}

static void op_setup(lua_State *L, pol_state *s)
{
	odx__policy *h = s->h;
	const char *text = (const char *)h->text;
	size_t len = h->text_len;
	char chunkname[300];
	lua_Debug ar;
	int i;

	pol_sandbox(L, true);
	snprintf(chunkname, sizeof(chunkname), "@%s", h->path ? h->path : h->display);
	if (luaL_loadbufferx(L, text, len, chunkname, "t") != LUA_OK)
		lua_error(L);
	lua_call(L, 0, 1);
	if (!lua_istable(L, -1))
		luaL_error(L, "%s: the file must return a table of hooks (got %s)", chunkname + 1,
			   luaL_typename(L, -1));
	/* Raw reads: a returned table's __index must not run outside the load's budget. */
	lua_pushliteral(L, "api");
	lua_rawget(L, -2);
	if (!lua_isnil(L, -1) && !(lua_isinteger(L, -1) && lua_tointeger(L, -1) == 1))
		luaL_error(L, "%s: 'api' must be 1 (the hook API this ODX implements)",
			   chunkname + 1);
	lua_pop(L, 1);
	for (i = 0; i < HOOK_COUNT; i++) {
		lua_pushstring(L, pol_hook_names[i]);
		if (lua_rawget(L, -2) == LUA_TNIL) {
			lua_pop(L, 1);
			continue;
		}
		if (!lua_isfunction(L, -1))
			luaL_error(L, "%s: hook '%s' must be a function, not a %s", chunkname + 1,
				   pol_hook_names[i], luaL_typename(L, -1));
		if (i == HOOK_PLACE) {
			lua_pushvalue(L, -1);
			lua_getinfo(L, ">S", &ar);
			s->place_line = ar.linedefined;
			snprintf(s->chunk, sizeof(s->chunk), "%s", ar.short_src);
		}
		s->ref_hook[i] = luaL_ref(L, LUA_REGISTRYINDEX);
	}
	if (s->ref_hook[HOOK_PLACE] == LUA_NOREF)
		luaL_error(L, "%s: the policy defines no 'place' function (required)",
			   chunkname + 1);
	setup_tables(L, s);
}

static void op_init(lua_State *L, pol_state *s)
{
	odx__policy *h = s->h;
	int d;

	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_INIT]);
	lua_createtable(L, 0, 3);
	lua_pushinteger(L, h->nd);
	lua_setfield(L, -2, "ndevices");
	lua_pushnumber(L, POL_LINK_BANDWIDTH);
	lua_setfield(L, -2, "bandwidth");
	lua_pushinteger(L, h->nnodes);
	lua_setfield(L, -2, "nnodes");
	lua_createtable(L, h->nd, 0);
	for (d = 0; d < h->nd; d++) {
		lua_createtable(L, 0, 5);
		lua_pushinteger(L, h->device_node[d] + 1);
		lua_setfield(L, -2, "node");
		lua_pushinteger(L, d + 1);
		lua_setfield(L, -2, "index");
		lua_pushstring(L, h->devs[d].kind);
		lua_setfield(L, -2, "kind");
		lua_pushstring(L, h->devs[d].name);
		lua_setfield(L, -2, "name");
		lua_pushinteger(L, (lua_Integer)h->devs[d].memory);
		lua_setfield(L, -2, "memory");
		lua_rawseti(L, -2, d + 1);
	}
	lua_setfield(L, -2, "devices");
	lua_call(L, 1, 0);
}

static void op_selftest(lua_State *L, pol_state *s)
{
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_SELFTEST]);
	lua_call(L, 0, 1);
	if (lua_isboolean(L, -1) && !lua_toboolean(L, -1))
		luaL_error(L, "%s: selftest returned false", s->chunk[0] ? s->chunk : "policy");
	lua_pop(L, 1);
}

/* Pushes the reused table `t`; returns its stack index. */
static int push_table(lua_State *L, const pol_state *s, enum table t)
{
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
	return lua_gettop(L);
}

/* Pushes row i of the reused table at idx, made (again) when it is not a table: rows are made
 * once and reused, but a policy may have overwritten one. Returns its stack index. */
static int push_row(lua_State *L, int idx, int i, int narr)
{
	if (lua_rawgeti(L, idx, i) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_createtable(L, narr, 0);
		lua_pushvalue(L, -1);
		lua_rawseti(L, idx, i);
	}
	return lua_gettop(L);
}

static bool same_string(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* Rewrites the entries of place input `t` that differ from its shadow (see struct shadow). */
static void fill_lazy(lua_State *L, pol_state *s, const pol_op_args *a, int t)
{
	odx__policy *h = s->h;
	pol_shadow *sh = &s->sh;
	int nd = h->nd, n = a->n, valid = sh->valid[t], i, d, tab;

	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
	tab = lua_gettop(L);
	if (t == T_QUEUE || t == T_FREE_AT) {
		for (d = 0; d < nd; d++) {
			double f = h->dev_n[d] ? a->queue[d] * h->dev_mean[d] : 0;

			if (t == T_QUEUE && (!valid || sh->queue[d] != a->queue[d])) {
				lua_pushinteger(L, a->queue[d]);
				lua_rawseti(L, tab, d + 1);
				sh->queue[d] = a->queue[d];
			} else if (t == T_FREE_AT && (!valid || sh->free_at[d] != f)) {
				lua_pushnumber(L, f);
				lua_rawseti(L, tab, d + 1);
				sh->free_at[d] = f;
			}
		}
		sh->valid[t] = 1;
		lua_settop(L, tab - 1);
		return;
	}
	for (i = 0; i < n; i++) {
		const odx__policy_task *pt = &a->tasks[i];
		bool fresh = i >= valid;
		int row = 0, b;
		uint32_t hash;

		switch (t) {
		case T_KERNEL:
		case T_TAG: {
			char *old = t == T_KERNEL ? sh->kernel[i] : sh->tag[i];
			const char *str = t == T_KERNEL ? pt->kernel : pt->tag ? pt->tag : "";
			size_t len = strlen(str);

			/* old[0] == 1: a string too long to keep, never equal */
			if (fresh || len >= POL_SHADOW_STR || old[0] == 1 || strcmp(old, str) != 0) {
				lua_pushlstring(L, str, len);
				lua_rawseti(L, tab, i + 1);
				if (len < POL_SHADOW_STR) {
					memcpy(old, str, len + 1);
				} else {
					old[0] = 1;
					old[1] = '\0';
				}
			}
			break;
		}
		case T_PRIORITY:
			if (fresh || sh->priority[i] != pt->priority) {
				lua_pushinteger(L, pt->priority);
				lua_rawseti(L, tab, i + 1);
				sh->priority[i] = pt->priority;
			}
			break;
		case T_BYTES:
			if (fresh || sh->bytes[i] != pt->bytes) {
				lua_pushinteger(L, (lua_Integer)pt->bytes);
				lua_rawseti(L, tab, i + 1);
				sh->bytes[i] = pt->bytes;
			}
			break;
		default: /* rows: fetched only when an entry changed */
			if (t == T_ESTIMATE || t == T_TRANSFER) {
				/* Tasks of one kernel and size class in a row share their estimates:
				 * sh->row still holds the previous task's. */
				b = pol_size_bucket(pt->bytes);
				if (t == T_TRANSFER) {
					for (d = 0; d < nd; d++)
						sh->row[d] = pt->transfer_us
								     ? pt->transfer_us[d]
								     : (double)pt->missing[d] * 1e6 /
									       pol_best_in(h, h->device_node[d]);
				} else if (i == 0 || !same_string(a->tasks[i - 1].kernel, pt->kernel) ||
					   pol_size_bucket(a->tasks[i - 1].bytes) != b) {
					hash = pol_str_hash(pt->kernel);
					for (d = 0; d < nd; d++) {
						pol_model *e = pol_model_find(h, pt->kernel, hash,
									      d, b, false);

						sh->row[d] = e && e->n ? e->mean : -1;
					}
				}
			}
			for (d = 0; d < nd; d++) {
				size_t k = (size_t)i * (size_t)nd + (size_t)d;

				switch (t) {
				case T_FEASIBLE:
					if (!fresh && sh->feasible[k] == pt->feasible[d])
						continue;
					sh->feasible[k] = pt->feasible[d];
					if (!row)
						row = push_row(L, tab, i + 1, nd);
					lua_pushboolean(L, pt->feasible[d]);
					break;
				case T_RESIDENT:
					if (!fresh && sh->resident[k] == pt->resident[d])
						continue;
					sh->resident[k] = pt->resident[d];
					if (!row)
						row = push_row(L, tab, i + 1, nd);
					lua_pushinteger(L, (lua_Integer)pt->resident[d]);
					break;
				default: {
					double *old = t == T_ESTIMATE ? &sh->estimate[k]
								      : &sh->transfer[k];

					if (!fresh && *old == sh->row[d])
						continue;
					*old = sh->row[d];
					if (!row)
						row = push_row(L, tab, i + 1, nd);
					lua_pushnumber(L, sh->row[d]);
					break;
				}
				}
				lua_rawseti(L, row, d + 1);
			}
			if (row)
				lua_pop(L, 1);
			break;
		}
	}
	if (t <= T_TAG) {
		/* Entries left from a larger batch would confuse `#`: clear them. */
		for (i = n; i < valid; i++) {
			lua_pushnil(L);
			lua_rawseti(L, tab, i + 1);
		}
		sh->valid[t] = n;
	} else if (n > valid) {
		sh->valid[t] = n; /* rows past n keep their (exact) contents */
	}
	lua_settop(L, tab - 1);
}

/* Sets batch.n and refreshes the inputs this policy has read so far; the others wait for their
 * first read (batch_index). */
static void fill_batch(lua_State *L, pol_state *s, pol_op_args *a)
{
	odx__policy *h = s->h;
	int t, d, batch;

	for (d = 0; d < h->nd; d++)
		h->qnow[d] = a->queue[d];
	batch = push_table(L, s, T_BATCH);
	lua_pushinteger(L, a->n);
	raw_setfield(L, batch, "n");
	s->place_args = a;
	for (t = LAZY_FIRST; t <= LAZY_LAST; t++)
		if (s->lazy_used & LAZY_BIT(t))
			fill_lazy(L, s, a, t);
}

static void bad_answer(pol_op_args *a, int i, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void bad_answer(pol_op_args *a, int i, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	a->out[i] = -1;
	if (a->invalid++)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(a->bad, sizeof(a->bad), "%s:%d: place: out.device[%d] %s", a->s->chunk,
		 a->s->place_line, i + 1, why);
}

static void op_place(lua_State *L, pol_state *s, pol_op_args *a)
{
	int batch, out, outdev, i, limit = a->n, nd = s->h->nd;

	fill_batch(L, s, a);
	batch = lua_gettop(L);
	out = push_table(L, s, T_OUT);
	outdev = push_table(L, s, T_OUT_DEVICE);
	lua_pushvalue(L, outdev); /* in case the policy replaced it */
	raw_setfield(L, out, "device");
	for (i = 1; i <= a->n || i <= (int)lua_rawlen(L, outdev); i++) {
		lua_pushnil(L);
		lua_rawseti(L, outdev, i);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_PLACE]);
	lua_pushvalue(L, batch);
	lua_pushvalue(L, out);
	lua_call(L, 2, 1);
	s->place_args = NULL;
	/* place may return how many entries it decided; the rest go to the built-in quietly. */
	if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 && lua_tointeger(L, -1) < limit)
		limit = (int)lua_tointeger(L, -1);
	for (i = 0; i < a->n; i++) {
		lua_Integer v;
		int isint;

		a->out[i] = -1;
		if (i >= limit)
			continue;
		lua_rawgeti(L, outdev, i + 1);
		switch (lua_type(L, -1)) {
		case LUA_TNIL:
			bad_answer(a, i, "is missing (set it to a device, or 0 for the built-in)");
			break;
		case LUA_TNUMBER:
			v = lua_tointegerx(L, -1, &isint);
			if (!isint)
				bad_answer(a, i, "= %s is not an integer", lua_tostring(L, -1));
			else if (v == 0)
				break;
			else if (v < 1 || v > nd)
				bad_answer(a, i, "= %lld is not a device (1..%d, or 0)", (long long)v,
					   nd);
			else if (!a->tasks[i].feasible[v - 1])
				bad_answer(a, i, "= %lld: task %d ('%s') cannot run on that device",
					   (long long)v, i + 1, a->tasks[i].kernel);
			else {
				a->out[i] = (int)v - 1;
				a->decided++;
			}
			break;
		default:
			bad_answer(a, i, "is a %s, not a device number", luaL_typename(L, -1));
			break;
		}
		lua_pop(L, 1);
	}
}

static void op_complete(lua_State *L, pol_state *s, pol_op_args *a)
{
	int ev = push_table(L, s, T_EVENTS), k, dv, by, us, i;

	k = push_table(L, s, T_EV_KERNEL);
	dv = push_table(L, s, T_EV_DEVICE);
	by = push_table(L, s, T_EV_BYTES);
	us = push_table(L, s, T_EV_US);
	lua_pushinteger(L, a->nevents);
	raw_setfield(L, ev, "n");
	for (i = 0; i < a->nevents; i++) {
		lua_pushstring(L, a->events[i].kernel);
		lua_rawseti(L, k, i + 1);
		lua_pushinteger(L, a->events[i].device + 1);
		lua_rawseti(L, dv, i + 1);
		lua_pushinteger(L, (lua_Integer)a->events[i].bytes);
		lua_rawseti(L, by, i + 1);
		lua_pushnumber(L, (double)a->events[i].ns / 1000.0);
		lua_rawseti(L, us, i + 1);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_ON_COMPLETE]);
	lua_pushvalue(L, ev);
	lua_call(L, 1, 0);
}

/* Pushes the reused output table `out` with a cleared list `t` as out[field] (n entries at
 * least); returns the list's stack index. */
static int push_out_list(lua_State *L, const pol_state *s, enum table out, enum table t,
			 const char *field, int n)
{
	int o = push_table(L, s, out), list = push_table(L, s, t), len, i;

	lua_pushvalue(L, list);
	raw_setfield(L, o, field);
	len = (int)lua_rawlen(L, list);
	for (i = 1; i <= n || i <= len; i++) {
		lua_pushnil(L);
		lua_rawseti(L, list, i);
	}
	return list;
}

static void set_count(lua_State *L, int t, const char *field, lua_Integer v)
{
	lua_pushinteger(L, v);
	raw_setfield(L, t, field);
}

/* Reads an order answer: the hook's return value (how many; stack top) and out.<field>[1..k],
 * each a list index 1..n used at most once, into a->order as 0-based indices. An invalid
 * answer rejects the whole order: a->invalid is set and a->bad says why. */
static void read_order(lua_State *L, pol_op_args *a, int list, int n, const char *hook)
{
	odx__policy *h = a->s->h;
	int k = n, i;

	if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 && lua_tointeger(L, -1) <= n) {
		k = (int)lua_tointeger(L, -1);
	} else if (!lua_isnil(L, -1)) {
		snprintf(a->bad, sizeof(a->bad), "%s: %s returned %s (how many entries of out.order "
			 "it decided, 0..%d, or nothing)", a->s->chunk, hook, luaL_typename(L, -1), n);
		a->invalid = 1;
		return;
	}
	if (h->seen_cap < n) {
		unsigned char *grown;

		pol_unsafe_enter(pol_esc_now);
		grown = realloc(h->seen, (size_t)n);
		pol_unsafe_leave(pol_esc_now);

		if (!grown)
			luaL_error(L, "out of memory");
		h->seen = grown;
		h->seen_cap = n;
	}
	memset(h->seen, 0, (size_t)n);
	a->norder = 0;
	for (i = 0; i < k; i++) {
		int isint, t = lua_rawgeti(L, list, i + 1);
		lua_Integer v = lua_tointegerx(L, -1, &isint);

		lua_pop(L, 1);
		if (t == LUA_TNIL && lua_isnil(L, -1))
			break; /* no count returned: the list ends at its first hole */
		if (t != LUA_TNUMBER || !isint || v < 1 || v > n || h->seen[v - 1]) {
			snprintf(a->bad, sizeof(a->bad), "%s: %s: out.order[%d] %s", a->s->chunk, hook,
				 i + 1,
				 t != LUA_TNUMBER ? "is not an index" :
				 !isint || v < 1 || v > n ? "is out of range" : "repeats an index");
			a->invalid = 1;
			return;
		}
		h->seen[v - 1] = 1;
		a->order[a->norder++] = (int)v - 1;
	}
}

static void op_evict(lua_State *L, pol_state *s, pol_op_args *a)
{
	int c = push_table(L, s, T_CAND), bu = push_table(L, s, T_CAND_BUFFER);
	int by = push_table(L, s, T_CAND_BYTES), age = push_table(L, s, T_CAND_AGE);
	int pr = push_table(L, s, T_CAND_PRIORITY), dt = push_table(L, s, T_CAND_DIRTY);
	int out = push_table(L, s, T_EVICT_OUT), list, i;
	uint64_t now = odx__now_ns();

	set_count(L, c, "n", a->n);
	set_count(L, c, "node", a->memnode + 1);
	set_count(L, c, "need", (lua_Integer)a->need);
	for (i = 0; i < a->n; i++) {
		const odx__evict_cand *e = &a->cands[i];

		lua_pushinteger(L, (lua_Integer)e->buffer_id);
		lua_rawseti(L, bu, i + 1);
		lua_pushinteger(L, (lua_Integer)e->bytes);
		lua_rawseti(L, by, i + 1);
		lua_pushnumber(L, e->last_use_ns == 0 ? HUGE_VAL
				  : e->last_use_ns >= now ? 0 : (double)(now - e->last_use_ns) / 1e3);
		lua_rawseti(L, age, i + 1);
		lua_pushinteger(L, e->priority);
		lua_rawseti(L, pr, i + 1);
		lua_pushboolean(L, e->dirty);
		lua_rawseti(L, dt, i + 1);
	}
	list = push_out_list(L, s, T_EVICT_OUT, T_EVICT_ORDER, "order", a->n);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_EVICT]);
	lua_pushinteger(L, (lua_Integer)a->need);
	lua_pushvalue(L, c);
	lua_pushvalue(L, out);
	lua_call(L, 3, 1);
	read_order(L, a, list, a->n, "evict");
}

static void op_prefetch(lua_State *L, pol_state *s, pol_op_args *a)
{
	odx__policy *h = s->h;
	int w = push_table(L, s, T_WIN), tk = push_table(L, s, T_WIN_TASK);
	int dv = push_table(L, s, T_WIN_DEVICE), pr = push_table(L, s, T_WIN_PRIORITY);
	int nb = push_table(L, s, T_WIN_NBUFS), ms = push_table(L, s, T_WIN_MISSING);
	int xf = push_table(L, s, T_WIN_TRANSFER), bu = push_table(L, s, T_WIN_BUFFER);
	int bm = push_table(L, s, T_WIN_BUF_MISSING), fa = push_table(L, s, T_WIN_FREE_AT);
	int tu = push_table(L, s, T_WIN_TASK_US), out = push_table(L, s, T_PREFETCH_OUT);
	int list, i, k, d;

	set_count(L, w, "n", a->n);
	for (d = 0; d < h->nd; d++) {
		lua_pushnumber(L, h->dev_n[d] ? h->qnow[d] * h->dev_mean[d] : 0);
		lua_rawseti(L, fa, d + 1);
		lua_pushnumber(L, h->dev_n[d] ? h->dev_mean[d] : -1);
		lua_rawseti(L, tu, d + 1);
	}
	for (i = 0; i < a->n; i++) {
		const odx__prefetch_task *t = &a->window[i];
		int rb = push_row(L, bu, i + 1, t->nbufs), rm = push_row(L, bm, i + 1, t->nbufs);
		uint64_t missing = 0;

		for (k = 0; k < t->nbufs; k++) {
			lua_pushinteger(L, (lua_Integer)t->buffer_ids[k]);
			lua_rawseti(L, rb, k + 1);
			lua_pushinteger(L, (lua_Integer)t->missing_bytes[k]);
			lua_rawseti(L, rm, k + 1);
			missing += t->missing_bytes[k];
		}
		lua_pop(L, 2);
		lua_pushinteger(L, (lua_Integer)t->task_id);
		lua_rawseti(L, tk, i + 1);
		lua_pushinteger(L, t->device + 1);
		lua_rawseti(L, dv, i + 1);
		lua_pushinteger(L, t->priority);
		lua_rawseti(L, pr, i + 1);
		lua_pushinteger(L, t->nbufs);
		lua_rawseti(L, nb, i + 1);
		lua_pushinteger(L, (lua_Integer)missing);
		lua_rawseti(L, ms, i + 1);
		lua_pushnumber(L, (double)missing * 1e6 / pol_best_in(h, h->device_node[t->device]));
		lua_rawseti(L, xf, i + 1);
	}
	list = push_out_list(L, s, T_PREFETCH_OUT, T_PREFETCH_ORDER, "order", a->n);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_PREFETCH]);
	lua_pushvalue(L, w);
	lua_pushvalue(L, out);
	lua_call(L, 2, 1);
	read_order(L, a, list, a->n, "prefetch");
}

/* Raised after place_rank's instruction budget: a count, unlike a clock, is the same on every
 * rank. Re-armed for every instruction so that pcall cannot swallow it. */
static void rank_budget_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	lua_sethook(L, rank_budget_hook, LUA_MASKCOUNT, 1);
	luaL_error(L, "place_rank: instruction budget exceeded (policy.budget x %d instructions)",
		   RANK_INSTR_PER_US);
}

static void op_place_rank(lua_State *L, pol_state *s, pol_op_args *a)
{
	int b = push_table(L, s, T_RB), tk = push_table(L, s, T_RB_TASK);
	int kn = push_table(L, s, T_RB_KERNEL), pr = push_table(L, s, T_RB_PRIORITY);
	int by = push_table(L, s, T_RB_BYTES), tg = push_table(L, s, T_RB_TAG);
	int nb = push_table(L, s, T_RB_NBUFS), ow = push_table(L, s, T_RB_OWNER);
	int bb = push_table(L, s, T_RB_BUF_BYTES), out = push_table(L, s, T_RANK_OUT);
	int list, i, k, limit = a->n;
	uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)a->n;
	int64_t instr = (int64_t)(s->h->budget_ns / 1000) * RANK_INSTR_PER_US;

	set_count(L, b, "n", a->n);
	set_count(L, b, "nranks", a->nranks);
	for (i = 0; i < a->n; i++) {
		const odx__rank_task *t = &a->ranks[i];
		int ro = push_row(L, ow, i + 1, t->nbufs), rb = push_row(L, bb, i + 1, t->nbufs);

		for (k = 0; k < t->nbufs; k++) {
			lua_pushinteger(L, t->owner_rank[k] + 1);
			lua_rawseti(L, ro, k + 1);
			lua_pushinteger(L, (lua_Integer)t->buf_bytes[k]);
			lua_rawseti(L, rb, k + 1);
		}
		lua_pop(L, 2);
		lua_pushinteger(L, (lua_Integer)t->task_id);
		lua_rawseti(L, tk, i + 1);
		lua_pushstring(L, t->kernel ? t->kernel : "");
		lua_rawseti(L, kn, i + 1);
		lua_pushinteger(L, t->priority);
		lua_rawseti(L, pr, i + 1);
		lua_pushinteger(L, (lua_Integer)t->bytes);
		lua_rawseti(L, by, i + 1);
		lua_pushstring(L, t->tag ? t->tag : "");
		lua_rawseti(L, tg, i + 1);
		lua_pushinteger(L, t->nbufs);
		lua_rawseti(L, nb, i + 1);
		seed = (seed ^ t->task_id) * 0x100000001b3ull;
	}
	list = push_out_list(L, s, T_RANK_OUT, T_RANK_OUT_RANK, "rank", a->n);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_PLACE_RANK]);
	lua_pushvalue(L, b);
	lua_pushvalue(L, out);
	/* The same random numbers on every rank: seeded from the batch, not from history. */
	s->h->rank_rng = seed ? seed : 1;
	s->h->rng_now = &s->h->rank_rng;
	lua_sethook(L, rank_budget_hook, LUA_MASKCOUNT, instr > 1000 ? (int)instr : 1000);
	lua_call(L, 2, 1);
	lua_sethook(L, NULL, 0, 0);
	s->h->rng_now = &s->h->rng;
	if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 && lua_tointeger(L, -1) < limit)
		limit = (int)lua_tointeger(L, -1);
	for (i = 0; i < a->n; i++) {
		lua_Integer v;
		int isint, t;

		a->order[i] = -1;
		if (i >= limit)
			continue;
		t = lua_rawgeti(L, list, i + 1);
		v = lua_tointegerx(L, -1, &isint);
		lua_pop(L, 1);
		if (t == LUA_TNUMBER && isint && v == 0)
			continue;
		if (t != LUA_TNUMBER || !isint || v < 1 || v > a->nranks) {
			if (!a->invalid++)
				snprintf(a->bad, sizeof(a->bad),
					 "%s: place_rank: out.rank[%d] is %s (a rank 1..%d, or 0 for "
					 "owner-computes)", s->chunk, i + 1,
					 t == LUA_TNIL ? "missing" : t != LUA_TNUMBER ? "not a number"
					 : "not a rank", a->nranks);
			continue;
		}
		a->order[i] = (int)v - 1;
		a->decided++;
	}
}

static void op_tick(lua_State *L, pol_state *s, pol_op_args *a)
{
	odx__policy *h = s->h;
	int t = push_table(L, s, T_TICK), q = push_table(L, s, T_TICK_QUEUE);
	int fa = push_table(L, s, T_TICK_FREE_AT), tu = push_table(L, s, T_TICK_TASK_US);
	int dn = push_table(L, s, T_TICK_DONE), d;

	lua_pushnumber(L, (double)(odx__now_ns() - h->t_open) / 1e3);
	raw_setfield(L, t, "now_us");
	for (d = 0; d < h->nd; d++) {
		lua_pushinteger(L, a->queue[d]);
		lua_rawseti(L, q, d + 1);
		lua_pushnumber(L, h->dev_n[d] ? a->queue[d] * h->dev_mean[d] : 0);
		lua_rawseti(L, fa, d + 1);
		lua_pushnumber(L, h->dev_n[d] ? h->dev_mean[d] : -1);
		lua_rawseti(L, tu, d + 1);
		lua_pushinteger(L, a->done ? (lua_Integer)a->done[d] : 0);
		lua_rawseti(L, dn, d + 1);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_ON_TICK]);
	lua_pushvalue(L, t);
	lua_call(L, 1, 0);
}

int pol_protected_op(lua_State *L)
{
	pol_op_args *a = lua_touserdata(L, 1);

	lua_settop(L, 0);
	luaL_checkstack(L, 48, "policy host"); /* the fill functions push up to ~20 values */
	switch (a->op) {
	case OP_SETUP:
		op_setup(L, a->s);
		break;
	case OP_INIT:
		op_init(L, a->s);
		break;
	case OP_SELFTEST:
		op_selftest(L, a->s);
		break;
	case OP_PLACE:
		op_place(L, a->s, a);
		break;
	case OP_COMPLETE:
		op_complete(L, a->s, a);
		break;
	case OP_EVICT:
		op_evict(L, a->s, a);
		break;
	case OP_PREFETCH:
		op_prefetch(L, a->s, a);
		break;
	case OP_PLACE_RANK:
		op_place_rank(L, a->s, a);
		break;
	case OP_TICK:
		op_tick(L, a->s, a);
		break;
	case OP_CLOSE: /* not an operation run here */
	case OP_COUNT:
		break;
	}
	return 0;
}

void pol_shadow_free(pol_shadow *sh)
{
	free(sh->kernel);
	free(sh->tag);
	free(sh->priority);
	free(sh->queue);
	free(sh->bytes);
	free(sh->resident);
	free(sh->feasible);
	free(sh->estimate);
	free(sh->transfer);
	free(sh->free_at);
	free(sh->row);
}

bool pol_shadow_alloc(pol_shadow *sh, int nd)
{
	size_t rows = POL_BATCH_MAX, cells = rows * (size_t)(nd > 0 ? nd : 1);

	sh->kernel = calloc(rows, sizeof(*sh->kernel));
	sh->tag = calloc(rows, sizeof(*sh->tag));
	sh->priority = calloc(rows, sizeof(*sh->priority));
	sh->bytes = calloc(rows, sizeof(*sh->bytes));
	sh->queue = calloc(cells, sizeof(*sh->queue));
	sh->free_at = calloc(cells, sizeof(*sh->free_at));
	sh->resident = calloc(cells, sizeof(*sh->resident));
	sh->feasible = calloc(cells, sizeof(*sh->feasible));
	sh->estimate = calloc(cells, sizeof(*sh->estimate));
	sh->transfer = calloc(cells, sizeof(*sh->transfer));
	sh->row = calloc((size_t)(nd > 0 ? nd : 1), sizeof(*sh->row));
	return sh->row && sh->kernel && sh->tag && sh->priority && sh->bytes && sh->queue && sh->free_at &&
	       sh->resident && sh->feasible && sh->estimate && sh->transfer;
}
