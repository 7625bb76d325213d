/*
 * The layout flags of an EXPRANS stream, shared by the C reference
 * (exprans.h) and the CUDA decoder (exprans_gpu.h): a chunk's transform
 * byte in the manifest holds them (wspack(5), "Chunk codec 2").
 */
#ifndef WSP_PACK_EXPRANS_EXPRANS_LAYOUT_H
#define WSP_PACK_EXPRANS_EXPRANS_LAYOUT_H

#define EXPRANS_LOW_PLANES 1u   /* 32-bit values: the low halves coded as two byte planes */
#define EXPRANS_TOP_BIT 2u      /* the top mantissa bit coded with the exponent */

#endif
