/* Damaged packs fail with the right code and a message naming the file (and
 * the layer, tensor and chunk for damaged data); nothing short is returned. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack/manifest.h"
#include "testlib.h"
#include "testpack.h"
#include "wspager.h"

static char pack[600];

static void *slurp(const char *path, uint64_t *len)
{
	FILE *f = fopen(path, "rb");
	CHECK(f);
	fseek(f, 0, SEEK_END);
	*len = (uint64_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	void *p = malloc(*len);
	CHECK(fread(p, 1, *len, f) == *len);
	fclose(f);
	return p;
}

static void spit(const char *path, const void *p, uint64_t len)
{
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(p, 1, len, f) == len);
	fclose(f);
}

/* Patch the manifest with `edit`, optionally fixing the checksum, and
 * expect wsp_pack_open to fail with `want` and mention `needle`. */
static void manifest_case(void (*edit)(unsigned char *, uint64_t *), int fix_sum, int want,
			  const char *needle)
{
	char path[700], msg[512];
	uint64_t len;
	wsp_pack *pk = (wsp_pack *)1;

	snprintf(path, sizeof(path), "%s/%s", pack, WSPM_FILE);
	unsigned char *orig = slurp(path, &len);
	unsigned char *m = malloc(len);
	memcpy(m, orig, len);
	uint64_t n = len;
	edit(m, &n);
	if (fix_sum && n >= sizeof(struct wspm_header)) {
		uint64_t sum = wspm_checksum(m, n);
		memcpy(m + offsetof(struct wspm_header, checksum), &sum, 8);
	}
	spit(path, m, n);
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), want);
	CHECK(pk == NULL);
	if (!strstr(msg, needle) || !strstr(msg, WSPM_FILE)) {
		fprintf(stderr, "message \"%s\" lacks \"%s\" or the manifest name\n", msg, needle);
		exit(1);
	}
	spit(path, orig, len);
	free(m);
	free(orig);
}

static struct wspm_header *H(unsigned char *m)
{
	return (struct wspm_header *)m;
}
static void flip_table_byte(unsigned char *m, uint64_t *n)
{
	m[H(m)->tensors_off + 3] ^= 0x40;
	(void)n;
}
static void bad_magic(unsigned char *m, uint64_t *n)
{
	m[0] = 'X';
	(void)n;
}
static void version99(unsigned char *m, uint64_t *n)
{
	H(m)->version = 99;
	(void)n;
}
static void truncate_it(unsigned char *m, uint64_t *n)
{
	(void)m;
	*n -= 9;
}
static void layer_misaligned(unsigned char *m, uint64_t *n)
{
	struct wspm_layer *l = (void *)(m + H(m)->layers_off);
	l[1].offset += 8;
	(void)n;
}
static void chunk_gap(unsigned char *m, uint64_t *n)
{
	struct wspm_chunk *c = (void *)(m + H(m)->chunks_off);
	c[1].offset += 1;
	(void)n;
}
static void tensor_huge(unsigned char *m, uint64_t *n)
{
	H(m)->n_tensors = 0xffffffffu;
	(void)n;
}
static void bad_dtype(unsigned char *m, uint64_t *n)
{
	struct wspm_tensor *t = (void *)(m + H(m)->tensors_off);
	t[2].dtype = 200;
	(void)n;
}
static void name_unterminated(unsigned char *m, uint64_t *n)
{
	/* make the last string run into the end of the table */
	m[H(m)->strings_off + H(m)->strings_size - 1] = 'x';
	(void)n;
}

int main(void)
{
	struct t_pack_spec spec = { .layers = 3, .tensors_per_layer = 3, .tensor_bytes = 20000,
				    .codec = WSP_CODEC_RAW, .chunk_bytes = 8192,
				    .shard_bytes = 70000 };
	char path[700], msg[512];
	wsp_pack *pk;
	const char *tmp = t_scratch("corrupt");

	snprintf(pack, sizeof(pack), "%s/pack", tmp);
	t_make_pack(pack, &spec);
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), 0);
	wsp_pack_close(pk);

	manifest_case(flip_table_byte, 0, WSP_ECHECKSUM, "checksum");
	manifest_case(bad_magic, 0, WSP_EFORMAT, "magic");
	manifest_case(version99, 1, WSP_EVERSION, "99");
	manifest_case(truncate_it, 0, WSP_EFORMAT, "truncated");
	manifest_case(layer_misaligned, 1, WSP_EFORMAT, "layer 1");
	manifest_case(chunk_gap, 1, WSP_EFORMAT, "chunk 1");
	manifest_case(tensor_huge, 1, WSP_EFORMAT, "tensor table");
	manifest_case(bad_dtype, 1, WSP_EDTYPE, "tensor 2");
	manifest_case(name_unterminated, 1, WSP_EFORMAT, "unterminated");

	/* a shard one page short: refused at open, naming it */
	snprintf(path, sizeof(path), "%s/shard-00001.wsd", pack);
	struct stat st;
	uint64_t slen;
	void *saved = slurp(path, &slen);
	CHECK(stat(path, &st) == 0);
	CHECK(truncate(path, st.st_size - 4096) == 0);
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), WSP_EFORMAT);
	CHECK(strstr(msg, "shard-00001.wsd") && strstr(msg, "truncated"));
	spit(path, saved, slen);

	/* a missing shard */
	char moved[720];
	snprintf(moved, sizeof(moved), "%s.away", path);
	CHECK(rename(path, moved) == 0);
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), -ENOENT);
	CHECK(strstr(msg, "shard-00001.wsd"));
	CHECK(rename(moved, path) == 0);

	/* a shard truncated after open: a read of the layer fails naming it */
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), 0);
	const struct wsp_layer *L = wsp_pack_layer(pk, 1);
	void *buf = malloc(L->raw_bytes);
	CHECK(truncate(path, 4096) == 0);
	CHECK_RC(wsp_pack_read_layer(pk, 1, buf), WSP_EFORMAT);
	CHECK(strstr(wsp_pack_errmsg(pk), "shard-00001.wsd"));
	CHECK(strstr(wsp_pack_errmsg(pk), "short read"));
	spit(path, saved, slen);
	CHECK_RC(wsp_pack_read_layer(pk, 1, buf), 0);

	/* one flipped data byte: the chunk checksum catches it, and the
	 * message names shard, layer, tensor and chunk */
	int fd = open(path, O_RDWR);
	unsigned char b;
	CHECK(fd >= 0 && pread(fd, &b, 1, 9000) == 1);
	b ^= 1;
	CHECK(pwrite(fd, &b, 1, 9000) == 1);
	CHECK_RC(wsp_pack_read_layer(pk, 1, buf), WSP_ECHECKSUM);
	const char *e = wsp_pack_errmsg(pk);
	if (!strstr(e, "shard-00001.wsd") || !strstr(e, "model.layers.1") ||
	    !strstr(e, "model.layers.1.w0") || !strstr(e, "chunk 1")) {
		fprintf(stderr, "message: %s\n", e);
		return 1;
	}
	CHECK_RC(wsp_pack_verify(pk, 2, NULL, NULL), WSP_ECHECKSUM);
	CHECK(strstr(wsp_pack_errmsg(pk), "model.layers.1.w0"));
	b ^= 1;
	CHECK(pwrite(fd, &b, 1, 9000) == 1);
	close(fd);
	CHECK_RC(wsp_pack_verify(pk, 2, NULL, NULL), 0);
	free(buf);
	free(saved);
	wsp_pack_close(pk);
	t_rmrf(tmp);
	return 0;
}
