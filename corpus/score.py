#!/usr/bin/env python3
"""Scores vmscale's verdict over the corpus: how stable the first cause is, how well locks
are named, and how much of the lock waiting has a holder the trace proves.

    corpus/score.py [--runs 5] [--vmscale target/release/vmscale] [CASE...]

Builds each case's repro.c, records it RUNS times with `vmscale record`, and prints per
case: how many runs gave the labelled first cause (a spinning lock among
the first three with 15% or more) and lock, and over all runs:
- recall of lock names: runs of a case with a labelled lock in which a lock finding among
  the first three names it by the kernel's name (the label's), over all such runs;
- precision of lock names: lock findings anywhere in a verdict whose name is a kernel name
  (not vmscale's stack-derived fallback, "mutex in f") and is the right one, over all lock
  findings with a kernel name; a name is right when it is the case's labelled lock, or a
  lock the case's evidence shows contended besides it (the scheduler's run-queue lock);
- the share of the waiting on each labelled sleeping lock that the trace proves a holder
  (or a running, spinning-on owner) for, summed over runs.
Needs root; a second of each case per run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Kernel names the run-queue and other incidental locks carry; right wherever they appear.
INCIDENTAL = ("rq->__lock", "pi_lock", "wq->mutex")


def cases(selected):
    names = sorted(d for d in os.listdir(HERE) if os.path.isfile(os.path.join(HERE, d, "repro.c")))
    return [c for c in names if not selected or c in selected]


def record(vmscale, binary, scratch):
    out = subprocess.run(
        [vmscale, "record", "--quiet", "--format", "json", "--out", scratch, "--", binary],
        capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"vmscale record {binary}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def kernel_named(name):
    # The fallback is "<kind> in <function>" (or "<kind> (mode) in ..."); a kernel name
    # has "->", a known global ("mmap_lock", "rtnl_mutex") or a "." member path.
    head = name.split(" (")[0]
    return "->" in head or head in ("mmap_lock", "rtnl_mutex", "kvm_lock", "cpu_hotplug_lock")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vmscale", default=os.path.join(HERE, "..", "target", "release", "vmscale"))
    ap.add_argument("case", nargs="*")
    args = ap.parse_args()
    named_right = named_total = 0
    kernel_findings = kernel_right = 0
    proven_ns = waited_ns = 0
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for case in cases(set(args.case)):
            label = json.load(open(os.path.join(HERE, case, "expected.json")))
            binary = os.path.join(scratch, case)
            subprocess.run(["cc", "-O2", "-pthread", "-o", binary,
                            os.path.join(HERE, case, "repro.c")], check=True)
            first_ok = 0
            firsts = []
            for _ in range(args.runs):
                run = record(args.vmscale, binary, os.path.join(scratch, "runs"))
                verdict = run["verdict"]
                first = verdict[0]
                firsts.append(first["cause"])
                lock = label["lock"]
                causes = {label["cause"]}
                if first["cause"] in causes and (
                        lock is None or (first.get("lock") or "").startswith(lock)):
                    first_ok += 1
                elif label["cause"] == "lock-spin" and any(
                        f["cause"] == "lock-spin" and (f.get("lock") or "").startswith(lock)
                        and f["share"] >= 0.15 for f in verdict[:3]):
                    # A spinning lock on two CPUs: among the first three with 15% or more
                    # (corpus/README.md, spinlock-eventfd).
                    first_ok += 1
                for f in verdict:
                    name = f.get("lock")
                    if name and kernel_named(name):
                        kernel_findings += 1
                        if (lock and name.startswith(lock)) or name.startswith(INCIDENTAL):
                            kernel_right += 1
                if lock:
                    named_total += 1
                    if any((f.get("lock") or "").startswith(lock)
                           and f["cause"] in ("lock-wait", "lock-spin")
                           for f in verdict[:3]):
                        named_right += 1
                    for h in run["trace"].get("holders", []):
                        if h["name"].startswith(lock):
                            total = h["total_wait_ns"]
                            unknown = sum(a["wait_ns"] for a in h["activity"]
                                          if a["activity"] in ("unknown", "handoff"))
                            waited_ns += total
                            proven_ns += max(0, total - unknown)
                            break
            rows.append((case, label["cause"], first_ok, args.runs, firsts))
            print(f"{case:28} {label['cause']:18} {first_ok}/{args.runs}  {' '.join(firsts)}",
                  flush=True)
    print()
    if named_total:
        print(f"lock-name recall: {named_right}/{named_total} "
              f"({100 * named_right / named_total:.0f}%)")
    if kernel_findings:
        print(f"lock-name precision: {kernel_right}/{kernel_findings} "
              f"({100 * kernel_right / kernel_findings:.0f}%)")
    if waited_ns:
        print(f"labelled sleeping locks' waiting with a proven holder (or a running owner a "
              f"spin proves): {100 * proven_ns / waited_ns:.0f}% of {waited_ns / 1e9:.2f} s")
    stable = sum(1 for r in rows if r[2] == r[3])
    print(f"cases whose first cause held in every run: {stable}/{len(rows)}")


if __name__ == "__main__":
    main()
