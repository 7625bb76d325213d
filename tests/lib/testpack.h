/* Build small packs for tests, with self-describing contents: every 8-byte
 * word of tensor t holds ((uint64_t)t << 40) | word_index, except where a
 * test asks for Gaussian-like bf16 data that compresses.  So a misplaced or
 * stale byte is caught by t_check_tensor(). */
#ifndef WSP_TESTPACK_H
#define WSP_TESTPACK_H

#include <stdint.h>
#include "wspager.h"

struct t_pack_spec {
	unsigned layers;            /* numbered blocks "model.layers.N" */
	unsigned tensors_per_layer; /* each "model.layers.N.wK" */
	uint64_t tensor_bytes;      /* bytes per tensor; odd sizes allowed (U8 dtype then) */
	int compressible;           /* 1: bf16 Gaussian data (zstd + transform); 0: self-describing words */
	enum wsp_codec codec;
	uint64_t chunk_bytes;       /* 0: default */
	uint64_t shard_bytes;       /* 0: default */
};

/* Create the pack at `dir` (which must not exist). Returns 0 or exits(1) on failure. */
int t_make_pack(const char *dir, const struct t_pack_spec *spec);
/* The expected byte at `offset` of global tensor `t` (0-based over the pack). */
void t_expected_tensor(const struct t_pack_spec *spec, uint32_t t, void *buf, uint64_t bytes);
/* 0 when `data` equals the expected contents of tensor t, else prints where it differs. */
int t_check_tensor(const struct t_pack_spec *spec, uint32_t t, const void *data, uint64_t bytes);

#endif
