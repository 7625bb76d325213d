/* A corrupt byte in a shard chunk: hcache_get fails with WSP_ECHECKSUM (raw
 * chunk) or WSP_EZSTD/WSP_ECHECKSUM (zstd chunk), the message names the
 * shard file, the layer, the tensor and the chunk; the entry never becomes
 * valid; a second get retries and fails the same way; other layers are
 * still served intact and on_ready reported each outcome. */
#include <fcntl.h>
#include "cache_test.h"

struct ready_log {
	pthread_mutex_t lock;
	int ok, failed;
};

static void on_ready(void *ctx, uint32_t layer, int status)
{
	struct ready_log *r = ctx;
	pthread_mutex_lock(&r->lock);
	if (status < 0)
		r->failed++;
	else
		r->ok++;
	pthread_mutex_unlock(&r->lock);
}

static void flip_byte(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	unsigned char b;
	CHECK(pread(fd, &b, 1, (off_t)off) == 1);
	b ^= 0x5a;
	CHECK(pwrite(fd, &b, 1, (off_t)off) == 1);
	CHECK(fsync(fd) == 0);
	close(fd);
}

static void run(const char *root, const char *tag, struct t_pack_spec *spec,
		enum wsp_io_backend be)
{
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/%s", root, tag);
	CHECK_RC(t_make_pack(dir, spec), 0);
	struct wsp_pack_s *pk = ct_open_pack(dir);
	const struct wspi_manifest *m = &pk->m;
	/* Layer 1, its second tensor, that tensor's chunk 1. */
	const struct wspm_layer *L = &m->layers[1];
	const struct wspm_tensor *T = &m->tensors[L->first_tensor + 1];
	CHECK(T->n_chunks >= 2);
	const struct wspm_chunk *c = &m->chunks[T->first_chunk + 1];
	char shard[700];
	pack_shard_path(pk, L->shard, shard, sizeof(shard));
	flip_byte(shard, c->offset + c->stored_bytes / 2);
	pack_close(pk);
	pk = ct_open_pack(dir);   /* the manifest is unchanged: it still opens */
	m = &pk->m;

	struct ready_log rl = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct hcache_config cfg;
	struct hcache *hc;
	struct wspi_err err;
	wspi_err_init(&err);
	ct_config(&cfg, be, 64ull << 20, 4096);
	cfg.on_ready = on_ready;
	cfg.ready_ctx = &rl;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);

	struct hcache_ref ref;
	char shard_file[64];
	snprintf(shard_file, sizeof(shard_file), WSPM_SHARD_FMT, L->shard);
	char want_chunk[32];
	snprintf(want_chunk, sizeof(want_chunk), "chunk 1");
	for (int attempt = 0; attempt < 2; attempt++) {
		int rc = hcache_get(hc, 1, &ref, &err);
		fprintf(stderr, "%s attempt %d: %s: %s\n", tag, attempt, wsp_strerror(rc), err.msg);
		if (spec->codec == WSP_CODEC_RAW)
			CHECK_RC(rc, WSP_ECHECKSUM);
		else
			CHECK(rc == WSP_EZSTD || rc == WSP_ECHECKSUM);
		CHECK(strstr(err.msg, shard_file));
		CHECK(strstr(err.msg, wspm_str(m, L->name_off)));
		CHECK(strstr(err.msg, wspm_str(m, T->name_off)));
		CHECK(strstr(err.msg, want_chunk));
		CHECK(!hcache_contains(hc, 1));
		CHECK(hcache_try_get(hc, 1, &ref) == 0);
		wspi_err_clear(&err);
	}
	for (uint32_t l = 0; l < m->hdr->n_layers; l++) {
		if (l == 1)
			continue;
		CHECK_RC(hcache_get(hc, l, &ref, &err), 0);
		CHECK(ct_check_layer(spec, pk, &ref) == 0);
		hcache_put(hc, &ref);
	}
	struct hcache_stats st;
	hcache_get_stats(hc, &st);
	CHECK(st.load_failures == 2 && st.loads == m->hdr->n_layers + 1);
	hcache_destroy(hc);   /* on_ready runs after the waiters wake: count once all ended */
	CHECK(rl.failed == 2 && rl.ok == (int)m->hdr->n_layers - 1);
	pack_close(pk);
	wspi_err_destroy(&err);
}

int main(void)
{
	const char *root = t_scratch("cache-corrupt");
	struct t_pack_spec raw = {
		.layers = 3, .tensors_per_layer = 2, .tensor_bytes = 40001,
		.compressible = 0, .codec = WSP_CODEC_RAW, .chunk_bytes = 8192,
	};
	struct t_pack_spec zst = {
		.layers = 3, .tensors_per_layer = 2, .tensor_bytes = 60000,
		.compressible = 1, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 16384,
	};
	run(root, "raw", &raw, WSP_IO_PREAD);
	run(root, "zst", &zst, WSP_IO_MMAP);
	t_rmrf(root);
	return 0;
}
