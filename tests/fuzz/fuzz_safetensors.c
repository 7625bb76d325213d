/* libFuzzer target for the safetensors header parser.  The same input is
 * parsed as a whole file (data section checked) and as a header alone. */
#include <stddef.h>
#include <stdint.h>

#include "safetensors/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wspi_err err;
	struct st_file f;
	wspi_err_init(&err);
	if (st_parse(data, size, size, &f, &err) == 0) {
		/* A header that parses is safe to use: touch everything. */
		uint64_t sum = 0;
		for (uint32_t i = 0; i < f.n_tensors; i++)
			sum += f.tensors[i].end - f.tensors[i].begin + f.tensors[i].name[0];
		if (sum + 8 + f.header_len > size + (uint64_t)f.n_tensors * 256)
			__builtin_trap();
		st_file_free(&f);
	}
	if (st_parse(data, size, UINT64_MAX, &f, &err) == 0)
		st_file_free(&f);
	wspi_err_destroy(&err);
	return 0;
}
