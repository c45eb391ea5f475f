/* A user-space lock, invisible to the kernel's lock tracepoints: three threads take turns
 * on one pthread mutex, each holding it for about 20 us of computation and a 200 us sleep,
 * for about a second. A thread that finds the mutex taken sleeps in futex_wait until the
 * holder's unlock wakes it. The kernel sees sleeps and wakeups on a futex, not a kernel
 * lock: no kernel lock is contended for long (the futex hash bucket's spinlock is taken
 * for a moment per wait and wake), and a tool that blames one is wrong; the cost is the
 * application's own lock.
 *
 * The sleep in the hold keeps the two CPUs mostly free, so the waiting is seen for what it
 * is (62% of the threads' time in futex_wait, 26-28% in the holders' nanosleep, about 5%
 * runnable): with computation alone, three threads on two CPUs spent about a third of
 * their time each runnable, asleep on the futex and computing, and no cause led. The
 * main thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPRO "futex-user-mutex"
#include "../common.h"

#define THREADS 3
#define SECONDS 1

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t shared;
static volatile int stop;

static void *worker(void *arg)
{
	uintptr_t index = (uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof name, "repro-locker%d", (int)index);
	pthread_setname_np(pthread_self(), name);
	uint64_t end = now_ns() + SECONDS * 1000000000ull;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&lock);
		/* About 20 us of work with the lock held (clock_gettime is a vDSO call), then a
		 * 200 us sleep, still holding it. */
		uint64_t until = now_ns() + 20000, x = shared;
		while (now_ns() < until)
			for (int i = 0; i < 100; i++)
				x = x * 6364136223846793005u + 1442695040888963407u;
		shared = x;
		struct timespec pause = {0, 200000};
		nanosleep(&pause, NULL);
		pthread_mutex_unlock(&lock);
		if (now_ns() >= end)
			__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(void)
{
	pthread_t threads[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, worker, (void *)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
