/* A steady launch-bound loop against whatever libcuda.so.1 it is linked with, for the launch
 * probes' duty cycle: `launch_loop N SPIN_US MAX_S` prints "ready", waits for a line on
 * stdin, then makes N cuLaunchKernel calls, each followed by SPIN_US of busy work on the
 * CPU (a steady rate, like a framework's step), a cuCtxSynchronize every 100, and stops
 * early after MAX_S seconds; it prints "launched COUNT SECONDS" (the true count). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

CUresult cuInit(unsigned int flags);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
			CUstream stream, void **params, void **extra);

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void launch_step(double spin_s)
{
	cuLaunchKernel((CUfunction)0x1000, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
	double until = now_s() + spin_s;
	while (now_s() < until)
		;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: launch_loop N SPIN_US MAX_S\n");
		return 2;
	}
	long n = atol(argv[1]);
	double spin_s = atof(argv[2]) / 1e6, max_s = atof(argv[3]);
	char line[64];
	cuInit(0);
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 1;
	double t0 = now_s();
	long done = 0;
	while (done < n && now_s() - t0 < max_s) {
		launch_step(spin_s);
		if (++done % 100 == 0)
			cuCtxSynchronize();
	}
	printf("launched %ld %.3f\n", done, now_s() - t0);
	fflush(stdout);
	return 0;
}
