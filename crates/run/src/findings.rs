//! What the analyses found in a run's kernel trace, as stored in run.json.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vmscale_stats::Summary;

/// Whether the trace could show lock contention: lock:contention_begin was recorded (a
/// recording that enabled it and saw none had none), its format is there to decode it,
/// or events of it were seen. Otherwise an empty contention list means "unknown".
pub fn contention_observable(trace: &TraceSection) -> bool {
    let enabled = trace
        .events
        .iter()
        .any(|e| e == "lock" || e == "lock:contention_begin" || e == "lock:*");
    let seen = trace.events_seen.contains_key("lock:contention_begin");
    seen || (enabled && !trace.lock_format_missing)
}

/// Whether the trace could show cross-CPU calls, and a task waiting for other CPUs to run
/// a function it asked them to (csd_queue_cpu until the targets' csd_function_exit): the
/// csd events were recorded or seen.
pub fn cross_cpu_observable(trace: &TraceSection) -> bool {
    let events = ["csd:csd_queue_cpu", "csd:csd_function_entry"];
    trace
        .events
        .iter()
        .any(|e| e == "csd" || e == "csd:*" || events.contains(&e.as_str()))
        || events.iter().any(|e| trace.events_seen.contains_key(*e))
}

/// Whether the trace could show who sent IPIs: ipi_send_cpu/cpumask or ipi_raise was
/// recorded or seen. Otherwise a count of 0 sent means "unknown".
pub fn ipi_senders_observable(trace: &TraceSection) -> bool {
    let events = ["ipi:ipi_send_cpu", "ipi:ipi_send_cpumask", "ipi:ipi_raise"];
    trace
        .events
        .iter()
        .any(|e| e == "ipi" || e == "ipi:*" || events.contains(&e.as_str()))
        || events.iter().any(|e| trace.events_seen.contains_key(*e))
}

/// The trace part of a run: how it was recorded and what the analyses found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TraceSection {
    /// Directory of the raw trace, relative to the run directory.
    pub dir: String,
    pub events: Vec<String>,
    pub stacks: bool,
    pub buffer_kib: u64,
    /// Threads of other vmscale runs that shared the host: their lock waits, stacks, IPIs
    /// and system calls are in the raw trace but left out of every analysis.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_tids: Vec<u32>,
    /// Events the kernel could not store, per CPU (see the run's warnings).
    pub lost_per_cpu: BTreeMap<String, u64>,
    /// Events decoded from the raw trace.
    pub decoded_events: u64,
    /// How many events of each type (`system:name`) the trace holds: what it can show,
    /// as opposed to the formats it carries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub events_seen: BTreeMap<String, u64>,
    /// From the first decoded event to the last (tracing may have been off in between).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub span_ns: u64,
    /// The trace has no format for lock:contention_begin (a damaged or partial trace
    /// directory), so lock contention is unknown rather than absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lock_format_missing: bool,
    /// Time between a contention_begin and the kernel stack recorded for it: what recording
    /// a stack adds to every contended wait it is attached to.
    pub stack_cost: Option<Summary>,
    pub contention: Vec<LockContention>,
    /// IPIs per measured phase.
    #[serde(default)]
    pub ipis: Vec<IpiPhase>,
    /// Who held each contended sleeping lock while others waited, and what the holder was
    /// doing meanwhile; worst (largest total wait) first.
    #[serde(default)]
    pub holders: Vec<LockHolders>,
    /// The measuring thread's system calls in each measured phase, each split into where
    /// its time went; in phase order.
    #[serde(default)]
    pub breakdown: Vec<PhaseBreakdown>,
    /// Contended spinning locks (spinlocks, rwlocks) by wait mode, worst first.
    #[serde(default)]
    pub spinlocks: Vec<SpinLockWaits>,
    /// A short window of the trace around its worst lock wait, as lanes per CPU and per
    /// task, for the HTML report's timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<TimelineExcerpt>,
    /// The command a recording ran (`record -- CMD`), as the kernel accounted it: what the
    /// trace is read for. Recorded with the run; never replaced by an analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandUsage>,
    /// A system-wide recording (`record --duration` of no command or process): every task
    /// is what the trace is read for. Recorded with the run, like `command`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every_task: bool,
    /// Where the command's tasks spent their time, from the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<SubjectTime>,
    /// Where released vCPU threads spent the time from a pause's release until they
    /// entered KVM_RUN again (the scenario's [`crate::schema::Series::task_windows`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_resume: Option<SubjectTime>,
    /// Where the samples timed on several threads spent their time (the scenario's
    /// [`crate::schema::Series::timed_calls`]): each call, on its thread, from its start to
    /// its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_calls: Option<SubjectTime>,
    /// The subject's on-CPU samples by code path (the same subject and windows as the
    /// breakdown, the timed calls or the recorded command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_cpu_paths: Option<OnCpuPaths>,
    /// What the VMM did in the kernel during each series' samples, for series a VMM
    /// carried out (the QEMU scenarios); in point and series order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vmm: Vec<VmmSamples>,
    /// The on-CPU samples (perf_event_open, trace/samples) by stack, for the flame graph;
    /// absent where the run was not sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_cpu: Option<StackProfile>,
    /// The same for the samples taken during the smallest and the largest swept value's
    /// measured samples (in that order), for the differential flame graph.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_cpu_by_n: Vec<PointProfile>,
    /// Recorded in aggregate mode (BPF maps in the kernel instead of a streamed trace):
    /// what its bounded maps could not count, and how full they got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<AggregateFacts>,
}

/// How an aggregated recording went ([`TraceSection::aggregate`]). Its findings are the
/// tracefs path's, made from per-lock, per-stack and per-task sums kept in the kernel:
/// wait percentiles come from log2 histograms (within a factor of two), waits still open
/// at the end are not counted, a holder's activity is read from its last few state
/// changes, and waiters' time behind a hold is split in proportion to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateFacts {
    /// Events not counted, by reason (a full map, a stack that could not be taken, an
    /// event inside the programs themselves, a wait whose end never came, ...).
    pub drops: BTreeMap<String, u64>,
    /// All of them, plus the programs' runs the kernel skipped (recursion misses).
    pub dropped: u64,
    /// The events the programs saw, by tracepoint.
    pub seen: BTreeMap<String, u64>,
    /// Kernel memory the maps may take at most: fixed when they are created, whatever
    /// the recording's length.
    pub map_bytes: u64,
    /// Per map: entries at the end, and its capacity.
    pub map_fill: BTreeMap<String, (u64, u64)>,
    /// Kernel stacks taken, and their mean cost (what each adds to the wait or sleep it
    /// is taken for).
    pub stacks_taken: u64,
    pub stack_mean_ns: f64,
    /// Past the stack budget (a few thousand a second per CPU): waits that reused the
    /// stack their task last took on the same lock, and sleeps that reused their task's
    /// last sleep stack (their site may be another of the task's sites).
    #[serde(default)]
    pub stacks_reused: u64,
    #[serde(default)]
    pub sleep_stacks_reused: u64,
}

/// On-CPU samples aggregated by stack. Each stack is root first: the process's name and
/// the thread's (where it differs), its user frames from the outermost caller to the
/// leaf, then its kernel frames likewise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StackProfile {
    /// Which samples these are ("every task's samples while tracing was on", ...).
    pub scope: String,
    pub hz: u32,
    /// CPU time each sample stands for.
    pub period_ns: u64,
    /// Samples in the profile, `omitted_samples` included.
    pub samples: u64,
    /// Sample records the kernel could not store (a full buffer): not in `samples`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost: u64,
    /// Frame names, referred to by index from `stacks`.
    pub names: Vec<String>,
    /// Most samples first.
    pub stacks: Vec<ProfileStack>,
    /// Samples of the least frequent stacks, left out to keep run.json small: they are
    /// counted under their root frame alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_samples: u64,
}

/// One distinct stack of a [`StackProfile`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileStack {
    /// Indexes into the profile's names, root first.
    pub frames: Vec<u32>,
    /// Where the kernel frames start in `frames` (its length when there are none).
    pub kernel_from: u32,
    /// Where the user frames start (after the process and thread names).
    #[serde(default)]
    pub user_from: u32,
    pub samples: u64,
}

/// The samples of one swept value's measured samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PointProfile {
    pub n: u64,
    /// Time the point's samples spanned, from the first one's start to the last one's end.
    pub span_ns: u64,
    pub profile: StackProfile,
}

/// One series' samples seen from the VMM process that carried them out: the ioctls its
/// threads made and how long its vCPU threads were kept out of the guest.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VmmSamples {
    /// The point's swept value and the series.
    pub n: u64,
    pub series: String,
    /// Timed samples the figures below are per.
    pub samples: u64,
    /// ioctls entered during a sample by any of the VMM's threads, most total time first
    /// (KVM_RUN apart: its time is guest time, counted in `vcpus`).
    pub ioctls: Vec<VmmIoctl>,
    /// The VMM's vCPU threads during the samples.
    pub vcpus: VcpuHold,
    /// The other system calls of the VMM's main thread (the one that runs QMP commands)
    /// entered during the samples, most time first; `cmd` is the system call number and
    /// times are cut at the sample's end, so they are each call's share of the sample.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub main_thread: Vec<VmmIoctl>,
}

/// One ioctl command during a series' samples.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VmmIoctl {
    /// "KVM_SET_USER_MEMORY_REGION", or "ioctl 0x..." for a command without a name here.
    pub name: String,
    pub cmd: u64,
    pub calls: u64,
    /// Latency of one call, sys_enter to sys_exit.
    pub latency: Option<Summary>,
    pub total_ns: u64,
}

/// How long a VMM's vCPU threads were held out of the guest during the samples.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VcpuHold {
    /// Threads named as vCPUs (`CPU n/KVM`) or seen in KVM_RUN.
    pub threads: u32,
    /// KVM_RUN returns to user space during the samples (exits QEMU handles itself).
    pub exits: u64,
    /// Per sample, the most any one vCPU thread spent outside KVM_RUN within it.
    pub worst_out_per_sample: Option<Summary>,
    /// Outside KVM_RUN, summed over vCPU threads and samples.
    pub out_ns: u64,
    /// Waiting for a kernel lock, summed over vCPU threads and samples.
    pub lock_wait_ns: u64,
    /// Runnable but not on a CPU, summed over vCPU threads and samples.
    pub runnable_ns: u64,
}

/// The traced command's process and the CPU time the kernel charged it: with every
/// descendant it waited for (wait4's rusage) for a command vmscale ran, or its threads'
/// over the recording (/proc) for a process it attached to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandUsage {
    pub pid: u32,
    /// Threads it already had when recording began (`record --pid`): subjects from their
    /// first traced event, like the tasks it creates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<u32>,
    /// CPU time in user space.
    pub user_ns: u64,
    /// CPU time in the kernel on the command's behalf (system calls, page faults).
    pub system_ns: u64,
}

/// The time of a set of tasks (a recorded command and every task it created), split by
/// what each was doing, summed over the tasks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SubjectTime {
    /// Tasks seen, from the command's first to its last.
    pub tasks: u32,
    /// Threads the process already had (`record --pid`) that left no event in the trace:
    /// asleep or on a CPU throughout, the trace cannot say which, so not counted.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unseen: u32,
    /// Thread time explained: every task from its first traced event to its exit or the
    /// end of the trace, less `joined_ns`.
    pub total_ns: u64,
    /// Time asleep until another of the tasks exited (a join, a wait for a child): the
    /// command waiting for its own work, not a cost. Left out of `total_ns`.
    pub joined_ns: u64,
    /// Who waited for the others that way, longest first.
    #[serde(default)]
    pub joined: Vec<TaskTime>,
    /// Largest first.
    pub parts: Vec<SubjectPart>,
    /// The subject is every task the trace shows (`record --duration`), not one command.
    /// Its time asleep without a contended lock is idle time as far as the trace can tell
    /// (waiting for work or for an event): left out of `total_ns`, counted here, and its
    /// parts stay in `parts` for the details.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every_task: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub asleep_left_out_ns: u64,
    /// Samples carried out by several threads (teardown's holders): time their threads spent
    /// asleep from before a sample began until woken in it, left out of `total_ns` (threads
    /// with nothing to do until their turn).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub asleep_from_before_ns: u64,
    /// Time of subject tasks between their last traced event and their next, around a
    /// context switch the trace misses (the `Other` part that says so): left out of
    /// `total_ns`, since nothing says what the task did then.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unseen_left_out_ns: u64,
}

/// One cause of the subject's time and the tasks that spent most of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubjectPart {
    pub kind: ComponentKind,
    /// Lock name, sleep function, cross-CPU function; empty for on-CPU and runnable.
    pub detail: String,
    /// For [`ComponentKind::HoldingAsleep`]: the contended lock held during the sleep.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lock: String,
    pub total_ns: u64,
    /// The tasks with most of it, most first.
    pub tasks: Vec<TaskTime>,
    /// The same time by process (thread group; `pid` is its id, `comm` its main thread's
    /// name), most first, where the trace says which process each task belongs to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<TaskTime>,
    /// Runnable time only: who ran on the CPU each task was queued on meanwhile, most
    /// first (pid 0: the CPU was idle, waking up to run it; -1: no switch on that CPU seen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_holders: Vec<CpuHolder>,
    /// Sleeps only: what the sleep waited for, where its stack says ("a timer", "an RCU
    /// grace period", "a workqueue's workers to finish queued work", ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waits_for: String,
    /// Sleeps only: who ended them, most sleep first, with what each waker ran meanwhile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub woken_by: Vec<SleepWaker>,
    /// Calls timed one per window: their latency without (or with half of) this part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// On-CPU time only: how much of it the tasks spent inside each system call the trace
    /// shows (from its raw_syscalls sys_enter to its sys_exit), most first. Empty when the
    /// trace holds no system call of these tasks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_syscalls: Vec<SyscallTime>,
}

/// On-CPU time inside one system call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyscallTime {
    /// Its name in the trace's numbering ("read"), or "syscall N".
    pub name: String,
    pub ns: u64,
    /// Calls that ended (sys_exit) in the trace.
    pub calls: u64,
}

/// A task that ended subject tasks' sleeps (pid 0: an interrupt or a timer, no task).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SleepWaker {
    /// The task's name, or for several wakers said as one ("3 kvm-irqfd-cleanup workers
    /// (kworker/0:1, ...)", "4 more tasks (...)") what they are.
    pub comm: String,
    /// -2 for several wakers said as one.
    pub pid: i32,
    /// How many tasks this entry stands for, where it is more than one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks: u64,
    /// The sleeps it ended, in all.
    pub ns: u64,
    /// Work items the waker (a kernel worker) ran during those sleeps, most time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ran: Vec<WorkRan>,
    /// What the waker, itself one of the subject's tasks, did during those sleeps, most
    /// time first: the next link of the wait chain (a reader woken by a writer that was
    /// itself asleep waiting for a timer, or runnable waiting for a CPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub meanwhile: Vec<WakerMeanwhile>,
}

/// Time a waker spent in one state while the sleeps it ended went on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WakerMeanwhile {
    /// Asleep, runnable, on a CPU, waiting for a lock or for cross-CPU calls.
    pub kind: ComponentKind,
    /// Where it slept ("do_nanosleep"), the lock it waited for, or the cross-CPU function.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// What a sleep waited for, when its frames say ("a timer").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waits_for: String,
    pub ns: u64,
}

/// Time a worker spent in one work function while a subject task slept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkRan {
    pub function: String,
    /// The workqueue it was queued on, where the trace saw it queued.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workqueue: String,
    pub ns: u64,
    /// Of `ns`, the time on items that tasks other than the sleeper queued: a flush waits
    /// for everything queued before it, its siblings' work too.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queued_by_others_ns: u64,
    /// Those tasks ("irqfd1/1234"), most first, at most three.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_by_others: Vec<String>,
}

/// A task that held a CPU while subject tasks waited for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CpuHolder {
    pub comm: String,
    pub pid: i32,
    pub ns: u64,
    /// One of the subject's own tasks (the command's threads, the run's vCPU threads).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub subject: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskTime {
    pub comm: String,
    pub pid: i32,
    pub ns: u64,
}

/// A window of the trace around one lock wait: who ran on each CPU, and what each task
/// involved did (ran, queued, slept, waited on or held which lock). Bounded: a few lanes,
/// a capped number of slices; `truncated` says when the cap cut something.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TimelineExcerpt {
    /// Trace clock (CLOCK_MONOTONIC ns) bounds of the window.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The wait the window is centred on, in words.
    pub focus: String,
    pub cpus: Vec<CpuLane>,
    pub tasks: Vec<TaskLane>,
    /// Names of the tasks in the CPU lanes.
    #[serde(default)]
    pub comms: BTreeMap<i32, String>,
    /// Slices or lanes were left out to keep the excerpt small.
    pub truncated: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CpuLane {
    pub cpu: u32,
    /// The task on the CPU; idle is left out.
    pub slices: Vec<RunSlice>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RunSlice {
    pub start_ns: u64,
    pub end_ns: u64,
    pub pid: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskLane {
    pub pid: i32,
    pub comm: String,
    /// Scheduler state over the window, back to back where known.
    pub states: Vec<StateSlice>,
    /// Lock waits and holds; they overlap the states (a holder may run or sleep).
    pub locks: Vec<LockSlice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    Running,
    Runnable,
    Asleep,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct StateSlice {
    pub start_ns: u64,
    pub end_ns: u64,
    pub state: TaskState,
    /// The CPU it ran on (running slices only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockRole {
    Wait,
    Hold,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockSlice {
    pub start_ns: u64,
    pub end_ns: u64,
    pub role: LockRole,
    pub lock: String,
    /// A hold's start is where it is known to have held the lock from, not necessarily
    /// where it took it.
    #[serde(default)]
    pub start_known: bool,
}

/// A kernel lock's type, from the flags its contention_begin gave. One type for every
/// reader: whether waiters spin decides what the trace can show of the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LockKind {
    #[serde(rename = "spinlock")]
    Spinlock,
    #[serde(rename = "rwlock")]
    Rwlock,
    #[serde(rename = "mutex")]
    Mutex,
    #[serde(rename = "rwsem")]
    Rwsem,
    #[serde(rename = "percpu-rwsem")]
    PercpuRwsem,
    #[serde(rename = "rt-mutex")]
    RtMutex,
    /// Flags that name no type this kernel's call sites pass.
    #[serde(rename = "lock", other)]
    Unknown,
}

impl LockKind {
    pub const ALL: [LockKind; 7] = [
        LockKind::Spinlock,
        LockKind::Rwlock,
        LockKind::Mutex,
        LockKind::Rwsem,
        LockKind::PercpuRwsem,
        LockKind::RtMutex,
        LockKind::Unknown,
    ];

    /// The kernel's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Spinlock => "spinlock",
            LockKind::Rwlock => "rwlock",
            LockKind::Mutex => "mutex",
            LockKind::Rwsem => "rwsem",
            LockKind::PercpuRwsem => "percpu-rwsem",
            LockKind::RtMutex => "rt-mutex",
            LockKind::Unknown => "lock",
        }
    }

    /// Waiters spin on a CPU and are never woken by the holder, so no wakeup names it.
    pub fn is_spinning(self) -> bool {
        matches!(self, LockKind::Spinlock | LockKind::Rwlock)
    }
}

impl From<&str> for LockKind {
    /// The kernel's word back to the type; any other word is [`LockKind::Unknown`].
    fn from(word: &str) -> LockKind {
        LockKind::ALL
            .into_iter()
            .find(|k| k.as_str() == word)
            .unwrap_or(LockKind::Unknown)
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One contended lock (one address), worst first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockContention {
    pub lock_addr: u64,
    /// A kallsyms data symbol, or type, mode and the distinctive frame that waits on it.
    pub name: String,
    pub kind: LockKind,
    /// Contended acquisitions per mode (read, write, or "" for exclusive locks).
    pub modes: BTreeMap<String, u64>,
    /// Completed waits (contention_begin .. contention_end of the same task).
    pub waits: Option<Summary>,
    pub total_wait_ns: u64,
    /// Waits still open when the trace ended (no contention_end): counted apart.
    pub open_waits: u64,
    pub waiters: Vec<Waiter>,
    pub stacks: Vec<WaitStack>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Waiter {
    pub comm: String,
    pub pid: i32,
    pub waits: u64,
    pub total_wait_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitStack {
    /// Symbolized frames, innermost first.
    pub frames: Vec<String>,
    pub waits: u64,
    pub total_wait_ns: u64,
}

/// IPIs and cross-CPU calls sent during one measured phase (between the scenario's
/// `vmscale: begin <label>` and `vmscale: end <label>` markers), or during the whole trace
/// of a recording or an import that has no phases ([`IpiPhase::WHOLE_TRACE`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IpiPhase {
    pub label: String,
    pub duration_ns: u64,
    /// IPIs sent, one per target CPU (a cpumask IPI to 3 CPUs counts 3).
    pub ipis: u64,
    /// The events `ipis` was counted from: `ipi_send` (ipi_send_cpu/cpumask, which name
    /// the call site and callback), `ipi_raise` (older and ARM kernels: only the reason),
    /// or empty when the trace has neither.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub counted_from: String,
    /// Cross-CPU function calls queued (csd_queue_cpu).
    pub csd_queued: u64,
    /// Target CPU (as a string, for JSON) -> IPIs.
    pub by_target: BTreeMap<String, u64>,
    /// Worst first.
    pub by_site: Vec<IpiSite>,
    /// Worst first.
    pub by_sender: Vec<IpiSender>,
    /// IPIs sent from inside each system call of the sender (raw_syscalls recorded for it).
    #[serde(default)]
    pub by_syscall: Vec<IpiSyscall>,
    /// What the IPIs cost their victims: cross-CPU functions run on the target CPUs
    /// (csd_function_entry .. exit), worst first.
    #[serde(default)]
    pub victim_work: Vec<IpiVictimWork>,
    /// IPI handlers run on the target CPUs, by the IPI's reason (ipi_entry .. ipi_exit, or
    /// x86's irq_vectors call_function*_entry .. _exit): what older kernels show of the
    /// victims' cost, worst first. `function` holds the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handlers: Vec<IpiVictimWork>,
}

impl IpiPhase {
    /// The label of the phase that stands for a whole trace without measured phases.
    pub const WHOLE_TRACE: &'static str = "whole trace";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpiSyscall {
    pub syscall: String,
    pub ipis: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpiVictimWork {
    /// The function the target CPU ran, symbolized.
    pub function: String,
    pub calls: u64,
    pub total_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpiSite {
    /// The kernel function that sent the IPI, symbolized.
    pub callsite: String,
    /// The function the target CPU was asked to run, symbolized ("" for a bare
    /// rescheduling IPI).
    pub callback: String,
    /// Counted from ipi_raise, which names neither: the IPI's reason (`Function call
    /// interrupts`), and `callsite` and `callback` are empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub ipis: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpiSender {
    pub pid: i32,
    pub comm: String,
    pub ipis: u64,
}

/// A contended sleeping lock (mutex, rwsem, ...) seen from its holders: whose hold each
/// waiter sat behind, and what that holder was doing during the wait.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockHolders {
    pub lock_addr: u64,
    /// The same name as in the contention table.
    pub name: String,
    pub kind: LockKind,
    /// Completed waits and their total.
    pub waits: u64,
    pub total_wait_ns: u64,
    /// Distinct tasks that waited (`waiters` keeps only the worst).
    pub waiter_count: u64,
    /// Worst first.
    pub waiters: Vec<Waiter>,
    /// Worst (most waiter time behind them) first.
    pub holders: Vec<Holder>,
    /// The lock's total wait split by what the holder was doing, largest first; sums to
    /// `total_wait_ns`.
    pub activity: Vec<ActivityShare>,
    /// Holds during which the holder slept voluntarily while waiters queued, worst first.
    pub held_across_sleep: Vec<HeldAcrossSleep>,
    /// The holds are the kernel's own acquire and release events (mmap_lock:*), not
    /// inferred from who woke the waiters.
    #[serde(default)]
    pub exact_holds: bool,
    /// The holders past `holders`, by name and what they were doing, most waiting first:
    /// every nanosecond of waiting keeps a holder's name, however many tasks held the lock.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_holders: Vec<HolderGroup>,
}

/// Holders of one name (a numbered name's kind: "vcpuN") that did one thing while waiters
/// waited behind them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HolderGroup {
    pub name: String,
    /// Distinct tasks.
    pub tasks: u64,
    pub activity: HolderActivity,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    pub wait_ns: u64,
}

/// One task that held the lock while others waited on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holder {
    pub comm: String,
    pub pid: i32,
    /// Holds that made someone wait (each ended by waking a waiter).
    pub holds: u64,
    /// Of those, holds taken for read: shared with any other readers, so this task was one
    /// of the holders, not necessarily the one that kept the waiters out.
    #[serde(default)]
    pub shared_holds: u64,
    /// Waiters' time spent behind this holder's holds.
    pub waited_behind_ns: u64,
    /// That time split by what this holder was doing, largest first.
    pub activity: Vec<ActivityShare>,
    /// Function-call IPIs it sent while holding the lock with waiters queued (ipi_send_cpu,
    /// ipi_send_cpumask with a callback: TLB shootdowns, cross-CPU calls), which its
    /// waiters waited for too. Reschedule IPIs are not counted.
    #[serde(default)]
    pub ipis_sent: u64,
}

/// What a holder was doing while a waiter waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HolderActivity {
    /// On a CPU.
    Running,
    /// Runnable but not on a CPU (preempted, or woken and not yet run).
    Runnable,
    /// Switched out in a sleeping state; `detail` is the kernel function it slept in.
    Asleep,
    /// Itself waiting on another lock; `detail` names that lock.
    NestedWait,
    /// Between holders: released, the woken waiter not yet running with the lock.
    Handoff,
    /// The trace does not say; `detail` is why.
    Unknown,
}

impl HolderActivity {
    pub fn label(self) -> &'static str {
        match self {
            HolderActivity::Running => "running",
            HolderActivity::Runnable => "runnable",
            HolderActivity::Asleep => "asleep",
            HolderActivity::NestedWait => "waiting on another lock",
            HolderActivity::Handoff => "handoff",
            HolderActivity::Unknown => "unknown",
        }
    }
}

/// Waiter time attributed to one holder activity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ActivityShare {
    pub activity: HolderActivity,
    /// Sleep function, nested lock's name, or why the activity is unknown ("" otherwise).
    pub detail: String,
    pub wait_ns: u64,
}

/// A lock held by a task that went to sleep (not preempted) while waiters queued behind it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeldAcrossSleep {
    pub holder_comm: String,
    pub holder_pid: i32,
    /// First kernel function of the holder's sleeping stack outside scheduler plumbing.
    pub function: String,
    /// The holder's stack when it went to sleep, symbolized, innermost first.
    pub stack: Vec<String>,
    /// Holds of this kind (same holder, same sleep function).
    pub holds: u64,
    /// Time the holder slept in `function` while holding the lock with waiters queued.
    pub slept_ns: u64,
    /// Hold time from acquisition (or, when it was not traced, from the first waiter's
    /// arrival) to the release that woke a waiter.
    pub held_ns: u64,
    /// True when some acquisition was not traced, so `held_ns` is a lower bound.
    pub held_at_least: bool,
    /// Distinct tasks that waited while the holder slept.
    pub waiters: u64,
    /// Waiters' time spent while the holder slept in `function`.
    pub waiter_wait_ns: u64,
}

/// One measured phase (between the `vmscale: begin/end <label>` markers) seen from the
/// thread that wrote the markers: its operations and where their time went.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PhaseBreakdown {
    pub label: String,
    /// The measuring thread.
    pub pid: i32,
    pub comm: String,
    pub duration_ns: u64,
    /// One entry per kind of operation (system call), most total time first.
    pub operations: Vec<OperationBreakdown>,
}

/// [`OperationBreakdown::syscall`] of a phase measured from marker to marker.
pub const WHOLE_PHASE: i64 = -1;
/// [`OperationBreakdown::syscall`] of one timed sample (a window the run reported).
pub const TIMED_SAMPLE: i64 = -2;

/// Every traced call of one system call in a phase, with its latency split by cause.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OperationBreakdown {
    /// "ioctl", "futex", ..., "syscall 123", or "phase" when the phase had no traced system
    /// calls and the whole phase is the operation.
    pub operation: String,
    /// The system call number, or [`WHOLE_PHASE`] or [`TIMED_SAMPLE`].
    pub syscall: i64,
    pub count: u64,
    /// Distribution of one operation's latency (sys_enter to sys_exit).
    pub latency: Option<Summary>,
    pub total_ns: u64,
    /// The total split by cause, largest first; sums to `total_ns`.
    pub components: Vec<Component>,
    /// Who woke the thread out of its sleeps during these operations, most first.
    pub wakers: Vec<Waker>,
    /// Timed samples only: the latency predicted with several of the largest components
    /// removed together (each pair of the three largest, and all three), sample by sample.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub what_if_together: Vec<WhatIfTogether>,
}

/// Components removed together from every timed sample, and the latency predicted then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIfTogether {
    /// (kind, detail) of each component removed, as in [`OperationBreakdown::components`].
    pub removed: Vec<(ComponentKind, String)>,
    #[serde(flatten)]
    pub prediction: WhatIf,
}

/// Where part of an operation's time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComponentKind {
    /// On a CPU, doing its own work.
    OnCpu,
    /// Waiting for a CPU: preempted, or woken and not yet running.
    Runnable,
    /// Between contention_begin and contention_end on a lock (`detail` names it).
    Lock,
    /// Switched out voluntarily; `detail` is the kernel function it slept in.
    Asleep,
    /// On a CPU, but waiting for other CPUs to run a function it asked them to (IPIs).
    CrossCpu,
    /// Switched out voluntarily while holding a lock that others waited for (the trace
    /// proves the hold): part of that lock's cost, not a sleep of its own. `detail` is the
    /// function it slept in; the lock is named beside it.
    HoldingAsleep,
    /// The trace does not say; `detail` is why.
    Other,
}

impl ComponentKind {
    pub fn label(self) -> &'static str {
        match self {
            ComponentKind::OnCpu => "on CPU",
            ComponentKind::Runnable => "runnable",
            ComponentKind::Lock => "waiting for",
            ComponentKind::Asleep => "asleep",
            ComponentKind::CrossCpu => "waiting for other CPUs",
            ComponentKind::HoldingAsleep => "asleep holding a contended lock",
            ComponentKind::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Component {
    pub kind: ComponentKind,
    /// Lock name, sleep function, cross-CPU function, or why the time is unknown.
    pub detail: String,
    pub total_ns: u64,
    /// Operations with some time in this component.
    pub operations: u64,
    /// Runnable time of timed samples: who ran on the CPU the thread was queued on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_holders: Vec<CpuHolder>,
    /// Timed samples: their latency as it would be with this component's time removed, or
    /// halved, sample by sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// A sleep's: who ended it and what they were doing, most sleep first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wakers: Vec<Waker>,
    /// A sleep's: what it waited for, where its stack says ("an RCU grace period"), as a
    /// subject's sleep parts say it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waits_for: String,
}

/// The subject's on-CPU samples by code path, kernel and user apart: what its on-CPU time
/// was spent in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OnCpuPaths {
    /// The subject's samples, and the CPU time each stands for.
    pub samples: u64,
    pub period_ns: u64,
    /// Samples in the kernel (with kernel frames), in user space only, and in a guest.
    pub kernel_samples: u64,
    pub user_samples: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub guest_samples: u64,
    /// Samples taken while their thread waited for a lock as the trace shows (spinning):
    /// that lock's wait, not in `samples` nor in any path.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_wait_samples: u64,
    /// Most samples first.
    pub kernel: Vec<CodePath>,
    pub user: Vec<CodePath>,
    /// Kernel samples by how the kernel was entered (the system call, a page fault, an
    /// interrupt), most first, each with its own top paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<EntryPaths>,
}

/// Kernel samples that entered the kernel one way, and where they were.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryPaths {
    pub entry: String,
    pub samples: u64,
    pub paths: Vec<CodePath>,
}

/// A code path and the samples that were in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodePath {
    pub path: String,
    pub samples: u64,
}

/// A predicted distribution of one operation's latency without (or with half of) one
/// cause, from each sample's own share of it: the sample's latency less that share.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// Samples the prediction rests on.
    pub samples: u64,
    /// The measured latency.
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// With the component's time removed from every sample.
    pub removed_p50_ns: u64,
    pub removed_p99_ns: u64,
    /// With half of it removed.
    pub halved_p50_ns: u64,
    pub halved_p99_ns: u64,
}

/// A task that woke the measuring thread during an operation, and what it was doing then.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Waker {
    pub comm: String,
    pub pid: i32,
    /// "running cross-CPU call F", "had just acquired L", "woken by X/pid", "an interrupt".
    pub doing: String,
    pub wakeups: u64,
    /// The measuring thread's sleeps these wakeups ended.
    pub slept_ns: u64,
    /// How many tasks the entry stands for: 0 or 1 for one task; more for the wakers past
    /// the first few, said together (pid -2, `comm` then the first few names, comma-separated)
    /// so that the sleep they ended is still counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks: u64,
}

/// A contended spinning lock. A spinning waiter is never woken by the holder, so the trace
/// cannot name who held it; what it shows is how long each mode waited.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpinLockWaits {
    pub lock_addr: u64,
    /// The same name as in the contention table.
    pub name: String,
    /// spinlock or rwlock.
    pub kind: LockKind,
    pub waits: u64,
    pub total_wait_ns: u64,
    /// Waits per mode: "write", "read", or "" for a plain spinlock.
    pub modes: Vec<ModeWaits>,
    /// Writers' waits during which at least one reader's contended wait ended (a reader
    /// got the lock while a writer kept waiting).
    pub writer_waits_overtaken: u64,
    /// Readers' contended acquisitions that ended while a writer waited.
    pub reads_during_writer_waits: u64,
    /// Waits still open when the trace ended.
    pub open_waits: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeWaits {
    pub mode: String,
    pub waits: Option<Summary>,
    pub total_wait_ns: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}
