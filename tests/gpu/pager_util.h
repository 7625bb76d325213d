/* Shared by the gpu-area tests: a small synthetic model converted into a
 * pack inside a scratch directory, through the public API only. */
#ifndef WSP_TESTS_GPU_PAGER_UTIL_H
#define WSP_TESTS_GPU_PAGER_UTIL_H

#include <stdio.h>
#include "../lib/testlib.h"
#include "wspager.h"

struct t_model {
	char dir[512];
	char pack[600];
	struct wsp_pack_summary sum;
};

/* Build the pack: with hidden 256 and
 * intermediate 512 a block is about 1.1 MiB of bf16; the embedding has
 * `vocab` rows. */
static inline void t_model_make_shape(struct t_model *m, const char *tag, unsigned layers,
				      unsigned hidden, unsigned intermediate, unsigned vocab,
				      enum wsp_dtype dtype)
{
	char model[600], err[512];
	struct wsp_generate_options g;
	struct wsp_convert_options c;
	wsp_pack *pk;

	snprintf(m->dir, sizeof(m->dir), "%s", t_scratch(tag));
	snprintf(model, sizeof(model), "%s/model.safetensors", m->dir);
	snprintf(m->pack, sizeof(m->pack), "%s/pack", m->dir);
	wsp_generate_options_init(&g);
	g.layers = layers;
	g.hidden = hidden;
	g.intermediate = intermediate;
	g.vocab = vocab;
	g.dtype = dtype;
	int rc = wsp_generate(model, &g, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_generate: %s\n", err);
		exit(1);
	}
	wsp_convert_options_init(&c);
	c.chunk_bytes = 128 << 10;
	c.threads = 2;
	const char *in[] = { model };
	rc = wsp_convert(in, 1, m->pack, &c, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_convert: %s\n", err);
		exit(1);
	}
	rc = wsp_pack_open(m->pack, &pk, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_pack_open: %s\n", err);
		exit(1);
	}
	wsp_pack_summary(pk, &m->sum);
	wsp_pack_close(pk);
}

static inline void t_model_make_dtype(struct t_model *m, const char *tag, unsigned layers,
				      unsigned hidden, unsigned intermediate, enum wsp_dtype dtype)
{
	t_model_make_shape(m, tag, layers, hidden, intermediate, 512, dtype);
}

/* A generated bf16 model, converted (see t_model_make_shape). */
static inline void t_model_make(struct t_model *m, const char *tag, unsigned layers,
				unsigned hidden, unsigned intermediate)
{
	t_model_make_dtype(m, tag, layers, hidden, intermediate, WSP_DTYPE_BF16);
}

static inline void t_model_remove(struct t_model *m)
{
	t_rmrf(m->dir);
}

/* Options for the host device with a host tier of `frac_percent` of the
 * model (at least the largest layer twice). */
static inline void t_host_options(struct wsp_options *o, const struct t_model *m,
				  unsigned frac_percent, unsigned slots)
{
	wsp_options_init(o);
	o->device = WSP_DEVICE_HOST;
	o->gpu_slots = slots;
	o->page_bytes = 64 << 10;
	o->decode_threads = 2;
	o->io_threads = 2;
	uint64_t b = m->sum.raw_bytes * frac_percent / 100;
	if (b < 2 * m->sum.max_layer_raw_bytes + (1 << 20))
		b = 2 * m->sum.max_layer_raw_bytes + (1 << 20);
	o->host_cache_bytes = b;
}

/* A pager of m on GPU 0 (the host tier holding the whole model, two
 * slots), and its pack: the CUDA gradient tests' start. */
static inline void t_gpu_open(const struct t_model *m, wsp_pager **pg, wsp_pack **pk)
{
	struct wsp_options o;
	char err[512];
	t_host_options(&o, m, 100, 2);
	o.device = 0;
	CHECK_RC(wsp_open(m->pack, &o, pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_open(m->pack, pk, err, sizeof(err)), 0);
}

/* wsp_update of layer l with every byte of its first tensor flipped; the
 * new bytes are returned (free them) and their count put in *bytes. */
static inline uint8_t *t_update_flipped(wsp_pager *pg, uint32_t l, uint64_t *bytes)
{
	const struct wsp_layer *L;
	CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
	uint64_t n = L->tensors[0].bytes;
	uint8_t *v = (uint8_t *)malloc(n ? n : 1);   /* C++ too: the .cu tests include this */
	CHECK(v);
	memcpy(v, L->tensors[0].data, n);
	CHECK_RC(wsp_release(pg, l, NULL), 0);
	for (uint64_t i = 0; i < n; i++)
		v[i] ^= 0xff;
	const void *vals[64] = { v };
	CHECK_RC(wsp_update(pg, l, vals), 0);
	*bytes = n;
	return v;
}

/* Number of tensors of a view whose bytes do not match the stored checksum. */
static inline unsigned t_view_bad(const struct wsp_layer *L)
{
	unsigned bad = 0;
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		const struct wsp_tensor *T = &L->tensors[t];
		if (wsp_checksum64(T->data, T->bytes) != T->checksum) {
			fprintf(stderr, "%s: checksum mismatch\n", T->name);
			bad++;
		}
	}
	return bad;
}

/* Acquire layer l, check its view (its index, every tensor's checksum) and
 * release it: one use of a layer, as a forward makes. */
static inline void t_use_layer(wsp_pager *pg, uint32_t l)
{
	const struct wsp_layer *L;
	CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
	CHECK(L->index == l && t_view_bad(L) == 0);
	CHECK_RC(wsp_release_view(pg, L, NULL), 0);
}

#endif
