/* RELIABILITY items 4, 5, 7, 8, 9: each tensor entry (dtype, shape, names). */
#include "sthelp.h"

static struct wspi_err err;

int main(void)
{
	wspi_err_init(&err);
	/* 4: shape x dtype overflows 64 bits. */
	EXPECT_REJECT("{\"big\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
		      "\"data_offsets\":[0,0]}}", 0, WSP_ETOOBIG, "'big'");
	EXPECT_REJECT("{\"big\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
		      "\"data_offsets\":[0,0]}}", 0, WSP_ETOOBIG, "'big'");
	/* Shape entries above int64 are not integers jansson accepts. */
	EXPECT_REJECT("{\"big\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],"
		      "\"data_offsets\":[0,0]}}", 0, WSP_EFORMAT, NULL);
	/* 5: declared range differs from shape x dtype. */
	EXPECT_REJECT("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,15]}}", 15,
		      WSP_EFORMAT, "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
		      WSP_EFORMAT, "'w'");
	/* Shape entries: non-negative integers only. */
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
		      WSP_EFORMAT, "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1,
		      WSP_EFORMAT, "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}}", 1,
		      WSP_EFORMAT, "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,-1]}}", 1,
		      WSP_EFORMAT, "'w'");
	/* 7: unknown dtype, and a dtype name in the wrong case. */
	EXPECT_REJECT("{\"w\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16,
		      WSP_EDTYPE, "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
		      WSP_EDTYPE, "bf16");
	EXPECT_REJECT("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,2]}}", 2, WSP_EFORMAT,
		      "'w'");
	/* Sub-byte dtypes must fill whole bytes. */
	EXPECT_REJECT("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", 1,
		      WSP_EFORMAT, "'w'");
	/* 8: empty, NUL-containing and absurdly long names. */
	EXPECT_REJECT("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
		      WSP_EFORMAT, "empty name");
	EXPECT_REJECT("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
		      WSP_EFORMAT, NULL);
	{
		size_t n = ST_MAX_NAME + 1;
		char *h = malloc(n + 128);
		CHECK(h);
		strcpy(h, "{\"");
		memset(h + 2, 'x', n);
		strcpy(h + 2 + n, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
		EXPECT_REJECT(h, 1, WSP_EFORMAT, "xxxxxxxx");
		/* Exactly at the limit is fine. */
		memmove(h + 2 + n - 1, h + 2 + n, strlen(h + 2 + n) + 1);
		struct st_file f;
		EXPECT_ACCEPT(h, 1, &f);
		CHECK(strlen(f.tensors[0].name) == ST_MAX_NAME);
		st_file_free(&f);
		free(h);
	}
	/* 9: rank above WSP_MAX_RANK. */
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
		      "\"data_offsets\":[0,1]}}", 1, WSP_ETOOBIG, "'w'");
	wspi_err_destroy(&err);
	return 0;
}
