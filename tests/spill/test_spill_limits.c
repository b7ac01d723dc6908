/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_spill_limits.c - the disk tier against the process's limits and deaths, through the public
 * API, each case in a child process (a child that dies of a signal is the failure looked for):
 *  - a file-size limit (RLIMIT_FSIZE, `ulimit -f`) below what the disk tier would write: the child
 *    spills, ends normally with its data intact, warns, and leaves no spill directory;
 *  - a limit below one block: the O_DIRECT probe at odx_open fails quietly instead of killing;
 *  - the spill directory of a process killed with SIGKILL is removed by the next odx_open;
 *    the directory of a live process is not;
 *  - the rules for directories nobody holds: pid gone, pid reused, old names, foreign content;
 *  - bad fault specs are ODX_ECONFIG at odx_open, with the disk tier on and off.
 * Every wait on a child is bounded (alarm in the child, a deadline in the parent).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "odx/odx.h"

#define BUF_SIZE (256u << 10)
#define NBUF 8
#define CHILD_ALARM_S 120

static char root[256];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[16384];

static void log_sink(void *user, odx_log_level level, const char *msg)
{
	size_t n;

	(void)user;
	(void)level;
	pthread_mutex_lock(&log_lock);
	n = strlen(logged);
	snprintf(logged + n, sizeof(logged) - n, "%s\n", msg);
	pthread_mutex_unlock(&log_lock);
}

static bool log_has(const char *text)
{
	bool has;

	pthread_mutex_lock(&log_lock);
	has = strstr(logged, text) != NULL;
	pthread_mutex_unlock(&log_lock);
	return has;
}

/* Entries of a directory, "." and ".." aside; the first one's name in first. */
static int dir_entries(const char *path, char *first, size_t n)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int count = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (count++ == 0 && first)
			snprintf(first, n, "%s", e->d_name);
	}
	closedir(d);
	return count;
}

static bool exists(const char *name)
{
	char path[600];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", root, name);
	return stat(path, &st) == 0;
}

/* Opens a context with the disk tier under root and the extra key/value pairs (NULL-ended). */
static int open_ctx(odx_context **ctx, const char *const *kv)
{
	odx_config *cfg;
	int rc;

	if (odx_config_create(&cfg))
		return ODX_ENOMEM;
	odx_config_set(cfg, "log", "info");
	odx_config_set_log(cfg, log_sink, NULL);
	odx_config_set(cfg, "tier.disk.path", root);
	odx_config_set(cfg, "tier.disk.limit", "64MiB");
	for (; kv && kv[0]; kv += 2) {
		rc = odx_config_set(cfg, kv[0], kv[1]);
		if (rc) {
			fprintf(stderr, "odx_config_set(%s, %s): %s\n", kv[0], kv[1],
				odx_config_error(cfg));
			odx_config_destroy(cfg);
			return rc;
		}
	}
	rc = odx_open(ctx, cfg);
	if (rc)
		fprintf(stderr, "odx_open: %s\n", odx_last_error(NULL));
	odx_config_destroy(cfg);
	return rc;
}

/* Waits for the child up to timeout_s, killing it after; returns its wait status. */
static int wait_child(pid_t pid, int timeout_s)
{
	time_t end = time(NULL) + timeout_s;
	int status = 0;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return status;
		if (r < 0)
			fail_msg("waitpid: %s", strerror(errno));
		if (time(NULL) > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("child %d did not finish in %d s", (int)pid, timeout_s);
		}
		usleep(20000);
	}
}

static void expect_clean_exit(int status, const char *what)
{
	if (WIFSIGNALED(status))
		fail_msg("%s: the child died of signal %d (%s)", what, WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("%s: the child exited with %d", what, WEXITSTATUS(status));
}

/* ---- the file-size limit ------------------------------------------------------------------- */

static uint8_t pattern(unsigned b, size_t i)
{
	return (uint8_t)(i * 31 + b * 7 + (i >> 12));
}

/* Child: host RAM the buffers fill to about 50%, the monitor evicting above 10%, so it spills;
 * the file-size limit lets one buffer (and a bit) into the spill file. Exits 0 when every byte
 * reads back right and the limit was named in a warning. */
static int fsize_child(void)
{
	/* direct_access off: the writes land in host RAM, not in the device's copy. */
	static const char *const kv[] = {
		"tier.host.limit",   "4MiB", "tier.monitor.start", "10",   "tier.monitor.stop",
		"5",		     "host.devices",	   "1",	   "tier.direct_access",
		"false",	     NULL};
	struct rlimit rl = {.rlim_cur = BUF_SIZE + BUF_SIZE / 4, .rlim_max = RLIM_INFINITY};
	odx_buffer *b[NBUF];
	odx_context *ctx;
	uint8_t *data = malloc(BUF_SIZE);
	time_t end;
	int bad = 0;

	rl.rlim_max = rl.rlim_cur;
	alarm(CHILD_ALARM_S);
	/* SIGXFSZ is left at its default action: dying of it is the failure looked for. */
	if (!data || setrlimit(RLIMIT_FSIZE, &rl) || open_ctx(&ctx, kv))
		return 10;
	for (unsigned i = 0; i < NBUF; i++) {
		for (size_t k = 0; k < BUF_SIZE; k++)
			data[k] = pattern(i, k);
		if (odx_buffer_create(ctx, BUF_SIZE, 0, &b[i]) ||
		    odx_buffer_write(b[i], 0, data, BUF_SIZE, -1))
			return 11;
	}
	/* The monitor spills in the background: wait until the limit stopped one. */
	end = time(NULL) + 60;
	while (!log_has("disk tier full at the file-size limit") && time(NULL) < end)
		usleep(10000);
	if (!log_has("disk tier full at the file-size limit")) {
		fprintf(stderr, "no file-size warning; log:\n%s", logged);
		return 12;
	}
	for (unsigned i = 0; i < NBUF; i++) {
		memset(data, 0, BUF_SIZE);
		if (odx_buffer_read(b[i], 0, data, BUF_SIZE, 60000))
			return 13;
		for (size_t k = 0; k < BUF_SIZE; k++)
			bad += data[k] != pattern(i, k);
	}
	if (bad) {
		fprintf(stderr, "%d bytes read back wrong\n", bad);
		return 14;
	}
	if (!log_has("file-size limit (ulimit -f) of")) {
		fprintf(stderr, "no warning at open; log:\n%s", logged);
		return 15;
	}
	if (odx_close(ctx))
		return 16;
	free(data);
	return 0;
}

static void test_fsize_limit_spill(void **state)
{
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fsize_child());
	expect_clean_exit(wait_child(pid, CHILD_ALARM_S + 10), "spilling under ulimit -f");
	assert_int_equal(dir_entries(root, NULL, 0), 0);
}

/* A limit below one 4 KiB block: the O_DIRECT probe at odx_open writes on the caller's thread. */
static int tiny_fsize_child(void)
{
	static const char *const kv[] = {"tier.disk.direct", "auto", NULL};
	struct rlimit rl = {.rlim_cur = 1024, .rlim_max = 1024};
	odx_context *ctx;

	alarm(CHILD_ALARM_S);
	if (setrlimit(RLIMIT_FSIZE, &rl) || open_ctx(&ctx, kv))
		return 10;
	/* A pending SIGXFSZ left by open would kill the process at the next unblock: none is. */
	{
		sigset_t pending;

		sigpending(&pending);
		if (sigismember(&pending, SIGXFSZ))
			return 11;
	}
	return odx_close(ctx) ? 12 : 0;
}

static void test_fsize_limit_probe(void **state)
{
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(tiny_fsize_child());
	expect_clean_exit(wait_child(pid, CHILD_ALARM_S + 10), "odx_open under ulimit -f 1");
	assert_int_equal(dir_entries(root, NULL, 0), 0);
}

/* ---- directories left behind --------------------------------------------------------------- */

/* Child: opens a context with the disk tier, tells the parent (one byte on `ready`), then waits
 * for a byte on `go` and closes (or is killed meanwhile). */
static void holder_child(int ready, int go)
{
	odx_context *ctx;
	char c = 1;

	alarm(CHILD_ALARM_S);
	if (open_ctx(&ctx, NULL))
		_exit(10);
	if (write(ready, &c, 1) != 1 || read(go, &c, 1) < 0)
		_exit(11);
	_exit(odx_close(ctx) ? 12 : 0);
}

static pid_t start_holder(int *go_fd, char *dir, size_t dirlen)
{
	int ready[2], go[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(ready[0]);
		close(go[1]);
		holder_child(ready[1], go[0]);
	}
	close(ready[1]);
	close(go[0]);
	/* The child's alarm bounds this read. */
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	*go_fd = go[1];
	assert_int_equal(dir_entries(root, dir, dirlen), 1);
	return pid;
}

static void test_stale_directory_removed(void **state)
{
	char dir[256], expected[64];
	odx_context *ctx;
	int go;
	pid_t pid;

	(void)state;
	pid = start_holder(&go, dir, sizeof(dir));
	snprintf(expected, sizeof(expected), "odx-spill-%d-", (int)pid);
	assert_true(strncmp(dir, expected, strlen(expected)) == 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(go);
	assert_true(exists(dir)); /* SIGKILL leaves it behind */
	logged[0] = '\0';
	assert_int_equal(open_ctx(&ctx, NULL), 0);
	assert_false(exists(dir));
	assert_true(log_has("removed 1 spill directories of dead processes"));
	assert_int_equal(dir_entries(root, NULL, 0), 1); /* ours */
	assert_int_equal(odx_close(ctx), 0);
	assert_int_equal(dir_entries(root, NULL, 0), 0);
}

static void test_live_directory_kept(void **state)
{
	char dir[256];
	odx_context *ctx;
	int go, status;
	pid_t pid;

	(void)state;
	pid = start_holder(&go, dir, sizeof(dir));
	/* Its directory is older than the grace period for the rule to matter: backdate it. */
	{
		char path[600];
		struct timeval old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};

		snprintf(path, sizeof(path), "%s/%s", root, dir);
		assert_int_equal(utimes(path, old), 0);
	}
	assert_int_equal(open_ctx(&ctx, NULL), 0);
	assert_true(exists(dir));
	assert_int_equal(odx_close(ctx), 0);
	assert_true(exists(dir));
	assert_int_equal(write(go, "x", 1), 1);
	close(go);
	status = wait_child(pid, CHILD_ALARM_S + 10);
	expect_clean_exit(status, "holder");
	assert_false(exists(dir));
}

/* A pid that ran and is gone. */
static pid_t dead_pid(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	assert_true(pid > 0);
	waitpid(pid, NULL, 0);
	return pid;
}

static void make_dir(const char *name, bool with_file, time_t age)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/%s", root, name);
	assert_int_equal(mkdir(path, 0700), 0);
	if (with_file) {
		char file[700];
		int fd;

		snprintf(file, sizeof(file), "%s/spill", path);
		fd = open(file, O_CREAT | O_WRONLY, 0600);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "data", 4), 4);
		close(fd);
	}
	if (age) {
		struct timeval old[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};

		assert_int_equal(utimes(path, old), 0);
	}
}

/* Directories nobody holds a lock on: which are judged stale. */
static void test_stale_rules(void **state)
{
	char gone[64], reused_old[64], reused_new[64], locked[64], foreign[64], path[600];
	pid_t dead = dead_pid(), live = getppid();
	odx_context *ctx;
	int lock_fd;

	(void)state;
	snprintf(gone, sizeof(gone), "odx-spill-%d-aaaaaa", (int)dead);
	snprintf(reused_old, sizeof(reused_old), "odx-spill-%d-bbbbbb", (int)live);
	snprintf(reused_new, sizeof(reused_new), "odx-spill-%d-cccccc", (int)live);
	snprintf(locked, sizeof(locked), "odx-spill-%d-dddddd", (int)dead);
	snprintf(foreign, sizeof(foreign), "odx-spill-%d-eeeeee", (int)dead);
	make_dir(gone, true, 0);	   /* pid gone, no lock: stale */
	make_dir(reused_old, true, 3600); /* pid runs, no lock, unchanged for an hour: stale */
	make_dir(reused_new, true, 0);	   /* pid runs, no lock, just made: maybe being created */
	make_dir(locked, true, 0);	   /* someone holds the lock: alive, whatever the pid */
	make_dir(foreign, true, 0);	   /* holds more than the spill file: not ours to empty */
	snprintf(path, sizeof(path), "%s/%s/notes", root, foreign);
	assert_int_equal(mkdir(path, 0700), 0);
	make_dir("odx-spill-ffffff", false, 3600); /* the name before pids: never judged */
	make_dir("odx-spill-12x-gggggg", false, 3600);
	snprintf(path, sizeof(path), "%s/%s", root, locked);
	lock_fd = open(path, O_RDONLY | O_DIRECTORY);
	assert_true(lock_fd >= 0);
	assert_int_equal(flock(lock_fd, LOCK_EX | LOCK_NB), 0);

	assert_int_equal(open_ctx(&ctx, NULL), 0);
	assert_false(exists(gone));
	assert_false(exists(reused_old));
	assert_true(exists(reused_new));
	assert_true(exists(locked));
	assert_true(exists(foreign));
	assert_true(exists("odx-spill-ffffff"));
	assert_true(exists("odx-spill-12x-gggggg"));
	assert_int_equal(odx_close(ctx), 0);
	close(lock_fd);

	/* Clean up what the rules kept. */
	snprintf(path, sizeof(path), "rm -rf '%s'/odx-spill-*", root);
	assert_int_equal(system(path), 0);
	assert_int_equal(dir_entries(root, NULL, 0), 0);
}

/* ---- fault specs at odx_open --------------------------------------------------------------- */

static void test_fault_specs_at_open(void **state)
{
	static const char *const bad[][2] = {{"tier.disk.fault", "write_eio=0"},
					     {"tier.disk.fault", "bogus=1"},
					     {"fabric.fault", "eagain=2"},
					     {"fabric.fault", "seed=x"}};
	static const char *const limits[] = {"0", "64MiB"};
	char var[64];

	(void)state;
	for (size_t l = 0; l < 2; l++) {
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			odx_context *ctx = NULL;
			const char *kv[] = {"tier.disk.limit", limits[l], NULL};
			int rc;

			/* Through the environment: odx_config_set would refuse it already. */
			snprintf(var, sizeof(var), "%s",
				 !strcmp(bad[i][0], "fabric.fault") ? "ODX_FABRIC_FAULT"
								    : "ODX_TIER_DISK_FAULT");
			setenv(var, bad[i][1], 1);
			rc = open_ctx(&ctx, kv);
			unsetenv(var);
			if (rc != ODX_ECONFIG)
				fail_msg("%s=%s with tier.disk.limit %s: %s", bad[i][0], bad[i][1],
					 limits[l], odx_err_name(rc));
			assert_non_null(strstr(odx_last_error(NULL), var));
			assert_non_null(strstr(odx_last_error(NULL), bad[i][1]));
			if (ctx)
				odx_close(ctx);
		}
	}
	assert_int_equal(dir_entries(root, NULL, 0), 0);
}

static int make_root(void **state)
{
	const char *base = getenv("TMPDIR");

	(void)state;
	snprintf(root, sizeof(root), "%s/odx-test-spill-limits-XXXXXX",
		 base && *base ? base : "/tmp");
	return mkdtemp(root) ? 0 : -1;
}

static int remove_root(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fsize_limit_spill),
		cmocka_unit_test(test_fsize_limit_probe),
		cmocka_unit_test(test_stale_directory_removed),
		cmocka_unit_test(test_live_directory_kept),
		cmocka_unit_test(test_stale_rules),
		cmocka_unit_test(test_fault_specs_at_open),
	};

	return cmocka_run_group_tests(tests, make_root, remove_root);
}
