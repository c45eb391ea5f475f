//! A run's samples as the run record keeps them ([`vmscale_run::findings::StackProfile`]):
//! what report.html draws as flame graphs without reading the trace again.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use vmscale_run::findings::{PointProfile, ProfileStack, StackProfile};
use vmscale_run::Point;

use crate::profile::{Filter, FrameKind, Profile, StackFrame};
use crate::read::{ReadError, Samples};
use crate::symbolize::Symbolizer;

/// Distinct stacks a run record keeps per profile; the rest are counted under their root.
pub const MAX_STACKS: usize = 2_000;

/// What a run's samples are in its record: the whole profile and, where the run swept a
/// value, those of its smallest and largest values. Warnings say what was lost.
#[derive(Debug, Default)]
pub struct RunProfiles {
    pub on_cpu: Option<StackProfile>,
    pub by_n: Vec<PointProfile>,
    pub warnings: Vec<String>,
}

/// The samples of `trace_dir` except the idle task's and those of `excluded_tids`
/// (other runs' threads); `points` (the run's timed samples) give each swept value its
/// time span. A trace without samples gives nothing; one that cannot be read, a warning.
pub fn run_profiles(trace_dir: &Path, excluded_tids: &[u32], points: &[Point]) -> RunProfiles {
    if !Samples::exist(trace_dir) {
        return RunProfiles::default();
    }
    match read(trace_dir, excluded_tids, points) {
        Ok(p) => p,
        Err(e) => RunProfiles {
            warnings: vec![format!("the on-CPU samples could not be read: {e}")],
            ..RunProfiles::default()
        },
    }
}

/// The time each point's timed samples spanned: first start to last end.
fn point_spans(points: &[Point]) -> Vec<(u64, u64, u64)> {
    points
        .iter()
        .filter_map(|p| {
            let windows = p.series.iter().flat_map(|s| {
                s.sample_start_ns
                    .iter()
                    .zip(&s.samples_ns)
                    .map(|(&a, &ns)| (a, a + ns))
            });
            let (lo, hi) = windows.fold((u64::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
            (lo < hi).then_some((p.n, lo, hi))
        })
        .collect()
}

fn read(
    trace_dir: &Path,
    excluded_tids: &[u32],
    points: &[Point],
) -> Result<RunProfiles, ReadError> {
    let samples = Samples::open(trace_dir)?;
    let mut symbols = Symbolizer::load(&samples, trace_dir)?;
    let filter = Filter {
        windows: samples.meta().windows.clone(),
        exclude_pids: excluded_tids.iter().copied().collect::<HashSet<u32>>(),
        ..Filter::default()
    };
    let spans = point_spans(points);
    // The smallest and the largest swept value, when they differ.
    let ends: Vec<(u64, u64, u64)> = match (
        spans.iter().min_by_key(|s| s.0),
        spans.iter().max_by_key(|s| s.0),
    ) {
        (Some(a), Some(b)) if a.0 != b.0 => vec![*a, *b],
        _ => Vec::new(),
    };
    let meta = samples.meta().clone();
    let fresh = || Profile::new(meta.period_ns, meta.hz);
    let mut all = fresh();
    let mut by_n: Vec<Profile> = ends.iter().map(|_| fresh()).collect();
    let read = samples.for_each(|s| {
        if !filter.keeps(s) {
            return;
        }
        let frames = all.frames_of(s, &mut symbols);
        for (profile, &(_, lo, hi)) in by_n.iter_mut().zip(&ends) {
            if (lo..hi).contains(&s.ts) {
                profile.add_sample(frames.clone(), s.period_ns);
            }
        }
        all.add_sample(frames, s.period_ns);
    })?;
    let mut warnings = meta.warnings();
    warnings.extend(read.warnings());
    warnings.extend(symbols.side_band.warnings());
    let scope = "every task's samples (the idle task's apart) while the trace was on";
    let mut on_cpu = stack_profile(&all, scope);
    on_cpu.lost = read.lost;
    let by_n = by_n
        .iter()
        .zip(&ends)
        .map(|(profile, &(n, lo, hi))| PointProfile {
            n,
            span_ns: hi - lo,
            profile: stack_profile(
                profile,
                "every task's samples during this value's timed samples",
            ),
        })
        .collect();
    Ok(RunProfiles {
        on_cpu: Some(on_cpu),
        by_n,
        warnings,
    })
}

/// Frame names by index, each stored once.
#[derive(Default)]
struct Names {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }
}

/// `profile`'s on-CPU stacks as a run record keeps them, at most [`MAX_STACKS`].
pub fn stack_profile(profile: &Profile, scope: &str) -> StackProfile {
    let mut names = Names::default();
    let mut out = Vec::new();
    let mut omitted: HashMap<StackFrame, u64> = HashMap::new();
    let mut omitted_samples = 0;
    for (rank, stack) in profile.by_samples().into_iter().enumerate() {
        if rank >= MAX_STACKS {
            omitted_samples += stack.samples;
            if let Some(root) = stack.frames.first() {
                *omitted.entry(root.clone()).or_default() += stack.samples;
            }
            continue;
        }
        let frames: Vec<u32> = stack.frames.iter().map(|f| names.id(&f.name)).collect();
        let kernel_from = stack
            .frames
            .iter()
            .position(|f| matches!(f.kind, FrameKind::Kernel | FrameKind::Guest))
            .unwrap_or(stack.frames.len()) as u32;
        let user_from = stack
            .frames
            .iter()
            .position(|f| f.kind != FrameKind::Task)
            .unwrap_or(stack.frames.len()) as u32;
        out.push(ProfileStack {
            frames,
            kernel_from,
            user_from,
            samples: stack.samples,
        });
    }
    let mut omitted: Vec<(StackFrame, u64)> = omitted.into_iter().collect();
    omitted.sort();
    for (root, samples) in omitted {
        out.push(ProfileStack {
            frames: vec![names.id(&root.name), names.id("[other stacks]")],
            kernel_from: 2,
            user_from: 1,
            samples,
        });
    }
    StackProfile {
        scope: scope.to_string(),
        hz: profile.hz,
        period_ns: profile.period_ns,
        samples: profile.samples,
        lost: profile.read.lost,
        names: names.names,
        stacks: out,
        omitted_samples,
    }
}
