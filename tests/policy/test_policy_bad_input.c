/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_bad_input.c - end to end: a broken or hostile Lua policy never changes a program's
 * results. Each case writes a policy file, runs a small task graph on two host devices with it,
 * checks every output, and checks that the failure was reported naming the file and the line
 * (in odx_last_error or the log). Also: the shipped policies run the same graph cleanly, and a
 * policy file is reloaded mid-run while a broken new version keeps the old one.
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
#include "test_util.h"

#include "policy_graph.h"

struct bad_case {
	const char *name;
	const char *source;
	const char *expect; /* in odx_last_error or the log, after "<dir>/<name>.lua:" */
};

#define HEAD "local P = { api = 1 }\nfunction P.place(batch, out)\n"
#define TAIL "\n\tfor i = 1, batch.n do out.device[i] = 1 end\nend\nreturn P\n"

static const struct bad_case cases[] = {
	{"syntax", HEAD "\tout.device[1] = = 1" TAIL, "3:"},
	{"runtime", HEAD "\terror('boom')" TAIL, "3: boom"},
	{"toploop", "local P = { api = 1 }\nwhile true do end\nreturn P\n", "2: budget exceeded"},
	{"hookloop", HEAD "\twhile true do end" TAIL, "3: budget exceeded"},
	{"catchloop", HEAD "\twhile true do pcall(function() while true do end end) end" TAIL,
	 "3: budget exceeded"},
	{"strbomb", HEAD "\tlocal s = ('x'):rep(1 << 30)" TAIL, "2: not enough memory"},
	{"tablebomb", HEAD "\tlocal t = {} for i = 1, 1e9 do t[i] = {i} end" TAIL, ""},
	{"range", "local P = { api = 1 }\nfunction P.place(batch, out)\n"
		  "\tfor i = 1, batch.n do out.device[i] = 7 end\nend\nreturn P\n",
	 "2: place: out.device[1] = 7 is not a device"},
	{"negative", "local P = { api = 1 }\nfunction P.place(batch, out)\n"
		     "\tfor i = 1, batch.n do out.device[i] = -1 end\nend\nreturn P\n",
	 "2: place: out.device[1] = -1 is not a device"},
	{"fraction", "local P = { api = 1 }\nfunction P.place(batch, out)\n"
		     "\tfor i = 1, batch.n do out.device[i] = 1.5 end\nend\nreturn P\n",
	 "2: place: out.device[1] = 1.5 is not an integer"},
	{"wrongtype", "local P = { api = 1 }\nfunction P.place(batch, out)\n"
		      "\tfor i = 1, batch.n do out.device[i] = 'gpu' end\nend\nreturn P\n",
	 "2: place: out.device[1] is a string"},
	{"missing", "local P = { api = 1 }\nfunction P.place(batch, out)\nend\nreturn P\n",
	 "2: place: out.device[1] is missing"},
	{"noplace", "return { api = 1 }\n", " the policy defines no 'place'"},
	{"notable", "return 42\n", " the file must return a table"},
	{"io", HEAD "\tio.open('/etc/passwd')" TAIL, "3: attempt to index a nil value (global 'io')"},
	{"os", HEAD "\tos.exit(1)" TAIL, "3: attempt to index a nil value (global 'os')"},
	{"require", HEAD "\trequire('os')" TAIL, "3: attempt to call a nil value (global 'require')"},
	{"load", HEAD "\tload('return 1')()" TAIL, "3: attempt to call a nil value (global 'load')"},
	{"dump", HEAD "\tstring.dump(P.place)" TAIL, "3: attempt to call a nil value (field 'dump')"},
	{"strmeta", HEAD "\tgetmetatable('').__index.dump(print)" TAIL, "3: attempt to index a nil"},
	{"debug", HEAD "\tdebug.sethook()" TAIL, "3: attempt to index a nil value (global 'debug')"},
	{"selftest", "local P = { api = 1 }\nfunction P.place(batch, out) end\n"
		     "function P.selftest() return false end\nreturn P\n",
	 " selftest returned false"},
	{"initerr", "local P = { api = 1 }\nfunction P.place(batch, out) end\n"
		    "function P.init(m) error('no ' .. m.devices[1].kind) end\nreturn P\n",
	 "3: no host"},
};

static void test_bad_policies(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char path[512], want[700], err[1024];
		odx_config *cfg;
		odx_context *ctx;

		snprintf(path, sizeof(path), "%s/%s.lua", dir, cases[c].name);
		write_file(path, cases[c].source);
		ctx = open_with(path, "2000", &cfg);
		run_graph(ctx);
		snprintf(err, sizeof(err), "%s", odx_last_error(ctx));
		snprintf(want, sizeof(want), "%s:%s", path, cases[c].expect);
		if (!strstr(err, want) && !strstr(log_text, want))
			fail_msg("case %s: neither the last error '%s' nor the log '%s' names '%s'",
				 cases[c].name, err, log_text, want);
		assert_ok(odx_close(ctx));
		odx_config_destroy(cfg);
	}
}

static void test_shipped_policies(void **state)
{
	static const char *const names[] = {"lua:eager", "lua:round_robin", "lua:locality",
					    "lua:heft"};

	(void)state;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		odx_config *cfg;
		odx_context *ctx = open_with(names[i], "2000", &cfg);

		atomic_store(&ran_on[0], 0);
		atomic_store(&ran_on[1], 0);
		run_graph(ctx);
		if (strstr(log_text, "policy"))
			fail_msg("%s reported: %s", names[i], log_text);
		assert_ok(odx_close(ctx));
		odx_config_destroy(cfg);
	}
	/* round robin uses both devices */
	assert_true(atomic_load(&ran_on[0]) > 0 || atomic_load(&ran_on[1]) > 0);
}

static void touch_later(const char *path, int seconds)
{
	struct timespec ts[2];

	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec += seconds;
	ts[1] = ts[0];
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

#define ALWAYS(d)                                                                                  \
	"local P = { api = 1 }\nfunction P.place(batch, out)\n"                                    \
	"\tfor i = 1, batch.n do out.device[i] = " #d " end\nend\nreturn P\n"

static void test_reload(void **state)
{
	char path[512];
	odx_config *cfg;
	odx_context *ctx;

	(void)state;
	snprintf(path, sizeof(path), "%s/reload.lua", dir);
	write_file(path, ALWAYS(1));
	ctx = open_with(path, "2000", &cfg);
	atomic_store(&ran_on[0], 0);
	atomic_store(&ran_on[1], 0);
	run_graph(ctx);
	assert_int_equal(atomic_load(&ran_on[1]), 0);

	/* A new version is swapped in between batches. */
	write_file(path, ALWAYS(2));
	touch_later(path, 10);
	usleep(150 * 1000);
	atomic_store(&ran_on[0], 0);
	atomic_store(&ran_on[1], 0);
	run_graph(ctx);
	/* the first batch may be decided before the check sees the new file */
	assert_true(atomic_load(&ran_on[0]) <= 1);
	assert_true(atomic_load(&ran_on[1]) >= CHAIN + SIDE - 1);

	/* A broken version keeps the running one and says why. */
	write_file(path, "local P = { api = 1 }\nfunction P.place(batch, out)\n\tout.device[1] = = 1\n"
			 "end\nreturn P\n");
	touch_later(path, 20);
	usleep(150 * 1000);
	atomic_store(&ran_on[0], 0);
	atomic_store(&ran_on[1], 0);
	run_graph(ctx);
	assert_int_equal(atomic_load(&ran_on[0]), 0);
	assert_contains(log_text, "reload.lua:3:");
	assert_contains(log_text, "keeping the running version");
	assert_ok(odx_close(ctx));
	odx_config_destroy(cfg);
}

static void test_bad_config(void **state)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;

	(void)state;
	assert_ok(odx_config_create(&cfg));
	assert_rc(odx_config_set(cfg, "policy", "lua:nope"), ODX_ECONFIG);
	assert_ok(odx_config_set(cfg, "policy", "/nonexistent/policy.lua"));
	assert_rc(odx_open(&ctx, cfg), ODX_ECONFIG);
	assert_contains(odx_config_error(cfg), "/nonexistent/policy.lua");
	odx_config_destroy(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_policies),
		cmocka_unit_test(test_shipped_policies),
		cmocka_unit_test(test_reload),
		cmocka_unit_test(test_bad_config),
	};
	int rc;

	snprintf(dir, sizeof(dir), "/tmp/odx-policy-test-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	/* leave nothing behind */
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char path[512];

		snprintf(path, sizeof(path), "%s/%s.lua", dir, cases[c].name);
		unlink(path);
	}
	{
		char path[512];

		snprintf(path, sizeof(path), "%s/reload.lua", dir);
		unlink(path);
	}
	rmdir(dir);
	return rc;
}
