/* An epoll instance's ep->mtx, held by a running epoll_wait: one thread collects events
 * from an epoll instance that watches a thousand eventfds, all of them always readable
 * (level-triggered), while two threads add an eventfd of their own to the same instance
 * and remove it again (epoll_ctl EPOLL_CTL_ADD, EPOLL_CTL_DEL), for about a second.
 *
 * epoll_wait hands events out in ep_send_events, which holds the instance's mutex
 * (ep->mtx) while it polls every ready file again and copies its event to user space: a
 * thousand of them per call. Every epoll_ctl takes the same mutex in do_epoll_ctl. So the
 * two epoll_ctl threads spend their time queued behind epoll_wait, spinning while it runs
 * and asleep in the mutex when it does not; the holder runs all along (eventfd's poll
 * never blocks). This is why servers keep epoll_ctl off the instance their busy thread
 * waits on. None of the files is an epoll file (adding one would also take the global
 * epnested_mutex).
 *
 * epoll_wait runs on the first CPU, the two controllers share the second: unpinned, the
 * three threads on two CPUs were runnable as long as they waited on a busy machine (34%
 * each), and the controllers met in the lock less. The main thread only sets up the
 * instance, starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define REPRO "epoll-ep-mtx"
#include "../common.h"

#define READY 1000
#define CONTROLLERS 2
#define SECONDS 1

static int epoll;
static pthread_barrier_t start;

static void *waiter(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-epwait");
	pin(0);
	static struct epoll_event events[READY];
	pthread_barrier_wait(&start);
	uint64_t end = deadline(SECONDS);
	while (now_ns() < end)
		if (epoll_wait(epoll, events, READY, 0) != READY)
			die("epoll_wait: not every file was ready");
	return NULL;
}

static void *controller(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-epctl%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	pin(1);
	int file = eventfd(0, EFD_CLOEXEC);
	if (file < 0)
		die("eventfd");
	struct epoll_event event = {.events = EPOLLIN, .data.fd = file};
	pthread_barrier_wait(&start);
	uint64_t end = deadline(SECONDS);
	while (now_ns() < end) {
		if (epoll_ctl(epoll, EPOLL_CTL_ADD, file, &event) != 0)
			die("EPOLL_CTL_ADD");
		if (epoll_ctl(epoll, EPOLL_CTL_DEL, file, NULL) != 0)
			die("EPOLL_CTL_DEL");
	}
	close(file);
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	find_two_cpus();
	epoll = epoll_create1(EPOLL_CLOEXEC);
	if (epoll < 0)
		die("epoll_create1");
	/* Eventfds with a count of 1 are readable until read: always ready. */
	for (int i = 0; i < READY; i++) {
		int file = eventfd(1, EFD_CLOEXEC);
		if (file < 0)
			die("eventfd");
		struct epoll_event event = {.events = EPOLLIN, .data.fd = file};
		if (epoll_ctl(epoll, EPOLL_CTL_ADD, file, &event) != 0)
			die("EPOLL_CTL_ADD");
	}
	pthread_barrier_init(&start, NULL, CONTROLLERS + 1);
	pthread_t threads[CONTROLLERS + 1];
	if (pthread_create(&threads[0], NULL, waiter, NULL) != 0)
		die("pthread_create");
	for (int i = 0; i < CONTROLLERS; i++)
		if (pthread_create(&threads[i + 1], NULL, controller, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < CONTROLLERS + 1; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
