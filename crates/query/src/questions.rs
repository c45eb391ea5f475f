//! The named questions' SQL, the one place it is written. `vmscale fleet ... --sql` prints
//! it, so Spark (README: "Many hosts: SQL and Spark") runs the very same text over the same
//! tables; it therefore keeps to SQL both engines read alike: no quoted identifiers
//! (DataFusion quotes with `"`, Spark with backticks), division of doubles only (an
//! integer division truncates in DataFusion), NULLS FIRST said wherever nulls are sorted
//! (the engines' defaults differ), and every ORDER BY down to a unique row, so two engines'
//! answers compare row for row.
//!
//! Hosts, kernels and CPU models come from `runs` (the host facts of each run), an empty
//! fact (an imported trace's) read as null; the samples of a regression are chosen by the
//! `kernel` partition key, so the engines read only the two kernels' files.

use crate::error::QueryError;

/// What `--top-locks` groups runs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Kernel,
    Host,
    Cpu,
}

impl By {
    /// The output column's name.
    pub fn name(self) -> &'static str {
        match self {
            By::Kernel => "kernel",
            By::Host => "host",
            By::Cpu => "cpu_model",
        }
    }

    fn fact(self) -> &'static str {
        match self {
            By::Kernel => "kernel_release",
            By::Host => "hostname",
            By::Cpu => "cpu_model",
        }
    }
}

/// Per group, the lock that tops each run's verdict (its first finding that names a lock):
/// in how many of the group's runs, that as a share of them, and the finding's mean share
/// of the time its runs explained.
pub fn top_locks(by: By) -> String {
    let (fact, name) = (by.fact(), by.name());
    format!(
        "WITH first_locks AS (
  SELECT run_id, lock, share
  FROM (
    SELECT run_id, lock, share,
           row_number() OVER (PARTITION BY run_id ORDER BY rank) AS place
    FROM findings
    WHERE lock IS NOT NULL
  ) ranked
  WHERE place = 1
),
per_run AS (
  SELECT NULLIF(r.{fact}, '') AS grp, f.lock, f.share,
         count(*) OVER (PARTITION BY NULLIF(r.{fact}, '')) AS group_runs
  FROM runs r LEFT JOIN first_locks f ON f.run_id = r.run_id
)
SELECT grp AS {name}, lock, count(*) AS runs, group_runs,
       CAST(count(*) AS DOUBLE) / CAST(group_runs AS DOUBLE) AS share_of_runs,
       avg(share) AS mean_share
FROM per_run
WHERE lock IS NOT NULL
GROUP BY grp, lock, group_runs
ORDER BY grp NULLS FIRST, runs DESC, lock"
    )
}

/// The growth claims of every series and statistic, per kernel and host side by side: how
/// many runs claimed each, and the range of the ratio (largest n over smallest) and the
/// mean exponent they measured.
pub fn growth() -> String {
    let claims: Vec<String> = [
        "grows",
        "flat",
        "falls",
        "varies",
        "inconclusive",
        "unjudged",
    ]
    .iter()
    .map(|c| format!("       sum(CASE WHEN g.claim = '{c}' THEN 1 ELSE 0 END) AS {c},"))
    .collect();
    format!(
        "SELECT r.scenario, g.series, g.statistic,
       NULLIF(r.kernel_release, '') AS kernel, NULLIF(r.hostname, '') AS host,
       count(*) AS runs,
{}
       min(g.ratio) AS ratio_min, avg(g.ratio) AS ratio_mean, max(g.ratio) AS ratio_max,
       avg(g.exponent) AS exponent_mean, min(g.first_n) AS first_n, max(g.last_n) AS last_n
FROM growth g JOIN runs r ON r.run_id = g.run_id
GROUP BY r.scenario, g.series, g.statistic, NULLIF(r.kernel_release, ''), NULLIF(r.hostname, '')
ORDER BY r.scenario, g.series, g.statistic, kernel NULLS FIRST, host NULLS FIRST",
        claims.join("\n")
    )
}

/// Per host, CPU model, scenario, series and n measured on both kernels: how many runs and
/// samples each kernel has there. These are the rows `--regressions` judges.
pub fn regression_pairs(a: &str, b: &str) -> Result<String, QueryError> {
    let (a, b) = (literal(a)?, literal(b)?);
    Ok(format!(
        "WITH sides AS (
  SELECT NULLIF(r.hostname, '') AS host, r.cpu_model, s.scenario, s.series, s.n,
         s.kernel, s.run_id
  FROM samples s JOIN runs r ON r.run_id = s.run_id
  WHERE s.kernel IN ({a}, {b})
)
SELECT host, cpu_model, scenario, series, n,
       count(DISTINCT CASE WHEN kernel = {a} THEN run_id END) AS runs_a,
       count(DISTINCT CASE WHEN kernel = {b} THEN run_id END) AS runs_b,
       sum(CASE WHEN kernel = {a} THEN 1 ELSE 0 END) AS samples_a,
       sum(CASE WHEN kernel = {b} THEN 1 ELSE 0 END) AS samples_b
FROM sides
GROUP BY host, cpu_model, scenario, series, n
HAVING count(DISTINCT CASE WHEN kernel = {a} THEN run_id END) > 0
   AND count(DISTINCT CASE WHEN kernel = {b} THEN run_id END) > 0
ORDER BY host NULLS FIRST, cpu_model, scenario, series, n"
    ))
}

/// The samples the statistics of `--regressions` rest on, in the order each run took them,
/// runs in the order they started.
pub fn regression_samples(a: &str, b: &str) -> Result<String, QueryError> {
    let (a, b) = (literal(a)?, literal(b)?);
    Ok(format!(
        "SELECT NULLIF(r.hostname, '') AS host, r.cpu_model, s.scenario, s.series, s.n,
       s.kernel, s.run_id, s.run_part, r.traced, r.started_utc, s.sample_index, s.duration_ns
FROM samples s JOIN runs r ON r.run_id = s.run_id
WHERE s.kernel IN ({a}, {b})
ORDER BY host NULLS FIRST, cpu_model, scenario, series, n, kernel, started_utc NULLS FIRST,
         run_id, run_part NULLS FIRST, sample_index"
    ))
}

/// A kernel release as an SQL string literal. A quote or a backslash would need escaping
/// that Spark and DataFusion spell differently, and no `uname -r` has one.
fn literal(value: &str) -> Result<String, QueryError> {
    if value.contains(['\'', '\\']) || value.chars().any(char::is_control) {
        return Err(QueryError::Usage(format!(
            "{value:?}: a kernel release with a quote, a backslash or a control character cannot be asked for"
        )));
    }
    Ok(format!("'{value}'"))
}
