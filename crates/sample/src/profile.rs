//! Samples aggregated by stack: what a flame graph, a folded file and a pprof profile show.
//!
//! A stack is root first: the process's name and the thread's (where it differs), then
//! its user frames from the outermost
//! caller to the leaf, then its kernel frames likewise (a sample taken in a guest ends in
//! `[guest]`). Each stack carries the samples that had it, and the CPU time they stand
//! for. Stacks of other kinds (the time a task waited, with why) are added through
//! [`Profile::add`], so that every export shows them beside the on-CPU ones.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use crate::read::{ReadError, ReadSummary, Sample, Samples};
use crate::symbolize::Symbolizer;

/// Where a frame of a stack ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// The thread's name, at the root.
    Task,
    User,
    Kernel,
    /// The sample interrupted a guest.
    Guest,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackFrame {
    pub name: Arc<str>,
    pub kind: FrameKind,
}

/// One distinct stack and what it weighs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Root first.
    pub frames: Vec<StackFrame>,
    /// On-CPU samples with this stack.
    pub samples: u64,
    /// The CPU time those samples stand for.
    pub cpu_ns: u64,
    /// Time waited with this stack (added by an analysis through [`Profile::add`]).
    pub wait_ns: u64,
    /// Labels of the weight (for a wait: `cause`, `lock`, ...); none for on-CPU stacks.
    pub labels: Vec<(String, String)>,
}

/// Which samples a profile takes.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only samples inside one of these `[start, end)` intervals (trace clock); empty: all.
    pub windows: Vec<(u64, u64)>,
    /// Only these threads; None: every thread.
    pub tids: Option<HashSet<u32>>,
    /// Only these thread groups (processes); None: every one.
    pub pids: Option<HashSet<u32>>,
    /// Leave out these thread groups (and threads whose id is one of them).
    pub exclude_pids: HashSet<u32>,
    /// Keep the idle task's samples (pid 0), left out by default.
    pub idle: bool,
}

impl Filter {
    pub fn keeps(&self, s: &Sample<'_>) -> bool {
        if s.tid == 0 && !self.idle {
            return false;
        }
        if self.exclude_pids.contains(&s.pid) || self.exclude_pids.contains(&s.tid) {
            return false;
        }
        if self.tids.as_ref().is_some_and(|t| !t.contains(&s.tid))
            || self.pids.as_ref().is_some_and(|p| !p.contains(&s.pid))
        {
            return false;
        }
        self.windows.is_empty() || in_windows(&self.windows, s.ts)
    }
}

/// Whether `ts` is inside one of `windows` (sorted by start or not).
fn in_windows(windows: &[(u64, u64)], ts: u64) -> bool {
    windows.iter().any(|&(a, b)| (a..b).contains(&ts))
}

/// A stack and the labels of its weight: what makes two weights one stack.
type StackKey = (Vec<StackFrame>, Vec<(String, String)>);

/// Stacks and their weights.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    pub stacks: Vec<Stack>,
    /// The sampling period: CPU ns per sample.
    pub period_ns: u64,
    pub hz: u32,
    /// Samples taken into the profile.
    pub samples: u64,
    /// What reading the samples found (lost records, damage), all samples counted.
    pub read: ReadSummary,
    index: HashMap<StackKey, usize>,
    names: HashSet<Arc<str>>,
}

impl Profile {
    /// An empty profile of samples taken every `period_ns` (`hz` per second).
    pub fn new(period_ns: u64, hz: u32) -> Profile {
        Profile {
            period_ns,
            hz,
            ..Profile::default()
        }
    }

    /// The on-CPU samples of `trace_dir` that `filter` keeps, symbolized.
    pub fn on_cpu(trace_dir: &Path, filter: &Filter) -> Result<Profile, ReadError> {
        let samples = Samples::open(trace_dir)?;
        let mut symbols = Symbolizer::load(&samples, trace_dir)?;
        let mut profile = Profile::new(samples.meta().period_ns, samples.meta().hz);
        let read = samples.for_each(|s| {
            if filter.keeps(s) {
                let frames = profile.frames_of(s, &mut symbols);
                profile.add_sample(frames, s.period_ns);
            }
        })?;
        profile.read = read;
        Ok(profile)
    }

    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.names.get(name) {
            return Arc::clone(n);
        }
        let n: Arc<str> = Arc::from(name);
        self.names.insert(Arc::clone(&n));
        n
    }

    /// A sample's stack, root first.
    pub fn frames_of(&mut self, s: &Sample<'_>, symbols: &mut Symbolizer) -> Vec<StackFrame> {
        let mut frames = Vec::with_capacity(2 + s.user.len() + s.kernel.len());
        // The process, then the thread where it has a name of its own.
        let thread = symbols.comm_at(s.tid, s.ts).map(str::to_string);
        let process = symbols.comm_at(s.pid, s.ts).map(str::to_string);
        let mut roots = Vec::new();
        match (process, thread) {
            (Some(p), Some(t)) if p != t && s.pid != s.tid => roots.extend([p, t]),
            (_, Some(t)) => roots.push(t),
            (Some(p), None) => roots.extend([p, format!("[tid {}]", s.tid)]),
            (None, None) => roots.push(format!("[tid {}]", s.tid)),
        }
        for root in roots {
            frames.push(StackFrame {
                name: self.intern(&root),
                kind: FrameKind::Task,
            });
        }
        for &ip in s.user.iter().rev() {
            let name = symbols.user(s.pid, s.ts, ip).name();
            // Runs of addresses in no mapping (a frame-pointer walk through code built
            // without frame pointers reads garbage) are one frame.
            if name == "[unknown]" && frames.last().is_some_and(|f| &*f.name == "[unknown]") {
                continue;
            }
            frames.push(StackFrame {
                name: self.intern(&name),
                kind: FrameKind::User,
            });
        }
        for &ip in s.kernel.iter().rev() {
            let name = symbols.kernel(ip).name();
            frames.push(StackFrame {
                name: self.intern(&name),
                kind: FrameKind::Kernel,
            });
        }
        if s.guest {
            frames.push(StackFrame {
                name: self.intern("[guest]"),
                kind: FrameKind::Guest,
            });
        }
        frames
    }

    /// One on-CPU sample with `frames` (root first) standing for `cpu_ns`.
    pub fn add_sample(&mut self, frames: Vec<StackFrame>, cpu_ns: u64) {
        self.samples += 1;
        let i = self.slot(frames, Vec::new());
        self.stacks[i].samples += 1;
        self.stacks[i].cpu_ns += cpu_ns;
    }

    /// Weight of another kind: `wait_ns` waited with `frames` (root first), labelled (for
    /// example `[("cause", "lock-wait"), ("lock", "kvm->slots_lock")]`). This is how an
    /// analysis puts off-CPU time into the same exports as the samples.
    pub fn add(&mut self, frames: &[(&str, FrameKind)], wait_ns: u64, labels: &[(&str, &str)]) {
        let frames = frames
            .iter()
            .map(|(name, kind)| StackFrame {
                name: self.intern(name),
                kind: *kind,
            })
            .collect();
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let i = self.slot(frames, labels);
        self.stacks[i].wait_ns += wait_ns;
    }

    fn slot(&mut self, frames: Vec<StackFrame>, labels: Vec<(String, String)>) -> usize {
        let key = (frames, labels);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.stacks.len();
        self.stacks.push(Stack {
            frames: key.0.clone(),
            samples: 0,
            cpu_ns: 0,
            wait_ns: 0,
            labels: key.1.clone(),
        });
        self.index.insert(key, i);
        i
    }

    pub fn cpu_ns(&self) -> u64 {
        self.stacks.iter().map(|s| s.cpu_ns).sum()
    }

    pub fn wait_ns(&self) -> u64 {
        self.stacks.iter().map(|s| s.wait_ns).sum()
    }

    /// Stacks with on-CPU samples, most samples first (ties by frames).
    pub fn by_samples(&self) -> Vec<&Stack> {
        let mut stacks: Vec<&Stack> = self.stacks.iter().filter(|s| s.samples > 0).collect();
        stacks.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.frames.cmp(&b.frames)));
        stacks
    }

    /// The on-CPU samples as folded stacks, as flamegraph.pl and speedscope read them:
    /// `frame;frame;frame count`, root first, one line per distinct stack, kernel frames
    /// suffixed `_[k]` (stackcollapse-perf's convention). Semicolons in names become `:`.
    pub fn write_folded(&self, out: &mut impl Write) -> io::Result<()> {
        for stack in self.by_samples() {
            let mut line = String::new();
            for (i, frame) in stack.frames.iter().enumerate() {
                if i > 0 {
                    line.push(';');
                }
                line.push_str(&frame.name.replace(';', ":"));
                if frame.kind == FrameKind::Kernel {
                    line.push_str("_[k]");
                }
            }
            writeln!(out, "{line} {}", stack.samples)?;
        }
        Ok(())
    }
}
