/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c - the key table, the public override set (odx_config) and the resolved
 * configuration of one context (odx__config).
 *
 * Every key is declared once, in `keys` below. A value is parsed where it is given (file line,
 * environment variable, API call), so every error can name its origin; the resolved values are
 * stored already parsed, which is why the getters cannot fail. The text of a value becomes its
 * typed value in config_parse.c (the parsers and the rules the table names in `check`).
 *
 * About 340 lines are the key table, one entry per key with its range and help text, which
 * `odx info --config` and docs/configuration.md show.
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "config.h"
#include "config_parse.h"

/* The only place keys are declared; foreach and `odx info --config` follow this order. */
static const struct key_def keys[] = {
	{
		.name = "backends",
		.type = KEY_LIST,
		.def = "auto",
		.help = "ordered list of backends to open (host, vulkan, opencl, cuda, hip, or "
			"the name of any backend module), or auto",
		.check = odx__config_check_backends,
	},
	{
		.name = "policy",
		.type = KEY_STRING,
		.def = "least_loaded",
		.help = "scheduling policy: eager, least_loaded, round_robin (built in, C), "
			"lua:eager, lua:round_robin, lua:locality, lua:heft, lua:lru, "
			"lua:lookahead (shipped Lua), or a path to a .lua file",
		.check = odx__config_check_policy,
	},
	{
		.name = "policy.budget",
		.type = KEY_INT,
		.def = "1000",
		.help = "CPU time of one Lua policy call in microseconds; loading, init and "
			"selftest get 100 times this",
		.min = 10,
		.max = 10000000,
	},
	{
		.name = "policy.memory_limit",
		.type = KEY_SIZE,
		.def = "8MiB",
		.help = "memory a Lua policy's state may allocate",
	},
	{
		.name = "policy.model_dir",
		.type = KEY_STRING,
		.def = "",
		.help = "directory where the Lua policy host keeps its performance models between "
			"runs (empty: not kept)",
	},
	{
		.name = "policy.tick_ms",
		.type = KEY_INT,
		.def = "100",
		.help = "period of a Lua policy's on_tick hook in milliseconds (0: never called)",
		.min = 0,
		.max = 3600000,
	},
	{
		.name = "policy.load_timeout_ms",
		.type = KEY_INT,
		.def = "10000",
		.help = "wall-clock ceiling of loading a Lua policy (top level, init, selftest) and "
			"of closing its state, in milliseconds; past it the state is abandoned and "
			"the built-in decides",
		.min = 100,
		.max = 3600000,
	},
	{
		.name = "log",
		.type = KEY_ENUM,
		.def = "none",
		.help = "log level: none, error, warn, info or debug",
		.words = (const char *const[]){"none", "error", "warn", "info", "debug", NULL},
	},
	{
		.name = "trace",
		.type = KEY_STRING,
		.def = "",
		.help = "path of a Chrome trace JSON file written at close (empty: no trace)",
	},
	{
		.name = "stats",
		.type = KEY_BOOL,
		.def = "false",
		.help = "print a statistics summary at close",
	},
	{
		.name = "host.devices",
		.type = KEY_INT,
		.def = "1",
		.help = "number of host devices",
		.min = 1,
		.max = 64,
	},
	{
		.name = "host.threads",
		.type = KEY_INT,
		.def = "0",
		.help = "threads per host device (0: cores / devices, at least 1)",
		.min = 0,
		.max = 1024,
	},
	{
		.name = "host.memory",
		.type = KEY_SIZE,
		.def = "0",
		.help = "memory capacity of each host device with private memory (0: physical RAM "
			"/ devices; NN%: share of RAM)",
	},
	{
		.name = "host.memnode",
		.type = KEY_ENUM,
		.def = "shared",
		.help = "host devices' memory: shared (they run on the host memory node of their "
			"NUMA node, no copies between them) or private (a memory node of their own "
			"each, copies between them, as between discrete devices)",
		.words = (const char *const[]){"shared", "private", NULL},
	},
	{
		.name = "host.async",
		.type = KEY_BOOL,
		.def = "false",
		.help = "run host kernels on a compute-lane thread with asynchronous, in-order "
			"completion, as GPU backends do (exercises those paths without a GPU)",
	},
	{
		.name = "host.bind",
		.type = KEY_BOOL,
		.def = "true",
		.help = "bind host worker threads to cores (hwloc)",
	},
	{
		.name = "sched.max_inflight",
		.type = KEY_INT,
		.def = "65536",
		.help = "unfinished tasks before odx_submit blocks",
		.min = 16,
		.max = 16777216,
	},
	{
		.name = "sched.steal",
		.type = KEY_BOOL,
		.def = "true",
		.help = "an idle worker takes ready tasks queued on another device that shares its "
			"memory (CPU devices of one NUMA node): no copy, no idle core",
	},
	{
		.name = "sched.caller_progress",
		.type = KEY_BOOL,
		.def = "true",
		.help = "a thread waiting in the API (odx_buffer_read/write, odx_event_wait, "
			"odx_wait_all) drives a busy device's completions itself, where its backend "
			"offers it (Vulkan), instead of being woken by the backend's thread",
	},
	{
		.name = "sched.idle_spin_us",
		.type = KEY_INT,
		.def = "20",
		.help = "microseconds an idle worker polls for new work before it sleeps (0: sleep "
			"at once)",
		.min = 0,
		.max = 10000,
	},
	{
		.name = "vulkan.allow_cpu",
		.type = KEY_BOOL,
		.def = "false",
		.help = "also use CPU Vulkan devices (Mesa lavapipe)",
	},
	{
		.name = "vulkan.force_staging",
		.type = KEY_BOOL,
		.def = "false",
		.help = "copy through host-visible staging buffers even where device memory is "
			"host-visible (tests the discrete-GPU path on any device)",
	},
	{
		.name = "vulkan.validation",
		.type = KEY_BOOL,
		.def = "false",
		.help = "enable the Khronos validation layer; any validation message fails the "
			"operation that caused it",
	},
	{
		.name = "opencl.allow_cpu",
		.type = KEY_BOOL,
		.def = "false",
		.help = "also use CPU OpenCL devices (PoCL)",
	},
	{
		.name = "opencl.cache_dir",
		.type = KEY_STRING,
		.def = "",
		.help = "directory of compiled OpenCL program binaries (empty: "
			"$XDG_CACHE_HOME/odx/opencl or ~/.cache/odx/opencl; \"none\": no cache)",
	},
	{
		.name = "cuda.library",
		.type = KEY_STRING,
		.def = "libcuda.so.1",
		.help = "CUDA driver library to open",
	},
	{
		.name = "cuda.nvrtc_library",
		.type = KEY_STRING,
		.def = "",
		.help = "NVRTC library for CUDA source variants (empty: try libnvrtc.so and "
			"versioned names)",
	},
	{
		.name = "hip.library",
		.type = KEY_STRING,
		.def = "libamdhip64.so",
		.help = "HIP runtime library to open (tries libamdhip64.so.6 and .5 after it)",
	},
	{
		.name = "tier.device.limit",
		.type = KEY_SIZE,
		.def = "0",
		.help = "device memory ODX may use on each device, enforced by its own accounting "
			"(0: what the device reports; NN%: a share of that)",
	},
	{
		.name = "tier.host.limit",
		.type = KEY_SIZE,
		.def = "0",
		.help = "host RAM ODX may use for buffer copies on each NUMA node (0: the node's "
			"RAM; NN%: a share of it); above it, copies are spilled to the disk tier",
	},
	{
		.name = "tier.pinned.size",
		.type = KEY_SIZE,
		.def = "64MiB",
		.help = "pinned staging pool for transfers between devices, host and disk "
			"(pre-allocated and pre-faulted at open; 0: none)",
	},
	{
		.name = "tier.pinned.block",
		.type = KEY_SIZE,
		.def = "4MiB",
		.help = "size of one block of the pinned staging pool",
	},
	{
		.name = "tier.disk.path",
		.type = KEY_STRING,
		.def = "",
		.help = "directory under which the private spill area is created (empty: $TMPDIR, "
			"else /var/tmp)",
	},
	{
		.name = "tier.disk.limit",
		.type = KEY_SIZE,
		.def = "0",
		.help = "bytes the disk tier may hold (0: no disk tier: host RAM is the last tier)",
	},
	{
		.name = "tier.disk.direct",
		.type = KEY_ENUM,
		.def = "auto",
		.help = "direct I/O for spill files: auto (where the filesystem allows), on, off",
		.words = (const char *const[]){"auto", "on", "off", NULL},
	},
	{
		.name = "tier.disk.engine",
		.type = KEY_ENUM,
		.def = "auto",
		.help = "spill I/O engine: auto (io_uring when available), io_uring, pread",
		.words = (const char *const[]){"auto", "io_uring", "pread", NULL},
	},
	{
		.name = "tier.disk.fault",
		.type = KEY_STRING,
		.def = "",
		.help = "testing: injected spill I/O failures, e.g. write_eio=2,corrupt=1 (the "
			"Nth write fails with EIO, the Nth stored block is corrupted)",
		.check = odx__config_check_disk_fault,
	},
	{
		.name = "tier.monitor.start",
		.type = KEY_INT,
		.def = "90",
		.help = "occupancy of a tier, in percent, at which the background monitor starts "
			"evicting idle copies",
		.min = 1,
		.max = 100,
	},
	{
		.name = "tier.monitor.stop",
		.type = KEY_INT,
		.def = "75",
		.help = "occupancy, in percent, at which the background monitor stops",
		.min = 0,
		.max = 100,
	},
	{
		.name = "tier.prefetch",
		.type = KEY_BOOL,
		.def = "true",
		.help = "fetch the inputs of tasks queued on a device while it runs others, when "
			"its tier has room",
	},
	{
		.name = "tier.direct_access",
		.type = KEY_BOOL,
		.def = "true",
		.help = "odx_buffer_read and odx_buffer_write copy straight between user memory and "
			"a device's copy of the buffer when host RAM holds none worth using (false: "
			"always through the buffer's host copy)",
	},
	{
		.name = "tier.watchdog_ms",
		.type = KEY_INT,
		.def = "30000",
		.help = "report a no-progress state dump when no task completed and no byte moved "
			"for this long while work is pending (0: off)",
		.min = 0,
		.max = 86400000,
	},
	{
		.name = "fabric.provider",
		.type = KEY_STRING,
		.def = "auto",
		.help = "transport between ranks: auto, tcp, shm, verbs, cxi, efa, ue, or a "
			"libfabric provider string such as tcp;ofi_rxm",
	},
	{
		.name = "fabric.iface",
		.type = KEY_STRING,
		.def = "",
		.help = "network interface (name or address) the fabric uses (empty: any)",
	},
	{
		.name = "fabric.peer_timeout_ms",
		.type = KEY_INT,
		.def = "10000",
		.help = "a rank that does not answer for this long is declared failed (ODX_EPEER)",
		.min = 100,
		.max = 3600000,
	},
	{
		.name = "fabric.retries",
		.type = KEY_INT,
		.def = "3",
		.help = "retries of a failed transfer before its peer is declared failed",
		.min = 0,
		.max = 100,
	},
	{
		.name = "fabric.shm_lanes",
		.type = KEY_INT,
		.def = "2",
		.help = "copy lanes between ranks on one host (shm): endpoints with a copying thread "
			"each, over which large transfers split (1: off)",
		.min = 1,
		.max = 4,
	},
	{
		.name = "fabric.progress",
		.type = KEY_ENUM,
		.def = "auto",
		.help = "who drives the fabric: thread (a polling progress thread), workers (idle "
			"workers drive it between tasks, the progress thread parks meanwhile), auto "
			"(workers where ranks share a host and a rank has no core beyond its "
			"workers', else thread)",
		.words = (const char *const[]){"auto", "thread", "workers", NULL},
	},
	{
		.name = "fabric.assist_spin_us",
		.type = KEY_INT,
		.def = "0",
		.help = "with fabric.progress = workers: microseconds an idle worker whose "
			"transfers are in flight drives the fabric before it sleeps (beyond "
			"sched.idle_spin_us)",
		.min = 0,
		.max = 100000,
	},
	{
		.name = "fabric.fault",
		.type = KEY_STRING,
		.def = "",
		.help = "testing: fault injection in ODX's fabric layer, e.g. "
			"delay_us=0-2000,reorder=0.2,eagain=0.3,cqerr=0.01,seed=7",
		.check = odx__config_check_fabric_fault,
	},
};

#define KEY_COUNT ARRAY_LEN(keys)

struct value {
	char *text;	/* canonical text (lists without spaces, numbers trimmed) */
	char *origin;	/* "default", "file PATH:LINE", "env ODX_X", "api" */
	union parsed v;
	unsigned file_line; /* line that set it in the file, to refuse duplicates; 0: none */
};

struct odx__config {
	odx_log_fn log_fn;
	void *log_user;
	struct value values[KEY_COUNT];
};

struct odx_config {
	char *overrides[KEY_COUNT]; /* API value per key, NULL where not set */
	char *file;
	odx_log_fn log_fn;
	void *log_user;
	char error[512];
};

/* ---- small helpers ------------------------------------------------------------------------ */

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *dup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	s = malloc((size_t)n + 1);
	if (!s)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

static const struct key_def *find_key(const char *name, size_t *index)
{
	for (size_t i = 0; i < KEY_COUNT; i++) {
		if (strcmp(keys[i].name, name) == 0) {
			*index = i;
			return &keys[i];
		}
	}
	return NULL;
}

/* "host.devices" -> "ODX_HOST_DEVICES": the one environment mapping (config.h). */
static void env_name(const char *key, char *buf, size_t len)
{
	size_t n = 0;

	assert(len > 4 + strlen(key));
	memcpy(buf, "ODX_", 4);
	n = 4;
	for (; *key && n + 1 < len; key++)
		buf[n++] = *key == '.' ? '_' : (char)toupper((unsigned char)*key);
	buf[n] = '\0';
}


/* ---- the public override set -------------------------------------------------------------- */

ODX_API int odx_config_create(odx_config **out)
{
	odx_config *cfg;

	if (!out)
		return ODX_EINVAL;
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return ODX_ENOMEM;
	*out = cfg;
	return 0;
}

ODX_API void odx_config_destroy(odx_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < KEY_COUNT; i++)
		free(cfg->overrides[i]);
	free(cfg->file);
	free(cfg);
}

ODX_API int odx_config_set(odx_config *cfg, const char *key, const char *value)
{
	const struct key_def *k;
	union parsed v;
	char why[400];
	char *canon;
	char *copy;
	size_t i;
	int rc;

	if (!cfg)
		return ODX_EINVAL;
	if (!key || !value) {
		format_msg(cfg->error, sizeof(cfg->error), "api: key and value must not be NULL");
		return ODX_EINVAL;
	}
	k = find_key(key, &i);
	if (!k) {
		format_msg(cfg->error, sizeof(cfg->error), "api: unknown key '%s'", key);
		return ODX_ECONFIG;
	}
	/* Validate now so the caller learns about a bad value at the line that set it. */
	rc = odx__config_parse_value(k, value, &v, &canon, why, sizeof(why));
	if (rc == ODX_ENOMEM)
		goto out_nomem;
	if (rc) {
		format_msg(cfg->error, sizeof(cfg->error), "api: key '%s': %s", key, why);
		return rc;
	}
	free(canon);
	/* Keep the value as given: odx__config_load parses it again, with the same result. */
	copy = dup_str(value);
	if (!copy)
		goto out_nomem;
	free(cfg->overrides[i]);
	cfg->overrides[i] = copy;
	return 0;

out_nomem:
	format_msg(cfg->error, sizeof(cfg->error), "api: key '%s': out of memory", key);
	return ODX_ENOMEM;
}

ODX_API int odx_config_set_file(odx_config *cfg, const char *path)
{
	char *copy = NULL;

	if (!cfg)
		return ODX_EINVAL;
	/* NULL goes back to the default search ($ODX_CONFIG, then ./odx.conf). */
	if (path) {
		copy = dup_str(path);
		if (!copy) {
			format_msg(cfg->error, sizeof(cfg->error),
				   "api: config file: out of memory");
			return ODX_ENOMEM;
		}
	}
	free(cfg->file);
	cfg->file = copy;
	return 0;
}

ODX_API int odx_config_set_log(odx_config *cfg, odx_log_fn fn, void *user)
{
	if (!cfg)
		return ODX_EINVAL;
	cfg->log_fn = fn;
	cfg->log_user = user;
	return 0;
}

ODX_API const char *odx_config_error(const odx_config *cfg)
{
	return cfg ? cfg->error : "";
}

void odx__config_set_error(const odx_config *api, const char *msg)
{
	/* The set is heap-allocated by odx_config_create, so writing through it is defined; its
	 * error text is the one field odx_open may change (documented in odx.h). */
	odx_config *cfg = (odx_config *)(uintptr_t)api;

	if (cfg)
		format_msg(cfg->error, sizeof(cfg->error), "%s", msg);
}

odx_log_fn odx__config_api_log_fn(const odx_config *api, void **user)
{
	if (!api)
		return NULL;
	*user = api->log_user;
	return api->log_fn;
}

/* ---- resolving: defaults, file, environment, api ------------------------------------------ */

/* Parses `text` for key `index` and makes it the key's value; takes ownership of `origin`. */
static int assign(odx__config *cfg, size_t index, const char *text, char *origin, char *why,
		  size_t whylen)
{
	struct value *val = &cfg->values[index];
	union parsed v;
	char *canon;
	int rc;

	if (!origin)
		return ODX_ENOMEM;
	rc = odx__config_parse_value(&keys[index], text, &v, &canon, why, whylen);
	if (rc) {
		free(origin);
		return rc;
	}
	free(val->text);
	free(val->origin);
	val->text = canon;
	val->origin = origin;
	val->v = v;
	return 0;
}

/* State shared by the line reader and the inih handler while one file is parsed. */
struct file_parse {
	odx__config *cfg;
	FILE *fp;
	const char *path;
	unsigned line;	   /* line of the text last handed to inih */
	unsigned err_line; /* line of our own first error; 0: none */
	int rc;		   /* our own first error */
	int read_errno;	   /* errno of a failed read; 0: none */
	char *err;
	size_t errlen;
};

/*
 * inih's reader. Debian's inih has no INI_HANDLER_LINENO and splits a line longer than its buffer
 * into several "lines", so we hand it exactly one line per call and count lines ourselves.
 * Leading blanks are dropped: inih would read an indented line as the continuation of the
 * previous key's value, a surprise nobody wants in this file. An over-long comment is skipped;
 * any other over-long line is an error rather than a silently truncated value.
 */
static char *read_line(char *buf, int size, void *stream)
{
	struct file_parse *st = stream;
	int n = 0;
	int c;

	if (st->rc)
		return NULL; /* stop parsing at our first error */
	do
		c = getc(st->fp);
	while (c == ' ' || c == '\t');
	if (c == EOF) {
		if (ferror(st->fp))
			st->read_errno = errno;
		return NULL;
	}
	st->line++;
	while (c != EOF && c != '\n') {
		if (n < size - 1) {
			buf[n++] = (char)c;
		} else if (buf[0] != ';' && buf[0] != '#') {
			st->rc = ODX_ECONFIG;
			st->err_line = st->line;
			format_msg(st->err, st->errlen, "%s:%u: line longer than %d characters",
				   st->path, st->line, size - 1);
			return NULL;
		}
		c = getc(st->fp);
	}
	if (c == EOF && ferror(st->fp))
		st->read_errno = errno;
	buf[n] = '\0';
	return buf;
}

static int handle_pair(void *user, const char *section, const char *name, const char *value)
{
	struct file_parse *st = user;
	const struct key_def *k;
	char key[256];
	char why[400];
	size_t i;
	int rc;

	if (section[0])
		snprintf(key, sizeof(key), "%s.%s", section, name);
	else
		snprintf(key, sizeof(key), "%s", name);
	k = find_key(key, &i);
	if (!k) {
		format_msg(st->err, st->errlen, "%s:%u: unknown key '%s'", st->path, st->line, key);
		rc = ODX_ECONFIG;
		goto out_fail;
	}
	/* Two lines setting one key is most likely an edit gone wrong: say which lines. */
	if (st->cfg->values[i].file_line) {
		format_msg(st->err, st->errlen, "%s:%u: duplicate key '%s' (first set on line %u)",
			   st->path, st->line, key, st->cfg->values[i].file_line);
		rc = ODX_ECONFIG;
		goto out_fail;
	}
	rc = assign(st->cfg, i, value, dup_printf("file %s:%u", st->path, st->line), why,
		    sizeof(why));
	if (rc == ODX_ENOMEM) {
		format_msg(st->err, st->errlen, "out of memory");
		goto out_fail;
	}
	if (rc) {
		format_msg(st->err, st->errlen, "%s:%u: key '%s': %s", st->path, st->line, key,
			   why);
		goto out_fail;
	}
	st->cfg->values[i].file_line = st->line;
	return 1;

out_fail:
	st->rc = rc;
	st->err_line = st->line;
	return 0;
}

/*
 * Picks the file: the API's, else $ODX_CONFIG (empty: none), else ./odx.conf if it exists.
 * Only the implicit ./odx.conf may be missing; a file someone named must be there.
 */
static int load_file(odx__config *cfg, const odx_config *api,
		     const char *(*lookup)(const char *name), char *err, size_t errlen)
{
	struct file_parse st = {.cfg = cfg, .err = err, .errlen = errlen};
	const char *named_by = NULL;
	const char *path;
	int ret;

	if (api && api->file) {
		path = api->file;
		named_by = "odx_config_set_file";
	} else if ((path = lookup("ODX_CONFIG"))) {
		if (!path[0])
			return 0;
		named_by = "ODX_CONFIG";
	} else {
		path = "odx.conf";
	}
	/* "e": workers and backends may fork helpers; they need not inherit this descriptor. */
	st.fp = fopen(path, "re");
	if (!st.fp) {
		if (!named_by && errno == ENOENT)
			return 0;
		/* strerror is MT-safe in glibc >= 2.32 for every errno value fopen returns. */
		format_msg(err, errlen, "%s: cannot open config file%s%s%s: %s", path,
			   named_by ? " (named by " : "", named_by ? named_by : "",
			   named_by ? ")" : "", strerror(errno));
		return ODX_ECONFIG;
	}
	st.path = path;
	ret = ini_parse_stream(read_line, &st, handle_pair, &st);
	/* inih goes on after a syntax error and returns its line: report whichever came first. */
	if (ret > 0 && (!st.rc || (unsigned)ret < st.err_line)) {
		format_msg(err, errlen,
			   "%s:%d: syntax error (expected 'key = value' or '[section]')",
			   path, ret);
		st.rc = ODX_ECONFIG;
	} else if (ret < 0 && !st.rc) {
		format_msg(err, errlen, "%s: out of memory", path);
		st.rc = ODX_ENOMEM;
	} else if (!st.rc && st.read_errno) {
		/* A directory opens fine on Linux and fails only here (EISDIR). */
		format_msg(err, errlen, "%s: cannot read config file: %s", path,
			   strerror(st.read_errno));
		st.rc = ODX_ECONFIG;
	}
	fclose(st.fp);
	return st.rc;
}

static int load_env(odx__config *cfg, const char *(*lookup)(const char *name), char *err,
		    size_t errlen)
{
	char var[128];
	char why[400];

	/* Every key has a variable; unknown ODX_* variables are not errors (ODX_CONFIG and
	 * friends exist, and other tools share the prefix). */
	for (size_t i = 0; i < KEY_COUNT; i++) {
		const char *value;
		int rc;

		env_name(keys[i].name, var, sizeof(var));
		value = lookup(var);
		if (!value)
			continue;
		rc = assign(cfg, i, value, dup_printf("env %s", var), why, sizeof(why));
		if (rc == ODX_ENOMEM) {
			format_msg(err, errlen, "out of memory");
			return rc;
		}
		if (rc) {
			format_msg(err, errlen, "environment %s: %s", var, why);
			return rc;
		}
	}
	return 0;
}

static int load_api(odx__config *cfg, const odx_config *api, char *err, size_t errlen)
{
	char why[400];

	for (size_t i = 0; i < KEY_COUNT; i++) {
		int rc;

		if (!api->overrides[i])
			continue;
		/* Already validated by odx_config_set; this can only fail for memory. */
		rc = assign(cfg, i, api->overrides[i], dup_str("api"), why, sizeof(why));
		if (rc == ODX_ENOMEM) {
			format_msg(err, errlen, "out of memory");
			return rc;
		}
		if (rc) {
			format_msg(err, errlen, "api: key '%s': %s", keys[i].name, why);
			return rc;
		}
	}
	cfg->log_fn = api->log_fn;
	cfg->log_user = api->log_user;
	return 0;
}

static const char *getenv_lookup(const char *name)
{
	return getenv(name);
}

int odx__config_load(const odx_config *api, const char *(*environ_lookup)(const char *name),
		     odx__config **out, char *err, size_t errlen)
{
	const char *(*lookup)(const char *name) = environ_lookup ? environ_lookup : getenv_lookup;
	odx__config *cfg;
	char why[400];
	int rc;

	format_msg(err, errlen, "%s", "");
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg) {
		format_msg(err, errlen, "out of memory");
		return ODX_ENOMEM;
	}
	for (size_t i = 0; i < KEY_COUNT; i++) {
		rc = assign(cfg, i, keys[i].def, dup_str("default"), why, sizeof(why));
		/* A default that does not parse is a bug in the table, not a user error. */
		assert(rc != ODX_ECONFIG);
		if (rc) {
			format_msg(err, errlen, "out of memory");
			goto out_free_cfg;
		}
	}
	rc = load_file(cfg, api, lookup, err, errlen);
	if (rc)
		goto out_free_cfg;
	rc = load_env(cfg, lookup, err, errlen);
	if (rc)
		goto out_free_cfg;
	if (api) {
		rc = load_api(cfg, api, err, errlen);
		if (rc)
			goto out_free_cfg;
	}
	*out = cfg;
	return 0;

out_free_cfg:
	odx__config_free(cfg);
	return rc;
}

void odx__config_free(odx__config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < KEY_COUNT; i++) {
		free(cfg->values[i].text);
		free(cfg->values[i].origin);
	}
	free(cfg);
}

/* ---- getters ------------------------------------------------------------------------------ */

/* A wrong key or type is a programming error in the caller, hence assert, not an error code. */
static const struct value *lookup_value(const odx__config *cfg, const char *key,
					enum key_type type)
{
	const struct key_def *k;
	size_t i = 0;

	k = find_key(key, &i);
	assert(k && "unknown configuration key");
	assert(k->type == type ||
	       (type == KEY_STRING && (k->type == KEY_ENUM || k->type == KEY_LIST)));
	(void)k;
	(void)type;
	return &cfg->values[i];
}

int odx__config_has(const odx__config *cfg, const char *key, char kind)
{
	static const char kinds[] = {[KEY_STRING] = 's', [KEY_BOOL] = 'b', [KEY_INT] = 'i',
				     [KEY_SIZE] = 'z', [KEY_ENUM] = 's', [KEY_LIST] = 's'};
	const struct key_def *k;
	size_t i = 0;

	(void)cfg;
	if (!key || !(k = find_key(key, &i)))
		return ODX_ENOENT;
	return kinds[k->type] == kind ? 0 : ODX_EINVAL;
}

/* Returns the text of a string, enum or list key (lists as "a,b", without spaces). */
const char *odx__config_str(const odx__config *cfg, const char *key)
{
	return lookup_value(cfg, key, KEY_STRING)->text;
}

bool odx__config_bool(const odx__config *cfg, const char *key)
{
	return lookup_value(cfg, key, KEY_BOOL)->v.b;
}

int64_t odx__config_int(const odx__config *cfg, const char *key)
{
	return lookup_value(cfg, key, KEY_INT)->v.i;
}

uint64_t odx__config_size(const odx__config *cfg, const char *key, uint64_t percent_of)
{
	const struct value *val = lookup_value(cfg, key, KEY_SIZE);
	uint64_t p = val->v.size.percent;

	if (!p)
		return val->v.size.bytes;
	/* Split percent_of so that percent_of * p cannot overflow, without losing precision. */
	return percent_of / 100 * p + percent_of % 100 * p / 100;
}

odx_log_fn odx__config_log_fn(const odx__config *cfg, void **user)
{
	if (user)
		*user = cfg->log_user;
	return cfg->log_fn;
}

void odx__config_foreach(const odx__config *cfg, odx_config_visit_fn fn, void *user)
{
	for (size_t i = 0; i < KEY_COUNT; i++)
		fn(user, keys[i].name, cfg->values[i].text, cfg->values[i].origin, keys[i].help);
}
