/* The GPU decodes packed layers into slots.  A pack with EXPRANS bf16
 * chunks, fp32 upcast from bf16 (EXPRANS with coded low halves), fp32 and
 * odd-sized tensors in every layer: by default
 * the host tier keeps it packed, every slot the pager fills (acquired
 * twice over, two slots, so each acquire fills) holds exactly the pack's
 * raw layer, padding zero, and the link carried the packed bytes (fewer
 * than with WSP_OPEN_HOST_DECODE, which fills the same bytes from raw
 * layers).  With a GPU tier of packed layers the second pass's fills
 * decode from device memory (a tier for the whole model: no byte crosses
 * the link twice; for half of it: some do not).  Host memory changed after the host's check (a lane length of
 * a cached packed chunk) makes the GPU refuse the chunk: the acquires after
 * that fill fail with WSP_ECHECKSUM naming the layer and the chunk.  Skips
 * (77) without a GPU. */
#include <cuda_runtime_api.h>
#include <math.h>

#include "cuda_check.h"
#include "../codec/codec_test.h"
#include "../codec/float_data.h"

#include "pager_util.h"
#include "pack/exprans/exprans_layout.h"
#include "pack/writer.h"
#include "pager/pager.h"

#define LAYERS 6u

/* Tensor data, alive until the writer finishes (it reads it then). */
static void *keep[5 * LAYERS];
static unsigned coded_low;   /* pieces of EXPRANS with coded low halves */
static unsigned n_keep;

/* upcast: fp32 values that are bf16 values widened (low halves zero) */
static void add(struct pack_writer *pw, const char *name, int dtype, uint64_t rows, uint64_t cols,
		int upcast)
{
	uint64_t shape[2] = { rows, cols }, n = rows * cols, es = dtype == WSP_DTYPE_F32 ? 4 : 2;
	uint8_t *buf = malloc(n * es);
	CHECK(buf);
	fill_values(buf, n, dtype, upcast ? UPCAST : GAUSS);
	CHECK_RC(pack_writer_add_tensor(pw, name, NULL, dtype, cols > 1 ? 2 : 1, cols > 1 ? shape : &n,
					buf, n * es, 0, 0, 0), 0);
	keep[n_keep++] = buf;
}

static void make_pack(const char *dir)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	opt.codec = WSP_CODEC_EXPRANS;
	opt.chunk_bytes = 256 << 10;
	opt.threads = 2;
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	for (unsigned l = 0; l < LAYERS; l++) {
		char name[96];
		snprintf(name, sizeof(name), "model.layers.%u.input_layernorm.weight", l);
		add(pw, name, WSP_DTYPE_F32, 512, 1, 0);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.up_proj.weight", l);
		add(pw, name, WSP_DTYPE_BF16, 1024, 512, 0);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.gate_proj.weight", l);
		add(pw, name, WSP_DTYPE_F32, 300, 513, 1);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.down_proj.weight", l);
		add(pw, name, WSP_DTYPE_BF16, 512, 1001, 0);
		snprintf(name, sizeof(name), "model.layers.%u.mlp.bias", l);
		add(pw, name, WSP_DTYPE_BF16, 3, 1, 0);
	}
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);
	while (n_keep)
		free(keep[--n_keep]);
	wspi_err_destroy(&err);
}

/* Bytes the layers take packed in the host tier, all together. */
static uint64_t packed_model_bytes(const char *pack)
{
	struct wsp_options o;
	wsp_pager *pg;
	char err[512];
	wsp_options_init(&o);
	o.host_cache_bytes = 64 << 20;
	o.flags = WSP_OPEN_NO_PREFETCH;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	struct hcache *hc = ((struct wsp_pager_s *)pg)->hc;
	uint64_t b = 0;
	struct hcache_piece pc[64];
	for (uint32_t l = 0; l < LAYERS; l++) {
		b += hcache_layer_bytes(hc, l);
		uint32_t n = hcache_pieces(hc, l, pc, 64);
		for (uint32_t i = 0; i < n; i++)
			coded_low += pc[i].exprans && (pc[i].layout & EXPRANS_LOW_PLANES);
	}
	wsp_close(pg);
	return b;
}

/* Acquire every layer twice over (each acquire fills a slot), comparing
 * each slot with the pack's raw layer.  Returns the stats. */
static struct wsp_stats sweep(const char *pack, wsp_pack *pk, unsigned flags, uint64_t gpu_packed)
{
	struct wsp_options o;
	wsp_pager *pg;
	char err[512];
	wsp_options_init(&o);
	o.gpu_slots = 2;
	o.host_cache_bytes = 64 << 20;
	o.flags = flags | WSP_OPEN_NO_PREFETCH;
	o.gpu_packed_bytes = gpu_packed;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	uint64_t raw = 0;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			const struct wsp_layer *L;
			CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
			CHECK(t_slot_matches(L, pk, l, NULL));
			raw += L->raw_bytes;
			CHECK_RC(wsp_release(pg, l, NULL), 0);
		}
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	wsp_close(pg);
	printf("%s%s: %llu bytes over the link for %llu raw bytes filled; %llu fills from the "
	       "GPU tier, which holds %llu bytes\n",
	       flags & WSP_OPEN_HOST_DECODE ? "host decode" : "GPU decode",
	       gpu_packed ? " with a GPU tier" : "", (unsigned long long)st.bytes_h2d,
	       (unsigned long long)raw, (unsigned long long)st.packed_gpu_hits,
	       (unsigned long long)st.packed_gpu_bytes);
	return st;
}

int main(void)
{
	t_need_gpu();
	const char *root = t_scratch("cuda-packed");
	char pack[600], err[512];
	snprintf(pack, sizeof(pack), "%s/pack", root);
	make_pack(pack);
	wsp_pack *pk;
	CHECK_RC(wsp_pack_open(pack, &pk, err, sizeof(err)), 0);

	struct wsp_stats packed = sweep(pack, pk, 0, 0), raw = sweep(pack, pk, WSP_OPEN_HOST_DECODE, 0);
	CHECK(packed.bytes_h2d * 10 < raw.bytes_h2d * 8);   /* bf16 Gaussian: ~1.5x fewer bytes */
	CHECK(packed.packed_gpu_hits == 0 && raw.packed_gpu_hits == 0);
	/* A GPU tier for about half the packed model: the second pass decodes
	 * what it holds without the link; whole model: no layer crosses twice. */
	uint64_t model = packed_model_bytes(pack);
	CHECK(coded_low >= LAYERS);   /* the upcast tensors' chunks code their low halves */
	CHECK(packed.bytes_h2d > model);   /* some layers were filled twice */
	struct wsp_stats tier = sweep(pack, pk, 0, model / 2), whole = sweep(pack, pk, 0, model);
	CHECK(tier.packed_gpu_hits > 0 && tier.packed_gpu_bytes <= model / 2);
	CHECK(tier.bytes_h2d < packed.bytes_h2d);
	CHECK(whole.packed_gpu_hits > 0 && whole.bytes_h2d == model && whole.packed_gpu_bytes == model);
	CHECK(sweep(pack, pk, WSP_OPEN_HOST_DECODE, model).packed_gpu_hits == 0);

	/* A packed chunk changed in host memory after the host checked it. */
	struct wsp_options o;
	wsp_pager *pg;
	const struct wsp_layer *L;
	wsp_options_init(&o);
	o.gpu_slots = 2;
	o.host_cache_bytes = 64 << 20;
	o.flags = WSP_OPEN_NO_PREFETCH;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	for (uint32_t l = 0; l < LAYERS; l++) {   /* all in the host tier */
		CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
		CHECK_RC(wsp_release(pg, l, NULL), 0);
	}
	struct wsp_pager_s *p = (struct wsp_pager_s *)pg;
	struct hcache_ref ref;
	struct hcache_piece pc[64];
	CHECK(hcache_try_get(p->hc, 2, &ref) == 1 && ref.packed);
	uint32_t n = hcache_pieces(p->hc, 2, pc, 64), k = 0;
	while (k < n && !pc[k].exprans)
		k++;
	CHECK(k < n);
	uint64_t at = pc[k].at + 4 + 2 * 256;   /* the first lane's length */
	uint8_t *byte = (uint8_t *)ref.pages[at / ref.page_bytes] + at % ref.page_bytes;
	*byte |= 1;   /* odd: no lane has an odd length */
	hcache_put(p->hc, &ref);
	int rc = 0;
	for (int i = 0; i < 8 && rc == 0; i++) {   /* layer 2 is filled again, then refused */
		uint32_t l = (uint32_t)i % 4;
		rc = wsp_acquire(pg, l, NULL, &L);
		if (rc == 0)
			CHECK_RC(wsp_release(pg, l, NULL), 0);
		CHECK(cudaDeviceSynchronize() == cudaSuccess);
	}
	printf("after changing a cached packed chunk: %d: %s\n", rc, wsp_errmsg(pg));
	CHECK_RC(rc, WSP_ECHECKSUM);
	CHECK(strstr(wsp_errmsg(pg), "GPU decode of layer model.layers.2") != NULL);
	CHECK(strstr(wsp_errmsg(pg), "lane lengths") != NULL);
	CHECK_RC(wsp_acquire(pg, 0, NULL, &L), WSP_ECHECKSUM);   /* and stays */
	wsp_close(pg);
	wsp_pack_close(pk);
	t_rmrf(root);
	return 0;
}
