//! Streaming analyses over a run's decoded kernel events.
//!
//! Each analysis is a pass that observes events in time order with memory bounded by the
//! number of locks, tasks and distinct stacks, never by the number of events; [`analyse`]
//! decodes a trace directory once and feeds every pass.

pub mod aggregate;
pub mod breakdown;
mod cause_names;
pub mod contention;
pub mod excerpt;
pub mod holders;
pub mod import;
mod integrity;
pub use integrity::file_warnings as trace_file_warnings;
pub mod ipi;
pub mod naming;
pub mod on_cpu;
mod open_waits;
mod pass;
mod passes;
pub mod run_section;
mod runqueue;
pub mod sampled_waits;
pub mod spinlocks;
mod stacks;
pub mod subject;
pub mod symbols;
pub mod syscalls;
mod task_names;
mod task_slots;
mod timeline;
pub mod verdict;
pub mod vmm;
pub mod waits;
mod waker_groups;
mod what_if;
mod workers;

use std::path::Path;

use vmscale_run::TraceSection;
use vmscale_trace::{DecodeError, Decoder, Kallsyms};

pub use breakdown::BreakdownPass;
pub use contention::{ContentionFindings, ContentionPass};
pub use holders::HoldersPass;
pub use spinlocks::SpinLocksPass;
pub use symbols::Symbols;

/// The views a trace can hold at all: those its formats give. An event of a type without a
/// format gets no view, so a pass that reads one view only for what it says about another
/// (a task's system call, kept for the IPIs sent inside it) has no use for it in a trace
/// that cannot hold the other.
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewTags(u32);

impl ViewTags {
    /// Every view a trace with `catalog`'s formats can hold.
    pub fn of(catalog: &vmscale_trace::decode::catalog::EventCatalog) -> ViewTags {
        ViewTags(catalog.iter().fold(0, |held, event_type| {
            held | Self::bit(event_type.view_tag())
        }))
    }

    #[inline]
    pub fn holds(self, tag: vmscale_trace::ViewTag) -> bool {
        self.0 & Self::bit(tag) != 0
    }

    fn bit(tag: vmscale_trace::ViewTag) -> u32 {
        // ViewTag has fewer than 32 variants (checked by the test below).
        1 << (tag as u32)
    }
}

/// Everything the passes found in one trace, plus what the decode itself saw.
pub struct TraceAnalysis {
    pub contention: ContentionFindings,
    pub ipis: Vec<vmscale_run::IpiPhase>,
    /// Sleeping locks seen from their holders, worst first.
    pub holders: Vec<vmscale_run::findings::LockHolders>,
    /// The measuring thread's operations per measured phase, split by cause.
    pub breakdown: Vec<vmscale_run::findings::PhaseBreakdown>,
    /// Contended spinning locks by wait mode, worst first.
    pub spinlocks: Vec<vmscale_run::findings::SpinLockWaits>,
    /// The trace around its worst wait, for the HTML timeline.
    pub timeline: Option<vmscale_run::findings::TimelineExcerpt>,
    /// Where the recorded command's tasks spent their time ([`Scope::subject`]).
    pub subject: Option<vmscale_run::findings::SubjectTime>,
    /// Where released vCPU threads spent the time until KVM_RUN ([`Scope::vcpu_resume_windows`]).
    pub vcpu_resume: Option<vmscale_run::findings::SubjectTime>,
    /// Where the calls timed on several threads went ([`Scope::timed_calls`]).
    pub timed_calls: Option<vmscale_run::findings::SubjectTime>,
    /// What the VMM did during each of its series' samples ([`Scope::vmm`]).
    pub vmm: Vec<vmscale_run::findings::VmmSamples>,
    /// Every task of a recorded command's subject (none for a system-wide one).
    pub subject_tids: Vec<i32>,
    /// The on-CPU samples taken while their thread waited for a lock (a spinning waiter):
    /// the lock's wait, not the thread's own work.
    pub samples_in_lock_waits: sampled_waits::SamplesInWaits,
    pub decoded_events: u64,
    /// Events per type, `system:name`.
    pub events_seen: std::collections::BTreeMap<String, u64>,
    /// From the first decoded event to the last.
    pub span_ns: u64,
    /// No format for lock:contention_begin: contention cannot be decoded at all.
    pub lock_format_missing: bool,
    /// Pages the kernel marked as following lost events, and damaged pages skipped.
    pub missed_events: u64,
    pub corrupt_pages: u64,
    pub decode_errors: Vec<String>,
    /// What the trace lacks and what that leaves unknown, one sentence each: a truncated
    /// or missing per-CPU file, missing or damaged formats, kallsyms or meta.json.
    pub warnings: Vec<String>,
    /// The warning that the trace misses context switches, where it does (also in
    /// `warnings`).
    pub missed_switches: Option<String>,
}

/// Decodes the trace directory `dir` and runs every analysis over it. A directory that is
/// damaged or incomplete is analysed as far as it goes, and `warnings` says what is missing
/// and what that leaves unknown; only what nothing can be decoded without (header_page,
/// header_event) is an error.
pub fn analyse(dir: &Path) -> Result<TraceAnalysis, DecodeError> {
    analyse_scoped(dir, &Scope::default())
}

/// What the run knows about what its trace should explain.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Tasks of another vmscale run traced at the same time: their lock waits, stacks, IPIs
    /// and system calls are left out. Their scheduling events stay, since they still place
    /// every task on or off its CPU.
    pub excluded_tids: Vec<u32>,
    /// The measuring thread's timed samples, (start, end) on the trace's clock: when given,
    /// the breakdown explains these windows and nothing the thread did between them.
    pub timed_windows: Vec<(u64, u64)>,
    /// The tasks of a recorded command or process: they and every task they create are
    /// the subject whose time is split by cause ([`subject`]). Empty: no subject.
    pub subject: Vec<u32>,
    /// Released vCPU threads until they entered KVM_RUN again, (task, start, end): where
    /// that time went is split by cause like a subject's ([`subject::SubjectPass::within`]).
    pub vcpu_resume_windows: Vec<(u32, u64, u64)>,
    /// Samples timed on several threads, (thread, start, end): where exactly those calls'
    /// time went is split by cause like a subject's.
    pub timed_calls: Vec<(u32, u64, u64)>,
    /// Series a VMM carried out ([`vmm`]): its threads and the samples' windows.
    pub vmm: Vec<vmm::VmmSeriesScope>,
    /// Every task the trace shows is the subject (a system-wide recording), its time
    /// grouped by process too; `subject` is then unused.
    pub every_task: bool,
    /// Task -> thread group id, for that grouping. [`analyse_scoped`] reads it from the
    /// trace directory's `tgids` when the recorder saved one.
    pub tgids: std::collections::HashMap<i32, i32>,
}

/// `pid tgid` pairs from a directory's [`vmscale_trace::record::recorder::TGIDS_FILE`]; empty when it has none. Lines that
/// are not two numbers are skipped: the file only groups tasks, it proves nothing else.
pub fn read_tgids(dir: &Path) -> std::collections::HashMap<i32, i32> {
    let Ok(text) = std::fs::read_to_string(dir.join(vmscale_trace::record::recorder::TGIDS_FILE))
    else {
        return Default::default();
    };
    text.lines()
        .filter_map(|line| {
            let (pid, tgid) = line.trim().split_once(' ')?;
            Some((pid.parse().ok()?, tgid.trim().parse().ok()?))
        })
        .filter(|&(pid, tgid): &(i32, i32)| pid > 0 && tgid > 0)
        .collect()
}

/// [`analyse`] within `scope`.
pub fn analyse_scoped(dir: &Path, scope: &Scope) -> Result<TraceAnalysis, DecodeError> {
    analyse_dir(dir, scope, false)
}

/// [`analyse_scoped`] with every event handed to every pass: the reference that routing
/// events by view (what every other entry point does) is tested against.
#[doc(hidden)]
pub fn analyse_scoped_unrouted(dir: &Path, scope: &Scope) -> Result<TraceAnalysis, DecodeError> {
    analyse_dir(dir, scope, true)
}

fn analyse_dir(
    dir: &Path,
    scope: &Scope,
    every_event_to_every_pass: bool,
) -> Result<TraceAnalysis, DecodeError> {
    let (decoder, damage) = Decoder::open_damaged(dir)?;
    let (symbols, kallsyms) = integrity::load_kallsyms(dir);
    let with_tgids;
    let scope = if scope.tgids.is_empty() {
        with_tgids = Scope {
            tgids: read_tgids(dir),
            ..scope.clone()
        };
        &with_tgids
    } else {
        scope
    };
    let mut analysis = analyse_routed(
        &decoder,
        &symbols,
        scope,
        sampled_waits::SampledWaits::load(dir),
        every_event_to_every_pass,
    )?;
    let label = integrity::dir_label(dir);
    let summary = decoder.last_summary().unwrap_or_default();
    // The directory's warnings say what its damage cost (unknown event types among it);
    // what the events themselves show of the trace's gaps stays.
    analysis.warnings =
        integrity::dir_warnings(&label, &decoder, &damage, kallsyms.as_ref(), &summary);
    analysis.warnings.extend(analysis.missed_switches.clone());
    Ok(analysis)
}

/// Runs every analysis over a decoder's events, naming addresses with `symbols`.
pub fn analyse_with(decoder: &Decoder, symbols: &Kallsyms) -> Result<TraceAnalysis, DecodeError> {
    analyse_excluding(decoder, symbols, &Scope::default())
}

/// [`analyse_with`] within `scope` (see [`Scope`]).
pub fn analyse_excluding(
    decoder: &Decoder,
    symbols: &Kallsyms,
    scope: &Scope,
) -> Result<TraceAnalysis, DecodeError> {
    analyse_routed(decoder, symbols, scope, None, false)
}

/// [`analyse_excluding`], with every event handed to every pass when
/// `every_event_to_every_pass`.
fn analyse_routed(
    decoder: &Decoder,
    symbols: &Kallsyms,
    scope: &Scope,
    sampled_waits: Option<sampled_waits::SampledWaits>,
    every_event_to_every_pass: bool,
) -> Result<TraceAnalysis, DecodeError> {
    use vmscale_trace::EventKind;
    let mut excluded: std::collections::HashSet<i32> =
        scope.excluded_tids.iter().map(|&t| t as i32).collect();
    // An excluded process's threads go with it.
    let threads: Vec<i32> = scope
        .tgids
        .iter()
        .filter(|(_, tgid)| excluded.contains(tgid))
        .map(|(&pid, _)| pid)
        .collect();
    excluded.extend(threads);
    let printk = decoder.printk_strings();
    let async_calls = cause_names::async_cross_calls(symbols);
    let arch = syscalls::Arch::of(symbols);
    let within = |windows: &[(u32, u64, u64)]| {
        (!windows.is_empty()).then(|| {
            subject::SubjectPass::within(
                windows
                    .iter()
                    .map(|&(tid, start, end)| (tid as i32, start, end))
                    .collect(),
            )
            .with_async_calls(&async_calls)
            .with_syscall_arch(arch)
        })
    };
    let mut passes = passes::PassSet {
        contention: ContentionPass::new(syscalls::Arch::of(symbols)),
        ipis: ipi::IpiPass::default(),
        holders: HoldersPass::default().with_wakeup_sites(symbols),
        breakdown: BreakdownPass::timed(scope.timed_windows.clone())
            .with_async_calls(&async_calls)
            .with_processes(scope.tgids.clone()),
        spinlocks: SpinLocksPass::default(),
        subject: if scope.every_task {
            Some(
                subject::SubjectPass::every_task(excluded.iter().copied())
                    .with_processes(
                        scope
                            .tgids
                            .iter()
                            .map(|(&pid, &tgid)| (pid, tgid))
                            .collect(),
                    )
                    .with_async_calls(&async_calls)
                    .with_syscall_arch(arch),
            )
        } else {
            (!scope.subject.is_empty()).then(|| {
                subject::SubjectPass::new(scope.subject.iter().map(|&tid| tid as i32).collect())
                    .with_async_calls(&async_calls)
                    .with_syscall_arch(arch)
            })
        },
        vcpu_resume: within(&scope.vcpu_resume_windows),
        timed_calls: within(&scope.timed_calls).map(subject::SubjectPass::of_processes),
        vmm: (!scope.vmm.is_empty())
            .then(|| vmm::VmmPass::new(scope.vmm.clone(), syscalls::Arch::of(symbols))),
        sampled_waits,
    };
    let (mut first_ts, mut last_ts) = (None, 0);
    // Per event type id: how many the trace holds (sized for every id with a format).
    let mut seen: Vec<u64> = vec![0; decoder.catalog().id_bound()];
    let routes = passes::Routes::new(decoder.catalog(), &passes, every_event_to_every_pass);
    let summary = decoder.for_each_overlapped(|event| {
        // Events come in time order.
        first_ts.get_or_insert(event.ts());
        last_ts = event.ts();
        match seen.get_mut(event.id() as usize) {
            Some(count) => *count += 1,
            None => count_beyond(&mut seen, event.id()),
        }
        let route = routes.of(event.id());
        if !excluded.is_empty() && !route.sched && excluded.contains(&event.pid()) {
            return;
        }
        // The typed view is read once, and only when a pass reads it, then shared.
        let kind = if route.view {
            event.kind()
        } else {
            EventKind::Other
        };
        passes.observe(route, &event, &kind);
    })?;
    let passes::PassSet {
        contention,
        ipis,
        holders,
        breakdown,
        spinlocks,
        subject,
        vcpu_resume,
        timed_calls,
        vmm,
        sampled_waits,
    } = passes;
    let contention = contention.finish(symbols);
    let missed_switches = integrity::missed_switches_warning(holders.missed_switches());
    let holders = holders.finish(symbols, &contention.locks);
    let timeline = match timeline_focus(&contention, &holders) {
        Some(focus) => Some(timeline(decoder, focus, &contention)?),
        None => None,
    };
    let subject_tids = subject.as_ref().map(|s| s.tids()).unwrap_or_default();
    Ok(TraceAnalysis {
        subject_tids,
        samples_in_lock_waits: sampled_waits.map(|s| s.finish()).unwrap_or_default(),
        subject: subject.and_then(|s| s.finish(symbols, &contention.locks, &holders)),
        vcpu_resume: vcpu_resume.and_then(|s| s.finish(symbols, &contention.locks, &holders)),
        timed_calls: timed_calls.and_then(|s| s.finish(symbols, &contention.locks, &holders)),
        vmm: vmm.map(vmm::VmmPass::finish).unwrap_or_default(),
        timeline,
        holders,
        breakdown: breakdown.finish(symbols, &contention.locks),
        spinlocks: spinlocks.finish(&contention.locks),
        contention,
        ipis: ipis.finish(symbols, &printk, (first_ts.unwrap_or(0), last_ts)),
        decoded_events: summary.events(),
        events_seen: seen
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .filter_map(|(id, &n)| {
                let t = decoder.catalog().get(id as u16)?;
                Some((format!("{}:{}", t.system, t.name()), n))
            })
            .collect(),
        span_ns: first_ts.map_or(0, |first| last_ts.saturating_sub(first)),
        lock_format_missing: decoder.catalog().find("lock", "contention_begin").is_none(),
        missed_events: summary.missed_events(),
        corrupt_pages: summary.corrupt_pages(),
        warnings: integrity::unknown_types_warning(&summary)
            .into_iter()
            .chain(missed_switches.clone())
            .collect(),
        missed_switches,
        decode_errors: summary.errors,
    })
}

impl TraceAnalysis {
    /// Fills the findings into a run's trace section.
    pub fn fill(self, section: &mut TraceSection) {
        section.decoded_events = self.decoded_events;
        section.events_seen = self.events_seen;
        section.span_ns = self.span_ns;
        section.lock_format_missing = self.lock_format_missing;
        section.stack_cost = self.contention.stack_cost;
        section.contention = self.contention.locks;
        section.ipis = self.ipis;
        section.holders = self.holders;
        section.breakdown = self.breakdown;
        section.spinlocks = self.spinlocks;
        section.timeline = self.timeline;
        section.subject = self.subject;
        section.vcpu_resume = self.vcpu_resume;
        section.timed_calls = self.timed_calls;
        section.vmm = self.vmm;
    }
}

/// Counts an event of type `id` that has no format, past the end of `seen`.
#[cold]
fn count_beyond(seen: &mut Vec<u64>, id: u16) {
    seen.resize(id as usize + 1, 0);
    seen[id as usize] += 1;
}

/// The wait a timeline should show: the longest on the sleeping lock whose holders cost
/// most, else on the most contended lock.
pub fn timeline_focus(
    contention: &ContentionFindings,
    holders: &[vmscale_run::findings::LockHolders],
) -> Option<excerpt::Focus> {
    let (addr, name, longest) = holders
        .iter()
        .map(|h| (h.lock_addr, &h.name))
        .chain(contention.locks.iter().map(|l| (l.lock_addr, &l.name)))
        .find_map(|(addr, name)| Some((addr, name, contention.longest_waits.get(&addr)?)))?;
    Some(excerpt::Focus {
        lock: addr,
        lock_name: name.clone(),
        pid: longest.pid,
        comm: contention
            .comms
            .get(&longest.pid)
            .cloned()
            .unwrap_or_else(|| "?".into()),
        start: longest.start,
        end: longest.end,
    })
}

/// A second pass over the trace, keeping only the window around `focus`.
fn timeline(
    decoder: &Decoder,
    focus: excerpt::Focus,
    contention: &ContentionFindings,
) -> Result<vmscale_run::findings::TimelineExcerpt, DecodeError> {
    let names = contention
        .locks
        .iter()
        .map(|l| (l.lock_addr, l.name.clone()));
    let mut pass = excerpt::ExcerptPass::new(focus, names);
    // The first pass already counted what the decode could not read; this one only stops
    // on what ends a decode, and stops early once the window is complete.
    let mut events = decoder.events()?;
    while let Some(next) = events.next_event() {
        match next {
            Ok(event) => pass.observe(&event, &event.kind()),
            Err(error) if error.is_fatal() => return Err(error),
            Err(_) => {}
        }
        if pass.done() {
            break;
        }
    }
    Ok(pass.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../trace/tests/fixtures")
            .join(name)
    }

    #[test]
    fn view_tags_fit_their_bits() {
        use vmscale_trace::ViewTag;
        assert!((ViewTag::Other as u32) < 32);
        let catalog = Decoder::open(fixture("overrun")).unwrap();
        let held = ViewTags::of(catalog.catalog());
        assert!(held.holds(ViewTag::SysEnter) && held.holds(ViewTag::Print));
        assert!(!held.holds(ViewTag::IpiSendCpu) && !held.holds(ViewTag::ContentionBegin));
    }
}
