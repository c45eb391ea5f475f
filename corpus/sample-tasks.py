#!/usr/bin/env python3
"""Samples what a command's tasks are doing, from /proc alone, independently of vmscale.

    corpus/sample-tasks.py [--interval-ms 5] [--prefix repro] [--top 12] [--depth 5]
                           [--waiting-in FUNCTION] -- CMD [ARGS...]

Runs CMD and, every interval until it exits, reads /proc/PID/task/*/stat (the state letter
and the name) /proc/PID/task/*/stack (the kernel stack of a task that is not running) and
/proc/PID/task/*/schedstat (its time on a CPU and runnable so far) of each of its tasks whose name starts with the prefix. At the end it prints, per task name,
how its samples split by state, its last time on a CPU and runnable, and the most frequent (state, stack) pairs over all such
tasks: the innermost frames after the scheduler's own (__schedule, schedule, ...), so a
task asleep on a mutex reads "D __mutex_lock < caller < ...", a task asleep while holding
one reads its own sleep ("D __wait_for_common < ... < the function that took the lock").

With --waiting-in F (the function a lock's waiters sleep in, innermost after the
scheduler's and the lock's own frames, which /proc leaves out: "shmem_file_write_iter" for
a waiter on that inode's i_rwsem), it also prints what the other tasks were doing in the
rounds where at least one task was asleep there: while someone waits on the lock, one of
the others holds it, so this is the holder's side, sampled.

A running task has no readable stack (the kernel does not walk a stack in use); it shows
as "R (running)", whether on a CPU or waiting for one: schedstat tells them apart. Needs
root. Costs about 30% of a CPU at 5 ms here: on two CPUs, compare with schedstat.
"""

import collections
import os
import subprocess
import sys
import time

SCHEDULER = {
    "__schedule",
    "schedule",
    "schedule_preempt_disabled",
    "schedule_timeout",
    "io_schedule",
    "io_schedule_timeout",
    "preempt_schedule",
    "preempt_schedule_common",
    "__cond_resched",
}


def frames(text):
    """The function names of a /proc stack, innermost first, scheduler frames dropped."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name = parts[1].split("+")[0]
        if not out and name in SCHEDULER:
            continue
        out.append(name)
    return out


def read(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def main(argv):
    interval, prefix, top, depth, waiting_in = 0.005, "repro", 12, 5, None
    while argv and argv[0] != "--":
        flag, value = argv[0], argv[1]
        argv = argv[2:]
        if flag == "--interval-ms":
            interval = float(value) / 1000
        elif flag == "--prefix":
            prefix = value
        elif flag == "--top":
            top = int(value)
        elif flag == "--depth":
            depth = int(value)
        elif flag == "--waiting-in":
            waiting_in = value
        else:
            sys.exit(f"sample-tasks: unknown option {flag}")
    if not argv:
        sys.exit(__doc__)
    command = argv[1:]
    child = subprocess.Popen(command)
    task_dir = f"/proc/{child.pid}/task"
    states = collections.defaultdict(collections.Counter)
    stacks = collections.Counter()
    who = collections.defaultdict(set)
    schedstat = {}
    beside = collections.Counter()
    rounds_waiting = 0
    rounds = 0
    started = time.monotonic()
    while child.poll() is None:
        try:
            tids = os.listdir(task_dir)
        except OSError:
            break
        rounds += 1
        seen = []
        for tid in tids:
            stat = read(f"{task_dir}/{tid}/stat")
            if not stat:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            if not name.startswith(prefix):
                continue
            state = stat[stat.rindex(")") + 2]
            states[name][state] += 1
            ran = read(f"{task_dir}/{tid}/schedstat")
            if ran:
                on_cpu, queued = (int(x) for x in ran.split()[:2])
                schedstat[tid] = (name, on_cpu, queued)
            if state == "R":
                key = ("R", "(running)")
            else:
                key = (state, " < ".join(frames(read(f"{task_dir}/{tid}/stack") or "")[:depth]))
            stacks[key] += 1
            who[key].add(name)
            seen.append(key)
        if waiting_in:
            waiting = [k for k in seen if k[0] == "D" and k[1].split(" < ")[0] == waiting_in]
            if waiting:
                rounds_waiting += 1
                others = list(seen)
                others.remove(waiting[0])
                for key in others:
                    beside[key] += 1
        time.sleep(interval)
    elapsed = time.monotonic() - started
    status = child.wait()
    total = sum(stacks.values()) or 1
    print(f"sample-tasks: {rounds} rounds in {elapsed:.2f} s, {total} task samples, exit {status}")
    print("per task: samples  R%  S%  D%  other%")
    for name in sorted(states):
        c = states[name]
        n = sum(c.values())
        other = n - c["R"] - c["S"] - c["D"]
        print(f"  {name:16} {n:6} {100*c['R']/n:4.0f} {100*c['S']/n:4.0f} {100*c['D']/n:4.0f} {100*other/n:4.0f}")
    print("per task, from its last /proc schedstat: on a CPU, runnable (ms)")
    for name, on_cpu, queued in sorted(schedstat.values()):
        print(f"  {name:16} {on_cpu/1e6:8.1f} {queued/1e6:8.1f}")
    print("most frequent (state, stack), share of all task samples:")
    for (state, stack), n in stacks.most_common(top):
        names = ",".join(sorted(who[(state, stack)]))
        print(f"  {100*n/total:5.1f}%  {state} {stack}  [{names}]")
    if waiting_in:
        print(f"while a task was asleep in {waiting_in} ({rounds_waiting} rounds), the other tasks:")
        n = sum(beside.values()) or 1
        for (state, stack), count in beside.most_common(top):
            print(f"  {100*count/n:5.1f}%  {state} {stack}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
