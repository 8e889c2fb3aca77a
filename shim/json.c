/*
 * Recursive-descent JSON reader for the control channel (see json.h).
 * Grammar: RFC 8259. Limits: JSON_MAX_FIELDS top-level members, keys under
 * JSON_MAX_KEY bytes, strings under JSON_MAX_STR bytes (nested strings are
 * checked, not kept, so they have no limit), nesting JSON_MAX_DEPTH.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "json.h"

struct parser {
	const char *s, *p;
	char *err;
	size_t errn;
	int failed;
};

static int fail(struct parser *ps, const char *fmt, ...)
{
	if (!ps->failed) {
		char what[160];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(what, sizeof(what), fmt, ap);
		va_end(ap);
		snprintf(ps->err, ps->errn, "%s at byte %ld", what, (long)(ps->p - ps->s));
		ps->failed = 1;
	}
	return -1;
}

static void skip_ws(struct parser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
		ps->p++;
}

static int hex4(struct parser *ps, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = ps->p[i];
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
						    : 16u;
		if (d == 16)
			return fail(ps, "bad \\u escape");
		v = v * 16 + d;
	}
	ps->p += 4;
	*out = v;
	return 0;
}

/* Append code point cp as UTF-8 to out (cap bytes incl. NUL; out NULL: only check). */
static int put_utf8(struct parser *ps, char *out, size_t cap, size_t *len, unsigned cp)
{
	char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xC0 | (cp >> 6));
		b[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xE0 | (cp >> 12));
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		b[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		b[0] = (char)(0xF0 | (cp >> 18));
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		b[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	if (out) {
		if (cp == 0)
			return fail(ps, "\\u0000 in a string");
		if (*len + n >= cap)
			return fail(ps, "string longer than %zu bytes", cap - 1);
		memcpy(out + *len, b, n);
	}
	*len += n;
	return 0;
}

/* A string at ps->p (the opening quote); its text into out when out != NULL. */
static int parse_string(struct parser *ps, char *out, size_t cap)
{
	size_t len = 0;
	ps->p++;
	for (;;) {
		unsigned char c = (unsigned char)*ps->p;
		if (c == '"') {
			ps->p++;
			break;
		}
		if (c == 0)
			return fail(ps, "unterminated string");
		if (c < 0x20)
			return fail(ps, "control character 0x%02x in a string", c);
		if (c != '\\') {
			if (out) {
				if (len + 1 >= cap)
					return fail(ps, "string longer than %zu bytes", cap - 1);
				out[len] = (char)c;
			}
			len++;
			ps->p++;
			continue;
		}
		ps->p++;
		char e = *ps->p++;
		unsigned cp;
		switch (e) {
		case '"': cp = '"'; break;
		case '\\': cp = '\\'; break;
		case '/': cp = '/'; break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if (hex4(ps, &cp))
				return -1;
			if (cp >= 0xDC00 && cp <= 0xDFFF)
				return fail(ps, "lone low surrogate \\u%04x", cp);
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				unsigned lo;
				if (ps->p[0] != '\\' || ps->p[1] != 'u')
					return fail(ps, "high surrogate \\u%04x without its low half", cp);
				ps->p += 2;
				if (hex4(ps, &lo))
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return fail(ps, "high surrogate \\u%04x without its low half", cp);
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			break;
		default:
			ps->p--;
			return fail(ps, "bad escape \\%c", e ? e : '0');
		}
		if (put_utf8(ps, out, cap, &len, cp))
			return -1;
	}
	if (out)
		out[len] = 0;
	return 0;
}

/* A number: JSON_INT when it is an integer that fits, else JSON_NUMBER. */
static int parse_number(struct parser *ps, struct json_field *f)
{
	int neg = *ps->p == '-', overflow = 0;
	if (neg)
		ps->p++;
	if (*ps->p < '0' || *ps->p > '9')
		return fail(ps, "bad number");
	unsigned long long mag = 0, limit = neg ? 9223372036854775808ull : 9223372036854775807ull;
	if (*ps->p == '0') {
		ps->p++;
		if (*ps->p >= '0' && *ps->p <= '9')
			return fail(ps, "leading zero in a number");
	} else {
		for (; *ps->p >= '0' && *ps->p <= '9'; ps->p++) {
			unsigned d = (unsigned)(*ps->p - '0');
			if (mag > (limit - d) / 10)
				overflow = 1;
			else
				mag = mag * 10 + d;
		}
	}
	int integer = !overflow;
	if (*ps->p == '.') {
		ps->p++;
		if (*ps->p < '0' || *ps->p > '9')
			return fail(ps, "bad number: digits must follow '.'");
		while (*ps->p >= '0' && *ps->p <= '9')
			ps->p++;
		integer = 0;
	}
	if (*ps->p == 'e' || *ps->p == 'E') {
		ps->p++;
		if (*ps->p == '+' || *ps->p == '-')
			ps->p++;
		if (*ps->p < '0' || *ps->p > '9')
			return fail(ps, "bad number: digits must follow the exponent");
		while (*ps->p >= '0' && *ps->p <= '9')
			ps->p++;
		integer = 0;
	}
	if (f) {
		f->type = integer ? JSON_INT : JSON_NUMBER;
		f->i = integer ? (neg ? (long long)(0 - mag) : (long long)mag) : 0;
	}
	return 0;
}

static int parse_value(struct parser *ps, struct json_field *f, int depth);

/* An object or array at ps->p; members checked and dropped. */
static int skip_container(struct parser *ps, int depth)
{
	char close = *ps->p == '{' ? '}' : ']';
	int object = close == '}';
	if (depth >= JSON_MAX_DEPTH)
		return fail(ps, "nested deeper than %d", JSON_MAX_DEPTH);
	ps->p++;
	skip_ws(ps);
	if (*ps->p == close) {
		ps->p++;
		return 0;
	}
	for (;;) {
		if (object) {
			if (*ps->p != '"')
				return fail(ps, "expected a string key");
			if (parse_string(ps, NULL, 0))
				return -1;
			skip_ws(ps);
			if (*ps->p != ':')
				return fail(ps, *ps->p ? "expected ':'" : "truncated input: expected ':'");
			ps->p++;
			skip_ws(ps);
		}
		if (parse_value(ps, NULL, depth + 1))
			return -1;
		skip_ws(ps);
		if (*ps->p == ',') {
			ps->p++;
			skip_ws(ps);
			continue;
		}
		if (*ps->p == close) {
			ps->p++;
			return 0;
		}
		return fail(ps, *ps->p ? "expected ',' or '%c'" : "truncated input: expected ',' or '%c'", close);
	}
}

static int literal(struct parser *ps, const char *word)
{
	size_t n = strlen(word);
	if (strncmp(ps->p, word, n) != 0)
		return fail(ps, "unexpected %s", *ps->p ? "character" : "end of input");
	ps->p += n;
	return 0;
}

/* Any value at ps->p; f (may be NULL) gets its type and, for a top-level
 * member, its value. */
static int parse_value(struct parser *ps, struct json_field *f, int depth)
{
	struct json_field dummy;
	if (!f)
		f = &dummy;
	switch (*ps->p) {
	case '"':
		f->type = JSON_STRING;
		return parse_string(ps, f == &dummy ? NULL : f->s, sizeof(f->s));
	case '{':
	case '[':
		f->type = *ps->p == '{' ? JSON_OBJECT : JSON_ARRAY;
		return skip_container(ps, depth);
	case 't':
		f->type = JSON_BOOL;
		f->i = 1;
		return literal(ps, "true");
	case 'f':
		f->type = JSON_BOOL;
		f->i = 0;
		return literal(ps, "false");
	case 'n':
		f->type = JSON_NULL;
		return literal(ps, "null");
	case 0:
		return fail(ps, "truncated input: expected a value");
	default:
		if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
			return parse_number(ps, f);
		return fail(ps, "unexpected character '%c'", *ps->p);
	}
}

int json_parse_object(const char *text, struct json_object *out, char *err, size_t errn)
{
	struct parser ps = {text, text, err, errn, 0};
	out->n = 0;
	skip_ws(&ps);
	if (*ps.p != '{')
		return fail(&ps, "expected a JSON object");
	ps.p++;
	skip_ws(&ps);
	if (*ps.p == '}') {
		ps.p++;
	} else {
		for (;;) {
			if (*ps.p != '"')
				return fail(&ps, *ps.p ? "expected a string key" : "truncated input: expected a key");
			if (out->n == JSON_MAX_FIELDS)
				return fail(&ps, "more than %d fields", JSON_MAX_FIELDS);
			struct json_field *f = &out->f[out->n];
			const char *key_at = ps.p;
			if (parse_string(&ps, f->key, sizeof(f->key)))
				return -1;
			if (json_get(out, f->key)) {
				ps.p = key_at;
				return fail(&ps, "duplicate key '%s'", f->key);
			}
			skip_ws(&ps);
			if (*ps.p != ':')
				return fail(&ps, *ps.p ? "expected ':'" : "truncated input: expected ':'");
			ps.p++;
			skip_ws(&ps);
			if (parse_value(&ps, f, 1))
				return -1;
			out->n++;
			skip_ws(&ps);
			if (*ps.p == ',') {
				ps.p++;
				skip_ws(&ps);
				continue;
			}
			if (*ps.p == '}') {
				ps.p++;
				break;
			}
			return fail(&ps, *ps.p ? "expected ',' or '}'" : "truncated input: expected ',' or '}'");
		}
	}
	skip_ws(&ps);
	if (*ps.p)
		return fail(&ps, "unexpected text after the object");
	return 0;
}

const struct json_field *json_get(const struct json_object *o, const char *key)
{
	for (int i = 0; i < o->n; i++)
		if (strcmp(o->f[i].key, key) == 0)
			return &o->f[i];
	return NULL;
}

const char *json_type_name(enum json_type t)
{
	static const char *names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
	return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}
