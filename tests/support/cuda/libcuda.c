/* A stand-in for the CUDA driver, for tests on machines without a GPU: it exports the
 * driver's symbol names with the driver's signatures (cuda.h of CUDA 13), so the agent's
 * uprobes attach to it exactly as to the real libcuda.so.1. Device pointers are handed
 * out from a fake address range; copies and launches only count. Built by the tests as
 * libcuda.so.1 (the name the agent recognizes in /proc/PID/maps). */
#include <stddef.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUctxCreateParams_st CUctxCreateParams;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define EXPORT __attribute__((visibility("default"), noinline))

/* more than this in one allocation fails, as a full device would */
static const size_t capacity = 64ull << 30;
static CUdeviceptr next_ptr = 0x7f0000000000ull;
static volatile unsigned long long launches, copied;
static struct { char pad[64]; } contexts[8];

static CUdeviceptr take(size_t size)
{
	CUdeviceptr p = next_ptr;
	next_ptr += (size + 0xfffff) & ~0xfffffull; /* 1 MiB granules, like the driver's */
	return p;
}

EXPORT CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!pctx || dev < 0 || dev >= 8)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)&contexts[dev];
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (bytesize > capacity)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*dptr = take(bytesize);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	(void)hStream;
	return cuMemAlloc_v2(dptr, bytesize);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	(void)flags;
	return cuMemAlloc_v2(dptr, bytesize);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
				   size_t Height, unsigned int ElementSizeBytes)
{
	(void)ElementSizeBytes;
	if (!pPitch)
		return CUDA_ERROR_INVALID_VALUE;
	*pPitch = (WidthInBytes + 511) & ~(size_t)511; /* rows aligned to 512 bytes */
	return cuMemAlloc_v2(dptr, *pPitch * Height);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { (void)dptr; return CUDA_SUCCESS; }

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	(void)hStream;
	return cuMemFree_v2(dptr);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ (void)dstDevice; (void)srcHost; copied += ByteCount; return CUDA_SUCCESS; }

EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ (void)srcDevice; memset(dstHost, 0, ByteCount); copied += ByteCount; return CUDA_SUCCESS; }

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
				     size_t ByteCount, CUstream hStream)
{ (void)hStream; return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount); }

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
				     CUstream hStream)
{ (void)hStream; return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount); }

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			       unsigned int gridDimZ, unsigned int blockDimX,
			       unsigned int blockDimY, unsigned int blockDimZ,
			       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
			       void **extra)
{
	(void)f; (void)gridDimX; (void)gridDimY; (void)gridDimZ; (void)blockDimX;
	(void)blockDimY; (void)blockDimZ; (void)sharedMemBytes; (void)hStream;
	(void)kernelParams; (void)extra;
	launches++;
	return CUDA_SUCCESS;
}
