/* Who decodes (wsp_who_decodes, WSP_OPEN_GPU_DECODE): on a GPU with an
 * exprans pack the pager measures while running.  Passes over the layers
 * (two slots: every acquire fills) until it has chosen: every slot holds
 * exactly the pack's raw layer throughout (packed fills, fills while raw
 * copies are being made, fills from them), some passes carried the raw
 * bytes (the trial's raw windows) and others the packed ones, the choice is
 * GPU or host with a notice giving both figures, and the passes after the
 * choice carry what it says.  Which one wins here is not asserted: that is
 * timing (bench/torch_train.py measures it where it matters).
 * wsp_reset_prediction starts it again, from packed layers.
 * WSP_OPEN_GPU_DECODE: GPU from the start, never raw bytes; HOST_DECODE:
 * host.  A budget the pack fills: no trial, the GPU; room for less than a
 * copy: the trial makes none and keeps the GPU, saying so.
 * Skips (77) without a GPU. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "cuda_check.h"
#include "pager_util.h"

#define LAYERS 4u

struct notes {
	pthread_mutex_t lock;
	char text[4096];
};

static void on_notice(void *ctx, const char *msg)
{
	struct notes *n = ctx;
	pthread_mutex_lock(&n->lock);
	size_t l = strlen(n->text);
	snprintf(n->text + l, sizeof(n->text) - l, "%s\n", msg);
	pthread_mutex_unlock(&n->lock);
}

/* One pass over every layer, each slot compared with the pack's layer:
 * the bytes the link carried for it. */
static uint32_t n_layers;

static uint64_t pass(wsp_pager *pg, wsp_pack *pk)
{
	struct wsp_stats a, b;
	CHECK_RC(wsp_get_stats(pg, &a), 0);
	for (uint32_t l = 0; l < n_layers; l++) {
		const struct wsp_layer *L;
		CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
		if (!t_slot_matches(L, pk, l, NULL)) {
			fprintf(stderr, "(who decodes: %d)\n", wsp_who_decodes(pg));
			CHECK(0);
		}
		CHECK_RC(wsp_release(pg, l, NULL), 0);
	}
	/* every fill's copy counted */
	for (int i = 0; i < 200; i++) {
		CHECK(cudaDeviceSynchronize() == cudaSuccess);
		CHECK_RC(wsp_get_stats(pg, &b), 0);
		if (b.bytes_h2d > a.bytes_h2d)
			break;
	}
	return b.bytes_h2d - a.bytes_h2d;
}

static wsp_pager *open_pager(const char *pack, unsigned flags, uint64_t host, struct notes *n)
{
	struct wsp_options o;
	wsp_pager *pg;
	char err[512];
	wsp_options_init(&o);
	o.gpu_slots = 2;
	o.page_bytes = 4096;
	o.host_cache_bytes = host;
	o.flags = flags;
	o.log = on_notice;
	o.log_ctx = n;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	return pg;
}

int main(void)
{
	t_need_gpu();
	struct t_model m;
	char model[600], err[512];
	snprintf(m.dir, sizeof(m.dir), "%s", t_scratch("cuda-who-decodes"));
	snprintf(model, sizeof(model), "%s/model.safetensors", m.dir);
	snprintf(m.pack, sizeof(m.pack), "%s/pack", m.dir);
	struct wsp_generate_options g;
	wsp_generate_options_init(&g);
	g.layers = LAYERS;
	g.hidden = 256;
	g.intermediate = 512;
	g.vocab = 512;
	CHECK_RC(wsp_generate(model, &g, err, sizeof(err)), 0);
	struct wsp_convert_options c;
	wsp_convert_options_init(&c);
	c.codec = WSP_CODEC_EXPRANS;
	c.chunk_bytes = 128 << 10;
	c.threads = 2;
	const char *in[] = { model };
	CHECK_RC(wsp_convert(in, 1, m.pack, &c, err, sizeof(err)), 0);
	wsp_pack *pk;
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	struct wsp_pack_summary sum;
	wsp_pack_summary(pk, &sum);
	n_layers = sum.n_layers;   /* the blocks, embeddings, head */
	CHECK(n_layers > LAYERS);

	/* Forced: the GPU, packed bytes only; the host, raw bytes. */
	struct notes n = { .lock = PTHREAD_MUTEX_INITIALIZER };
	wsp_pager *pg = open_pager(m.pack, WSP_OPEN_GPU_DECODE, 64 << 20, &n);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_GPU);
	pass(pg, pk);   /* the first also counts what the open started */
	uint64_t packed = pass(pg, pk);
	for (int i = 0; i < 40; i++)
		CHECK(pass(pg, pk) == packed);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_GPU);
	wsp_close(pg);
	pg = open_pager(m.pack, WSP_OPEN_HOST_DECODE, 64 << 20, &n);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_HOST);
	pass(pg, pk);
	uint64_t raw = pass(pg, pk);
	wsp_close(pg);
	printf("a pass carries %llu bytes packed, %llu raw\n", (unsigned long long)packed,
	       (unsigned long long)raw);
	CHECK(packed * 10 < raw * 8);
	CHECK(strstr(n.text, "who decodes") == NULL);

	/* Measured. */
	pg = open_pager(m.pack, 0, 64 << 20, &n);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_TRYING);
	unsigned passes = 0, n_packed = 0, n_raw = 0;
	uint64_t last = 0;
	while (wsp_who_decodes(pg) == WSP_DECODE_TRYING && passes < 2000) {
		last = pass(pg, pk);
		n_packed += last == packed;
		n_raw += last == raw;
		passes++;
		if (passes > 30)   /* the copies are being made: give the thread time */
			usleep(1000);
	}
	int who = wsp_who_decodes(pg);
	printf("measured: %s after %u passes (%u carried packed bytes, %u raw); notices:\n%s",
	       who == WSP_DECODE_HOST ? "host" : who == WSP_DECODE_GPU ? "GPU" : "undecided",
	       passes, n_packed, n_raw, n.text);
	CHECK(who == WSP_DECODE_HOST || who == WSP_DECODE_GPU);
	CHECK(n_packed >= 4 && n_raw >= 4);
	CHECK(strstr(n.text, "who decodes:") && strstr(n.text, "with packed layers") &&
	      strstr(n.text, who == WSP_DECODE_HOST ? "the host decodes" : "the GPU decodes"));
	pass(pg, pk);   /* the window that decided may have ended mid-pass */
	for (int i = 0; i < 5; i++)
		CHECK(pass(pg, pk) == (who == WSP_DECODE_HOST ? raw : packed));
	/* A new workload: wsp_reset_prediction starts the trial again, with
	 * packed layers (any copies dropped). */
	wsp_reset_prediction(pg);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_TRYING);
	pass(pg, pk);
	CHECK(pass(pg, pk) == packed);
	for (passes = 0; wsp_who_decodes(pg) == WSP_DECODE_TRYING && passes < 2000; passes++) {
		pass(pg, pk);
		if (passes > 30)
			usleep(1000);
	}
	who = wsp_who_decodes(pg);
	printf("after wsp_reset_prediction: %s after %u passes\n",
	       who == WSP_DECODE_HOST ? "host" : who == WSP_DECODE_GPU ? "GPU" : "undecided", passes);
	CHECK(who == WSP_DECODE_HOST || who == WSP_DECODE_GPU);
	wsp_close(pg);

	/* A budget the pack fills: no trial at all, the GPU from the start. */
	n.text[0] = '\0';
	uint64_t pages = 0;
	for (uint32_t l = 0; l < n_layers; l++)
		pages += (wsp_pack_layer(pk, l)->raw_bytes + 4095) / 4096;   /* the pack raw, in pages */
	pg = open_pager(m.pack, 0, pages * 4096, &n);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_GPU);
	wsp_close(pg);
	/* Room for less than one copy: the trial measures, makes none, and
	 * keeps the GPU, saying why. */
	pg = open_pager(m.pack, 0, (pages + 1) * 4096, &n);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_TRYING);
	pass(pg, pk);
	passes = 0;
	while (wsp_who_decodes(pg) == WSP_DECODE_TRYING && passes++ < 2000) {
		CHECK(pass(pg, pk) == packed);
		if (passes > 30)
			usleep(1000);
	}
	printf("room for less than one copy: %s", n.text);
	CHECK_RC(wsp_who_decodes(pg), WSP_DECODE_GPU);
	CHECK(strstr(n.text, "no raw copy could be made"));
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
