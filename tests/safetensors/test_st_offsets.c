/* RELIABILITY items 3 and 10: data offsets must tile the data section
 * exactly: no reversed range, overlap, gap, range past the end, or trailing
 * bytes; running ends never wrap. */
#include "sthelp.h"

static struct wspi_err err;

int main(void)
{
	wspi_err_init(&err);
	/* Reversed. */
	EXPECT_REJECT("{\"r\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}", 4,
		      WSP_EFORMAT, "'r'");
	/* Past the end of the file. */
	EXPECT_REJECT("{\"p\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 4,
		      WSP_EFORMAT, "'p'");
	/* Overlapping. */
	EXPECT_REJECT("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6,
		      WSP_EFORMAT, "'b'");
	/* Same range twice. */
	EXPECT_REJECT("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
		      WSP_EFORMAT, "overlap");
	/* Gap between tensors, and before the first. */
	EXPECT_REJECT("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[5,9]}}", 9,
		      WSP_EFORMAT, "'b'");
	EXPECT_REJECT("{\"g\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1,5]}}", 5,
		      WSP_EFORMAT, "'g'");
	/* Trailing bytes after the last tensor; data with no tensors. */
	EXPECT_REJECT("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 5,
		      WSP_EFORMAT, "trailing");
	EXPECT_REJECT("{}      ", 3, WSP_EFORMAT, "trailing");
	/* 10: offsets near 2^63 never wrap a running sum. */
	EXPECT_REJECT("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":"
		      "[9223372036854775807,9223372036854775807]}}", 4, WSP_EFORMAT, "'b'");
	EXPECT_REJECT("{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775799],\"data_offsets\":"
		      "[8,9223372036854775807]}}", 8, WSP_EFORMAT, "'a'");
	/* With the file size unknown, contiguity is still checked. */
	{
		const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
				"\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[5,9]}}";
		size_t len;
		unsigned char *b = st_image(h, strlen(h), 0, &len);
		struct st_file f;
		CHECK_RC(st_parse_named(ST_NAME, b, len, UINT64_MAX, &f, &err), WSP_EFORMAT);
		const char *ok = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
		free(b);
		b = st_image(ok, strlen(ok), 0, &len);
		CHECK_RC(st_parse_named(ST_NAME, b, len, UINT64_MAX, &f, &err), 0);
		CHECK(f.n_tensors == 1 && f.file_size == UINT64_MAX);
		st_file_free(&f);
		free(b);
	}
	wspi_err_destroy(&err);
	return 0;
}
