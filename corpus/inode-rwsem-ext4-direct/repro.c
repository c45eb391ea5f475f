/* inode->i_rwsem of a file on the root filesystem (ext4 here), held across disk I/O:
 * three threads append 4 KiB with O_DIRECT to one file, for about a second. An appending
 * direct write takes the inode's i_rwsem for writing (inode_lock in ext4_dio_write_iter:
 * a write past the end of the file may not share it) and waits for the block device to
 * complete the write before it unlocks. The holder sleeps in the I/O wait, the other two
 * writers sleep on the rwsem behind it.
 *
 * The file has no name: it is made with O_TMPFILE in a directory made with mkdtemp in
 * /tmp (on the root filesystem), and the directory is removed before the writers start,
 * so nothing is left behind however the program ends. Fails if the filesystem of /tmp has
 * no O_TMPFILE or no O_DIRECT. The main thread only starts and joins the writers. */
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

#define REPRO "inode-rwsem-ext4-direct"
#include "../common.h"

#define THREADS 3
#define BLOCK 4096
#define SECONDS 1

static int file;
static pthread_barrier_t start;

static void *writer(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-writer%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	void *block;
	if (posix_memalign(&block, BLOCK, BLOCK) != 0)
		die("posix_memalign");
	memset(block, 'd', BLOCK);
	pthread_barrier_wait(&start);
	uint64_t end = deadline(SECONDS);
	while (now_ns() < end)
		/* pwrite, not write: write() would first take the file's own f_pos_lock
		 * (fdget_pos), shared by the threads, and queue them there. With O_APPEND,
		 * Linux's pwrite appends whatever the offset. */
		if (pwrite(file, block, BLOCK, 0) != BLOCK)
			die("pwrite");
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	char dir[] = "/tmp/repro-XXXXXX";
	if (!mkdtemp(dir))
		die("mkdtemp in /tmp");
	file = open(dir, O_TMPFILE | O_RDWR | O_APPEND | O_DIRECT | O_CLOEXEC, 0600);
	int saved = errno;
	if (rmdir(dir) != 0)
		die("rmdir");
	errno = saved;
	if (file < 0)
		die("open O_TMPFILE | O_DIRECT in /tmp");
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_t threads[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, writer, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
