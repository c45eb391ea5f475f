//! IPIs and cross-CPU calls per measured phase: who sent them, from which kernel call site,
//! asking which callback, to which CPUs, and what they cost the CPUs that ran them.
//!
//! Phases are delimited by the scenario's trace_marker writes (`vmscale: begin <label>`,
//! `vmscale: end <label>`), so the counts belong to exactly the calls that were timed. A
//! trace without phases (a recording, an import) gets one phase: the whole trace.
//!
//! Kernels tell of IPIs in three generations of events, and the pass reads each:
//! - ipi_send_cpu/cpumask (6.5 and later): sender, call site, callback, targets;
//! - ipi_raise (ARM since 3.17): sender, targets and a reason, no call site. A kernel with
//!   both fires both for one IPI, so ipi_raise counts only in a trace without ipi_send_*;
//! - the targets' handlers: csd_function_entry/exit (6.3 and later) name the function run;
//!   ipi_entry/exit (ARM) and x86's irq_vectors call_function*_entry/exit give the
//!   handler's time by reason.
//!
//! Memory: one aggregate per phase, bounded by call sites, senders, reasons and CPUs.

use std::collections::BTreeMap;

use foldhash::HashMap;

use vmscale_run::findings::{IpiSyscall, IpiVictimWork};
use vmscale_run::{IpiPhase, IpiSender, IpiSite};
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::{CpuMask, EventKind, IpiVector, ViewTag};
use vmscale_trace::PrintkStrings;

use crate::symbols::Symbols;
use crate::task_slots::TaskSlots;

const BEGIN: &str = "vmscale: begin ";
const END: &str = "vmscale: end ";
const TOP_SITES: usize = 8;
const TOP_SENDERS: usize = 8;

/// IPIs counted from one kind of sender-side event.
#[derive(Default)]
struct Sends {
    ipis: u64,
    by_target: BTreeMap<u32, u64>,
    /// (call site, callback) of ipi_send_*; (0, reason) of ipi_raise.
    by_site: HashMap<(u64, u64), u64>,
    by_sender: HashMap<i32, u64>,
    by_syscall: HashMap<i64, u64>,
}

/// The CPUs an IPI went to, read again for each aggregate it counts in.
#[derive(Clone, Copy)]
enum Targets<'a> {
    One(u32),
    Mask(CpuMask<'a>),
}

impl Targets<'_> {
    fn for_each(self, f: impl FnMut(u32)) {
        match self {
            Targets::One(cpu) => std::iter::once(cpu).for_each(f),
            Targets::Mask(mask) => mask.iter().for_each(f),
        }
    }
}

/// Why a target CPU ran an IPI handler: ARM's reason string, or x86's vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum HandlerReason {
    Printk(u64),
    Vector(IpiVector),
}

#[derive(Default)]
struct PhaseAggregate {
    label: String,
    start: u64,
    end: u64,
    /// From ipi_send_cpu/cpumask.
    sent: Sends,
    /// From ipi_raise: what the phase reports when the trace has no ipi_send_*.
    raised: Sends,
    csd_queued: u64,
    /// csd function -> (calls, total ns) run on target CPUs.
    victim_work: HashMap<u64, (u64, u64)>,
    /// Handler reason -> (calls, total ns) on target CPUs.
    handlers: HashMap<HandlerReason, (u64, u64)>,
}

impl PhaseAggregate {
    fn is_empty(&self) -> bool {
        self.sent.ipis == 0
            && self.raised.ipis == 0
            && self.csd_queued == 0
            && self.victim_work.is_empty()
            && self.handlers.is_empty()
    }
}

#[derive(Default)]
pub struct IpiPass {
    current: Option<PhaseAggregate>,
    done: Vec<PhaseAggregate>,
    /// Everything, for a trace that turns out to have no phases.
    whole: PhaseAggregate,
    /// An ipi_send_* was seen: ipi_raise then only repeats it.
    saw_send: bool,
    comms: HashMap<i32, String>,
    /// pid -> the system call it is in, if any (from raw_syscalls, where recorded for it):
    /// set at every sys_enter and sys_exit, so kept where the task runs.
    in_syscall: TaskSlots<Option<i64>>,
    /// CPU -> (function, entry timestamp) of the cross-CPU function it is running.
    running_csd: HashMap<u32, (u64, u64)>,
    /// CPU -> (reason, entry timestamp) of the IPI handler it is running.
    running_handler: HashMap<u32, (HandlerReason, u64)>,
}

impl IpiPass {
    /// The views [`IpiPass::observe`] reads in a trace that can hold the views `trace`
    /// holds; other events change nothing.
    pub fn wants(tag: ViewTag, trace: crate::ViewTags) -> bool {
        use ViewTag::*;
        match tag {
            // A task's system call only names the call an IPI was sent from.
            SysEnter | SysExit => {
                trace.holds(IpiSendCpu) || trace.holds(IpiSendCpumask) || trace.holds(IpiRaise)
            }
            _ => matches!(
                tag,
                Print
                    | IpiSendCpu
                    | IpiSendCpumask
                    | IpiRaise
                    | CsdQueueCpu
                    | CsdFunctionEntry
                    | CsdFunctionExit
                    | IpiEntry
                    | IpiExit
                    | IpiVectorEntry
                    | IpiVectorExit
                    | SchedSwitch
            ),
        }
    }

    #[inline]
    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        // System calls, the most frequent events by far, only say which call each task
        // is in.
        match kind {
            EventKind::SysEnter(enter) => {
                *self.in_syscall.on(event.cpu(), event.pid()) = Some(enter.id);
            }
            EventKind::SysExit(_) => *self.in_syscall.on(event.cpu(), event.pid()) = None,
            _ => self.observe_view(event, kind),
        }
    }

    fn observe_view(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        let ts = event.ts();
        match *kind {
            EventKind::Print(print) => {
                let text = print.text();
                let text = text.trim_end();
                if let Some(label) = text.strip_prefix(BEGIN) {
                    self.close(ts);
                    self.current = Some(PhaseAggregate {
                        label: label.to_string(),
                        start: ts,
                        ..PhaseAggregate::default()
                    });
                } else if text.starts_with(END) {
                    self.close(ts);
                }
            }
            EventKind::IpiSendCpu(ipi) => {
                self.saw_send = true;
                let site = (ipi.callsite, ipi.callback);
                self.count(event, Targets::One(ipi.cpu), site, |p| &mut p.sent)
            }
            EventKind::IpiSendCpumask(ipi) => {
                self.saw_send = true;
                let site = (ipi.callsite, ipi.callback);
                self.count(event, Targets::Mask(ipi.cpumask), site, |p| &mut p.sent)
            }
            EventKind::IpiRaise(ipi) if !self.saw_send => {
                self.count(event, Targets::Mask(ipi.targets), (0, ipi.reason), |p| {
                    &mut p.raised
                })
            }
            EventKind::CsdQueueCpu(_) => self.each_phase(|phase| phase.csd_queued += 1),
            EventKind::CsdFunctionEntry(f) => {
                self.running_csd.insert(event.cpu(), (f.func, ts));
            }
            EventKind::CsdFunctionExit(f) => {
                if let Some((func, start)) = self.running_csd.remove(&event.cpu()) {
                    if func == f.func {
                        let took = ts.saturating_sub(start);
                        self.each_phase(|phase| {
                            let work = phase.victim_work.entry(func).or_default();
                            work.0 += 1;
                            work.1 += took;
                        });
                    }
                }
            }
            EventKind::IpiEntry(h) => self.handler_entry(event, HandlerReason::Printk(h.reason)),
            EventKind::IpiVectorEntry(v) => self.handler_entry(event, HandlerReason::Vector(v)),
            EventKind::IpiExit(h) => self.handler_exit(event, HandlerReason::Printk(h.reason)),
            EventKind::IpiVectorExit(v) => self.handler_exit(event, HandlerReason::Vector(v)),
            // The latest name wins, as in every other section: a thread that renamed
            // itself after its first switch is said by its new name.
            EventKind::SchedSwitch(s) => {
                crate::task_names::remember(&mut self.comms, s.prev_pid, s.prev_comm.as_bytes());
                crate::task_names::remember(&mut self.comms, s.next_pid, s.next_comm.as_bytes());
            }
            _ => {}
        }
    }

    /// `update` applied to the current phase, if any, and to the whole trace.
    fn each_phase(&mut self, mut update: impl FnMut(&mut PhaseAggregate)) {
        if let Some(phase) = &mut self.current {
            update(phase);
        }
        update(&mut self.whole);
    }

    fn handler_entry(&mut self, event: &Event<'_>, reason: HandlerReason) {
        self.running_handler
            .insert(event.cpu(), (reason, event.ts()));
    }

    /// A handler's time counts when its entry on the same CPU had the same reason: IPI
    /// handlers run with interrupts off, so they do not nest.
    fn handler_exit(&mut self, event: &Event<'_>, reason: HandlerReason) {
        if let Some((entered, start)) = self.running_handler.remove(&event.cpu()) {
            if entered == reason {
                let took = event.ts().saturating_sub(start);
                self.each_phase(|phase| {
                    let work = phase.handlers.entry(reason).or_default();
                    work.0 += 1;
                    work.1 += took;
                });
            }
        }
    }

    fn count(
        &mut self,
        event: &Event<'_>,
        targets: Targets<'_>,
        site: (u64, u64),
        sends: fn(&mut PhaseAggregate) -> &mut Sends,
    ) {
        let syscall = *self.in_syscall.on(event.cpu(), event.pid());
        let pid = event.pid();
        self.each_phase(|phase| {
            let sends = sends(phase);
            let mut n = 0;
            targets.for_each(|cpu| {
                *sends.by_target.entry(cpu).or_default() += 1;
                n += 1;
            });
            sends.ipis += n;
            *sends.by_site.entry(site).or_default() += n;
            *sends.by_sender.entry(pid).or_default() += n;
            if let Some(id) = syscall {
                *sends.by_syscall.entry(id).or_default() += n;
            }
        });
    }

    fn close(&mut self, ts: u64) {
        if let Some(mut phase) = self.current.take() {
            phase.end = ts;
            self.done.push(phase);
        }
    }

    /// The phases, with call sites and callbacks named by `symbols` and IPI reasons by
    /// `printk` (the trace's printk strings); `span` is the trace's first and last event
    /// time, the whole-trace phase of a trace without phases.
    pub fn finish(
        mut self,
        symbols: &dyn Symbols,
        printk: &PrintkStrings,
        span: (u64, u64),
    ) -> Vec<IpiPhase> {
        // A phase without its end marker (trace cut short) ends at its last event.
        if let Some(phase) = self.current.take() {
            self.done.push(phase);
        }
        if self.done.is_empty() && !self.whole.is_empty() {
            let mut whole = std::mem::take(&mut self.whole);
            whole.label = IpiPhase::WHOLE_TRACE.to_string();
            (whole.start, whole.end) = span;
            self.done.push(whole);
        }
        let comms = &self.comms;
        let saw_send = self.saw_send;
        self.done
            .into_iter()
            .map(|mut p| {
                let (sends, counted_from) = if saw_send {
                    (std::mem::take(&mut p.sent), "ipi_send")
                } else if p.raised.ipis > 0 {
                    (std::mem::take(&mut p.raised), "ipi_raise")
                } else {
                    (Sends::default(), "")
                };
                let mut by_site: Vec<IpiSite> = sends
                    .by_site
                    .iter()
                    .map(|(&(site, callback), &ipis)| {
                        if counted_from == "ipi_raise" {
                            return IpiSite {
                                callsite: String::new(),
                                callback: String::new(),
                                reason: printk.name(callback),
                                ipis,
                            };
                        }
                        IpiSite {
                            callsite: symbols.frame(site),
                            callback: if callback == 0 {
                                String::new()
                            } else {
                                symbols.frame(callback)
                            },
                            reason: String::new(),
                            ipis,
                        }
                    })
                    .collect();
                by_site.sort_by(|a, b| {
                    b.ipis
                        .cmp(&a.ipis)
                        .then(a.callsite.cmp(&b.callsite))
                        .then(a.callback.cmp(&b.callback))
                        .then(a.reason.cmp(&b.reason))
                });
                by_site.truncate(TOP_SITES);
                let mut by_sender: Vec<IpiSender> = sends
                    .by_sender
                    .iter()
                    .map(|(&pid, &ipis)| IpiSender {
                        pid,
                        comm: comms.get(&pid).cloned().unwrap_or_else(|| "?".into()),
                        ipis,
                    })
                    .collect();
                by_sender.sort_by(|a, b| b.ipis.cmp(&a.ipis).then(a.pid.cmp(&b.pid)));
                by_sender.truncate(TOP_SENDERS);
                let mut by_syscall: Vec<IpiSyscall> = sends
                    .by_syscall
                    .iter()
                    .map(|(&id, &ipis)| IpiSyscall {
                        syscall: crate::syscalls::name(id),
                        ipis,
                    })
                    .collect();
                by_syscall.sort_by(|a, b| b.ipis.cmp(&a.ipis).then(a.syscall.cmp(&b.syscall)));
                let victim_work = top_work(
                    p.victim_work
                        .iter()
                        .map(|(&func, &work)| (symbols.frame(func), work)),
                );
                let handlers = top_work(p.handlers.iter().map(|(&reason, &work)| {
                    let name = match reason {
                        HandlerReason::Printk(address) => printk.name(address),
                        HandlerReason::Vector(vector) => vector.reason().to_string(),
                    };
                    (name, work)
                }));
                IpiPhase {
                    label: p.label,
                    duration_ns: p.end.saturating_sub(p.start),
                    ipis: sends.ipis,
                    counted_from: counted_from.to_string(),
                    csd_queued: p.csd_queued,
                    by_target: sends
                        .by_target
                        .iter()
                        .map(|(cpu, n)| (cpu.to_string(), *n))
                        .collect(),
                    by_site,
                    by_sender,
                    by_syscall,
                    victim_work,
                    handlers,
                }
            })
            .collect()
    }
}

/// Work run on target CPUs, (name, (calls, total ns)): the most time first, at most
/// [`TOP_SITES`].
fn top_work(work: impl Iterator<Item = (String, (u64, u64))>) -> Vec<IpiVictimWork> {
    let mut work: Vec<IpiVictimWork> = work
        .map(|(function, (calls, total_ns))| IpiVictimWork {
            function,
            calls,
            total_ns,
        })
        .collect();
    work.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then(a.function.cmp(&b.function))
    });
    work.truncate(TOP_SITES);
    work
}

impl crate::pass::Pass for IpiPass {
    fn reads(&self, tag: ViewTag, trace: crate::ViewTags) -> crate::pass::Reads {
        crate::pass::view_if(Self::wants(tag, trace))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        IpiPass::observe(self, event, kind)
    }
}
