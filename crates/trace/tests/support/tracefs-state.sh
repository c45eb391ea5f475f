#!/usr/bin/env bash
# Prints the settings of the top-level tracefs buffer and the list of instances, one
# `path:value` line each, so two snapshots taken around a trace-cmd run can be diffed.
#
#   tracefs-state.sh [TRACEFS]      (default /sys/kernel/tracing)
#
# Contents that change on their own (the ring buffer, saved_cmdlines, error_log) are left
# out; everything a recorder may configure is in. Event files are listed only where they
# differ from the kernel's defaults, which keeps the snapshot small.
set -euo pipefail

tracefs=${1:-/sys/kernel/tracing}
cd "$tracefs"

settings=(buffer_percent buffer_size_kb buffer_subbuf_size_kb current_tracer dynamic_events
          saved_cmdlines_size set_event set_event_notrace_pid set_event_pid timestamp_mode
          trace_clock trace_options tracing_cpumask tracing_on tracing_thresh uprobe_events)
existing=()
for file in "${settings[@]}" options/*; do
    [ -r "$file" ] && existing+=("$file")
done
# One grep per group: forking per file takes tens of seconds over ~2000 events.
grep -H '' "${existing[@]}" /dev/null || true
grep -H -v '^0$' events/enable events/*/enable events/*/*/enable /dev/null || true
grep -H -v -e '^#' -e '^none$' -e '^$' events/*/filter events/*/*/filter \
    events/*/*/trigger /dev/null || true
printf 'instances:%s\n' "$(ls instances | tr '\n' ' ')"
