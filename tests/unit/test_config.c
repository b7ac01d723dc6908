/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config.c - the key table, the parsers and the precedence of core/config.c.
 *
 * The environment is injected (env_lookup below) so that nothing the developer or CI has set
 * changes a result; files are written to a fresh mkdtemp directory.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"

struct env_var {
	const char *name;
	const char *value;
};

/* The environment seen by odx__config_load; NULL-name terminated. Set by each test. */
static const struct env_var *test_env;
static char tmpdir[PATH_MAX];

static const char *env_lookup(const char *name)
{
	for (const struct env_var *e = test_env; e && e->name; e++) {
		if (strcmp(e->name, name) == 0)
			return e->value;
	}
	return NULL;
}

/* No ODX_CONFIG, so tests that do not ask for a file must not find a stray ./odx.conf. */
static const struct env_var no_file_env[] = {{"ODX_CONFIG", ""}, {NULL, NULL}};

static int make_tmpdir(void **state)
{
	const char *base = getenv("TMPDIR");

	(void)state;
	if (!base || !*base)
		base = "/tmp";
	snprintf(tmpdir, sizeof(tmpdir), "%s/odx-test-config-XXXXXX", base);
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Writes `text` to tmpdir/name and returns the full path in a static buffer. */
static const char *write_file(const char *name, const char *text)
{
	static char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	return path;
}

/* Loads with `api` (may be NULL) and the given environment; expects success. */
static odx__config *load_ok(const odx_config *api, const struct env_var *env)
{
	odx__config *cfg = NULL;
	char err[512];
	int rc;

	test_env = env;
	rc = odx__config_load(api, env_lookup, &cfg, err, sizeof(err));
	if (rc)
		fail_msg("load failed (%d): %s", rc, err);
	assert_non_null(cfg);
	return cfg;
}

/* Loads expecting ODX_ECONFIG; the message is returned in err. */
static void load_fail(const odx_config *api, const struct env_var *env, char *err, size_t len)
{
	odx__config *cfg = NULL;

	test_env = env;
	assert_int_equal(odx__config_load(api, env_lookup, &cfg, err, len), ODX_ECONFIG);
	assert_null(cfg);
}

/* Loads the file `text` through odx_config_set_file and expects `msg` (with "PATH" replaced). */
static void file_fails_with(const char *text, const char *msg_after_path)
{
	char expected[PATH_MAX + 512];
	char err[512];
	odx_config *api;
	const char *path = write_file("bad.conf", text);

	assert_int_equal(odx_config_create(&api), 0);
	assert_int_equal(odx_config_set_file(api, path), 0);
	load_fail(api, no_file_env, err, sizeof(err));
	snprintf(expected, sizeof(expected), "%s%s", path, msg_after_path);
	assert_string_equal(err, expected);
	odx_config_destroy(api);
}

struct origin_list {
	char text[8192];
	int count;
};

/* A visitor collecting "key=value@origin;" so one string compare checks everything. */
static void collect(void *user, const char *key, const char *value, const char *origin,
		    const char *help)
{
	struct origin_list *l = user;
	size_t n = strlen(l->text);

	assert_non_null(help);
	assert_true(help[0] != '\0');
	snprintf(l->text + n, sizeof(l->text) - n, "%s=%s@%s;", key, value, origin);
	l->count++;
}

/* The origin foreach reports for one key. */
struct one_origin {
	const char *key;
	char origin[512];
};

static void find_origin(void *user, const char *key, const char *value, const char *origin,
			const char *help)
{
	struct one_origin *o = user;

	(void)value;
	(void)help;
	if (strcmp(key, o->key) == 0)
		snprintf(o->origin, sizeof(o->origin), "%s", origin);
}

static const char *origin_of(const odx__config *cfg, const char *key)
{
	static struct one_origin o;

	o.key = key;
	strcpy(o.origin, "(not visited)");
	odx__config_foreach(cfg, find_origin, &o);
	return o.origin;
}

/* ---- parsers ------------------------------------------------------------------------------ */

static void size_is(const char *text, uint64_t bytes, unsigned percent)
{
	uint64_t b = 12345;
	unsigned p = 99;

	if (odx__parse_size(text, &b, &p) != 0)
		fail_msg("'%s' did not parse as a size", text);
	assert_int_equal(b, bytes);
	assert_int_equal(p, percent);
}

static void size_bad(const char *text)
{
	uint64_t b = 12345;
	unsigned p = 99;

	if (odx__parse_size(text, &b, &p) != ODX_EINVAL)
		fail_msg("'%s' parsed as a size", text);
	/* Out parameters are untouched on failure. */
	assert_int_equal(b, 12345);
	assert_int_equal(p, 99);
}

static void test_parse_size(void **state)
{
	(void)state;
	size_is("0", 0, 0);
	size_is("512", 512, 0);
	size_is("7B", 7, 0);
	size_is("1KB", 1000, 0);
	size_is("3MB", 3000000, 0);
	size_is("2GB", 2000000000ull, 0);
	size_is("1TB", 1000000000000ull, 0);
	size_is("1KiB", 1024, 0);
	size_is("512MiB", 512ull << 20, 0);
	size_is("2GiB", 2ull << 30, 0);
	size_is("1TiB", 1ull << 40, 0);
	size_is("4K", 4096, 0);
	size_is("3M", 3ull << 20, 0);
	size_is("5G", 5ull << 30, 0);
	size_is("1T", 1ull << 40, 0);
	size_is("2 GiB", 2ull << 30, 0);
	size_is(" 2\tmib ", 2ull << 20, 0);
	size_is("80%", 0, 80);
	size_is("100%", 0, 100);
	size_is("1 %", 0, 1);
	size_is("18446744073709551615", UINT64_MAX, 0);
	size_is("16777215TiB", 16777215ull << 40, 0);

	size_bad("");
	size_bad("   ");
	size_bad("GiB");
	size_bad("abc");
	size_bad("-1");
	size_bad("-1GiB");
	size_bad("+1");
	size_bad("1.5GiB");
	size_bad("12XB");
	size_bad("1 2");
	size_bad("1EiB");
	size_bad("0%");
	size_bad("101%");
	size_bad("%");
	size_bad("50%%");
	size_bad("18446744073709551616");
	size_bad("16777216TiB");
	size_bad("99999999999999999999999999");
}

static void test_parse_bool(void **state)
{
	static const char *const yes[] = {"true", "TRUE", "Yes", "on", "ON", "1", " true "};
	static const char *const no[] = {"false", "False", "no", "NO", "off", "0", "\toff"};
	static const char *const bad[] = {"", "2", "truee", "y", "n", "enabled", "-1", "o n"};
	bool b;

	(void)state;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		b = false;
		assert_int_equal(odx__parse_bool(yes[i], &b), 0);
		assert_true(b);
	}
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		b = true;
		assert_int_equal(odx__parse_bool(no[i], &b), 0);
		assert_false(b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		b = true;
		assert_int_equal(odx__parse_bool(bad[i], &b), ODX_EINVAL);
		assert_true(b);
	}
}

static void test_parse_int(void **state)
{
	static const char *const bad[] = {"", " ", "-", "+", "1x", "0x10", "1e3", "1 2",
					  "9223372036854775808", "-9223372036854775809", "1.0"};
	int64_t v;

	(void)state;
	assert_int_equal(odx__parse_int("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(odx__parse_int("-5", &v), 0);
	assert_int_equal(v, -5);
	assert_int_equal(odx__parse_int("+7", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(odx__parse_int(" 12\t", &v), 0);
	assert_int_equal(v, 12);
	assert_int_equal(odx__parse_int("9223372036854775807", &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(odx__parse_int("-9223372036854775808", &v), 0);
	assert_true(v == INT64_MIN);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		if (odx__parse_int(bad[i], &v) != ODX_EINVAL)
			fail_msg("'%s' parsed as an integer", bad[i]);
		assert_int_equal(v, 42);
	}
}

/* ---- defaults and files ------------------------------------------------------------------- */

static void test_defaults(void **state)
{
	struct origin_list l = {.count = 0};
	odx__config *cfg;
	void *user = &l;

	(void)state;
	cfg = load_ok(NULL, no_file_env);
	assert_string_equal(odx__config_str(cfg, "backends"), "auto");
	assert_string_equal(odx__config_str(cfg, "policy"), "least_loaded");
	assert_string_equal(odx__config_str(cfg, "log"), "none");
	assert_string_equal(odx__config_str(cfg, "trace"), "");
	assert_false(odx__config_bool(cfg, "stats"));
	assert_int_equal(odx__config_int(cfg, "host.devices"), 1);
	assert_int_equal(odx__config_int(cfg, "host.threads"), 0);
	assert_int_equal(odx__config_size(cfg, "host.memory", 1000), 0);
	assert_true(odx__config_bool(cfg, "host.bind"));
	assert_int_equal(odx__config_int(cfg, "sched.max_inflight"), 65536);
	assert_int_equal(odx__config_int(cfg, "sched.idle_spin_us"), 20);
	assert_null(odx__config_log_fn(cfg, &user));
	assert_null(user);

	/* Every key, in table order, all from the defaults. */
	odx__config_foreach(cfg, collect, &l);
	/* The backend sections, then the tier and fabric keys (their own check below); a
	 * Lua policy key may sit among the policy ones. */
	assert_true(l.count >= 42);
	assert_non_null(strstr(
		l.text,
		"tier.device.limit=0@default;tier.host.limit=0@default;"
		"tier.pinned.size=64MiB@default;tier.pinned.block=4MiB@default;"
		"tier.disk.path=@default;tier.disk.limit=0@default;"
		"tier.disk.direct=auto@default;tier.disk.engine=auto@default;"
		"tier.disk.fault=@default;tier.monitor.start=90@default;"
		"tier.monitor.stop=75@default;tier.prefetch=true@default;"
		"tier.direct_access=true@default;tier.watchdog_ms=30000@default;fabric.provider=auto@default;"
		"fabric.iface=@default;fabric.peer_timeout_ms=10000@default;"
		"fabric.retries=3@default;fabric.shm_lanes=2@default;"
		"fabric.progress=auto@default;fabric.assist_spin_us=0@default;"
		"fabric.fault=@default;"));
	assert_non_null(strstr(l.text, "backends=auto@default;policy=least_loaded@default;"
				       "policy.budget=1000@default;policy.memory_limit=8MiB@default;"
				       "policy.model_dir=@default;"));
	assert_non_null(strstr(l.text, "log=none@default;trace=@default;stats=false@default;"
				    "host.devices=1@default;host.threads=0@default;"
				    "host.memory=0@default;host.memnode=shared@default;"
				    "host.async=false@default;host.bind=true@default;"
				    "sched.max_inflight=65536@default;sched.steal=true@default;"
				    "sched.caller_progress=true@default;"
				    "sched.idle_spin_us=20@default;"
				    "vulkan.allow_cpu=false@default;vulkan.force_staging=false@default;"
				    "vulkan.validation=false@default;opencl.allow_cpu=false@default;"
				    "opencl.cache_dir=@default;cuda.library=libcuda.so.1@default;"
				    "cuda.nvrtc_library=@default;hip.library=libamdhip64.so@default;"));
	odx__config_free(cfg);
	odx__config_free(NULL);
}

static void test_good_file(void **state)
{
	char origin[PATH_MAX + 128];
	odx__config *cfg;
	odx_config *api;
	const char *path = write_file("good.conf",
				      "; ODX configuration\n"			/* 1 */
				      "# another comment style\n"		/* 2 */
				      "backends = host , vulkan\n"		/* 3 */
				      "log=debug\n"				/* 4 */
				      "\n"					/* 5 */
				      "stats = yes ; inline comment\n"		/* 6 */
				      "policy = policies/mine.lua\n"		/* 7 */
				      "[host]\r\n"				/* 8 */
				      "  devices = 4\n"				/* 9 */
				      "  threads = 2\n"				/* 10 */
				      "\tmemory = 50%\n"			/* 11 */
				      "bind: off\n"				/* 12 */
				      "[sched]\n"				/* 13 */
				      "max_inflight = 1024");			/* 14, no newline */

	(void)state;
	assert_int_equal(odx_config_create(&api), 0);
	assert_int_equal(odx_config_set_file(api, path), 0);
	cfg = load_ok(api, no_file_env);
	assert_string_equal(odx__config_str(cfg, "backends"), "host,vulkan");
	assert_string_equal(odx__config_str(cfg, "log"), "debug");
	assert_true(odx__config_bool(cfg, "stats"));
	assert_string_equal(odx__config_str(cfg, "policy"), "policies/mine.lua");
	assert_int_equal(odx__config_int(cfg, "host.devices"), 4);
	assert_int_equal(odx__config_int(cfg, "host.threads"), 2);
	assert_int_equal(odx__config_size(cfg, "host.memory", 3000), 1500);
	assert_false(odx__config_bool(cfg, "host.bind"));
	assert_int_equal(odx__config_int(cfg, "sched.max_inflight"), 1024);

	snprintf(origin, sizeof(origin), "file %s:3", path);
	assert_string_equal(origin_of(cfg, "backends"), origin);
	snprintf(origin, sizeof(origin), "file %s:10", path);
	assert_string_equal(origin_of(cfg, "host.threads"), origin);
	snprintf(origin, sizeof(origin), "file %s:14", path);
	assert_string_equal(origin_of(cfg, "sched.max_inflight"), origin);
	assert_string_equal(origin_of(cfg, "trace"), "default");
	odx__config_free(cfg);
	odx_config_destroy(api);
}

static void test_file_errors(void **state)
{
	char longline[1024];

	(void)state;
	file_fails_with("log = info\n[host]\ndevics = 2\n", ":3: unknown key 'host.devics'");
	file_fails_with("backend = host\n", ":1: unknown key 'backend'");
	/* A global key inside a section is a different, unknown key. */
	file_fails_with("[host]\nbackends = host\n", ":2: unknown key 'host.backends'");
	file_fails_with("\n\n[host]\ndevices = 0\n",
			":4: key 'host.devices': '0' is out of range 1..64");
	file_fails_with("stats = maybe\n",
			":1: key 'stats': 'maybe' is not a boolean "
			"(true/false, yes/no, on/off, 1/0)");
	file_fails_with("log = verbose\n",
			":1: key 'log': 'verbose' is not one of none, error, warn, info, debug");
	file_fails_with("[host]\ndevices = 2\nthreads = 1\ndevices = 3\n",
			":4: duplicate key 'host.devices' (first set on line 2)");
	file_fails_with("log = info\n[host\ndevices = 2\n",
			":2: syntax error (expected 'key = value' or '[section]')");
	file_fails_with("log = info\nstats\n",
			":2: syntax error (expected 'key = value' or '[section]')");
	/* The first error wins, whether inih's or ours. */
	file_fails_with("nonsense\nbogus = 1\n",
			":1: syntax error (expected 'key = value' or '[section]')");
	file_fails_with("bogus = 1\nnonsense\n", ":1: unknown key 'bogus'");

	/* A long comment is skipped and does not shift the line numbers. */
	memset(longline, 'x', sizeof(longline));
	memcpy(longline, "# ", 2);
	strcpy(longline + 600, "\nlog = info\nnonsense\n");
	file_fails_with(longline, ":3: syntax error (expected 'key = value' or '[section]')");

	/* A long value is refused rather than truncated. */
	memset(longline, 'x', sizeof(longline));
	memcpy(longline, "log = info\ntrace = ", 19);
	strcpy(longline + 600, "\n");
	file_fails_with(longline, ":2: line longer than 199 characters");
}

static void test_missing_files(void **state)
{
	static const struct env_var missing_env[] = {{"ODX_CONFIG", "/nonexistent/odx-x.conf"},
						     {NULL, NULL}};
	char err[512];
	odx_config *api;

	(void)state;
	/* Named through the API. */
	assert_int_equal(odx_config_create(&api), 0);
	assert_int_equal(odx_config_set_file(api, "/nonexistent/odx.conf"), 0);
	load_fail(api, no_file_env, err, sizeof(err));
	assert_string_equal(err, "/nonexistent/odx.conf: cannot open config file (named by "
				 "odx_config_set_file): No such file or directory");
	odx_config_destroy(api);

	/* Named through ODX_CONFIG. */
	load_fail(NULL, missing_env, err, sizeof(err));
	assert_string_equal(err, "/nonexistent/odx-x.conf: cannot open config file (named by "
				 "ODX_CONFIG): No such file or directory");

	/* A directory opens but cannot be read. */
	assert_int_equal(odx_config_create(&api), 0);
	assert_int_equal(odx_config_set_file(api, tmpdir), 0);
	load_fail(api, no_file_env, err, sizeof(err));
	assert_non_null(strstr(err, "cannot read config file: Is a directory"));
	odx_config_destroy(api);
}

/* ./odx.conf is read when ODX_CONFIG is unset, ignored when it is empty, fine when missing. */
static void test_default_file(void **state)
{
	static const struct env_var unset_env[] = {{NULL, NULL}};
	char cwd[PATH_MAX];
	odx__config *cfg;

	(void)state;
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(tmpdir), 0);

	unlink("odx.conf");
	cfg = load_ok(NULL, unset_env);
	assert_int_equal(odx__config_int(cfg, "host.devices"), 1);
	odx__config_free(cfg);

	write_file("odx.conf", "[host]\ndevices = 3\n");
	cfg = load_ok(NULL, unset_env);
	assert_int_equal(odx__config_int(cfg, "host.devices"), 3);
	assert_string_equal(origin_of(cfg, "host.devices"), "file odx.conf:2");
	odx__config_free(cfg);

	cfg = load_ok(NULL, no_file_env);
	assert_int_equal(odx__config_int(cfg, "host.devices"), 1);
	assert_string_equal(origin_of(cfg, "host.devices"), "default");
	odx__config_free(cfg);

	unlink("odx.conf");
	assert_int_equal(chdir(cwd), 0);
}

/* ---- environment and api ------------------------------------------------------------------ */

static void test_precedence(void **state)
{
	char env_path[PATH_MAX + 64];
	char origin[PATH_MAX + 128];
	struct env_var env[] = {
		{"ODX_CONFIG", env_path},
		{"ODX_HOST_DEVICES", "5"},
		{"ODX_LOG", "warn"},
		{"ODX_SCHED_MAX_INFLIGHT", " 4096 "},
		{"ODX_HOST_BIND", "no"},
		{"ODX_TRACE", ""},
		/* Not keys: ignored, never errors. */
		{"ODX_BACKEND_PATH", "/x"},
		{"ODX_HOST.THREADS", "9"},
		{"ODX_FROBNICATE", "1"},
		{NULL, NULL},
	};
	odx__config *cfg;
	odx_config *api;

	(void)state;
	snprintf(env_path, sizeof(env_path), "%s",
		 write_file("prec.conf", "log = error\ntrace = t.json\n[host]\ndevices = 2\n"
					 "threads = 3\n"));

	/* Environment beats file; untouched file keys stay. */
	cfg = load_ok(NULL, env);
	assert_int_equal(odx__config_int(cfg, "host.devices"), 5);
	assert_string_equal(origin_of(cfg, "host.devices"), "env ODX_HOST_DEVICES");
	assert_string_equal(odx__config_str(cfg, "log"), "warn");
	assert_int_equal(odx__config_int(cfg, "sched.max_inflight"), 4096);
	assert_string_equal(origin_of(cfg, "sched.max_inflight"), "env ODX_SCHED_MAX_INFLIGHT");
	assert_false(odx__config_bool(cfg, "host.bind"));
	/* An empty string is a value for a string key. */
	assert_string_equal(odx__config_str(cfg, "trace"), "");
	assert_string_equal(origin_of(cfg, "trace"), "env ODX_TRACE");
	assert_int_equal(odx__config_int(cfg, "host.threads"), 3);
	snprintf(origin, sizeof(origin), "file %s:5", env_path);
	assert_string_equal(origin_of(cfg, "host.threads"), origin);
	odx__config_free(cfg);

	/* The API beats the environment. */
	assert_int_equal(odx_config_create(&api), 0);
	assert_int_equal(odx_config_set(api, "host.devices", "7"), 0);
	assert_int_equal(odx_config_set(api, "host.memory", "2GiB"), 0);
	cfg = load_ok(api, env);
	assert_int_equal(odx__config_int(cfg, "host.devices"), 7);
	assert_string_equal(origin_of(cfg, "host.devices"), "api");
	assert_int_equal(odx__config_size(cfg, "host.memory", 1000), 2ull << 30);
	assert_string_equal(odx__config_str(cfg, "log"), "warn");
	assert_string_equal(origin_of(cfg, "log"), "env ODX_LOG");
	odx__config_free(cfg);
	odx_config_destroy(api);
}

static void test_env_errors(void **state)
{
	static const struct env_var bad_int[] = {
		{"ODX_CONFIG", ""}, {"ODX_HOST_DEVICES", "0"}, {NULL, NULL}};
	static const struct env_var empty_bool[] = {
		{"ODX_CONFIG", ""}, {"ODX_STATS", ""}, {NULL, NULL}};
	static const struct env_var bad_size[] = {
		{"ODX_CONFIG", ""}, {"ODX_HOST_MEMORY", "lots"}, {NULL, NULL}};
	static const struct env_var bad_list[] = {
		{"ODX_CONFIG", ""}, {"ODX_BACKENDS", "auto,host"}, {NULL, NULL}};
	char err[512];

	(void)state;
	load_fail(NULL, bad_int, err, sizeof(err));
	assert_string_equal(err, "environment ODX_HOST_DEVICES: '0' is out of range 1..64");
	load_fail(NULL, empty_bool, err, sizeof(err));
	assert_string_equal(err, "environment ODX_STATS: '' is not a boolean "
				 "(true/false, yes/no, on/off, 1/0)");
	load_fail(NULL, bad_size, err, sizeof(err));
	assert_true(strncmp(err, "environment ODX_HOST_MEMORY: 'lots' is not a size", 49) == 0);
	load_fail(NULL, bad_list, err, sizeof(err));
	assert_string_equal(err, "environment ODX_BACKENDS: 'auto' cannot be combined with "
				 "other backends");
}

static void dummy_log(void *user, odx_log_level level, const char *msg)
{
	(void)user;
	(void)level;
	(void)msg;
}

static void test_api_set(void **state)
{
	odx__config *cfg;
	odx_config *api;

	(void)state;
	assert_int_equal(odx_config_create(&api), 0);
	assert_string_equal(odx_config_error(api), "");
	assert_string_equal(odx_config_error(NULL), "");

	assert_int_equal(odx_config_set(api, "host.devics", "2"), ODX_ECONFIG);
	assert_string_equal(odx_config_error(api), "api: unknown key 'host.devics'");
	assert_int_equal(odx_config_set(api, "host.devices", "65"), ODX_ECONFIG);
	assert_string_equal(odx_config_error(api),
			    "api: key 'host.devices': '65' is out of range 1..64");
	assert_int_equal(odx_config_set(api, "sched.max_inflight", "15"), ODX_ECONFIG);
	assert_int_equal(odx_config_set(api, "host.threads", "two"), ODX_ECONFIG);
	assert_string_equal(odx_config_error(api),
			    "api: key 'host.threads': 'two' is not a decimal integer");
	assert_int_equal(odx_config_set(api, "policy", "fifo"), ODX_ECONFIG);
	assert_int_equal(odx_config_set(api, "policy", ".lua"), ODX_ECONFIG);
	assert_int_equal(odx_config_set(api, "host.memory", "0%"), ODX_ECONFIG);
	assert_int_equal(odx_config_set(api, NULL, "1"), ODX_EINVAL);
	assert_int_equal(odx_config_set(api, "log", NULL), ODX_EINVAL);
	assert_int_equal(odx_config_set(NULL, "log", "info"), ODX_EINVAL);

	/* A later set replaces an earlier one. */
	assert_int_equal(odx_config_set(api, "host.threads", "4"), 0);
	assert_int_equal(odx_config_set(api, "host.threads", "8"), 0);
	assert_int_equal(odx_config_set(api, "policy", "round_robin"), 0);
	assert_int_equal(odx_config_set(api, "host.memory", "25%"), 0);
	assert_int_equal(odx_config_set_log(api, dummy_log, &cfg), 0);
	cfg = load_ok(api, no_file_env);
	assert_int_equal(odx__config_int(cfg, "host.threads"), 8);
	assert_string_equal(odx__config_str(cfg, "policy"), "round_robin");
	assert_int_equal(odx__config_size(cfg, "host.memory", 1000), 250);
	/* A percentage of a huge total must not overflow. */
	assert_true(odx__config_size(cfg, "host.memory", UINT64_MAX) == UINT64_MAX / 4);
	{
		void *user = NULL;

		assert_true(odx__config_log_fn(cfg, &user) == dummy_log);
		assert_ptr_equal(user, &cfg);
	}
	odx__config_free(cfg);
	odx_config_destroy(api);
	odx_config_destroy(NULL);
}

/*
 * Fault-injection specs: every value is checked at load with the component's own parser, whether
 * the disk tier (tier.disk.limit) or the fabric is in use or not, and a bad one is ODX_ECONFIG
 * naming the key, the value and the item that is wrong.
 */
static void test_fault_specs(void **state)
{
	static const char *const disk_good[] = {
		"", "write_eio=1", "write_eio=2,corrupt=1", "read_eio=3,write_enospc=1,uring_init=1",
		"direct_probe=1,corrupt=18446744073709551615"};
	static const struct {
		const char *spec, *item;
	} disk_bad[] = {
		{"write_eio", "'write_eio'"},	  {"write_eio=0", "'write_eio=0'"},
		{"bogus=1", "'bogus=1'"},	  {"write_eio=1x", "'write_eio=1x'"},
		{"write_eio=-1", "'write_eio=-1'"}, {"write_eio= 1", "'write_eio= 1'"},
		{"corrupt=1,,read_eio=1", "''"},    {"write_eio=99999999999999999999", "9999"},
		{"a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9,j=10,k=11,l=12,m=13,n=14,o=15,p=16,q=17",
		 "'a=1'"},
	};
	static const char *const fabric_good[] = {
		"", "delay_us=0-2000,reorder=0.2,eagain=0.3,cqerr=0.01,seed=7", "delay_us=5",
		"cqerr=1", "seed=18446744073709551615"};
	static const struct {
		const char *spec, *item;
	} fabric_bad[] = {
		{"delay_us=5-1", "delay_us=5-1"},  {"delay_us=-5", "delay_us=-5"},
		{"delay_us=5x", "delay_us=5x"},	   {"delay_us=0-20000000", "delay_us=0-20000000"},
		{"eagain=2", "eagain=2"},	   {"reorder=0.1x", "reorder=0.1x"},
		{"seed=abc", "seed=abc"},	   {"bogus=1", "unknown key 'bogus'"},
		{"eagain", "'eagain' is not key=value"},
	};
	/* tier.disk.limit and fabric.provider say whether the component would be opened. */
	static const char *const on_off[][2] = {{"0", "auto"}, {"16MiB", "tcp"}};
	char err[512], what[600];
	odx__config *cfg;
	odx_config *api;

	(void)state;
	for (size_t o = 0; o < 2; o++) {
		for (size_t i = 0; i < sizeof(disk_good) / sizeof(disk_good[0]); i++) {
			const struct env_var env[] = {{"ODX_CONFIG", ""},
						      {"ODX_TIER_DISK_LIMIT", on_off[o][0]},
						      {"ODX_TIER_DISK_FAULT", disk_good[i]},
						      {NULL, NULL}};

			cfg = load_ok(NULL, env);
			assert_string_equal(odx__config_str(cfg, "tier.disk.fault"), disk_good[i]);
			odx__config_free(cfg);
		}
		for (size_t i = 0; i < sizeof(disk_bad) / sizeof(disk_bad[0]); i++) {
			const struct env_var env[] = {{"ODX_CONFIG", ""},
						      {"ODX_TIER_DISK_LIMIT", on_off[o][0]},
						      {"ODX_TIER_DISK_FAULT", disk_bad[i].spec},
						      {NULL, NULL}};

			load_fail(NULL, env, err, sizeof(err));
			snprintf(what, sizeof(what), "environment ODX_TIER_DISK_FAULT: spill fault "
						     "spec '%s': ", disk_bad[i].spec);
			if (strncmp(err, what, strlen(what)) || !strstr(err, disk_bad[i].item))
				fail_msg("'%s' (disk tier %s): %s", disk_bad[i].spec, on_off[o][0],
					 err);
		}
		for (size_t i = 0; i < sizeof(fabric_good) / sizeof(fabric_good[0]); i++) {
			const struct env_var env[] = {{"ODX_CONFIG", ""},
						      {"ODX_FABRIC_PROVIDER", on_off[o][1]},
						      {"ODX_FABRIC_FAULT", fabric_good[i]},
						      {NULL, NULL}};

			cfg = load_ok(NULL, env);
			odx__config_free(cfg);
		}
		for (size_t i = 0; i < sizeof(fabric_bad) / sizeof(fabric_bad[0]); i++) {
			const struct env_var env[] = {{"ODX_CONFIG", ""},
						      {"ODX_FABRIC_PROVIDER", on_off[o][1]},
						      {"ODX_FABRIC_FAULT", fabric_bad[i].spec},
						      {NULL, NULL}};

			load_fail(NULL, env, err, sizeof(err));
			if (strncmp(err, "environment ODX_FABRIC_FAULT: fabric.fault: ", 44) ||
			    !strstr(err, fabric_bad[i].item))
				fail_msg("'%s' (provider %s): %s", fabric_bad[i].spec, on_off[o][1],
					 err);
		}
	}
	/* The same parsers behind odx_config_set and a file line. */
	assert_int_equal(odx_config_create(&api), 0);
	assert_int_equal(odx_config_set(api, "tier.disk.fault", "write_eio=0"), ODX_ECONFIG);
	assert_non_null(strstr(odx_config_error(api), "api: key 'tier.disk.fault': "));
	assert_int_equal(odx_config_set(api, "fabric.fault", "cqerr=1.5"), ODX_ECONFIG);
	assert_non_null(strstr(odx_config_error(api), "cqerr=1.5 is not a probability"));
	assert_int_equal(odx_config_set(api, "tier.disk.fault", "corrupt=2"), 0);
	odx_config_destroy(api);
	file_fails_with("[fabric]\nfault = reorder=x\n",
			":2: key 'fabric.fault': fabric.fault: reorder=x is not a probability in "
			"[0, 1]");
}

static void test_backends_list(void **state)
{
	static const char *const bad[] = {"auto,host", "host, auto", "host,host", "g/pu", "",
					  "host,,vulkan", "host,", "Host"};
	odx__config *cfg;
	odx_config *api;

	(void)state;
	assert_int_equal(odx_config_create(&api), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (odx_config_set(api, "backends", bad[i]) != ODX_ECONFIG)
			fail_msg("backends '%s' was accepted", bad[i]);
	}
	assert_int_equal(odx_config_set(api, "backends", "auto,auto"), ODX_ECONFIG);
	assert_string_equal(odx_config_error(api), "api: key 'backends': 'auto' is listed twice");
	assert_int_equal(odx_config_set(api, "backends", "auto, cuda"), ODX_ECONFIG);
	assert_string_equal(odx_config_error(api),
			    "api: key 'backends': 'auto' cannot be combined with other backends");
	assert_int_equal(odx_config_set(api, "backends", "Vulkan"), ODX_ECONFIG);
	assert_string_equal(odx_config_error(api),
			    "api: key 'backends': 'Vulkan' is not a name (lower-case letters, "
			    "digits, '_', '-')");
	/* Any module name is fine here: whether it exists is odx_open's question. */
	assert_int_equal(odx_config_set(api, "backends", "my-npu,host"), 0);

	assert_int_equal(odx_config_set(api, "backends", " auto "), 0);
	assert_int_equal(odx_config_set(api, "backends", " cuda ,hip,  host "), 0);
	cfg = load_ok(api, no_file_env);
	assert_string_equal(odx__config_str(cfg, "backends"), "cuda,hip,host");
	odx__config_free(cfg);
	odx_config_destroy(api);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_bool),
		cmocka_unit_test(test_parse_int),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_good_file),
		cmocka_unit_test(test_file_errors),
		cmocka_unit_test(test_missing_files),
		cmocka_unit_test(test_default_file),
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_env_errors),
		cmocka_unit_test(test_api_set),
		cmocka_unit_test(test_backends_list),
		cmocka_unit_test(test_fault_specs),
	};

	return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
