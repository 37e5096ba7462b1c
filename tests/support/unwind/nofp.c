/* A program without frame pointers, for the unwind-table tests: main -> outer -> middle ->
 * dyn_frame (alloca: its CFA is rbp-based) -> big_frame (a 5 KB frame) -> leaf_spin, the
 * hot leaf. Built with -O2 -fomit-frame-pointer (tests/support/unwind/__init__.py).
 * Prints READY, then works for argv[1] seconds. */
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) unsigned long leaf_spin(unsigned long n)
{
	unsigned long x = 0;
	for (unsigned long i = 0; i < n; i++)
		x += i * i ^ (x >> 3);
	return x;
}

__attribute__((noinline)) unsigned long big_frame(unsigned long n)
{
	volatile char buf[5000];
	memset((char *)buf, (int)n, sizeof(buf));
	return leaf_spin(n) + buf[n % 5000];
}

__attribute__((noinline)) unsigned long dyn_frame(unsigned long n)
{
	volatile char *p = alloca(64 + (n & 255));
	for (int i = 0; i < 64 + (int)(n & 255); i++)
		p[i] = (char)i;
	unsigned long r = big_frame(n);
	return r + p[(n >> 3) & 63];
}

__attribute__((noinline)) unsigned long middle(unsigned long n)
{
	unsigned long r = dyn_frame(n);
	sink = r;
	return r + 1;
}

__attribute__((noinline)) unsigned long outer(unsigned long n)
{
	return middle(n) * 3;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5;
	struct timespec t0, t;
	printf("READY\n");
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sink = outer(200000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return 0;
}
