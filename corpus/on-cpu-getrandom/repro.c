/* Kernel work on a CPU without contention, and without memory management either: one
 * thread asks getrandom() for 1 MiB at a time for about a second. The kernel generates it
 * with ChaCha20 on the calling CPU into the thread's buffer (already faulted in): system
 * time spent running, with no lock to wait on. The main thread only starts and joins it. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define REPRO "on-cpu-getrandom"
#include "../common.h"

#define CHUNK (1 << 20)
#define SECONDS 1

static void *generate(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-random");
	char *buf = malloc(CHUNK);
	if (!buf)
		die("malloc");
	memset(buf, 0, CHUNK);
	uint64_t end = deadline(SECONDS);
	do {
		for (long done = 0; done < CHUNK;) {
			ssize_t n = getrandom(buf + done, CHUNK - done, 0);
			if (n < 0 && errno != EINTR)
				die("getrandom");
			if (n > 0)
				done += n;
		}
	} while (now_ns() < end);
	free(buf);
	return NULL;
}

int main(void)
{
	pthread_t thread;
	if (pthread_create(&thread, NULL, generate, NULL) != 0)
		die("pthread_create");
	pthread_join(thread, NULL);
	return 0;
}
