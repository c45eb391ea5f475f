/* Kernel work on a CPU without contention: one thread maps 32 MiB of fresh anonymous
 * memory, writes every page (one page fault each: allocate, zero, map), and unmaps it
 * (free the pages, one TLB flush of its own CPU), over and over for about a second. Its
 * time is system time spent running in the page-fault and munmap paths; its mm has one
 * user, so mmap_lock and the page-table locks are never contended. The main thread only
 * starts and joins it. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define REPRO "on-cpu-page-faults"
#include "../common.h"

#define BYTES (32L << 20)
#define SECONDS 1

static void *fault(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-faulter");
	long page_size = sysconf(_SC_PAGESIZE);
	uint64_t end = deadline(SECONDS);
	do {
		/* MAP_POPULATE is not used: the faults are the point. No huge pages either, so
		 * each 4 KiB page is its own fault. */
		char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			die("mmap");
		if (madvise(p, BYTES, MADV_NOHUGEPAGE) != 0)
			die("madvise");
		for (long off = 0; off < BYTES; off += page_size)
			p[off] = 1;
		if (munmap(p, BYTES) != 0)
			die("munmap");
	} while (now_ns() < end);
	return NULL;
}

int main(void)
{
	pthread_t thread;
	if (pthread_create(&thread, NULL, fault, NULL) != 0)
		die("pthread_create");
	pthread_join(thread, NULL);
	return 0;
}
