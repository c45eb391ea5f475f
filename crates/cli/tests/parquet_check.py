#!/usr/bin/env python3
"""Reads `vmscale export --parquet` tables with DuckDB, a Parquet reader independent of the
writer's (arrow-rs), and checks them against the runs' own run.json.

    python3 parquet_check.py PARQUET_DIR RUN_DIR...

For every run: each table's row count is what run.json implies, every file carries the
schema version, the partition keys are the run's kernel, host and start date, and a value
from each table agrees with run.json. Prints one line per run; exits 1 with the
disagreements, 2 when DuckDB is missing.
"""

import json
import math
import os
import sys

try:
    import duckdb
except ImportError:
    print("parquet_check.py needs DuckDB's Python package: pip install duckdb", file=sys.stderr)
    sys.exit(2)

SCHEMA_VERSION = "1"
TABLES = ["runs", "samples", "summaries", "growth", "findings", "lock_waits", "holds",
          "ipis", "stacks"]


def run_id(run_dir, run):
    name = os.path.basename(os.path.realpath(run_dir))
    host = run["host"]["hostname"]
    return f"{name}@{host}" if host else name


def same(got, want):
    """Equal, floats to within a few units in the last place: vmscale reads run.json with
    serde_json's fast float parser, which can land one unit from the exact value."""
    if isinstance(got, float) and isinstance(want, (float, int)):
        return math.isclose(got, want, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    return got == want


def short(value):
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


def escape(value, keep=""):
    safe = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+" + keep)
    return "".join(chr(b) if chr(b) in safe else "%%%02X" % b for b in value.encode())


def partition_dir(run):
    def value(v):
        return escape(v) if v else "__HIVE_DEFAULT_PARTITION__"
    return os.path.join("kernel=" + value(run["host"]["kernel_release"]),
                        "host=" + value(run["host"]["hostname"]),
                        "date=" + value(run["started_utc"][:10]))


def expected_counts(run):
    series = [s for p in run["points"] for s in p["series"]]
    trace = run.get("trace") or {}
    on_cpu = trace.get("on_cpu") or {}
    return {
        "runs": 1,
        "samples": sum(len(s["samples_ns"]) for s in series),
        "summaries": sum(bool(s["samples_ns"]) + sum(bool(ph["samples_ns"]) for ph in s["phases"])
                         for s in series),
        "growth": sum(len(g.get("growth", [])) + len(g.get("unjudged", []))
                      for g in run.get("scaling", [])),
        "findings": len(run.get("verdict", [])),
        "lock_waits": len(trace.get("contention", [])),
        "holds": sum(len(h["holders"]) for h in trace.get("holders", [])),
        "ipis": len(trace.get("ipis", [])),
        "stacks": len(on_cpu.get("stacks", []))
        + sum(len(p["profile"]["stacks"]) for p in trace.get("on_cpu_by_n", []))
        + sum(len(c["stacks"]) for c in trace.get("contention", [])),
    }


class Checker:
    def __init__(self, out):
        self.out = out
        self.db = duckdb.connect()
        self.errors = []

    def source(self, table):
        path = os.path.join(self.out, table, "**", "*.parquet").replace("'", "''")
        # Partition values stay text: a host named 1234 is not a number.
        return (f"read_parquet('{path}', hive_partitioning = true, "
                f"hive_types_autocast = false)")

    def rows(self, sql, *params):
        return self.db.execute(sql, list(params)).fetchall()

    def expect(self, what, got, want):
        if not same(got, want):
            self.errors.append(f"{what}: parquet has {short(got)}, run.json {short(want)}")

    def check_run(self, run_dir):
        with open(os.path.join(run_dir, "run.json")) as f:
            run = json.load(f)
        rid = run_id(run_dir, run)
        host = run["host"]
        counts = {}
        for table, want in expected_counts(run).items():
            # Every table has a file for every run, empty or not.
            path = os.path.join(self.out, table, partition_dir(run), escape(rid, "@") + ".parquet")
            if not os.path.isfile(path):
                self.errors.append(f"{rid} {table}: no file {path}")
                continue
            self.check_version(path)
            src = self.source(table)
            (got,) = self.rows(f"SELECT count(*) FROM {src} WHERE run_id = ?", rid)[0]
            counts[table] = got
            self.expect(f"{rid} {table} rows", got, want)
            keys = self.rows(f"SELECT DISTINCT kernel, host, date FROM {src} WHERE run_id = ?",
                             rid)
            if got:
                self.expect(f"{rid} {table} partition keys", keys, [(
                    host["kernel_release"], host["hostname"], run["started_utc"][:10])])
        self.check_values(rid, run)
        print(rid + ": " + ", ".join(f"{t} {n}" for t, n in counts.items()))

    def check_version(self, filename):
        meta = dict(
            (k.decode(), v.decode())
            for k, v in self.rows("SELECT key, value FROM parquet_kv_metadata(?)", filename))
        self.expect(f"{filename} schema version", meta.get("vmscale.parquet_schema_version"),
                    SCHEMA_VERSION)

    def check_values(self, rid, run):
        host = run["host"]
        (row,) = self.rows(
            f"SELECT scenario, hostname, kernel_release, cpu_model, online_cpus, kvm_backend, "
            f"tool_version, command_line, strftime(started_utc, '%Y-%m-%dT%H:%M:%SZ'), "
            f"map_keys(knobs) FROM {self.source('runs')} WHERE run_id = ?", rid)
        kvm = host.get("kvm") or {}
        self.expect(f"{rid} runs", row[:9], (
            run["scenario"], host["hostname"], host["kernel_release"], host["cpu_model"],
            host["online_cpus"], kvm.get("backend"), run["tool"]["version"],
            run["command_line"], run["started_utc"]))
        knobs = run["knobs"] if isinstance(run["knobs"], dict) else {}
        self.expect(f"{rid} runs knobs", sorted(row[9]), sorted(knobs))

        # Every sample, in order, per (n, series).
        for point in run["points"]:
            for series in point["series"]:
                got = [d for (d,) in self.rows(
                    f"SELECT duration_ns FROM {self.source('samples')} WHERE run_id = ? "
                    f"AND n = ? AND series = ? ORDER BY sample_index",
                    rid, point["n"], series["name"])]
                self.expect(f"{rid} samples n={point['n']} {series['name']}", got,
                            series["samples_ns"])
                starts = series.get("sample_start_ns", [])
                if starts:
                    got = [s for (s,) in self.rows(
                        f"SELECT start_ns FROM {self.source('samples')} WHERE run_id = ? "
                        f"AND n = ? AND series = ? ORDER BY sample_index",
                        rid, point["n"], series["name"])]
                    self.expect(f"{rid} sample starts n={point['n']} {series['name']}", got,
                                starts)
                summary = series.get("summary")
                if summary:
                    got = self.rows(
                        f"SELECT count, min_ns, p50_ns, p99_ns, p999_ns, max_ns "
                        f"FROM {self.source('summaries')} WHERE run_id = ? AND n = ? "
                        f"AND series = ? AND phase IS NULL", rid, point["n"], series["name"])
                    self.expect(f"{rid} summary n={point['n']} {series['name']}", got, [(
                        summary["n"], summary["min_ns"], summary["p50_ns"], summary["p99_ns"],
                        summary["p999_ns"], summary["max_ns"])])

        claims = sorted(
            (s["series"], g["statistic"], g["claim"])
            for s in run.get("scaling", []) for g in s.get("growth", []))
        got = sorted(self.rows(
            f"SELECT series, statistic, claim FROM {self.source('growth')} "
            f"WHERE run_id = ? AND claim <> 'unjudged'", rid))
        self.expect(f"{rid} growth claims", got, claims)

        verdict = run.get("verdict", [])
        if verdict:
            first = verdict[0]
            got = self.rows(
                f"SELECT cause, lock, holder, share, summary, "
                f"[e.what FOR e IN explained_by] FROM {self.source('findings')} "
                f"WHERE run_id = ? AND rank = 1", rid)
            self.expect(f"{rid} first finding", got, [(
                first["cause"], first.get("lock"), first.get("holder"), first["share"],
                first["summary"], [e["what"] for e in first.get("explained_by", [])])])

        trace = run.get("trace") or {}
        locks = trace.get("contention", [])
        if locks:
            top = locks[0]
            got = self.rows(
                f"SELECT lock, lock_addr, total_wait_ns, cardinality(waiters) "
                f"FROM {self.source('lock_waits')} WHERE run_id = ? AND rank = 1", rid)
            self.expect(f"{rid} top lock", got, [(
                top["name"], hex(top["lock_addr"]), top["total_wait_ns"], len(top["waiters"]))])
        waited = sum(h["waited_behind_ns"] for lock in trace.get("holders", [])
                     for h in lock["holders"])
        (got,) = self.rows(f"SELECT coalesce(sum(waited_behind_ns), 0) "
                           f"FROM {self.source('holds')} WHERE run_id = ?", rid)[0]
        self.expect(f"{rid} time waited behind holders", got, waited)
        ipis = sum(p["ipis"] for p in trace.get("ipis", []))
        (got,) = self.rows(f"SELECT coalesce(sum(ipis), 0) FROM {self.source('ipis')} "
                           f"WHERE run_id = ?", rid)[0]
        self.expect(f"{rid} IPIs", got, ipis)
        on_cpu = sum(s["samples"] for s in (trace.get("on_cpu") or {}).get("stacks", []))
        (got,) = self.rows(f"SELECT coalesce(sum(count), 0) FROM {self.source('stacks')} "
                           f"WHERE run_id = ? AND what = 'on-cpu'", rid)[0]
        self.expect(f"{rid} on-CPU samples in stacks", got, on_cpu)


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    checker = Checker(sys.argv[1])
    for run_dir in sys.argv[2:]:
        checker.check_run(run_dir)
    if checker.errors:
        print("\n".join(checker.errors[:50]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
