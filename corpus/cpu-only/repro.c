/* Null case: two threads compute for about a second and make no system call while they
 * do. Nothing waits on any lock; a tool that blames a lock here is wrong. The process runs
 * ahead of other work (nice -10 in an autogroup of its own), so that on a busy machine its
 * threads still spend their time computing rather than waiting for a CPU, and a verdict
 * that puts starvation first is wrong there too. The main thread only starts and joins
 * them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define REPRO "cpu-only"
#include "../common.h"

#define THREADS 2

static volatile uint64_t sink[THREADS];

static void *compute(void *arg)
{
	uintptr_t index = (uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof name, "repro-compute%d", (int)index);
	pthread_setname_np(pthread_self(), name);
	uint64_t x = 0x9e3779b97f4a7c15u + index, end = now_ns() + 1000000000u;
	while (now_ns() < end) {
		for (int i = 0; i < 100000; i++) {
			/* xorshift: integer work the compiler cannot fold away. */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
	}
	sink[index] = x;
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	pthread_t threads[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++) {
		if (pthread_create(&threads[i], NULL, compute, (void *)i) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
