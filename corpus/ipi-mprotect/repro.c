/* An IPI storm from one system call: one thread flips the protection of a small region
 * back and forth with mprotect() for about a second while another thread of the same
 * process runs on the other CPU, reading that region. Every mprotect that changes present
 * PTEs must flush the TLB of each CPU running the mm: one TLB-shootdown IPI per call to
 * the reader's CPU (flush_tlb_mm_range -> on_each_cpu_cond_mask -> flush_tlb_func). Only
 * this process's own mm lock is taken, by one thread: nothing is contended. The two threads
 * are pinned to the first two CPUs the process may use; the main thread only starts and
 * joins them. */
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

#define REPRO "ipi-mprotect"
#include "../common.h"

#define PAGES 4
#define SECONDS 1

static volatile int stop;
static volatile char *region;
static long page_size;
static pthread_barrier_t started;

/* Keeps the mm live on its CPU (and the region's translations in its TLB), no syscalls. */
static void *reader(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-reader");
	pin(1);
	unsigned long sum = 0;
	pthread_barrier_wait(&started);
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		for (int i = 0; i < PAGES; i++)
			sum += region[i * page_size];
	return (void *)sum;
}

static void *flipper(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-mprotect");
	pin(0);
	pthread_barrier_wait(&started);
	uint64_t end = deadline(SECONDS);
	for (unsigned long calls = 0;; calls++) {
		/* Read-only and back: the reader only reads, so it never faults. */
		if (mprotect((void *)region, PAGES * page_size, calls % 2 ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
			die("mprotect");
		if (calls % 256 == 0 && now_ns() >= end)
			break;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
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
	/* Present PTEs: a protection change has translations to shoot down. */
	memset((void *)region, 1, PAGES * page_size);
	pthread_barrier_init(&started, NULL, 2);
	pthread_t threads[2];
	if (pthread_create(&threads[0], NULL, reader, NULL) != 0 ||
	    pthread_create(&threads[1], NULL, flipper, NULL) != 0)
		die("pthread_create");
	pthread_join(threads[0], NULL);
	pthread_join(threads[1], NULL);
	return 0;
}
