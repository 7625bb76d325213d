/* cuBLAS, loaded only when a GPU workload runs: linking it costs every
 * start ~1 s and ~140 MiB of resident memory (its constructors), which the
 * host backend, info, simulate and verify never need. */
#ifndef WSPAGER_CUBLAS_H
#define WSPAGER_CUBLAS_H

#include <cublas_v2.h>

struct wt_cublas {
	cublasStatus_t (*create)(cublasHandle_t *handle);
	cublasStatus_t (*destroy)(cublasHandle_t handle);
	cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
	cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
				  int n, int k, const void *alpha, const void *a, cudaDataType at, int lda,
				  const void *b, cudaDataType bt, int ldb, const void *beta, void *c,
				  cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo);
	const char *(*status_string)(cublasStatus_t status);
};
extern struct wt_cublas wt_blas;

/* Load libcublas.so.<major of the headers built against>; 0, or -1 after
 * printing why (the dlerror text). Idempotent. */
int wt_cublas_load(void);

#endif
