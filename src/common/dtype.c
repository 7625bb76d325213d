/* The safetensors dtypes: names and element sizes. */
#include <string.h>

#include "wspager.h"

static const struct {
	const char *name;
	unsigned bits;
} dtypes[WSP_DTYPE_COUNT] = {
	[WSP_DTYPE_BOOL] = {"BOOL", 8},       [WSP_DTYPE_U8] = {"U8", 8},
	[WSP_DTYPE_I8] = {"I8", 8},           [WSP_DTYPE_F8_E5M2] = {"F8_E5M2", 8},
	[WSP_DTYPE_F8_E4M3] = {"F8_E4M3", 8}, [WSP_DTYPE_I16] = {"I16", 16},
	[WSP_DTYPE_U16] = {"U16", 16},        [WSP_DTYPE_F16] = {"F16", 16},
	[WSP_DTYPE_BF16] = {"BF16", 16},      [WSP_DTYPE_I32] = {"I32", 32},
	[WSP_DTYPE_U32] = {"U32", 32},        [WSP_DTYPE_F32] = {"F32", 32},
	[WSP_DTYPE_F64] = {"F64", 64},        [WSP_DTYPE_I64] = {"I64", 64},
	[WSP_DTYPE_U64] = {"U64", 64},        [WSP_DTYPE_F8_E8M0] = {"F8_E8M0", 8},
	[WSP_DTYPE_C64] = {"C64", 64},        [WSP_DTYPE_F4] = {"F4", 4},
	[WSP_DTYPE_F6_E2M3] = {"F6_E2M3", 6}, [WSP_DTYPE_F6_E3M2] = {"F6_E3M2", 6},
};

const char *wsp_dtype_name(enum wsp_dtype dt)
{
	return (unsigned)dt < WSP_DTYPE_COUNT ? dtypes[dt].name : NULL;
}

unsigned wsp_dtype_bits(enum wsp_dtype dt)
{
	return (unsigned)dt < WSP_DTYPE_COUNT ? dtypes[dt].bits : 0;
}

int wsp_dtype_from_name(const char *name)
{
	for (int i = 0; i < WSP_DTYPE_COUNT; i++)
		if (name && strcmp(name, dtypes[i].name) == 0)
			return i;
	return WSP_EDTYPE;
}
