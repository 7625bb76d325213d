/* wsp_pack_measure_decode: decodes exactly the chosen whole layers (all, or
 * those within the limit), reports their tensor bytes and a time, and a
 * damaged chunk fails with the checksum or zstd code and a message naming
 * shard, layer, tensor and chunk (the lowest damaged chunk, whatever the
 * thread count). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack/pack.h"
#include "testlib.h"
#include "testpack.h"
#include "wspager.h"

/* Tensor bytes of layers [0, n). */
static uint64_t raw_of(const wsp_pack *pk, uint32_t n)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct wsp_layer *l = wsp_pack_layer(pk, i);
		for (uint32_t k = 0; k < l->n_tensors; k++)
			sum += l->tensors[k].bytes;
	}
	return sum;
}

/* Flip one byte in the middle of chunk `c` of tensor `name`; returns the
 * shard path it is in. */
static void flip_chunk(const char *dir, wsp_pack *pk, const char *name, uint64_t c, char *path,
		       size_t len)
{
	const struct wsp_tensor *t = wsp_pack_find_tensor(pk, name);
	CHECK(t);
	const struct wspi_manifest *m = &pk->m;
	const struct wspm_tensor *mt = &m->tensors[t - pk->tensors];
	CHECK(c < mt->n_chunks);
	const struct wspm_chunk *ch = &m->chunks[mt->first_chunk + c];
	snprintf(path, len, "%s/shard-%05u.wsd", dir, m->layers[t->layer].shard);
	int fd = open(path, O_RDWR);
	unsigned char b;
	off_t at = (off_t)(ch->offset + ch->stored_bytes / 2);
	CHECK(fd >= 0 && pread(fd, &b, 1, at) == 1);
	b ^= 0x10;
	CHECK(pwrite(fd, &b, 1, at) == 1);
	close(fd);
}

static void expect_named(const wsp_pack *pk, const char *shard, const char *layer,
			 const char *tensor, const char *chunk)
{
	const char *e = wsp_pack_errmsg(pk);
	const char *base = strrchr(shard, '/') + 1;
	if (!strstr(e, base) || !strstr(e, layer) || !strstr(e, tensor) || !strstr(e, chunk)) {
		fprintf(stderr, "message \"%s\" lacks %s / %s / %s / %s\n", e, base, layer, tensor,
			chunk);
		exit(1);
	}
}

static void run_case(const char *tmp, const char *tag, const struct t_pack_spec *spec, int zstd)
{
	char dir[700], msg[512], shard[800];
	uint64_t raw, ns;
	wsp_pack *pk;

	snprintf(dir, sizeof(dir), "%s/%s", tmp, tag);
	t_make_pack(dir, spec);
	CHECK_RC(wsp_pack_open(dir, &pk, msg, sizeof(msg)), 0);
	uint32_t nl = spec->layers;

	/* everything, with one worker, a few, and all cores */
	unsigned thr[] = { 1, 3, 0 };
	for (unsigned i = 0; i < 3; i++) {
		raw = ns = 0;
		CHECK_RC(wsp_pack_measure_decode(pk, thr[i], 0, &raw, &ns), 0);
		CHECK(raw == raw_of(pk, nl));
		CHECK(ns > 0);
	}

	/* a limit: whole layers whose stored bytes fit, at least one */
	uint64_t two = wsp_pack_layer(pk, 0)->stored_bytes + wsp_pack_layer(pk, 1)->stored_bytes;
	CHECK_RC(wsp_pack_measure_decode(pk, 2, two, &raw, &ns), 0);
	CHECK(raw == raw_of(pk, 2));
	CHECK_RC(wsp_pack_measure_decode(pk, 2, two - 1, &raw, &ns), 0);
	CHECK(raw == raw_of(pk, 1));
	CHECK_RC(wsp_pack_measure_decode(pk, 2, 1, &raw, &ns), 0);
	CHECK(raw == raw_of(pk, 1));

	/* damage layer 3 and layer 1: the lowest is reported whatever the
	 * thread count, and a limit that stops before it does not see it */
	const char *l3 = "model.layers.3.w1", *l1 = "model.layers.1.w0";
	flip_chunk(dir, pk, l3, 1, shard, sizeof(shard));
	int rc = wsp_pack_measure_decode(pk, 4, 0, &raw, &ns);
	CHECK(zstd ? (rc == WSP_ECHECKSUM || rc == WSP_EZSTD) : rc == WSP_ECHECKSUM);
	CHECK(raw == 0 && ns == 0);
	expect_named(pk, shard, "model.layers.3", l3, "chunk 1");
	CHECK_RC(wsp_pack_measure_decode(pk, 4, two, &raw, &ns), 0);
	CHECK(raw == raw_of(pk, 2));

	flip_chunk(dir, pk, l1, 2, shard, sizeof(shard));
	for (unsigned i = 0; i < 3; i++) {
		rc = wsp_pack_measure_decode(pk, thr[i], 0, &raw, &ns);
		CHECK(zstd ? (rc == WSP_ECHECKSUM || rc == WSP_EZSTD) : rc == WSP_ECHECKSUM);
		expect_named(pk, shard, "model.layers.1", l1, "chunk 2");
	}
	/* the same damage, as verify sees it */
	CHECK(wsp_pack_verify(pk, 2, NULL, NULL) < 0);
	CHECK(strstr(wsp_pack_errmsg(pk), l1));

	CHECK_RC(wsp_pack_measure_decode(NULL, 0, 0, &raw, &ns), -EINVAL);
	CHECK_RC(wsp_pack_measure_decode(pk, 0, 0, NULL, &ns), -EINVAL);
	wsp_pack_close(pk);
}

int main(void)
{
	const char *tmp = t_scratch("mdecode");

	/* raw chunks: a flipped byte can only be the chunk checksum */
	struct t_pack_spec raw = { .layers = 5, .tensors_per_layer = 3, .tensor_bytes = 20000,
				   .codec = WSP_CODEC_RAW, .chunk_bytes = 4096,
				   .shard_bytes = 70000 };
	run_case(tmp, "raw", &raw, 0);

	/* zstd with the bf16 transform: zstd or the checksum catches it */
	struct t_pack_spec z = { .layers = 5, .tensors_per_layer = 3, .tensor_bytes = 40000,
				 .compressible = 1, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 8192 };
	run_case(tmp, "zstd", &z, 1);

	t_rmrf(tmp);
	return 0;
}
