/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache.c - compiled OpenCL program binaries on disk, so that a second context (or a second run)
 * skips the compiler.
 *
 * A file holds one binary for one (source, device, driver, platform, build options); its name is
 * a 64-bit FNV-1a hash of those, and its header repeats a second, independent hash of the same
 * inputs plus a checksum of the binary, so that a collision or a damaged file is detected before
 * the driver sees it. Files are written to a temporary name and renamed: readers never see half
 * a file, and two processes building the same program at once both end with a whole one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clb.h"

#define CLB_CACHE_MAGIC "ODXCLBIN"
#define CLB_CACHE_VERSION 1u
/* A binary larger than this is not a program we wrote. */
#define CLB_CACHE_MAX_BINARY (256u << 20)

typedef struct clb_cache_header {
	char magic[8];
	uint32_t version;
	uint32_t reserved;
	uint64_t key;
	uint64_t check;	   /* second hash of the key inputs */
	uint64_t size;	   /* bytes of binary that follow */
	uint64_t checksum; /* FNV-1a 64 of those bytes */
} clb_cache_header;

#define CLB_FNV_PRIME 0x100000001b3ull
#define CLB_FNV_BASIS 0xcbf29ce484222325ull
/* Another starting point gives a second hash of the same bytes, independent enough to catch a
 * collision of the first. */
#define CLB_FNV_BASIS2 0x84222325cbf29ce4ull

static uint64_t clb_fnv(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= p[i];
		h *= CLB_FNV_PRIME;
	}
	return h;
}

/* Length-prefixed, so that ("ab", "c") and ("a", "bc") hash differently. */
static uint64_t clb_fnv_field(uint64_t h, const void *data, size_t len)
{
	uint64_t n = len;

	h = clb_fnv(h, &n, sizeof(n));
	return clb_fnv(h, data, len);
}

static uint64_t clb_key_hash(uint64_t basis, const clb_dev *dev, const char *src, size_t len,
			     const char *options)
{
	static const char tag[] = "odx-opencl-binary-v1";
	uint64_t h = basis;

	h = clb_fnv_field(h, tag, sizeof(tag) - 1);
	h = clb_fnv_field(h, src, len);
	h = clb_fnv_field(h, dev->ident, dev->ident_len);
	return clb_fnv_field(h, options, strlen(options));
}

uint64_t clb_cache_key(const clb_dev *dev, const char *src, size_t len, const char *options,
		       uint64_t *check)
{
	*check = clb_key_hash(CLB_FNV_BASIS2, dev, src, len, options);
	return clb_key_hash(CLB_FNV_BASIS, dev, src, len, options);
}

/* mkdir -p, new directories private to the user (binaries are code that will be run). */
static int clb_mkdirs(const char *path)
{
	char buf[1024];
	size_t i, len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, path, len + 1);
	for (i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return -1;
		buf[i] = path[i];
	}
	return 0;
}

void clb_cache_init(clb_state *st)
{
	const char *dir = "", *base;
	int n;

	st->cache_dir[0] = '\0';
	if (ODX_BACKEND_HAS_OP(st->host, odx_backend_host, config_str))
		st->host->config_str(st->host->core, "opencl.cache_dir", &dir);
	if (!dir)
		dir = "";
	if (strcmp(dir, "none") == 0)
		return;
	if (dir[0]) {
		n = snprintf(st->cache_dir, sizeof(st->cache_dir), "%s", dir);
	} else if ((base = getenv("XDG_CACHE_HOME")) != NULL && base[0] == '/') {
		n = snprintf(st->cache_dir, sizeof(st->cache_dir), "%s/odx/opencl", base);
	} else if ((base = getenv("HOME")) != NULL && base[0] == '/') {
		n = snprintf(st->cache_dir, sizeof(st->cache_dir), "%s/.cache/odx/opencl", base);
	} else {
		clb_log(st, ODX_LOG_INFO,
			"opencl: no cache directory (neither opencl.cache_dir, "
			"$XDG_CACHE_HOME nor $HOME): binaries are not cached");
		return;
	}
	if (n < 0 || (size_t)n >= sizeof(st->cache_dir) || clb_mkdirs(st->cache_dir) != 0) {
		/* A cache is an optimisation: without one, every context compiles again. */
		clb_log(st, ODX_LOG_WARN,
			"opencl: cache directory '%s' unusable (%s): binaries "
			"are not cached",
			st->cache_dir, strerror(errno));
		st->cache_dir[0] = '\0';
	}
}

void clb_cache_path(const clb_state *st, uint64_t key, char *path, size_t path_size)
{
	snprintf(path, path_size, "%s/%016llx.clbin", st->cache_dir, (unsigned long long)key);
}

static int clb_read_all(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n > 0) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int clb_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int clb_cache_load(const clb_state *st, uint64_t key, uint64_t check, unsigned char **bin,
		   size_t *size, char *why, size_t why_size)
{
	char path[1100];
	clb_cache_header h;
	unsigned char *data = NULL;
	int fd, rc = ODX_EIO;

	if (!st->cache_dir[0])
		return ODX_ENOENT;
	clb_cache_path(st, key, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ODX_ENOENT;
	if (clb_read_all(fd, &h, sizeof(h)) != 0 || memcmp(h.magic, CLB_CACHE_MAGIC, 8) != 0 ||
	    h.version != CLB_CACHE_VERSION) {
		snprintf(why, why_size, "%s: not an ODX OpenCL cache file", path);
		goto out_close;
	}
	if (h.key != key || h.check != check) {
		snprintf(why, why_size, "%s: written for another program or device", path);
		goto out_close;
	}
	if (h.size == 0 || h.size > CLB_CACHE_MAX_BINARY) {
		snprintf(why, why_size, "%s: bad binary size %llu", path,
			 (unsigned long long)h.size);
		goto out_close;
	}
	data = malloc(h.size);
	if (!data) {
		rc = ODX_ENOMEM;
		snprintf(why, why_size, "%s: out of memory", path);
		goto out_close;
	}
	/* A truncated or altered file must never reach the driver: it may trust its input. */
	if (clb_read_all(fd, data, h.size) != 0 ||
	    clb_fnv(CLB_FNV_BASIS, data, h.size) != h.checksum) {
		snprintf(why, why_size, "%s: damaged (checksum mismatch or truncated)", path);
		goto out_free_data;
	}
	close(fd);
	*bin = data;
	*size = h.size;
	return 0;

out_free_data:
	free(data);
out_close:
	close(fd);
	return rc;
}

int clb_cache_store(const clb_state *st, uint64_t key, uint64_t check, const unsigned char *bin,
		    size_t size)
{
	char path[1100], tmp[1100];
	clb_cache_header h;
	int fd;

	if (!st->cache_dir[0])
		return 0;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, CLB_CACHE_MAGIC, 8);
	h.version = CLB_CACHE_VERSION;
	h.key = key;
	h.check = check;
	h.size = size;
	h.checksum = clb_fnv(CLB_FNV_BASIS, bin, size);
	clb_cache_path(st, key, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s/.tmp-%016llx-XXXXXX", st->cache_dir,
		 (unsigned long long)key);
	/* mkstemp creates the file 0600 with a name no other writer uses. */
	fd = mkstemp(tmp);
	if (fd < 0)
		goto out_fail;
	if (fchmod(fd, 0600) != 0 || clb_write_all(fd, &h, sizeof(h)) != 0 ||
	    clb_write_all(fd, bin, size) != 0) {
		close(fd);
		goto out_unlink;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0)
		goto out_unlink;
	return 0;

out_unlink:
	unlink(tmp);
out_fail:
	clb_log(st, ODX_LOG_WARN, "opencl: cannot write cache file %s: %s", path, strerror(errno));
	return ODX_EIO;
}
