/*
 * Grouping tensors into layers (the unit of paging) by their names.
 */
#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "pack/writer.h"

static int is_number(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return 0;
	return 1;
}

static int is_block_word(const char *s, size_t n)
{
	return (n == 6 && !memcmp(s, "layers", 6)) || (n == 1 && s[0] == 'h') ||
	       (n == 6 && !memcmp(s, "blocks", 6));
}

/* Length of the built-in group name (a prefix of `name`). */
static size_t builtin_group(const char *name)
{
	const char *comp = name;

	/* Look for "<word>.<digits>." with <word> a whole component. */
	for (;;) {
		const char *dot = strchr(comp, '.');
		if (!dot)
			break;
		const char *num = dot + 1, *num_end = strchr(num, '.');
		if (is_block_word(comp, (size_t)(dot - comp)) && num_end &&
		    is_number(num, (size_t)(num_end - num)))
			return (size_t)(num_end - name);
		comp = dot + 1;
	}
	const char *last = strrchr(name, '.');
	return last && last != name ? (size_t)(last - name) : strlen(name);
}

int pack_group_name_re(const char *name, const regex_t *re, char *buf, size_t len)
{
	const char *g = name;
	size_t glen = 0;
	regmatch_t mt[2];

	if (re && regexec(re, name, 2, mt, 0) == 0 && mt[1].rm_so >= 0 && mt[1].rm_eo > mt[1].rm_so) {
		g = name + mt[1].rm_so;
		glen = (size_t)(mt[1].rm_eo - mt[1].rm_so);
	} else {
		glen = builtin_group(name);
	}
	if (glen + 1 > len)
		return WSP_ETOOBIG;
	memcpy(buf, g, glen);
	buf[glen] = '\0';
	if (!strncmp(name, buf, glen) && name[glen] == '.' && name[glen + 1])
		return (int)glen + 1;
	return 0;
}

int pack_group_compile(const char *regex, regex_t *re, struct wsp_err *err)
{
	int rc = regcomp(re, regex, REG_EXTENDED);
	if (rc) {
		char msg[256];
		regerror(rc, re, msg, sizeof(msg));
		return WSP_ERR(err, -EINVAL, "group regex \"%s\": %s", regex, msg);
	}
	if (re->re_nsub < 1) {
		regfree(re);
		return WSP_ERR(err, -EINVAL, "group regex \"%s\" has no capture group naming the layer",
			       regex);
	}
	return 0;
}

int pack_group_name(const char *name, const char *regex, char *buf, size_t len)
{
	regex_t re;
	int rc;

	if (!regex)
		return pack_group_name_re(name, NULL, buf, len);
	rc = pack_group_compile(regex, &re, NULL);
	if (rc < 0)
		return rc;
	rc = pack_group_name_re(name, &re, buf, len);
	regfree(&re);
	return rc;
}
