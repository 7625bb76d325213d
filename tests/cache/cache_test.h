/* Shared helpers of the host-tier tests: build a pack, open it, make a cache,
 * check a layer read through the cache against the expected contents. */
#ifndef WSP_TESTS_CACHE_TEST_H
#define WSP_TESTS_CACHE_TEST_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hcache.h"
#include "common/error.h"
#include "common/util.h"
#include "pack/pack.h"
#include "testlib.h"
#include "testpack.h"

static inline struct wsp_pack_s *ct_open_pack(const char *dir)
{
	struct wsp_pack_s *pk = NULL;
	struct wspi_err err;
	wspi_err_init(&err);
	int rc = pack_open(dir, &pk, &err);
	if (rc < 0) {
		fprintf(stderr, "pack_open %s: %s (%s)\n", dir, wsp_strerror(rc), err.msg);
		exit(1);
	}
	wspi_err_destroy(&err);
	return pk;
}

/* Global tensor number of the test pack ("model.layers.N.wK"). */
static inline uint32_t ct_tensor_number(const struct t_pack_spec *spec, const char *name)
{
	unsigned n, k;
	if (sscanf(name, "model.layers.%u.w%u", &n, &k) != 2) {
		fprintf(stderr, "unexpected tensor name %s\n", name);
		exit(1);
	}
	return n * spec->tensors_per_layer + k;
}

/* Copy [off, off+len) of a referenced layer out of its pages. */
static inline void ct_copy_out(const struct hcache_ref *ref, uint64_t off, void *dst, uint64_t len)
{
	uint8_t *d = dst;
	while (len) {
		uint64_t pg = off / ref->page_bytes, in = off % ref->page_bytes;
		uint64_t n = WSP_MIN(len, ref->page_bytes - in);
		memcpy(d, (const uint8_t *)ref->pages[pg] + in, n);
		d += n;
		off += n;
		len -= n;
	}
}

/* 0 when every tensor of the referenced layer and every padding byte between
 * them is right (padding must read as zero). */
static inline int ct_check_layer(const struct t_pack_spec *spec, struct wsp_pack_s *pk,
				 const struct hcache_ref *ref)
{
	const struct wspi_manifest *m = &pk->m;
	const struct wspm_layer *L = &m->layers[ref->layer];
	if (ref->raw_bytes != L->raw_bytes) {
		fprintf(stderr, "layer %u: raw_bytes %" PRIu64 " want %" PRIu64 "\n", ref->layer,
			ref->raw_bytes, L->raw_bytes);
		return 1;
	}
	uint8_t *buf = malloc(L->raw_bytes ? L->raw_bytes : 1);
	CHECK(buf);
	ct_copy_out(ref, 0, buf, L->raw_bytes);
	uint8_t *want = calloc(1, L->raw_bytes ? L->raw_bytes : 1);
	CHECK(want);
	int bad = 0;
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++) {
		const struct wspm_tensor *T = &m->tensors[t];
		uint32_t g = ct_tensor_number(spec, wspm_str(m, T->name_off));
		if (t_check_tensor(spec, g, buf + T->layer_offset, T->raw_bytes)) {
			fprintf(stderr, "layer %u tensor %s differs\n", ref->layer,
				wspm_str(m, T->name_off));
			bad = 1;
		}
		memcpy(want + T->layer_offset, buf + T->layer_offset, T->raw_bytes);
	}
	if (!bad && memcmp(want, buf, L->raw_bytes)) {
		fprintf(stderr, "layer %u: padding between tensors is not zero\n", ref->layer);
		bad = 1;
	}
	free(buf);
	free(want);
	return bad;
}

/* Notices, collected for assertions. */
struct ct_notices {
	pthread_mutex_t lock;
	char text[8192];
};
static inline void ct_notice(void *ctx, const char *msg)
{
	struct ct_notices *n = ctx;
	pthread_mutex_lock(&n->lock);
	size_t l = strlen(n->text);
	snprintf(n->text + l, sizeof(n->text) - l, "%s\n", msg);
	pthread_mutex_unlock(&n->lock);
	if (getenv("CT_VERBOSE"))
		fprintf(stderr, "notice: %s\n", msg);
}

static inline void ct_config(struct hcache_config *cfg, enum wsp_io_backend be, uint64_t budget,
			     uint64_t page)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->budget_bytes = budget;
	cfg->page_bytes = page;
	cfg->decode_threads = 2;
	cfg->policy = WSP_POLICY_LRU;
	io_config_init(&cfg->io);
	cfg->io.backend = be;
	cfg->io.direct = 1;
}

/* True when the error says io_uring is not available here. */
static inline int ct_uring_refused(int rc)
{
	return rc == -EPERM || rc == -ENOSYS || rc == -EOPNOTSUPP || rc == -EACCES;
}

#endif
