/* What every reproducer of the corpus repeats: failing with a one-line reason, the
 * monotonic clock and a run's deadline, finding CPUs and pinning to them, and running ahead
 * of ordinary work. A case defines REPRO (its name, the prefix of its errors) and includes
 * this after its system headers. Everything is static: each case is one translation unit,
 * and a case that uses only some of it gets no warning for the rest. */
#ifndef REPRO
#error "define REPRO (the case's name) before including common.h"
#endif

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define REPRO_UNUSED __attribute__((unused))

/* Fails the case: `what` and errno's text, on one line. */
REPRO_UNUSED static void die(const char *what)
{
	fprintf(stderr, REPRO ": %s: %s\n", what, strerror(errno));
	exit(1);
}

REPRO_UNUSED static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* When a run of `seconds` that starts now ends. */
REPRO_UNUSED static uint64_t deadline(unsigned seconds)
{
	return now_ns() + seconds * 1000000000ull;
}

/* The first CPUs the process may use (at most four), which pin() places threads on. */
static int repro_cpus[4];
static int repro_ncpus;

/* Fills repro_cpus with up to `want` (at most four) of the CPUs the process may use and
 * returns how many, or fails the case on a machine with one CPU. */
REPRO_UNUSED static int find_cpus(int want)
{
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		die("sched_getaffinity");
	if (want > 4)
		want = 4;
	repro_ncpus = 0;
	for (int cpu = 0; cpu < CPU_SETSIZE && repro_ncpus < want; cpu++)
		if (CPU_ISSET(cpu, &allowed))
			repro_cpus[repro_ncpus++] = cpu;
	if (repro_ncpus < 2) {
		fprintf(stderr, REPRO ": needs two CPUs\n");
		exit(1);
	}
	return repro_ncpus;
}

/* The first two CPUs the process may use, or fails the case. */
REPRO_UNUSED static void find_two_cpus(void)
{
	find_cpus(2);
}

/* Pins the calling thread to repro_cpus[index % the CPUs found]. */
REPRO_UNUSED static void pin(int index)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(repro_cpus[index % repro_ncpus], &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0)
		die("sched_setaffinity");
}

/* Nice -10 (root may): ahead of ordinary work on a busy machine, so that the threads of a
 * case whose bottleneck needs them at the same time do run at the same time.
 *
 * Where the kernel groups tasks by session for the scheduler (autogroup, on by default on
 * most distributions' kernels: /proc/sys/kernel/sched_autogroup_enabled), a task's nice
 * value only weighs against the tasks of its own session, and every session gets an even
 * share of a busy CPU whatever its tasks' nice values: a build in another terminal took
 * half of each CPU from a nice -10 case here. So the process first starts a session of
 * its own (setsid, which gives it an autogroup of its own, gone when it exits) and gives
 * that group nice -10 too. A process that leads its process group (started from an
 * interactive shell) cannot start a session and keeps its caller's: only its nice value
 * then counts. vmscale starts commands in its own process group, so they can. */
REPRO_UNUSED static void run_ahead_of_other_work(void)
{
	if (setpriority(PRIO_PROCESS, 0, -10) != 0)
		die("setpriority");
	FILE *autogroup = fopen("/proc/self/autogroup", "r+");
	if (!autogroup)
		return; /* no autogroup in this kernel */
	fclose(autogroup);
	if (setsid() < 0)
		return; /* leads its process group: its caller's session and autogroup */
	autogroup = fopen("/proc/self/autogroup", "w");
	if (!autogroup || fprintf(autogroup, "-10") < 0 || fclose(autogroup) != 0)
		die("nice -10 for the process's own autogroup");
}
