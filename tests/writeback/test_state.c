/* wsp_state_acquire / _release / _size: training state kept for the
 * caller.  Every layer's buffer taken, written and released twice (a few
 * MiB each, ~20x the budget in all): the memory they hold stays within the
 * budget (the stats; the peak RSS grows by far less than the buffers,
 * except under ASan), the rest went to the overflow file, and each buffer
 * comes back bit for bit; buffers released unchanged are not written
 * again (only those changed since); a take of another size gives zeros; a second take gives the same
 * buffer.  The file is nameless (the overflow directory stays empty).  A
 * corrupted file is a checksum error, never other bytes; releases not
 * taken, 0 bytes, a bad layer and NULL arguments are clear errors.  Host
 * backend. */
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../gpu/pager_util.h"
#include "overflow_util.h"

#define LAYERS 24
#define BLOB (3u << 20)

static char ovf[700];

/* Blob of layer l, version v: every 8-byte word says where it is. */
static void fill(uint64_t *p, uint64_t bytes, uint32_t l, unsigned v)
{
	for (uint64_t i = 0; i < bytes / 8; i++)
		p[i] = (uint64_t)l << 48 | (uint64_t)v << 40 | i;
}

static uint64_t blob_bytes(uint32_t l, unsigned v)
{
	return BLOB + 8 * (l * 1000 + v * 333);   /* not a multiple of 4096 */
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	const uint64_t budget = 4ull << 20;   /* about one blob */

	t_model_make(&m, "state", LAYERS, 128, 256);
	snprintf(ovf, sizeof(ovf), "%s/overflow", m.dir);
	CHECK(mkdir(ovf, 0700) == 0);
	t_host_options(&o, &m, 100, 2);
	o.state_bytes = budget;
	o.overflow_dir = ovf;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	CHECK(m.sum.n_layers >= LAYERS);   /* blocks, embedding, norm, head */
	uint64_t *buf = malloc(BLOB + (1 << 20));
	CHECK(buf);

	/* Nothing taken yet: no buffer, no store. */
	CHECK(wsp_state_size(pg, 3) == 0);
	CHECK_RC(wsp_state_release(pg, 3, 0), WSP_ESTATE);

	memset(buf, 0, BLOB + (1 << 20));   /* the test's own buffer, in before the peak */
	long rss0 = t_peak_rss_kib();
	uint64_t total = 0, *p;
	for (unsigned v = 0; v < 2; v++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			CHECK_RC(wsp_state_acquire(pg, l, blob_bytes(l, 0), (void **)&p), 0);
			CHECK((uintptr_t)p % 4096 == 0);
			if (v == 0) {   /* new: zeros */
				for (uint64_t i = 0; i < blob_bytes(l, 0) / 8; i++)
					CHECK(p[i] == 0);
			}
			fill(p, blob_bytes(l, 0), l, v);
			CHECK_RC(wsp_state_release(pg, l, 1), 0);
			CHECK_RC(wsp_get_stats(pg, &st), 0);
			CHECK(st.state_resident <= budget);
			if (v == 1)
				total += blob_bytes(l, 0);
		}
	long grew = t_peak_rss_kib() - rss0;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("%u buffers, %llu MiB held, %llu MiB in memory, %llu MiB spilled; peak RSS grew %ld "
	       "MiB\n", LAYERS, (unsigned long long)st.state_held >> 20,
	       (unsigned long long)st.state_resident >> 20,
	       (unsigned long long)st.overflow_written >> 20, grew >> 10);
	CHECK(st.state_held == total);
	CHECK(st.overflow_written >= total - budget);
#if !defined(__SANITIZE_ADDRESS__)
	CHECK((uint64_t)grew << 10 < total / 2);
#endif
	CHECK(t_entries(ovf) == 0);

	/* Every buffer back, the last version, bit for bit (most from the
	 * file); released unchanged, none is written again. */
	uint64_t written = st.overflow_written, resident = st.state_resident;
	for (uint32_t l = 0; l < LAYERS; l++) {
		uint64_t want = blob_bytes(l, 0);
		CHECK(wsp_state_size(pg, l) == (int64_t)want);
		CHECK_RC(wsp_state_acquire(pg, l, want, (void **)&p), 0);
		fill(buf, want, l, 1);
		CHECK(memcmp(buf, p, want) == 0);
		CHECK_RC(wsp_state_release(pg, l, 0), 0);
	}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	/* only what was in memory, changed, may have been written for room */
	CHECK(st.overflow_read > 0 && st.overflow_written - written <= resident);

	/* Taken twice: one buffer, two releases; another size meanwhile is
	 * refused, after them it is a new buffer of zeros. */
	uint64_t *q;
	CHECK_RC(wsp_state_acquire(pg, 4, blob_bytes(4, 0), (void **)&p), 0);
	CHECK_RC(wsp_state_acquire(pg, 4, blob_bytes(4, 0), (void **)&q), 0);
	CHECK(p == q);
	CHECK_RC(wsp_state_acquire(pg, 4, 4096, (void **)&q), WSP_ESTATE);
	CHECK(q == NULL);
	CHECK_RC(wsp_state_release(pg, 4, 0), 0);
	CHECK_RC(wsp_state_release(pg, 4, 0), 0);
	CHECK_RC(wsp_state_release(pg, 4, 0), WSP_ESTATE);
	CHECK(strstr(wsp_errmsg(pg), "released but not taken") != NULL);
	CHECK_RC(wsp_state_acquire(pg, 4, 8192, (void **)&p), 0);
	CHECK(p[0] == 0 && p[1023] == 0 && wsp_state_size(pg, 4) == 8192);
	CHECK_RC(wsp_state_release(pg, 4, 0), 0);
	total += 8192 - blob_bytes(4, 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.state_held == total);

	/* Errors. */
	CHECK_RC(wsp_state_acquire(pg, 1, 0, (void **)&p), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "0 bytes") != NULL);
	CHECK_RC(wsp_state_acquire(pg, m.sum.n_layers, 8, (void **)&p), WSP_ENOTFOUND);
	CHECK_RC(wsp_state_release(pg, m.sum.n_layers, 0), WSP_ENOTFOUND);
	CHECK(wsp_state_size(pg, m.sum.n_layers) == WSP_ENOTFOUND);
	/* Sizes whose rounding up to pages would wrap: refused, nothing made. */
	uint64_t huge[] = {UINT64_MAX, UINT64_MAX - 4095, (uint64_t)INT64_MAX - 4094,
			   (uint64_t)INT64_MAX};
	for (unsigned k = 0; k < sizeof(huge) / sizeof(huge[0]); k++) {
		CHECK_RC(wsp_state_acquire(pg, 2, huge[k], (void **)&p), WSP_ETOOBIG);
		CHECK(p == NULL && strstr(wsp_errmsg(pg), "largest state buffer") != NULL);
	}
	/* The largest size allowed is merely too big for memory. */
	CHECK_RC(wsp_state_acquire(pg, 2, (uint64_t)INT64_MAX - 4095, (void **)&p), -ENOMEM);
	CHECK(p == NULL);
	CHECK_RC(wsp_state_acquire(pg, 1, 8, NULL), -EINVAL);
	CHECK_RC(wsp_state_acquire(NULL, 1, 8, (void **)&p), -EINVAL);
	CHECK_RC(wsp_state_release(NULL, 1, 0), -EINVAL);
	CHECK(wsp_state_size(NULL, 1) == -EINVAL);

	/* A corrupted overflow file: the spilled buffers are refused. */
	CHECK(t_corrupt_overflow(ovf) > 0);
	unsigned refused = 0;
	for (uint32_t l = 0; l < LAYERS; l++) {
		if (l == 4)
			continue;
		int rc = wsp_state_acquire(pg, l, blob_bytes(l, 0), (void **)&p);
		if (rc < 0) {
			CHECK_RC(rc, WSP_ECHECKSUM);
			CHECK(p == NULL);
			refused++;
		} else {
			CHECK_RC(wsp_state_release(pg, l, 0), 0);
		}
	}
	printf("after corrupting the overflow file: %u buffers refused (%s)\n", refused,
	       refused ? wsp_errmsg(pg) : "");
	CHECK(refused >= LAYERS / 2);

	wsp_close(pg);
	CHECK(t_entries(ovf) == 0);
	free(buf);
	t_model_remove(&m);
	return 0;
}
