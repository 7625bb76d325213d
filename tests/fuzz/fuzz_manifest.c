/* libFuzzer target for the pack manifest parser (wspm_parse).
 *
 * Each input is parsed twice: as given, which exercises the header checks
 * and the checksum, and with the header checksum recomputed, so that
 * mutated tables reach the deeper checks instead of all failing on the
 * checksum.  A manifest that parses is then walked completely, so that
 * sanitizers catch any index or string the parser let through unchecked. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "pack/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t walk(const struct wspi_manifest *m)
{
	const struct wspm_header *h = m->hdr;
	uint64_t sum = 0;

	for (uint32_t i = 0; i < h->n_shards; i++)
		sum += strlen(wspm_str(m, m->shards[i].name_off));
	for (uint32_t i = 0; i < h->n_sources; i++) {
		const struct wspm_source *s = &m->sources[i];
		sum += strlen(wspm_str(m, s->name_off));
		if (s->header_len)
			sum += (unsigned char)m->blobs[s->header_off + s->header_len - 1];
	}
	for (uint32_t i = 0; i < h->n_layers; i++) {
		const struct wspm_layer *l = &m->layers[i];
		sum += strlen(wspm_str(m, l->name_off));
		for (uint32_t k = 0; k < l->n_tensors; k++) {
			const struct wspm_tensor *t = &m->tensors[l->first_tensor + k];
			sum += strlen(wspm_str(m, t->name_off)) + strlen(wspm_str(m, t->short_name_off));
			for (uint64_t c = 0; c < t->n_chunks; c++)
				sum += m->chunks[t->first_chunk + c].stored_bytes;
		}
	}
	if (h->index_len)
		sum += (unsigned char)m->blobs[h->index_off + h->index_len - 1];
	return sum;
}

static void parse_once(const void *buf, size_t size)
{
	struct wspi_manifest m;
	struct wspi_err err;

	wspi_err_init(&err);
	if (wspm_parse(buf, size, &m, &err) == 0) {
		volatile uint64_t sink = walk(&m);
		(void)sink;
	}
	wspi_err_destroy(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the parser wants 8-byte alignment, as an mmapped file has */
	uint64_t *buf = calloc(1, size ? (size + 7) / 8 * 8 : 8);

	if (!buf)
		return 0;
	if (size)
		memcpy(buf, data, size);
	parse_once(buf, size);
	if (size >= sizeof(struct wspm_header)) {
		uint64_t sum = wspm_checksum(buf, size);
		memcpy((char *)buf + offsetof(struct wspm_header, checksum), &sum, 8);
		parse_once(buf, size);
	}
	free(buf);
	return 0;
}
