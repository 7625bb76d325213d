/*
 * wsp_escape_text: untrusted text (tensor and layer names, file names, lines
 * of an order file) made safe to print on a terminal.  Control bytes, DEL,
 * bytes that are not valid UTF-8, C1 controls and the invisible format
 * characters that reorder or hide text (bidi overrides and isolates,
 * zero-width characters, the BOM) become \xNN, one per byte; everything else,
 * non-ASCII names included, is kept as it is.
 */
#include <stdint.h>
#include <string.h>

#include "wspager.h"

/* Length of the valid UTF-8 sequence at s (1..4), 0 when invalid. */
static unsigned utf8_len(const unsigned char *s, uint32_t *cp)
{
	unsigned n;
	uint32_t c;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		c = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		c = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		c = s[0] & 0x07;
	} else {
		return 0;
	}
	for (unsigned i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)   /* also stops at the terminating NUL */
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;   /* overlong, out of range, surrogate */
	*cp = c;
	return n;
}

static int hidden(uint32_t c)
{
	return c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == 0x61c ||
	       (c >= 0x200b && c <= 0x200f) || (c >= 0x202a && c <= 0x202e) ||
	       (c >= 0x2060 && c <= 0x2069) || c == 0xfeff;
}

char *wsp_escape_text(const char *text, char *buf, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)(text ? text : "");
	size_t o = 0;

	if (!buf || !len)
		return buf;
	while (*s) {
		uint32_t cp = 0;
		unsigned n = utf8_len(s, &cp);
		int esc = n == 0 || hidden(cp);
		if (n == 0)
			n = 1;
		if (o + (esc ? 4 * n : n) >= len)
			break;   /* never cut an escape or a character in half */
		for (unsigned i = 0; i < n; i++, s++) {
			if (esc) {
				buf[o++] = '\\';
				buf[o++] = 'x';
				buf[o++] = hex[*s >> 4];
				buf[o++] = hex[*s & 15];
			} else {
				buf[o++] = (char)*s;
			}
		}
	}
	buf[o] = '\0';
	return buf;
}
