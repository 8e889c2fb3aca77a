/*
 * A small JSON reader for the control channel (json.c): one object per line,
 * parsed by recursive descent to RFC 8259. The top-level members are kept
 * (strings and integers with their values; other kinds by type only, nested
 * values checked and skipped). A duplicate key is refused: there is no
 * sensible "which one wins" for a class change.
 */
#ifndef LEVELLER_SHIM_JSON_H
#define LEVELLER_SHIM_JSON_H

#include <stddef.h>

#define JSON_MAX_FIELDS 16
#define JSON_MAX_KEY 32
#define JSON_MAX_STR 256
#define JSON_MAX_DEPTH 16

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_INT,    /* an integer that fits a long long */
	JSON_NUMBER, /* any other number: fraction, exponent, or out of range */
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json_field {
	char key[JSON_MAX_KEY];
	enum json_type type;
	long long i;		/* JSON_INT; JSON_BOOL: 0/1 */
	char s[JSON_MAX_STR]; /* JSON_STRING, UTF-8, NUL-terminated (no NUL inside) */
};

struct json_object {
	struct json_field f[JSON_MAX_FIELDS];
	int n;
};

/* Parse text (NUL-terminated) as one JSON object with optional whitespace
 * around it. 0, or -1 with err saying what and where (byte offset). */
int json_parse_object(const char *text, struct json_object *out, char *err, size_t errn);
/* The member called key, or NULL. */
const struct json_field *json_get(const struct json_object *o, const char *key);
const char *json_type_name(enum json_type t);

#endif
