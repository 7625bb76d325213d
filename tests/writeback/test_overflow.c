/* Updated layers beyond wsp_options.updated_bytes go to the overflow file
 * and come back intact: a model's every layer updated with a budget of
 * three layers keeps at most that in memory (the stats, and the process's
 * peak RSS grows by far less than the updates, except under ASan, whose
 * quarantine keeps freed memory), every layer reads back as
 * updated (partly updated spilled layers keep their other tensors), and a
 * save writes them all.  The file is nameless: the overflow directory stays
 * empty, also after a SIGKILL in the middle of spilling, which leaves the
 * pack valid.  A corrupted overflow file is a checksum error, never stale
 * weights; a full disk fails no call (the layers stay in memory over the
 * budget, said once) and loses no layer; a bad overflow_dir is refused at
 * open.  Host backend. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../gpu/pager_util.h"
#include "overflow_util.h"

static struct t_model m;
static wsp_pack *pk;
static char ovf[700];
static uint32_t n;
/* Tensor t of layer l starts at off[l][t] of the layer's raw layout
 * (learnt from views: the pack's own tensors have no data pointers). */
static uint64_t off[64][64];

static void learn_offsets(wsp_pager *pg)
{
	const struct wsp_layer *L;
	CHECK(n <= 64);
	for (uint32_t l = 0; l < n; l++) {
		CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
		CHECK(L->n_tensors <= 64);
		for (uint32_t t = 0; t < L->n_tensors; t++)
			off[l][t] = (uint64_t)((const uint8_t *)L->tensors[t].data -
					       (const uint8_t *)L->data);
		CHECK_RC(wsp_release(pg, l, NULL), 0);
	}
}

/* Layer l as updated in round r (r = 0: the pack's bytes). */
static void expected(uint32_t l, unsigned r, uint8_t *out)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, l);
	CHECK_RC(wsp_pack_read_layer(pk, l, out), 0);
	if (r)
		for (uint64_t i = 0; i < L->raw_bytes; i++)
			out[i] ^= (uint8_t)(0x3c + 11 * r + l + i);
}

/* wsp_update of layer l to round r; tensor `keep` (or none: -1) passed as
 * NULL, which must keep its value of round `kept_r`. */
static int update(wsp_pager *pg, uint32_t l, unsigned r, int keep, uint8_t *buf)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, l);
	const void *vals[64] = { 0 };
	expected(l, r, buf);
	for (uint32_t t = 0; t < L->n_tensors; t++)
		vals[t] = (int)t == keep ? NULL : buf + off[l][t];
	return wsp_update(pg, l, vals);
}

/* Layer l's view equals round r (tensor `keep` of round kept_r). */
static int reads_as(wsp_pager *pg, uint32_t l, unsigned r, int keep, unsigned kept_r,
		    uint8_t *want, uint8_t *other)
{
	const struct wsp_layer *L;
	int rc = wsp_acquire(pg, l, NULL, &L);
	if (rc < 0)
		return rc;
	expected(l, r, want);
	if (keep >= 0) {
		expected(l, kept_r, other);
		memcpy(want + off[l][keep], other + off[l][keep], L->tensors[keep].bytes);
	}
	CHECK(t_view_bad(L) == 0);
	CHECK(memcmp(L->data, want, L->raw_bytes) == 0);
	CHECK_RC(wsp_release(pg, l, NULL), 0);
	return 0;
}

static void log_line(void *ctx, const char *msg)
{
	(void)ctx;
	printf("notice: %s\n", msg);
}

/* Notices of a spill that failed for a full disk. */
static unsigned full_notices;
static void count_full(void *ctx, const char *msg)
{
	log_line(ctx, msg);
	if (strstr(msg, "File too large") && strstr(msg, "over their budget"))
		full_notices++;
}

static void options(struct wsp_options *o, uint64_t budget)
{
	t_host_options(o, &m, 10, 2);
	o->updated_bytes = budget;
	o->overflow_dir = ovf;
	o->log = log_line;
}

int main(void)
{
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "overflow", 24, 512, 1024);
	snprintf(ovf, sizeof(ovf), "%s/overflow", m.dir);
	CHECK(mkdir(ovf, 0700) == 0);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	n = m.sum.n_layers;
	uint64_t largest = m.sum.max_layer_raw_bytes;
	uint64_t budget = 3 * ((largest + 4095) / 4096 * 4096);
	uint8_t *buf = malloc(largest), *want = malloc(largest), *other = malloc(largest);
	CHECK(buf && want && other);
	printf("%u layers, %llu MiB; updated layers budget %llu MiB\n", n,
	       (unsigned long long)(m.sum.raw_bytes >> 20), (unsigned long long)(budget >> 20));

	/* A bad overflow_dir is refused at open. */
	char file[720], missing[720];
	snprintf(file, sizeof(file), "%s/a-file", m.dir);
	snprintf(missing, sizeof(missing), "%s/missing", m.dir);
	FILE *f = fopen(file, "w");
	CHECK(f && fclose(f) == 0);
	options(&o, budget);
	o.overflow_dir = file;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), -ENOTDIR);
	CHECK(strstr(err, "not a directory") != NULL);
	o.overflow_dir = missing;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), -ENOENT);

	/* Every layer updated, twice, through a budget of three layers. */
	options(&o, budget);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	learn_offsets(pg);
	for (uint32_t l = 0; l < n; l++)
		CHECK_RC(reads_as(pg, l, 0, -1, 0, want, other), 0);
	long rss0 = t_peak_rss_kib();
	for (unsigned r = 1; r <= 2; r++)
		for (uint32_t l = 0; l < n; l++) {
			CHECK_RC(update(pg, l, r, -1, buf), 0);
			CHECK_RC(wsp_get_stats(pg, &st), 0);
			CHECK(st.updated_resident <= budget);
		}
	CHECK(t_entries(ovf) == 0);
	/* Layer 0 was spilled (least recently used): a partial update reads
	 * its kept tensor back from the file. */
	CHECK_RC(update(pg, 0, 3, 0, buf), 0);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < n; l++)
			CHECK_RC(reads_as(pg, l, l == 0 ? 3 : 2, l == 0 ? 0 : -1, 2, want, other), 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	long grew = t_peak_rss_kib() - rss0;
	printf("updated %llu layers (%llu MiB): %llu MiB in memory, %llu MiB spilled, %llu MiB "
	       "read back; peak RSS grew %ld MiB\n", (unsigned long long)st.updated_layers,
	       (unsigned long long)(st.updated_bytes >> 20),
	       (unsigned long long)(st.updated_resident >> 20),
	       (unsigned long long)(st.overflow_written >> 20),
	       (unsigned long long)(st.overflow_read >> 20), grew >> 10);
	CHECK(st.updated_layers == n && st.updated_bytes == m.sum.raw_bytes);
	CHECK(st.updated_resident <= budget);
	CHECK(st.overflow_written >= m.sum.raw_bytes - budget);
	/* What was read back and not changed is not written again. */
	CHECK(st.overflow_written < 2 * m.sum.raw_bytes + st.overflow_read / 2);
	CHECK(st.overflow_read > 0);
	/* All of them in memory would have grown it by the model's size.
	 * (Not under AddressSanitizer, which keeps freed memory in
	 * quarantine: there the stats above are the bound checked.) */
#if defined(__SANITIZE_ADDRESS__)
	printf("peak RSS not checked: AddressSanitizer keeps freed memory\n");
#else
	CHECK((uint64_t)grew * 1024 < m.sum.raw_bytes / 2);
#endif

	/* A save reads the spilled layers back too. */
	char out[720];
	wsp_pack *saved;
	snprintf(out, sizeof(out), "%s/tuned.wsp", m.dir);
	CHECK_RC(wsp_save(pg, out, 0, NULL, NULL), 0);
	CHECK_RC(wsp_pack_open(out, &saved, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_verify(saved, 0, NULL, NULL), 0);
	for (uint32_t l = 0; l < n; l++) {
		const struct wsp_layer *L = wsp_pack_layer(saved, l);
		expected(l, l == 0 ? 3 : 2, want);
		if (l == 0) {
			expected(0, 2, other);
			memcpy(want + off[0][0], other + off[0][0], L->tensors[0].bytes);
		}
		CHECK_RC(wsp_pack_read_layer(saved, l, buf), 0);
		CHECK(memcmp(buf, want, L->raw_bytes) == 0);
	}
	wsp_pack_close(saved);

	/* Other bytes in the file: spilled layers fail with a checksum error. */
	CHECK(t_corrupt_overflow(ovf) > 0);
	unsigned bad = 0;
	for (uint32_t l = 0; l < n; l++) {
		int rc = reads_as(pg, l, l == 0 ? 3 : 2, l == 0 ? 0 : -1, 2, want, other);
		if (rc < 0) {
			CHECK_RC(rc, WSP_ECHECKSUM);
			CHECK(strstr(wsp_errmsg(pg), "overflow file") != NULL);
			bad++;
		}
	}
	printf("after corrupting the overflow file: %u layers refused (%s)\n", bad,
	       wsp_errmsg(pg));
	CHECK(bad > 0);
	wsp_close(pg);
	CHECK(t_entries(ovf) == 0);

	/* SIGKILL while spilling: the pack stays valid, nothing is left. */
	int pipefd[2];
	CHECK(pipe(pipefd) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(pipefd[0]);
		options(&o, budget);
		o.log = NULL;
		if (wsp_open(m.pack, &o, &pg, err, sizeof(err)) < 0)
			_exit(2);
		for (unsigned r = 1;; r++)
			for (uint32_t l = 0; l < n; l++) {
				if (update(pg, l, r, -1, buf) < 0)
					_exit(3);
				wsp_get_stats(pg, &st);
				if (st.overflow_written && write(pipefd[1], "x", 1) != 1)
					_exit(4);
			}
	}
	close(pipefd[1]);
	char got[4];
	CHECK(read(pipefd[0], got, 1) == 1 && read(pipefd[0], got, 3) > 0);
	CHECK(kill(pid, SIGKILL) == 0);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	close(pipefd[0]);
	CHECK(t_entries(ovf) == 0);
	CHECK_RC(wsp_pack_verify(pk, 0, NULL, NULL), 0);

	/* A full disk (RLIMIT_FSIZE: writes past 1 MiB fail with EFBIG, as
	 * with ENOSPC): no update and no read fails for it; the layers the file
	 * cannot take stay in memory over the budget, said once; every layer
	 * reads as last updated, with the disk full and once there is space
	 * again: none was lost. */
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit full = { 1 << 20, RLIM_INFINITY }, room = { RLIM_INFINITY, RLIM_INFINITY };
		signal(SIGXFSZ, SIG_IGN);
		options(&o, budget);
		o.log = count_full;
		if (setrlimit(RLIMIT_FSIZE, &full) < 0 || wsp_open(m.pack, &o, &pg, err, sizeof(err)) < 0)
			_exit(2);
		for (uint32_t l = 0; l < n; l++)
			if (update(pg, l, 1, -1, buf) < 0) {
				printf("update of layer %u with a full disk: %s\n", l, wsp_errmsg(pg));
				_exit(5);
			}
		if (wsp_get_stats(pg, &st) < 0 || st.updated_resident <= budget || full_notices != 1)
			_exit(6);
		printf("disk full: %" PRIu64 " KiB of updated layers in memory (budget %" PRIu64
		       " KiB), %u notice\n", st.updated_resident >> 10, budget >> 10, full_notices);
		fflush(stdout);
		for (uint32_t k = 0; k < n; k++)
			if (reads_as(pg, k, 1, -1, 0, want, other) < 0) {
				printf("read of layer %u with a full disk: %s\n", k, wsp_errmsg(pg));
				_exit(7);
			}
		if (setrlimit(RLIMIT_FSIZE, &room) < 0)
			_exit(2);
		for (uint32_t k = 0; k < n; k++)
			if (reads_as(pg, k, 1, -1, 0, want, other) < 0)
				_exit(8);
		wsp_close(pg);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(t_entries(ovf) == 0);

	free(buf);
	free(want);
	free(other);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
