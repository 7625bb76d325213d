/*
 * The tensor-count cap (ST_MAX_TENSORS, item 9): headers of empty tensors,
 * built in memory.  Above the cap the header is refused with WSP_ETOOBIG
 * naming the count, before jansson builds its tree: peak RSS grows by a
 * small multiple of the header, not the ~20x a parse costs.  One member more
 * is allowed for __metadata__.  WSP_ST_COUNT_FULL=1 also parses a header of
 * exactly ST_MAX_TENSORS tensors (accepted; about 1 GB and several seconds,
 * so not by default).
 */
#include <inttypes.h>
#include <stdio.h>

#include "sthelp.h"

/* VmHWM of this process in bytes. */
static uint64_t peak_rss(void)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmHWM:", 6) == 0)
			v = strtoull(line + 6, NULL, 10) * 1024;
	fclose(f);
	return v;
}

/* A file image (length prefix + header, no data) of n empty U8 tensors,
 * with a __metadata__ member first when `meta`.  With `tricky` the names
 * hold what a count without parsing could stumble on: a comma, closing
 * brackets, an escaped quote and an escaped backslash. */
static unsigned char *image(uint32_t n, int meta, int tricky, size_t *len)
{
	const char *entry = tricky ? "\"t%" PRIu32 ",}]\\\"\\\\\":{\"dtype\":\"U8\",\"shape\":[0],"
				     "\"data_offsets\":[0,0]}"
				   : "\"t%" PRIu32 "\":{\"dtype\":\"U8\",\"shape\":[0],"
				     "\"data_offsets\":[0,0]}";
	size_t cap = 64 + (size_t)n * (strlen(entry) + 10);
	unsigned char *b = malloc(cap);
	CHECK(b);
	char *p = (char *)b + 8, *end = (char *)b + cap;
	p += snprintf(p, end - p, "{%s", meta ? "\"__metadata__\":{\"format\":\"pt\"}" : "");
	for (uint32_t i = 0; i < n; i++) {
		if (meta || i)
			*p++ = ',';
		p += snprintf(p, end - p, entry, i);
		CHECK(p < end);
	}
	*p++ = '}';
	uint64_t hlen = (uint64_t)(p - (char *)b - 8);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(hlen >> (8 * i));
	*len = (size_t)(p - (char *)b);
	return b;
}

/* Parse n tensors (+ metadata); returns the code, message in err. */
static int try_count(uint32_t n, int meta, int tricky, struct wspi_err *err, uint64_t *grew,
		     size_t *hlen)
{
	size_t len;
	unsigned char *b = image(n, meta, tricky, &len);
	struct st_file f;
	uint64_t before = peak_rss();
	wspi_err_clear(err);
	int rc = st_parse_named(ST_NAME, b, len, len, &f, err);
	*grew = peak_rss() - before;
	*hlen = len - 8;
	if (rc == 0) {
		CHECK(f.n_tensors == n);
		st_file_free(&f);
	}
	free(b);
	return rc;
}

static void expect_too_many(uint32_t n, int meta, int tricky, uint64_t count)
{
	struct wspi_err err;
	uint64_t grew;
	size_t hlen;
	char want[128];
	wspi_err_init(&err);
	int rc = try_count(n, meta, tricky, &err, &grew, &hlen);
	printf("%u tensors%s%s (header %zu bytes): %s; peak RSS grew %" PRIu64 " KiB\n", n,
	       meta ? " + __metadata__" : "", tricky ? ", names with ,}]\\\" and \\\\" : "",
	       hlen, err.msg, grew >> 10);
	CHECK_RC(rc, WSP_ETOOBIG);
	snprintf(want, sizeof(want), ST_NAME ": %" PRIu64 " tensors, above the limit %u", count,
		 ST_MAX_TENSORS);
	CHECK(strcmp(err.msg, want) == 0);
	/* refused before jansson's tree: st_parse copies the header once */
	CHECK(grew <= 2 * (uint64_t)hlen + (16u << 20));
	wspi_err_destroy(&err);
}

int main(void)
{
	expect_too_many(ST_MAX_TENSORS + 1, 0, 0, ST_MAX_TENSORS + 1);
	expect_too_many(ST_MAX_TENSORS + 1, 1, 0, ST_MAX_TENSORS + 2);
	expect_too_many(ST_MAX_TENSORS + 2, 0, 0, ST_MAX_TENSORS + 2);
	/* the count is exact: nothing inside strings or nested arrays counts
	 * (escapes present, so one member is left for __metadata__) */
	expect_too_many(ST_MAX_TENSORS + 2, 0, 1, ST_MAX_TENSORS + 2);

	/* Small counts with __metadata__ parse (the allowance does not break them). */
	struct wspi_err err;
	uint64_t grew;
	size_t hlen;
	wspi_err_init(&err);
	CHECK_RC(try_count(1000, 1, 0, &err, &grew, &hlen), 0);
	CHECK_RC(try_count(1000, 0, 0, &err, &grew, &hlen), 0);
	CHECK_RC(try_count(1000, 0, 1, &err, &grew, &hlen), 0);   /* the tricky names are valid */

	const char *full = getenv("WSP_ST_COUNT_FULL");
	if (full && strcmp(full, "1") == 0) {
		int rc = try_count(ST_MAX_TENSORS, 1, 1, &err, &grew, &hlen);
		printf("%u tensors + __metadata__, tricky names (header %zu bytes): rc %d; peak RSS grew %" PRIu64
		       " KiB\n", ST_MAX_TENSORS, hlen, rc, grew >> 10);
		CHECK_RC(rc, 0);
	}
	wspi_err_destroy(&err);
	return 0;
}
