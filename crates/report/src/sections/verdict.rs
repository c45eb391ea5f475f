//! The verdict every rendering starts with: the causes of the explained time, largest first,
//! each with its holder and evidence.

use vmscale_run::RunRecord;

use crate::document::{Block, Ranked, Section, Text};

/// Evidence lines the text and Markdown renderings show per finding (the first finding's
/// scope, its counts and the stack it waited from); JSON and HTML carry all of them.
const EVIDENCE_SHOWN: usize = 3;
/// Parts of a finding's time named in its "made of" line; JSON carries all of them.
const EXPLAINED_SHOWN: usize = 3;

/// How much of each finding to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Depth {
    /// Everything: the renderings decide how much of it to show.
    Full,
    /// The terminal's first screen: one line under each finding.
    Brief,
}

/// The verdict, or `None` when the run has none (an untraced run).
pub(crate) fn section(record: &RunRecord, depth: Depth) -> Option<Section> {
    if record.verdict.is_empty() {
        return None;
    }
    let findings = record
        .verdict
        .iter()
        .map(|finding| {
            let mut first: Vec<Text> = finding
                .holder
                .iter()
                .map(|h| Text::from(format!("holder: {h}")))
                .collect();
            if !finding.explained_by.is_empty() {
                let parts: Vec<String> = finding
                    .explained_by
                    .iter()
                    .take(EXPLAINED_SHOWN)
                    .map(|e| {
                        format!(
                            "{} {}",
                            vmscale_stats::units::measured_share(e.share),
                            e.what
                        )
                    })
                    .collect();
                first.push(Text::from(format!("made of: {}", parts.join("; "))));
            }
            if let Some(w) = &finding.what_if {
                first.push(Text::from(what_if_line("what if", w, true)));
            }
            if let Some(w) = &finding.what_if_together {
                first.push(Text::from(what_if_line("what if, both", w, false)));
            }
            let mut details = first.clone();
            details.extend(finding.evidence.iter().map(|e| Text::from(e.as_str())));
            let shown = match depth {
                Depth::Full => first.len() + EVIDENCE_SHOWN,
                Depth::Brief => first.len().max(1),
            };
            if depth == Depth::Brief {
                details.truncate(shown);
            }
            Ranked {
                text: Text::tag(finding.cause.label()).then(finding.summary.as_str()),
                details,
                shown,
            }
        })
        .collect();
    Some(Section {
        heading: Some("verdict".into()),
        blocks: vec![Block::Ranked(findings)],
        ..Section::new(
            "verdict",
            format!(
                "verdict for {}: what the explained time went to, largest first (time no kernel cause explains comes last)",
                record.scenario
            ),
        )
    })
}

/// "what if: CHANGE (PHASE, N samples): p50 X (now Y), p99 X (now Y)", and with `halved`
/// the prediction with half of the cause removed. A cause that can only be made faster
/// (the operation's own work) is said by that half alone.
fn what_if_line(label: &str, w: &vmscale_run::verdict::FindingWhatIf, halved: bool) -> String {
    use vmscale_stats::units::duration;
    let p = &w.prediction;
    if w.only_halved {
        return format!(
            "{label}: {} ({}, {} samples): p50 {} (now {}), p99 {} (now {})",
            w.change,
            w.phase,
            p.samples,
            duration(p.halved_p50_ns),
            duration(p.p50_ns),
            duration(p.halved_p99_ns),
            duration(p.p99_ns),
        );
    }
    let mut line = format!(
        "{label}: {} ({}, {} samples): p50 {} (now {}), p99 {} (now {})",
        w.change,
        w.phase,
        p.samples,
        duration(p.removed_p50_ns),
        duration(p.p50_ns),
        duration(p.removed_p99_ns),
        duration(p.p99_ns),
    );
    if halved {
        line.push_str(&format!(
            "; with half of it: p50 {}, p99 {}",
            duration(p.halved_p50_ns),
            duration(p.halved_p99_ns)
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what_if(only_halved: bool) -> vmscale_run::verdict::FindingWhatIf {
        vmscale_run::verdict::FindingWhatIf {
            change: "CHANGE".into(),
            phase: "PHASE".into(),
            prediction: vmscale_run::findings::WhatIf {
                samples: 10,
                p50_ns: 20_000,
                p99_ns: 40_000,
                removed_p50_ns: 0,
                removed_p99_ns: 1_000,
                halved_p50_ns: 10_000,
                halved_p99_ns: 20_000,
            },
            only_halved,
        }
    }

    /// Own on-CPU work is said by its halved prediction alone, never as removed.
    #[test]
    fn a_cause_that_can_only_be_made_faster_is_said_by_its_half() {
        assert_eq!(
            what_if_line("what if", &what_if(true), true),
            "what if: CHANGE (PHASE, 10 samples): p50 10.0 us (now 20.0 us), p99 20.0 us (now 40.0 us)"
        );
        let removable = what_if_line("what if", &what_if(false), true);
        assert!(
            removable.starts_with("what if: CHANGE (PHASE, 10 samples): p50 0 us (now 20.0 us)")
                && removable.ends_with("; with half of it: p50 10.0 us, p99 20.0 us"),
            "{removable}"
        );
    }
}
