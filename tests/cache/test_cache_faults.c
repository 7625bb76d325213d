/* I/O faults through the engine's test hook.
 *  - EIO on the Nth piece, N rising until a whole pass sees no fault: the
 *    failing get returns -EIO naming the shard and layer, the entry is not
 *    valid, the retry succeeds intact, and the cache stays usable.
 *  - Short reads on every large piece: the engine reads the rest, the data
 *    is intact.
 * Run under ASan (--enable-sanitizers) or valgrind: nothing may leak. */
#include "cache_test.h"

struct faults {
	pthread_mutex_t lock;
	uint64_t seen, fail_at;   /* fail the piece numbered fail_at (1-based) */
	int fired, short_reads;
};

static int fault(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct faults *f = ctx;
	int rc = 0;
	pthread_mutex_lock(&f->lock);
	f->seen++;
	if (getenv("CT_VERBOSE"))
		fprintf(stderr, "piece %" PRIu64 " file %u off %" PRIu64 " len %" PRIu64 "\n", f->seen, file, off, len);
	if (f->fail_at && f->seen == f->fail_at) {
		f->fired = 1;
		rc = -EIO;
	} else if (f->short_reads && len >= 8192) {
		rc = (int)wspi_align_down(len / 2, 4096);
	}
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static int pass(struct hcache *hc, struct wsp_pack_s *pk, const struct t_pack_spec *spec,
		struct faults *f)
{
	struct wspi_err err;
	wspi_err_init(&err);
	int failures = 0;
	for (uint32_t l = 0; l < pk->m.hdr->n_layers; l++) {
		struct hcache_ref ref;
		int rc = hcache_get(hc, l, &ref, &err);
		if (rc < 0) {
			char shard[64];
			snprintf(shard, sizeof(shard), WSPM_SHARD_FMT, pk->m.layers[l].shard);
			CHECK_RC(rc, -EIO);
			CHECK(strstr(err.msg, shard));
			CHECK(strstr(err.msg, wspm_str(&pk->m, pk->m.layers[l].name_off)));
			CHECK(!hcache_contains(hc, l));
			failures++;
			rc = hcache_get(hc, l, &ref, &err);   /* the fault fired once */
			if (rc < 0)
				fprintf(stderr, "retry of %u: %s\n", l, err.msg);
			CHECK_RC(rc, 0);
		}
		CHECK(ct_check_layer(spec, pk, &ref) == 0);
		hcache_put(hc, &ref);
	}
	wspi_err_destroy(&err);
	return failures;
}

static void run(const char *dir, const struct t_pack_spec *spec, enum wsp_io_backend be,
		int direct)
{
	struct wsp_pack_s *pk = ct_open_pack(dir);
	struct faults f = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct hcache_config cfg;
	struct wspi_err err;
	wspi_err_init(&err);
	ct_config(&cfg, be, 64ull << 20, 8192);
	cfg.io.direct = direct;
	cfg.io.max_request = 16384;   /* many pieces per layer */
	cfg.io.fault = fault;
	cfg.io.fault_ctx = &f;
	cfg.staging_bytes = 1;        /* many slices too */
	for (uint64_t n = 1;; n++) {
		struct hcache *hc;
		int rc = hcache_create(&cfg, pk, &hc, &err);
		if (rc < 0 && be == WSP_IO_URING && ct_uring_refused(rc)) {
			fprintf(stderr, "uring refused: skipped\n");
			break;
		}
		CHECK_RC(rc, 0);
		pthread_mutex_lock(&f.lock);
		f.seen = 0;
		f.fail_at = n;
		f.fired = 0;
		pthread_mutex_unlock(&f.lock);
		int failures = pass(hc, pk, spec, &f);
		if (failures != f.fired)
			fprintf(stderr, "N=%" PRIu64 " seen %" PRIu64 ": %d failures, fired %d\n", n, f.seen, failures, f.fired);
		CHECK(failures == f.fired);   /* one fault, one failed get */
		struct hcache_stats st;
		hcache_get_stats(hc, &st);
		CHECK(st.load_failures == (uint64_t)failures);
		/* Usable afterwards: a second pass hits everything. */
		CHECK(pass(hc, pk, spec, &f) == 0);
		hcache_destroy(hc);
		if (!f.fired)
			break;   /* N passed the number of pieces: done */
		CHECK(n < 10000);
	}
	/* Short reads everywhere. */
	struct hcache *hc;
	f.fail_at = 0;
	f.short_reads = 1;
	if (hcache_create(&cfg, pk, &hc, &err) == 0) {
		CHECK(pass(hc, pk, spec, &f) == 0);
		hcache_destroy(hc);
	}
	pack_close(pk);
	wspi_err_destroy(&err);
}

int main(void)
{
	const char *root = t_scratch("cache-faults");
	char dir[600];
	struct t_pack_spec spec = {
		.layers = 4, .tensors_per_layer = 2, .tensor_bytes = 30001,
		.compressible = 0, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 8192,
	};
	snprintf(dir, sizeof(dir), "%s/p", root);
	CHECK_RC(t_make_pack(dir, &spec), 0);
	run(dir, &spec, WSP_IO_PREAD, 1);
	run(dir, &spec, WSP_IO_PREAD, 0);
	if (!getenv("CT_NO_URING"))
		run(dir, &spec, WSP_IO_URING, 1);
	t_rmrf(root);
	return 0;
}
