//! From a recorded trace directory to the trace section of a run, and from a run's
//! findings to its verdict: what `run`, `record` and `report` do once a trace exists.

use std::path::Path;

use vmscale_run::TraceSection;
use vmscale_trace::record::recorder::TraceMeta;

use vmscale_run::dir::TRACE_DIR;

/// How the trace was recorded, plus what the analyses find in it. A trace that cannot be
/// decoded costs the findings, not the run: the reason becomes a warning.
pub fn analyse(
    run_dir: &Path,
    meta: &TraceMeta,
    excluded_tids: Vec<u32>,
    command: Option<vmscale_run::findings::CommandUsage>,
    points: &[vmscale_run::Point],
    warnings: &mut Vec<String>,
) -> TraceSection {
    // Neither a command, a process nor a scenario's samples: a system-wide recording.
    let every_task = command.is_none() && points.is_empty();
    let mut excluded_tids = excluded_tids;
    if every_task {
        // vmscale's own tasks (its readers, its polling) are no part of what it explains;
        // the trace's thread groups take its threads along.
        excluded_tids.push(std::process::id());
    }
    let mut section = TraceSection {
        excluded_tids,
        every_task,
        command,
        dir: TRACE_DIR.into(),
        events: meta.events.clone(),
        stacks: meta.stacks,
        buffer_kib: meta.buffer_kib,
        lost_per_cpu: meta
            .lost
            .iter()
            .map(|(cpu, l)| (cpu.clone(), l.total()))
            .collect(),
        ..TraceSection::default()
    };
    reanalyse(run_dir, &mut section, points, warnings);
    section
}

/// Runs the analyses over the run's raw trace and replaces the section's findings. The
/// samples' timed windows in `points`, where the scenario recorded them, are what the
/// breakdown explains.
pub fn reanalyse(
    run_dir: &Path,
    section: &mut TraceSection,
    points: &[vmscale_run::Point],
    warnings: &mut Vec<String>,
) {
    let dir = run_dir.join(&section.dir);
    // An aggregated recording left its kernel maps, not a trace to decode.
    match vmscale_trace::record::bpf::dump::AggregateDump::read(&dir) {
        Ok(Some(dump)) => {
            let windows = TraceMeta::read(&dir).map(|m| m.windows).unwrap_or_default();
            let scope = crate::aggregate::AggregateScope {
                excluded_tids: section.excluded_tids.clone(),
                windows,
            };
            let mut found = Vec::new();
            crate::aggregate::fill(&dump, &dir, &scope, section, &mut found);
            for warning in found {
                if !warnings.contains(&warning) {
                    warnings.push(warning);
                }
            }
            return;
        }
        Ok(None) => {}
        Err(e) => {
            let warning = format!("the aggregate mode's maps could not be read: {e}");
            if !warnings.contains(&warning) {
                warnings.push(warning);
            }
            return;
        }
    }
    let scope = crate::Scope {
        excluded_tids: section.excluded_tids.clone(),
        timed_windows: vmscale_run::schema::timed_windows(points),
        subject: section
            .command
            .as_ref()
            .map(|c| {
                std::iter::once(c.pid)
                    .chain(c.threads.iter().copied())
                    .collect()
            })
            .unwrap_or_default(),
        vcpu_resume_windows: vmscale_run::schema::task_windows(points),
        timed_calls: vmscale_run::schema::timed_calls(points),
        vmm: vmm_scopes(points, section.command.as_ref()),
        every_task: section.every_task,
        tgids: Default::default(),
    };
    let mut analysis = crate::analyse_scoped(&run_dir.join(&section.dir), &scope);
    let (subject_tids, in_lock_waits) = analysis
        .as_mut()
        .map(|a| {
            (
                a.subject_tids.clone(),
                std::mem::take(&mut a.samples_in_lock_waits),
            )
        })
        .unwrap_or_default();
    fill_findings(analysis, section, warnings);
    // The subject's on-CPU time by code path, from the samples of its threads in its
    // windows outside their lock waits: what the on-CPU findings are made of.
    let sampled = sampled_subject(&scope, section, &subject_tids);
    section.on_cpu_paths =
        crate::on_cpu::paths(&run_dir.join(&section.dir), &sampled, &in_lock_waits);
    // The on-CPU samples by stack, for the flame graphs.
    let profiles = vmscale_sample::for_run::run_profiles(
        &run_dir.join(&section.dir),
        &section.excluded_tids,
        points,
    );
    section.on_cpu = profiles.on_cpu;
    section.on_cpu_by_n = profiles.by_n;
    for warning in profiles.warnings {
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    // A recording's phase markers are written by vmscale itself, whose time between them is
    // its own wait for the command: the subject (the command's tasks) is what it explains.
    if points.is_empty() && (section.command.is_some() || section.every_task) {
        section.breakdown.clear();
    }
    // An attached process that made no KVM call is not a VMM: nothing to say of it here.
    if points.is_empty()
        && !section
            .vmm
            .iter()
            .flat_map(|v| &v.ioctls)
            .any(|i| i.name.starts_with("KVM"))
    {
        section.vmm.clear();
    }
}

/// Whose samples are the subject's, and when: the measuring thread in its timed samples;
/// else each timed call on its thread; else a recorded command's tasks throughout.
fn sampled_subject(
    scope: &crate::Scope,
    section: &TraceSection,
    subject_tids: &[i32],
) -> crate::on_cpu::SampledSubject {
    let mut windows: std::collections::HashMap<u32, Vec<(u64, u64)>> = Default::default();
    if !scope.timed_windows.is_empty() {
        if let Some(thread) = section.breakdown.first().map(|p| p.pid as u32) {
            let mut list = scope.timed_windows.clone();
            list.sort_unstable();
            windows.insert(thread, list);
        }
    } else if !scope.timed_calls.is_empty() {
        for &(tid, start, end) in &scope.timed_calls {
            windows.entry(tid).or_default().push((start, end));
        }
        for list in windows.values_mut() {
            list.sort_unstable();
        }
    } else {
        for &tid in subject_tids {
            windows.insert(tid as u32, Vec::new());
        }
    }
    crate::on_cpu::SampledSubject { windows }
}

/// The series a VMM carried out: its threads and the samples' windows. A recording attached
/// to a process (`record --pid`) is one window, the whole recording, of that process.
fn vmm_scopes(
    points: &[vmscale_run::Point],
    command: Option<&vmscale_run::findings::CommandUsage>,
) -> Vec<crate::vmm::VmmSeriesScope> {
    if let Some(command) = command.filter(|c| points.is_empty() && !c.threads.is_empty()) {
        return vec![crate::vmm::VmmSeriesScope {
            n: 0,
            series: "recording".into(),
            tids: std::iter::once(command.pid)
                .chain(command.threads.iter().copied())
                .collect(),
            windows: vec![(0, u64::MAX)],
        }];
    }
    points
        .iter()
        .flat_map(|p| p.series.iter().map(move |s| (p.n, s)))
        .filter(|(_, s)| !s.vmm_tids.is_empty() && !s.sample_start_ns.is_empty())
        .map(|(n, s)| crate::vmm::VmmSeriesScope {
            n,
            series: s.name.clone(),
            tids: s.vmm_tids.clone(),
            windows: s
                .sample_start_ns
                .iter()
                .zip(&s.samples_ns)
                .map(|(&start, &ns)| (start, start + ns))
                .collect(),
        })
        .collect()
}

/// Puts an analysis's findings in `section`; damaged pages it skipped, what the trace
/// directory lacks (truncated or missing files, formats, kallsyms, meta.json), or why the
/// trace could not be analysed at all, become warnings. A warning the run already has is
/// not added again: `report` re-analyses a trace whose run recorded the same warnings.
pub fn fill_findings(
    analysis: Result<crate::TraceAnalysis, vmscale_trace::DecodeError>,
    section: &mut TraceSection,
    warnings: &mut Vec<String>,
) {
    let mut found = Vec::new();
    match analysis {
        Ok(mut analysis) => {
            if analysis.corrupt_pages > 0 {
                found.push(format!(
                    "{} damaged trace pages were skipped (first: {})",
                    analysis.corrupt_pages,
                    analysis
                        .decode_errors
                        .first()
                        .map(String::as_str)
                        .unwrap_or("?")
                ));
            }
            found.append(&mut analysis.warnings);
            analysis.fill(section);
        }
        Err(e) => found.push(format!("the kernel trace could not be analysed: {e}")),
    }
    for warning in found {
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
}

/// `record` with its growth claims judged from its samples and its verdict drawn from its
/// findings and those claims: the last step before any output.
pub fn concluded(mut record: vmscale_run::RunRecord) -> vmscale_run::RunRecord {
    record.judge_growth(None);
    record.verdict = crate::verdict::verdict(&record);
    record
}
