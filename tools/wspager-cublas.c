#include "config.h"

#include <dlfcn.h>
#include <stdio.h>

#include "wspager-cublas.h"
#include "wspager-tool.h"

#define WT_STR2(x) #x
#define WT_STR(x) WT_STR2(x)
#define CUBLAS_SONAME "libcublas.so." WT_STR(CUBLAS_VER_MAJOR)

struct wt_cublas wt_blas;
static void *handle;

int wt_cublas_load(void)
{
	if (handle)
		return 0;
	void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		cli_error("cannot load cuBLAS (%s): %s", CUBLAS_SONAME, dlerror());
		return -1;
	}
	/* The v2 API's exported names carry the _v2 suffix. */
	struct { void **fn; const char *name; } syms[] = {
		{(void **)&wt_blas.create, "cublasCreate_v2"},
		{(void **)&wt_blas.destroy, "cublasDestroy_v2"},
		{(void **)&wt_blas.set_stream, "cublasSetStream_v2"},
		{(void **)&wt_blas.gemm_ex, "cublasGemmEx"},
		{(void **)&wt_blas.status_string, "cublasGetStatusString"},
	};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].fn = dlsym(h, syms[i].name);
		if (!*syms[i].fn) {
			cli_error("cuBLAS (%s) lacks %s: %s", CUBLAS_SONAME, syms[i].name, dlerror());
			dlclose(h);
			return -1;
		}
	}
	handle = h;
	return 0;
}
