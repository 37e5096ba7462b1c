/* A program that uses the CUDA driver API the way a framework does, against whatever
 * libcuda.so.1 it is linked with. It waits for a line on stdin before each phase, so the
 * test can attach the agent to the library it mapped first:
 *   phase 1: allocations of every kind, copies, launches, some frees;
 *   phase 2: free the rest.
 * It prints its functions' addresses (the allocation sites the stacks must show) and the
 * pointers it got, as "name value" lines. Built with frame pointers. */
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;

CUresult cuInit(unsigned int flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
			    size_t Height, unsigned int ElementSizeBytes);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
			      CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
			      CUstream hStream);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
			CUstream hStream, void **kernelParams, void **extra);

#define MiB (1ull << 20)
#define CHECK(call) do { CUresult rc_ = (call); if (rc_) { \
	fprintf(stderr, "%s failed: %d\n", #call, rc_); exit(1); } } while (0)

static void wait_go(void)
{
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		exit(0);
}

__attribute__((noinline)) CUdeviceptr alloc_weights(void)
{
	CUdeviceptr p;
	CHECK(cuMemAlloc_v2(&p, 256 * MiB));
	return p;
}

__attribute__((noinline)) CUdeviceptr alloc_activations(void)
{
	CUdeviceptr p;
	CHECK(cuMemAlloc_v2(&p, 1024 * MiB));
	return p;
}

__attribute__((noinline)) void launch_forward(int n)
{
	for (int i = 0; i < n; i++)
		CHECK(cuLaunchKernel(0, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0));
}

__attribute__((noinline)) void launch_backward(int n)
{
	for (int i = 0; i < n; i++)
		CHECK(cuLaunchKernel(0, 2, 1, 1, 64, 1, 1, 0, 0, 0, 0));
}

int main(void)
{
	static char host[MiB];
	CUcontext ctx;
	CUdeviceptr weights, activations, staging, managed, pitched, failed = 0;
	size_t pitch = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	CHECK(cuInit(0));
	printf("alloc_weights %p\nalloc_activations %p\n", (void *)alloc_weights,
	       (void *)alloc_activations);
	printf("launch_forward %p\nlaunch_backward %p\n", (void *)launch_forward,
	       (void *)launch_backward);
	printf("ready 1\n");
	wait_go();

	/* device 1, as cudaSetDevice(1) does it */
	CHECK(cuDevicePrimaryCtxRetain(&ctx, 1));
	CHECK(cuCtxSetCurrent(ctx));
	weights = alloc_weights();
	activations = alloc_activations();
	CHECK(cuMemAllocAsync(&staging, 4 * MiB, 0));
	CHECK(cuMemAllocManaged(&managed, 8 * MiB, 1));
	CHECK(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 100, 4));
	/* a failed allocation holds nothing and must not be counted */
	if (cuMemAlloc_v2(&failed, 1ull << 40) == 0)
		exit(1);
	for (int i = 0; i < 3; i++)
		CHECK(cuMemcpyHtoD_v2(weights, host, MiB));
	for (int i = 0; i < 2; i++)
		CHECK(cuMemcpyDtoH_v2(host, activations, MiB / 2));
	CHECK(cuMemcpyHtoDAsync_v2(staging, host, 4096, 0));
	CHECK(cuMemcpyDtoHAsync_v2(host, staging, 8192, 0));
	launch_forward(5);
	launch_backward(3);
	CHECK(cuMemFree_v2(weights));
	CHECK(cuMemFreeAsync(staging, 0));
	printf("weights %#llx\nactivations %#llx\nstaging %#llx\nmanaged %#llx\n"
	       "pitched %#llx\npitch %zu\n", weights, activations, staging, managed, pitched, pitch);
	printf("ready 2\n");
	wait_go();

	CHECK(cuMemFree_v2(activations));
	CHECK(cuMemFree_v2(managed));
	CHECK(cuMemFree_v2(pitched));
	printf("ready 3\n");
	wait_go();
	return 0;
}
