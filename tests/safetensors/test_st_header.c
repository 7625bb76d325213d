/* RELIABILITY items 1, 2 and 9 (header size): the length prefix and the JSON
 * text of a safetensors header. */
#include "sthelp.h"

static struct wspi_err err;

static void length_prefix(void)
{
	unsigned char b[16] = {0};
	struct st_file f;
	/* 1: huge length: refused before anything is allocated. */
	memset(b, 0xff, 8);
	CHECK_RC(st_parse_named(ST_NAME, b, sizeof(b), sizeof(b), &f, &err), WSP_ETOOBIG);
	CHECK(strstr(err.msg, ST_NAME));
	uint64_t n = ST_MAX_HEADER + 1;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(n >> (8 * i));
	CHECK_RC(st_parse_named(ST_NAME, b, sizeof(b), UINT64_MAX, &f, &err), WSP_ETOOBIG);
	/* 1: within the cap but larger than the file. */
	memset(b, 0, 8);
	b[0] = 9;
	CHECK_RC(st_parse_named(ST_NAME, b, sizeof(b), sizeof(b), &f, &err), WSP_EFORMAT);
	CHECK(strstr(err.msg, ST_NAME) && strstr(err.msg, "larger than the file"));
	/* Header cut short in the buffer (only the prefix at hand). */
	b[0] = 100;
	CHECK_RC(st_parse_named(ST_NAME, b, sizeof(b), UINT64_MAX, &f, &err), WSP_EFORMAT);
	/* Shorter than the prefix itself. */
	CHECK_RC(st_parse_named(ST_NAME, b, 7, 7, &f, &err), WSP_EFORMAT);
	CHECK_RC(st_parse_named(ST_NAME, b, 0, 0, &f, &err), WSP_EFORMAT);
	/* Zero-length header is not a JSON object. */
	memset(b, 0, 8);
	CHECK_RC(st_parse_named(ST_NAME, b, 8, 8, &f, &err), WSP_EFORMAT);
}

static void json_text(void)
{
	/* 2: not JSON, not an object, not UTF-8, duplicate keys. */
	EXPECT_REJECT("{\"a\":", 0, WSP_EFORMAT, "not valid JSON");
	EXPECT_REJECT("[1,2,3]", 0, WSP_EFORMAT, "does not start with");
	EXPECT_REJECT("  {}    ", 0, WSP_EFORMAT, "does not start with");
	EXPECT_REJECT("{} trailing", 0, WSP_EFORMAT, "not valid JSON");
	EXPECT_REJECT("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		      "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
		      2, WSP_EFORMAT, "duplicate");
	EXPECT_REJECT("{\"caf\xc3\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
		      WSP_EFORMAT, "not valid JSON");
	EXPECT_REJECT("{\"\xff\xfe\":{}}", 0, WSP_EFORMAT, NULL);
	/* A NUL byte inside the header text. */
	{
		static const char h[] = "{}\0     ";
		struct st_file f;
		CHECK_RC(st_try_len(h, 8, 0, &err, &f), WSP_EFORMAT);
		CHECK(strstr(err.msg, ST_NAME));
	}
	/* Tensor entries of the wrong kind. */
	EXPECT_REJECT("{\"w\":5}", 0, WSP_EFORMAT, "'w'");
	EXPECT_REJECT("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, WSP_EFORMAT, "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1,
		      WSP_EFORMAT, "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, WSP_EFORMAT,
		      "'w'");
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
		      WSP_EFORMAT, "'w'");
	/* __metadata__ must be an object of strings (the reference's rule). */
	EXPECT_REJECT("{\"__metadata__\":[\"pt\"]}", 0, WSP_EFORMAT, "__metadata__");
	EXPECT_REJECT("{\"__metadata__\":{\"format\":1}}", 0, WSP_EFORMAT, "format");
	EXPECT_REJECT("{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}", 0, WSP_EFORMAT, "duplicate");
	/* Deep nesting is bounded by jansson, not by the stack. */
	{
		char deep[8192];
		size_t k = 0;
		deep[k++] = '{';
		deep[k++] = '"';
		deep[k++] = 'x';
		deep[k++] = '"';
		deep[k++] = ':';
		while (k < 4000)
			deep[k++] = '[';
		deep[k] = '\0';
		struct st_file f;
		CHECK_RC(st_try(deep, 0, &err, &f), WSP_EFORMAT);
	}
}

static void big_counts(void)
{
	/* 9: a header just under the cap with many tiny keys still parses or is
	 * refused cleanly; here: rank above the limit. */
	EXPECT_REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
		      1, WSP_ETOOBIG, "'w'");
}

int main(void)
{
	wspi_err_init(&err);
	length_prefix();
	json_text();
	big_counts();
	wspi_err_destroy(&err);
	return 0;
}
