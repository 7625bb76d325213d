/*
 * Grouping tensors into layers (the unit of paging) by their names.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
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

/* "layers" (Llama, Mistral, Qwen, Whisper), "h" (GPT-2, NeoX's "layers"),
 * "blocks" (ViT-like), "block" (T5), "layer" (BERT, ViT); diffusers'
 * UNets page a resnet, attention or resampler at a time ("resnets",
 * "attentions", "downsamplers", "upsamplers", inside down/mid/up blocks)
 * and DiTs a transformer block ("transformer_blocks", Flux's
 * "single_transformer_blocks"). */
static int is_block_word(const char *s, size_t n)
{
	static const char *const words[] = {
		"layers", "h", "blocks", "block", "layer", "resnets", "attentions",
		"downsamplers", "upsamplers", "transformer_blocks", "single_transformer_blocks",
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strlen(words[i]) == n && !memcmp(s, words[i], n))
			return 1;
	return 0;
}

/* In `name` from `comp` on, the end of the first "<word>.<digits>" followed
 * by a dot, with <word> a whole component accepted by `is_word`; NULL if
 * there is none. */
static const char *numbered(const char *comp, int (*is_word)(const char *, size_t))
{
	for (;;) {
		const char *dot = strchr(comp, '.');
		if (!dot)
			return NULL;
		const char *num = dot + 1, *num_end = strchr(num, '.');
		if (is_word(comp, (size_t)(dot - comp)) && num_end &&
		    is_number(num, (size_t)(num_end - num)))
			return num_end;
		comp = dot + 1;
	}
}

static int is_experts_word(const char *s, size_t n)
{
	return n == 7 && !memcmp(s, "experts", 7);
}

/* Length of the built-in group name (a prefix of `name`). */
static size_t builtin_group(const char *name)
{
	/* "<prefix>.<block word>.<N>.", and inside such a block a routed
	 * expert "experts.<E>." is a group of its own (only the routed ones
	 * are read); "shared_experts", the router and attention stay with the
	 * block. */
	const char *end = numbered(name, is_block_word);
	if (end) {
		const char *expert = numbered(end + 1, is_experts_word);
		return (size_t)((expert ? expert : end) - name);
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

size_t pack_group_block(const char *group)
{
	size_t n = strlen(group), e = n;

	/* "<block>.experts.<E>" -> "<block>" */
	while (e > 0 && isdigit((unsigned char)group[e - 1]))
		e--;
	if (e == n || e < 9 || strncmp(group + e - 9, ".experts.", 9))
		return n;
	const char *end = numbered(group, is_block_word);
	return end && (size_t)(end - group) <= e - 9 ? (size_t)(end - group) : n;
}

static int cmp_map_tensor(const void *a, const void *b)
{
	return strcmp(((const struct group_map_entry *)a)->tensor,
		      ((const struct group_map_entry *)b)->tensor);
}

static int cmp_map_layer(const void *a, const void *b)
{
	const struct group_map_entry *x = a, *y = b;
	int c = strcmp(x->layer, y->layer);
	return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

int pack_group_map_build(const char *const *pairs, struct group_map_entry **out, uint32_t *n_out,
			 struct wspi_err *err)
{
	struct group_map_entry *m;
	uint32_t n = 0;

	*out = NULL;
	*n_out = 0;
	while (pairs[2 * (size_t)n]) {
		if (!pairs[2 * (size_t)n + 1])
			return WSP_ERR(err, -EINVAL, "group_map: tensor %s has no layer (the list "
				       "holds pairs and ends with NULL)", pairs[2 * (size_t)n]);
		if (++n > (1u << 24))
			return WSP_ERR(err, WSP_ETOOBIG, "group_map: more than 2^24 pairs");
	}
	m = calloc(n ? n : 1, sizeof(*m));
	if (!m)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		m[i] = (struct group_map_entry){ pairs[2 * i], pairs[2 * i + 1], i, i };
		if (!*m[i].tensor || !*m[i].layer) {
			free(m);
			return WSP_ERR(err, -EINVAL, "group_map: pair %u has an empty name", i);
		}
	}
	/* A layer's rank is the position of its first pair: pack order. */
	qsort(m, n, sizeof(*m), cmp_map_layer);
	for (uint32_t i = 1; i < n; i++)
		if (!strcmp(m[i].layer, m[i - 1].layer))
			m[i].rank = m[i - 1].rank;
	qsort(m, n, sizeof(*m), cmp_map_tensor);
	for (uint32_t i = 1; i < n; i++)
		if (!strcmp(m[i].tensor, m[i - 1].tensor)) {
			int rc = WSP_ERR(err, -EINVAL, "group_map: tensor %s is mapped twice",
					 m[i].tensor);
			free(m);
			return rc;
		}
	*out = m;
	*n_out = n;
	return 0;
}

const struct group_map_entry *pack_group_map_find(const struct group_map_entry *m, uint32_t n,
						  const char *tensor)
{
	struct group_map_entry key = { tensor, NULL, 0, 0 };
	return n ? bsearch(&key, m, n, sizeof(*m), cmp_map_tensor) : NULL;
}

int pack_group_compile(const char *regex, regex_t *re, struct wspi_err *err)
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
