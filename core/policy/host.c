/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c - the policy host: opening a policy (embedded or a file), loading a version into a
 * fresh state, reloading it when the file changes, closing; one call of each hook with its
 * failure handling (log once per site, disable after repeated failures, the built-in decides);
 * completions into the models. Knows nothing of tasks or contexts except odx__policy_describe:
 * the test harness drives it with synthetic batches.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include "core.h"
#include "policy_internal.h"

#define MAX_FAILURES 8           /* consecutive failed calls before the policy is disabled */
#define RELOAD_CHECK_NS 100000000ull
#define DEFAULT_LOAD_TIMEOUT_NS 10000000000ull /* policy.load_timeout_ms when params say 0 */
#define MAX_SOURCE (1u << 20)    /* bytes of policy source; parse time is linear in it */

/* The shipped policies, embedded by odx-embed (policies/meson.build). */
#define EMBEDDED(X) X(eager) X(round_robin) X(locality) X(heft) X(lru) X(lookahead)
#define DECLARE(n)                                                                                 \
	extern const unsigned char odx__policy_lua_##n[];                                          \
	extern const size_t odx__policy_lua_##n##_size;
EMBEDDED(DECLARE)
#undef DECLARE
static const struct {
	const char *name;
	const unsigned char *text;
	const size_t *size;
} embedded[] = {
#define ENTRY(n) {#n, odx__policy_lua_##n, &odx__policy_lua_##n##_size},
	EMBEDDED(ENTRY)
#undef ENTRY
};
const char *const pol_hook_names[HOOK_COUNT] = {
	"place", "init", "on_complete", "selftest", "place_rank", "prefetch", "evict", "on_tick",
};

const char *const pol_op_names[OP_COUNT] = {
	"load", "init", "selftest", "place", "on_complete", "evict", "prefetch", "place_rank",
	"on_tick", "close",
};

/* ---- messages ------------------------------------------------------------------------------- */

void pol_say(odx__policy *h, odx_log_level level, bool error, const char *fmt, ...)
{
	char msg[ODX__MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (h->log)
		h->log(h->log_user, level, error, msg);
}

/* Publishes which hooks the running state has (for the seams' lock-free check). */
void pol_publish_hooks(odx__policy *h)
{
	unsigned mask = 0;
	int i;

	for (i = 0; h->cur && !h->disabled && i < HOOK_COUNT; i++)
		if (h->cur->ref_hook[i] != LUA_NOREF)
			mask |= 1u << i;
	atomic_store(&h->hooks, mask);
	if (mask & (1u << HOOK_ON_COMPLETE | 1u << HOOK_PREFETCH | 1u << HOOK_EVICT |
		    1u << HOOK_ON_TICK))
		pol_want_times(h);
}

void pol_want_times(odx__policy *h)
{
	if (!atomic_load_explicit(&h->want_times, memory_order_relaxed))
		atomic_store(&h->want_times, true);
}

bool odx__policy_wants_times(const odx__policy *h)
{
	return atomic_load_explicit(&h->want_times, memory_order_relaxed);
}

static uint64_t site_hash(const char *s)
{
	uint64_t x = 1469598103934665603ull;

	for (; *s; s++)
		x = (x ^ (unsigned char)*s) * 1099511628211ull;
	return x;
}

/* A failed call: the built-in decides instead. Logged once per site; repeated failures disable
 * the policy until it is reloaded. */
static void fail(odx__policy *h, const char *site, const char *msg)
{
	uint64_t key = site_hash(site);
	bool seen = false;
	int i;

	atomic_fetch_add(&h->failures, 1);
	for (i = 0; i < h->nsites; i++)
		seen = seen || h->sites[i] == key;
	if (!seen && h->nsites < POL_MAX_SITES)
		h->sites[h->nsites++] = key;
	pol_say(h, seen ? ODX_LOG_DEBUG : ODX_LOG_ERROR, true,
		"policy %s: %s (the built-in least_loaded decides instead)", h->display, msg);
	if (++h->consecutive >= MAX_FAILURES && !h->disabled) {
		h->disabled = true;
		pol_publish_hooks(h);
		pol_say(h, ODX_LOG_ERROR, true,
			"policy %s: disabled after %d consecutive failures, last: %s; the built-in "
			"least_loaded decides until the file is reloaded",
			h->display, h->consecutive, msg);
	}
}

/* ---- loading -------------------------------------------------------------------------------- */

/* A new state with the policy loaded, initialised and self-tested; NULL with err on failure. */
static pol_state *state_open(odx__policy *h, char *err, size_t errlen)
{
	uint64_t load_budget = h->budget_ns * POL_LOAD_BUDGET_FACTOR;
	pol_op_args a = {0};
	pol_state *s = calloc(1, sizeof(*s));
	int i, rc;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->h = h;
	s->limit = h->limit;
	s->blocks.prev = s->blocks.next = &s->blocks;
	for (i = 0; i < HOOK_COUNT; i++)
		s->ref_hook[i] = LUA_NOREF;
	if (!pol_shadow_alloc(&s->sh, h->nd)) {
		snprintf(err, errlen, "out of memory");
		pol_state_close(h, s);
		return NULL;
	}
	s->L = lua_newstate(pol_alloc, s);
	if (!s->L) {
		snprintf(err, errlen, "%s: cannot create a Lua state within policy.memory_limit",
			 h->display);
		pol_state_close(h, s);
		return NULL;
	}
	*(odx__policy **)lua_getextraspace(s->L) = h;
	lua_pushcfunction(s->L, pol_traceback);
	s->ref_msgh = luaL_ref(s->L, LUA_REGISTRYINDEX);
	a.s = s;
	a.op = OP_SETUP;
	rc = pol_run_op(s, &a, load_budget, err, errlen);
	a.op = OP_INIT;
	if (rc == LUA_OK && s->ref_hook[HOOK_INIT] != LUA_NOREF)
		rc = pol_run_op(s, &a, load_budget, err, errlen);
	a.op = OP_SELFTEST;
	if (rc == LUA_OK && s->ref_hook[HOOK_SELFTEST] != LUA_NOREF)
		rc = pol_run_op(s, &a, load_budget, err, errlen);
	if (rc == POL_RC_ABANDONED)
		return NULL; /* freed by pol_run_op */
	if (rc != LUA_OK)
		goto out_close;
	return s;

out_close:
	pol_state_close(h, s);
	return NULL;
}

static int read_source(odx__policy *h, char *err, size_t errlen)
{
	struct stat st;
	unsigned char *buf;
	FILE *f;

	if (h->text && !h->path)
		return 0;
	f = fopen(h->path, "rb");
	if (!f || fstat(fileno(f), &st) != 0) {
		snprintf(err, errlen, "policy '%s': cannot read the file: %s", h->path,
			 strerror(errno));
		if (f)
			fclose(f);
		return ODX_ECONFIG;
	}
	if (st.st_size > (off_t)MAX_SOURCE) {
		snprintf(err, errlen,
			 "policy '%s': the file is %lld bytes, more than the %u a policy may have",
			 h->path, (long long)st.st_size, MAX_SOURCE);
		fclose(f);
		return ODX_ECONFIG;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		snprintf(err, errlen, "policy '%s': cannot read the file", h->path);
		free(buf);
		fclose(f);
		return ODX_ECONFIG;
	}
	fclose(f);
	buf[st.st_size] = '\0';
	free((void *)h->text);
	h->text = buf;
	h->text_len = (size_t)st.st_size;
	h->mtime = st.st_mtim;
	return 0;
}

/* ---- open, reload, close -------------------------------------------------------------------- */

int odx__policy_open(odx__policy **out, const odx__policy_params *p, char *err, size_t errlen)
{
	/* aligned: the pending stack has a cache line of its own */
	odx__policy *h = aligned_alloc(_Alignof(odx__policy), sizeof(*h));
	char why[ODX__MSG_MAX];
	int d, rc = ODX_ENOMEM;
	size_t i;

	if (!h)
		return ODX_ENOMEM;
	memset(h, 0, sizeof(*h));
	h->nd = p->ndevices;
	h->limit = p->memory_limit;
	h->budget_ns = p->budget_ns;
	h->load_timeout_ns = p->load_timeout_ns ? p->load_timeout_ns : DEFAULT_LOAD_TIMEOUT_NS;
	h->log = p->log;
	h->log_user = p->log_user;
	h->rng = 0x2545f4914f6cdd1dull;
	h->rng_now = &h->rng;
	h->t_open = odx__now_ns();
	h->mcap = 64;
	pthread_mutex_init(&h->wd_lock, NULL);
	pthread_cond_init(&h->wd_cond, NULL);
	pthread_mutex_init(&h->ev_lock, NULL);
	pthread_mutex_init(&h->lock, NULL);
	h->spec = strdup(p->spec);
	h->model_dir = strdup(p->model_dir ? p->model_dir : "");
	/* persisted models learn from every run */
	atomic_init(&h->want_times, p->model_dir && p->model_dir[0]);
	h->devs = calloc((size_t)h->nd + 1, sizeof(*h->devs));
	h->models = calloc(h->mcap, sizeof(*h->models));
	h->dev_mean = calloc((size_t)h->nd + 1, sizeof(*h->dev_mean));
	h->dev_n = calloc((size_t)h->nd + 1, sizeof(*h->dev_n));
	h->nnodes = p->device_node ? p->nnodes : h->nd;
	h->device_node = calloc((size_t)h->nd + 1, sizeof(*h->device_node));
	h->qnow = calloc((size_t)h->nd + 1, sizeof(*h->qnow));
	h->bw = calloc((size_t)h->nnodes * (size_t)h->nnodes + 1, sizeof(*h->bw));
	if (!h->spec || !h->model_dir || !h->devs || !h->models || !h->dev_mean || !h->dev_n ||
	    !h->device_node || !h->qnow || !h->bw)
		goto out_fail;
	for (i = 0; i < (size_t)h->nnodes * (size_t)h->nnodes; i++)
		atomic_init(&h->bw[i], POL_LINK_BANDWIDTH);
	for (d = 0; d < h->nd; d++) {
		h->device_node[d] = p->device_node ? p->device_node[d] : d;
		if (h->device_node[d] < 0 || h->device_node[d] >= h->nnodes) {
			snprintf(err, errlen, "policy: device %d on memory node %d of %d", d,
				 h->device_node[d], h->nnodes);
			rc = ODX_EINVAL;
			goto out_fail;
		}
	}
	for (d = 0; d < h->nd; d++) {
		h->devs[d].kind = strdup(p->devices[d].kind);
		h->devs[d].name = strdup(p->devices[d].name);
		h->devs[d].memory = p->devices[d].memory;
		if (!h->devs[d].kind || !h->devs[d].name)
			goto out_fail;
	}
	if (strncmp(p->spec, "lua:", 4) == 0) {
		for (i = 0; i < sizeof(embedded) / sizeof(embedded[0]); i++)
			if (strcmp(embedded[i].name, p->spec + 4) == 0) {
				h->text = embedded[i].text;
				h->text_len = *embedded[i].size;
			}
		if (!h->text) {
			snprintf(err, errlen,
				 "policy '%s': no such shipped policy (lua:eager, lua:round_robin, "
				 "lua:locality, lua:heft, lua:lru, lua:lookahead)",
				 p->spec);
			rc = ODX_ECONFIG;
			goto out_fail;
		}
		snprintf(why, sizeof(why), "policies/%s.lua", p->spec + 4);
		h->display = strdup(why);
	} else {
		h->path = strdup(p->spec);
		h->display = strdup(p->spec);
		if (!h->path || !h->display)
			goto out_fail;
		rc = read_source(h, err, errlen);
		if (rc)
			goto out_fail;
	}
	if (!h->display)
		goto out_fail;
	pol_models_load(h);
	/* A file's rc is 0 here (read_source succeeded): take the start's own. */
	rc = pol_watchdog_start(h);
	if (rc)
		goto out_fail;
	h->next_check = odx__now_ns() + RELOAD_CHECK_NS;
	h->cur = state_open(h, why, sizeof(why));
	pol_publish_hooks(h);
	if (!h->cur) {
		h->disabled = true;
		atomic_fetch_add(&h->failures, 1);
		snprintf(err, errlen, "policy %s failed to load: %s", h->display, why);
		pol_say(h, ODX_LOG_WARN, true,
			"policy %s failed to load: %s; the built-in least_loaded decides until the file "
			"is fixed",
			h->display, why);
	}
	*out = h;
	return 0;

out_fail:
	odx__policy_close(h);
	return rc;
}

void odx__policy_close(odx__policy *h)
{
	int d;
	size_t i;

	if (!h)
		return;
	pol_models_save(h);
	/* lua_close is bounded by the watchdog like any entry: stop it only afterwards. */
	pol_state_close(h, h->cur);
	h->cur = NULL;
	pol_watchdog_stop(h);
	for (i = 0; i < h->mcap && h->models; i++)
		free(h->models[i].kernel);
	for (d = 0; d < h->nd && h->devs; d++) {
		free((void *)h->devs[d].kind);
		free((void *)h->devs[d].name);
	}
	if (h->path)
		free((void *)h->text);
	free(h->models);
	free(h->devs);
	free(h->dev_mean);
	free(h->dev_n);
	free(h->device_node);
	free(h->qnow);
	free((void *)h->bw);
	free(h->seen);
	free(h->transfer);
	free(h->valid);
	free(h->done);
	free(h->spec);
	free(h->path);
	free(h->display);
	free(h->model_dir);
	free(h->feasible);
	free(h->resident);
	free(h->missing);
	free(h->queue);
	pthread_mutex_destroy(&h->wd_lock);
	pthread_cond_destroy(&h->wd_cond);
	pthread_mutex_destroy(&h->ev_lock);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

void odx__policy_check_reload(odx__policy *h, bool force)
{
	char why[ODX__MSG_MAX];
	struct stat st;
	uint64_t now;
	pol_state *s;

	if (!h->path)
		return;
	now = odx__now_ns();
	if (!force && now < h->next_check)
		return;
	h->next_check = now + RELOAD_CHECK_NS;
	if (stat(h->path, &st) != 0 || (st.st_mtim.tv_sec == h->mtime.tv_sec &&
					st.st_mtim.tv_nsec == h->mtime.tv_nsec))
		return;
	if (read_source(h, why, sizeof(why)) != 0) {
		h->mtime = st.st_mtim; /* retried when it changes again */
		pol_say(h, ODX_LOG_WARN, true, "%s; keeping the running version", why);
		return;
	}
	s = state_open(h, why, sizeof(why));
	if (!s) {
		pol_say(h, ODX_LOG_WARN, true,
			"policy %s: the new version failed to load: %s; keeping the %s", h->display,
			why, h->cur ? "running version" : "built-in least_loaded");
		return;
	}
	pol_state_close(h, h->cur);
	h->cur = s;
	h->disabled = false;
	atomic_store(&h->gave_up, false);
	pol_publish_hooks(h);
	h->consecutive = 0;
	h->nsites = 0;
	pol_say(h, ODX_LOG_INFO, false, "policy %s: reloaded", h->display);
}

/* ---- calls ---------------------------------------------------------------------------------- */

/* Moves the completions recorded by workers into the models and on_complete. */
void pol_process_events(odx__policy *h)
{
	char why[ODX__MSG_MAX];
	pol_op_args a = {0};
	int n, i, rc;

	/* Workers take ev_lock for every completion: do not compete with them for nothing. */
	if (atomic_load_explicit(&h->nev, memory_order_relaxed) == 0)
		return;
	pthread_mutex_lock(&h->ev_lock);
	n = atomic_load_explicit(&h->nev, memory_order_relaxed);
	if (n == 0) {
		pthread_mutex_unlock(&h->ev_lock);
		return;
	}
	memcpy(h->ev_copy, h->ev, (size_t)n * sizeof(*h->ev));
	atomic_store_explicit(&h->nev, 0, memory_order_relaxed);
	pthread_mutex_unlock(&h->ev_lock);
	for (i = 0; i < n; i++)
		pol_model_add(h, h->ev_copy[i].kernel, h->ev_copy[i].device, h->ev_copy[i].bytes,
			      (double)h->ev_copy[i].ns / 1000.0);
	if (!h->cur || h->disabled || h->cur->ref_hook[HOOK_ON_COMPLETE] == LUA_NOREF)
		return;
	a.op = OP_COMPLETE;
	a.s = h->cur;
	a.events = h->ev_copy;
	a.nevents = n;
	rc = pol_run_op(h->cur, &a, h->budget_ns, why, sizeof(why));
	if (rc == POL_RC_ABANDONED)
		pol_say(h, ODX_LOG_ERROR, true, "%s", why);
	else if (rc != LUA_OK)
		fail(h, why, why);
}

int odx__policy_place(odx__policy *h, const odx__policy_task *tasks, int n, const int *queue,
		      int *out)
{
	char why[ODX__MSG_MAX];
	pol_op_args a = {0};
	int i, rc;

	if (n > POL_BATCH_MAX) { /* the reused tables hold POL_BATCH_MAX tasks */
		int done = 0;

		for (i = 0; i < n; i += POL_BATCH_MAX)
			done += odx__policy_place(h, tasks + i, n - i < POL_BATCH_MAX ? n - i : POL_BATCH_MAX,
						  queue, out + i);
		return done;
	}
	odx__policy_check_reload(h, false);
	pol_process_events(h);
	for (i = 0; i < n; i++)
		out[i] = -1;
	if (!h->cur || h->disabled || n == 0)
		return 0;
	h->place_calls++;
	h->placed += (uint64_t)n;
	a.op = OP_PLACE;
	a.s = h->cur;
	a.tasks = tasks;
	a.n = n;
	a.queue = queue;
	a.out = out;
	rc = pol_run_op(h->cur, &a, h->budget_ns, why, sizeof(why));
	if (rc == POL_RC_ABANDONED) {
		for (i = 0; i < n; i++)
			out[i] = -1;
		atomic_fetch_add(&h->failures, 1);
		pol_say(h, ODX_LOG_ERROR, true, "%s", why);
		return 0;
	}
	if (rc != LUA_OK) {
		/* The site is the message's first line: one log line per distinct error. */
		char site[256];

		snprintf(site, sizeof(site), "%.*s", (int)strcspn(why, "\n"), why);
		for (i = 0; i < n; i++)
			out[i] = -1;
		fail(h, site, why);
		return 0;
	}
	if (a.invalid) {
		char msg[ODX__MSG_MAX + 64];

		snprintf(msg, sizeof(msg), "%s (%d invalid answer%s in a batch of %d)", a.bad,
			 a.invalid, a.invalid > 1 ? "s" : "", n);
		fail(h, "invalid answer", msg);
		return a.decided;
	}
	h->consecutive = 0;
	return a.decided;
}

/* Runs one call of a hook other than place (a->op set): ODX_ENOSYS when the policy is off or
 * lacks the hook, ODX_EINVAL when the call failed or the answer is invalid (counted and logged
 * as for place), else 0. */
static int run_hook(odx__policy *h, pol_op_args *a, enum hook hook)
{
	char why[ODX__MSG_MAX];
	int rc;

	if (!h->cur || h->disabled || h->cur->ref_hook[hook] == LUA_NOREF)
		return ODX_ENOSYS;
	a->s = h->cur;
	rc = pol_run_op(h->cur, a, h->budget_ns, why, sizeof(why));
	/* place_rank's instruction hook and random stream end with the call, however it ended. */
	h->rng_now = &h->rng;
	if (rc == POL_RC_ABANDONED) {
		atomic_fetch_add(&h->failures, 1);
		pol_say(h, ODX_LOG_ERROR, true, "%s", why);
		return ODX_EINVAL;
	}
	if (hook == HOOK_PLACE_RANK)
		lua_sethook(h->cur->L, NULL, 0, 0);
	if (rc != LUA_OK) {
		char site[256];

		snprintf(site, sizeof(site), "%.*s", (int)strcspn(why, "\n"), why);
		fail(h, site, why);
		return ODX_EINVAL;
	}
	if (a->invalid) {
		fail(h, "invalid answer", a->bad);
		return hook == HOOK_PLACE_RANK ? 0 : ODX_EINVAL;
	}
	h->consecutive = 0;
	return 0;
}

int odx__policy_host_evict(odx__policy *h, int memnode, uint64_t need, const odx__evict_cand *c,
			   int n, int *order)
{
	pol_op_args a = {.op = OP_EVICT, .memnode = memnode, .need = need, .cands = c, .n = n,
		     .order = order};
	int rc;

	if (n < 0 || (n > 0 && (!c || !order)))
		return ODX_EINVAL;
	rc = run_hook(h, &a, HOOK_EVICT);
	return rc < 0 ? rc : a.norder;
}

int odx__policy_host_prefetch(odx__policy *h, const odx__prefetch_task *w, int n, int *order)
{
	pol_op_args a = {.op = OP_PREFETCH, .window = w, .n = n, .order = order};
	int i, rc;

	if (n < 0 || (n > 0 && (!w || !order)))
		return ODX_EINVAL;
	for (i = 0; i < n; i++)
		if (w[i].device < 0 || w[i].device >= h->nd || w[i].nbufs < 0 ||
		    (w[i].nbufs > 0 && (!w[i].buffer_ids || !w[i].missing_bytes)))
			return ODX_EINVAL;
	rc = run_hook(h, &a, HOOK_PREFETCH);
	return rc < 0 ? rc : a.norder;
}

int odx__policy_host_place_rank(odx__policy *h, const odx__rank_task *b, int n, int nranks,
				int *out_rank)
{
	pol_op_args a = {.op = OP_PLACE_RANK, .ranks = b, .n = n, .nranks = nranks, .order = out_rank};
	int i, rc;

	if (n < 0 || nranks < 1 || (n > 0 && (!b || !out_rank)))
		return ODX_EINVAL;
	for (i = 0; i < n; i++)
		if (b[i].nbufs < 0 || (b[i].nbufs > 0 && (!b[i].owner_rank || !b[i].buf_bytes)))
			return ODX_EINVAL;
	rc = run_hook(h, &a, HOOK_PLACE_RANK);
	if (rc < 0)
		return rc;
	return a.decided;
}

int odx__policy_host_tick(odx__policy *h, const int *queue, const uint64_t *done)
{
	pol_op_args a = {.op = OP_TICK, .queue = queue, .done = done};

	return run_hook(h, &a, HOOK_ON_TICK);
}

void odx__policy_host_set_bandwidth(odx__policy *h, int src_node, int dst_node,
				    double bytes_per_s)
{
	if (src_node < 0 || dst_node < 0 || src_node >= h->nnodes || dst_node >= h->nnodes ||
	    !(bytes_per_s > 0) || isinf(bytes_per_s))
		return;
	atomic_store_explicit(&h->bw[src_node * h->nnodes + dst_node], bytes_per_s,
			      memory_order_relaxed);
}

void odx__policy_feedback(odx__policy *h, const char *kernel, int device, uint64_t bytes,
			  uint64_t ns)
{
	int n;

	pthread_mutex_lock(&h->ev_lock);
	n = atomic_load_explicit(&h->nev, memory_order_relaxed);
	if (n < POL_EVENTS_MAX) {
		h->ev[n] = (pol_event){.kernel = kernel, .device = device, .bytes = bytes, .ns = ns};
		atomic_store_explicit(&h->nev, n + 1, memory_order_relaxed);
	} else {
		h->ev_dropped++;
	}
	pthread_mutex_unlock(&h->ev_lock);
}

void odx__policy_describe(odx_context *ctx, char *buf, size_t len)
{
	odx__policy *h = ctx->policy;
	uint64_t seq, start;
	int op;

	if (!h) {
		snprintf(buf, len, "policy %s (built in)", odx__config_str(ctx->config, "policy"));
		return;
	}
	/* Racy by design (another thread runs the calls): each word is read atomically. */
	seq = atomic_load(&h->seq);
	start = atomic_load(&h->call_start);
	op = atomic_load(&h->call_op);
	if ((seq & 1) && op >= 0 && op < OP_COUNT)
		snprintf(buf, len, "policy %s (file %s): in '%s' for %llu ms%s", h->spec, h->display,
			 pol_op_names[op], (unsigned long long)((odx__now_ns() - start) / 1000000),
			 atomic_load(&h->kill_seq) == seq ? ", being abandoned" : "");
	else
		snprintf(buf, len, "policy %s (file %s): no call running%s", h->spec, h->display,
			 atomic_load(&h->gave_up) ? "; gave up on it, the built-in decides" : "");
}

bool odx__policy_enabled(const odx__policy *h)
{
	return h->cur && !h->disabled;
}

const char *odx__policy_name(const odx__policy *h)
{
	return h->display;
}

uint64_t odx__policy_failures(const odx__policy *h)
{
	return atomic_load(&((odx__policy *)h)->failures);
}
