/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_hostile.c - no policy can hang or crash a program. One hostile policy per class of
 * hang, each through a real context running real tasks on two host devices: long C library calls
 * (crafted patterns, C loops that allocate nothing), odx.* helpers with huge arguments, code where
 * Lua turns hooks off (xpcall handlers, __gc), __close and __tostring loops, endless loops and
 * endless C calls at the top level and in init, and a policy that would hang at close. Each run
 * must finish (the waits have timeouts, the test a generous meson timeout; nothing here measures
 * time), produce exact results, and name the policy file and the hook it gave up on.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "policy.h" /* odx__policy_set_bandwidth: the dump test's release of its stuck call */
#include "test_util.h"

#include "policy_graph.h"

/* test_dump_names_policy: the context whose no-progress dump ends its stuck policy call */
static odx_context *_Atomic dump_ctx;
#define DUMP_SIGNAL 7.0 /* bytes/s of link 1 -> 2 that tells the stuck policy to return */

/* The dump named the running hook: release the policy (it reads the link's bandwidth). */
static void release_on_dump(const char *msg)
{
	odx_context *ctx = atomic_load(&dump_ctx);

	if (ctx && strstr(msg, "in 'place' for "))
		odx__policy_set_bandwidth(ctx, 0, 1, DUMP_SIGNAL);
}

enum outcome {
	CLEAN,     /* the policy runs; nothing is reported */
	SOFT,      /* a call fails (budget, error): `expect` names file and line */
	ABANDONED, /* a call is abandoned: odx_last_error names policy, file and `expect` (hook) */
};

struct hostile {
	const char *name;
	const char *source;
	enum outcome outcome;
	const char *expect;
};

/* place runs `body`, then answers device 1 for every task. */
#define PLACE(body)                                                                                \
	"local P = { api = 1 }\nfunction P.place(batch, out)\n" body                               \
	"\n\tfor i = 1, batch.n do out.device[i] = 1 end\nend\nreturn P\n"
/* The crafted pattern: O(n^4) backtracking, n = 300, in Lua's C matcher (minutes). */
#define SLOW_FIND "string.find(('a'):rep(300), '.-.-.-.-b')"

static const struct hostile cases[] = {
	/* Long C library calls: only the hard bound stops them. */
	{"pattern", PLACE("\t" SLOW_FIND), ABANDONED, "'place'"},
	{"pattern_method", PLACE("\tlocal s = ('a'):rep(300)\n\ts:match('.-.-.-.-b')"), ABANDONED,
	 "'place'"},
	{"plain_find", PLACE("\tlocal s = ('a'):rep(1 << 20)\n"
			     "\tfor i = 1, 100 do s:find(('a'):rep(1 << 19) .. 'b', 1, true) end"),
	 ABANDONED, "'place'"},
	{"gsub", PLACE("\tlocal s = ('a'):rep(300)\n\ts:gsub('.-.-.-.-b', 'x')"), ABANDONED,
	 "'place'"},
	{"pattern_in_handler",
	 PLACE("\txpcall(error, function(e) return " SLOW_FIND " end, 'x')"), ABANDONED,
	 "'place'"},
	{"pattern_in_tostring",
	 PLACE("\ttostring(setmetatable({}, {__tostring = function() " SLOW_FIND
	       " return '' end}))"),
	 ABANDONED, "'place'"},
	{"pattern_init",
	 "local P = { api = 1 }\nfunction P.place(batch, out) end\n"
	 "function P.init(m) " SLOW_FIND " end\nreturn P\n",
	 ABANDONED, "'init'"},
	/* C loops that allocate nothing: refused or answered at once. */
	{"rep_empty", PLACE("\tlocal s = (''):rep(1e15) .. (''):rep(1 << 62, '') .. ('x'):rep(1, '')"),
	 CLEAN, NULL},
	{"rep_huge", PLACE("\tlocal s = ('x'):rep(1e15, '')"), SOFT, "resulting string too large"},
	{"move", PLACE("\ttable.move({}, 1, 1e15, 2)"), SOFT, "3: table.move: range"},
	{"insert_len", PLACE("\ttable.insert(setmetatable({}, {__len = function() return 1e15 end}), "
			     "1, 0)"),
	 SOFT, "3: table length"},
	{"remove_len", PLACE("\ttable.remove(setmetatable({}, {__len = function() return 1 << 60 "
			     "end}), 1)"),
	 SOFT, "3: table length"},
	/* odx.* helpers with huge or extreme arguments. */
	{"argmin_huge", PLACE("\tassert(odx.argmin({}, math.maxinteger) == nil)\n"
			      "\tassert(odx.argmin({5, 3}, 1e15) == 2)"),
	 CLEAN, NULL},
	{"random_extreme",
	 PLACE("\tfor k = 1, 100 do\n"
	       "\t\tlocal v = odx.random(math.mininteger, math.maxinteger)\n"
	       "\t\tassert(math.type(v) == 'integer')\n"
	       "\t\tassert(odx.random(math.maxinteger, math.maxinteger) == math.maxinteger)\n"
	       "\t\tassert(odx.random(math.mininteger, math.mininteger) == math.mininteger)\n"
	       "\t\tlocal w = odx.random(math.mininteger, -1) assert(w < 0)\n"
	       "\t\tlocal x = odx.random(-1, math.maxinteger) assert(x >= -1)\n"
	       "\t\tlocal y = odx.random(math.maxinteger) assert(y >= 1)\n"
	       "\t\tassert(math.type(odx.random(0)) == 'integer')\n"
	       "\tend"),
	 CLEAN, NULL},
	{"random_reversed", PLACE("\todx.random(math.maxinteger, math.mininteger)"), SOFT,
	 "3: bad argument #2 to 'random' (interval is empty)"},
	{"random_empty", PLACE("\tmath.random(-5)"), SOFT, "interval is empty"},
	{"estimate_huge", PLACE("\todx.estimate(('k'):rep(1 << 16), math.maxinteger, math.maxinteger)\n"
				"\todx.bandwidth(math.mininteger, math.maxinteger)"),
	 CLEAN, NULL},
	{"log_huge", PLACE("\todx.log(('x'):rep(1 << 16))"), CLEAN, NULL},
	/* Where Lua turns hooks off, and metamethods the host might call. */
	{"xpcall_loop", PLACE("\txpcall(error, function() while true do end end, 'x')"), SOFT,
	 "budget exceeded"},
	{"xpcall_after_budget",
	 PLACE("\txpcall(function() while true do end end, function() while true do end end)\n"
	       "\twhile true do end"),
	 SOFT, "budget exceeded"},
	{"gc_refused", PLACE("\tsetmetatable({}, {__gc = function() while true do end end})"), SOFT,
	 "3: setmetatable: a metatable with __gc is not allowed"},
	{"close_loop",
	 PLACE("\tdo local x <close> = setmetatable({}, {__close = function() while true do end "
	       "end}) end"),
	 SOFT, "budget exceeded"},
	{"tostring_error",
	 PLACE("\terror(setmetatable({}, {__tostring = function() while true do end end}))"), SOFT,
	 "(error object is a table value)"},
	{"index_result",
	 "return setmetatable({}, {__index = function() while true do end end})\n", SOFT,
	 "the policy defines no 'place'"},
	/* The top level: odx_open returns, on the built-in, naming the file and "load". */
	{"top_loop", "local P = { api = 1 }\nwhile true do end\nreturn P\n", SOFT,
	 "2: budget exceeded"},
	{"top_c_call", "local P = { api = 1 }\n" SLOW_FIND "\nreturn P\n", ABANDONED, "'load'"},
	{"top_gc", "setmetatable({}, {__gc = function() while true do end end})\nreturn {}\n", SOFT,
	 "1: setmetatable: a metatable with __gc"},
	/* Would hang at close through a finalizer, if one could be set. */
	{"close_hang",
	 "pcall(setmetatable, {}, {__gc = function() while true do end end})\n"
	 "local t = setmetatable({}, {})\ngetmetatable(t).__gc = function() while true do end end\n"
	 PLACE(""),
	 CLEAN, NULL},
};

static void check_case(const struct hostile *c, const char *path, odx_context *ctx)
{
	char err[2048], logs[sizeof(log_text)], want[700];

	snprintf(err, sizeof(err), "%s", odx_last_error(ctx));
	pthread_mutex_lock(&log_lock);
	memcpy(logs, log_text, sizeof(logs));
	pthread_mutex_unlock(&log_lock);
	switch (c->outcome) {
	case CLEAN:
		if (strstr(logs, "policy"))
			fail_msg("case %s: expected no report, got: %s", c->name, logs);
		break;
	case SOFT:
		/* "LINE: message", or a message raised in C (no line) in a report naming the file */
		if (c->expect[0] >= '0' && c->expect[0] <= '9')
			snprintf(want, sizeof(want), "%s:%s", path, c->expect);
		else
			snprintf(want, sizeof(want), "%s", c->expect);
		if (!(strstr(err, want) && strstr(err, path)) && !(strstr(logs, want) && strstr(logs, path)))
			fail_msg("case %s: neither the last error '%s' nor the log '%s' names '%s'",
				 c->name, err, logs, want);
		if (strstr(logs, "abandoned"))
			fail_msg("case %s: abandoned where a soft failure was expected: %s", c->name,
				 logs);
		break;
	case ABANDONED:
		/* One message names the policy, its file and the hook; it is the last error. */
		snprintf(want, sizeof(want), "policy %s (file %s): abandoned %s", path, path, c->expect);
		if (!strstr(err, want) && !(strcmp(c->expect, "'load'") == 0 && strstr(logs, want)))
			fail_msg("case %s: the last error '%s' (log '%s') does not say '%s'", c->name,
				 err, logs, want);
		break;
	}
}

static void test_hostile(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char path[512];
		odx_config *cfg;
		odx_context *ctx;

		snprintf(path, sizeof(path), "%s/%s.lua", dir, cases[c].name);
		write_file(path, cases[c].source);
		print_message("case %s\n", cases[c].name);
		ctx = open_with(path, "5000", &cfg);
		run_graph(ctx);
		run_graph(ctx); /* the calls after a failure or an abandon are correct too */
		check_case(&cases[c], path, ctx);
		assert_ok(odx_close(ctx));
		odx_config_destroy(cfg);
		unlink(path);
	}
}

static void touch_later(const char *path, int seconds)
{
	struct timespec ts[2];

	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec += seconds;
	ts[1] = ts[0];
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* After an abandon the built-in decides until the file changes; a fixed version then loads. */
static void test_reload_after_abandon(void **state)
{
	char path[512];
	odx_config *cfg;
	odx_context *ctx;

	(void)state;
	snprintf(path, sizeof(path), "%s/recover.lua", dir);
	write_file(path, "local P = { api = 1 }\nlocal calls = 0\nfunction P.place(batch, out)\n"
			 "\tcalls = calls + 1\n\tif calls == 2 then " SLOW_FIND " end\n"
			 "\tfor i = 1, batch.n do out.device[i] = 1 end\nend\nreturn P\n");
	ctx = open_with(path, "5000", &cfg);
	run_graph(ctx);
	assert_contains(odx_last_error(ctx), "abandoned 'place'");
	write_file(path, "local P = { api = 1 }\nfunction P.place(batch, out)\n"
			 "\tfor i = 1, batch.n do out.device[i] = 2 end\nend\nreturn P\n");
	touch_later(path, 10);
	usleep(150 * 1000);
	atomic_store(&ran_on[0], 0);
	atomic_store(&ran_on[1], 0);
	run_graph(ctx);
	/* the first batch may be decided before the check sees the new file */
	assert_true(atomic_load(&ran_on[0]) <= 1);
	assert_true(atomic_load(&ran_on[1]) >= CHAIN + SIDE - 1);
	assert_ok(odx_close(ctx));
	odx_config_destroy(cfg);
	unlink(path);
}

/* The context's no-progress dump names the policy and the hook it is stuck in. The place call
 * spins until the dump has named it (the log callback then sets a link bandwidth the loop
 * reads), so the test waits for the event, not for a time; the soft budget (10 s of CPU, the
 * most policy.budget allows) is only a hang guard. The run then goes on normally. */
static void test_dump_names_policy(void **state)
{
	char path[512], want[700];
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;

	(void)state;
	snprintf(path, sizeof(path), "%s/stuck.lua", dir);
	write_file(path, PLACE("	while odx.bandwidth(1, 2) ~= 7 do end"));
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "host.devices", "2"));
	assert_ok(odx_config_set(cfg, "host.bind", "false"));
	assert_ok(odx_config_set(cfg, "policy", path));
	assert_ok(odx_config_set(cfg, "policy.budget", "10000000"));
	/* private: nodes 1 (host RAM) and 2 (device 0) exist for the signal's link */
	assert_ok(odx_config_set(cfg, "host.memnode", "private"));
	assert_ok(odx_config_set(cfg, "tier.watchdog_ms", "100"));
	assert_ok(odx_config_set(cfg, "log", "warn"));
	assert_ok(odx_config_set_log(cfg, capture_log, NULL));
	pthread_mutex_lock(&log_lock);
	log_text[0] = '\0';
	pthread_mutex_unlock(&log_lock);
	policy_log_hook = release_on_dump; /* set before the context's threads exist */
	assert_ok(odx_open(&ctx, cfg));
	atomic_store(&dump_ctx, ctx);
	run_graph(ctx);
	atomic_store(&dump_ctx, NULL);
	snprintf(want, sizeof(want), "  policy %s (file %s): in 'place' for ", path, path);
	pthread_mutex_lock(&log_lock);
	if (!strstr(log_text, want))
		fail_msg("the no-progress dump does not name the policy: '%s'", log_text);
	pthread_mutex_unlock(&log_lock);
	assert_ok(odx_close(ctx));
	policy_log_hook = NULL;
	odx_config_destroy(cfg);
	unlink(path);
}

/* A source larger than the cap is refused with a clear error. */
static void test_source_cap(void **state)
{
	char path[512];
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/big.lua", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < (2 << 20) / 16; i++)
		fputs("-- padding ....\n", f);
	fputs(PLACE(""), f);
	assert_int_equal(fclose(f), 0);
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "policy", path));
	assert_rc(odx_open(&ctx, cfg), ODX_ECONFIG);
	assert_contains(odx_config_error(cfg), "more than the 1048576 a policy may have");
	odx_config_destroy(cfg);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_reload_after_abandon),
		cmocka_unit_test(test_source_cap),
		cmocka_unit_test(test_dump_names_policy),
	};
	int rc;

	snprintf(dir, sizeof(dir), "/tmp/odx-policy-hostile-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	rmdir(dir);
	return rc;
}
