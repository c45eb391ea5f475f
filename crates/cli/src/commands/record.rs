//! `vmscale record`: trace the kernel while any command runs, or for a while.
//!
//! Like `perf record`: the command inherits the terminal; Ctrl-C reaches it too, and the
//! trace is kept when it exits. A SIGINT or SIGTERM sent to vmscale alone is passed on to
//! the command; the trace up to its end is kept, marked as interrupted, and vmscale exits
//! with 130. With `--duration`, Ctrl-C ends the recording early, as asked.
//!
//! With `--pid`, like `perf record -p`: a running process is the subject. Every task is
//! still traced (a lock's holder may be anyone), its threads' system calls too, and the
//! recording ends at Ctrl-C, at `--duration` or when the process exits. vmscale never
//! signals a process it did not start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmscale_scenario::PhaseHook;
use vmscale_trace::record::recorder::{default_events, RecordConfig};

use vmscale_run::findings::CommandUsage;

use crate::args::RecordArgs;
use crate::commands::run::{execute, save, show, Measured, Measurement, OnSignal, RunPlan};
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
    let target = args.pid.map(Target::find).transpose()?;
    if let Some(program) = args.command.first() {
        check_startable(program)?;
    }
    let events = if !args.events.is_empty() {
        args.events.clone()
    } else if target.is_some() {
        // Filtered to the process's threads below, system calls stay few.
        default_events()
    } else {
        // Every task's system calls would swamp the buffers (ask for them with -e); their
        // ioctls, filtered below, are few and tell which lock an ioctl waits on.
        default_events()
    };
    let config = RecordConfig {
        events: events.clone(),
        buffer_kib: args.buffer_kib,
        // Its main thread too: a VMM's main loop makes the calls a QMP command causes.
        syscall_tids: target
            .as_ref()
            .map(|t| {
                std::iter::once(t.stamp.pid)
                    .chain(t.threads.clone())
                    .collect()
            })
            .unwrap_or_default(),
        // Which ioctl a task was in names the lock it waited on (kvm_vm_ioctl takes
        // kvm->slots_lock or kvm->lock by command), in every task.
        syscall_ids: if args.events.is_empty() {
            vec![libc::SYS_ioctl]
        } else {
            Vec::new()
        },
        ..RecordConfig::default()
    };
    let trace = TraceArgs {
        no_trace: false,
        buffer_kib: args.buffer_kib,
        no_stacks: args.no_stacks,
        // A recording exists to explain something: name where lock holders sleep.
        sleep_stacks: !args.no_stacks,
        no_sleep_stacks: false,
        no_sample: args.no_sample,
        sample_hz: args.sample_hz,
        aggregate: args.aggregate,
        required: true,
    };
    // Whose time an aggregated recording follows live: the process's threads, the command
    // (from its creation: run_command names it), or every task.
    let subject = match (&target, args.command.is_empty()) {
        (Some(target), _) => vmscale_trace::record::bpf::Subject::Roots(
            std::iter::once(target.stamp.pid)
                .chain(target.threads.iter().copied())
                .collect(),
        ),
        (None, false) => vmscale_trace::record::bpf::Subject::Roots(Vec::new()),
        (None, true) => vmscale_trace::record::bpf::Subject::EveryTask,
    };
    let mut knobs = serde_json::json!({
        "events": events,
        "duration_s": args.duration,
        "command": args.command,
    });
    if let Some(target) = &target {
        knobs["pid"] = target.stamp.pid.into();
        knobs["comm"] = target.comm.clone().into();
    }
    let mut outcome = String::new();
    let mut interrupted_by = None;
    let plan = RunPlan {
        scenario: "record",
        sweep: "none",
        kvm: None,
        knobs,
        trace_config: config,
        subject,
        on_signal: OnSignal::KeepTrace,
    };
    let (dir, mut record) = execute(
        plan,
        &args.output,
        &trace,
        |hook: &mut dyn PhaseHook, _, cancel| {
            hook.measured_phase_begins("record")?;
            let mut command = None;
            outcome = if let Some(target) = &target {
                let (outcome, usage) = target.follow(args.duration, &cancel.0);
                command = Some(usage);
                outcome
            } else if args.command.is_empty() {
                wait_for(args.duration.unwrap_or(0.0), &cancel.0)
            } else {
                let ran = run_command(&args.command, &cancel.0, hook)?;
                interrupted_by = ran.signal;
                command = ran.usage;
                ran.outcome
            };
            hook.measured_phase_ends("record")?;
            Ok(Measurement {
                points: Vec::new(),
                command,
            })
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

/// A running process to attach to.
struct Target {
    stamp: vmscale_run::ProcessStamp,
    comm: String,
    /// Its threads when recording began.
    threads: Vec<u32>,
}

/// Clock ticks (of /proc's CPU times) per second.
fn ticks_per_second() -> u64 {
    vmscale_sys::clock_ticks_per_second()
}

impl Target {
    fn find(pid: u32) -> Result<Target, Failure> {
        if pid == std::process::id() {
            return Err(Failure::usage("--pid names vmscale itself"));
        }
        let gone = || Failure::usage(format!("--pid {pid}: no such process"));
        let start_ticks = vmscale_run::owner::process_start_ticks(pid).ok_or_else(gone)?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_err(|_| gone())?
            .trim_end()
            .to_string();
        let mut threads: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|_| gone())?
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse().ok())
            .filter(|&tid| tid != pid)
            .collect();
        threads.sort_unstable();
        Ok(Target {
            stamp: vmscale_run::ProcessStamp { pid, start_ticks },
            comm,
            threads,
        })
    }

    /// User and system CPU time of the whole process so far (fields 14 and 15 of
    /// /proc/PID/stat), while it is still the process attached to.
    fn cpu_ns(&self) -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.stamp.pid)).ok()?;
        if !self.stamp.is_alive() {
            return None;
        }
        let after_comm = &stat[stat.rfind(')')? + 1..];
        // A zombie has exited: its parent has not reaped it yet.
        if matches!(after_comm.split_whitespace().next(), Some("Z" | "X")) {
            return None;
        }
        let mut fields = after_comm.split_whitespace().skip(11);
        let ns = |ticks: u64| ticks * 1_000_000_000 / ticks_per_second();
        let user = ns(fields.next()?.parse().ok()?);
        let system = ns(fields.next()?.parse().ok()?);
        Some((user, system))
    }

    /// Waits for the end of the recording: `seconds` if given, a signal, or the process's
    /// exit. Returns how it ended when that was not as asked, and the CPU time the process
    /// used meanwhile (up to its last reading, if it exited).
    fn follow(&self, seconds: Option<f64>, interrupted: &AtomicBool) -> (String, CommandUsage) {
        let start = Instant::now();
        let until = seconds.map(|s| start + Duration::from_secs_f64(s));
        let first = self.cpu_ns().unwrap_or_default();
        let mut last = first;
        let outcome = loop {
            match self.cpu_ns() {
                Some(now) => last = now,
                None => {
                    break format!(
                        "process {} ({}) exited after {:.1} s of recording; the recording ended with it",
                        self.stamp.pid,
                        self.comm,
                        start.elapsed().as_secs_f64()
                    )
                }
            }
            if interrupted.load(Ordering::Relaxed) {
                break match seconds {
                    Some(s) => format!(
                        "recording stopped early by a signal after {:.1} s of {s} s",
                        start.elapsed().as_secs_f64()
                    ),
                    None => String::new(),
                };
            }
            if until.is_some_and(|until| Instant::now() >= until) {
                break String::new();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let usage = CommandUsage {
            pid: self.stamp.pid,
            threads: self.threads.clone(),
            user_ns: last.0.saturating_sub(first.0),
            system_ns: last.1.saturating_sub(first.1),
        };
        (outcome, usage)
    }
}

/// How long a command may take to end after vmscale passed a signal on, before SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

/// How the traced command ended.
struct Ran {
    /// Empty when it succeeded; else how it failed, as a warning.
    outcome: String,
    /// The signal vmscale received and passed on, if any.
    signal: Option<i32>,
    /// Its process and CPU time, once reaped.
    usage: Option<CommandUsage>,
}

/// Reaps `pid` if it has ended: its exit status and the CPU time the kernel charged it
/// (with every descendant it waited for). `Ok(None)` while it runs.
fn reap(pid: u32) -> std::io::Result<Option<(std::process::ExitStatus, CommandUsage)>> {
    use std::os::unix::process::ExitStatusExt;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in; a zeroed one is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own child, not yet reaped (this is the only place that reaps
    // it), so it cannot name another process; status and usage are valid for writing.
    let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut usage) };
    match reaped {
        0 => Ok(None),
        r if r < 0 => Err(std::io::Error::last_os_error()),
        _ => {
            let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
            Ok(Some((
                std::process::ExitStatus::from_raw(status),
                CommandUsage {
                    pid,
                    threads: Vec::new(),
                    user_ns: ns(usage.ru_utime),
                    system_ns: ns(usage.ru_stime),
                },
            )))
        }
    }
}

/// Refuses, before anything is created, a command that cannot start: the program found
/// as exec would find it (a path with a `/` as given, else the first match on PATH) must be
/// a regular file this user may execute. Exit 2, as for any impossible request; a shell
/// would say 127 (not found) or 126 (not executable).
fn check_startable(program: &str) -> Result<(), Failure> {
    use std::os::unix::ffi::OsStrExt;
    let refuse = |why: String| Err(Failure::usage(format!("record -- {program}: {why}")));
    let executable = |path: &std::path::Path| {
        std::ffi::CString::new(path.as_os_str().as_bytes()).is_ok_and(|c| {
            // SAFETY: access only reads the NUL-terminated path.
            unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
        })
    };
    let path = if program.contains('/') {
        std::path::PathBuf::from(program)
    } else {
        // As execvp: the first executable file on PATH, else the first file to blame.
        let candidates: Vec<std::path::PathBuf> = std::env::var_os("PATH")
            .map(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(program))
                    .filter(|candidate| candidate.is_file())
                    .collect()
            })
            .unwrap_or_default();
        match candidates
            .iter()
            .find(|c| executable(c))
            .or(candidates.first())
        {
            Some(path) => path.clone(),
            None => return refuse("command not found (not a file on PATH)".into()),
        }
    };
    match std::fs::metadata(&path) {
        Err(e) => return refuse(format!("cannot run it: {e}")),
        Ok(meta) if meta.is_dir() => return refuse("is a directory, not a command".into()),
        Ok(meta) if !meta.is_file() => return refuse("is not a regular file".into()),
        Ok(_) => {}
    }
    if !executable(&path) {
        return refuse(format!(
            "{} is not executable: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Runs the command to completion; how it ended becomes a warning when it did not succeed.
/// A signal vmscale receives meanwhile is passed on to the command (a terminal's Ctrl-C
/// reaches both; a `kill` reaches only vmscale), and is returned so the run is marked. A
/// command that cannot start at all (checked before, but exec has the last word) is an
/// error: there is nothing to record, and the run directory goes.
fn run_command(
    command: &[String],
    interrupted: &AtomicBool,
    hook: &mut dyn PhaseHook,
) -> Result<Ran, vmscale_scenario::Error> {
    hook.subject_spawns(Some(crate::tracing::current_tid()));
    let spawned = std::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn();
    hook.subject_spawns(None);
    let mut child = spawned.map_err(|e| {
        vmscale_scenario::Error::Host(format!(
            "record -- {}: the command could not start: {e}",
            command[0]
        ))
    })?;
    if let Err(e) = hook.subject_started(child.id()) {
        crate::console::note!("vmscale: {e}");
    }
    let mut forwarded: Option<(i32, Instant)> = None;
    let mut usage = None;
    let status = loop {
        match reap(child.id()) {
            Ok(Some((status, used))) => {
                usage = Some(used);
                break Ok(status);
            }
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
                // Not yet reaped (reap saw it running above), so the pid is still ours.
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
    Ok(Ran {
        outcome,
        signal,
        usage,
    })
}
