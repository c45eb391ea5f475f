/* A file's f_pos_lock, held by running writers: four threads write() 64 KiB at a time
 * through one shared file descriptor of a regular file on tmpfs, for about a second.
 * write() on a regular file whose struct file is shared (here by the threads' common
 * file table) takes the file's position lock (file->f_pos_lock, a mutex, in fdget_pos)
 * and holds it for the whole write, so that the writes land one after another at the
 * advancing position: the copy into the file's pages happens with it held. One thread
 * copies while the others queue on the mutex, spinning while the owner runs and asleep in
 * it when they give up; nobody sleeps holding it. The inode's own i_rwsem, taken inside,
 * is never contended: f_pos_lock already lets one writer through at a time. (pwrite()
 * takes no position lock; inode-rwsem-tmpfs is that case.)
 *
 * The file has no name (O_TMPFILE in /dev/shm) and every 16th write moves the position
 * back to the start (lseek, under the same lock), so it stays at 1 MiB and nothing is left
 * behind. A memfd would not do: it is not opened through a path, and the kernel sets the
 * position lock's mode only on files that are (do_dentry_open). The main thread only
 * starts and joins them. */
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

#define REPRO "file-f-pos-lock"
#include "../common.h"

#define THREADS 4
#define CHUNK (64 * 1024)
#define SECONDS 1

static int file;
static pthread_barrier_t start;

static void *writer(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-writer%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	static __thread char buf[CHUNK];
	memset(buf, 'f', sizeof buf);
	pthread_barrier_wait(&start);
	uint64_t end = deadline(SECONDS);
	for (unsigned writes = 1; now_ns() < end; writes++) {
		if (write(file, buf, CHUNK) != CHUNK)
			die("write");
		if (writes % 16 == 0 && lseek(file, 0, SEEK_SET) != 0)
			die("lseek");
	}
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	file = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (file < 0)
		die("open O_TMPFILE in /dev/shm");
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_t threads[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, writer, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
