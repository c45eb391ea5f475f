//! How each timed series grows with N, said once with the first finding.

use vmscale_run::RunRecord;
use vmscale_stats::compare::Statistic;
use vmscale_stats::units::duration;

/// How each timed series' median grows with N, from the record's growth claims
/// (`RunRecord::scaling`): the median at the smallest and the largest N with their
/// intervals, the claim with the ratio and exponent it was decided on, the shape where a
/// model fits (its cost per unit of N and its prediction at twice the largest N), or that
/// no model fits; in the words of the report's scaling lines.
pub(super) fn growth(record: &RunRecord) -> Vec<String> {
    let Some(first) = record.points.first() else {
        return Vec::new();
    };
    if record.points.len() < 2 {
        return Vec::new();
    }
    let sweep = &record.sweep;
    first
        .series
        .iter()
        .filter(|s| !s.sample_start_ns.is_empty() || !s.timed_calls.is_empty())
        .filter_map(|s| {
            let judged = record.scaling.iter().find(|g| g.series == s.name);
            if let Some(g) =
                judged.and_then(|j| j.growth.iter().find(|g| g.statistic == Statistic::P50))
            {
                return Some(format!(
                    "{}: {}; {} ({})",
                    s.name,
                    g.endpoints_text(sweep),
                    g.sentence(sweep),
                    g.confidence_text()
                ));
            }
            // Not judged: the medians it has, and why there is no claim.
            let medians: Vec<(u64, u64)> = record
                .points
                .iter()
                .filter_map(|p| {
                    let summary = p
                        .series
                        .iter()
                        .find(|l| l.name == s.name)?
                        .summary
                        .as_ref()?;
                    Some((p.n, summary.p50_ns))
                })
                .collect();
            let (&(n0, p0), &(n1, p1)) = (medians.first()?, medians.last()?);
            let mut line = format!(
                "{}: p50 {} at {sweep}={n0} -> {} at {sweep}={n1}",
                s.name,
                duration(p0),
                duration(p1)
            );
            if let Some(why) =
                judged.and_then(|j| j.unjudged.iter().find(|u| u.statistic == Statistic::P50))
            {
                line.push_str(&format!(
                    "; {}",
                    why.why
                        .text(why.statistic, sweep, vmscale_stats::growth::CONFIDENCE)
                ));
            }
            Some(line)
        })
        .collect()
}
