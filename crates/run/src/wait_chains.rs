//! The subject's time off a CPU as a stack profile, for the off-CPU flame graph and the
//! exports: each stack is one wait chain, root first.
//!
//! 1. whose time it is: a phase's timed samples, the recorded command's tasks, the calls
//!    timed on several threads, released vCPU threads (the verdict's subjects);
//! 2. what it waited in: asleep in F, waiting for lock L, runnable, waiting for other
//!    CPUs, asleep holding a contended lock, or what the trace does not say;
//! 3. who ended the wait or held the CPU ("woken by kworker/0:1", "vcpu3 held the CPU");
//! 4. what that task did meanwhile, hop by hop ("running", "itself woken by X", "ran
//!    irqfd_shutdown"), as offwaketime stacks a waker's frames on the sleeper's.
//!
//! It is built from the findings the analyses already made (the breakdown of the timed
//! samples and the subject passes), so a run.json from before it existed draws it too. A
//! wait's time that no waker accounts for stays at the wait's own frame. Weights are time:
//! a stack's `samples` are microseconds ([`MICROSECOND`] as `period_ns`, `hz` 0), which
//! keeps the flame graph's integer arithmetic and says what a unit is.

use crate::findings::{
    Component, ComponentKind, CpuHolder, SleepWaker, StackProfile, SubjectPart, SubjectTime,
    TraceSection, Waker, TIMED_SAMPLE,
};

/// The unit of a wait-chain profile's `samples`, as its `period_ns`.
pub const MICROSECOND: u64 = 1_000;

/// One wait chain and the time spent on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitChain {
    /// Root first: whose time, the wait, then who ended it and what they did.
    pub frames: Vec<String>,
    pub ns: u64,
    /// The wait's kind, and the lock waited for (or held asleep), where there is one.
    pub kind: ComponentKind,
    pub lock: String,
}

/// The wait chains of everything the trace explains, most time first, or `None` where
/// nothing was off a CPU.
pub fn profile(trace: &TraceSection) -> Option<StackProfile> {
    to_profile(chains(trace))
}

/// The wait chains themselves, most time first (ties by frames).
pub fn chains(trace: &TraceSection) -> Vec<WaitChain> {
    let mut chains = Chains::default();
    // The timed samples of each phase, as the verdict reads them. A phase without timed
    // windows is a thread that only waited for the threads doing the timed calls (irqfd's
    // holders), whose time is `timed_calls`'.
    for phase in &trace.breakdown {
        for op in phase
            .operations
            .iter()
            .filter(|op| op.syscall == TIMED_SAMPLE)
        {
            for component in &op.components {
                chains.component(&phase.label, component);
            }
        }
    }
    let subjects = [
        (&trace.subject, "the recorded tasks"),
        (&trace.timed_calls, "calls timed on several threads"),
        (
            &trace.vcpu_resume,
            "released vCPU threads until back in the guest",
        ),
    ];
    for (subject, whose) in subjects {
        if let Some(subject) = subject {
            chains.subject(whose, subject);
        }
    }
    let mut out: Vec<WaitChain> = chains
        .stacks
        .into_iter()
        .map(|((frames, kind, lock), ns)| WaitChain {
            frames,
            ns,
            kind,
            lock,
        })
        .collect();
    out.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.frames.cmp(&b.frames)));
    out
}

/// The frame that says what a wait was, or `None` for time on a CPU.
fn wait_frame(kind: ComponentKind, detail: &str, lock: &str) -> Option<String> {
    Some(match kind {
        ComponentKind::OnCpu => return None,
        ComponentKind::Runnable => "runnable, waiting for a CPU".to_string(),
        ComponentKind::Lock => format!("waiting for {detail}"),
        ComponentKind::Asleep => format!("asleep in {detail}"),
        ComponentKind::CrossCpu => format!("waiting for other CPUs to run {detail}"),
        ComponentKind::HoldingAsleep if lock.is_empty() => {
            format!("asleep in {detail}, holding a contended lock")
        }
        ComponentKind::HoldingAsleep => format!("asleep in {detail}, holding {lock}"),
        ComponentKind::Other => format!("not known: {detail}"),
    })
}

fn woken_by(comm: &str, pid: i32) -> String {
    match pid {
        0 => "woken by an interrupt or a timer (no task)".to_string(),
        pid if pid > 0 => format!("woken by {comm}/{pid}"),
        _ => format!("woken by {comm}"),
    }
}

fn held_by(holder: &CpuHolder) -> String {
    match holder.pid {
        0 => "the CPU idle, waking up to run it".to_string(),
        -1 => "a CPU no switch was seen on".to_string(),
        pid if pid > 0 => format!("{}/{pid} held the CPU", holder.comm),
        _ => format!("{} held the CPU", holder.comm),
    }
}

/// A waker's "running, itself woken by X, itself asleep in F" as one frame per hop.
fn hops(doing: &str) -> impl Iterator<Item = String> + '_ {
    doing
        .split(", itself ")
        .enumerate()
        .filter(|(_, hop)| !hop.is_empty())
        .map(|(i, hop)| match i {
            0 => hop.to_string(),
            _ => format!("itself {hop}"),
        })
}

/// Chains by their frames, kind and lock, summed; `at` is the wait being said.
struct Chains {
    stacks: std::collections::HashMap<(Vec<String>, ComponentKind, String), u64>,
    at: (ComponentKind, String),
}

impl Default for Chains {
    fn default() -> Chains {
        Chains {
            stacks: Default::default(),
            at: (ComponentKind::Other, String::new()),
        }
    }
}

impl Chains {
    fn add(&mut self, frames: &[String], ns: u64) {
        if ns == 0 || frames.is_empty() {
            return;
        }
        let key = (frames.to_vec(), self.at.0, self.at.1.clone());
        *self.stacks.entry(key).or_default() += ns;
    }

    /// One component of a phase's timed samples: the wait, then who ended it.
    fn component(&mut self, whose: &str, component: &Component) {
        let Some(wait) = wait_frame(component.kind, &component.detail, "") else {
            return;
        };
        self.at = (
            component.kind,
            lock_of(component.kind, &component.detail, ""),
        );
        let base = [whose.to_string(), wait];
        let mut said = 0u64;
        match component.kind {
            ComponentKind::Runnable => {
                for holder in &component.cpu_holders {
                    let ns = holder.ns.min(component.total_ns - said);
                    self.add(&[base[0].clone(), base[1].clone(), held_by(holder)], ns);
                    said += ns;
                }
            }
            ComponentKind::Asleep | ComponentKind::HoldingAsleep => {
                for waker in &component.wakers {
                    let ns = waker.slept_ns.min(component.total_ns - said);
                    self.add(&Self::waker_chain(&base, waker), ns);
                    said += ns;
                }
            }
            _ => {}
        }
        self.add(&base, component.total_ns - said);
    }

    fn waker_chain(base: &[String; 2], waker: &Waker) -> Vec<String> {
        let mut frames = base.to_vec();
        frames.push(woken_by(&waker.comm, waker.pid));
        frames.extend(hops(&waker.doing));
        frames
    }

    /// A subject's parts: the wait, who ended it, and what the waker did meanwhile.
    fn subject(&mut self, whose: &str, subject: &SubjectTime) {
        for part in &subject.parts {
            self.part(whose, part);
        }
    }

    fn part(&mut self, whose: &str, part: &SubjectPart) {
        let Some(wait) = wait_frame(part.kind, &part.detail, &part.lock) else {
            return;
        };
        self.at = (part.kind, lock_of(part.kind, &part.detail, &part.lock));
        let base = vec![whose.to_string(), wait];
        let mut said = 0u64;
        for holder in &part.cpu_holders {
            let ns = holder.ns.min(part.total_ns - said);
            let mut frames = base.clone();
            frames.push(held_by(holder));
            self.add(&frames, ns);
            said += ns;
        }
        for waker in &part.woken_by {
            said += self.sleep_waker(&base, waker, part.total_ns - said);
        }
        self.add(&base, part.total_ns - said);
    }

    /// A subject sleep's waker, with what it ran or did meanwhile as the next frames;
    /// returns the time said (at most `left`).
    fn sleep_waker(&mut self, base: &[String], waker: &SleepWaker, left: u64) -> u64 {
        let ns = waker.ns.min(left);
        let mut frames = base.to_vec();
        frames.push(woken_by(&waker.comm, waker.pid));
        let mut said = 0u64;
        for work in &waker.ran {
            let part = work.ns.min(ns - said);
            let mut chain = frames.clone();
            chain.push(match work.workqueue.as_str() {
                "" => format!("ran {}", work.function),
                queue => format!("ran {} ({queue})", work.function),
            });
            self.add(&chain, part);
            said += part;
        }
        for meanwhile in &waker.meanwhile {
            let part = meanwhile.ns.min(ns - said);
            let mut chain = frames.clone();
            chain.push(format!("itself {}", {
                wait_frame(meanwhile.kind, &meanwhile.detail, "")
                    .unwrap_or_else(|| "running".to_string())
            }));
            if !meanwhile.waits_for.is_empty() {
                chain.push(format!("for {}", meanwhile.waits_for));
            }
            self.add(&chain, part);
            said += part;
        }
        self.add(&frames, ns - said);
        ns
    }
}

/// The lock of a wait: the one waited for, or the one held asleep.
fn lock_of(kind: ComponentKind, detail: &str, lock: &str) -> String {
    match kind {
        ComponentKind::Lock => detail.to_string(),
        ComponentKind::HoldingAsleep => lock.to_string(),
        _ => String::new(),
    }
}

/// Chains as a stack profile in microseconds (see the module's documentation).
fn to_profile(chains: Vec<WaitChain>) -> Option<StackProfile> {
    let mut names: Vec<String> = Vec::new();
    let mut ids: std::collections::HashMap<String, u32> = Default::default();
    let mut by_frames: std::collections::HashMap<Vec<u32>, u64> = Default::default();
    for chain in chains {
        let frames: Vec<u32> = chain
            .frames
            .into_iter()
            .map(|f| {
                *ids.entry(f.clone()).or_insert_with(|| {
                    names.push(f);
                    names.len() as u32 - 1
                })
            })
            .collect();
        *by_frames.entry(frames).or_default() += chain.ns;
    }
    let mut stacks: Vec<crate::findings::ProfileStack> = by_frames
        .into_iter()
        .map(|(frames, ns)| (frames, ns.div_ceil(MICROSECOND)))
        .filter(|(_, us)| *us > 0)
        .map(|(frames, us)| crate::findings::ProfileStack {
            // The first frame (whose time) is drawn as a task, the rest as the kernel's.
            kernel_from: 1,
            user_from: 1,
            frames,
            samples: us,
        })
        .collect();
    if stacks.is_empty() {
        return None;
    }
    stacks.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.frames.cmp(&b.frames)));
    Some(StackProfile {
        scope: "time off a CPU of what the trace explains, by wait chain (microseconds)"
            .to_string(),
        hz: 0,
        period_ns: MICROSECOND,
        samples: stacks.iter().map(|s| s.samples).sum(),
        lost: 0,
        names,
        stacks,
        omitted_samples: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{OperationBreakdown, PhaseBreakdown, WorkRan};

    fn component(kind: ComponentKind, detail: &str, total_ns: u64) -> Component {
        Component {
            kind,
            detail: detail.into(),
            total_ns,
            operations: 1,
            cpu_holders: Vec::new(),
            what_if: None,
            wakers: Vec::new(),
            waits_for: String::new(),
        }
    }

    fn chains_of(profile: &StackProfile) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = profile
            .stacks
            .iter()
            .map(|s| {
                let frames: Vec<&str> = s
                    .frames
                    .iter()
                    .map(|&f| profile.names[f as usize].as_str())
                    .collect();
                (frames.join(";"), s.samples)
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_sleep_is_its_wakers_chains_and_runnable_time_its_cpu_holders() {
        let mut asleep = component(ComponentKind::Asleep, "flush_workqueue", 10_000);
        asleep.wakers = vec![Waker {
            comm: "kworker/0:1".into(),
            pid: 7,
            doing: "running, itself woken by irqfd1/9".into(),
            wakeups: 3,
            slept_ns: 8_000,
            tasks: 0,
        }];
        let mut runnable = component(ComponentKind::Runnable, "", 5_000);
        runnable.cpu_holders = vec![CpuHolder {
            comm: "vcpu0".into(),
            pid: 11,
            ns: 4_000,
            subject: true,
        }];
        let trace = TraceSection {
            breakdown: vec![PhaseBreakdown {
                label: "irqfd total=10".into(),
                pid: 1,
                comm: "vmscale".into(),
                duration_ns: 0,
                operations: vec![OperationBreakdown {
                    operation: "sample".into(),
                    syscall: TIMED_SAMPLE,
                    count: 1,
                    latency: None,
                    total_ns: 20_000,
                    components: vec![component(ComponentKind::OnCpu, "", 5_000), asleep, runnable],
                    wakers: Vec::new(),
                    what_if_together: Vec::new(),
                }],
            }],
            ..TraceSection::default()
        };
        let profile = profile(&trace).unwrap();
        assert_eq!(profile.period_ns, MICROSECOND);
        assert_eq!(
            chains_of(&profile),
            [
                ("irqfd total=10;asleep in flush_workqueue".to_string(), 2),
                (
                    "irqfd total=10;asleep in flush_workqueue;woken by kworker/0:1/7;running;itself woken by irqfd1/9"
                        .to_string(),
                    8
                ),
                ("irqfd total=10;runnable, waiting for a CPU".to_string(), 1),
                (
                    "irqfd total=10;runnable, waiting for a CPU;vcpu0/11 held the CPU".to_string(),
                    4
                ),
            ]
        );
        // On-CPU time is not off a CPU; everything else is said once.
        assert_eq!(profile.samples, 15);
    }

    #[test]
    fn a_subject_sleep_goes_on_to_the_work_its_waker_ran() {
        let part = SubjectPart {
            in_syscalls: Vec::new(),
            kind: ComponentKind::Asleep,
            detail: "__flush_workqueue".into(),
            lock: String::new(),
            total_ns: 100_000,
            tasks: Vec::new(),
            processes: Vec::new(),
            cpu_holders: Vec::new(),
            waits_for: String::new(),
            woken_by: vec![SleepWaker {
                comm: "3 kvm-irqfd-cleanup workers (kworker/0:1, ...)".into(),
                pid: -2,
                tasks: 3,
                ns: 90_000,
                ran: vec![WorkRan {
                    function: "irqfd_shutdown".into(),
                    workqueue: "kvm-irqfd-cleanup".into(),
                    ns: 70_000,
                    queued_by_others_ns: 0,
                    queued_by_others: Vec::new(),
                }],
                meanwhile: Vec::new(),
            }],
            what_if: None,
        };
        let trace = TraceSection {
            subject: Some(SubjectTime {
                parts: vec![part],
                ..SubjectTime::default()
            }),
            ..TraceSection::default()
        };
        let chains = chains_of(&profile(&trace).unwrap());
        assert_eq!(
            chains,
            [
                ("the recorded tasks;asleep in __flush_workqueue".to_string(), 10),
                (
                    "the recorded tasks;asleep in __flush_workqueue;woken by 3 kvm-irqfd-cleanup workers (kworker/0:1, ...)"
                        .to_string(),
                    20
                ),
                (
                    "the recorded tasks;asleep in __flush_workqueue;woken by 3 kvm-irqfd-cleanup workers (kworker/0:1, ...);ran irqfd_shutdown (kvm-irqfd-cleanup)"
                        .to_string(),
                    70
                ),
            ]
        );
    }

    #[test]
    fn nothing_off_a_cpu_is_no_profile() {
        assert!(profile(&TraceSection::default()).is_none());
    }
}
