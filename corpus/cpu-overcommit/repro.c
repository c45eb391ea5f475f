/* CPU overcommit: four threads compute, all pinned to the first CPU the process may use,
 * for about a second. No system calls while they compute, no shared data: every thread is
 * runnable all the time and on the CPU about a quarter of it. The cost is the time
 * runnable but not running; no lock is involved, and a tool that blames one is wrong. The
 * main thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPRO "cpu-overcommit"
#include "../common.h"

#define THREADS 4

static int cpu;
static volatile uint64_t sink[THREADS];
static pthread_barrier_t started;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	/* A vDSO call, but CPU-time clocks fall back to the system call: read it rarely. */
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *compute(void *arg)
{
	uintptr_t index = (uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof name, "repro-spin%d", (int)index);
	pthread_setname_np(pthread_self(), name);
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0)
		die("sched_setaffinity");
	pthread_barrier_wait(&started);
	/* Each thread stops after 250 ms of its own CPU time: about a second of wall time
	 * on a CPU shared with three other spinners. */
	uint64_t x = 0x9e3779b97f4a7c15u + index, end = thread_cpu_ns() + 250000000u;
	while (thread_cpu_ns() < end) {
		for (int i = 0; i < 1000000; i++) {
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
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		die("sched_getaffinity");
	while (!CPU_ISSET(cpu, &allowed))
		if (++cpu == CPU_SETSIZE)
			die("no CPU allowed");
	pthread_barrier_init(&started, NULL, THREADS);
	pthread_t threads[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, compute, (void *)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
