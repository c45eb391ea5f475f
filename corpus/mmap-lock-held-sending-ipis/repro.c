/* A lock held while its holder sends IPIs: one thread, pinned to the first CPU, flips the
 * protection of a small region it has touched with mprotect() in a loop. mprotect holds
 * mm->mmap_lock for write across the whole call, including the TLB shootdown it must send
 * to every other CPU running the mm, and waits for. Two more threads, pinned to the second
 * CPU, call mincore() in a loop (mmap_lock for read): they keep the mm live on that CPU, so
 * each mprotect sends an IPI there, and they queue behind every mprotect (and it behind
 * them). The main thread only starts and joins them, and is the only other thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define REPRO "mmap-lock-held-sending-ipis"
#include "../common.h"

#define PAGES 4
#define WAITERS 2
#define SECONDS 1

static volatile int stop;
static char *region;
static long page_size;
static pthread_barrier_t started;

static void *flipper(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-mprotect");
	pin(0);
	pthread_barrier_wait(&started);
	uint64_t end = deadline(SECONDS);
	for (unsigned long calls = 0;; calls++) {
		/* Present PTEs change every call: read-only, then writable again. */
		if (mprotect(region, PAGES * page_size, calls % 2 ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
			die("mprotect");
		if (calls % 256 == 0 && now_ns() >= end)
			break;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void *waiter(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "repro-mincore%d", (int)(uintptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	pin(1);
	char *p = mmap(NULL, page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	p[0] = 1;
	unsigned char resident;
	pthread_barrier_wait(&started);
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		if (mincore(p, page_size, &resident) != 0)
			die("mincore");
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	find_two_cpus();
	page_size = sysconf(_SC_PAGESIZE);
	region = mmap(NULL, PAGES * page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED)
		die("mmap");
	memset(region, 1, PAGES * page_size);
	pthread_barrier_init(&started, NULL, WAITERS + 1);
	pthread_t threads[WAITERS + 1];
	if (pthread_create(&threads[0], NULL, flipper, NULL) != 0)
		die("pthread_create");
	for (int i = 0; i < WAITERS; i++)
		if (pthread_create(&threads[i + 1], NULL, waiter, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i <= WAITERS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
