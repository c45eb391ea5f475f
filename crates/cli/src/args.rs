//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::tracing::TraceArgs;

#[derive(Debug, Parser)]
#[command(
    name = "vmscale",
    version,
    about = "Find out why a virtualization host stops scaling: drive real KVM at growing N, measure, explain",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every scenario at a small default sweep and report (the quick tour)
    Tour(SharedArgs),
    /// List the scenarios with their knobs and defaults
    List,
    /// Run one scenario over its sweep
    #[command(subcommand)]
    Run(RunScenario),
    /// Trace the kernel while a command runs (or for a duration) into a run directory
    Record(RecordArgs),
    /// Compare two runs of the same sweep (A = before, B = after), judged between runs or
    /// between each run's blocks; exit 3 on a regression beyond --fail-above, 4 when undecidable
    ///
    /// With --runs 3 or more on both sides the runs' p50s are compared (Welch's t on their
    /// logarithms). Otherwise each run's samples are cut into up to 10 blocks in the order
    /// they were taken and compared block against block (the Hodges-Lehmann shift with its
    /// exact rank-sum interval), so background load that comes and goes during a run is
    /// noise. The change printed is the one decided on, with its 95% interval: slower or
    /// faster when the interval excludes no change and the change exceeds the noise
    /// threshold (and, between blocks, either run's own spread); "no significant change"
    /// only when the whole interval lies within the noise threshold; otherwise
    /// undecidable: the runs (or blocks) disagree among themselves. Rows with fewer than 25
    /// samples per run are too few to judge.
    ///
    /// Exit codes: 0 nothing beyond --fail-above (or no --fail-above); 3 a regression beyond
    /// it; 4 undecidable: a regression --fail-above would flag, but either run's host was
    /// busy (other processes above 10% of all CPU time) or the runs were traced differently
    /// (one with --no-trace, or different --no-stacks, --sleep-stacks or events: tracing
    /// adds cost to every sample, so rerun both on a quiet host with the same tracing); a
    /// change beyond it whose interval reaches below it (rerun with more samples or --runs);
    /// or a row with fewer than 25 samples per run. 1 and 2 are errors.
    Compare {
        a: PathBuf,
        b: PathBuf,
        /// Changes smaller than this (percent) are called noise
        #[arg(long, default_value_t = 5.0, value_name = "PCT")]
        noise: f64,
        /// Exit 3 when p50 or mean got significantly slower by more than PCT percent (4 when
        /// the runs cannot decide it)
        #[arg(long, value_name = "PCT")]
        fail_above: Option<f64>,
        #[arg(long, default_value = "table", value_parser = parse_format)]
        format: vmscale_report::Format,
        /// Also write a page with both runs' distributions overlaid
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// Export a run's kernel trace or samples for other tools (one of --perfetto, --dat,
    /// --pprof, --folded), or runs as Parquet tables (--parquet RUN_DIR... -o DIR)
    Export {
        /// Write a Perfetto trace (protobuf) to open in ui.perfetto.dev
        #[arg(long)]
        perfetto: bool,
        /// Write a trace-cmd .dat file (version 7) for trace-cmd report and KernelShark
        #[arg(long)]
        dat: bool,
        /// Write the on-CPU samples, and the time off a CPU by wait chain (sample type
        /// `wait`, labelled with cause and lock), as a gzipped pprof profile (go tool
        /// pprof, speedscope, Pyroscope)
        #[arg(long)]
        pprof: bool,
        /// Write the on-CPU samples as folded stacks (`frame;frame;frame count`, root
        /// first), for flamegraph.pl and speedscope
        #[arg(long)]
        folded: bool,
        /// Write runs as Parquet tables (runs, samples, summaries, growth, findings,
        /// lock_waits, holds, ipis, stacks) under -o DIR, partitioned by kernel, host and
        /// date (docs/parquet.md); takes several runs
        #[arg(long)]
        parquet: bool,
        /// With --dat: none or zstd
        #[arg(long, value_name = "ALGORITHM")]
        compression: Option<String>,
        /// The run (RUN_DIR or RUN_DIR/run.json); several with --parquet
        #[arg(value_name = "RUN_DIR", required = true)]
        runs: Vec<PathBuf>,
        /// Output file (default RUN_DIR/trace.perfetto-trace, RUN_DIR/trace.dat,
        /// RUN_DIR/profile.pb.gz or RUN_DIR/stacks.folded); with --parquet, the directory
        /// of the tables (required)
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Render a run again, or analyse a trace from another host (FILE.dat, FILE.txt)
    ///
    /// RUN_DIR (or RUN_DIR/run.json): the run's report, its raw trace analysed again with
    /// this build. FILE.dat: a trace-cmd recording (versions 6 and 7), analysed where it
    /// lies. FILE.txt: ftrace text as pasted into mails and bug reports (trace, trace_pipe,
    /// function_graph).
    Report {
        /// RUN_DIR, RUN_DIR/run.json, FILE.dat or FILE.txt
        #[arg(value_name = "RUN|FILE")]
        run: PathBuf,
        #[arg(long, default_value = "table", value_parser = parse_format)]
        format: vmscale_report::Format,
        /// A latency budget (e.g. 30s, 5ms): say at which N each scaling fit crosses it
        #[arg(long, value_parser = parse_duration)]
        deadline: Option<std::time::Duration>,
        /// Call a cost flat only when every N stays within PCT percent of the smallest N
        /// (an equivalence test at 99% confidence)
        #[arg(long, value_name = "PCT", default_value_t = 20.0, value_parser = parse_margin)]
        margin: f64,
        /// For a trace-cmd .dat file whose instances hold data: the one to analyse
        #[arg(long, value_name = "NAME")]
        buffer: Option<String>,
        /// Print every section (table format); by default the verdict and the warnings
        #[arg(long)]
        details: bool,
    },
    /// SQL over runs exported as Parquet tables (export --parquet RUN_DIR... -o DIR)
    ///
    /// Every table (runs, samples, summaries, growth, findings, lock_waits, holds, ipis,
    /// stacks) is there under its own name, over all of its files, with the partition keys
    /// kernel, host and date as text columns (null where unknown); docs/parquet.md has
    /// every column. Only queries run: nothing is created, changed or dropped. Answered by
    /// an embedded engine (DataFusion); the same files open in DuckDB and Spark.
    Query {
        /// The directory export --parquet wrote
        dir: PathBuf,
        /// One SQL query, e.g. "SELECT kernel, count(*) FROM runs GROUP BY kernel"
        sql: String,
        #[arg(long, default_value = "table", value_parser = parse_format)]
        format: vmscale_report::Format,
    },
    /// Named questions over runs exported as Parquet tables: which lock tops the verdict,
    /// which hosts regressed between two kernels, how the growth claims compare
    ///
    /// Each question is SQL over the tables `vmscale query` opens (--sql prints it, for
    /// Spark to run over the same directory), plus, for --regressions, compare's own
    /// statistics per row.
    Fleet(FleetArgs),
    #[command(hide = true)]
    TeardownHolder(vmscale_scenario::teardown::HolderArgs),
    /// Check that this host can run vmscale: root, /dev/kvm, tracefs, kallsyms, limits
    Doctor {
        /// Remove what killed vmscale runs left: their tracefs instances and unfinished run
        /// directories in --out (plain doctor only lists them). What running vmscale
        /// processes use is never touched
        #[arg(long)]
        cleanup: bool,
        /// Directory of runs to check for unfinished run directories
        #[arg(long, value_name = "DIR", default_value = "vmscale-runs")]
        out: PathBuf,
    },
}

/// `vmscale fleet`: one named question at a time.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("question").required(true).args(["top_locks", "regressions", "growth"])))]
pub struct FleetArgs {
    /// The directory export --parquet wrote
    #[arg(required_unless_present = "sql")]
    pub dir: Option<PathBuf>,
    /// Which lock tops the verdict (each run's first finding with a lock), per group: in
    /// how many of its runs, and the finding's mean share of the time explained
    #[arg(long)]
    pub top_locks: bool,
    /// With --top-locks: group runs by kernel release, host or CPU model
    #[arg(long, value_enum, default_value_t = GroupBy::Kernel, requires = "top_locks")]
    pub by: GroupBy,
    /// Per host, CPU model, scenario, series and n measured on both kernels, kernel B's
    /// samples against kernel A's by compare's rules; prints the slower rows (--all: every
    /// row) and counts every verdict
    #[arg(long, requires = "between")]
    pub regressions: bool,
    /// With --regressions: the kernel releases (uname -r) to compare, A before B
    #[arg(long, num_args = 2, value_names = ["KERNEL_A", "KERNEL_B"], requires = "regressions")]
    pub between: Vec<String>,
    /// With --regressions: changes smaller than this (percent) are called noise
    #[arg(
        long,
        default_value_t = 5.0,
        value_name = "PCT",
        requires = "regressions"
    )]
    pub noise: f64,
    /// With --regressions: every row compared, not only the slower ones
    #[arg(long, requires = "regressions")]
    pub all: bool,
    /// The growth claims of every series, per kernel and host side by side: how many runs
    /// claimed grows, flat, falls, ..., and the ratios they measured
    #[arg(long)]
    pub growth: bool,
    /// Print the question's SQL instead of answering it (Spark SQL runs it unchanged)
    #[arg(long)]
    pub sql: bool,
    #[arg(long, default_value = "table", value_parser = parse_format)]
    pub format: vmscale_report::Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    Kernel,
    Host,
    Cpu,
}

/// `vmscale run <scenario>`: the scenarios' own flags (each scenario declares them), then
/// the options every run shares.
pub type RunScenario = vmscale_scenario::RunScenario<SharedArgs>;

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Directory that receives the run directory (<UTC>-<scenario>/)
    #[arg(long, value_name = "DIR", default_value = "vmscale-runs")]
    pub out: PathBuf,
    /// How to print the results: table, json, csv or md
    #[arg(long, default_value = "table", value_parser = parse_format)]
    pub format: vmscale_report::Format,
    /// No progress bar
    #[arg(long, short)]
    pub quiet: bool,
    /// Print every section (table format); by default the verdict and the warnings, with
    /// the rest in the run directory's summary.md and report.html
    #[arg(long)]
    pub details: bool,
    /// Also write the run as Parquet tables under DIR, as `export --parquet` does
    /// (partitioned by kernel, host and date), for `vmscale query`, DuckDB or Spark
    #[arg(long, value_name = "DIR")]
    pub parquet: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["duration", "command", "pid"])))]
pub struct RecordArgs {
    /// Event to record, as system:event or a whole system (repeatable); default: locks,
    /// scheduler, IPIs and cross-CPU calls
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Record for this many seconds (Ctrl-C stops early and keeps the trace)
    #[arg(long, value_name = "SECONDS", conflicts_with = "command")]
    pub duration: Option<f64>,
    /// Attach to this running process (a VMM, say), as perf record -p does: its threads are
    /// what the trace explains, every other task is context. Ends at Ctrl-C, at
    /// --duration, or when the process exits
    #[arg(short = 'p', long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// The command to trace, after `--`
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
    /// Per-CPU trace buffer, in KiB (64 to 1048576)
    #[arg(long, default_value_t = vmscale_trace::record::recorder::DEFAULT_BUFFER_KIB, value_name = "KIB", value_parser = crate::tracing::buffer_kib)]
    pub buffer_kib: u64,
    /// Do not record kernel stacks (on lock contention, nor at context switches)
    #[arg(long)]
    pub no_stacks: bool,
    /// Do not sample on-CPU stacks (perf_event_open, cpu-clock on every CPU)
    #[arg(long)]
    pub no_sample: bool,
    /// On-CPU stack samples per second of CPU time, per CPU (1 to 20000)
    #[arg(long, default_value_t = vmscale_sample::DEFAULT_HZ, value_name = "HZ", value_parser = crate::tracing::sample_hz)]
    pub sample_hz: u32,
    /// Aggregate lock waits, their holders and the subject's time in the kernel with BPF
    /// (tracepoints only) instead of streaming every event through tracefs: memory stays
    /// flat for recordings of hours, and no on-CPU samples are taken. Falls back to
    /// tracefs, saying why, where BPF is not allowed
    #[arg(long, conflicts_with = "events")]
    pub aggregate: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The options every scenario run shares (`run <scenario>`, `tour`): where the output goes
/// and how the kernel is traced.
#[derive(Debug, Args)]
pub struct SharedArgs {
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub trace: TraceArgs,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. 30s, 250ms)"))
}

fn parse_margin(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(pct) if pct > 0.0 && pct < 100.0 => Ok(pct),
        _ => Err(format!(
            "{s:?} is not a margin: give a percentage above 0 and below 100"
        )),
    }
}

fn parse_format(s: &str) -> Result<vmscale_report::Format, String> {
    s.parse::<vmscale_report::Format>()
        .map_err(|e| e.to_string())
}
