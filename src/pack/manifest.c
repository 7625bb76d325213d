/*
 * Manifest validation.  wspm_parse() checks every field before anyone uses
 * it, so that the pager, the verifier and the unpacker can trust indices and
 * offsets without re-checking.  The order of the checks matters: counts are
 * bounded by the file size before any multiplication, names are validated
 * before they appear in messages.  See man/wspack.5 for the format.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"   /* XXH3_state_t on the stack */
#include "common/util.h"
#include "common/fdio.h"
#include "pack/exprans/exprans.h"
#include "pack/manifest.h"

#define FMT(...) WSP_ERR(err, WSP_EFORMAT, __VA_ARGS__)

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define WSPM_BIG_ENDIAN 1
#else
#define WSPM_BIG_ENDIAN 0
#endif

uint64_t wspm_checksum(const void *data, uint64_t len)
{
	static const unsigned char zero[8];
	const size_t at = offsetof(struct wspm_header, checksum);
	const unsigned char *p = data;
	XXH3_state_t st;

	/* Hash as if the checksum field held zero, without copying the file. */
	wspi_xxh3_reset(&st);
	wspi_xxh3_update(&st, p, at);
	wspi_xxh3_update(&st, zero, 8);
	wspi_xxh3_update(&st, p + at + 8, len - at - 8);
	return wspi_xxh3_digest(&st);
}

uint64_t wspm_stored_check(const void *stored, uint64_t len)
{
	return (wspi_xxh3(stored, (size_t)len) & 0xffffffffffffull) | 1;
}

uint64_t wspm_chunk_stored_check(const struct wspm_chunk *c)
{
	uint64_t v = 0;
	for (int i = 5; i >= 0; i--)
		v = v << 8 | c->stored_check[i];
	return v;
}

void wspm_chunk_set_stored_check(struct wspm_chunk *c, uint64_t check)
{
	for (int i = 0; i < 6; i++, check >>= 8)
		c->stored_check[i] = (uint8_t)check;
}

/* A table of `count` entries of `size` bytes at `off`, after `*prev_end`,
 * 8-byte aligned, inside the file.  Tables follow each other in file order,
 * which also proves that they do not overlap. */
static int check_table(const char *what, uint64_t off, uint64_t count, uint64_t size,
		       uint64_t align, uint64_t len, uint64_t *prev_end, struct wspi_err *err)
{
	uint64_t bytes, end;

	if (off % align)
		return FMT("%s table offset %llu is not %llu-byte aligned", what,
			   (unsigned long long)off, (unsigned long long)align);
	if (off < *prev_end || off > len)
		return FMT("%s table offset %llu outside [%llu, %llu]", what,
			   (unsigned long long)off, (unsigned long long)*prev_end,
			   (unsigned long long)len);
	/* count is bounded by the bytes left before multiplying */
	if (size && count > (len - off) / size)
		return FMT("%s table: %llu entries do not fit in the file", what,
			   (unsigned long long)count);
	if (ckd_mul(&bytes, count, size) || ckd_add(&end, off, bytes) || end > len)
		return FMT("%s table extends past the end of the file", what);
	*prev_end = end;
	return 0;
}

/* A name at `off` in the string table: NUL-terminated inside it, non-empty,
 * at most WSPM_MAX_NAME bytes, no control characters. */
static int check_name(const struct wspi_manifest *m, uint64_t off, const char *what, uint64_t idx,
		      struct wspi_err *err)
{
	uint64_t size = m->hdr->strings_size;

	if (off >= size)
		return FMT("%s %llu: name offset %llu outside the string table (%llu bytes)", what,
			   (unsigned long long)idx, (unsigned long long)off,
			   (unsigned long long)size);
	const char *s = m->strings + off;
	uint64_t room = size - off;
	const char *nul = memchr(s, '\0', room < WSPM_MAX_NAME + 1 ? room : WSPM_MAX_NAME + 1);
	if (!nul)
		return FMT("%s %llu: name at string offset %llu is unterminated or longer than %u bytes",
			   what, (unsigned long long)idx, (unsigned long long)off, WSPM_MAX_NAME);
	if (nul == s)
		return FMT("%s %llu: empty name", what, (unsigned long long)idx);
	for (const unsigned char *c = (const unsigned char *)s; c < (const unsigned char *)nul; c++)
		if (*c < 0x20 || *c == 0x7f)
			return FMT("%s %llu: name contains control character 0x%02x", what,
				   (unsigned long long)idx, *c);
	return 0;
}

static int check_header(const void *data, uint64_t len, struct wspi_manifest *m, struct wspi_err *err)
{
	const struct wspm_header *h = data;
	uint64_t end = sizeof(*h);

	if (WSPM_BIG_ENDIAN)
		return WSP_ERR(err, WSP_EBIGENDIAN, "packs are little-endian; this host is big-endian");
	if ((uintptr_t)data % 8)
		return WSP_ERR(err, -EINVAL, "manifest buffer is not 8-byte aligned");
	if (len < sizeof(*h))
		return FMT("file of %llu bytes is shorter than the %zu-byte header",
			   (unsigned long long)len, sizeof(*h));
	if (len > WSPM_MAX_FILE)
		return WSP_ERR(err, WSP_ETOOBIG, "manifest of %llu bytes is above the limit",
			       (unsigned long long)len);
	if (memcmp(h->magic, WSPM_MAGIC, 8))
		return FMT("bad magic: not a wspager pack manifest");
	if (h->version != WSPM_VERSION)
		return WSP_ERR(err, WSP_EVERSION, "format version %u (this library reads version %u)",
			       h->version, WSPM_VERSION);
	if (h->header_size != sizeof(*h))
		return FMT("header_size %u, expected %zu", h->header_size, sizeof(*h));
	if (h->file_size != len)
		return FMT("file_size field %llu but the file has %llu bytes (truncated?)",
			   (unsigned long long)h->file_size, (unsigned long long)len);
	if (wspm_checksum(data, len) != h->checksum)
		return WSP_ERR(err, WSP_ECHECKSUM, "header checksum mismatch (corrupt manifest)");
	if (h->chunk_bytes == 0 || h->chunk_bytes % WSP_ALIGN_TENSOR || h->chunk_bytes > UINT32_MAX)
		return FMT("chunk_bytes %llu is not a non-zero multiple of %u below 4 GiB",
			   (unsigned long long)h->chunk_bytes, WSP_ALIGN_TENSOR);

	WSP_TRY(check_table("shard", h->shards_off, h->n_shards, sizeof(struct wspm_shard), 8, len,
			    &end, err));
	WSP_TRY(check_table("source", h->sources_off, h->n_sources, sizeof(struct wspm_source), 8,
			    len, &end, err));
	WSP_TRY(check_table("layer", h->layers_off, h->n_layers, sizeof(struct wspm_layer), 8, len,
			    &end, err));
	WSP_TRY(check_table("tensor", h->tensors_off, h->n_tensors, sizeof(struct wspm_tensor), 8,
			    len, &end, err));
	WSP_TRY(check_table("chunk", h->chunks_off, h->n_chunks, sizeof(struct wspm_chunk), 8, len,
			    &end, err));
	WSP_TRY(check_table("string", h->strings_off, h->strings_size, 1, 1, len, &end, err));
	WSP_TRY(check_table("blob", h->blobs_off, h->blobs_size, 1, 1, len, &end, err));

	if (h->flags & ~WSPM_F_HAS_INDEX)
		return FMT("unknown flags 0x%x", h->flags);
	if (h->flags & WSPM_F_HAS_INDEX) {
		if (ckd_add(&end, h->index_off, h->index_len) || end > h->blobs_size)
			return FMT("index blob [%llu, +%llu) outside the blob area",
				   (unsigned long long)h->index_off, (unsigned long long)h->index_len);
	} else if (h->index_off || h->index_len) {
		return FMT("index blob given without the index flag");
	}

	const char *base = data;
	m->map = data;
	m->map_size = len;
	m->hdr = h;
	m->shards = (const void *)(base + h->shards_off);
	m->sources = (const void *)(base + h->sources_off);
	m->layers = (const void *)(base + h->layers_off);
	m->tensors = (const void *)(base + h->tensors_off);
	m->chunks = (const void *)(base + h->chunks_off);
	m->strings = base + h->strings_off;
	m->blobs = base + h->blobs_off;
	return 0;
}

static int check_shards_sources(const struct wspi_manifest *m, struct wspi_err *err)
{
	const struct wspm_header *h = m->hdr;
	char want[32];

	for (uint32_t i = 0; i < h->n_shards; i++) {
		const struct wspm_shard *s = &m->shards[i];
		WSP_TRY(check_name(m, s->name_off, "shard", i, err));
		/* A fixed name keeps a hostile manifest from naming "../x". */
		snprintf(want, sizeof(want), WSPM_SHARD_FMT, i);
		if (strcmp(wspm_str(m, s->name_off), want))
			return FMT("shard %u: name is not %s", i, want);
		if (s->size % WSP_ALIGN_DIRECT)
			return FMT("shard %u (%s): size %llu is not a multiple of %u", i, want,
				   (unsigned long long)s->size, WSP_ALIGN_DIRECT);
	}
	for (uint32_t i = 0; i < h->n_sources; i++) {
		const struct wspm_source *s = &m->sources[i];
		uint64_t end;
		WSP_TRY(check_name(m, s->name_off, "source", i, err));
		const char *name = wspm_str(m, s->name_off);
		/* unpack writes a file of this name: keep it inside the output */
		if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
			return FMT("source %u: file name \"%s\" is not a plain file name", i, name);
		if (ckd_add(&end, s->header_off, s->header_len) || end > h->blobs_size)
			return FMT("source %u (%s): header blob [%llu, +%llu) outside the blob area", i,
				   name, (unsigned long long)s->header_off,
				   (unsigned long long)s->header_len);
	}
	return 0;
}

/* The chunks of tensor `t` (index ti) of layer `l`: contiguous from *cursor,
 * raw sizes summing to the tensor's, codec and transform known. */
static int check_chunks(const struct wspi_manifest *m, uint32_t li, uint32_t ti,
			const struct wspm_layer *l, const struct wspm_tensor *t, uint64_t *next_chunk,
			uint64_t *cursor, struct wspi_err *err)
{
	const struct wspm_header *h = m->hdr;
	const char *tname = wspm_str(m, t->name_off);
	uint64_t raw = 0, end_region;
	unsigned bits = wsp_dtype_bits((enum wsp_dtype)t->dtype);

	if (t->first_chunk != *next_chunk)
		return FMT("tensor %u (%s): first_chunk %llu, expected %llu", ti, tname,
			   (unsigned long long)t->first_chunk, (unsigned long long)*next_chunk);
	if (t->n_chunks > h->n_chunks - t->first_chunk)
		return FMT("tensor %u (%s): %llu chunks past the chunk table", ti, tname,
			   (unsigned long long)t->n_chunks);
	if ((t->raw_bytes == 0) != (t->n_chunks == 0))
		return FMT("tensor %u (%s): %llu bytes in %llu chunks", ti, tname,
			   (unsigned long long)t->raw_bytes, (unsigned long long)t->n_chunks);
	end_region = l->offset + l->stored_bytes;   /* checked by the caller */
	for (uint64_t k = 0; k < t->n_chunks; k++) {
		uint64_t ci = t->first_chunk + k, end;
		const struct wspm_chunk *c = &m->chunks[ci];
		if (c->codec != WSP_CODEC_ZSTD && c->codec != WSP_CODEC_RAW &&
		    c->codec != WSP_CODEC_EXPRANS)
			return FMT("chunk %llu of tensor %s: unknown codec %u",
				   (unsigned long long)ci, tname, c->codec);
		/* codec 2's transform is its layout: bit 0 coded low halves (f32
		 * only), bit 1 the top mantissa bit coded */
		if (c->codec == WSP_CODEC_EXPRANS &&
		    (!exprans_value_bytes(t->dtype) ||
		     c->transform > (EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT) ||
		     ((c->transform & EXPRANS_LOW_PLANES) && t->dtype != WSP_DTYPE_F32) ||
		     c->raw_bytes % exprans_value_bytes(t->dtype)))
			return FMT("chunk %llu of tensor %s: codec %u is for whole bf16, f16 or f32 "
				   "values, transform 0 or 2 (f32: or 1 or 3, coded low halves)",
				   (unsigned long long)ci, tname, c->codec);
		if (c->transform > WSPM_XFORM_EXP_F32)
			return FMT("chunk %llu of tensor %s: unknown transform %u",
				   (unsigned long long)ci, tname, c->transform);
		if (c->raw_bytes == 0 || c->raw_bytes > h->chunk_bytes || c->stored_bytes == 0)
			return FMT("chunk %llu of tensor %s: %u raw / %u stored bytes (chunk_bytes %llu)",
				   (unsigned long long)ci, tname, c->raw_bytes, c->stored_bytes,
				   (unsigned long long)h->chunk_bytes);
		if (c->codec == WSP_CODEC_RAW && c->stored_bytes != c->raw_bytes)
			return FMT("chunk %llu of tensor %s: raw chunk stores %u of %u bytes",
				   (unsigned long long)ci, tname, c->stored_bytes, c->raw_bytes);
		/* every chunk but the last ends on a 256-byte (element) boundary */
		if (k + 1 < t->n_chunks && c->raw_bytes % WSP_ALIGN_TENSOR)
			return FMT("chunk %llu of tensor %s: %u raw bytes, not a multiple of %u",
				   (unsigned long long)ci, tname, c->raw_bytes, WSP_ALIGN_TENSOR);
		if (c->transform != WSPM_XFORM_NONE && c->codec != WSP_CODEC_EXPRANS) {
			/* a byte transform (exprans layouts are checked above) */
			unsigned esize = c->transform == WSPM_XFORM_EXP_BF16 ? 16
					 : c->transform == WSPM_XFORM_EXP_F32 ? 32 : bits;
			if (bits != esize || bits % 8 || bits < 16 || c->raw_bytes % (bits / 8))
				return FMT("chunk %llu of tensor %s: transform %u does not fit dtype %s",
					   (unsigned long long)ci, tname, c->transform,
					   wsp_dtype_name((enum wsp_dtype)t->dtype));
		}
		if (c->offset != *cursor)
			return FMT("chunk %llu of tensor %s (layer %u): offset %llu, expected %llu "
				   "(chunks of a layer are contiguous)",
				   (unsigned long long)ci, tname, li, (unsigned long long)c->offset,
				   (unsigned long long)*cursor);
		if (ckd_add(&end, c->offset, (uint64_t)c->stored_bytes) || end > end_region)
			return FMT("chunk %llu of tensor %s: [%llu, +%u) outside layer %u's region",
				   (unsigned long long)ci, tname, (unsigned long long)c->offset,
				   c->stored_bytes, li);
		*cursor = end;
		raw += c->raw_bytes;   /* <= n_chunks * 4 GiB: cannot wrap */
	}
	if (raw != t->raw_bytes)
		return FMT("tensor %u (%s): chunks hold %llu raw bytes, tensor has %llu", ti, tname,
			   (unsigned long long)raw, (unsigned long long)t->raw_bytes);
	*next_chunk += t->n_chunks;
	return 0;
}

static int check_tensor(const struct wspi_manifest *m, uint32_t li, uint32_t ti,
			const struct wspm_layer *l, uint64_t *raw_end, struct wspi_err *err)
{
	const struct wspm_tensor *t = &m->tensors[ti];
	uint64_t bytes, end;
	int rc;

	WSP_TRY(check_name(m, t->name_off, "tensor", ti, err));
	const char *tname = wspm_str(m, t->name_off);
	WSP_TRY(check_name(m, t->short_name_off, "tensor short name", ti, err));
	if (t->dtype >= WSP_DTYPE_COUNT)
		return WSP_ERR(err, WSP_EDTYPE, "tensor %u (%s): unknown dtype %u", ti, tname, t->dtype);
	if (t->rank > WSP_MAX_RANK)
		return FMT("tensor %u (%s): rank %u above %u", ti, tname, t->rank, WSP_MAX_RANK);
	rc = wspi_tensor_bytes(t->dtype, t->rank, t->shape, &bytes);
	if (rc < 0)
		return WSP_ERR(err, rc, "tensor %u (%s): shape and dtype give no byte count (%s)", ti,
			       tname, wsp_strerror(rc));
	if (bytes != t->raw_bytes)
		return FMT("tensor %u (%s): raw_bytes %llu, shape and dtype give %llu", ti, tname,
			   (unsigned long long)t->raw_bytes, (unsigned long long)bytes);
	if (t->layer != li)
		return FMT("tensor %u (%s): layer %u, but it lies in layer %u's range", ti, tname,
			   t->layer, li);
	if (t->source != WSPM_NO_SOURCE) {
		if (t->source >= m->hdr->n_sources)
			return FMT("tensor %u (%s): source %u of %u", ti, tname, t->source,
				   m->hdr->n_sources);
		if (ckd_add(&end, t->source_offset, t->raw_bytes) ||
		    end > m->sources[t->source].data_bytes)
			return FMT("tensor %u (%s): source range [%llu, +%llu) outside the data of %s",
				   ti, tname, (unsigned long long)t->source_offset,
				   (unsigned long long)t->raw_bytes,
				   wspm_str(m, m->sources[t->source].name_off));
	}
	if (t->layer_offset % WSP_ALIGN_TENSOR)
		return FMT("tensor %u (%s): layer_offset %llu not %u-aligned", ti, tname,
			   (unsigned long long)t->layer_offset, WSP_ALIGN_TENSOR);
	if (t->layer_offset < *raw_end)
		return FMT("tensor %u (%s): layer_offset %llu overlaps the previous tensor (ends at %llu)",
			   ti, tname, (unsigned long long)t->layer_offset,
			   (unsigned long long)*raw_end);
	if (ckd_add(&end, t->layer_offset, t->raw_bytes) || end > l->raw_bytes)
		return FMT("tensor %u (%s): [%llu, +%llu) outside layer %u's %llu raw bytes", ti,
			   tname, (unsigned long long)t->layer_offset,
			   (unsigned long long)t->raw_bytes, li, (unsigned long long)l->raw_bytes);
	*raw_end = end;
	return 0;
}

static int check_layers(const struct wspi_manifest *m, struct wspi_err *err)
{
	const struct wspm_header *h = m->hdr;
	uint64_t next_tensor = 0, next_chunk = 0;
	uint64_t *shard_end = calloc(h->n_shards ? h->n_shards : 1, sizeof(*shard_end));
	int rc = 0;

	if (!shard_end)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (uint32_t li = 0; li < h->n_layers && rc == 0; li++) {
		const struct wspm_layer *l = &m->layers[li];
		uint64_t region_end, cursor, raw_end = 0;

		rc = check_name(m, l->name_off, "layer", li, err);
		if (rc)
			break;
		const char *lname = wspm_str(m, l->name_off);
		if (l->first_tensor != next_tensor || l->n_tensors == 0 ||
		    l->n_tensors > h->n_tensors - l->first_tensor) {
			rc = FMT("layer %u (%s): tensors [%u, +%u) do not follow the previous layer's",
				 li, lname, l->first_tensor, l->n_tensors);
			break;
		}
		if (l->shard >= h->n_shards) {
			rc = FMT("layer %u (%s): shard %u of %u", li, lname, l->shard, h->n_shards);
			break;
		}
		if (l->offset % WSP_ALIGN_DIRECT || l->offset < shard_end[l->shard] ||
		    ckd_add(&region_end, l->offset, l->stored_bytes) ||
		    region_end > m->shards[l->shard].size) {
			rc = FMT("layer %u (%s): region [%llu, +%llu) is misaligned, overlaps the "
				 "previous layer or lies outside shard %u (%llu bytes)",
				 li, lname, (unsigned long long)l->offset,
				 (unsigned long long)l->stored_bytes, l->shard,
				 (unsigned long long)m->shards[l->shard].size);
			break;
		}
		shard_end[l->shard] = region_end;
		cursor = l->offset;
		for (uint32_t k = 0; k < l->n_tensors && rc == 0; k++) {
			uint32_t ti = l->first_tensor + k;
			rc = check_tensor(m, li, ti, l, &raw_end, err);
			if (rc == 0)
				rc = check_chunks(m, li, ti, l, &m->tensors[ti], &next_chunk, &cursor,
						  err);
		}
		if (rc)
			break;
		if (cursor != region_end) {
			rc = FMT("layer %u (%s): chunks end at %llu, stored region at %llu", li, lname,
				 (unsigned long long)cursor, (unsigned long long)region_end);
			break;
		}
		if (l->raw_bytes != wspi_align_up(raw_end, WSP_ALIGN_TENSOR)) {
			rc = FMT("layer %u (%s): raw_bytes %llu, tensors end at %llu", li, lname,
				 (unsigned long long)l->raw_bytes, (unsigned long long)raw_end);
			break;
		}
		next_tensor += l->n_tensors;
	}
	free(shard_end);
	if (rc)
		return rc;
	if (next_tensor != h->n_tensors)
		return FMT("layers cover %llu of %u tensors", (unsigned long long)next_tensor,
			   h->n_tensors);
	if (next_chunk != h->n_chunks)
		return FMT("tensors cover %llu of %llu chunks", (unsigned long long)next_chunk,
			   (unsigned long long)h->n_chunks);
	return 0;
}

int wspm_parse(const void *data, uint64_t len, struct wspi_manifest *out, struct wspi_err *err)
{
	struct wspi_manifest m;

	memset(&m, 0, sizeof(m));
	WSP_TRY(check_header(data, len, &m, err));
	WSP_TRY(check_shards_sources(&m, err));
	WSP_TRY(check_layers(&m, err));
	WSP_TRY(wspm_check_names_and_sources(&m, err));
	*out = m;
	return 0;
}

/* Read the whole manifest into private memory rather than mapping the file:
 * a file that shrinks or is replaced under us then cannot raise SIGBUS. */
static int read_manifest(const char *path, void **map, uint64_t *size, struct wspi_err *err)
{
	struct stat st;
	int fd = wspi_open_regular(path, O_RDONLY, err);

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		int rc = -errno;
		close(fd);
		return WSP_ERR(err, rc, "%s: %s", path, strerror(-rc));
	}
	if ((uint64_t)st.st_size < sizeof(struct wspm_header) || (uint64_t)st.st_size > WSPM_MAX_FILE) {
		close(fd);
		return WSP_ERR(err, (uint64_t)st.st_size > WSPM_MAX_FILE ? WSP_ETOOBIG : WSP_EFORMAT,
			       "%s: %llu bytes is not a plausible manifest size", path,
			       (unsigned long long)st.st_size);
	}
	uint64_t n = (uint64_t)st.st_size, got = 0;
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return WSP_ERR(err, -ENOMEM, "%s: cannot allocate %llu bytes", path,
			       (unsigned long long)n);
	}
	int rc = fd_read_at(fd, p, n, 0, &got);
	if (rc < 0) {
		munmap(p, n);
		close(fd);
		return WSP_ERR(err, rc, "%s: short read at %llu of %llu bytes%s%s", path,
			       (unsigned long long)got, (unsigned long long)n,
			       rc != WSP_EFORMAT ? ": " : " (file shrank)",
			       rc != WSP_EFORMAT ? strerror(-rc) : "");
	}
	close(fd);
	mprotect(p, n, PROT_READ);
	*map = p;
	*size = n;
	return 0;
}

int wspm_map(const char *pack_dir, struct wspi_manifest *out, struct wspi_err *err)
{
	char path[4096];
	void *map = NULL;
	uint64_t size = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", pack_dir, WSPM_FILE) >= sizeof(path))
		return WSP_ERR(err, -ENAMETOOLONG, "%s: path too long", pack_dir);
	WSP_TRY(read_manifest(path, &map, &size, err));
	rc = wspm_parse(map, size, out, err);
	if (rc < 0) {
		wspi_err_prefix(err, "%s", path);
		munmap(map, size);
		memset(out, 0, sizeof(*out));
		return rc;
	}
	/* Shards must exist with the recorded size: a truncated pack fails here,
	 * naming the file, rather than at the first read of its tail. */
	for (uint32_t i = 0; i < out->hdr->n_shards; i++) {
		struct stat st;
		char spath[4096];
		uint64_t want = out->shards[i].size;
		snprintf(spath, sizeof(spath), "%s/%s", pack_dir, wspm_str(out, out->shards[i].name_off));
		if (stat(spath, &st) < 0)
			rc = WSP_ERR(err, -errno, "%s: %s", spath, strerror(errno));
		else if (!S_ISREG(st.st_mode))
			rc = WSP_ERR(err, WSP_EFORMAT, "%s: not a regular file", spath);
		else if ((uint64_t)st.st_size != want)
			rc = WSP_ERR(err, WSP_EFORMAT, "%s: %llu bytes, manifest says %llu (%s)", spath,
				     (unsigned long long)st.st_size, (unsigned long long)want,
				     (uint64_t)st.st_size < want ? "truncated" : "extra bytes");
		if (rc < 0) {
			wspm_unmap(out);
			return rc;
		}
	}
	return 0;
}

void wspm_unmap(struct wspi_manifest *m)
{
	if (m && m->map)
		munmap((void *)m->map, m->map_size);
	if (m)
		memset(m, 0, sizeof(*m));
}
