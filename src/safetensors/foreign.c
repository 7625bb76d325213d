/*
 * Checkpoints that are not safetensors: recognised by their first bytes (or
 * the .onnx extension, ONNX having no magic), so that `wspack convert` says
 * what the file is and how to get safetensors from it instead of reporting
 * a nonsensical header length.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "safetensors/safetensors.h"

static int has_ext(const char *path, const char *ext)
{
	size_t n = strlen(path), e = strlen(ext);
	return n >= e && !strcmp(path + n - e, ext);
}

const char *st_foreign_kind(const char *path, const unsigned char *head, size_t n)
{
	static const char torch_hint[] =
		"a PyTorch checkpoint (torch.save); make safetensors with "
		"safetensors.torch.save_file(torch.load(FILE), \"model.safetensors\"), or "
		"transformers' save_pretrained(..., safe_serialization=True)";

	if (n >= 4 && !memcmp(head, "GGUF", 4))
		return "a GGUF file (llama.cpp); wspager reads safetensors: convert the original "
		       "Hugging Face checkpoint instead";
	if (n >= 6 && !memcmp(head, "\x93NUMPY", 6))
		return "a NumPy .npy array; write it with safetensors.numpy.save_file({name: array}, "
		       "\"model.safetensors\")";
	if (n >= 4 && !memcmp(head, "PK\x03\x04", 4)) {
		/* A zip: torch.save's archive holds data.pkl, numpy's .npz holds .npy files. */
		if (memmem(head, n, ".npy", 4))
			return "a NumPy .npz archive; write its arrays with "
			       "safetensors.numpy.save_file(dict(numpy.load(FILE)), \"model.safetensors\")";
		return torch_hint;
	}
	if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)
		return torch_hint;   /* a pickle: torch.save's legacy format */
	if (has_ext(path, ".onnx"))
		return "an ONNX model; export the weights to safetensors from the framework that "
		       "made it";
	if (has_ext(path, ".safetensors.index.json") || (n >= 1 && head[0] == '{'))
		return "a JSON file (a model.safetensors.index.json?); give the directory that "
		       "holds it and its shards";
	return NULL;
}

const char *st_foreign_file(const char *path)
{
	unsigned char head[4096];
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ssize_t n = fd >= 0 ? pread(fd, head, sizeof(head), 0) : -1;

	if (fd >= 0)
		close(fd);
	return n > 0 ? st_foreign_kind(path, head, (size_t)n) : NULL;
}
