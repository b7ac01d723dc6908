/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_parse.h - what config.c (the key table, the override set, resolving) and config_parse.c
 * (turning a value's text into its typed value) share. Private to those two files: the rest of
 * ODX sees only config.h.
 */
#ifndef ODX_CORE_CONFIG_PARSE_H
#define ODX_CORE_CONFIG_PARSE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))


enum key_type {
	KEY_STRING,
	KEY_BOOL,
	KEY_INT,
	KEY_SIZE,
	KEY_ENUM,
	KEY_LIST,
};

struct key_def {
	const char *name;	   /* "backends", "host.devices" */
	enum key_type type;
	const char *def;	   /* default, as text; must parse */
	const char *help;
	int64_t min, max;	   /* KEY_INT */
	const char *const *words;  /* KEY_ENUM, KEY_LIST: allowed words, NULL-terminated */
	/* A rule the type cannot express; gets the canonical text, fills `why` on failure. */
	int (*check)(const char *text, char *why, size_t whylen);
};

/* A parsed value; which member is valid follows from the key's type. */
union parsed {
	bool b;
	int64_t i;
	struct {
		uint64_t bytes;
		unsigned percent; /* nonzero: the value was "NN%" */
	} size;
};

/* ---- small helpers of both files ----------------------------------------------------------- */

static inline void format_msg(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline void format_msg(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	/* Callers may pass no buffer (err == NULL); a message is a courtesy, never required. */
	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

static inline char *dup_str(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);

	if (d)
		memcpy(d, s, n);
	return d;
}

/*
 * Parses `text` for key `k`. On success fills *out and sets *canon to a new string to keep as
 * the value's text. Returns 0, ODX_ECONFIG with `why` set ("'0' is out of range 1..64"), or
 * ODX_ENOMEM.
 */
int odx__config_parse_value(const struct key_def *k, const char *text, union parsed *out,
			    char **canon, char *why, size_t whylen);

/* The rules the key table names in `check` (config_parse.c). */
int odx__config_check_backends(const char *text, char *why, size_t whylen);
int odx__config_check_policy(const char *text, char *why, size_t whylen);
int odx__config_check_disk_fault(const char *text, char *why, size_t whylen);
int odx__config_check_fabric_fault(const char *text, char *why, size_t whylen);

#endif /* ODX_CORE_CONFIG_PARSE_H */
