/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h - resolved configuration of one context.
 *
 * Every key ODX knows is declared once, in the key table of config.c (type, default, help).
 * odx__config_load() resolves each key with the precedence API > environment > file > default,
 * validating every value where it was given, so a bad value is reported with its origin (file and
 * line, environment variable, or API call). After loading, the typed getters cannot fail: the key
 * table guarantees the key exists and the value parsed.
 *
 * Environment mapping (docs/configuration.md): global key k is ODX_K; key k of section a.b is
 * ODX_A_B_K (upper case, dots to underscores).
 */
#ifndef ODX_CORE_CONFIG_H
#define ODX_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx/odx.h"

typedef struct odx__config odx__config;

/*
 * Resolves the configuration. `api` may be NULL. `environ_lookup` returns the value of an
 * environment variable or NULL (pass NULL to use getenv; tests inject their own).
 * On failure returns ODX_ECONFIG (or ODX_ENOMEM) and writes a message naming the file and line,
 * the variable or the API key into err[0..errlen).
 */
int odx__config_load(const odx_config *api, const char *(*environ_lookup)(const char *name),
		     odx__config **out, char *err, size_t errlen);
void odx__config_free(odx__config *cfg);

/* 0 if `key` exists with type `kind` ('s' string/enum/list, 'b' bool, 'i' int, 'z' size),
 * ODX_ENOENT if unknown, ODX_EINVAL if of another type: the backend ABI's checked access. */
int odx__config_has(const odx__config *cfg, const char *key, char kind);

/* Typed getters. `key` must be in the key table with that type (asserted). */
const char *odx__config_str(const odx__config *cfg, const char *key);
bool odx__config_bool(const odx__config *cfg, const char *key);
int64_t odx__config_int(const odx__config *cfg, const char *key);
/* A size key: bytes, or `percent_of` * percentage when the value was given as "NN%". */
uint64_t odx__config_size(const odx__config *cfg, const char *key, uint64_t percent_of);

/* The log callback set with odx_config_set_log (NULL if none). */
odx_log_fn odx__config_log_fn(const odx__config *cfg, void **user);

/* odx_open's failure message, kept in the caller's override set for odx_config_error(). */
void odx__config_set_error(const odx_config *api, const char *msg);
/* The log sink of an override set, before any configuration is resolved. */
odx_log_fn odx__config_api_log_fn(const odx_config *api, void **user);

/* Visits every key: effective value as text, origin ("default", "file odx.conf:12",
 * "env ODX_HOST_DEVICES", "api"), and the help line. */
void odx__config_foreach(const odx__config *cfg, odx_config_visit_fn fn, void *user);

/* Parsers shared with other modules and tests. Return 0 or ODX_EINVAL. */
int odx__parse_size(const char *text, uint64_t *bytes, unsigned *percent);
int odx__parse_bool(const char *text, bool *out);
int odx__parse_int(const char *text, int64_t *out);

#endif /* ODX_CORE_CONFIG_H */
