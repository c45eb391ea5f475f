//! Kernel tracing around a scenario's measured phases.

use std::path::Path;

use clap::Args;
use vmscale_sample::{SampleConfig, Sampler};
use vmscale_scenario::PhaseHook;
use vmscale_trace::record::bpf::{AggregateConfig, AggregateError, Aggregation, Subject};
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
    /// Record a kernel stack where a task goes to sleep (the default): where a lock holder
    /// sleeps, and what a sleep waits for. Kept for scripts; --no-sleep-stacks turns it off
    #[arg(long, conflicts_with_all = ["no_stacks", "no_sleep_stacks"], hide = true)]
    pub sleep_stacks: bool,
    /// No kernel stack where a task goes to sleep (each costs microseconds, paid by the
    /// task going to sleep, never by a preempted one)
    #[arg(long)]
    pub no_sleep_stacks: bool,
    /// Do not sample on-CPU stacks (perf_event_open, cpu-clock on every CPU) while tracing
    #[arg(long)]
    pub no_sample: bool,
    /// On-CPU stack samples per second of CPU time, per CPU (1 to 20000)
    #[arg(long, default_value_t = vmscale_sample::DEFAULT_HZ, value_name = "HZ", value_parser = sample_hz)]
    pub sample_hz: u32,
    /// Aggregate lock waits, their holders and the subject's time in the kernel with BPF
    /// (tracepoints only) instead of streaming every event through tracefs: memory stays
    /// flat however long it records. Falls back to tracefs, saying why, where BPF is not
    /// allowed
    #[arg(long, conflicts_with = "no_trace")]
    pub aggregate: bool,
    /// Tracing is the command's whole point (`record`): errors do not suggest --no-trace.
    #[arg(skip)]
    pub required: bool,
}

/// The stack recorded at a context switch is the switched-out task's: where a sleeping
/// lock holder sleeps.
pub const SLEEP_STACK_EVENT: &str = "sched:sched_switch";
/// Only where the task switched out goes to sleep (TASK_INTERRUPTIBLE or
/// TASK_UNINTERRUPTIBLE): a preempted task's stack says nothing the analyses read, and
/// most switches of a busy host are preemptions.
pub const SLEEP_STACKS: &str = "sched:sched_switch if prev_state & 3";

pub use vmscale_run::dir::TRACE_DIR;

/// A recording that follows the scenario's measured phases; inert with --no-trace. The
/// on-CPU sampler (unless --no-sample) runs from the start to the finish (switching it
/// costs IPIs) and notes the windows during which the trace was on, which are what its
/// samples are read for. With --aggregate the kernel aggregates instead (no samples: their
/// files would grow with the recording).
pub struct TraceSession {
    recording: Option<Backend>,
    sampler: Option<Sampler>,
    /// Why there are no (or fewer) samples, or why tracefs records instead of BPF: run
    /// warnings.
    sample_warnings: Vec<String>,
}

enum Backend {
    Tracefs(Box<Recording>),
    Aggregate(Box<Aggregation>),
}

/// What a finished session leaves: the trace's meta.json (None with --no-trace) and the
/// warnings the run gets from the sampling.
pub struct Finished {
    pub trace: Option<TraceMeta>,
    pub warnings: Vec<String>,
}

/// The calling thread's id, for keeping only its system calls in the trace.
pub fn current_tid() -> u32 {
    vmscale_sys::gettid()
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

fn aggregate_failure(args: &TraceArgs) -> impl Fn(AggregateError) -> Failure + '_ {
    move |e| {
        if args.required {
            Failure::runtime(format!("aggregate mode: {e}"))
        } else {
            Failure::runtime(format!("aggregate mode: {e} (or run without --aggregate)"))
        }
    }
}

impl TraceSession {
    /// Starts tracing into `run_dir`'s trace directory; `subject` is whose time an
    /// aggregated recording splits by cause (a streamed trace decides that when analysed).
    pub fn start(
        args: &TraceArgs,
        run_dir: &Path,
        mut config: RecordConfig,
        subject: Subject,
    ) -> Result<TraceSession, Failure> {
        if args.no_trace {
            return Ok(TraceSession {
                recording: None,
                sampler: None,
                sample_warnings: Vec::new(),
            });
        }
        let mut fallback = Vec::new();
        if args.aggregate {
            let aggregate = aggregate_config(args, &config, subject);
            match Aggregation::prepare(&run_dir.join(TRACE_DIR), aggregate) {
                Ok(aggregation) => {
                    return Ok(TraceSession {
                        recording: Some(Backend::Aggregate(Box::new(aggregation))),
                        sampler: None,
                        sample_warnings: Vec::new(),
                    })
                }
                Err(AggregateError::NotAllowed(why)) => {
                    let warning =
                        format!("BPF is not allowed here ({why}): recorded through tracefs instead of --aggregate");
                    crate::console::note!("vmscale: {warning}");
                    fallback.push(warning);
                }
                Err(e) => return Err(aggregate_failure(args)(e)),
            }
        }
        config.buffer_kib = args.buffer_kib;
        if args.no_stacks {
            config.stack_events.clear();
        } else if !args.no_sleep_stacks
            && !config
                .stack_events
                .iter()
                .any(|e| e.starts_with(SLEEP_STACK_EVENT))
        {
            config.stack_events.push(SLEEP_STACKS.into());
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
        let trace_dir = run_dir.join(TRACE_DIR);
        let recording =
            Recording::prepare(&mount, &trace_dir, config).map_err(trace_failure(args))?;
        let mut sample_warnings = Vec::new();
        let sampler = if args.no_sample {
            None
        } else {
            let config = SampleConfig {
                hz: args.sample_hz,
                ..SampleConfig::default()
            };
            match Sampler::open(&trace_dir.join(vmscale_sample::SAMPLES_DIR), config) {
                Ok(sampler) => Some(sampler),
                Err(e) => {
                    let warning = format!("{e}; the trace goes on without them");
                    crate::console::note!("vmscale: {warning}");
                    sample_warnings.push(warning);
                    None
                }
            }
        };
        sample_warnings.splice(0..0, fallback);
        Ok(TraceSession {
            recording: Some(Backend::Tracefs(Box::new(recording))),
            sampler,
            sample_warnings,
        })
    }

    /// Stops tracing and sampling, and writes both meta files.
    pub fn finish(mut self) -> Result<Finished, Failure> {
        let trace = match self.recording.take() {
            Some(Backend::Tracefs(r)) => {
                Some(r.finish().map_err(|e| Failure::runtime(e.to_string()))?)
            }
            Some(Backend::Aggregate(a)) => Some(
                a.finish()
                    .map_err(|e| Failure::runtime(format!("aggregate mode: {e}")))?
                    .0,
            ),
            None => None,
        };
        if let Some(sampler) = self.sampler.take() {
            match sampler.finish() {
                Ok(meta) => self.sample_warnings.extend(meta.warnings()),
                Err(e) => self
                    .sample_warnings
                    .push(format!("the on-CPU samples are incomplete: {e}")),
            }
        }
        Ok(Finished {
            trace,
            warnings: self.sample_warnings,
        })
    }

    /// Marks a window of the samples (the sampler itself runs from start to finish).
    fn sample(&mut self, on: bool) {
        if let Some(sampler) = &mut self.sampler {
            sampler.set_on(on);
        }
    }
}

fn hook_error(e: vmscale_trace::record::tracefs::Error) -> vmscale_scenario::Error {
    vmscale_scenario::Error::Trace(e.to_string())
}

fn aggregate_hook_error(e: AggregateError) -> vmscale_scenario::Error {
    vmscale_scenario::Error::Trace(format!("aggregate mode: {e}"))
}

/// What an aggregated recording needs of the tracefs configuration: which tasks' ioctls
/// name the locks they wait on, and which stacks to take.
fn aggregate_config(args: &TraceArgs, config: &RecordConfig, subject: Subject) -> AggregateConfig {
    AggregateConfig {
        exclude_tgid: if subject == Subject::EveryTask {
            std::process::id()
        } else {
            0
        },
        subject,
        ioctl_every_task: config.syscall_ids.contains(&libc::SYS_ioctl),
        ioctl_tids: config.syscall_tids.clone(),
        sleep_stacks: !args.no_stacks && !args.no_sleep_stacks,
        wait_stacks: !args.no_stacks,
        ..AggregateConfig::default()
    }
}

impl PhaseHook for TraceSession {
    fn measured_phase_begins(&mut self, label: &str) -> Result<(), vmscale_scenario::Error> {
        if self.recording.is_some() {
            self.sample(true);
        }
        match &mut self.recording {
            Some(Backend::Tracefs(r)) => {
                r.set_on(true).map_err(hook_error)?;
                r.mark(&format!("vmscale: begin {label}"))
                    .map_err(hook_error)?;
            }
            Some(Backend::Aggregate(a)) => a.set_on(true),
            None => {}
        }
        Ok(())
    }

    fn measured_phase_ends(&mut self, label: &str) -> Result<(), vmscale_scenario::Error> {
        match &mut self.recording {
            Some(Backend::Tracefs(r)) => {
                r.mark(&format!("vmscale: end {label}"))
                    .map_err(hook_error)?;
                r.set_on(false).map_err(hook_error)?;
            }
            Some(Backend::Aggregate(a)) => a.set_on(false),
            None => {}
        }
        self.sample(false);
        Ok(())
    }

    fn carried_out_by(&mut self, tids: &[u32]) -> Result<(), vmscale_scenario::Error> {
        match &mut self.recording {
            Some(Backend::Tracefs(r)) => r.follow_syscalls_of(tids).map_err(hook_error)?,
            Some(Backend::Aggregate(a)) => {
                a.follow_ioctls_of(tids).map_err(aggregate_hook_error)?
            }
            None => {}
        }
        Ok(())
    }

    fn subject_spawns(&mut self, spawner: Option<u32>) {
        if let Some(Backend::Aggregate(a)) = &mut self.recording {
            a.adopt_children_of(spawner);
        }
    }

    fn subject_started(&mut self, pid: u32) -> Result<(), vmscale_scenario::Error> {
        if let Some(Backend::Aggregate(a)) = &mut self.recording {
            a.add_subject(pid).map_err(aggregate_hook_error)?;
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

/// `--sample-hz`, checked when the command line is parsed.
pub fn sample_hz(text: &str) -> Result<u32, String> {
    use vmscale_sample::sampler::{MAX_HZ, MIN_HZ};
    let hz: u32 = text.parse().map_err(|e| format!("{e}"))?;
    if (MIN_HZ..=MAX_HZ).contains(&hz) {
        Ok(hz)
    } else {
        Err(format!("must be between {MIN_HZ} and {MAX_HZ}"))
    }
}
