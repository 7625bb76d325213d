/* wsp_provide_device: layers read in parts (wsp_pack_read_part, as two
 * processes would), the parts put together in device memory on a stream of
 * the caller's, and the pager fills slots from there.  A pack of exprans
 * bf16 and fp32 chunks (coded low halves among them), zstd chunks (constant
 * norms) and raw ones, several chunks a layer: every acquire finds its
 * layer in a slot, holding exactly the pack's raw layer; nothing is read
 * from the disk by the pager and nothing crosses the host->GPU link for it.
 * Each layer's device buffer is freed on the caller's stream right after
 * the call and the next layer's parts land in the memory it frees, which
 * is right only if the stream waited for the decode.  A layer in a slot
 * is not taken again (0); a wrong length is -EINVAL; a pager that decodes
 * on the host says -ENOTSUP; bytes damaged on the device (the value count
 * of an exprans stream) make the GPU refuse the chunk: the acquires after
 * fail with WSP_ECHECKSUM naming the layer.  Skips (77) without a GPU. */
#include <cuda_runtime_api.h>
#include <math.h>

#include "cuda_check.h"
#include "../codec/codec_test.h"
#include "../codec/float_data.h"

#include "pager_util.h"
#include "pack/pack.h"
#include "pack/writer.h"

#define LAYERS 5u

static void *keep[8 * LAYERS];
static unsigned n_keep;

/* ONES (bf16 1.0 everywhere: a chunk that compresses to almost nothing),
 * else a kind of float_data.h */
#define ONES (LAST_KIND + 1)

static void add(struct pack_writer *pw, const char *name, int dtype, uint64_t n, int kind)
{
	uint64_t es = dtype == WSP_DTYPE_F32 ? 4 : 2;
	uint8_t *buf = malloc(n * es);
	CHECK(buf);
	CHECK(kind != ONES || dtype == WSP_DTYPE_BF16);
	if (kind != ONES)
		fill_values(buf, n, dtype, (enum kind)kind);
	else
		for (uint64_t i = 0; i < n; i++)
			((uint16_t *)buf)[i] = 0x3f80;
	CHECK_RC(pack_writer_add_tensor(pw, name, NULL, dtype, 1, &n, buf, n * es, 0, 0, 0), 0);
	keep[n_keep++] = buf;
}

static void make_pack(const char *dir)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	opt.codec = WSP_CODEC_AUTO;
	opt.chunk_bytes = 128 << 10;
	opt.threads = 2;
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	for (unsigned l = 0; l < LAYERS; l++) {
		char name[96];
		snprintf(name, sizeof(name), "model.layers.%u.input_layernorm.weight", l);
		add(pw, name, WSP_DTYPE_BF16, 4096, ONES);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.up_proj.weight", l);
		add(pw, name, WSP_DTYPE_BF16, 300000 + 17 * l, GAUSS);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.gate_proj.weight", l);
		add(pw, name, WSP_DTYPE_F32, 100001, UPCAST);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.down_proj.weight", l);
		add(pw, name, WSP_DTYPE_F32, 70000, GAUSS);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.bias", l);
		add(pw, name, WSP_DTYPE_BF16, 3, GAUSS);
	}
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);
	while (n_keep)
		free(keep[--n_keep]);
	wspi_err_destroy(&err);
}

/* Layer l's packed form read as `parts` readers would, into host memory. */
static uint8_t *read_parts(wsp_pack *pk, uint32_t l, unsigned parts, uint64_t *len)
{
	struct wsp_part p;
	CHECK_RC(wsp_pack_read_part(pk, l, 0, 1, NULL, 0, &p), 0);
	*len = p.bytes;
	uint8_t *buf = malloc(p.bytes);
	CHECK(buf);
	uint64_t at = 0;
	for (unsigned k = 0; k < parts; k++) {
		CHECK_RC(wsp_pack_read_part(pk, l, k, parts, NULL, 0, &p), 0);
		CHECK(p.offset == at);
		CHECK_RC(wsp_pack_read_part(pk, l, k, parts, buf + p.offset, p.bytes, &p), 0);
		at += p.bytes;
	}
	CHECK(at == *len);
	return buf;
}

/* Where layer l's first exprans chunk starts in its packed form. */
static uint64_t first_exprans(wsp_pack *pk, uint32_t l)
{
	const struct wspi_manifest *m = &((struct wsp_pack_s *)pk)->m;
	const struct wspm_layer *L = &m->layers[l];
	uint64_t at = 0;
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++)
		for (uint64_t k = 0; k < m->tensors[t].n_chunks; k++) {
			const struct wspm_chunk *c = &m->chunks[m->tensors[t].first_chunk + k];
			if (c->codec == WSP_CODEC_EXPRANS)
				return at;
			at = pack_packed_next(at, c);
		}
	CHECK(!"an exprans chunk");
	return 0;
}

/* Layer l's packed form, in device memory allocated on `s`, freed on it
 * right after the call; returns wsp_provide_device's result.  damage: the
 * first exprans stream's value count changed. */
static int provide(wsp_pager *pg, wsp_pack *pk, uint32_t l, cudaStream_t s, int damage)
{
	uint64_t len;
	uint8_t *host = read_parts(pk, l, 2, &len);
	if (damage)
		host[first_exprans(pk, l)] ^= 0x01;
	void *dev;
	CU(cudaMallocAsync(&dev, len, s));
	CU(cudaMemcpyAsync(dev, host, len, cudaMemcpyHostToDevice, s));
	CU(cudaStreamSynchronize(s));   /* the host buffer may go */
	free(host);
	int rc = wsp_provide_device(pg, l, dev, len, s);
	CU(cudaFreeAsync(dev, s));
	return rc;
}

static void check_layer(wsp_pager *pg, wsp_pack *pk, uint32_t l, cudaStream_t s)
{
	const struct wsp_layer *L;
	CHECK_RC(wsp_acquire(pg, l, s, &L), 0);
	CHECK(t_slot_matches(L, pk, l, s));
	CHECK_RC(wsp_release(pg, l, s), 0);
}

int main(void)
{
	t_need_gpu();
	const char *root = t_scratch("cuda-provide-device");
	char pack[600], err[512];
	snprintf(pack, sizeof(pack), "%s/pack", root);
	make_pack(pack);
	wsp_pack *pk;
	CHECK_RC(wsp_pack_open(pack, &pk, err, sizeof(err)), 0);
	struct wsp_pack_s *p = (struct wsp_pack_s *)pk;
	uint64_t kinds[3] = { 0 };
	for (uint64_t i = 0; i < p->m.hdr->n_chunks; i++)
		kinds[p->m.chunks[i].codec]++;
	printf("%llu zstd, %llu raw, %llu exprans chunks in %u layers\n",
	       (unsigned long long)kinds[0], (unsigned long long)kinds[1],
	       (unsigned long long)kinds[2], LAYERS);
	CHECK(kinds[0] >= LAYERS && kinds[2] >= 3 * LAYERS);

	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	struct wsp_options o;
	wsp_pager *pg;
	wsp_options_init(&o);
	o.gpu_slots = 3;
	o.host_cache_bytes = 64 << 20;
	o.flags = WSP_OPEN_NO_PREFETCH;
	o.policy = WSP_POLICY_LRU;   /* which slot a fill takes is then known */
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_provide_device(pg, 0, NULL, 0, NULL), 1);   /* asked only */
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			/* two ahead, as a feed would: the third slot is the one in use */
			if (l == 0)
				CHECK_RC(provide(pg, pk, 0, s, 0), 1);
			if (l + 1 < LAYERS)
				CHECK_RC(provide(pg, pk, l + 1, s, 0), 1);
			check_layer(pg, pk, l, s);
		}
	CHECK_RC(provide(pg, pk, LAYERS - 1, s, 0), 0);   /* in a slot still */
	void *one;
	CU(cudaMalloc(&one, 16));
	CHECK_RC(wsp_provide_device(pg, 1, one, 16, s), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "packed form has") != NULL);
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("2 passes: %llu acquires, %llu found in a slot; %llu bytes read from the disk, "
	       "%llu over the link\n", (unsigned long long)st.acquires,
	       (unsigned long long)st.gpu_hits, (unsigned long long)st.bytes_read,
	       (unsigned long long)st.bytes_h2d);
	CHECK(st.acquires == 2 * LAYERS && st.gpu_hits == st.acquires);
	CHECK(st.bytes_read == 0 && st.bytes_h2d == 0);

	/* Damaged on the device: refused by the GPU, reported by the acquires
	 * once the pager has seen the fill end (layer 0 is in no slot now). */
	CHECK_RC(provide(pg, pk, 0, s, 1), 1);
	CU(cudaStreamSynchronize(s));   /* which waited for the decode */
	const struct wsp_layer *L;
	int rc = 0;
	for (int i = 0; i < 4 && rc == 0; i++) {
		rc = wsp_acquire(pg, 0, s, &L);
		if (rc == 0)
			CHECK_RC(wsp_release(pg, 0, s), 0);
		CU(cudaStreamSynchronize(s));
	}
	printf("after damaged bytes: %d: %s\n", rc, wsp_errmsg(pg));
	CHECK_RC(rc, WSP_ECHECKSUM);
	CHECK(strstr(wsp_errmsg(pg), "GPU decode of layer model.layers.0") != NULL);
	wsp_close(pg);

	/* Decoding on the host: nothing to fill from device memory. */
	o.flags |= WSP_OPEN_HOST_DECODE;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_provide_device(pg, 0, one, 16, s), -ENOTSUP);
	wsp_close(pg);
	CU(cudaFree(one));
	CU(cudaStreamDestroy(s));
	wsp_pack_close(pk);
	t_rmrf(root);
	return 0;
}
