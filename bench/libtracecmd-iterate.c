/*
 * The reference for decode speed: libtracecmd's own iteration over every event of a
 * trace-cmd .dat, in time order across CPUs, reading one field (common_pid) of each.
 * No text is formatted, unlike `trace-cmd report`.
 *
 *   libtracecmd-iterate FILE.dat
 *
 * Every buffer is iterated, the top-level one and each instance's (bench/decode records
 * into an instance), one after the other. Prints "events N", "seconds S" (wall time of
 * the iterations, the file already open) and the sum of the pids read, so the reads
 * cannot be left out.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <trace-cmd.h>

struct tally;
static int count(struct tracecmd_input *handle, struct tep_record *record, int cpu,
		 void *data);

struct tally {
	struct tep_handle *tep;
	unsigned long long events;
	long long pid_sum;
};

static int iterate(struct tracecmd_input *handle, struct tally *tally)
{
	tally->tep = tracecmd_get_tep(handle);
	return tracecmd_iterate_events(handle, NULL, 0, count, tally);
}

static int count(struct tracecmd_input *handle, struct tep_record *record, int cpu,
		 void *data)
{
	struct tally *tally = data;

	(void)handle;
	(void)cpu;
	tally->events++;
	tally->pid_sum += tep_data_pid(tally->tep, record);
	return 0;
}

int main(int argc, char **argv)
{
	struct tracecmd_input *handle, *instance;
	struct tally tally = { 0 };
	struct timespec start, end;
	int i, failed;

	if (argc != 2) {
		fprintf(stderr, "usage: %s FILE.dat\n", argv[0]);
		return 2;
	}
	handle = tracecmd_open(argv[1], 0);
	if (!handle) {
		fprintf(stderr, "%s: cannot open %s\n", argv[0], argv[1]);
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	failed = iterate(handle, &tally) < 0;
	for (i = 0; !failed && i < tracecmd_buffer_instances(handle); i++) {
		instance = tracecmd_buffer_instance_handle(handle, i);
		if (!instance) {
			failed = 1;
			break;
		}
		failed = iterate(instance, &tally) < 0;
		tracecmd_close(instance);
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	tracecmd_close(handle);
	if (failed) {
		fprintf(stderr, "%s: iterating %s failed\n", argv[0], argv[1]);
		return 1;
	}
	printf("events %llu\n", tally.events);
	printf("seconds %.6f\n",
	       (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9);
	printf("pid_sum %lld\n", tally.pid_sum);
	return 0;
}
