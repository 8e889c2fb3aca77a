/*
 * Test driver for the shim's JSON reader (shim/json.c): reads NUL-separated
 * documents on stdin, prints one JSON line per document:
 *   {"ok": true, "fields": [[key_hex, type, int_or_null, str_hex_or_null], ...]}
 *   {"ok": false, "error": error_hex}
 * (keys and strings in hex, so this driver needs no escaping of its own).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../shim/json.h"

static void hex(const char *s)
{
	putchar('"');
	for (; *s; s++)
		printf("%02x", (unsigned char)*s);
	putchar('"');
}

static void probe(const char *doc)
{
	static struct json_object o;
	char err[200];
	if (json_parse_object(doc, &o, err, sizeof(err))) {
		printf("{\"ok\": false, \"error\": ");
		hex(err);
		printf("}\n");
		return;
	}
	printf("{\"ok\": true, \"fields\": [");
	for (int i = 0; i < o.n; i++) {
		const struct json_field *f = &o.f[i];
		printf("%s[", i ? ", " : "");
		hex(f->key);
		printf(", \"%s\", ", json_type_name(f->type));
		if (f->type == JSON_INT || f->type == JSON_BOOL)
			printf("%lld", f->i);
		else
			printf("null");
		printf(", ");
		if (f->type == JSON_STRING)
			hex(f->s);
		else
			printf("null");
		printf("]");
	}
	printf("]}\n");
}

int main(void)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	int c;
	while (buf && (c = getchar()) != EOF) {
		if (len + 1 >= cap && !(buf = realloc(buf, cap *= 2)))
			break;
		buf[len++] = (char)c;
		if (c == 0) {
			probe(buf);
			len = 0;
		}
	}
	if (!buf)
		return 1;
	free(buf);
	return 0;
}
