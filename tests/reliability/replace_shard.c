/*
 * A shard replaced while a pager has it open (item 15): garbage of the same
 * size is renamed over shard-00000.wsd between passes.  The pager keeps
 * reading through the descriptor it opened, i.e. the old file, so later
 * passes (which must go back to disk: the host tier holds a third of the
 * pack) still verify every tensor.  A pager opened afterwards sees the new
 * file: the open succeeds (the size matches the manifest) but acquiring a
 * layer fails with the error of a corrupt chunk naming the shard: a
 * checksum error, or the codec's own (zstd's, or a malformed exprans
 * stream: WSP_EFORMAT).
 * Both the pread and the io_uring backends; io_uring is skipped with a note
 * where the kernel refuses it.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#include "rel.h"

static void log_note(void *ctx, const char *msg)
{
	(void)ctx;
	fprintf(stderr, "notice: %s\n", msg);
}

/* Same-sized garbage written beside `shard`, then renamed over it. */
static void replace_with_garbage(const char *shard, uint64_t seed)
{
	char tmp[1300];
	struct stat st;
	CHECK(stat(shard, &st) == 0);
	snprintf(tmp, sizeof(tmp), "%s.new", shard);
	FILE *f = fopen(tmp, "wbe");
	CHECK(f != NULL);
	uint64_t x = seed | 1;
	for (off_t i = 0; i < st.st_size; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t n = st.st_size - i < 8 ? (size_t)(st.st_size - i) : 8;
		CHECK(fwrite(&x, 1, n, f) == n);
	}
	CHECK(fclose(f) == 0);
	CHECK(rename(tmp, shard) == 0);
}

static wsp_pager *open_pager(const char *pack, enum wsp_io_backend io, uint64_t budget,
			     int *refused)
{
	struct wsp_options opt;
	wsp_options_init(&opt);
	opt.device = WSP_DEVICE_HOST;
	opt.io = io;
	opt.host_cache_bytes = budget;
	opt.decode_threads = 2;
	opt.log = log_note;
	char err[1024];
	wsp_pager *pg = NULL;
	int rc = wsp_open(pack, &opt, &pg, err, sizeof(err));
	if (io == WSP_IO_URING && (rc == -EPERM || rc == -ENOSYS || rc == -EACCES)) {
		fprintf(stderr, "note: io_uring refused here (%s): uring case skipped\n", err);
		*refused = 1;
		return NULL;
	}
	if (rc < 0) {
		fprintf(stderr, "wsp_open: %s\n", err);
		exit(1);
	}
	return pg;
}

/* Returns 1 when the backend ran, 0 when it was refused. */
static int run_case(const char *dir, enum wsp_io_backend io, const char *name)
{
	char pack[1024], shard[1200];
	snprintf(pack, sizeof(pack), "%s/%s.wsp", dir, name);
	snprintf(shard, sizeof(shard), "%s/shard-00000.wsd", pack);
	rel_make_pack(dir, pack, 6, 512, 1408, 4096);

	wsp_pack *pk;
	char err[512];
	CHECK_RC(wsp_pack_open(pack, &pk, err, sizeof(err)), 0);
	struct wsp_pack_summary s;
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	wsp_pack_close(pk);
	CHECK(s.n_shards == 1);   /* every layer lives in the replaced shard */

	int refused = 0;
	wsp_pager *pg = open_pager(pack, io, s.raw_bytes / 3, &refused);
	if (!pg)
		return 0;
	uint64_t verified = 0;
	for (uint32_t l = 0; l < s.n_layers; l++)
		verified += rel_check_layer(pg, l);
	CHECK(verified == s.raw_bytes);
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	uint64_t read_before = st.bytes_read;

	replace_with_garbage(shard, 0x9e3779b97f4a7c15ull);
	verified = 0;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < s.n_layers; l++)
			verified += rel_check_layer(pg, l);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("%s: after the rename, 2 passes verified %" PRIu64 " bytes, %" PRIu64
	       " bytes read from disk (the old file, through the open descriptor; pack %" PRIu64
	       " bytes stored)\n", name, verified, st.bytes_read - read_before, s.stored_bytes);
	CHECK(verified == 2 * s.raw_bytes);
	/* the host tier holds a third of the pack: the passes went to disk
	 * (bytes_read counts stored bytes), so the old file was really read */
	CHECK(st.bytes_read - read_before >= s.stored_bytes);
	wsp_close(pg);

	/* A new pager opens the new file: same size, so the open succeeds... */
	pg = open_pager(pack, io, s.raw_bytes / 3, &refused);
	CHECK(pg != NULL);
	const struct wsp_layer *L;
	int rc = wsp_acquire(pg, 0, NULL, &L);
	printf("%s: re-opened, acquire of layer 0: %s: %s\n", name, wsp_strerror(rc), wsp_errmsg(pg));
	/* ...but no layer of it decodes */
	CHECK(rc == WSP_ECHECKSUM || rc == WSP_EZSTD || rc == WSP_EFORMAT);
	CHECK(strstr(wsp_errmsg(pg), "shard-00000.wsd") != NULL);
	rc = wsp_acquire(pg, s.n_layers - 1, NULL, &L);
	CHECK(rc == WSP_ECHECKSUM || rc == WSP_EZSTD || rc == WSP_EFORMAT);
	wsp_close(pg);
	return 1;
}

int main(void)
{
	const char *dir = t_scratch("replace");
	char d[600];
	snprintf(d, sizeof(d), "%s", dir);
	run_case(d, WSP_IO_PREAD, "pread");
	run_case(d, WSP_IO_URING, "uring");
	t_rmrf(d);
	return 0;
}
