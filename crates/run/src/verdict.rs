//! The verdict: what stops the run from scaling, as a ranked list of findings, each a cause
//! with its share of the explained time and the evidence behind it. It comes first in every
//! output; everything else in a report is its evidence.

use serde::{Deserialize, Serialize};

/// What the explained time was spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// Waiting for a sleeping lock (mutex, rwsem, ...).
    LockWait,
    /// Spinning on a lock (spinlock, rwlock).
    LockSpin,
    /// Waiting for a sleeping lock whose holder went to sleep while holding it. Run files of
    /// earlier versions carry it; a lock held across sleeps is now a [`Cause::LockWait`]
    /// whose holder says what the holders slept in, so that one lock gives one cause
    /// whichever side of a threshold its holders' sleeps fall on from run to run.
    HeldAcrossSleep,
    /// Waiting for other CPUs to run a function it asked them to (IPIs, TLB shootdowns).
    Ipi,
    /// Runnable but not on a CPU (preempted, overcommit, or woken and not yet run).
    CpuStarvation,
    /// Asleep without a lock (in the named function, when the trace has its stack).
    Sleep,
    /// On a CPU, doing its own work.
    OnCpu,
    /// A VMM the run drove spent it in a KVM ioctl (a memslot update, a dirty-log pass).
    VmmIoctl,
    /// Nothing to blame, or nothing the trace can tell.
    None,
}

impl Cause {
    pub fn label(self) -> &'static str {
        match self {
            Cause::LockWait => "lock-wait",
            Cause::LockSpin => "lock-spin",
            Cause::HeldAcrossSleep => "held-across-sleep",
            Cause::Ipi => "ipi",
            Cause::CpuStarvation => "cpu-starvation",
            Cause::Sleep => "sleep",
            Cause::OnCpu => "on-cpu",
            Cause::VmmIoctl => "vmm-ioctl",
            Cause::None => "none",
        }
    }
}

/// One finding of the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// One sentence, as a kernel engineer would write it in a bug report.
    pub summary: String,
    pub cause: Cause,
    /// The lock, for lock causes.
    pub lock: Option<String>,
    /// Who held the lock and what it did meanwhile, where the trace shows it.
    pub holder: Option<String>,
    /// Share of the explained time (see `evidence` for what was explained), 0 to 1.
    pub share: f64,
    /// Counts, samples, holders, stacks: what the finding rests on.
    pub evidence: Vec<String>,
    /// What makes up the finding's own time, largest first: code paths for on-CPU time,
    /// the wait chain for a sleep, the tasks that held the CPUs for runnable time, the
    /// holders and what they did for a lock wait. Shares are of the finding's time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub explained_by: Vec<ExplainedBy>,
    /// The timed operation's latency predicted without this cause, or with half of it,
    /// from each sample's own share of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<FindingWhatIf>,
    /// With the largest cause of the same strategy (the first of its findings): the latency
    /// predicted with both removed together (one sample's time in both is removed once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if_together: Option<FindingWhatIf>,
}

/// A finding's what-if: where it was predicted and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingWhatIf {
    /// The change, in words: "without waits on kvm->irqfds.lock".
    pub change: String,
    /// The measured phase it was predicted for ("memslot vcpus=8 strategy=direct").
    pub phase: String,
    #[serde(flatten)]
    pub prediction: crate::findings::WhatIf,
    /// The cause is the operation's own work on a CPU: it can be made faster, not removed
    /// (without it there is no operation), so only the prediction with half of it is a
    /// claim; `removed_*` stay as the arithmetic bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub only_halved: bool,
}

/// One part of a finding's time and what it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainedBy {
    pub what: String,
    /// Of the finding's own time, 0 to 1.
    pub share: f64,
}
