//! A run's kernel trace as a Perfetto trace (protobuf `Trace` of `TracePacket`s with track
//! events), to open in the Perfetto UI.
//!
//! The raw trace directory is decoded as a stream and each event becomes at most a few
//! packets, written as it is made: memory holds what is open (the task on each CPU, each
//! task's lock waits, the phases) and the task and symbol names, never the events. What the
//! tracks hold is described in [`convert`]. Times are the trace's CLOCK_MONOTONIC
//! nanoseconds, the clock of the run's samples, declared by a clock snapshot and on every
//! timed packet.

mod convert;
mod names;
pub mod proto;
mod sink;

use std::io::Write;
use std::path::Path;

use vmscale_run::RunRecord;
use vmscale_trace::{DecodeError, DecodeSummary, Decoder, EventKind, Kallsyms};

use convert::Converter;
use names::Names;
use vmscale_analysis::HoldersPass;

/// Why a trace could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum PerfettoError {
    #[error("reading the trace: {0}")]
    Decode(#[from] DecodeError),
    #[error("the trace is on clock {0:?}, not mono (CLOCK_MONOTONIC)")]
    Clock(String),
    #[error("writing the Perfetto trace: {0}")]
    Write(#[from] std::io::Error),
}

/// What an export wrote, and what decoding the kernel trace saw.
#[derive(Debug, Clone, Default)]
pub struct PerfettoSummary {
    pub packets: u64,
    pub tracks: u64,
    /// Slices begun (each has its end: what is open at the trace's end closes there).
    pub slices: u64,
    pub instants: u64,
    /// IPI sender-to-target arrows.
    pub flows: u64,
    pub decode: DecodeSummary,
}

/// The kernel trace in `trace_dir` (a run's `trace/`) as a Perfetto trace into `out`.
/// With the run's `record`, locks are named as the analysis named them and the phases
/// track says which scenario ran.
pub fn write_perfetto<W: Write>(
    trace_dir: &Path,
    record: Option<&RunRecord>,
    out: W,
) -> Result<PerfettoSummary, PerfettoError> {
    let decoder = Decoder::open(trace_dir)?;
    // Without a clock the trace predates the field and was recorded on mono; any other
    // clock would put the slices on a time axis Perfetto cannot relate to the samples.
    if let Some(clock) = decoder.clock().filter(|c| *c != "mono") {
        return Err(PerfettoError::Clock(clock.to_string()));
    }
    // A trace directory without kallsyms still exports, with addresses in hex.
    let kallsyms = decoder.kallsyms().unwrap_or_else(|_| Kallsyms::default());
    let description = record.map(|r| format!("{} scenario, sweeping {}", r.scenario, r.sweep));
    let mut converter = Converter::new(
        std::io::BufWriter::new(out),
        Names::new(kallsyms, record),
        description,
    );
    let mut targets = Vec::new();
    let mut holders = HoldersPass::capturing(0, u64::MAX);
    let decode = decoder.for_each(|event| {
        let ts = event.ts();
        let kind = event.kind();
        holders.observe(&event, &kind);
        for hold in holders.drain_captured() {
            converter.hold(hold);
        }
        match kind {
            EventKind::SchedSwitch(s) => converter.switch(
                ts,
                event.cpu(),
                (s.prev_pid, &s.prev_comm.to_str()),
                (s.next_pid, &s.next_comm.to_str()),
            ),
            EventKind::SchedWaking(w)
            | EventKind::SchedWakeup(w)
            | EventKind::SchedWakeupNew(w) => {
                converter.name_task(w.pid, &w.comm.to_str());
                if matches!(kind, EventKind::SchedWaking(_)) {
                    converter.waking(ts, (event.cpu(), event.pid()), w.pid);
                }
            }
            EventKind::SysEnter(call) => {
                converter.sys_enter(ts, event.pid(), vmscale_analysis::syscalls::name(call.id))
            }
            EventKind::SysExit(_) => converter.sys_exit(ts, event.pid()),
            EventKind::ContentionBegin(b) => {
                converter.contention_begin(ts, event.pid(), b.lock_addr, b.flags)
            }
            EventKind::ContentionEnd(e) => {
                converter.contention_end(ts, event.pid(), e.lock_addr, e.ret)
            }
            EventKind::IpiSendCpu(ipi) => converter.ipi(
                ts,
                (event.cpu(), event.pid()),
                &[ipi.cpu],
                ipi.callsite,
                ipi.callback,
            ),
            EventKind::IpiSendCpumask(ipi) => {
                targets.clear();
                targets.extend(ipi.cpumask.iter());
                converter.ipi(
                    ts,
                    (event.cpu(), event.pid()),
                    &targets,
                    ipi.callsite,
                    ipi.callback,
                )
            }
            EventKind::Print(p) => converter.print(ts, &p.text()),
            _ => {}
        }
    })?;
    let (out, counts) = converter.finish()?;
    out.into_inner().map_err(|e| e.into_error())?;
    Ok(PerfettoSummary {
        packets: counts.packets,
        tracks: counts.tracks,
        slices: counts.slice_begins,
        instants: counts.instants,
        flows: counts.flows,
        decode,
    })
}

/// The Perfetto trace of `trace_dir` as bytes (see [`write_perfetto`]).
pub fn export_perfetto(
    trace_dir: &Path,
    record: Option<&RunRecord>,
) -> Result<Vec<u8>, PerfettoError> {
    let mut bytes = Vec::new();
    write_perfetto(trace_dir, record, &mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests;
