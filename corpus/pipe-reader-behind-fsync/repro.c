/* A two-hop wait chain: three reader threads each block reading a pipe of their own; one
 * writer appends 4 KiB to a file in /tmp, makes it durable with fdatasync, and then writes
 * one byte to every reader's pipe, for about a second. Each reader is asleep in the pipe
 * read almost all the time, woken by the writer, which itself spent most of that time
 * asleep waiting for the file's data and the journal to reach the disk. No lock is
 * contended: the readers wait for the writer, and the writer waits for I/O. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REPRO "pipe-reader-behind-fsync"
#include "../common.h"

#define READERS 3

static int pipes[READERS][2];
static volatile int done;

static void *reader(void *arg)
{
	int me = (int)(uintptr_t)arg;
	char name[16], byte;
	snprintf(name, sizeof name, "repro-reader%d", me);
	pthread_setname_np(pthread_self(), name);
	for (;;) {
		ssize_t n = read(pipes[me][0], &byte, 1);
		if (n == 0)
			return NULL; /* the writer closed the pipe: done */
		if (n != 1)
			die("read");
	}
}

static void *writer(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-writer");
	int fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
	if (fd < 0)
		die("open O_TMPFILE in /tmp");
	static char block[4096];
	memset(block, 'x', sizeof block);
	uint64_t end = deadline(1);
	off_t at = 0;
	while (now_ns() < end) {
		if (pwrite(fd, block, sizeof block, at) != (ssize_t)sizeof block)
			die("pwrite");
		at += sizeof block;
		if (fdatasync(fd) != 0)
			die("fdatasync");
		for (int i = 0; i < READERS; i++)
			if (write(pipes[i][1], "t", 1) != 1)
				die("write");
	}
	for (int i = 0; i < READERS; i++)
		close(pipes[i][1]);
	close(fd);
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	for (int i = 0; i < READERS; i++)
		if (pipe(pipes[i]) != 0)
			die("pipe");
	pthread_t readers[READERS], w;
	for (uintptr_t i = 0; i < READERS; i++)
		if (pthread_create(&readers[i], NULL, reader, (void *)i) != 0)
			die("pthread_create");
	if (pthread_create(&w, NULL, writer, NULL) != 0)
		die("pthread_create");
	pthread_join(w, NULL);
	for (int i = 0; i < READERS; i++)
		pthread_join(readers[i], NULL);
	return 0;
}
