/* An rwsem convoy on mmap_lock: two threads map and unmap small anonymous regions in a
 * loop (mmap and munmap take mm->mmap_lock for write) while two others call mincore() on
 * regions of their own in a loop (mincore takes it for read), about a second in all. A
 * writer waits for the readers to leave, the readers that come meanwhile queue behind the
 * waiting writer, and so on: the readers spend most of their time queued on one rwsem whose
 * holders are running, not sleeping.
 *
 * Two writers, not one: with one, the readers run between its holds about as long as they
 * wait, and waiting and running tie. A second writer keeps one queued whenever the other
 * holds the lock, so the readers find it taken or awaited nearly always: on an idle two-CPU
 * machine waiting is 53-62% of the threads' time, running in the kernel 25-27%. (Writers
 * alone do not make the case: they hand the lock over by spinning on it, which is time on
 * a CPU, not waiting.)
 *
 * mincore stands for "a reader of mmap_lock": on this kernel a page fault takes the
 * faulting VMA's own lock and falls back to mmap_lock only now and then, so faulting
 * threads would not queue reliably; mincore always takes mmap_lock for read. The writers
 * never touch their regions, so their munmaps have no TLB entries to shoot down. The main
 * thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define REPRO "mmap-lock-convoy"
#include "../common.h"

#define READERS 2
#define WRITERS 2
#define PAGES 64
#define SECONDS 1

static volatile int stop;
static long page_size;

static void *mapper(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-mapper%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	uint64_t end = deadline(SECONDS);
	for (unsigned long calls = 0;; calls++) {
		void *p = mmap(NULL, PAGES * page_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			die("mmap");
		if (munmap(p, PAGES * page_size) != 0)
			die("munmap");
		if (calls % 16 == 0 && now_ns() >= end)
			break;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void *reader(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-mincore%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	char *p = mmap(NULL, PAGES * page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	memset(p, 1, PAGES * page_size);
	unsigned char resident[PAGES];
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		if (mincore(p, PAGES * page_size, resident) != 0)
			die("mincore");
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	page_size = sysconf(_SC_PAGESIZE);
	pthread_t threads[READERS + WRITERS];
	for (int i = 0; i < READERS; i++)
		if (pthread_create(&threads[i], NULL, reader, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < WRITERS; i++)
		if (pthread_create(&threads[READERS + i], NULL, mapper, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < READERS + WRITERS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
