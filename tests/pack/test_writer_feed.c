/* The pack writer's feed (pack_writer_set_feed, pack_writer_push): tensors
 * pushed in pack order, in pieces of odd sizes across chunk boundaries,
 * read back exactly; pushing out of order, a feed that fails, and a feed
 * that ends early each fail finish with their reason and leave no output. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack/writer.h"
#include "testlib.h"
#include "wspager.h"

enum { LAYERS = 3, TENSORS = 2, BYTES = 70001 };   /* each tensor over 4 chunks of 16 KiB */

enum mode { GOOD, OUT_OF_ORDER, FAILS, ENDS_EARLY };

struct feed {
	enum mode mode;
	struct wspi_err *err;
	uint8_t *data[LAYERS * TENSORS];
};

static int feed(void *ctx, struct pack_writer *pw)
{
	struct feed *f = ctx;
	for (uint32_t t = 0; t < LAYERS * TENSORS; t++) {
		if (f->mode == ENDS_EARLY && t == 3)
			return 0;
		if (f->mode == FAILS && t == 2)
			return wspi_err_set_first(f->err, -EIO, "the source broke at tensor %u", t);
		uint32_t which = f->mode == OUT_OF_ORDER && t == 1 ? 2 : t;   /* skips one */
		for (uint64_t off = 0, piece = 1; off < BYTES; off += piece, piece = piece * 3 + 7) {
			uint64_t n = BYTES - off < piece ? BYTES - off : piece;
			int rc = pack_writer_push(pw, which, off, f->data[which] + off, n);
			if (rc < 0)
				return rc;
			piece = n;
		}
	}
	return 0;
}

static int run(const char *dir, enum mode mode, struct feed *f, char *msg, size_t len)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	opt.chunk_bytes = 16384;
	opt.threads = 2;
	f->mode = mode;
	f->err = &err;
	int rc = pack_writer_create(dir, &opt, &pw, &err);
	if (rc == 0)
		rc = pack_writer_set_feed(pw, feed, f);
	for (uint32_t t = 0; t < LAYERS * TENSORS && rc == 0; t++) {
		char name[64];
		uint64_t shape = BYTES;
		snprintf(name, sizeof(name), "model.layers.%u.w%u", t / TENSORS, t % TENSORS);
		rc = pack_writer_add_tensor(pw, name, NULL, WSP_DTYPE_U8, 1, &shape, NULL, BYTES, 0, 0,
					    t % TENSORS);
	}
	if (rc == 0)
		rc = pack_writer_finish(pw);
	wspi_err_copy(&err, msg, len);
	pack_writer_free(pw);
	wspi_err_destroy(&err);
	return rc;
}

int main(void)
{
	const char *root = t_scratch("writer-feed");
	char dir[600], msg[512], err[512];
	struct feed f;
	for (uint32_t t = 0; t < LAYERS * TENSORS; t++) {
		f.data[t] = malloc(BYTES);
		CHECK(f.data[t]);
		for (uint32_t i = 0; i < BYTES; i++)   /* some repeats: zstd shrinks it */
			f.data[t][i] = (uint8_t)((i / 7) * 31 + t);
	}

	snprintf(dir, sizeof(dir), "%s/good.wsp", root);
	CHECK_RC(run(dir, GOOD, &f, msg, sizeof(msg)), 0);
	wsp_pack *pk;
	CHECK_RC(wsp_pack_open(dir, &pk, err, sizeof(err)), 0);
	/* every chunk and tensor decodes to its checksum, which is the pushed
	 * bytes' */
	CHECK_RC(wsp_pack_verify(pk, 0, NULL, NULL), 0);
	for (uint32_t l = 0; l < LAYERS; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, l);
		CHECK(L && L->n_tensors == TENSORS);
		for (uint32_t k = 0; k < TENSORS; k++) {
			char name[64];
			snprintf(name, sizeof(name), "model.layers.%u.w%u", l, k);
			CHECK(strcmp(L->tensors[k].name, name) == 0);
			CHECK(L->tensors[k].checksum == wsp_checksum64(f.data[l * TENSORS + k], BYTES));
		}
	}
	wsp_pack_close(pk);

	static const struct { enum mode mode; int rc; const char *why; } bad[] = {
		{ OUT_OF_ORDER, WSP_ESTATE, "pushed out of the pack's order" },
		{ FAILS, -EIO, "the source broke at tensor 2" },
		{ ENDS_EARLY, WSP_ESTATE, "the feed ended with" },
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(dir, sizeof(dir), "%s/bad%u.wsp", root, i);
		CHECK_RC(run(dir, bad[i].mode, &f, msg, sizeof(msg)), bad[i].rc);
		printf("refused: %s\n", msg);
		CHECK(strstr(msg, bad[i].why) != NULL);
		CHECK(access(dir, F_OK) != 0);   /* no output */
	}
	for (uint32_t t = 0; t < LAYERS * TENSORS; t++)
		free(f.data[t]);
	return 0;
}
