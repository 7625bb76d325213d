/* RELIABILITY item 6 and the reference's conventions: what must be accepted.
 * Empty tensors, rank-0 scalars, zero dimensions, space padding, every
 * dtype; header kept verbatim, key order and metadata preserved. */
#include <fcntl.h>
#include <sys/stat.h>

#include "sthelp.h"

static struct wspi_err err;

static void edge_cases(void)
{
	struct st_file f;
	/* No tensors at all, as the reference writes it (padded to 8). */
	EXPECT_ACCEPT("{}      ", 0, &f);
	CHECK(f.n_tensors == 0 && f.metadata_json == NULL && f.header_len == 8);
	st_file_free(&f);
	/* Rank-0 scalar, zero dimensions, an empty tensor sharing an offset. */
	EXPECT_ACCEPT("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"caf\xc3\xa9\"},"
		      "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
		      "\"zero\":{\"dtype\":\"F32\",\"shape\":[3,0,5],\"data_offsets\":[4,4]},"
		      "\"empty\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[4,4]},"
		      "\"last\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[4,12]}}   ",
		      12, &f);
	CHECK(f.n_tensors == 4);
	/* Sorted by offsets; key_order keeps the header text order. */
	CHECK(!strcmp(f.tensors[0].name, "scalar") && f.tensors[0].rank == 0);
	CHECK(f.tensors[0].key_order == 0 && f.tensors[0].dtype == WSP_DTYPE_F32);
	CHECK(!strcmp(f.tensors[1].name, "zero") && f.tensors[1].key_order == 1);
	CHECK(f.tensors[1].rank == 3 && f.tensors[1].shape[1] == 0);
	CHECK(!strcmp(f.tensors[2].name, "empty") && f.tensors[2].key_order == 2);
	CHECK(!strcmp(f.tensors[3].name, "last") && f.tensors[3].key_order == 3);
	CHECK(f.tensors[3].begin == 4 && f.tensors[3].end == 12);
	CHECK(f.metadata_json && !strcmp(f.metadata_json, "{\"format\":\"pt\",\"note\":\"caf\xc3\xa9\"}"));
	CHECK(f.header[f.header_len] == '\0' && f.header[f.header_len - 1] == ' ');
	CHECK(!strncmp(f.header, "{\"__metadata__\"", 15));
	st_file_free(&f);
	/* Keys in an order unrelated to the data order. */
	EXPECT_ACCEPT("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
		      "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 4, &f);
	CHECK(!strcmp(f.tensors[0].name, "a") && f.tensors[0].key_order == 1);
	CHECK(!strcmp(f.tensors[1].name, "b") && f.tensors[1].key_order == 0);
	st_file_free(&f);
	/* Unknown fields inside an entry are ignored, as the reference does. */
	EXPECT_ACCEPT("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"x\":1}}", 2, &f);
	st_file_free(&f);
	/* Every dtype, including sub-byte ones that fill whole bytes. */
	for (int dt = 0; dt < WSP_DTYPE_COUNT; dt++) {
		char h[256];
		uint64_t shape = 12, bytes = shape * wsp_dtype_bits(dt) / 8;
		snprintf(h, sizeof(h), "{\"t\":{\"dtype\":\"%s\",\"shape\":[3,4],\"data_offsets\":[0,%llu]}}",
			 wsp_dtype_name(dt), (unsigned long long)bytes);
		EXPECT_ACCEPT(h, bytes, &f);
		CHECK(f.tensors[0].dtype == dt);
		st_file_free(&f);
	}
	st_file_free(NULL);
}

static void from_file(void)
{
	const char *dir = t_scratch("staccept");
	char path[600];
	snprintf(path, sizeof(path), "%s/m.safetensors", dir);
	const char *h = "{\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
	size_t len;
	unsigned char *b = st_image(h, strlen(h), 3, &len);
	FILE *fp = fopen(path, "wb");
	CHECK(fp && fwrite(b, 1, len, fp) == len && fclose(fp) == 0);
	struct st_file f;
	CHECK_RC(st_open(path, &f, &err), 0);
	CHECK(f.file_size == len && f.header_len == strlen(h) && !strcmp(f.path, path));
	CHECK(!memcmp(f.header, h, strlen(h)));
	st_file_free(&f);
	/* Truncated on disk: the data section no longer matches. */
	CHECK(truncate(path, (off_t)len - 1) == 0);
	CHECK_RC(st_open(path, &f, &err), WSP_EFORMAT);
	CHECK(strstr(err.msg, path));
	/* Huge length prefix on disk: refused before allocating. */
	memset(b, 0xff, 8);
	fp = fopen(path, "wb");
	CHECK(fp && fwrite(b, 1, len, fp) == len && fclose(fp) == 0);
	CHECK_RC(st_open(path, &f, &err), WSP_ETOOBIG);
	CHECK(strstr(err.msg, path));
	/* Missing file, directory. */
	snprintf(path, sizeof(path), "%s/none.safetensors", dir);
	CHECK_RC(st_open(path, &f, &err), -ENOENT);
	CHECK(strstr(err.msg, path));
	CHECK_RC(st_open(dir, &f, &err), -EINVAL);
	free(b);
	t_rmrf(dir);
}

int main(void)
{
	wspi_err_init(&err);
	edge_cases();
	from_file();
	wspi_err_destroy(&err);
	return 0;
}
