/* An mmap_lock storm for bench/overhead: WRITERS threads map and unmap a small anonymous
 * region in a loop (mmap and munmap take mm->mmap_lock for write) and READERS threads call
 * mincore() on regions of their own (mmap_lock for read), for SECONDS; then it writes one
 * line, "OPS SECONDS", to OUT: the system calls all threads completed and the time they
 * took. Thread i is pinned to the i-th allowed CPU (writers first, round robin) and runs
 * at nice -10 (root may), so that writers and readers meet on different CPUs and a busy
 * host's other work does not serialize them. Nothing is touched, so no TLB shootdowns:
 * the cost is the lock.
 *
 *   mmap-storm SECONDS OUT [WRITERS READERS]      (default 2 writers, 2 readers)
 *
 * Contention rate: vmscale record --aggregate -- mmap-storm ... counts it
 * (trace.aggregate.seen, lock:contention_begin). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PAGES 16
#define MAX_THREADS 16

static volatile int stop;
static long page_size;
static uint64_t ops[MAX_THREADS];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Thread i runs on the i-th CPU the process may use (round robin), so that writers and
 * readers meet on different CPUs instead of taking turns on one. */
static void pin(uintptr_t i)
{
	cpu_set_t allowed, one;
	int n = 0;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		die("sched_getaffinity");
	int count = CPU_COUNT(&allowed);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		if (n++ == (int)(i % count)) {
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			if (sched_setaffinity(0, sizeof one, &one) != 0)
				die("sched_setaffinity");
			return;
		}
	}
}

static void *writer(void *arg)
{
	uintptr_t i = (uintptr_t)arg;
	uint64_t n = 0;
	pin(i);
	setpriority(PRIO_PROCESS, 0, -10);
	pthread_setname_np(pthread_self(), "storm-writer");
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		void *p = mmap(NULL, PAGES * page_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			die("mmap");
		if (munmap(p, PAGES * page_size) != 0)
			die("munmap");
		n += 2;
	}
	ops[i] = n;
	return NULL;
}

static void *reader(void *arg)
{
	uintptr_t i = (uintptr_t)arg;
	uint64_t n = 0;
	unsigned char resident[PAGES];
	pin(i);
	setpriority(PRIO_PROCESS, 0, -10);
	pthread_setname_np(pthread_self(), "storm-reader");
	char *p = mmap(NULL, PAGES * page_size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	memset(p, 1, PAGES * page_size);
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		if (mincore(p, PAGES * page_size, resident) != 0)
			die("mincore");
		n++;
	}
	ops[i] = n;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 5) {
		fprintf(stderr, "usage: mmap-storm SECONDS OUT [WRITERS READERS]\n");
		return 2;
	}
	double seconds = atof(argv[1]);
	int writers = argc == 5 ? atoi(argv[3]) : 2;
	int readers = argc == 5 ? atoi(argv[4]) : 2;
	if (seconds <= 0 || writers < 0 || readers < 0 || writers + readers < 1 ||
	    writers + readers > MAX_THREADS) {
		fprintf(stderr, "mmap-storm: bad arguments\n");
		return 2;
	}
	page_size = sysconf(_SC_PAGESIZE);
	pthread_t threads[MAX_THREADS];
	uint64_t start = now_ns();
	for (int i = 0; i < writers + readers; i++)
		if (pthread_create(&threads[i], NULL, i < writers ? writer : reader,
				   (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	struct timespec nap = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	nanosleep(&nap, NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	uint64_t total = 0;
	for (int i = 0; i < writers + readers; i++) {
		pthread_join(threads[i], NULL);
		total += ops[i];
	}
	double took = (now_ns() - start) / 1e9;
	FILE *out = fopen(argv[2], "w");
	if (!out || fprintf(out, "%llu %.6f\n", (unsigned long long)total, took) < 0 ||
	    fclose(out) != 0)
		die(argv[2]);
	return 0;
}
