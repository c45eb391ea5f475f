//! A timed operation's latency predicted without one cause: each sample's latency less
//! that sample's own time in the cause (or half of it), then the distribution of those.

use vmscale_run::findings::WhatIf;

/// From each sample's (latency, time in the cause); `None` without samples.
pub(crate) fn predict(samples: impl Iterator<Item = (u64, u64)>) -> Option<WhatIf> {
    let (mut measured, mut removed, mut halved) = (Vec::new(), Vec::new(), Vec::new());
    for (latency, cause) in samples {
        let cause = cause.min(latency);
        measured.push(latency);
        removed.push(latency - cause);
        halved.push(latency - cause / 2);
    }
    if measured.is_empty() {
        return None;
    }
    for list in [&mut measured, &mut removed, &mut halved] {
        list.sort_unstable();
    }
    let q = |list: &[u64], q: f64| vmscale_stats::quantile(list, q) as u64;
    Some(WhatIf {
        samples: measured.len() as u64,
        p50_ns: q(&measured, 0.5),
        p99_ns: q(&measured, 0.99),
        removed_p50_ns: q(&removed, 0.5),
        removed_p99_ns: q(&removed, 0.99),
        halved_p50_ns: q(&halved, 0.5),
        halved_p99_ns: q(&halved, 0.99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sample_loses_its_own_share() {
        // Four samples of 100; two spent 80 in the cause, two none of it.
        let w = predict([(100, 80), (100, 0), (100, 80), (100, 0)].into_iter()).unwrap();
        assert_eq!((w.p50_ns, w.removed_p50_ns, w.halved_p50_ns), (100, 20, 60));
        assert_eq!(w.removed_p99_ns, 100);
        // A share larger than the sample (rounding at window edges) removes the sample.
        assert_eq!(predict([(10, 50)].into_iter()).unwrap().removed_p50_ns, 0);
        assert!(predict(std::iter::empty()).is_none());
    }
}
