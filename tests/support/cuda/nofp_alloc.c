/* A native library between a program and the CUDA driver, built WITHOUT frame pointers
 * (-O2 -fomit-frame-pointer, with .eh_frame: how libtorch and libcudart are built), for
 * the tests of allocation stacks walked with unwind tables: nofp_model_alloc ->
 * nofp_allocator_reserve (alloca: an rbp-based frame) -> nofp_segment_grow (a 3 KB frame)
 * -> cuMemAlloc_v2 of the stand-in driver (libcuda.c). A frame-pointer walk from the
 * driver call's return site skips nofp_allocator_reserve (and, with it, the truth of who
 * called whom); the unwind tables recover it. nofp_launch calls cuLaunchKernel the same
 * way, for the cost bench (bench/gpu_unwind_cost.py). */
#include <alloca.h>
#include <stddef.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

extern int cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
extern int cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
			  CUstream stream, void **params, void **extra);

volatile unsigned long nofp_sink;

__attribute__((noinline)) CUdeviceptr nofp_segment_grow(size_t bytes)
{
	CUdeviceptr p = 0;
	volatile char pad[3000];
	memset((char *)pad, (int)bytes, sizeof(pad));
	int rc = cuMemAlloc_v2(&p, bytes); /* not a tail call: the result is used */
	nofp_sink += pad[bytes % sizeof(pad)];
	return rc == 0 ? p : 0;
}

__attribute__((noinline)) CUdeviceptr nofp_allocator_reserve(size_t bytes)
{
	size_t n = 32 + (bytes & 127);
	volatile char *scratch = alloca(n);
	for (size_t i = 0; i < n; i++)
		scratch[i] = (char)i;
	CUdeviceptr p = nofp_segment_grow((bytes + 4095) & ~4095ull);
	nofp_sink += scratch[n - 1];
	return p;
}

__attribute__((visibility("default"))) CUdeviceptr nofp_model_alloc(size_t bytes)
{
	CUdeviceptr p = nofp_allocator_reserve(bytes);
	nofp_sink++;
	return p;
}

__attribute__((noinline)) int nofp_launch_inner(unsigned int blocks)
{
	volatile char pad[512];
	memset((char *)pad, (int)blocks, sizeof(pad));
	int rc = cuLaunchKernel((CUfunction)0x1000, blocks, 1, 1, 128, 1, 1, 0, 0, 0, 0);
	nofp_sink += pad[blocks % sizeof(pad)];
	return rc;
}

__attribute__((visibility("default"))) int nofp_launch(unsigned int blocks)
{
	int rc = nofp_launch_inner(blocks);
	nofp_sink++;
	return rc;
}
