/* Many short holds of a sleeping lock: two threads write small messages to one pipe and a
 * third reads them back, about a second in all. Every write and read takes pipe->mutex for
 * a few microseconds; with more threads than CPUs a waiter often finds it taken and queues
 * on the mutex (spinning while the holder runs, sleeping when it does not). No holder
 * sleeps holding it: a writer that finds the pipe full waits with the mutex released, like
 * a reader that finds it empty. The main thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define WRITERS 2
#define MSG 16
#define SECONDS 1

static int fds[2];
static volatile int stop;

static void die(const char *what)
{
	fprintf(stderr, "pipe-mutex-short-holds: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *writer(void *arg)
{
	char name[16], buf[MSG];
	snprintf(name, sizeof name, "repro-writer%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	memset(buf, 'w', sizeof buf);
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		if (write(fds[1], buf, MSG) != MSG)
			die("write");
	return NULL;
}

static void *reader(void *arg)
{
	pthread_t *writers = arg;
	pthread_setname_np(pthread_self(), "repro-reader");
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	char buf[4096];
	for (unsigned long reads = 0;; reads++) {
		if (read(fds[0], buf, sizeof buf) <= 0)
			die("read");
		if (reads % 256 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - start.tv_sec) * 1000000000L + now.tv_nsec - start.tv_nsec >=
			    SECONDS * 1000000000L)
				break;
		}
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	/* A writer blocked on a full pipe sees stop once the pipe has room again. */
	if (fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0)
		die("fcntl");
	for (int i = 0; i < WRITERS; i++)
		while (pthread_tryjoin_np(writers[i], NULL) != 0)
			if (read(fds[0], buf, sizeof buf) < 0 && errno != EAGAIN)
				die("read");
	return NULL;
}

int main(void)
{
	/* Ahead of ordinary work on a busy machine, so the threads do run at the same time. */
	if (setpriority(PRIO_PROCESS, 0, -10) != 0)
		die("setpriority");
	if (pipe(fds) != 0)
		die("pipe");
	pthread_t writers[WRITERS], drain;
	for (int i = 0; i < WRITERS; i++)
		if (pthread_create(&writers[i], NULL, writer, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	if (pthread_create(&drain, NULL, reader, writers) != 0)
		die("pthread_create");
	pthread_join(drain, NULL);
	return 0;
}
