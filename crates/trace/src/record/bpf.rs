//! Aggregate mode: instead of streaming every event through tracefs, a BPF program
//! attached to tracepoints (tp_btf: lock contention_begin/end, sched_switch, sched_waking,
//! sched_process_fork, ipi_send_cpu/cpumask, and interrupt handlers', softirqs' and
//! hrtimers' entries and exits) aggregates lock waits, their holders and a
//! subject's time in bounded kernel maps, which are read once at the end into
//! `aggregate.json` ([`dump`]). Memory stays flat however long it records; what does not
//! fit in a map is counted, never silently lost.
//!
//! The program is C (`aggregate.bpf.c`), compiled once by scripts/build-bpf into the
//! committed `aggregate.bpf.o`, whose skeleton (`aggregate.skel.rs`, libbpf-cargo) this
//! module loads with libbpf-rs: building vmscale needs no BPF compiler. Without the `bpf`
//! feature, [`Aggregation::prepare`] says BPF is not available and callers record through
//! tracefs.

pub mod dump;
#[cfg(feature = "bpf")]
mod loader;

#[cfg(feature = "bpf")]
pub use loader::Aggregation;

/// The tracepoints the programs attach to, as a trace's event list names them.
pub const AGGREGATE_EVENTS: &[&str] = &[
    "lock:contention_begin",
    "lock:contention_end",
    "sched:sched_switch",
    "sched:sched_waking",
    "sched:sched_process_fork",
    "ipi:ipi_send_cpu",
    "ipi:ipi_send_cpumask",
    "irq:irq_handler_entry",
    "irq:irq_handler_exit",
    "irq:softirq_entry",
    "irq:softirq_exit",
    "timer:hrtimer_expire_entry",
    "timer:hrtimer_expire_exit",
];

/// Whose time the programs split by cause, besides every lock's waits and holders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// Nobody's: a scenario's locks only.
    None,
    /// These tasks and every task they create (a command, a process's threads).
    Roots(Vec<u32>),
    /// Every task (a system-wide recording).
    EveryTask,
}

#[derive(Debug, Clone)]
pub struct AggregateConfig {
    pub subject: Subject,
    /// Every task's ioctl names the locks it waits on (`record` names ioctls by default).
    pub ioctl_every_task: bool,
    /// These tasks' ioctls do, whatever `ioctl_every_task` says.
    pub ioctl_tids: Vec<u32>,
    /// A kernel stack where a task goes to sleep outside a lock wait.
    pub sleep_stacks: bool,
    /// A kernel stack on every contended wait.
    pub wait_stacks: bool,
    /// A thread group left out of an [`Subject::EveryTask`] subject (vmscale itself).
    pub exclude_tgid: u32,
    /// Kernel stacks each CPU may take per 10 ms (0: no limit): past it, a wait reuses the
    /// stack its task last took on the same lock with the same flags (at the same nesting
    /// depth), and a sleep its task's last sleep stack (with nothing to reuse, one is still
    /// taken).
    pub stack_budget: u32,
}

/// [`AggregateConfig::stack_budget`]'s default: 2,000 stacks a second per CPU, a few
/// microseconds each, about half a percent of a CPU at most.
pub const DEFAULT_STACK_BUDGET: u32 = 20;

impl Default for AggregateConfig {
    fn default() -> Self {
        AggregateConfig {
            subject: Subject::None,
            ioctl_every_task: false,
            ioctl_tids: Vec::new(),
            sleep_stacks: true,
            wait_stacks: true,
            exclude_tgid: 0,
            stack_budget: DEFAULT_STACK_BUDGET,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AggregateError {
    /// This host does not let vmscale load BPF programs (no CAP_BPF, lockdown, no BTF, a
    /// build without the `bpf` feature): recording through tracefs is the answer.
    #[error("{0}")]
    NotAllowed(String),
    #[error("{0}")]
    Failed(String),
}

/// Why this host cannot load the programs, found before trying: the kernel's BTF is what
/// tp_btf programs attach through, and lockdown forbids the kernel reads they make.
pub fn check_allowed() -> Result<(), AggregateError> {
    if !cfg!(feature = "bpf") {
        return Err(AggregateError::NotAllowed(
            "this vmscale was built without BPF support (the `bpf` feature)".into(),
        ));
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(AggregateError::NotAllowed(
            "the kernel has no BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF)".into(),
        ));
    }
    if let Ok(lockdown) = std::fs::read_to_string("/sys/kernel/security/lockdown") {
        if lockdown.contains("[confidentiality]") {
            return Err(AggregateError::NotAllowed(
                "the kernel is locked down (confidentiality): BPF may not read kernel memory"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// Without BPF support: [`Aggregation::prepare`] always answers [`AggregateError::NotAllowed`].
#[cfg(not(feature = "bpf"))]
pub struct Aggregation(std::convert::Infallible);

#[cfg(not(feature = "bpf"))]
impl Aggregation {
    pub fn prepare(
        _dir: &std::path::Path,
        _config: AggregateConfig,
    ) -> Result<Aggregation, AggregateError> {
        check_allowed()?;
        unreachable!("check_allowed refuses a build without the bpf feature")
    }
    pub fn set_on(&mut self, _on: bool) {
        match self.0 {}
    }
    pub fn adopt_children_of(&mut self, _tid: Option<u32>) {
        match self.0 {}
    }
    pub fn add_subject(&mut self, _pid: u32) -> Result<(), AggregateError> {
        match self.0 {}
    }
    pub fn follow_ioctls_of(&mut self, _tids: &[u32]) -> Result<(), AggregateError> {
        match self.0 {}
    }
    pub fn finish(
        self,
    ) -> Result<(crate::record::recorder::TraceMeta, dump::AggregateDump), AggregateError> {
        match self.0 {}
    }
}
