#!/usr/bin/env python3
"""Sums perf lock contention's entries by the function that waited for the lock.

    perf lock record -m 16M -o lock.data -- CMD
    perf lock contention -i lock.data -v -E 1000000 --max-stack 12 2>&1 \\
        | corpus/perf-lock-by-site.py [--top 8]

perf lock contention (tracepoint mode, perf 6.1) keys its entries by the whole call chain,
user-space return addresses included, so one waiting site is split over thousands of
entries of a few waits each and the first lines of its output can miss the site that
waited most. This reads every entry with its stack (-v) and sums the waits, their total
and their longest by lock type and waiting site: the first frame of the stack that is not
part of the lock implementation (__mutex_lock, rwsem_down_write_slowpath, _raw_spin_lock,
...), with the frame after it for context.
"""

import collections
import re
import sys

HEADER = re.compile(
    r"^\s*(\d+)\s+([\d.]+)\s+(\w+)\s+([\d.]+)\s+(\w+)\s+([\d.]+)\s+(\w+)\s+(\S+)\s+\S+"
)
FRAME = re.compile(r"^\s+0x[0-9a-f]+\s+(\S+)")
UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0}
LOCKING = re.compile(
    r"^(__traceiter_|trace_|__mutex_lock|mutex_lock|__rwsem|rwsem_|down_|__down|_raw_|__pv_queued_spin|"
    r"queued_|do_raw_|__percpu_down|percpu_down|rt_mutex|__rt_mutex|osq_lock)"
)


def main(argv):
    top = 8
    if argv[:1] == ["--top"]:
        top = int(argv[1])
    sums = collections.defaultdict(lambda: [0, 0.0, 0.0])
    entry = None

    def close():
        if entry is None:
            return
        kind, waits, total, longest, frames = entry
        names = [f.split("+")[0] for f in frames]
        inside = [n for n in names if not LOCKING.match(n)]
        site = " < ".join(inside[:2]) or "(no stack)"
        s = sums[(kind, site)]
        s[0] += waits
        s[1] += total
        s[2] = max(s[2], longest)

    for line in sys.stdin:
        m = HEADER.match(line)
        if m:
            close()
            waits = int(m[1])
            total = float(m[2]) * UNIT[m[3]]
            longest = float(m[4]) * UNIT[m[5]]
            entry = (m[8], waits, total, longest, [])
            continue
        f = FRAME.match(line)
        if f and entry is not None:
            entry[4].append(f[1])
    close()
    print(f"{'waits':>9} {'total ms':>10} {'max ms':>8}  type      waiting site")
    ranked = sorted(sums.items(), key=lambda kv: -kv[1][1])
    for (kind, site), (waits, total, longest) in ranked[:top]:
        print(f"{waits:9} {total:10.1f} {longest:8.2f}  {kind:9} {site}")


if __name__ == "__main__":
    main(sys.argv[1:])
