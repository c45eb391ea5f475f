//! `vmscale record`: trace the kernel while any command runs, or for a while.
//!
//! Like `perf record`: the command inherits the terminal; Ctrl-C reaches it too, and the
//! trace is kept when it exits. A SIGINT or SIGTERM sent to vmscale alone is passed on to
//! the command; the trace up to its end is kept, marked as interrupted, and vmscale exits
//! with 130. With `--duration`, Ctrl-C ends the recording early, as asked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmscale_scenario::PhaseHook;
use vmscale_trace::recorder::{default_events, RecordConfig};

use crate::args::RecordArgs;
use crate::commands::run::{execute, save, show, Measured, OnSignal, RunPlan};
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
    let mut interrupted_by = None;
    let plan = RunPlan {
        scenario: "record",
        sweep: "none",
        kvm: None,
        knobs,
        trace_config: config,
        on_signal: OnSignal::KeepTrace,
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
                let (outcome, signal) = run_command(&args.command, cancel.0);
                interrupted_by = signal;
                outcome
            };
            hook.measured_phase_ends("record")?;
            Ok(Vec::new())
        },
    )?;
    if !outcome.is_empty() {
        record.warnings.push(outcome);
    }
    let saved = save(Measured { dir, record }, &args.output)?;
    show(&saved, &args.output)?;
    match interrupted_by {
        Some(signal) => Err(Failure {
            message: format!(
                "interrupted by {}: the trace up to the command's end is kept in {}",
                crate::interrupt::name(signal),
                saved.dir.path.display()
            ),
            exit_code: crate::failure::EXIT_INTERRUPTED,
        }),
        None => Ok(()),
    }
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

/// How long a command may take to end after vmscale passed a signal on, before SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

/// Runs the command to completion; how it ended becomes a warning when it did not succeed.
/// A signal vmscale receives meanwhile is passed on to the command (a terminal's Ctrl-C
/// reaches both; a `kill` reaches only vmscale), and is returned so the run is marked.
fn run_command(command: &[String], interrupted: &AtomicBool) -> (String, Option<i32>) {
    let mut child = match std::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            return (
                format!("the traced command {} could not start: {e}", command[0]),
                None,
            )
        }
    };
    let mut forwarded: Option<(i32, Instant)> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        if forwarded.is_none() && interrupted.load(Ordering::Relaxed) {
            let signal = crate::interrupt::received().unwrap_or(libc::SIGTERM);
            // SAFETY: kill only sends a signal; the pid is our own unreaped child, so it
            // cannot have been reused by another process.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            forwarded = Some((signal, Instant::now()));
        }
        if let Some((_, at)) = forwarded {
            if at.elapsed() > GRACE {
                let _ = child.kill();
            }
        }
        // The command's own threads are the subject; this wakeup is vmscale's.
        std::thread::sleep(Duration::from_millis(20));
    };
    // A terminal's Ctrl-C may end the command before the loop saw the flag: still marked.
    let signal = forwarded.map(|(signal, _)| signal).or_else(|| {
        interrupted
            .load(Ordering::Relaxed)
            .then(crate::interrupt::received)
            .flatten()
    });
    let how = match status {
        Ok(status) if status.success() => String::new(),
        Ok(status) => format!("the traced command {} ended with {status}", command[0]),
        Err(e) => format!(
            "the traced command {} could not be waited for: {e}",
            command[0]
        ),
    };
    let outcome = match signal {
        Some(signal) => format!(
            "recording interrupted by {}, which the command received too{}",
            crate::interrupt::name(signal),
            if how.is_empty() {
                String::new()
            } else {
                format!("; {how}")
            }
        ),
        None => how,
    };
    (outcome, signal)
}
