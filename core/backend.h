/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h - the core's side of the backend ABI (include/odx/backend.h): the registry of
 * backends built in or found as modules.
 */
#ifndef ODX_CORE_BACKEND_H
#define ODX_CORE_BACKEND_H

#include "odx/backend.h"

/* Backends linked into libodx. */
extern const odx_backend_descriptor odx__host_descriptor;

typedef struct odx__backend_module {
	const odx_backend_descriptor *desc;
	void *handle;            /* dlopen handle, NULL when built in */
	char path[512];          /* where it came from ("built in" for linked ones) */
} odx__backend_module;

/*
 * Finds backend `name`: a module `libodx-backend-<name>.so` in $ODX_BACKEND_PATH, then the
 * built-in one, then a module in the installed backend directory. On failure writes why into
 * reason (e.g. the dlerror text, or a version mismatch) and returns ODX_EUNAVAIL.
 */
int odx__backend_find(const char *name, odx__backend_module *out, char *reason, size_t reason_size);
/* Names of every backend a search would find (built in first, then modules), for `auto`;
 * `names` receives up to `max` strdup'ed names. */
int odx__backend_list(char **names, int max);
void odx__backend_unload(odx__backend_module *m);

#endif /* ODX_CORE_BACKEND_H */
