/* Helpers for the safetensors tests: build a file image in memory from a
 * header text and a data size, parse it, and check code and message. */
#ifndef WSP_TESTS_STHELP_H
#define WSP_TESTS_STHELP_H

#include <stdint.h>
#include <string.h>

#include "safetensors/safetensors.h"
#include "testlib.h"

#define ST_NAME "case.safetensors"

/* Length prefix, header text, then `data` bytes valued i & 0xff. */
static inline unsigned char *st_image(const char *hdr, size_t hlen, uint64_t data, size_t *len)
{
	*len = 8 + hlen + data;
	unsigned char *b = malloc(*len ? *len : 1);
	CHECK(b);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memcpy(b + 8, hdr, hlen);
	for (uint64_t i = 0; i < data; i++)
		b[8 + hlen + i] = (unsigned char)i;
	return b;
}

/* Parse `hdr` followed by `data` bytes; return the code; message in err. */
static inline int st_try_len(const char *hdr, size_t hlen, uint64_t data, struct wspi_err *err,
			     struct st_file *f)
{
	size_t len;
	unsigned char *b = st_image(hdr, hlen, data, &len);
	wspi_err_clear(err);
	int rc = st_parse_named(ST_NAME, b, len, len, f, err);
	free(b);
	return rc;
}

static inline int st_try(const char *hdr, uint64_t data, struct wspi_err *err, struct st_file *f)
{
	return st_try_len(hdr, strlen(hdr), data, err, f);
}

static inline void st_check_mention(const char *msg, const char *mention, int line)
{
	if (mention && !strstr(msg, mention)) {
		fprintf(stderr, "line %d: message lacks '%s': %s\n", line, mention, msg);
		exit(1);
	}
}

/* The header must be refused with `want`, and the message must name the file
 * and `mention` (a tensor name, or NULL). */
#define EXPECT_REJECT(hdr, data, want, mention)                                           \
	do {                                                                              \
		struct st_file f_;                                                        \
		int rc_ = st_try((hdr), (data), &err, &f_);                               \
		if (rc_ != (want)) {                                                      \
			fprintf(stderr, "%s:%d: %s -> %d (%s), want %d; msg: %s\n",       \
				__FILE__, __LINE__, (hdr), rc_, wsp_strerror(rc_), (want), \
				err.msg);                                                 \
			exit(1);                                                          \
		}                                                                         \
		CHECK(strstr(err.msg, ST_NAME));                                          \
		st_check_mention(err.msg, (mention), __LINE__);                           \
		if (getenv("ST_SHOW"))                                                    \
			fprintf(stderr, "ok %d: %s\n", __LINE__, err.msg);               \
		CHECK(f_.tensors == NULL && f_.header == NULL && f_.path == NULL);        \
	} while (0)

#define EXPECT_ACCEPT(hdr, data, fptr)                                                     \
	do {                                                                              \
		int rc_ = st_try((hdr), (data), &err, (fptr));                            \
		if (rc_ != 0) {                                                           \
			fprintf(stderr, "%s:%d: %s -> %d (%s): %s\n", __FILE__, __LINE__, \
				(hdr), rc_, wsp_strerror(rc_), err.msg);                  \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

#endif
