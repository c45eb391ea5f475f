/* The file table's spinlock, files->file_lock: two threads of one process, each pinned to
 * a CPU of its own, dup() a file descriptor and close() the copy, over and over, for
 * about a second. Both calls change the table the threads share: dup takes its spinlock
 * to find and reserve the lowest free descriptor (alloc_fd), close takes it to clear the
 * slot (file_close_fd). There is little else in either call, so each thread spins on
 * the lock while the other holds it; the holder is always running (a spinlock's holder
 * cannot sleep). With one thread per CPU spinning can only be as long as the holds it
 * waits for, which are time on a CPU too: the two tie, as in spinlock-eventfd. The main
 * thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define REPRO "files-file-lock"
#include "../common.h"

#define THREADS 2
#define SECONDS 1

static int original;
static pthread_barrier_t start;

static void *duplicator(void *arg)
{
	int index = (int)(uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof name, "repro-dup%d", index);
	pthread_setname_np(pthread_self(), name);
	pin(index);
	pthread_barrier_wait(&start);
	uint64_t end = deadline(SECONDS);
	while (now_ns() < end) {
		int copy = dup(original);
		if (copy < 0)
			die("dup");
		if (close(copy) != 0)
			die("close");
	}
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	find_two_cpus();
	original = eventfd(0, EFD_CLOEXEC);
	if (original < 0)
		die("eventfd");
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_t threads[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, duplicator, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
