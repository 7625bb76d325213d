/* safetensors -> wsp_convert -> pack -> wsp_pack_unpack gives back the input
 * files byte for byte (header text, key order, __metadata__, data), for one
 * file and for a directory with an index; the output rules hold for unpack. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testlib.h"
#include "wspager.h"

static void write_st(const char *path, const char *json, const unsigned char *data, size_t n)
{
	size_t hl = strlen(json), pad = (8 - hl % 8) % 8;
	uint64_t len = hl + pad;
	FILE *f = fopen(path, "wb");
	CHECK(f);
	CHECK(fwrite(&len, 8, 1, f) == 1);
	CHECK(fwrite(json, 1, hl, f) == hl);
	for (size_t i = 0; i < pad; i++)
		fputc(' ', f);
	CHECK(n == 0 || fwrite(data, 1, n, f) == n);
	fclose(f);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	CHECK(f && fputs(text, f) >= 0);
	fclose(f);
}

static int same_file(const char *a, const char *b)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "cmp '%s' '%s'", a, b);
	return system(cmd) == 0;
}

static int stop_now(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)done;
	(void)total;
	return 1;
}

static const char *shrink_path;
static int shrink_input(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)done;
	(void)total;
	if (shrink_path) {
		CHECK(truncate(shrink_path, 100) == 0);
		shrink_path = NULL;
	}
	return 0;
}

int main(void)
{
	const char *top = t_scratch("unpack");
	char in[700], pack[700], out[700], a[800], b[800], msg[512];
	unsigned char data[4096 + 64];
	wsp_pack *pk;
	struct wsp_convert_options opt;
	struct wsp_pack_summary s;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 131 + (i >> 7));
	snprintf(in, sizeof(in), "%s/in", top);
	CHECK(mkdir(in, 0755) == 0);
	/* one file: keys not in data order, metadata, a rank-0 and an empty tensor */
	snprintf(a, sizeof(a), "%s/model.safetensors", in);
	write_st(a,
		 "{\"model.layers.1.w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]},"
		 "\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
		 "\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"model.layers.0.scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[14,18]},"
		 "\"model.layers.0.none\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[18,18]},"
		 "\"model.layers.0.big\":{\"dtype\":\"U8\",\"shape\":[4096],\"data_offsets\":[18,4114]}}",
		 data, 4114);

	wsp_convert_options_init(&opt);
	opt.chunk_bytes = 1024;
	opt.threads = 2;
	snprintf(pack, sizeof(pack), "%s/p1", top);
	const char *inputs[] = { a };
	CHECK_RC(wsp_convert(inputs, 1, pack, &opt, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_convert(inputs, 1, pack, &opt, msg, sizeof(msg)), WSP_EEXIST);
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	CHECK(s.n_sources == 1 && s.n_tensors == 5 && s.n_layers == 3);
	CHECK(s.metadata_json && !strcmp(s.metadata_json, "{\"format\":\"pt\",\"note\":\"x\"}"));
	CHECK(!strcmp(wsp_pack_layer(pk, 0)->name, "model.embed_tokens"));
	CHECK(!strcmp(wsp_pack_layer(pk, 1)->name, "model.layers.0"));
	const struct wsp_tensor *t = wsp_pack_find_tensor(pk, "model.layers.0.big");
	CHECK(t && t->bytes == 4096 && wsp_checksum64(data + 18, 4096) == t->checksum);
	CHECK_RC(wsp_pack_verify(pk, 0, NULL, NULL), 0);

	snprintf(out, sizeof(out), "%s/out1", top);
	CHECK_RC(wsp_pack_unpack(pk, out, 0, NULL, NULL), 0);
	snprintf(b, sizeof(b), "%s/model.safetensors", out);
	CHECK(same_file(a, b));
	CHECK_RC(wsp_pack_unpack(pk, out, 0, NULL, NULL), WSP_EEXIST);
	CHECK(strstr(wsp_pack_errmsg(pk), out));
	unlink(b);
	CHECK_RC(wsp_pack_unpack(pk, out, WSP_UNPACK_FORCE, NULL, NULL), 0);
	CHECK(same_file(a, b));
	wsp_pack_close(pk);

	/* a directory of two shards and an index, converted as a directory */
	char dir[720], s1[800], s2[800], idx[800];
	snprintf(dir, sizeof(dir), "%s/sharded", top);
	CHECK(mkdir(dir, 0755) == 0);
	snprintf(s1, sizeof(s1), "%s/model-00001-of-00002.safetensors", dir);
	snprintf(s2, sizeof(s2), "%s/model-00002-of-00002.safetensors", dir);
	snprintf(idx, sizeof(idx), "%s/model.safetensors.index.json", dir);
	write_st(s1,
		 "{\"__metadata__\":{\"format\":\"pt\"},"
		 "\"model.layers.0.a\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
		 "\"model.layers.1.a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[12,18]}}",
		 data, 18);
	write_st(s2,
		 "{\"model.layers.1.b\":{\"dtype\":\"I64\",\"shape\":[300],\"data_offsets\":[0,2400]},"
		 "\"lm_head.weight\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[2400,2410]}}",
		 data + 100, 2410);
	write_text(idx, "{\n  \"metadata\": {\"total_size\": 2428},\n  \"weight_map\": {\n"
			"    \"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n"
			"    \"model.layers.0.a\": \"model-00001-of-00002.safetensors\",\n"
			"    \"model.layers.1.a\": \"model-00001-of-00002.safetensors\",\n"
			"    \"model.layers.1.b\": \"model-00002-of-00002.safetensors\"\n  }\n}\n");
	snprintf(pack, sizeof(pack), "%s/p2", top);
	const char *dinputs[] = { dir };
	CHECK_RC(wsp_convert(dinputs, 1, pack, &opt, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	CHECK(s.n_sources == 2 && s.n_tensors == 4);
	CHECK(wsp_pack_find_layer(pk, "model.layers.1")->n_tensors == 2);
	snprintf(out, sizeof(out), "%s/out2", top);
	/* a cancelled unpack leaves neither output nor temporaries */
	CHECK_RC(wsp_pack_unpack(pk, out, 0, stop_now, NULL), -ECANCELED);
	CHECK(access(out, F_OK) != 0);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "ls -d '%s'/out2* 2>/dev/null | grep -q .", top);
	CHECK(system(cmd) != 0);
	CHECK_RC(wsp_pack_unpack(pk, out, 0, NULL, NULL), 0);
	snprintf(b, sizeof(b), "%s/model-00001-of-00002.safetensors", out);
	CHECK(same_file(s1, b));
	snprintf(b, sizeof(b), "%s/model-00002-of-00002.safetensors", out);
	CHECK(same_file(s2, b));
	snprintf(b, sizeof(b), "%s/model.safetensors.index.json", out);
	CHECK(same_file(idx, b));
	wsp_pack_close(pk);

	/* errors name the input */
	snprintf(a, sizeof(a), "%s/missing.safetensors", in);
	const char *bad[] = { a };
	snprintf(pack, sizeof(pack), "%s/p3", top);
	CHECK(wsp_convert(bad, 1, pack, &opt, msg, sizeof(msg)) < 0);
	CHECK(strstr(msg, "missing.safetensors"));
	CHECK(access(pack, F_OK) != 0);
	/* an input that shrinks while it is converted: a clear error naming
	 * it (reads are preads: no SIGBUS), and no output */
	static unsigned char big[65536];
	snprintf(a, sizeof(a), "%s/shrinks.safetensors", in);
	write_st(a, "{\"model.layers.0.w\":{\"dtype\":\"U8\",\"shape\":[65536],"
		    "\"data_offsets\":[0,65536]}}", big, sizeof(big));
	const char *sh[] = { a };
	shrink_path = a;
	opt.threads = 1;
	opt.progress = shrink_input;
	CHECK_RC(wsp_convert(sh, 1, pack, &opt, msg, sizeof(msg)), WSP_EFORMAT);
	CHECK(strstr(msg, "shrinks.safetensors") && strstr(msg, "short read"));
	CHECK(access(pack, F_OK) != 0);
	snprintf(cmd, sizeof(cmd), "ls -d '%s'/p3* 2>/dev/null | grep -q .", top);
	CHECK(system(cmd) != 0);
	t_rmrf(top);
	return 0;
}
