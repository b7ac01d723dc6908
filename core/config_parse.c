/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_parse.c - a configuration value's text to its typed value: integers, booleans, sizes,
 * enumerations and lists, and the rules of single keys the types cannot express (backends,
 * policy, fault-injection specs).
 *
 * The key table and the resolving of values (defaults, file, environment, API) are config.c; the
 * parsers are here so that one value is parsed the same way wherever it is given.
 */
#include <assert.h>
#include <ctype.h>
#include <inttypes.h>
#include <strings.h>

#include "config.h"
#include "config_parse.h"
#include "fabric.h"
#include "mem/spill.h"

/* ---- small helpers ------------------------------------------------------------------------ */


static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Copies text[0..len) without surrounding blanks into a new string. */
static char *dup_trimmed(const char *text, size_t len)
{
	char *d;

	while (len && is_blank(*text)) {
		text++;
		len--;
	}
	while (len && is_blank(text[len - 1]))
		len--;
	d = malloc(len + 1);
	if (d) {
		memcpy(d, text, len);
		d[len] = '\0';
	}
	return d;
}

static int word_index(const char *const *words, const char *w, size_t len)
{
	for (int i = 0; words[i]; i++) {
		if (strlen(words[i]) == len && strncmp(words[i], w, len) == 0)
			return i;
	}
	return -1;
}

/* Writes "a, b, c" for messages. */
static void join_words(const char *const *words, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; words[i] && n < len; i++) {
		int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", words[i]);

		if (w < 0)
			break;
		n += (size_t)w;
	}
}

/* ---- parsers ------------------------------------------------------------------------------ */

/* Reads decimal digits; false on no digit or overflow. */
static bool read_digits(const char **p, uint64_t *out)
{
	const char *s = *p;
	uint64_t n = 0;

	if (!isdigit((unsigned char)*s))
		return false;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = (unsigned)(*s - '0');

		if (n > (UINT64_MAX - d) / 10)
			return false;
		n = n * 10 + d;
	}
	*p = s;
	*out = n;
	return true;
}

static const char *skip_blanks(const char *s)
{
	while (is_blank(*s))
		s++;
	return s;
}

int odx__parse_int(const char *text, int64_t *out)
{
	const char *s = skip_blanks(text);
	bool negative = false;
	uint64_t n;

	/* Hand-rolled rather than strtoll so that "0x10", "1e3" and "12abc" are all refused. */
	if (*s == '+' || *s == '-')
		negative = *s++ == '-';
	if (!read_digits(&s, &n))
		return ODX_EINVAL;
	if (*skip_blanks(s))
		return ODX_EINVAL;
	if (negative) {
		if (n > (uint64_t)INT64_MAX + 1)
			return ODX_EINVAL;
		*out = n == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)n;
	} else {
		if (n > INT64_MAX)
			return ODX_EINVAL;
		*out = (int64_t)n;
	}
	return 0;
}

int odx__parse_bool(const char *text, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	const char *s = skip_blanks(text);
	size_t len = strlen(s);

	while (len && is_blank(s[len - 1]))
		len--;
	for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
		if (strlen(yes[i]) == len && strncasecmp(s, yes[i], len) == 0) {
			*out = true;
			return 0;
		}
		if (strlen(no[i]) == len && strncasecmp(s, no[i], len) == 0) {
			*out = false;
			return 0;
		}
	}
	return ODX_EINVAL;
}

int odx__parse_size(const char *text, uint64_t *bytes, unsigned *percent)
{
	/* K/M/G/T alone mean the binary units, as most tools (dd, free) read them. */
	static const struct {
		const char *name;
		uint64_t mult;
	} units[] = {
		{"B", 1},
		{"KB", 1000ull},
		{"MB", 1000ull * 1000},
		{"GB", 1000ull * 1000 * 1000},
		{"TB", 1000ull * 1000 * 1000 * 1000},
		{"KiB", 1ull << 10},
		{"MiB", 1ull << 20},
		{"GiB", 1ull << 30},
		{"TiB", 1ull << 40},
		{"K", 1ull << 10},
		{"M", 1ull << 20},
		{"G", 1ull << 30},
		{"T", 1ull << 40},
	};
	const char *s = skip_blanks(text);
	const char *unit;
	size_t len;
	uint64_t n;

	if (!read_digits(&s, &n))
		return ODX_EINVAL;
	unit = skip_blanks(s);
	len = strlen(unit);
	while (len && is_blank(unit[len - 1]))
		len--;
	if (len == 0) {
		*bytes = n;
		*percent = 0;
		return 0;
	}
	if (len == 1 && *unit == '%') {
		if (n == 0 || n > 100)
			return ODX_EINVAL;
		*bytes = 0;
		*percent = (unsigned)n;
		return 0;
	}
	for (size_t i = 0; i < ARRAY_LEN(units); i++) {
		if (strlen(units[i].name) != len || strncasecmp(unit, units[i].name, len) != 0)
			continue;
		if (n > UINT64_MAX / units[i].mult)
			return ODX_EINVAL;
		*bytes = n * units[i].mult;
		*percent = 0;
		return 0;
	}
	return ODX_EINVAL;
}

/* Splits a comma list, checks each item against the allowed words, writes "a,b" to canon. */
static bool is_identifier(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return false;
	return len > 0;
}

/* Is `item` one of the comma-separated words of `list`? */
static bool list_contains(const char *list, const char *item, size_t len)
{
	const char *p = list;

	while (*p) {
		size_t n = strcspn(p, ",");

		if (n == len && strncmp(p, item, len) == 0)
			return true;
		p += n;
		p += *p == ',';
	}
	return false;
}

static int parse_list(const struct key_def *k, const char *text, char *canon, char *why,
		      size_t whylen)
{
	uint64_t seen = 0;
	const char *item = text;
	size_t n = 0;
	char allowed[256];

	/* `seen` has one bit per allowed word. */
	for (int w = 0; k->words && k->words[w]; w++)
		assert(w < 64);
	canon[0] = '\0';
	for (;;) {
		const char *end = strchr(item, ',');
		size_t len = end ? (size_t)(end - item) : strlen(item);
		int w;

		while (len && is_blank(*item)) {
			item++;
			len--;
		}
		while (len && is_blank(item[len - 1]))
			len--;
		if (len == 0) {
			format_msg(why, whylen, "'%s' has an empty item", text);
			return ODX_ECONFIG;
		}
		if (!k->words) {
			/* Open lists (backend names, including out-of-tree modules): identifiers. */
			if (!is_identifier(item, len)) {
				format_msg(why, whylen,
					   "'%.*s' is not a name (lower-case letters, digits, '_', "
					   "'-')",
					   (int)len, item);
				return ODX_ECONFIG;
			}
			if (list_contains(canon, item, len)) {
				format_msg(why, whylen, "'%.*s' is listed twice", (int)len, item);
				return ODX_ECONFIG;
			}
		} else {
			w = word_index(k->words, item, len);
			if (w < 0) {
				join_words(k->words, allowed, sizeof(allowed));
				format_msg(why, whylen, "'%.*s' is not one of %s", (int)len, item,
					   allowed);
				return ODX_ECONFIG;
			}
			/* A repeated backend would be opened twice; refuse instead of guessing. */
			if (seen & (1ull << w)) {
				format_msg(why, whylen, "'%.*s' is listed twice", (int)len, item);
				return ODX_ECONFIG;
			}
			seen |= 1ull << w;
		}
		if (n)
			canon[n++] = ',';
		memcpy(canon + n, item, len);
		n += len;
		canon[n] = '\0';
		if (!end)
			return 0;
		item = end + 1;
	}
}

/*
 * Parses `text` for key `k`. On success fills *out and sets *canon to a new string to keep as
 * the value's text. Returns 0, ODX_ECONFIG with `why` set ("'0' is out of range 1..64"), or
 * ODX_ENOMEM.
 */
int odx__config_parse_value(const struct key_def *k, const char *text, union parsed *out,
			    char **canon, char *why, size_t whylen)
{
	union parsed v = {0};
	char allowed[256];
	char *c;
	int rc = 0;

	/* Strings are kept verbatim (a path may end in a blank); everything else is trimmed. */
	c = k->type == KEY_STRING ? dup_str(text) : dup_trimmed(text, strlen(text));
	if (!c)
		return ODX_ENOMEM;
	switch (k->type) {
	case KEY_STRING:
		break;
	case KEY_BOOL:
		if (odx__parse_bool(c, &v.b)) {
			format_msg(why, whylen,
				   "'%s' is not a boolean (true/false, yes/no, on/off, 1/0)", text);
			rc = ODX_ECONFIG;
		}
		break;
	case KEY_INT:
		if (odx__parse_int(c, &v.i)) {
			format_msg(why, whylen, "'%s' is not a decimal integer", text);
			rc = ODX_ECONFIG;
		} else if (v.i < k->min || v.i > k->max) {
			format_msg(why, whylen, "'%s' is out of range %" PRId64 "..%" PRId64, text,
				   k->min, k->max);
			rc = ODX_ECONFIG;
		}
		break;
	case KEY_SIZE:
		if (odx__parse_size(c, &v.size.bytes, &v.size.percent)) {
			format_msg(why, whylen,
				   "'%s' is not a size (bytes with an optional unit B, KB, MB, GB, "
				   "TB, KiB, MiB, GiB, TiB, K, M, G, T, or a percentage 1..100%%)",
				   text);
			rc = ODX_ECONFIG;
		}
		break;
	case KEY_ENUM:
		if (word_index(k->words, c, strlen(c)) < 0) {
			join_words(k->words, allowed, sizeof(allowed));
			format_msg(why, whylen, "'%s' is not one of %s", text, allowed);
			rc = ODX_ECONFIG;
		}
		break;
	case KEY_LIST:
		/* The canonical list is never longer than the trimmed text, so parse in place. */
		{
			char *copy = dup_str(c);

			if (!copy) {
				rc = ODX_ENOMEM;
				break;
			}
			rc = parse_list(k, copy, c, why, whylen);
			free(copy);
		}
		break;
	}
	if (rc == 0 && k->check)
		rc = k->check(c, why, whylen);
	if (rc) {
		free(c);
		return rc;
	}
	*out = v;
	*canon = c;
	return 0;
}

/* "auto" asks ODX to pick; combining it with a named backend has no single meaning. */
int odx__config_check_backends(const char *text, char *why, size_t whylen)
{
	const char *p = text;

	if (strcmp(text, "auto") == 0)
		return 0;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == 4 && strncmp(p, "auto", 4) == 0) {
			format_msg(why, whylen, "'auto' cannot be combined with other backends");
			return ODX_ECONFIG;
		}
		if (!end)
			return 0;
		p = end + 1;
	}
}

/* Lua policies are accepted here; whether they can run is the context's decision. */
int odx__config_check_policy(const char *text, char *why, size_t whylen)
{
	static const char *const builtin[] = {"eager", "least_loaded", "round_robin", NULL};
	static const char *const shipped[] = {"eager",	   "round_robin", "locality", "heft",
					      "lru", "lookahead",   NULL};
	size_t len = strlen(text);

	if (word_index(builtin, text, len) >= 0)
		return 0;
	if (strncmp(text, "lua:", 4) == 0 && word_index(shipped, text + 4, len - 4) >= 0)
		return 0;
	if (len > 4 && strcmp(text + len - 4, ".lua") == 0)
		return 0;
	format_msg(why, whylen,
		   "'%s' is not a policy (eager, least_loaded, round_robin, lua:eager, "
		   "lua:round_robin, lua:locality, lua:heft, or a path to a .lua file)",
		   text);
	return ODX_ECONFIG;
}

/*
 * Fault-injection specs are checked where they are given, whether their component is enabled or
 * not, by the parser the component itself uses: a typo in a test's setup is an ODX_ECONFIG at
 * odx_open, never a silently different test (or an ODX_EINVAL from deep inside the component).
 */
static int check_fault(int (*parse)(const char *, char *, size_t), const char *text, char *why,
		       size_t whylen)
{
	char msg[400] = "";
	int rc = parse(text, msg, sizeof(msg));

	if (rc == ODX_ENOMEM)
		return rc;
	if (rc) {
		format_msg(why, whylen, "%s", msg);
		return ODX_ECONFIG;
	}
	return 0;
}

int odx__config_check_disk_fault(const char *text, char *why, size_t whylen)
{
	return check_fault(odx__spill_fault_check, text, why, whylen);
}

int odx__config_check_fabric_fault(const char *text, char *why, size_t whylen)
{
	return check_fault(odx_fab_fault_check, text, why, whylen);
}
