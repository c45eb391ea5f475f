//! Kernel tracing around a scenario's measured phases.

use std::path::Path;

use clap::Args;
use vmscale_scenario::PhaseHook;
use vmscale_trace::record::recorder::{RecordConfig, Recording, TraceMeta, DEFAULT_BUFFER_KIB};

use crate::failure::Failure;

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Do not trace the kernel during the run
    #[arg(long)]
    pub no_trace: bool,
    /// Per-CPU trace buffer, in KiB (64 to 1048576)
    #[arg(long, default_value_t = DEFAULT_BUFFER_KIB, value_name = "KIB", value_parser = buffer_kib)]
    pub buffer_kib: u64,
    /// Do not record kernel stacks on lock contention (each costs microseconds)
    #[arg(long)]
    pub no_stacks: bool,
    /// Also record a kernel stack at every context switch, so a lock holder that sleeps is
    /// named with the function it sleeps in (costs microseconds per switch)
    #[arg(long, conflicts_with = "no_stacks")]
    pub sleep_stacks: bool,
    /// Tracing is the command's whole point (`record`): errors do not suggest --no-trace.
    #[arg(skip)]
    pub required: bool,
}

/// The stack recorded at a context switch is the switched-out task's: where a sleeping
/// lock holder sleeps.
pub const SLEEP_STACK_EVENT: &str = "sched:sched_switch";

pub use vmscale_run::dir::TRACE_DIR;

/// A recording that follows the scenario's measured phases; inert with --no-trace.
pub struct TraceSession {
    recording: Option<Recording>,
}

/// The calling thread's id, for keeping only its system calls in the trace.
pub fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

fn trace_failure(
    args: &TraceArgs,
) -> impl Fn(vmscale_trace::record::tracefs::Error) -> Failure + '_ {
    move |e| {
        if args.required {
            Failure::runtime(e.to_string())
        } else {
            Failure::runtime(format!("{e} (or run with --no-trace)"))
        }
    }
}

impl TraceSession {
    pub fn start(
        args: &TraceArgs,
        run_dir: &Path,
        mut config: RecordConfig,
    ) -> Result<TraceSession, Failure> {
        if args.no_trace {
            return Ok(TraceSession { recording: None });
        }
        config.buffer_kib = args.buffer_kib;
        if args.no_stacks {
            config.stack_events.clear();
        } else if args.sleep_stacks && !config.stack_events.iter().any(|e| e == SLEEP_STACK_EVENT) {
            config.stack_events.push(SLEEP_STACK_EVENT.into());
        }
        let mount = vmscale_trace::record::tracefs::mount_point().map_err(trace_failure(args))?;
        // Instances of killed runs hold buffer memory until someone removes them; a live
        // run's are left alone. Failing to look is not a reason to refuse to trace.
        if let Ok(removed) = vmscale_trace::record::tracefs::remove_stale_instances(&mount) {
            if !removed.is_empty() {
                crate::console::note!(
                    "vmscale: removed tracefs instances of killed runs: {}",
                    removed.join(", ")
                );
            }
        }
        let recording = Recording::prepare(&mount, &run_dir.join(TRACE_DIR), config)
            .map_err(trace_failure(args))?;
        Ok(TraceSession {
            recording: Some(recording),
        })
    }

    pub fn finish(self) -> Result<Option<TraceMeta>, Failure> {
        self.recording
            .map(|r| r.finish().map_err(|e| Failure::runtime(e.to_string())))
            .transpose()
    }
}

fn hook_error(e: vmscale_trace::record::tracefs::Error) -> vmscale_scenario::Error {
    vmscale_scenario::Error::Trace(e.to_string())
}

impl PhaseHook for TraceSession {
    fn measured_phase_begins(&mut self, label: &str) -> Result<(), vmscale_scenario::Error> {
        if let Some(r) = &mut self.recording {
            r.set_on(true).map_err(hook_error)?;
            r.mark(&format!("vmscale: begin {label}"))
                .map_err(hook_error)?;
        }
        Ok(())
    }

    fn measured_phase_ends(&mut self, label: &str) -> Result<(), vmscale_scenario::Error> {
        if let Some(r) = &mut self.recording {
            r.mark(&format!("vmscale: end {label}"))
                .map_err(hook_error)?;
            r.set_on(false).map_err(hook_error)?;
        }
        Ok(())
    }

    fn carried_out_by(&mut self, tids: &[u32]) -> Result<(), vmscale_scenario::Error> {
        if let Some(r) = &mut self.recording {
            r.follow_syscalls_of(tids).map_err(hook_error)?;
        }
        Ok(())
    }
}

/// `--buffer-kib`, checked when the command line is parsed.
pub fn buffer_kib(text: &str) -> Result<u64, String> {
    use vmscale_trace::record::recorder::{MAX_BUFFER_KIB, MIN_BUFFER_KIB};
    let kib: u64 = text.parse().map_err(|e| format!("{e}"))?;
    if (MIN_BUFFER_KIB..=MAX_BUFFER_KIB).contains(&kib) {
        Ok(kib)
    } else {
        Err(format!(
            "must be between {MIN_BUFFER_KIB} and {MAX_BUFFER_KIB} KiB"
        ))
    }
}
