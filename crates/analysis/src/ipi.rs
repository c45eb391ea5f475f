//! IPIs and cross-CPU calls per measured phase: who sent them, from which kernel call site,
//! asking which callback, to which CPUs.
//!
//! Phases are delimited by the scenario's trace_marker writes (`vmscale: begin <label>`,
//! `vmscale: end <label>`), so the counts belong to exactly the calls that were timed.
//! Memory: one aggregate per phase, bounded by call sites, senders and CPUs.

use std::collections::BTreeMap;

use foldhash::HashMap;

use vmscale_run::findings::{IpiSyscall, IpiVictimWork};
use vmscale_run::{IpiPhase, IpiSender, IpiSite};
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::EventKind;

use crate::symbols::Symbols;
use crate::task_slots::TaskSlots;

const BEGIN: &str = "vmscale: begin ";
const END: &str = "vmscale: end ";
const TOP_SITES: usize = 8;
const TOP_SENDERS: usize = 8;

#[derive(Default)]
struct PhaseAggregate {
    label: String,
    start: u64,
    end: u64,
    ipis: u64,
    csd_queued: u64,
    by_target: BTreeMap<u32, u64>,
    by_site: HashMap<(u64, u64), u64>,
    by_sender: HashMap<i32, u64>,
    by_syscall: HashMap<i64, u64>,
    /// csd function -> (calls, total ns) run on target CPUs.
    victim_work: HashMap<u64, (u64, u64)>,
}

#[derive(Default)]
pub struct IpiPass {
    current: Option<PhaseAggregate>,
    done: Vec<PhaseAggregate>,
    comms: HashMap<i32, String>,
    /// pid -> the system call it is in, if any (from raw_syscalls, where recorded for it):
    /// set at every sys_enter and sys_exit, so kept where the task runs.
    in_syscall: TaskSlots<Option<i64>>,
    /// CPU -> (function, entry timestamp) of the cross-CPU function it is running.
    running_csd: HashMap<u32, (u64, u64)>,
}

impl IpiPass {
    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        match *kind {
            EventKind::Print(print) => {
                let text = print.text();
                let text = text.trim_end();
                if let Some(label) = text.strip_prefix(BEGIN) {
                    self.close(event.ts());
                    self.current = Some(PhaseAggregate {
                        label: label.to_string(),
                        start: event.ts(),
                        ..PhaseAggregate::default()
                    });
                } else if text.starts_with(END) {
                    self.close(event.ts());
                }
            }
            EventKind::IpiSendCpu(ipi) => {
                self.count(event, std::iter::once(ipi.cpu), ipi.callsite, ipi.callback)
            }
            EventKind::IpiSendCpumask(ipi) => {
                self.count(event, ipi.cpumask.iter(), ipi.callsite, ipi.callback)
            }
            EventKind::CsdQueueCpu(_) => {
                if let Some(phase) = &mut self.current {
                    phase.csd_queued += 1;
                }
            }
            EventKind::CsdFunctionEntry(f) => {
                self.running_csd.insert(event.cpu(), (f.func, event.ts()));
            }
            EventKind::CsdFunctionExit(f) => {
                if let Some((func, start)) = self.running_csd.remove(&event.cpu()) {
                    if let (Some(phase), true) = (&mut self.current, func == f.func) {
                        let work = phase.victim_work.entry(func).or_default();
                        work.0 += 1;
                        work.1 += event.ts().saturating_sub(start);
                    }
                }
            }
            EventKind::SysEnter(enter) => {
                *self.in_syscall.on(event.cpu(), event.pid()) = Some(enter.id);
            }
            EventKind::SysExit(_) => *self.in_syscall.on(event.cpu(), event.pid()) = None,
            EventKind::SchedSwitch(s) => {
                self.comms.entry(s.prev_pid).or_insert_with(|| {
                    String::from_utf8_lossy(s.prev_comm.as_bytes()).into_owned()
                });
            }
            _ => {}
        }
    }

    fn count(
        &mut self,
        event: &Event<'_>,
        targets: impl Iterator<Item = u32>,
        callsite: u64,
        callback: u64,
    ) {
        let Some(phase) = &mut self.current else {
            return;
        };
        let mut n = 0;
        for cpu in targets {
            *phase.by_target.entry(cpu).or_default() += 1;
            n += 1;
        }
        phase.ipis += n;
        *phase.by_site.entry((callsite, callback)).or_default() += n;
        *phase.by_sender.entry(event.pid()).or_default() += n;
        if let Some(id) = *self.in_syscall.on(event.cpu(), event.pid()) {
            *phase.by_syscall.entry(id).or_default() += n;
        }
    }

    fn close(&mut self, ts: u64) {
        if let Some(mut phase) = self.current.take() {
            phase.end = ts;
            self.done.push(phase);
        }
    }

    pub fn finish(mut self, symbols: &dyn Symbols) -> Vec<IpiPhase> {
        // A phase without its end marker (trace cut short) ends at its last event.
        if let Some(phase) = self.current.take() {
            self.done.push(phase);
        }
        let comms = &self.comms;
        self.done
            .into_iter()
            .map(|p| {
                let mut by_site: Vec<IpiSite> = p
                    .by_site
                    .iter()
                    .map(|(&(site, callback), &ipis)| IpiSite {
                        callsite: symbols.frame(site),
                        callback: if callback == 0 {
                            String::new()
                        } else {
                            symbols.frame(callback)
                        },
                        ipis,
                    })
                    .collect();
                by_site.sort_by(|a, b| b.ipis.cmp(&a.ipis).then(a.callsite.cmp(&b.callsite)));
                by_site.truncate(TOP_SITES);
                let mut by_sender: Vec<IpiSender> = p
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
                let mut by_syscall: Vec<IpiSyscall> = p
                    .by_syscall
                    .iter()
                    .map(|(&id, &ipis)| IpiSyscall {
                        syscall: crate::syscalls::name(id),
                        ipis,
                    })
                    .collect();
                by_syscall.sort_by(|a, b| b.ipis.cmp(&a.ipis).then(a.syscall.cmp(&b.syscall)));
                let mut victim_work: Vec<IpiVictimWork> = p
                    .victim_work
                    .iter()
                    .map(|(&func, &(calls, total_ns))| IpiVictimWork {
                        function: symbols.frame(func),
                        calls,
                        total_ns,
                    })
                    .collect();
                victim_work.sort_by_key(|w| std::cmp::Reverse(w.total_ns));
                victim_work.truncate(TOP_SITES);
                IpiPhase {
                    label: p.label,
                    duration_ns: p.end.saturating_sub(p.start),
                    ipis: p.ipis,
                    csd_queued: p.csd_queued,
                    by_target: p
                        .by_target
                        .iter()
                        .map(|(cpu, n)| (cpu.to_string(), *n))
                        .collect(),
                    by_site,
                    by_sender,
                    by_syscall,
                    victim_work,
                }
            })
            .collect()
    }
}
