/* Device code of bench/gpu_bench.c: a compute stand-in that keeps one SM
 * busy for a set time (so copies are not slowed) after reading the layer. */
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void wsp_bench_spin(const unsigned char *w, uint64_t spin_ns, unsigned long long *sink)
{
	uint64_t t0, t;
	unsigned long long acc = w ? w[0] : 0;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < spin_ns);
	if (threadIdx.x == 0)
		*sink += acc;
}

extern "C" int wsp_bench_launch_spin(const void *w, uint64_t spin_ns, unsigned long long *sink,
				     cudaStream_t s)
{
	wsp_bench_spin<<<1, 32, 0, s>>>((const unsigned char *)w, spin_ns, sink);
	return (int)cudaGetLastError();
}
