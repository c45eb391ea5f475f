/* Many short holds of a sleeping lock: four threads each write 64 KiB to one pipe and read
 * 64 KiB back, over and over, for about a second. pipe->mutex is held for the whole copy of
 * each write and read (microseconds), and there is little else to do, so at any moment one
 * thread copies under the mutex and the others queue on it: spinning while the holder
 * runs, sleeping in the mutex when it does not. The pipe is made large enough (1 MiB) for
 * every thread's chunk at once, so no writer ever finds it full and no reader finds it
 * empty for long: nobody sleeps holding the mutex. The main thread only starts and joins
 * them. */
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

#define REPRO "pipe-mutex-short-holds"
#include "../common.h"

#define THREADS 4
#define CHUNK (64 * 1024)
#define PIPE_SIZE (1024 * 1024)
#define SECONDS 1

static int fds[2];

static void *copier(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-pipe%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	static __thread char buf[CHUNK];
	memset(buf, 'p', sizeof buf);
	uint64_t end = deadline(SECONDS);
	while (now_ns() < end) {
		/* What this thread writes, it reads back (any thread's bytes): the pipe never
		 * holds more than THREADS chunks, well under its size. */
		for (size_t done = 0; done < CHUNK;) {
			ssize_t n = write(fds[1], buf + done, CHUNK - done);
			if (n <= 0)
				die("write");
			done += (size_t)n;
		}
		for (size_t done = 0; done < CHUNK;) {
			ssize_t n = read(fds[0], buf + done, CHUNK - done);
			if (n <= 0)
				die("read");
			done += (size_t)n;
		}
	}
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	if (pipe(fds) != 0)
		die("pipe");
	if (fcntl(fds[1], F_SETPIPE_SZ, PIPE_SIZE) < PIPE_SIZE)
		die("F_SETPIPE_SZ");
	pthread_t threads[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, copier, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
