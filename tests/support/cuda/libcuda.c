/* A stand-in for the CUDA driver, for tests on machines without a GPU: it exports the
 * driver's symbol names with the driver's signatures (cuda.h of CUDA 13), so the agent's
 * uprobes attach to it exactly as to the real libcuda.so.1. Device pointers are handed
 * out from a fake address range; copies only count. A launch adds STANDIN_KERNEL_US
 * (environment, default 20) of "device work" to a queue the synchronize calls wait for,
 * as a GPU's stream would make them. Kernels are looked up by name and handed out as
 * handles that launches pass back. Built by the tests as libcuda.so.1 (the name the agent
 * recognizes in /proc/PID/maps). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUctxCreateParams_st CUctxCreateParams;
typedef struct CUmod_st *CUmodule;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
	int type;
	int requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage;
		 unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;
typedef struct CUlaunchConfig_st CUlaunchConfig;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define EXPORT __attribute__((visibility("default"), noinline))

/* more than this in one allocation fails, as a full device would */
static const size_t capacity = 64ull << 30;
static CUdeviceptr next_ptr = 0x7f0000000000ull;
static volatile unsigned long long launches, copied;
static struct { char pad[64]; } contexts[8];
/* kernels by name: a function and a kernel handle each (their addresses) */
#define MAX_KERNELS 64
static struct { char name[256]; char func, kern; } kernels[MAX_KERNELS];
static int nkernels;
static unsigned long long next_handle = 0x1000;
static unsigned long long busy_until_ns; /* the fake device's queue of work */

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void queue_work(void)
{
	static long kernel_ns = -1;
	if (kernel_ns < 0) {
		const char *us = getenv("STANDIN_KERNEL_US");
		kernel_ns = (us ? atol(us) : 20) * 1000;
	}
	unsigned long long now = now_ns();
	busy_until_ns = (busy_until_ns > now ? busy_until_ns : now) + kernel_ns;
}

/* what a synchronize does: wait until the device's queue has drained */
static CUresult drain(void)
{
	unsigned long long now = now_ns();
	if (busy_until_ns > now) {
		unsigned long long left = busy_until_ns - now;
		struct timespec ts = {left / 1000000000ull, left % 1000000000ull};
		nanosleep(&ts, NULL);
	}
	return CUDA_SUCCESS;
}

static int kernel_index(const char *name)
{
	for (int i = 0; i < nkernels; i++)
		if (!strcmp(kernels[i].name, name))
			return i;
	if (nkernels == MAX_KERNELS || strlen(name) >= sizeof(kernels[0].name))
		return -1;
	strcpy(kernels[nkernels].name, name);
	return nkernels++;
}

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

/* a kernel by name: its function handle, or its kernel handle */
static CUresult lookup(const char *name, void **out, int want_kernel)
{
	int i = name && out ? kernel_index(name) : -1;
	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*out = want_kernel ? (void *)&kernels[i].kern : (void *)&kernels[i].func;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{ (void)hmod; return lookup(name, (void **)hfunc, 0); }

EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{ (void)library; return lookup(name, (void **)pKernel, 1); }

EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	for (int i = 0; i < nkernels; i++)
		if ((CUkernel)&kernels[i].kern == kernel) {
			*pFunc = (CUfunction)&kernels[i].func;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream) { (void)hStream; return drain(); }
EXPORT CUresult cuCtxSynchronize(void) { return drain(); }
EXPORT CUresult cuEventSynchronize(CUevent hEvent) { (void)hEvent; return drain(); }

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			    const CUmemAllocationProp *prop, unsigned long long flags)
{
	(void)flags;
	if (!handle || !prop || !size)
		return CUDA_ERROR_INVALID_VALUE;
	*handle = next_handle++;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{ return handle ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			 CUmemGenericAllocationHandle handle, unsigned long long flags)
{ (void)offset; (void)flags; return ptr && size && handle ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{ return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
				 void **kernelParams, void **extra)
{
	(void)config; (void)f; (void)kernelParams; (void)extra;
	launches++;
	queue_work();
	return CUDA_SUCCESS;
}

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
	queue_work();
	return CUDA_SUCCESS;
}
