//! `vmscale run mlock` (case 2).

use vmscale_kvm::KvmSystem;
use vmscale_run::RunRecord;
use vmscale_scenario::mlock::{self, MlockKnobs};
use vmscale_scenario::{Cancel, PhaseHook};

use crate::args::{MlockArgs, OutputArgs};
use crate::commands::run::{
    execute, save, scenario_trace_config, show, Measured, OnSignal, RunPlan,
};
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::{current_tid, TraceArgs};

pub fn command(args: &MlockArgs) -> Result<(), Failure> {
    let knobs = MlockKnobs {
        calls: args.calls,
        modes: mlock::Mode::parse_list(&args.mode)?,
        busy: args.busy.clone(),
        buffer_kib: args.size_kib,
    };
    show(&measure(knobs, &args.output, &args.trace)?, &args.output)?;
    Ok(())
}

pub(crate) fn measure(
    knobs: MlockKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
    knobs.validate()?;
    let plan = RunPlan {
        scenario: "mlock",
        sweep: "busy",
        kvm: KvmSystem::open().ok().map(|s| s.facts()),
        knobs: serde_json::to_value(&knobs).expect("knobs serialize"),
        trace_config: scenario_trace_config(),
        on_signal: OnSignal::DiscardRun,
    };
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        mlock::run(&knobs, bar, cancel, hook)
    };
    let (dir, mut record) = execute(plan, output, trace, measure)?;
    add_ipi_notes(&mut record, &knobs);
    save(Measured { dir, record }, output)
}

/// Puts the trace's IPI count for each mode's phase beside the case's formula.
fn add_ipi_notes(record: &mut RunRecord, knobs: &MlockKnobs) {
    let cpus = record.host.online_cpus;
    let Some(trace) = record.trace.clone() else {
        for series in record.points.iter_mut().flat_map(|p| p.series.iter_mut()) {
            series.notes.push(format!(
                "IPIs not measured (no trace); the case's formula, calls x (CPUs - 1), predicts {}",
                knobs.calls * cpus.saturating_sub(1)
            ));
        }
        return;
    };
    let measuring = current_tid() as i32;
    for point in &mut record.points {
        for series in &mut point.series {
            let Ok(modes) = mlock::Mode::parse_list(std::slice::from_ref(&series.name)) else {
                continue;
            };
            let label = mlock::phase_label(modes[0], point.n as usize);
            let Some(phase) = trace.ipis.iter().find(|p| p.label == label) else {
                series
                    .notes
                    .push("the trace has no phase for these calls: IPIs unknown".into());
                continue;
            };
            let sent: u64 = phase
                .by_sender
                .iter()
                .filter(|s| s.pid == measuring)
                .map(|s| s.ipis)
                .sum();
            let calls = knobs.calls as f64;
            series.notes.push(format!(
                "measured: the calling thread sent {sent} IPIs in {} calls ({:.3} per call; the case's formula calls x (CPUs - 1) = {}); all tasks sent {} during the phase and queued {} cross-CPU calls",
                knobs.calls,
                sent as f64 / calls,
                knobs.calls * cpus.saturating_sub(1),
                phase.ipis,
                phase.csd_queued,
            ));
            if phase.ipis > 0 {
                let targets: Vec<String> = phase
                    .by_target
                    .iter()
                    .map(|(cpu, n)| format!("cpu{cpu} {n}"))
                    .collect();
                let sites: Vec<String> = phase
                    .by_site
                    .iter()
                    .take(3)
                    .map(|s| {
                        let callback = if s.callback.is_empty() {
                            "none"
                        } else {
                            &s.callback
                        };
                        format!("{} from {} (callback {callback})", s.ipis, s.callsite)
                    })
                    .collect();
                let syscalls: Vec<String> = phase
                    .by_syscall
                    .iter()
                    .map(|s| format!("{} {}", s.syscall, s.ipis))
                    .collect();
                series.notes.push(format!(
                    "IPIs by target: {}; by call site: {}; by system call: {}",
                    targets.join(", "),
                    sites.join(", "),
                    if syscalls.is_empty() {
                        "-".to_string()
                    } else {
                        syscalls.join(", ")
                    }
                ));
                if let Some(work) = phase.victim_work.first() {
                    series.notes.push(format!(
                        "cost to the target CPUs: {} ran {} times, {:.1} us in all ({:.2} us per call)",
                        work.function,
                        work.calls,
                        work.total_ns as f64 / 1e3,
                        work.total_ns as f64 / 1e3 / knobs.calls as f64
                    ));
                }
            }
        }
    }
}
