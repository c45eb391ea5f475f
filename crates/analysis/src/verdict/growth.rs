//! How each timed series grows with N, said once with the first finding.

use vmscale_run::RunRecord;
use vmscale_stats::fit::Model;
use vmscale_stats::units::duration;

/// How each timed series' median grows with N: the best-fitting model (constant, linear,
/// USL) when the run measured three or more N, with the cost of one more unit of N at the
/// largest and the fit's prediction at twice it; else the two medians it has.
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
            let medians: Vec<(f64, f64)> = record
                .points
                .iter()
                .filter_map(|p| {
                    let summary = p.series.iter().find(|l| l.name == s.name)?.summary.as_ref()?;
                    Some((p.n as f64, summary.p50_ns as f64))
                })
                .collect();
            let (&(n0, p0), &(n1, p1)) = (medians.first()?, medians.last()?);
            let measured = format!(
                "p50 {} at {sweep}={n0} -> {} at {sweep}={n1}",
                duration(p0 as u64),
                duration(p1 as u64)
            );
            if medians.len() < 3 {
                return Some(format!("{}: {measured}", s.name));
            }
            let selection = vmscale_stats::fit::select(&medians);
            let best = selection.best()?;
            let unsure = if selection.distinguishable {
                ""
            } else {
                "; the data barely tell it from the next model"
            };
            let twice = 2.0 * n1;
            let slope = best.slope_at(n1);
            let per = duration(slope.abs() as u64);
            let fit = match best.model {
                Model::Constant => "constant",
                Model::Linear => "Amdahl",
                Model::Usl => "USL",
            };
            // The words follow the fitted curve's shape at the largest N, so a cost that
            // falls as N grows is never called growth.
            let how = match best.model {
                Model::Constant => format!("does not grow with {sweep} (constant fit{unsure})"),
                _ if slope < 0.0 => format!(
                    "falls as {sweep} grows ({fit} fit{unsure}), {per} less per {sweep} at {n1}"
                ),
                Model::Usl if best.kappa > 0.0 => format!(
                    "grows faster than linearly with {sweep} (USL fit{unsure}), {per} more per {sweep} at {n1}"
                ),
                Model::Usl => format!(
                    "grows slower than linearly with {sweep} (USL fit{unsure}), {per} more per {sweep} at {n1}"
                ),
                Model::Linear => format!(
                    "grows linearly with {sweep} (Amdahl fit{unsure}), {per} more per {sweep} at {n1}"
                ),
            };
            let predicted = best.predict(twice);
            let prediction = if predicted > 0.0 {
                format!("{} predicted at {sweep}={twice}", duration(predicted as u64))
            } else {
                format!("the fit does not extrapolate to {sweep}={twice} (it falls below zero)")
            };
            Some(format!("{}: {measured}; {how}; {prediction}", s.name))
        })
        .collect()
}
