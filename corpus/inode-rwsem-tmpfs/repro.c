/* inode->i_rwsem of a tmpfs file, held by running writers: four threads write 64 KiB at
 * offset 0 of one memfd (a tmpfs file) over and over, for about a second. Each pwrite()
 * takes the inode's i_rwsem for writing (inode_lock in shmem_file_write_iter) and copies
 * the 64 KiB into the file's pages with it held; the pages exist after the first write, so
 * the copy is all there is to do. One thread copies while the others sleep on the rwsem;
 * nobody sleeps holding it.
 *
 * All four threads are pinned to one CPU. A writer that finds an rwsem taken by a running
 * owner first spins on it (rwsem_optimistic_spin), and on this kernel that spinning comes
 * before the lock:contention_begin event: it is time on a CPU that no lock event shows.
 * Spread over two CPUs, one writer copied while another spun unseen, and the waiting the
 * lock events saw (35%) came second to "running in the kernel" (46%). On one CPU the owner
 * is never running while a waiter is, so nobody spins: every wait is a sleep between the
 * lock's events. The main thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define REPRO "inode-rwsem-tmpfs"
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
	pin(0);
	static __thread char buf[CHUNK];
	memset(buf, 'w', sizeof buf);
	pthread_barrier_wait(&start);
	uint64_t end = deadline(SECONDS);
	while (now_ns() < end)
		if (pwrite(file, buf, CHUNK, 0) != CHUNK)
			die("pwrite");
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	find_two_cpus();
	/* A memfd is a file on the kernel's internal tmpfs mount: nothing outside the process. */
	file = memfd_create("repro", MFD_CLOEXEC);
	if (file < 0)
		die("memfd_create");
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_t threads[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, writer, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
