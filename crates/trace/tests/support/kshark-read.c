/*
 * Reads a trace-cmd .dat file with KernelShark's own library (libkshark, the loader the
 * KernelShark GUI uses) and prints one line per entry, in KernelShark's order:
 *
 *     ts cpu pid event_id event task
 *
 * A negative event id is KernelShark's own entry for events the kernel lost
 * (KS_EVENT_OVERFLOW), not a record of the file.
 * Built and run by crates/trace/tests/dat_write.rs to check that files vmscale writes
 * open in KernelShark. Strings and entries are left to the process's exit.
 */
#include <stdio.h>

#include "libkshark.h"

int main(int argc, char **argv)
{
	struct kshark_context *ctx = NULL;
	struct kshark_entry **rows = NULL;
	ssize_t n, i;
	int sd;

	if (argc != 2) {
		fprintf(stderr, "usage: kshark-read FILE.dat\n");
		return 2;
	}
	if (!kshark_instance(&ctx)) {
		fprintf(stderr, "kshark-read: no KernelShark context\n");
		return 1;
	}
	sd = kshark_open(ctx, argv[1]);
	if (sd < 0) {
		fprintf(stderr, "kshark-read: KernelShark cannot open %s (%d)\n", argv[1], sd);
		return 1;
	}
	n = kshark_load_entries(ctx, sd, &rows);
	if (n < 0) {
		fprintf(stderr, "kshark-read: KernelShark loaded no entries (%zd)\n", n);
		return 1;
	}
	for (i = 0; i < n; i++) {
		char *event = kshark_get_event_name(rows[i]);
		char *task = kshark_get_task(rows[i]);

		printf("%lld %d %d %d %s %s\n", (long long)rows[i]->ts, rows[i]->cpu,
		       rows[i]->pid, rows[i]->event_id, event ? event : "?",
		       task ? task : "?");
	}
	return 0;
}
