/*
 * The pack layout: which tensors form which layer, the order of layers, the
 * position of each tensor in its layer's decoded image, and the chunk plan.
 *
 * Layer order, the way a forward pass runs: the layers that group_map names
 * first, in the order of their first pair there (the caller knows the
 * execution order); then the embeddings and input stems of no part; then
 * the encoder's groups, the neutral ones, the decoder's (by
 * "encoder"/"decoder" in the name), each part with its embeddings and stems
 * first (Whisper's convolutions, a decoder's token embedding), its numbered
 * blocks next in numeric order (2 before 10, blocks of one prefix together,
 * each followed by its routed experts in expert order) and its other groups
 * after them in order of first appearance; output heads (lm_head,
 * classifier, ...) last.  A UNet's blocks run down, mid, up, and inside
 * each a resnet, then its attention, then the next pair, then the
 * resampler.  Checkpoints list names sorted, so the order of appearance
 * alone would put "decoder" before "encoder", "lm_head" before the final
 * norm and a UNet's attentions before its resnets.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pack/writer_int.h"

struct layer_key {
	uint32_t layer;            /* index into the unsorted layer array */
	uint32_t rank;             /* position in group_map, UINT32_MAX if not there */
	int part;                  /* 0 embeddings, 1 encoder, 2 neutral, 3 decoder, 4 heads */
	int cls;                   /* 0 embed, 1 numbered block, 2 other */
	size_t prefix_len;         /* numbered: length of the name before ".N" */
	uint64_t num;
	uint64_t expert;           /* "<block>.experts.E": E + 1; the block itself: 0 */
	int stage;                 /* UNet: 0 down, 1 mid, 2 up; -1 otherwise */
	uint64_t stage_pos;        /* UNet: its place in the stage */
	uint32_t first;            /* first appearance (declaration index) */
	uint32_t prefix_first;     /* numbered: first appearance of the prefix */
	const char *name;
};

static int cmp_name(const void *a, const void *b, void *ctx)
{
	const struct pw_tensor *t = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = strcmp(t[x].name, t[y].name);
	return c ? c : (x > y) - (x < y);
}

/* By group; inside a group, the tensors group_map names in its order (a
 * caller may need two tensors adjacent), then the others as declared. */
static int cmp_group(const void *a, const void *b, void *ctx)
{
	const struct pw_tensor *t = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = strcmp(t[x].group, t[y].group);
	if (c)
		return c;
	if (t[x].map_pos != t[y].map_pos)
		return t[x].map_pos < t[y].map_pos ? -1 : 1;
	return (x > y) - (x < y);
}

static int cmp_prefix(const void *a, const void *b)
{
	const struct layer_key *x = a, *y = b;
	if (x->part != y->part)
		return x->part - y->part;
	if (x->cls != y->cls)
		return x->cls - y->cls;
	size_t n = WSP_MIN(x->prefix_len, y->prefix_len);
	int c = memcmp(x->name, y->name, n);
	if (c)
		return c;
	if (x->prefix_len != y->prefix_len)
		return x->prefix_len < y->prefix_len ? -1 : 1;
	return (x->first > y->first) - (x->first < y->first);
}

static int cmp_order(const void *a, const void *b)
{
	const struct layer_key *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->part != y->part)
		return x->part - y->part;
	if (x->cls != y->cls)
		return x->cls - y->cls;
	if (x->cls == 1) {
		if (x->stage >= 0 && y->stage >= 0) {
			if (x->stage != y->stage)
				return x->stage - y->stage;
			if (x->stage_pos != y->stage_pos)
				return x->stage_pos < y->stage_pos ? -1 : 1;
		}
		if (x->prefix_first != y->prefix_first)
			return x->prefix_first < y->prefix_first ? -1 : 1;
		if (x->num != y->num)
			return x->num < y->num ? -1 : 1;
		if (x->expert != y->expert)
			return x->expert < y->expert ? -1 : 1;
	}
	return (x->first > y->first) - (x->first < y->first);
}

static int last_is(const char *name, const char *const *words)
{
	const char *dot = strrchr(name, '.');
	const char *last = dot ? dot + 1 : name;
	for (; *words; words++)
		if (!strcmp(last, *words))
			return 1;
	return 0;
}

/* Token and position embeddings by their usual names (GPT-2's wte/wpe,
 * T5's shared, BERT's embeddings), and the input stems that run before the
 * blocks (a UNet's conv_in, Whisper's two convolutions). */
static int is_embedding(const char *name)
{
	static const char *const words[] = { "wte", "wpe", "shared", "embeddings",
					     "word_embeddings", "position_embeddings",
					     "conv_in", "conv1", "conv2", NULL };
	return strstr(name, "embed") != NULL || last_is(name, words);
}

/* A UNet block's place: "<...>down_blocks.I.<kind>.J", "mid_block.<kind>.J"
 * or "up_blocks.I.<kind>.J", with kind resnets (2J), attentions (2J + 1)
 * or a resampler (after them). */
static void unet_place(struct layer_key *k)
{
	static const char *const stages[] = { "down_blocks.", "mid_block.", "up_blocks." };
	k->stage = -1;
	for (int s = 0; s < 3; s++) {
		const char *p = strstr(k->name, stages[s]);
		if (!p)
			continue;
		p += strlen(stages[s]);
		char *end;
		uint64_t outer = 0;
		if (s != 1) {
			outer = strtoull(p, &end, 10);
			if (end == p || *end != '.')
				return;
			p = end + 1;
		}
		const char *dot = strchr(p, '.');
		if (!dot)
			return;
		uint64_t j = strtoull(dot + 1, &end, 10);
		if (end == dot + 1 || *end || j > 1000 || outer > 1000)
			return;
		size_t kind = (size_t)(dot - p);
		uint64_t pos = !strncmp(p, "resnets", kind) && kind == 7 ? 2 * j
			       : !strncmp(p, "attentions", kind) && kind == 10 ? 2 * j + 1
			       : 4096 + j;   /* downsamplers, upsamplers */
		k->stage = s;
		k->stage_pos = outer * 8192 + pos;
		return;
	}
}

/* Output heads, used last. */
static int is_head(const char *name)
{
	static const char *const words[] = { "lm_head", "classifier", "head", "score",
					     "qa_outputs", "proj_out", "pooler", NULL };
	return last_is(name, words);
}

/* Classify a group name: numbered when its last component is a number; a
 * routed expert's group by its block, after it. */
static void classify(struct layer_key *k)
{
	size_t block = pack_group_block(k->name), n;
	const char *dot = NULL, *num;

	if (block < strlen(k->name)) {
		k->expert = strtoull(strrchr(k->name, '.') + 1, NULL, 10) + 1;
		for (size_t i = block; i > 0 && !dot; i--)
			if (k->name[i - 1] == '.')
				dot = k->name + i - 1;
		num = dot ? dot + 1 : k->name;
		n = (size_t)(k->name + block - num);
	} else {
		dot = strrchr(k->name, '.');
		num = dot ? dot + 1 : k->name;
		n = strlen(num);
	}

	k->cls = 2;
	k->part = strstr(k->name, "encoder") ? 1 : strstr(k->name, "decoder") ? 3 : 2;
	unet_place(k);
	if (is_embedding(k->name)) {
		k->cls = 0;
		if (k->part == 2)
			k->part = 0;
		return;
	}
	if (is_head(k->name)) {
		k->part = 4;
		return;
	}
	if (n == 0 || n > 18 || strspn(num, "0123456789") < n)
		return;
	k->cls = 1;
	k->num = strtoull(num, NULL, 10);
	k->prefix_len = dot ? (size_t)(dot - k->name) : 0;
}

static int cmp_key_name(const void *a, const void *b)
{
	return strcmp(((const struct layer_key *)a)->name, ((const struct layer_key *)b)->name);
}

/* opt.layer_order: the layers it names first, in its order, then those of
 * group_map (their ranks moved after).  A name no layer has is refused. */
static int apply_layer_order(struct pack_writer *pw, struct layer_key *keys, uint32_t n)
{
	uint32_t m = pw->n_layer_order;
	if (!m)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (keys[i].rank != UINT32_MAX)
			keys[i].rank = keys[i].rank > UINT32_MAX - 1 - m ? UINT32_MAX - 1 : keys[i].rank + m;
	qsort(keys, n, sizeof(*keys), cmp_key_name);
	for (uint32_t p = 0; p < m; p++) {
		struct layer_key probe = { .name = pw->layer_order[p] };
		struct layer_key *k = bsearch(&probe, keys, n, sizeof(*keys), cmp_key_name);
		if (!k)
			return WSP_ERR(pw->err, WSP_ENOTFOUND, "layer_order: no layer named \"%s\" "
				       "(names are layers after grouping, as wspack info --layers "
				       "lists them)", pw->layer_order[p]);
		if (k->rank >= m)   /* a name given twice keeps its first place */
			k->rank = p;
	}
	return 0;
}

static int order_layers(struct pack_writer *pw, struct pw_layer *layers, uint32_t n)
{
	struct layer_key *keys = calloc(n ? n : 1, sizeof(*keys));
	uint32_t i, j;

	if (!keys)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		keys[i].layer = i;
		keys[i].name = layers[i].name;
		keys[i].first = pw->order[layers[i].first_tensor];
		keys[i].rank = UINT32_MAX;
		for (uint32_t k = 0; k < layers[i].n_tensors; k++)
			keys[i].rank = WSP_MIN(keys[i].rank,
					       pw->tensors[pw->order[layers[i].first_tensor + k]].map_rank);
		classify(&keys[i]);
	}
	int rc = apply_layer_order(pw, keys, n);
	if (rc < 0) {
		free(keys);
		return rc;
	}
	/* Numbered blocks sharing a prefix ("encoder.layers") go together,
	 * prefixes in order of first appearance (within their part). */
	qsort(keys, n, sizeof(*keys), cmp_prefix);
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && keys[j].cls == 1 && keys[i].cls == 1 &&
				keys[j].prefix_len == keys[i].prefix_len &&
				!memcmp(keys[j].name, keys[i].name, keys[i].prefix_len);
		     j++)
			;
		for (uint32_t k = i; k < j; k++)
			keys[k].prefix_first = keys[i].first;   /* run sorted by first */
	}
	qsort(keys, n, sizeof(*keys), cmp_order);

	struct pw_layer *sorted = malloc((n ? n : 1) * sizeof(*sorted));
	if (!sorted) {
		free(keys);
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	}
	for (i = 0; i < n; i++)
		sorted[i] = layers[keys[i].layer];
	free(keys);
	memcpy(layers, sorted, n * sizeof(*sorted));
	free(sorted);
	return 0;
}

int pw_layout(struct pack_writer *pw)
{
	uint32_t n = pw->n_tensors, *by = NULL, i, j, n_layers = 0;
	uint64_t chunk = pw->opt.chunk_bytes, n_chunks = 0;
	struct pw_layer *layers = NULL;
	uint32_t *order = NULL;

	by = malloc((n ? n : 1) * sizeof(*by));
	order = malloc((n ? n : 1) * sizeof(*order));
	if (!by || !order)
		goto nomem;
	for (i = 0; i < n; i++)
		by[i] = i;
	qsort_r(by, n, sizeof(*by), cmp_name, pw->tensors);
	for (i = 1; i < n; i++)
		if (!strcmp(pw->tensors[by[i]].name, pw->tensors[by[i - 1]].name)) {
			WSP_ERR(pw->err, WSP_EFORMAT, "tensor %s is declared twice",
				pw->tensors[by[i]].name);
			free(by);
			free(order);
			return WSP_EFORMAT;
		}

	/* Groups: sorted by name, members in map then declaration order. */
	qsort_r(by, n, sizeof(*by), cmp_group, pw->tensors);
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && !strcmp(pw->tensors[by[j]].group, pw->tensors[by[i]].group); j++)
			;
		n_layers++;
	}
	layers = calloc(n_layers ? n_layers : 1, sizeof(*layers));
	if (!layers)
		goto nomem;
	n_layers = 0;
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && !strcmp(pw->tensors[by[j]].group, pw->tensors[by[i]].group); j++)
			;
		layers[n_layers].name = pw->tensors[by[i]].group;
		layers[n_layers].first_tensor = i;   /* into `by` for now */
		layers[n_layers].n_tensors = j - i;
		n_layers++;
	}
	memcpy(order, by, n * sizeof(*order));
	pw->order = order;
	order = NULL;
	int rc = order_layers(pw, layers, n_layers);
	if (rc < 0) {
		free(by);
		free(layers);
		return rc;
	}

	/* Pack order of tensors, decoded positions, chunk counts. */
	uint32_t pos = 0;
	for (uint32_t l = 0; l < n_layers; l++) {
		struct pw_layer *L = &layers[l];
		uint64_t raw = 0;
		for (uint32_t k = 0; k < L->n_tensors; k++)
			by[pos + k] = pw->order[L->first_tensor + k];
		L->first_tensor = pos;
		L->first_chunk = n_chunks;
		for (uint32_t k = 0; k < L->n_tensors; k++) {
			struct pw_tensor *t = &pw->tensors[by[pos + k]];
			uint64_t off = wspi_align_up(raw, WSP_ALIGN_TENSOR);
			if (ckd_add(&raw, off, t->bytes) || raw > UINT64_MAX / 2)
				goto toobig;
			t->layer = l;
			t->layer_offset = off;
			t->first_chunk = n_chunks;
			t->n_chunks = t->bytes / chunk + (t->bytes % chunk != 0);
			n_chunks += t->n_chunks;
			L->raw_chunk_bytes += t->bytes;
		}
		L->raw_bytes = wspi_align_up(raw, WSP_ALIGN_TENSOR);
		L->n_chunks = n_chunks - L->first_chunk;
		pos += L->n_tensors;
	}
	free(pw->order);
	pw->order = by;
	by = NULL;
	pw->layers = layers;
	pw->n_layers = n_layers;
	layers = NULL;

	if (n_chunks > (WSPM_MAX_FILE / sizeof(struct wspm_chunk)))
		return WSP_ERR(pw->err, WSP_ETOOBIG, "%llu chunks do not fit in a manifest",
			       (unsigned long long)n_chunks);
	pw->n_chunks = n_chunks;
	pw->chunks = calloc(n_chunks ? n_chunks : 1, sizeof(*pw->chunks));
	pw->chunk_tensor = malloc((n_chunks ? n_chunks : 1) * sizeof(*pw->chunk_tensor));
	if (!pw->chunks || !pw->chunk_tensor)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory for %llu chunk entries",
			       (unsigned long long)n_chunks);
	for (i = 0; i < n; i++) {
		const struct pw_tensor *t = &pw->tensors[pw->order[i]];
		for (uint64_t k = 0; k < t->n_chunks; k++) {
			uint64_t left = t->bytes - k * chunk;
			pw->chunks[t->first_chunk + k].raw_bytes = (uint32_t)WSP_MIN(left, chunk);
			pw->chunk_tensor[t->first_chunk + k] = pw->order[i];
		}
	}
	return 0;

toobig:
	free(by);
	free(order);
	free(layers);
	return WSP_ERR(pw->err, WSP_ETOOBIG, "a layer's decoded size overflows");
nomem:
	free(by);
	free(order);
	free(layers);
	return WSP_ERR(pw->err, -ENOMEM, "out of memory");
}
