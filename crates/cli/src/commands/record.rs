//! `vmscale record`: trace the kernel while any command runs, or for a while.
//!
//! Like `perf record`: the command inherits the terminal; Ctrl-C reaches it too, and the
//! trace is kept when it exits. With `--duration`, Ctrl-C ends the recording early.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vmscale_scenario::PhaseHook;
use vmscale_trace::recorder::{default_events, RecordConfig};

use crate::args::RecordArgs;
use crate::commands::run::{execute, save, show, Measured, RunPlan};
use crate::failure::Failure;
use crate::tracing::TraceArgs;

pub fn record(args: &RecordArgs) -> Result<(), Failure> {
    if let Some(d) = args.duration {
        if !(d > 0.0 && d <= 86_400.0) {
            return Err(Failure::usage(format!(
                "--duration must be between 0 and 86400 seconds (got {d})"
            )));
        }
    }
    let events = if args.events.is_empty() {
        // Every task's system calls would swamp the buffers; ask for them with -e.
        default_events()
            .into_iter()
            .filter(|e| !e.starts_with("raw_syscalls:"))
            .collect()
    } else {
        args.events.clone()
    };
    let config = RecordConfig {
        events: events.clone(),
        buffer_kib: args.buffer_kib,
        ..RecordConfig::default()
    };
    let trace = TraceArgs {
        no_trace: false,
        buffer_kib: args.buffer_kib,
        no_stacks: args.no_stacks,
        // A recording exists to explain something: name where lock holders sleep.
        sleep_stacks: !args.no_stacks,
        required: true,
    };
    let knobs = serde_json::json!({
        "events": events,
        "duration_s": args.duration,
        "command": args.command,
    });
    let mut outcome = String::new();
    let plan = RunPlan {
        scenario: "record",
        sweep: "none",
        kvm: None,
        knobs,
        trace_config: config,
    };
    let (dir, mut record) = execute(
        plan,
        &args.output,
        &trace,
        |hook: &mut dyn PhaseHook, _, cancel| {
            hook.measured_phase_begins("record")?;
            outcome = if args.command.is_empty() {
                wait_for(args.duration.unwrap_or(0.0), cancel.0)
            } else {
                run_command(&args.command)
            };
            hook.measured_phase_ends("record")?;
            Ok(Vec::new())
        },
    )?;
    if !outcome.is_empty() {
        record.warnings.push(outcome);
    }
    show(&save(Measured { dir, record }, &args.output)?, &args.output)?;
    Ok(())
}

/// Sleeps for `seconds` or until interrupted; an early stop is reported, not an error.
fn wait_for(seconds: f64, interrupted: &std::sync::atomic::AtomicBool) -> String {
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    while Instant::now() < until {
        if interrupted.load(Ordering::Relaxed) {
            return format!(
                "recording stopped early by a signal after {:.1} s of {seconds} s",
                start.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    String::new()
}

/// Runs the command to completion; how it ended becomes a warning when it did not succeed.
fn run_command(command: &[String]) -> String {
    match std::process::Command::new(&command[0])
        .args(&command[1..])
        .status()
    {
        Ok(status) if status.success() => String::new(),
        Ok(status) => format!("the traced command {} ended with {status}", command[0]),
        Err(e) => format!("the traced command {} could not start: {e}", command[0]),
    }
}
