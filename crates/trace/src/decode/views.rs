//! Typed views of the events the analyses read.
//!
//! Each view's field offsets are looked up by name once, when the event's format is loaded
//! ([`ViewLayout::resolve`]); turning a record into a view is then a few loads. An event whose
//! format lacks a field a view needs (another kernel version) stays a generic event.

use std::borrow::Cow;
use std::fmt;

use crate::decode::field::{until_nul, FieldRef};
use crate::decode::format::{EventFormat, FieldLayout};

/// Bits of `lock:contention_begin`'s `flags` (LCB_F_* in include/trace/events/lock.h).
pub mod contention_flags {
    pub const SPIN: u32 = 1 << 0;
    pub const READ: u32 = 1 << 1;
    pub const WRITE: u32 = 1 << 2;
    pub const RT: u32 = 1 << 3;
    pub const PERCPU: u32 = 1 << 4;
    pub const MUTEX: u32 = 1 << 5;
}

/// An event as the typed view of its kind, or [`EventKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind<'a> {
    ContentionBegin(ContentionBegin),
    ContentionEnd(ContentionEnd),
    SchedSwitch(SchedSwitch<'a>),
    SchedWaking(SchedWakeup<'a>),
    SchedWakeup(SchedWakeup<'a>),
    SchedWakeupNew(SchedWakeup<'a>),
    IpiSendCpu(IpiSendCpu),
    IpiSendCpumask(IpiSendCpumask<'a>),
    IpiRaise(IpiRaise<'a>),
    IpiEntry(IpiHandler),
    IpiExit(IpiHandler),
    IpiVectorEntry(IpiVector),
    IpiVectorExit(IpiVector),
    CsdQueueCpu(CsdQueueCpu),
    CsdFunctionEntry(CsdFunction),
    CsdFunctionExit(CsdFunction),
    SysEnter(SysEnter<'a>),
    SysExit(SysExit),
    KernelStack(KernelStack<'a>),
    Print(Print<'a>),
    MmapLock(MmapLock),
    Work(Work<'a>),
    /// Any other event (or a known one whose format differs): read it by field name.
    Other,
}

/// Which typed view an event gets, known from its type alone, before any record is read:
/// what a consumer routes events by ([`crate::decode::catalog::EventType::view_tag`]). A
/// record too short for its view is still [`EventKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViewTag {
    ContentionBegin,
    ContentionEnd,
    SchedSwitch,
    SchedWaking,
    SchedWakeup,
    SchedWakeupNew,
    IpiSendCpu,
    IpiSendCpumask,
    IpiRaise,
    IpiEntry,
    IpiExit,
    IpiVectorEntry,
    IpiVectorExit,
    CsdQueueCpu,
    CsdFunctionEntry,
    CsdFunctionExit,
    SysEnter,
    SysExit,
    KernelStack,
    Print,
    MmapLock,
    Work,
    Other,
}

impl EventKind<'_> {
    /// The tag of this view.
    pub fn tag(&self) -> ViewTag {
        match self {
            EventKind::ContentionBegin(_) => ViewTag::ContentionBegin,
            EventKind::ContentionEnd(_) => ViewTag::ContentionEnd,
            EventKind::SchedSwitch(_) => ViewTag::SchedSwitch,
            EventKind::SchedWaking(_) => ViewTag::SchedWaking,
            EventKind::SchedWakeup(_) => ViewTag::SchedWakeup,
            EventKind::SchedWakeupNew(_) => ViewTag::SchedWakeupNew,
            EventKind::IpiSendCpu(_) => ViewTag::IpiSendCpu,
            EventKind::IpiSendCpumask(_) => ViewTag::IpiSendCpumask,
            EventKind::IpiRaise(_) => ViewTag::IpiRaise,
            EventKind::IpiEntry(_) => ViewTag::IpiEntry,
            EventKind::IpiExit(_) => ViewTag::IpiExit,
            EventKind::IpiVectorEntry(_) => ViewTag::IpiVectorEntry,
            EventKind::IpiVectorExit(_) => ViewTag::IpiVectorExit,
            EventKind::CsdQueueCpu(_) => ViewTag::CsdQueueCpu,
            EventKind::CsdFunctionEntry(_) => ViewTag::CsdFunctionEntry,
            EventKind::CsdFunctionExit(_) => ViewTag::CsdFunctionExit,
            EventKind::SysEnter(_) => ViewTag::SysEnter,
            EventKind::SysExit(_) => ViewTag::SysExit,
            EventKind::KernelStack(_) => ViewTag::KernelStack,
            EventKind::Print(_) => ViewTag::Print,
            EventKind::MmapLock(_) => ViewTag::MmapLock,
            EventKind::Work(_) => ViewTag::Work,
            EventKind::Other => ViewTag::Other,
        }
    }
}

/// What a workqueue event says happened to a work item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkStep {
    /// workqueue:workqueue_queue_work: queued on a workqueue (named in the view).
    Queue,
    /// workqueue:workqueue_execute_start: a worker (the event's task) starts running it.
    Start,
    /// workqueue:workqueue_execute_end: the worker is done with it.
    End,
}

/// A workqueue event: the work function, and for a queueing the workqueue's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work<'a> {
    pub step: WorkStep,
    /// The work item (its `struct work_struct`'s address): what ties a queueing to the
    /// execution it asked for. 0 where the kernel's format lacks it.
    pub work: u64,
    /// The work item's function, a kernel text address.
    pub function: u64,
    workqueue: &'a [u8],
}

impl<'a> Work<'a> {
    /// A view from its parts (`workqueue` as the event's bytes, NUL-terminated or not).
    pub fn new(step: WorkStep, work: u64, function: u64, workqueue: &'a [u8]) -> Work<'a> {
        Work {
            step,
            work,
            function,
            workqueue,
        }
    }

    /// The workqueue's name (queueing only; empty otherwise), up to its NUL.
    pub fn workqueue(&self) -> String {
        let end = self
            .workqueue
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.workqueue.len());
        String::from_utf8_lossy(&self.workqueue[..end]).into_owned()
    }
}

/// lock:contention_begin: a task starts waiting for a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentionBegin {
    pub lock_addr: u64,
    /// [`contention_flags`] bits.
    pub flags: u32,
}

/// lock:contention_end: the wait is over (`ret` is 0 or a negative errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentionEnd {
    pub lock_addr: u64,
    pub ret: i32,
}

/// What an mmap_lock event says happened to a task's hold of an mm's mmap_lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmapLockStep {
    /// mmap_lock:mmap_lock_start_locking: the task asks for it.
    StartLocking,
    /// mmap_lock:mmap_lock_acquire_returned: it has it (`success`) or gave up.
    AcquireReturned,
    /// mmap_lock:mmap_lock_released: it let go.
    Released,
}

/// mmap_lock:* (include/trace/events/mmap_lock.h): every acquisition and release of an mm's
/// mmap_lock, contended or not, by the task that makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapLock {
    pub step: MmapLockStep,
    /// The `struct mm_struct *` whose lock it is.
    pub mm: u64,
    pub write: bool,
    /// Only for [`MmapLockStep::AcquireReturned`]; true otherwise.
    pub success: bool,
}

/// sched:sched_switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedSwitch<'a> {
    pub prev_comm: Comm<'a>,
    pub prev_pid: i32,
    pub prev_prio: i32,
    /// TASK_* state bits of the task switched out (0: runnable, i.e. preempted).
    pub prev_state: i64,
    pub next_comm: Comm<'a>,
    pub next_pid: i32,
    pub next_prio: i32,
}

/// sched:sched_waking, sched_wakeup and sched_wakeup_new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedWakeup<'a> {
    pub comm: Comm<'a>,
    pub pid: i32,
    pub prio: i32,
    pub target_cpu: i32,
}

/// ipi:ipi_send_cpu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiSendCpu {
    pub cpu: u32,
    pub callsite: u64,
    pub callback: u64,
}

/// ipi:ipi_send_cpumask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiSendCpumask<'a> {
    pub cpumask: CpuMask<'a>,
    pub callsite: u64,
    pub callback: u64,
}

/// ipi:ipi_raise: the sender's side of an IPI as ARM kernels trace it (since 3.17), the only
/// sender-side IPI event before ipi_send_cpu/cpumask (6.5). A kernel that has both fires
/// ipi_send_* first, then ipi_raise, for one IPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiRaise<'a> {
    pub targets: CpuMask<'a>,
    /// A `const char *` into the kernel's image (`ipi_types[]`): its text is in the trace's
    /// printk strings ([`crate::PrintkStrings`]).
    pub reason: u64,
}

/// ipi:ipi_entry and ipi_exit: the target CPU's handler of an IPI (ARM), begun or done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiHandler {
    /// As [`IpiRaise::reason`].
    pub reason: u64,
}

/// Which IPI an x86 `irq_vectors:*_entry`/`*_exit` pair brackets on its target CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpiVector {
    Reschedule,
    CallFunction,
    CallFunctionSingle,
}

impl IpiVector {
    /// The name /proc/interrupts gives it, which is also ARM's ipi_raise reason for it.
    pub fn reason(self) -> &'static str {
        match self {
            IpiVector::Reschedule => "Rescheduling interrupts",
            IpiVector::CallFunction => "Function call interrupts",
            IpiVector::CallFunctionSingle => "Single function call interrupts",
        }
    }
}

/// csd:csd_queue_cpu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsdQueueCpu {
    pub cpu: u32,
    pub callsite: u64,
    pub func: u64,
    pub csd: u64,
}

/// csd:csd_function_entry and csd_function_exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsdFunction {
    pub func: u64,
    pub csd: u64,
}

/// raw_syscalls:sys_enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysEnter<'a> {
    pub id: i64,
    /// The `args` array's bytes, read only when asked for: most readers want only the id,
    /// and reading six arguments of every system call cost more than the rest of its view.
    args: &'a [u8],
}

impl SysEnter<'_> {
    /// The six argument registers (0 where the record does not hold one).
    pub fn args(&self) -> [u64; 6] {
        std::array::from_fn(|index| {
            crate::decode::field::read_u64(self.args, index * 8).unwrap_or(0)
        })
    }
}

/// raw_syscalls:sys_exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysExit {
    pub id: i64,
    pub ret: i64,
}

/// ftrace:kernel_stack: return addresses, innermost first.
///
/// `__ftrace_trace_stack` (kernel/trace/trace.c) reserves `struct_size(entry, caller,
/// nr_entries)`, sets `size = nr_entries` (a count, not bytes) and copies that many
/// addresses from `caller` on, past the 8 slots the format declares. The kernel's printer
/// (`trace_stack_print`) bounds them by the record's end and stops at `ULONG_MAX`; so does
/// this view, and by `size` as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelStack<'a> {
    frames: &'a [u8],
}

impl<'a> KernelStack<'a> {
    fn new(record: &'a [u8], size: i64, caller: &FieldRef) -> KernelStack<'a> {
        let present = record.get(caller.offset..).unwrap_or(&[]);
        let declared = usize::try_from(size).unwrap_or(0).saturating_mul(8);
        let mut frames = &present[..declared.min(present.len() / 8 * 8)];
        if let Some(end) = frames.chunks_exact(8).position(|f| f == [0xff; 8]) {
            frames = &frames[..end * 8];
        }
        KernelStack { frames }
    }

    pub fn len(&self) -> usize {
        self.frames.len() / 8
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<u64> {
        crate::decode::field::read_u64(self.frames, index.checked_mul(8)?)
    }

    /// The return addresses, innermost frame first.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        self.frames
            .chunks_exact(8)
            .map(|f| u64::from_le_bytes([f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]]))
    }
}

/// ftrace:print (what was written to trace_marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Print<'a> {
    pub ip: u64,
    /// The text up to its NUL, without the newline the kernel ends it with.
    pub message: &'a [u8],
}

impl Print<'_> {
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.message)
    }
}

/// A task name from a fixed `char[16]` field (read up to its NUL when looked at).
#[derive(Clone, Copy)]
pub struct Comm<'a>(&'a [u8]);

impl<'a> Comm<'a> {
    /// A name from the field's bytes.
    pub fn new(field: &'a [u8]) -> Comm<'a> {
        Comm(field)
    }

    /// The name's bytes, without the NUL padding.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        until_nul(self.0)
    }

    pub fn to_str(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.as_bytes())
    }
}

impl fmt::Display for Comm<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_str())
    }
}

impl fmt::Debug for Comm<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_str())
    }
}

impl PartialEq for Comm<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Comm<'_> {}

impl std::hash::Hash for Comm<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq<&str> for Comm<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

/// A `cpumask_t` bitmap (unsigned longs, little-endian: bit `n` is bit `n % 8` of byte
/// `n / 8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuMask<'a>(pub &'a [u8]);

impl<'a> CpuMask<'a> {
    pub fn contains(&self, cpu: u32) -> bool {
        self.0
            .get(cpu as usize / 8)
            .is_some_and(|byte| byte & (1 << (cpu % 8)) != 0)
    }

    /// Number of CPUs in the mask.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|b| b.count_ones()).sum()
    }

    /// The CPUs in the mask, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        self.0.iter().enumerate().flat_map(|(index, &byte)| {
            (0..8u32)
                .filter(move |bit| byte & (1 << bit) != 0)
                .map(move |bit| index as u32 * 8 + bit)
        })
    }
}

/// Field positions of one typed view, resolved from a format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ViewLayout {
    ContentionBegin {
        lock_addr: FieldRef,
        flags: FieldRef,
    },
    ContentionEnd {
        lock_addr: FieldRef,
        ret: FieldRef,
    },
    SchedSwitch {
        prev_comm: FieldRef,
        prev_pid: FieldRef,
        prev_prio: FieldRef,
        prev_state: FieldRef,
        next_comm: FieldRef,
        next_pid: FieldRef,
        next_prio: FieldRef,
    },
    SchedWakeup {
        which: WakeupKind,
        comm: FieldRef,
        pid: FieldRef,
        prio: FieldRef,
        target_cpu: FieldRef,
    },
    IpiSendCpu {
        cpu: FieldRef,
        callsite: FieldRef,
        callback: FieldRef,
    },
    IpiSendCpumask {
        cpumask: FieldRef,
        callsite: FieldRef,
        callback: FieldRef,
    },
    IpiRaise {
        targets: FieldRef,
        reason: FieldRef,
    },
    IpiHandler {
        exit: bool,
        reason: FieldRef,
    },
    IpiVector {
        exit: bool,
        vector: IpiVector,
    },
    CsdQueueCpu {
        cpu: FieldRef,
        callsite: FieldRef,
        func: FieldRef,
        csd: FieldRef,
    },
    CsdFunction {
        exit: bool,
        func: FieldRef,
        csd: FieldRef,
    },
    SysEnter {
        id: FieldRef,
        args: FieldRef,
    },
    SysExit {
        id: FieldRef,
        ret: FieldRef,
    },
    KernelStack {
        size: FieldRef,
        caller: FieldRef,
    },
    Print {
        ip: FieldRef,
        buf: FieldRef,
    },
    Work {
        step: WorkStep,
        work: Option<FieldRef>,
        function: FieldRef,
        workqueue: Option<FieldRef>,
    },
    MmapLock {
        step: MmapLockStep,
        mm: FieldRef,
        write: FieldRef,
        /// Only acquire_returned has it.
        success: Option<FieldRef>,
    },
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WakeupKind {
    Waking,
    Wakeup,
    WakeupNew,
}

/// What a view may require of a field.
#[derive(Clone, Copy)]
enum Want {
    /// An integer of 1, 2, 4 or 8 bytes.
    Int,
    /// A fixed char array (comm).
    CharArray,
    /// A `__data_loc` or `__rel_loc` field.
    Dynamic,
    /// An inline array (or a trailing one).
    Array,
    /// An array that may hold fewer or more elements than declared (kernel_stack's
    /// `caller`): only its start must be inside the record.
    FlexArray,
}

struct Lookup<'f> {
    format: &'f EventFormat,
    /// Bytes a record must have for every resolved fixed-position read to be in bounds.
    min_len: usize,
    ok: bool,
}

impl Lookup<'_> {
    fn get(&mut self, name: &str, want: Want) -> FieldRef {
        let missing = FieldRef {
            offset: 0,
            size: 0,
            signed: false,
            layout: FieldLayout::Scalar,
        };
        let Some(field) = self.format.field(name) else {
            self.ok = false;
            return missing;
        };
        let fits = match want {
            Want::Int => field.layout == FieldLayout::Scalar && matches!(field.size, 1 | 2 | 4 | 8),
            Want::CharArray => matches!(field.layout, FieldLayout::Array { .. }),
            Want::Dynamic => matches!(field.layout, FieldLayout::DataLoc | FieldLayout::RelLoc),
            Want::Array | Want::FlexArray => matches!(
                field.layout,
                FieldLayout::Array { .. } | FieldLayout::Trailing
            ),
        };
        if !fits {
            self.ok = false;
            return missing;
        }
        let end = match (want, field.layout) {
            (_, FieldLayout::DataLoc | FieldLayout::RelLoc) => field.offset + 4,
            (Want::FlexArray, _) | (_, FieldLayout::Trailing) => field.offset,
            _ => field.offset + field.size,
        };
        self.min_len = self.min_len.max(end);
        FieldRef::new(field)
    }
}

impl Lookup<'_> {
    /// A field the view can do without: `None` where the format lacks it or lays it out
    /// otherwise, and the view still resolves.
    fn optional(&mut self, name: &str, want: Want) -> Option<FieldRef> {
        let (ok, min_len) = (self.ok, self.min_len);
        let field = self.get(name, want);
        let found = self.ok;
        self.ok = ok;
        if !found {
            self.min_len = min_len;
        }
        found.then_some(field)
    }

    /// A per-system-call enter event's arguments as one array: the fields after
    /// `__syscall_nr`, which the kernel lays out as consecutive 8-byte slots (one per
    /// argument register, whatever the declared type), as raw_syscalls' `args` holds them.
    /// A format that does not is not read.
    fn syscall_args(&mut self) -> FieldRef {
        let fields = &self.format.fields;
        let args: Vec<&crate::decode::format::Field> = fields
            .iter()
            .skip_while(|f| f.name != "__syscall_nr")
            .skip(1)
            .collect();
        let start = args.first().map_or(0, |f| f.offset);
        let consecutive = args.iter().enumerate().all(|(index, f)| {
            f.size == 8 && f.layout == FieldLayout::Scalar && f.offset == start + index * 8
        });
        if !consecutive {
            self.ok = false;
        }
        let size = if consecutive { args.len() * 8 } else { 0 };
        self.min_len = self.min_len.max(start + size);
        FieldRef {
            offset: start,
            size,
            signed: false,
            layout: FieldLayout::Array { len: args.len() },
        }
    }
}

impl ViewLayout {
    /// The view for `system:format.name`, with its fields looked up; `Other` when the event
    /// has no view or its format lacks what the view reads. Also returns the record length
    /// the view needs.
    pub(crate) fn resolve(system: &str, format: &EventFormat) -> (ViewLayout, usize) {
        use Want::*;
        let mut l = Lookup {
            format,
            min_len: 0,
            ok: true,
        };
        let layout = match (system, format.name.as_str()) {
            ("lock", "contention_begin") => ViewLayout::ContentionBegin {
                lock_addr: l.get("lock_addr", Int),
                flags: l.get("flags", Int),
            },
            ("lock", "contention_end") => ViewLayout::ContentionEnd {
                lock_addr: l.get("lock_addr", Int),
                ret: l.get("ret", Int),
            },
            ("sched", "sched_switch") => ViewLayout::SchedSwitch {
                prev_comm: l.get("prev_comm", CharArray),
                prev_pid: l.get("prev_pid", Int),
                prev_prio: l.get("prev_prio", Int),
                prev_state: l.get("prev_state", Int),
                next_comm: l.get("next_comm", CharArray),
                next_pid: l.get("next_pid", Int),
                next_prio: l.get("next_prio", Int),
            },
            ("sched", name @ ("sched_waking" | "sched_wakeup" | "sched_wakeup_new")) => {
                ViewLayout::SchedWakeup {
                    which: match name {
                        "sched_waking" => WakeupKind::Waking,
                        "sched_wakeup" => WakeupKind::Wakeup,
                        _ => WakeupKind::WakeupNew,
                    },
                    comm: l.get("comm", CharArray),
                    pid: l.get("pid", Int),
                    prio: l.get("prio", Int),
                    target_cpu: l.get("target_cpu", Int),
                }
            }
            ("ipi", "ipi_send_cpu") => ViewLayout::IpiSendCpu {
                cpu: l.get("cpu", Int),
                callsite: l.get("callsite", Int),
                callback: l.get("callback", Int),
            },
            ("ipi", "ipi_send_cpumask") => ViewLayout::IpiSendCpumask {
                cpumask: l.get("cpumask", Dynamic),
                callsite: l.get("callsite", Int),
                callback: l.get("callback", Int),
            },
            ("ipi", "ipi_raise") => ViewLayout::IpiRaise {
                targets: l.get("target_cpus", Dynamic),
                reason: l.get("reason", Int),
            },
            ("ipi", name @ ("ipi_entry" | "ipi_exit")) => ViewLayout::IpiHandler {
                exit: name == "ipi_exit",
                reason: l.get("reason", Int),
            },
            ("irq_vectors", name) => {
                let (vector, exit) = match name {
                    "reschedule_entry" => (IpiVector::Reschedule, false),
                    "reschedule_exit" => (IpiVector::Reschedule, true),
                    "call_function_entry" => (IpiVector::CallFunction, false),
                    "call_function_exit" => (IpiVector::CallFunction, true),
                    "call_function_single_entry" => (IpiVector::CallFunctionSingle, false),
                    "call_function_single_exit" => (IpiVector::CallFunctionSingle, true),
                    _ => return (ViewLayout::Other, 0),
                };
                ViewLayout::IpiVector { exit, vector }
            }
            ("csd", "csd_queue_cpu") => ViewLayout::CsdQueueCpu {
                cpu: l.get("cpu", Int),
                callsite: l.get("callsite", Int),
                func: l.get("func", Int),
                csd: l.get("csd", Int),
            },
            ("csd", name @ ("csd_function_entry" | "csd_function_exit")) => {
                ViewLayout::CsdFunction {
                    exit: name == "csd_function_exit",
                    func: l.get("func", Int),
                    csd: l.get("csd", Int),
                }
            }
            ("raw_syscalls", "sys_enter") => ViewLayout::SysEnter {
                id: l.get("id", Int),
                args: l.get("args", Array),
            },
            ("raw_syscalls", "sys_exit") => ViewLayout::SysExit {
                id: l.get("id", Int),
                ret: l.get("ret", Int),
            },
            // One system call's own events (syscalls:sys_enter_ioctl, ...): the same views.
            // Recording ioctl this way costs other tasks' system calls nothing, where
            // raw_syscalls filtered to one id still writes and discards an event for each.
            ("syscalls", name) if name.starts_with("sys_enter_") => ViewLayout::SysEnter {
                id: l.get("__syscall_nr", Int),
                args: l.syscall_args(),
            },
            ("syscalls", name) if name.starts_with("sys_exit_") => ViewLayout::SysExit {
                id: l.get("__syscall_nr", Int),
                ret: l.get("ret", Int),
            },
            ("ftrace", "kernel_stack") => ViewLayout::KernelStack {
                size: l.get("size", Int),
                caller: l.get("caller", FlexArray),
            },
            ("ftrace", "print") => ViewLayout::Print {
                ip: l.get("ip", Int),
                buf: l.get("buf", Array),
            },
            (
                "mmap_lock",
                name @ ("mmap_lock_start_locking"
                | "mmap_lock_acquire_returned"
                | "mmap_lock_released"),
            ) => {
                let step = match name {
                    "mmap_lock_start_locking" => MmapLockStep::StartLocking,
                    "mmap_lock_acquire_returned" => MmapLockStep::AcquireReturned,
                    _ => MmapLockStep::Released,
                };
                ViewLayout::MmapLock {
                    step,
                    mm: l.get("mm", Int),
                    write: l.get("write", Int),
                    success: (step == MmapLockStep::AcquireReturned).then(|| l.get("success", Int)),
                }
            }
            (
                "workqueue",
                name @ ("workqueue_queue_work"
                | "workqueue_execute_start"
                | "workqueue_execute_end"),
            ) => {
                let step = match name {
                    "workqueue_queue_work" => WorkStep::Queue,
                    "workqueue_execute_start" => WorkStep::Start,
                    _ => WorkStep::End,
                };
                ViewLayout::Work {
                    step,
                    work: l.optional("work", Int),
                    function: l.get("function", Int),
                    workqueue: (step == WorkStep::Queue).then(|| l.get("workqueue", Dynamic)),
                }
            }
            _ => return (ViewLayout::Other, 0),
        };
        if l.ok {
            (layout, l.min_len)
        } else {
            (ViewLayout::Other, 0)
        }
    }

    /// The tag of the views this layout gives.
    pub(crate) fn tag(&self) -> ViewTag {
        match self {
            ViewLayout::ContentionBegin { .. } => ViewTag::ContentionBegin,
            ViewLayout::ContentionEnd { .. } => ViewTag::ContentionEnd,
            ViewLayout::SchedSwitch { .. } => ViewTag::SchedSwitch,
            ViewLayout::SchedWakeup { which, .. } => match which {
                WakeupKind::Waking => ViewTag::SchedWaking,
                WakeupKind::Wakeup => ViewTag::SchedWakeup,
                WakeupKind::WakeupNew => ViewTag::SchedWakeupNew,
            },
            ViewLayout::IpiSendCpu { .. } => ViewTag::IpiSendCpu,
            ViewLayout::IpiSendCpumask { .. } => ViewTag::IpiSendCpumask,
            ViewLayout::IpiRaise { .. } => ViewTag::IpiRaise,
            ViewLayout::IpiHandler { exit: false, .. } => ViewTag::IpiEntry,
            ViewLayout::IpiHandler { exit: true, .. } => ViewTag::IpiExit,
            ViewLayout::IpiVector { exit: false, .. } => ViewTag::IpiVectorEntry,
            ViewLayout::IpiVector { exit: true, .. } => ViewTag::IpiVectorExit,
            ViewLayout::CsdQueueCpu { .. } => ViewTag::CsdQueueCpu,
            ViewLayout::CsdFunction { exit: false, .. } => ViewTag::CsdFunctionEntry,
            ViewLayout::CsdFunction { exit: true, .. } => ViewTag::CsdFunctionExit,
            ViewLayout::SysEnter { .. } => ViewTag::SysEnter,
            ViewLayout::SysExit { .. } => ViewTag::SysExit,
            ViewLayout::KernelStack { .. } => ViewTag::KernelStack,
            ViewLayout::Print { .. } => ViewTag::Print,
            ViewLayout::MmapLock { .. } => ViewTag::MmapLock,
            ViewLayout::Work { .. } => ViewTag::Work,
            ViewLayout::Other => ViewTag::Other,
        }
    }

    /// The view of `record`, which the caller has checked is at least the resolved length
    /// (so the fixed-position reads below cannot miss; they still read 0 rather than panic).
    #[inline(always)]
    pub(crate) fn view<'a>(&self, record: &'a [u8]) -> EventKind<'a> {
        let u = |f: &FieldRef| f.u64(record).unwrap_or(0);
        let i = |f: &FieldRef| f.i64(record).unwrap_or(0);
        let comm = |f: &FieldRef| Comm(f.bytes(record).unwrap_or(&[]));
        match self {
            ViewLayout::ContentionBegin { lock_addr, flags } => {
                EventKind::ContentionBegin(ContentionBegin {
                    lock_addr: u(lock_addr),
                    flags: u(flags) as u32,
                })
            }
            ViewLayout::ContentionEnd { lock_addr, ret } => {
                EventKind::ContentionEnd(ContentionEnd {
                    lock_addr: u(lock_addr),
                    ret: i(ret) as i32,
                })
            }
            ViewLayout::SchedSwitch {
                prev_comm,
                prev_pid,
                prev_prio,
                prev_state,
                next_comm,
                next_pid,
                next_prio,
            } => EventKind::SchedSwitch(SchedSwitch {
                prev_comm: comm(prev_comm),
                prev_pid: i(prev_pid) as i32,
                prev_prio: i(prev_prio) as i32,
                prev_state: i(prev_state),
                next_comm: comm(next_comm),
                next_pid: i(next_pid) as i32,
                next_prio: i(next_prio) as i32,
            }),
            ViewLayout::SchedWakeup {
                which,
                comm: c,
                pid,
                prio,
                target_cpu,
            } => {
                let view = SchedWakeup {
                    comm: comm(c),
                    pid: i(pid) as i32,
                    prio: i(prio) as i32,
                    target_cpu: i(target_cpu) as i32,
                };
                match which {
                    WakeupKind::Waking => EventKind::SchedWaking(view),
                    WakeupKind::Wakeup => EventKind::SchedWakeup(view),
                    WakeupKind::WakeupNew => EventKind::SchedWakeupNew(view),
                }
            }
            ViewLayout::IpiSendCpu {
                cpu,
                callsite,
                callback,
            } => EventKind::IpiSendCpu(IpiSendCpu {
                cpu: u(cpu) as u32,
                callsite: u(callsite),
                callback: u(callback),
            }),
            ViewLayout::IpiSendCpumask {
                cpumask,
                callsite,
                callback,
            } => EventKind::IpiSendCpumask(IpiSendCpumask {
                cpumask: CpuMask(cpumask.bytes(record).unwrap_or(&[])),
                callsite: u(callsite),
                callback: u(callback),
            }),
            ViewLayout::IpiRaise { targets, reason } => EventKind::IpiRaise(IpiRaise {
                targets: CpuMask(targets.bytes(record).unwrap_or(&[])),
                reason: u(reason),
            }),
            ViewLayout::IpiHandler { exit, reason } => {
                let view = IpiHandler { reason: u(reason) };
                if *exit {
                    EventKind::IpiExit(view)
                } else {
                    EventKind::IpiEntry(view)
                }
            }
            ViewLayout::IpiVector { exit, vector } => {
                if *exit {
                    EventKind::IpiVectorExit(*vector)
                } else {
                    EventKind::IpiVectorEntry(*vector)
                }
            }
            ViewLayout::CsdQueueCpu {
                cpu,
                callsite,
                func,
                csd,
            } => EventKind::CsdQueueCpu(CsdQueueCpu {
                cpu: u(cpu) as u32,
                callsite: u(callsite),
                func: u(func),
                csd: u(csd),
            }),
            ViewLayout::CsdFunction { exit, func, csd } => {
                let view = CsdFunction {
                    func: u(func),
                    csd: u(csd),
                };
                if *exit {
                    EventKind::CsdFunctionExit(view)
                } else {
                    EventKind::CsdFunctionEntry(view)
                }
            }
            ViewLayout::SysEnter { id, args } => EventKind::SysEnter(SysEnter {
                id: i(id),
                args: args.bytes(record).unwrap_or(&[]),
            }),
            ViewLayout::SysExit { id, ret } => EventKind::SysExit(SysExit {
                id: i(id),
                ret: i(ret),
            }),
            ViewLayout::KernelStack { size, caller } => {
                EventKind::KernelStack(KernelStack::new(record, i(size), caller))
            }
            ViewLayout::Print { ip, buf } => {
                let text = buf.c_str(record).unwrap_or(&[]);
                EventKind::Print(Print {
                    ip: u(ip),
                    message: text.strip_suffix(b"\n").unwrap_or(text),
                })
            }
            ViewLayout::MmapLock {
                step,
                mm,
                write,
                success,
            } => EventKind::MmapLock(MmapLock {
                step: *step,
                mm: u(mm),
                write: u(write) != 0,
                success: success.as_ref().is_none_or(|f| u(f) != 0),
            }),
            ViewLayout::Work {
                step,
                work,
                function,
                workqueue,
            } => EventKind::Work(Work {
                step: *step,
                work: work.as_ref().map_or(0, u),
                function: u(function),
                workqueue: workqueue
                    .as_ref()
                    .and_then(|f| f.bytes(record))
                    .unwrap_or(&[]),
            }),
            ViewLayout::Other => EventKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpumask_bits() {
        let mask = CpuMask(&[0b0000_0101, 0, 0b1000_0000]);
        assert_eq!(mask.iter().collect::<Vec<_>>(), vec![0, 2, 23]);
        assert_eq!(mask.count(), 3);
        assert!(mask.contains(23));
        assert!(!mask.contains(1));
        assert!(!mask.contains(999));
    }

    #[test]
    fn kernel_stack_is_bounded_by_size_record_end_and_ulong_max() {
        let mut record = vec![0u8; 16];
        for address in [0xffff_ffff_8100_0010u64, 0xffff_ffff_8100_0020, u64::MAX, 5] {
            record.extend_from_slice(&address.to_le_bytes());
        }
        let caller = FieldRef {
            offset: 16,
            size: 64,
            signed: false,
            layout: FieldLayout::Array { len: 8 },
        };
        let stack = KernelStack::new(&record, 4, &caller);
        assert_eq!(
            stack.iter().collect::<Vec<_>>(),
            vec![0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020]
        );
        assert_eq!(KernelStack::new(&record, 1, &caller).len(), 1);
        assert_eq!(KernelStack::new(&record, 100, &caller).len(), 2);
        assert_eq!(KernelStack::new(&record, -3, &caller).len(), 0);
        assert_eq!(KernelStack::new(&record[..20], 4, &caller).len(), 0);
        assert_eq!(
            KernelStack::new(&record, 2, &caller).get(1),
            Some(0xffff_ffff_8100_0020)
        );
        assert_eq!(KernelStack::new(&record, 2, &caller).get(2), None);
    }

    #[test]
    fn a_format_without_the_viewed_fields_stays_generic() {
        let format = EventFormat::parse(
            "name: contention_begin\nID: 9\n\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;\n",
        )
        .unwrap();
        assert_eq!(ViewLayout::resolve("lock", &format).0, ViewLayout::Other);
        let format = EventFormat::parse(
            "name: contention_begin\nID: 9\n\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned int flags;\toffset:16;\tsize:4;\tsigned:0;\n",
        )
        .unwrap();
        let (layout, min_len) = ViewLayout::resolve("lock", &format);
        assert_eq!(min_len, 20);
        let mut record = vec![0u8; 20];
        record[8..16].copy_from_slice(&0xffff_8886_27d2_ba80u64.to_le_bytes());
        record[16] = 1;
        assert_eq!(
            layout.view(&record),
            EventKind::ContentionBegin(ContentionBegin {
                lock_addr: 0xffff_8886_27d2_ba80,
                flags: contention_flags::SPIN
            })
        );
    }
}
