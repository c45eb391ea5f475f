/* A spinlock convoy: four threads hammer one eventfd, three adding to its counter and one
 * reading it back, for about a second. Every eventfd_write and eventfd_read takes the
 * eventfd's wait-queue spinlock (ctx->wqh.lock) with interrupts off and, holding it, wakes
 * the wait queue: sixteen epoll instances watch the eventfd, so each wakeup runs sixteen
 * ep_poll_callback calls under the lock, and the hold is long enough for the threads
 * running at the same time to collide on it and spin: two pinned to each of two CPUs, or
 * one on each of four where the process may use four.
 * Nothing sleeps holding anything; nobody waits on the epoll instances. The main thread
 * only sets up and joins. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define REPRO "spinlock-eventfd"
#include "../common.h"

#define ADDERS 3
#define SECONDS 1
#define WATCHERS 16

static int efd;
static volatile int stop;

static void *adder(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-adder%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	pin((int)(uintptr_t)arg);
	uint64_t one = 1;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		if (write(efd, &one, sizeof one) != sizeof one)
			die("write the eventfd");
	return NULL;
}

static void *reader(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-reader");
	pin(ADDERS);
	uint64_t end = deadline(SECONDS);
	uint64_t value;
	for (unsigned long reads = 0;; reads++) {
		if (read(efd, &value, sizeof value) != sizeof value && errno != EAGAIN)
			die("read the eventfd");
		if (reads % 1024 == 0 && now_ns() >= end)
			break;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	/* One thread per CPU where there are four; else two threads on each of two CPUs. */
	find_cpus(ADDERS + 1);
	/* Non-blocking: a read of a zero counter returns EAGAIN instead of sleeping. */
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd < 0)
		die("eventfd");
	for (int i = 0; i < WATCHERS; i++) {
		int ep = epoll_create1(EPOLL_CLOEXEC);
		struct epoll_event ev = {.events = EPOLLIN};
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) != 0)
			die("epoll");
	}
	pthread_t threads[ADDERS + 1];
	for (int i = 0; i < ADDERS; i++)
		if (pthread_create(&threads[i], NULL, adder, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	if (pthread_create(&threads[ADDERS], NULL, reader, NULL) != 0)
		die("pthread_create");
	for (int i = 0; i <= ADDERS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
