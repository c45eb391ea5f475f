#!/usr/bin/env python3
"""Where a command's tasks spent their time, from perf's scheduler trace alone.

    perf sched record -g -o sched.data -- CMD
    perf sched timehist -i sched.data -g --state | corpus/sched-by-stack.py [--prefix repro]
                                                                     [--depth 4] [--top 12]

Reads `perf sched timehist -g --state` (one line per switch: the task switched out, how
long it had been off the CPU before this run, how much of that was runnable, how long it
ran, the state it left in and its kernel stack). For the tasks whose name starts with the
prefix it sums, in milliseconds: time on a CPU; runnable (woken or preempted, not yet
running again); and asleep, by the kernel stack it went to sleep with (the innermost frames
after the scheduler's own). A lock's waiters sleep in the lock's function, its holder in
whatever it waits for with the lock held: the stacks tell which, the sums how long.
"""

import collections
import re
import sys

LINE = re.compile(
    r"^\s*[\d.]+\s+\[\d+\]\s+(?P<task>.*?\[\d+(?:/\d+)?\])\s+(?P<wait>[\d.]+)\s+"
    r"(?P<delay>[\d.]+)\s+(?P<run>[\d.]+)\s+(?P<state>\S+)\s*(?P<stack>.*)$"
)
SCHEDULER = {
    "__traceiter_sched_switch",
    "__schedule",
    "schedule",
    "schedule_timeout",
    "schedule_preempt_disabled",
    "io_schedule",
    "io_schedule_timeout",
    "preempt_schedule",
    "preempt_schedule_common",
    "__cond_resched",
    "schedule_hrtimeout_range_clock",
}


def where(stack, depth):
    frames = [f.strip() for f in stack.split("<-")]
    frames = [f for f in frames if f and f not in SCHEDULER]
    return " < ".join(frames[:depth]) or "(no stack)"


def main(argv):
    prefix, depth, top = "repro", 4, 12
    while argv:
        flag, value = argv[0], argv[1]
        argv = argv[2:]
        if flag == "--prefix":
            prefix = value
        elif flag == "--depth":
            depth = int(value)
        elif flag == "--top":
            top = int(value)
        else:
            sys.exit(__doc__)
    run = collections.Counter()
    runnable = collections.Counter()
    asleep = collections.Counter()
    asleep_by_task = collections.defaultdict(float)
    last = {}  # task -> (state, where) of its last switch-out
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        task = m["task"]
        name = task[: task.rindex("[")]
        if not name.startswith(prefix):
            continue
        wait, delay, ran = float(m["wait"]), float(m["delay"]), float(m["run"])
        run[name] += ran
        previous = last.get(task)
        if previous is not None:
            state, site = previous
            if state.startswith("R"):
                runnable[name] += wait
            else:
                runnable[name] += delay
                asleep[(state, site)] += wait - delay
                asleep_by_task[name] += wait - delay
        last[task] = (m["state"], where(m["stack"], depth))
    print("per task (ms): on a CPU, runnable, asleep")
    for name in sorted(run):
        print(f"  {name:16} {run[name]:8.1f} {runnable[name]:8.1f} {asleep_by_task[name]:8.1f}")
    total = sum(asleep.values()) or 1.0
    print(f"asleep, by where the tasks went to sleep ({total:.1f} ms in all):")
    for (state, site), ms in asleep.most_common(top):
        print(f"  {ms:8.1f} ms {100*ms/total:5.1f}%  {state} {site}")


if __name__ == "__main__":
    main(sys.argv[1:])
