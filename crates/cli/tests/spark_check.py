#!/usr/bin/env python3
"""Runs the README's Spark recipe ("Many hosts: SQL and Spark") over a directory written
by `vmscale export --parquet`, and checks that Spark gives the embedded engine's answers
row for row: plain SQL through `vmscale query`, and each named question through the SQL
`vmscale fleet --sql` prints, against `vmscale fleet --format json`.

    spark_check.py DIR VMSCALE KERNEL_A KERNEL_B

Prints one line per check and a closing "N checks agree"; exits 1 at the first
disagreement, and when pyspark or a Java runtime is missing (never skips).
"""

import json
import math
import subprocess
import sys

TABLES = ["runs", "samples", "summaries", "growth", "findings",
          "lock_waits", "holds", "ipis", "stacks"]


def recipe(spark, directory):
    """The README's recipe: every table under its own name, partition keys as text."""
    for table in TABLES:
        (spark.read.option("basePath", f"{directory}/{table}")
         .parquet(f"{directory}/{table}")
         .createOrReplaceTempView(table))


def session():
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        sys.exit(f"spark_check.py: pyspark is missing ({e}); scripts/test installs it")
    return (SparkSession.builder.master("local[2]").appName("vmscale-spark-check")
            # Partition keys stay text (a kernel "6.1" is no number), as vmscale reads them.
            .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .getOrCreate())


def spark_rows(spark, sql):
    return [row.asDict(recursive=True) for row in spark.sql(sql.strip().rstrip(";")).collect()]


def vmscale(binary, *args):
    done = subprocess.run([binary, *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"vmscale {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def check(what, spark_answer, vmscale_answer, columns=None):
    """Row for row, on Spark's columns (or the ones named)."""
    if len(spark_answer) != len(vmscale_answer):
        sys.exit(f"{what}: Spark has {len(spark_answer)} rows, vmscale {len(vmscale_answer)}")
    for i, (s, v) in enumerate(zip(spark_answer, vmscale_answer)):
        for key in columns or s.keys():
            if key not in v:
                sys.exit(f"{what}: row {i}: vmscale has no column {key}")
            if not same(s[key], v[key]):
                sys.exit(f"{what}: row {i}: {key}: Spark {s[key]!r}, vmscale {v[key]!r}")
    print(f"{what}: {len(spark_answer)} rows agree")


QUERIES = [
    " UNION ALL ".join(f"SELECT '{t}' AS tbl, run_id, count(*) AS rows FROM {t} GROUP BY run_id"
                       for t in TABLES) + " ORDER BY tbl, run_id",
    "SELECT run_id, kernel, host, date, scenario, sweep, points, traced FROM runs ORDER BY run_id",
    "SELECT run_id, rank, cause, lock, holder, share, summary FROM findings ORDER BY run_id, rank",
    "SELECT run_id, series, n, sample_index, run_part, duration_ns FROM samples "
    "ORDER BY run_id, series, n, run_part, sample_index",
    "SELECT run_id, series, n, phase, count, p50_ns, p99_ns, mean_ns FROM summaries "
    "ORDER BY run_id, series, n, phase NULLS FIRST",
    "SELECT run_id, series, statistic, claim, ratio, exponent, model FROM growth "
    "ORDER BY run_id, series, statistic",
    "SELECT kernel, lock, sum(waits) AS waits, sum(total_wait_ns) AS wait_ns FROM lock_waits "
    "GROUP BY kernel, lock ORDER BY kernel NULLS FIRST, lock",
    "SELECT what, stack_id, sum(count) AS count, sum(weight_ns) AS weight_ns FROM stacks "
    "GROUP BY what, stack_id ORDER BY what, stack_id",
]


def main():
    directory, binary, kernel_a, kernel_b = sys.argv[1:5]
    spark = session()
    recipe(spark, directory)
    checks = 0
    for sql in QUERIES:
        ours = json.loads(vmscale(binary, "query", directory, sql, "--format", "json"))
        check(f"query {sql[:60]}...", spark_rows(spark, sql), ours)
        checks += 1
    for question in (["--top-locks", "--by", "kernel"], ["--top-locks", "--by", "host"],
                     ["--top-locks", "--by", "cpu"], ["--growth"]):
        sql = vmscale(binary, "fleet", *question, "--sql")
        ours = json.loads(vmscale(binary, "fleet", directory, *question, "--format", "json"))
        check(f"fleet {' '.join(question)}", spark_rows(spark, sql), ours)
        checks += 1
    # Regressions: Spark answers the SQL (the rows compared, their runs and samples);
    # the statistics on top are vmscale's. The samples' query is run too, and counted.
    between = ["--regressions", "--between", kernel_a, kernel_b]
    pairs, samples = [s for s in vmscale(binary, "fleet", *between, "--sql").split(";\n") if s.strip()]
    ours = json.loads(vmscale(binary, "fleet", directory, *between, "--all", "--format", "json"))
    spark_pairs = spark_rows(spark, pairs)
    check("fleet --regressions (rows compared)", spark_pairs, ours)
    spark_samples = spark_rows(spark, samples)
    if sum(r["samples_a"] + r["samples_b"] for r in ours) != len(spark_samples):
        sys.exit("fleet --regressions: Spark's samples are not the rows' samples")
    checks += 1
    print(f"{checks} checks agree")


if __name__ == "__main__":
    main()
