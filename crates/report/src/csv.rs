//! CSV for spreadsheets and plotting scripts: one row per (point, series, part), where the
//! part is the whole sample ("total") or one of its phases. Times stay in nanoseconds.
//!
//! Fields are quoted as RFC 4180 asks. Rows end in a bare newline rather than CRLF, which
//! every CSV reader accepts and which keeps `wc -l`, `cut` and `awk` usable on the file.
//!
//! A traced run's contended locks are a second table with other columns, so they go in a
//! file of their own ([`contention`]) rather than in rows that would not fit this header.

use vmscale_run::RunRecord;
use vmscale_stats::Summary;

use crate::sections::contention;

/// The columns of a latency distribution, in the order [`distribution_fields`] fills them.
const DISTRIBUTION: [&str; 8] = [
    "mean_ns", "stdev_ns", "min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns",
];

/// The latency table's columns.
pub(crate) fn header() -> Vec<&'static str> {
    let leading = [
        "scenario",
        "sweep",
        "n",
        "vcpus_per_host_cpu",
        "series",
        "part",
        "count",
    ];
    [&leading[..], &DISTRIBUTION[..]].concat()
}

/// The part name of a row that describes whole samples.
const TOTAL: &str = "total";

pub(crate) fn render(record: &RunRecord) -> String {
    let mut out = line(header().into_iter().map(String::from));
    for point in &record.points {
        for series in &point.series {
            let parts = std::iter::once((TOTAL, series.samples_ns.len(), &series.summary)).chain(
                series
                    .phases
                    .iter()
                    .map(|p| (p.name.as_str(), p.samples_ns.len(), &p.summary)),
            );
            for (part, count, summary) in parts {
                let mut fields = vec![
                    record.scenario.clone(),
                    record.sweep.clone(),
                    point.n.to_string(),
                    point.vcpus_per_host_cpu.to_string(),
                    series.name.clone(),
                    part.to_string(),
                    count.to_string(),
                ];
                fields.extend(distribution_fields(summary.as_ref()));
                out.push_str(&line(fields.into_iter()));
            }
        }
    }
    out
}

/// The contention table's columns: the distribution is of completed waits.
pub(crate) fn contention_header() -> Vec<&'static str> {
    let leading = ["scenario", "lock_addr", "lock", "kind", "modes", "count"];
    [
        &leading[..],
        &DISTRIBUTION[..],
        &["total_wait_ns", "open_waits"][..],
    ]
    .concat()
}

/// One row per contended lock, worst first, or `None` for a run without a kernel trace.
/// `count` and the distribution are the completed waits; open waits are counted apart.
pub(crate) fn contention(record: &RunRecord) -> Option<String> {
    let trace = record.trace.as_ref()?;
    let mut out = line(contention_header().into_iter().map(String::from));
    for lock in &trace.contention {
        let mut fields = vec![
            record.scenario.clone(),
            format!("{:#x}", lock.lock_addr),
            lock.name.clone(),
            lock.kind.to_string(),
            contention::modes(&lock.modes),
            lock.waits.as_ref().map_or(0, |w| w.n).to_string(),
        ];
        fields.extend(distribution_fields(lock.waits.as_ref()));
        fields.push(lock.total_wait_ns.to_string());
        fields.push(lock.open_waits.to_string());
        out.push_str(&line(fields.into_iter()));
    }
    Some(out)
}

/// Empty fields for a part without samples: readers take them as missing values, where a
/// placeholder such as "-" would turn a numeric column into text.
fn distribution_fields(summary: Option<&Summary>) -> Vec<String> {
    match summary {
        // Sub-nanosecond digits of a mean are noise; one decimal keeps the column tidy.
        Some(s) => vec![
            format!("{:.1}", s.mean_ns),
            format!("{:.1}", s.stdev_ns),
            s.min_ns.to_string(),
            s.p50_ns.to_string(),
            s.p90_ns.to_string(),
            s.p99_ns.to_string(),
            s.p999_ns.to_string(),
            s.max_ns.to_string(),
        ],
        None => vec![String::new(); DISTRIBUTION.len()],
    }
}

pub(crate) fn line(fields: impl Iterator<Item = String>) -> String {
    let quoted: Vec<String> = fields.map(|f| quote(&f)).collect();
    format!("{}\n", quoted.join(","))
}

/// RFC 4180: a field holding a comma, a quote or a line break is wrapped in quotes, with
/// each quote inside doubled.
fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_follows_rfc_4180() {
        assert_eq!(quote("direct"), "direct");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(quote("two\nlines"), "\"two\nlines\"");
    }
}
