/* A wait that no task ends: two threads each read a periodic timerfd of their own (a tick
 * every 1.37 ms) and do a few microseconds of work per tick, for about a second. The
 * period is not a multiple of the scheduler tick: a thread woken on the tick itself is on
 * its CPU at every tick and the kernel's tick-based CPU accounting charges it whole ticks
 * (47 ms where it ran 12), which the corpus test compares the trace with.
 * Each thread is asleep in the timerfd read almost all the time, and what wakes it is the
 * timer's interrupt, never another task. Nothing is contended. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define REPRO "timerfd-ticks"
#include "../common.h"

#define THREADS 2
#define TICKS 730

static void *ticker(void *arg)
{
	int me = (int)(uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof name, "repro-ticker%d", me);
	pthread_setname_np(pthread_self(), name);
	int fd = timerfd_create(CLOCK_MONOTONIC, 0);
	if (fd < 0)
		die("timerfd_create");
	struct itimerspec every_ms = {{0, 1370000}, {0, 1370000}};
	if (timerfd_settime(fd, 0, &every_ms, NULL) != 0)
		die("timerfd_settime");
	volatile uint64_t work = 0;
	uint64_t ticks = 0;
	while (ticks < TICKS) {
		uint64_t expired;
		if (read(fd, &expired, sizeof expired) != (ssize_t)sizeof expired)
			die("read timerfd");
		ticks += expired;
		for (int i = 0; i < 2000; i++)
			work += (uint64_t)i * ticks;
	}
	close(fd);
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	pthread_t threads[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, ticker, (void *)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
