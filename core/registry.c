/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.c - finding backends: built into libodx, or modules libodx-backend-<name>.so in
 * $ODX_BACKEND_PATH and the installed backend directory. A module is checked before any of its
 * operations is called: entry point present, ABI major equal, required operations inside the
 * table it was built with.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#ifndef ODX_BACKEND_DIR
#define ODX_BACKEND_DIR "/usr/local/lib/odx"
#endif
/* meson.build defines ODX_BUILD_ROOT (the build directory) and ODX_BUILD_MODULE_PATH (where that
 * build puts its modules) for libodx itself. */

#define PREFIX "libodx-backend-"
#define SUFFIX ".so"

static const odx_backend_descriptor *const builtin[] = {&odx__host_descriptor};
#define NBUILTIN ((int)(sizeof(builtin) / sizeof(builtin[0])))

/* Required operations must lie inside the table the backend was built with. */
static const char *missing_required(const odx_backend_ops *o)
{
#define REQUIRE(op)                                                                                \
	if (!ODX_BACKEND_HAS_OP(o, odx_backend_ops, op))                                           \
		return #op;
	REQUIRE(open)
	REQUIRE(close)
	REQUIRE(device_count)
	REQUIRE(device_open)
	REQUIRE(device_close)
	REQUIRE(mem_alloc)
	REQUIRE(mem_free)
	REQUIRE(copy_h2d)
	REQUIRE(copy_d2h)
	REQUIRE(launch)
#undef REQUIRE
	return NULL;
}

static int check_descriptor(const odx_backend_descriptor *d, const char *name, char *reason,
			    size_t n)
{
	const char *op;

	if (!d || d->size < offsetof(odx_backend_descriptor, ops) + sizeof(d->ops) || !d->ops) {
		snprintf(reason, n, "its descriptor is incomplete");
		return ODX_EUNAVAIL;
	}
	if ((d->abi_version >> 16) != ODX_BACKEND_ABI_MAJOR) {
		snprintf(reason, n, "it implements backend ABI %u.%u; this ODX speaks %u.%u",
			 d->abi_version >> 16, d->abi_version & 0xffff, ODX_BACKEND_ABI_MAJOR,
			 ODX_BACKEND_ABI_MINOR);
		return ODX_EUNAVAIL;
	}
	if (!d->name || strcmp(d->name, name) != 0) {
		snprintf(reason, n, "it calls itself '%s', not '%s'", d->name ? d->name : "",
			 name);
		return ODX_EUNAVAIL;
	}
	if ((op = missing_required(d->ops)) != NULL) {
		snprintf(reason, n, "its operation table lacks the required '%s'", op);
		return ODX_EUNAVAIL;
	}
	return 0;
}

static int load_module(const char *path, const char *name, odx__backend_module *out,
		       char *reason, size_t n)
{
	const odx_backend_descriptor *desc = NULL;
	odx_backend_entry_fn entry;
	void *sym, *h;
	int rc;

	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(reason, n, "%s", dlerror());
		return ODX_EUNAVAIL;
	}
	sym = dlsym(h, ODX_BACKEND_ENTRY);
	if (!sym) {
		snprintf(reason, n, "%s exports no %s", path, ODX_BACKEND_ENTRY);
		goto out_close;
	}
	/* POSIX guarantees a function address survives the trip through void *. */
	memcpy(&entry, &sym, sizeof(entry));
	rc = entry(ODX_BACKEND_ABI_VERSION, &desc);
	if (rc) {
		snprintf(reason, n, "%s refused backend ABI %u.%u (%s)", path,
			 ODX_BACKEND_ABI_MAJOR, ODX_BACKEND_ABI_MINOR, odx_err_name(rc));
		goto out_close;
	}
	if (check_descriptor(desc, name, reason, n) != 0) {
		char detail[256];

		snprintf(detail, sizeof(detail), "%s", reason);
		snprintf(reason, n, "%s: %s", path, detail);
		goto out_close;
	}
	out->desc = desc;
	out->handle = h;
	snprintf(out->path, sizeof(out->path), "%s", path);
	return 0;

out_close:
	dlclose(h);
	return ODX_EUNAVAIL;
}

static bool file_exists(const char *path)
{
	FILE *f = fopen(path, "re");

	if (f)
		fclose(f);
	return f != NULL;
}

/* Tries `dir`/libodx-backend-`name`.so; 1 if absent, 0 if loaded, negative if broken. */
static int try_dir(const char *dir, size_t dirlen, const char *name, odx__backend_module *out,
		   char *reason, size_t n)
{
	char path[512];

	snprintf(path, sizeof(path), "%.*s/" PREFIX "%s" SUFFIX, (int)dirlen, dir, name);
	if (!file_exists(path))
		return 1;
	return load_module(path, name, out, reason, n);
}

/*
 * Where the modules of this libodx are: ODX_BACKEND_DIR once installed; the module directories of
 * its own build when this libodx.so is the one in its build directory, so that a program run from
 * the build tree (build/tools/odx info) finds the modules built with it, as an installed one does,
 * and never mixes in the modules of another installed version.
 */
static const char *own_module_dirs(void)
{
#if defined(ODX_BUILD_ROOT) && defined(ODX_BUILD_MODULE_PATH)
	static const char anchor; /* an address inside this libodx, for dladdr */
	const char *dirs = ODX_BACKEND_DIR;
	char *lib, *root;
	Dl_info info;

	if (!dladdr(&anchor, &info) || !info.dli_fname)
		return dirs;
	lib = realpath(info.dli_fname, NULL);
	root = realpath(ODX_BUILD_ROOT, NULL);
	if (lib && root) {
		char *slash = strrchr(lib, '/');

		if (slash && (size_t)(slash - lib) == strlen(root) &&
		    strncmp(lib, root, strlen(root)) == 0)
			dirs = ODX_BUILD_MODULE_PATH;
	}
	free(lib);
	free(root);
	return dirs;
#else
	return ODX_BACKEND_DIR;
#endif
}

/* The next non-empty entry of the ':'-separated *list: its start in *dir, its length in *len. */
static bool next_dir(const char **list, const char **dir, size_t *len)
{
	while (*list && **list) {
		const char *end = strchr(*list, ':');

		*dir = *list;
		*len = end ? (size_t)(end - *list) : strlen(*list);
		*list = end ? end + 1 : NULL;
		if (*len > 0)
			return true;
	}
	return false;
}

int odx__backend_find(const char *name, odx__backend_module *out, char *reason, size_t n)
{
	const char *own = own_module_dirs(), *list = getenv("ODX_BACKEND_PATH"), *dir;
	size_t len;
	int i, rc;

	*out = (odx__backend_module){0};
	/* A module on ODX_BACKEND_PATH wins, so a developer can replace a built-in backend. */
	while (next_dir(&list, &dir, &len))
		if ((rc = try_dir(dir, len, name, out, reason, n)) <= 0)
			return rc;
	for (i = 0; i < NBUILTIN; i++)
		if (strcmp(builtin[i]->name, name) == 0) {
			out->desc = builtin[i];
			snprintf(out->path, sizeof(out->path), "built in");
			return 0;
		}
	for (list = own; next_dir(&list, &dir, &len);)
		if ((rc = try_dir(dir, len, name, out, reason, n)) <= 0)
			return rc;
	snprintf(reason, n,
		 "not built into this ODX and no " PREFIX "%s" SUFFIX " in $ODX_BACKEND_PATH or %s",
		 name, own);
	return ODX_EUNAVAIL;
}

static int add_name(char **names, int count, int max, const char *name, size_t len)
{
	int i;

	for (i = 0; i < count; i++)
		if (strlen(names[i]) == len && strncmp(names[i], name, len) == 0)
			return count;
	if (count < max && (names[count] = strndup(name, len)) != NULL)
		count++;
	return count;
}

static int scan_dir(const char *dir, size_t dirlen, char **names, int count, int max)
{
	char path[512];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "%.*s", (int)dirlen, dir);
	d = opendir(path);
	if (!d)
		return count;
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name), pre = strlen(PREFIX), suf = strlen(SUFFIX);

		if (len > pre + suf && strncmp(e->d_name, PREFIX, pre) == 0 &&
		    strcmp(e->d_name + len - suf, SUFFIX) == 0)
			count = add_name(names, count, max, e->d_name + pre, len - pre - suf);
	}
	closedir(d);
	return count;
}

int odx__backend_list(char **names, int max)
{
	const char *list = getenv("ODX_BACKEND_PATH"), *dir;
	int count = 0, i;
	size_t len;

	for (i = 0; i < NBUILTIN; i++)
		count = add_name(names, count, max, builtin[i]->name, strlen(builtin[i]->name));
	while (next_dir(&list, &dir, &len))
		count = scan_dir(dir, len, names, count, max);
	for (list = own_module_dirs(); next_dir(&list, &dir, &len);)
		count = scan_dir(dir, len, names, count, max);
	return count;
}

void odx__backend_unload(odx__backend_module *m)
{
	if (m->handle)
		dlclose(m->handle);
	*m = (odx__backend_module){0};
}
