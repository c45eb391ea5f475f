/* Sleeping with nothing contended: two threads pass a token back and forth through two
 * pipes, each sleeping 1 ms with nanosleep before passing it on, about a second in all.
 * Each thread is asleep almost all the time, either in nanosleep or in a pipe read waiting
 * for the token, and only one thread ever touches a pipe at a time, so its mutex is never
 * contended. The time is sleep, not a lock. The main thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REPRO "sleep-no-lock"
#include "../common.h"

#define ROUNDS 400

/* to[i]: the pipe thread i reads its token from. */
static int to[2][2];

static void *player(void *arg)
{
	int me = (int)(uintptr_t)arg, other = 1 - me;
	char name[16], token = 't';
	snprintf(name, sizeof name, "repro-sleeper%d", me);
	pthread_setname_np(pthread_self(), name);
	struct timespec ms = {0, 1000000};
	if (me == 0 && write(to[other][1], &token, 1) != 1)
		die("write");
	for (int round = 0; round < ROUNDS; round++) {
		if (read(to[me][0], &token, 1) != 1)
			die("read");
		while (nanosleep(&ms, NULL) != 0)
			if (errno != EINTR)
				die("nanosleep");
		/* The last pass of thread 1 is never read: thread 0 is done by then. */
		if (write(to[other][1], &token, 1) != 1)
			die("write");
	}
	return NULL;
}

int main(void)
{
	if (pipe(to[0]) != 0 || pipe(to[1]) != 0)
		die("pipe");
	pthread_t threads[2];
	for (uintptr_t i = 0; i < 2; i++)
		if (pthread_create(&threads[i], NULL, player, (void *)i) != 0)
			die("pthread_create");
	for (int i = 0; i < 2; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
