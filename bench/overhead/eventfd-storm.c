/* A spinlock storm for bench/overhead, the highest contention rate found on a two-CPU host:
 * three threads write 1 to one eventfd and one reads it (non-blocking), for SECONDS, with
 * sixteen epoll instances watching it so that each wakeup holds the eventfd's wait-queue
 * spinlock (ctx->wqh.lock) long enough to collide (corpus/spinlock-eventfd). Thread i is
 * pinned to the i-th allowed CPU (round robin) and runs at nice -10 (root may). Then it
 * writes "OPS SECONDS CPU_SECONDS" to OUT: the system calls all threads completed, the time
 * taken and the CPU time the process used (user and system: a tracepoint's BPF program or
 * event write runs in the thread that hits it, so its cost is there).
 *
 * With RATE, the threads together make at most RATE system calls a second, each thread
 * pacing its own share by sleeping whenever it is ahead of schedule: a storm at a set
 * rate, whose cost is read as CPU time per call rather than time per call.
 *
 *   eventfd-storm SECONDS OUT [RATE] */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define WRITERS 3
#define WATCHERS 16

static int efd;
static volatile int stop;
static uint64_t ops[WRITERS + 1];
/* Calls a second per thread, 0: as fast as it can. */
static double per_thread_rate;

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

/* Sleeps until call `n` of a thread that started at `start` is due at its rate. */
static void pace(uint64_t start, uint64_t n)
{
	if (per_thread_rate <= 0 || n % 16 != 0)
		return;
	uint64_t due = start + (uint64_t)(n / per_thread_rate * 1e9);
	uint64_t now = now_ns();
	if (due > now) {
		struct timespec nap = {(time_t)((due - now) / 1000000000ull),
				       (long)((due - now) % 1000000000ull)};
		nanosleep(&nap, NULL);
	}
}

static void pin(int i)
{
	cpu_set_t allowed, one;
	int n = 0;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		die("sched_getaffinity");
	int count = CPU_COUNT(&allowed);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		if (n++ == i % count) {
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
	int i = (int)(uintptr_t)arg;
	uint64_t one = 1, n = 0;
	pin(i);
	setpriority(PRIO_PROCESS, 0, -10);
	pthread_setname_np(pthread_self(), "storm-writer");
	uint64_t start = now_ns();
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		if (write(efd, &one, sizeof one) != sizeof one)
			die("write the eventfd");
		n++;
		pace(start, n);
	}
	ops[i] = n;
	return NULL;
}

static void *reader(void *arg)
{
	int i = (int)(uintptr_t)arg;
	uint64_t value, n = 0;
	pin(i);
	setpriority(PRIO_PROCESS, 0, -10);
	pthread_setname_np(pthread_self(), "storm-reader");
	uint64_t start = now_ns();
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		if (read(efd, &value, sizeof value) != sizeof value && errno != EAGAIN)
			die("read the eventfd");
		n++;
		pace(start, n);
	}
	ops[i] = n;
	return NULL;
}

int main(int argc, char **argv)
{
	if ((argc != 3 && argc != 4) || atof(argv[1]) <= 0 || (argc == 4 && atof(argv[3]) <= 0)) {
		fprintf(stderr, "usage: eventfd-storm SECONDS OUT [RATE]\n");
		return 2;
	}
	if (argc == 4)
		per_thread_rate = atof(argv[3]) / (WRITERS + 1);
	double seconds = atof(argv[1]);
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd < 0)
		die("eventfd");
	for (int i = 0; i < WATCHERS; i++) {
		int ep = epoll_create1(EPOLL_CLOEXEC);
		struct epoll_event ev = {.events = EPOLLIN};
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) != 0)
			die("epoll");
	}
	pthread_t threads[WRITERS + 1];
	uint64_t start = now_ns();
	for (int i = 0; i <= WRITERS; i++)
		if (pthread_create(&threads[i], NULL, i < WRITERS ? writer : reader,
				   (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	struct timespec nap = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	nanosleep(&nap, NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	uint64_t total = 0;
	for (int i = 0; i <= WRITERS; i++) {
		pthread_join(threads[i], NULL);
		total += ops[i];
	}
	double took = (now_ns() - start) / 1e9;
	struct rusage used;
	if (getrusage(RUSAGE_SELF, &used) != 0)
		die("getrusage");
	double cpu = used.ru_utime.tv_sec + used.ru_utime.tv_usec / 1e6 + used.ru_stime.tv_sec +
		     used.ru_stime.tv_usec / 1e6;
	FILE *out = fopen(argv[2], "w");
	if (!out || fprintf(out, "%llu %.6f %.6f\n", (unsigned long long)total, took, cpu) < 0 ||
	    fclose(out) != 0)
		die(argv[2]);
	return 0;
}
