/* Small packs for tests (see testpack.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack/writer.h"
#include "testpack.h"

static uint64_t splitmix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);   /* round to nearest even */
}

void t_expected_tensor(const struct t_pack_spec *spec, uint32_t t, void *buf, uint64_t bytes)
{
	unsigned char *p = buf;

	if (spec->compressible && bytes % 2 == 0) {
		/* Irwin-Hall(4) approximates a Gaussian; std 0.02 like trained
		 * weights, so the exponent bytes repeat and zstd has work. */
		for (uint64_t i = 0; i < bytes / 2; i++) {
			uint64_t r = splitmix(((uint64_t)t << 40) ^ i ^ 0x5eedull);
			double s = 0;
			for (int k = 0; k < 4; k++)
				s += (double)((r >> (16 * k)) & 0xffff) / 65536.0;
			uint16_t v = to_bf16((float)((s - 2.0) * sqrt(3.0) * 0.02));
			memcpy(p + 2 * i, &v, 2);
		}
		return;
	}
	for (uint64_t off = 0; off < bytes; off += 8) {
		uint64_t w = ((uint64_t)t << 40) | (off / 8);
		uint64_t n = bytes - off < 8 ? bytes - off : 8;
		memcpy(p + off, &w, n);   /* little-endian words, the tail cut */
	}
}

int t_check_tensor(const struct t_pack_spec *spec, uint32_t t, const void *data, uint64_t bytes)
{
	unsigned char *want = malloc(bytes ? bytes : 1);
	const unsigned char *got = data;
	int rc = 0;

	if (!want) {
		fprintf(stderr, "t_check_tensor: out of memory\n");
		return 1;
	}
	t_expected_tensor(spec, t, want, bytes);
	for (uint64_t i = 0; i < bytes; i++)
		if (want[i] != got[i]) {
			fprintf(stderr, "tensor %u: byte %llu is 0x%02x, want 0x%02x\n", t,
				(unsigned long long)i, got[i], want[i]);
			rc = 1;
			break;
		}
	free(want);
	return rc;
}

int t_make_pack(const char *dir, const struct t_pack_spec *spec)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	uint32_t n = spec->layers * spec->tensors_per_layer;
	uint64_t bytes = spec->tensor_bytes;
	void **bufs = calloc(n ? n : 1, sizeof(*bufs));
	int rc;

	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	opt.codec = spec->codec;
	if (spec->chunk_bytes)
		opt.chunk_bytes = spec->chunk_bytes;
	if (spec->shard_bytes)
		opt.shard_bytes = spec->shard_bytes;
	opt.threads = 2;
	rc = bufs ? pack_writer_create(dir, &opt, &pw, &err) : -1;
	if (rc < 0) {
		fprintf(stderr, "t_make_pack %s: %s\n", dir, err.msg);
		exit(1);
	}
	for (uint32_t l = 0; l < spec->layers; l++)
		for (uint32_t k = 0; k < spec->tensors_per_layer; k++) {
			uint32_t t = l * spec->tensors_per_layer + k;
			char name[64];
			uint64_t shape;
			int dtype;
			if (spec->compressible && bytes % 2 == 0) {
				dtype = WSP_DTYPE_BF16;
				shape = bytes / 2;
			} else if (bytes % 8 == 0) {
				dtype = WSP_DTYPE_U64;
				shape = bytes / 8;
			} else {
				dtype = WSP_DTYPE_U8;
				shape = bytes;
			}
			bufs[t] = malloc(bytes ? bytes : 1);
			if (!bufs[t]) {
				fprintf(stderr, "t_make_pack: out of memory\n");
				exit(1);
			}
			t_expected_tensor(spec, t, bufs[t], bytes);
			snprintf(name, sizeof(name), "model.layers.%u.w%u", l, k);
			rc = pack_writer_add_tensor(pw, name, NULL, dtype, 1, &shape, bufs[t], bytes,
						    0, 0, k);
			if (rc < 0) {
				fprintf(stderr, "t_make_pack %s: %s\n", dir, err.msg);
				exit(1);
			}
		}
	rc = pack_writer_finish(pw);
	if (rc < 0) {
		fprintf(stderr, "t_make_pack %s: finish: %s\n", dir, err.msg);
		exit(1);
	}
	pack_writer_free(pw);
	for (uint32_t t = 0; t < n; t++)
		free(bufs[t]);
	free(bufs);
	wspi_err_destroy(&err);
	return 0;
}
