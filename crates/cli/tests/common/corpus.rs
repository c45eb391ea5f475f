//! The labelled corpus's shared part: building a case, recording it under `vmscale record`
//! and checking what the run shows against its label (corpus/README.md). Used by
//! corpus.rs (the trace streamed through tracefs) and corpus_aggregate.rs (aggregated in
//! the kernel with BPF), which must give the same verdicts.

use super::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Every case in corpus/, each with its test in corpus.rs.
pub const CASES: &[&str] = &[
    "mutex-held-across-sleep",
    "mmap-lock-convoy",
    "spinlock-eventfd",
    "ipi-mprotect",
    "cpu-overcommit",
    "mmap-lock-held-sending-ipis",
    "pipe-mutex-short-holds",
    "sleep-no-lock",
    "cpu-only",
    "on-cpu-page-faults",
    "on-cpu-getrandom",
    "futex-user-mutex",
    "kvm-slots-lock",
    "inode-rwsem-tmpfs",
    "inode-rwsem-ext4-direct",
    "file-f-pos-lock",
    "epoll-ep-mtx",
    "files-file-lock",
    "pipe-reader-behind-fsync",
    "timerfd-ticks",
];

pub const CAUSES: &[&str] = &[
    "lock-wait",
    "lock-spin",
    "ipi",
    "cpu-starvation",
    "sleep",
    "on-cpu",
    "none",
];
pub const HOLDER_DOES: &[&str] = &["sleeps", "runs", "sends-ipis"];
pub const LOCK_CAUSES: &[&str] = &["lock-wait", "lock-spin"];
/// The keys a `must_not` statement may have (corpus/README.md, "The label").
pub const STATEMENT_KEYS: &[&str] = &[
    "cause",
    "lock",
    "holder_does",
    "asleep_in",
    "first",
    "min_share",
];
pub const SLEEPING_KINDS: &[&str] = &["mutex", "rwsem", "percpu-rwsem", "rt-mutex"];

/// A reproducer runs for about a second; one that has not ended by then is hung.
const TIMEOUT: Duration = Duration::from_secs(90);

/// One case at a time: the reproducers pin threads and measure contention on two CPUs.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus")
}

/// A traced run of one case: the run record `vmscale record` printed and the case's label.
pub struct Recorded {
    pub case: &'static str,
    pub run: Value,
    pub label: Value,
}

/// Records `case` under `vmscale record ARGS -- repro` and checks the run is whole.
pub fn record(case: &'static str, args: &[&str]) -> Recorded {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let source = corpus_dir().join(case).join("repro.c");
    let label: Value = serde_json::from_slice(
        &std::fs::read(corpus_dir().join(case).join("expected.json")).unwrap(),
    )
    .unwrap_or_else(|e| panic!("{case}/expected.json: {e}"));
    let dir = scratch(&format!("corpus-{case}"));
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("repro");
    let cc = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run cc ({e}): the corpus needs a C compiler (scripts/test installs gcc)")
        });
    assert!(
        cc.status.success(),
        "cc could not build {}: {}",
        source.display(),
        stderr(&cc)
    );
    // A storm that keeps both CPUs busy can outrun the readers on a small nested host: the
    // kernel then overwrites events (vmscale says how many). The cases test what is said
    // of a whole trace, so such a recording is made again, at most twice more; every
    // attempt's losses are in the failure.
    let mut losses = Vec::new();
    let run = loop {
        let run = record_once(case, args, &dir, &binary);
        let lost = &run["trace"]["lost_per_cpu"];
        if lost
            .as_object()
            .unwrap()
            .values()
            .all(|l| l.as_u64() == Some(0))
        {
            break run;
        }
        losses.push(lost.to_string());
        eprintln!("{case}: the kernel dropped events ({lost}); recording again");
        assert!(
            losses.len() < 3,
            "{case}: the kernel dropped events in every recording: {}",
            losses.join(", ")
        );
    };
    let trace = &run["trace"];
    assert!(trace["decoded_events"].as_u64().unwrap() > 0, "{case}");
    assert!(!trace["lock_format_missing"].as_bool().unwrap_or(false));
    let recorded = Recorded { case, run, label };
    recorded.assert_subject_agrees_with_the_kernels_accounting();
    eprintln!("{}", recorded.describe());
    recorded
}

/// One `vmscale record` of the case's reproducer, checked to have run: its run record.
fn record_once(case: &str, args: &[&str], dir: &Path, binary: &Path) -> Value {
    let stdout_path = dir.join("stdout.json");
    let stderr_path = dir.join("stderr.txt");
    let mut child = vmscale()
        .arg("record")
        .args(args)
        .args(["--quiet", "--format", "json", "--out"])
        .arg(dir.join("runs"))
        .arg("--")
        .arg(binary)
        .stdout(Stdio::from(std::fs::File::create(&stdout_path).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&stderr_path).unwrap()))
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            // SIGTERM: vmscale passes it on to the reproducer and removes its tracefs
            // instance; it kills the command itself if that does not end.
            // SAFETY: kill only sends a signal to our own unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
            panic!("{case}: still running after {TIMEOUT:?}, stopped");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(status.success(), "{case}: vmscale record failed: {err}");
    let run: Value = serde_json::from_slice(&std::fs::read(&stdout_path).unwrap())
        .unwrap_or_else(|e| panic!("{case}: stdout is not a run record ({e}): {err}"));
    // The reproducer itself must have done its job.
    for warning in run["warnings"].as_array().unwrap() {
        let warning = warning.as_str().unwrap();
        assert!(
            !warning.contains("traced command"),
            "{case}: the reproducer failed: {warning}\n{err}"
        );
    }
    run
}

pub fn own(comm: &str) -> bool {
    comm.starts_with("repro")
}

/// The symbol of a frame "name+0xoff".
pub fn symbol(frame: &str) -> &str {
    frame.split(['+', ' ']).next().unwrap_or(frame)
}

/// A contended lock seen from the reproducer's own waiters.
pub struct OwnLock<'a> {
    pub lock: &'a Value,
    pub wait_ns: u64,
    pub waits: u64,
}

impl OwnLock<'_> {
    pub fn kind(&self) -> &str {
        self.lock["kind"].as_str().unwrap()
    }

    pub fn name(&self) -> &str {
        self.lock["name"].as_str().unwrap()
    }

    /// Whether some waiting stack passes through one of `functions`.
    pub fn waits_in(&self, functions: &[&str]) -> bool {
        self.stacks_through(functions) > 0
    }

    /// How many waits had a stack through one of `functions`.
    pub fn stacks_through(&self, functions: &[&str]) -> u64 {
        self.lock["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| functions.contains(&symbol(f.as_str().unwrap())))
            })
            .map(|s| s["waits"].as_u64().unwrap())
            .sum()
    }

    pub fn mode_waits(&self, mode: &str) -> u64 {
        self.lock["modes"][mode].as_u64().unwrap_or(0)
    }
}

impl Recorded {
    pub fn trace(&self) -> &Value {
        &self.run["trace"]
    }

    /// How long the traced command ran.
    pub fn run_ns(&self) -> u64 {
        self.run["background"]["wall_ns"]
            .as_u64()
            .or_else(|| self.trace()["ipis"][0]["duration_ns"].as_u64())
            .expect("the run's duration")
    }

    /// Locks the reproducer's own threads waited on, most waited first.
    pub fn own_locks(&self) -> Vec<OwnLock<'_>> {
        let mut locks: Vec<OwnLock> = self.trace()["contention"]
            .as_array()
            .unwrap()
            .iter()
            .map(|lock| {
                let mine = lock["waiters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|w| own(w["comm"].as_str().unwrap()));
                let (wait_ns, waits) = mine.fold((0, 0), |(ns, n), w| {
                    (
                        ns + w["total_wait_ns"].as_u64().unwrap(),
                        n + w["waits"].as_u64().unwrap(),
                    )
                });
                OwnLock {
                    lock,
                    wait_ns,
                    waits,
                }
            })
            .filter(|l| l.waits > 0)
            .collect();
        locks.sort_by_key(|l| std::cmp::Reverse(l.wait_ns));
        locks
    }

    /// The lock the reproducer's threads waited on most: the case's subject.
    pub fn top_lock(&self) -> OwnLock<'_> {
        self.own_locks()
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{}: no lock contended by its threads", self.case))
    }

    /// All the waiting the trace blames on locks, for the reproducer's threads.
    pub fn own_lock_wait_ns(&self, kinds: Option<&[&str]>) -> u64 {
        self.own_locks()
            .iter()
            .filter(|l| kinds.is_none_or(|k| k.contains(&l.kind())))
            .map(|l| l.wait_ns)
            .sum()
    }

    /// The holders' view of the lock at `addr`.
    pub fn holders_of(&self, lock: &OwnLock) -> &Value {
        self.trace()["holders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["lock_addr"] == lock.lock["lock_addr"])
            .unwrap_or_else(|| {
                panic!(
                    "{}: no holders found for {}\n{}",
                    self.case,
                    lock.name(),
                    self.describe()
                )
            })
    }

    /// IPIs sent by the task named `comm`, over every phase.
    pub fn ipis_sent_by(&self, comm: &str) -> u64 {
        self.phases()
            .flat_map(|p| p["by_sender"].as_array().unwrap())
            .filter(|s| s["comm"] == comm)
            .map(|s| s["ipis"].as_u64().unwrap())
            .sum()
    }

    pub fn ipis_sent_by_own(&self) -> u64 {
        self.phases()
            .flat_map(|p| p["by_sender"].as_array().unwrap())
            .filter(|s| own(s["comm"].as_str().unwrap()))
            .map(|s| s["ipis"].as_u64().unwrap())
            .sum()
    }

    /// Calls of the cross-CPU function `function` run on target CPUs.
    pub fn victim_calls(&self, function: &str) -> u64 {
        self.phases()
            .flat_map(|p| p["victim_work"].as_array().unwrap())
            .filter(|v| symbol(v["function"].as_str().unwrap()) == function)
            .map(|v| v["calls"].as_u64().unwrap())
            .sum()
    }

    pub fn phases(&self) -> impl Iterator<Item = &Value> {
        self.trace()["ipis"].as_array().unwrap().iter()
    }

    /// Held-across-sleep findings whose holder is one of the reproducer's threads.
    pub fn own_sleeps_holding(&self) -> Vec<&Value> {
        self.trace()["holders"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|h| h["held_across_sleep"].as_array().unwrap())
            .filter(|s| own(s["holder_comm"].as_str().unwrap()))
            .collect()
    }

    /// Nothing the reproducer's threads did may be blamed on a lock: what they waited on
    /// all locks together stays under 2% of the run, on sleeping locks under 1%, and none
    /// of them held a lock across a sleep with waiters behind it for more than 1%.
    pub fn assert_no_lock_blamed(&self) {
        assert_eq!(
            self.label["must_not_blame_locks"], true,
            "{}: label says locks may be blamed",
            self.case
        );
        let run = self.run_ns();
        let all = self.own_lock_wait_ns(None);
        let sleeping = self.own_lock_wait_ns(Some(SLEEPING_KINDS));
        let held: u64 = self
            .own_sleeps_holding()
            .iter()
            .map(|s| s["waiter_wait_ns"].as_u64().unwrap())
            .sum();
        assert!(
            all <= run / 50 && sleeping <= run / 100 && held <= run / 100,
            "{}: locks blamed in a case without lock contention: {all} ns on all locks, \
             {sleeping} ns on sleeping locks, {held} ns behind sleeping holders, in a \
             {run} ns run\n{}",
            self.case,
            self.describe()
        );
    }

    /// Both sides of the label: the verdict's first finding says the labelled cause, lock
    /// and what the holder did (a case without lock contention has no lock blamed anywhere),
    /// no finding says anything the label's `must_not` lists, and no two findings contradict
    /// each other about one task's sleep. Every failure is reported, not only the first.
    pub fn assert_label(&self, cause: &str, lock: Option<&str>, holder_does: Option<&str>) {
        assert_eq!(self.label["cause"], cause, "{}", self.case);
        assert_eq!(self.label["lock"].as_str(), lock, "{}", self.case);
        assert_eq!(
            self.label["holder_does"].as_str(),
            holder_does,
            "{}",
            self.case
        );
        let mut failures = self.said_failures(cause, lock, holder_does);
        failures.extend(self.must_not_failures());
        failures.extend(self.contradictions());
        failures.extend(self.unexplained());
        self.fail_with(failures);
    }

    /// For a case whose bottleneck is real but not where most of its threads' time goes
    /// (more busy threads than CPUs, or as much kernel work as waiting): the labelled cause
    /// and lock are among the first three findings with at least 15% of the time, and no
    /// other lock is blamed before it; the label's `must_not` holds as in `assert_label`.
    pub fn assert_label_among_the_first(&self, cause: &str, lock: Option<&str>) {
        assert_eq!(self.label["cause"], cause, "{}", self.case);
        assert_eq!(self.label["lock"].as_str(), lock, "{}", self.case);
        let verdict = self.run["verdict"].as_array().expect("a verdict");
        let mut failures = Vec::new();
        // A case's label may ask less where its evidence shows the share varies widely
        // (files-file-lock: spinning 7-30% of the time from run to run).
        let min_share = self.label["min_share"].as_f64().unwrap_or(0.15);
        match verdict.iter().take(3).position(|f| {
            f["cause"] == cause
                && match (f["lock"].as_str(), lock) {
                    (Some(named), Some(lock)) => named.starts_with(lock),
                    (named, lock) => named == lock,
                }
                && f["share"].as_f64().unwrap() >= min_share
        }) {
            None => {
                let near: Vec<String> = verdict
                    .iter()
                    .take(3)
                    .filter(|f| f["cause"] == cause)
                    .map(|f| {
                        format!(
                            "{:.0}% on {}",
                            f["share"].as_f64().unwrap() * 100.0,
                            f["lock"]
                        )
                    })
                    .collect();
                failures.push(format!(
                    "said: {cause} ({lock:?}) is not among the first three findings with {min_share} or \
                     more (the first three's {cause}: {near:?})"
                ))
            }
            Some(at) => {
                failures.extend(self.unnamed(&verdict[at]));
                for finding in &verdict[..at] {
                    if !finding["lock"].is_null() {
                        failures.push(format!(
                            "said: another lock comes first: {}",
                            finding["summary"]
                        ));
                    }
                }
            }
        }
        failures.extend(self.must_not_failures());
        failures.extend(self.contradictions());
        failures.extend(self.unexplained());
        self.fail_with(failures);
    }

    /// Each of the first three findings that is time on a CPU, asleep or runnable says
    /// what makes up at least 70% of it: the code paths, the wakers, the CPUs' holders.
    pub fn unexplained(&self) -> Vec<String> {
        // An aggregated recording takes no on-CPU samples and keeps no owners of the CPUs a
        // runnable task waited for, so its on-CPU and runnable findings cannot say what
        // they are made of: corpus_aggregate.rs checks the cause, lock and holder only.
        if self.run["trace"]["aggregate"].is_object() {
            return Vec::new();
        }
        let verdict = self.run["verdict"].as_array().expect("a verdict");
        verdict
            .iter()
            .take(3)
            .filter(|f| {
                ["on-cpu", "sleep", "cpu-starvation"].contains(&f["cause"].as_str().unwrap_or(""))
            })
            .filter_map(|f| {
                let said: f64 = f["explained_by"]
                    .as_array()
                    .map(|parts| parts.iter().filter_map(|p| p["share"].as_f64()).sum())
                    .unwrap_or(0.0);
                (said < 0.7).then(|| {
                    format!(
                        "explained: {:.0}% of {:?} is said to be made of anything",
                        said * 100.0,
                        f["summary"]
                    )
                })
            })
            .collect()
    }

    pub fn fail_with(&self, failures: Vec<String>) {
        if failures.is_empty() {
            return;
        }
        let verdict = self.run["verdict"].as_array().expect("a verdict");
        let lines: Vec<String> = verdict
            .iter()
            .map(|f| format!("  {}  [holder: {}]", f["summary"], f["holder"]))
            .collect();
        panic!(
            "{}: {} statement(s) of the label not met:\n- {}\nverdict:\n{}\n{}",
            self.case,
            failures.len(),
            failures.join("\n- "),
            lines.join("\n"),
            self.describe()
        );
    }

    /// What must be said: the first finding names the labelled cause, lock and what the
    /// holder did; a case without lock contention has no lock blamed anywhere in it.
    pub fn said_failures(
        &self,
        cause: &str,
        lock: Option<&str>,
        holder_does: Option<&str>,
    ) -> Vec<String> {
        let verdict = self.run["verdict"].as_array().expect("a verdict");
        let first = &verdict[0];
        let mut failures = Vec::new();
        let said_cause = first["cause"].as_str().unwrap_or_default();
        if said_cause != cause {
            failures.push(format!(
                "said: the first finding's cause is {}, not {cause}",
                first["cause"]
            ));
        }
        match lock {
            Some(want) => {
                let named = first["lock"].as_str().unwrap_or_default();
                if !named.starts_with(want) {
                    failures.push(format!(
                        "said: the first finding's lock is {:?}, not {want}",
                        first["lock"]
                    ));
                }
            }
            None => {
                for finding in verdict {
                    let blamed = finding["cause"].as_str().unwrap_or_default();
                    if LOCK_CAUSES.contains(&blamed) {
                        failures.push(format!("said: a lock was blamed: {}", finding["summary"]));
                    }
                }
            }
        }
        let holder = first["holder"].as_str().unwrap_or_default();
        // A sleeping lock's holder is named by the waiter it woke; a spinning one's is not,
        // so "runs" is checked for lock-wait only. "Runs" is on a CPU or waiting for one
        // (preempted while holding, on two busy CPUs), never asleep.
        let checked = match (holder_does, cause) {
            _ if said_cause != cause => None,
            (Some("runs"), "lock-wait") => Some("runs"),
            (Some("runs"), _) | (None, _) => None,
            (Some(does), _) => Some(does),
        };
        if let Some(does) = checked {
            if !holder_says(holder, does) {
                failures.push(format!(
                    "said: the first finding's holder does not say it {does}: {holder:?}"
                ));
            }
        }
        failures.extend(self.unnamed(first));
        failures
    }

    /// The label's `must_name`: what makes up the finding's time (the code path its CPU
    /// time ran, who ended its sleeps and what they were doing, the holder's critical
    /// section), each of which the finding must say somewhere, in its summary, its holder
    /// or what it is made of.
    pub fn unnamed(&self, finding: &Value) -> Vec<String> {
        // What makes up a finding comes from on-CPU samples and the streamed sleeps' wakers
        // and chains, which an aggregated recording does not keep: corpus_aggregate.rs
        // checks the cause, lock and holder only.
        if self.run["trace"]["aggregate"].is_object() {
            return Vec::new();
        }
        let mut said: Vec<&str> = vec![
            finding["summary"].as_str().unwrap_or_default(),
            finding["holder"].as_str().unwrap_or_default(),
        ];
        if let Some(parts) = finding["explained_by"].as_array() {
            said.extend(parts.iter().filter_map(|p| p["what"].as_str()));
        }
        self.label["must_name"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .filter(|name| !said.iter().any(|s| s.contains(name)))
            .map(|name| format!("said: the finding does not name {name:?}"))
            .collect()
    }

    /// What must not be said: every statement of the label's `must_not` that a finding
    /// of the verdict makes (corpus/README.md, "The label").
    pub fn must_not_failures(&self) -> Vec<String> {
        let verdict = self.run["verdict"].as_array().expect("a verdict");
        let mut failures = Vec::new();
        for statement in self.label["must_not"].as_array().unwrap() {
            for (rank, finding) in verdict.iter().enumerate() {
                if statement_made(statement, rank, finding) {
                    failures.push(format!(
                        "must not: {statement} is said by finding {}: {} [holder: {}]",
                        rank + 1,
                        finding["summary"],
                        finding["holder"]
                    ));
                }
            }
        }
        failures
    }

    /// Two findings about one task's sleep that cannot both be true: a lock's finding says
    /// its holder slept in F while holding it (or was asleep in F for part of the waiting
    /// behind it), and a sleep finding counts that task's time asleep in F as "holding no
    /// contended lock". A sleep of a task that holds a contended lock is part of that
    /// lock's hold, wherever it is counted.
    pub fn contradictions(&self) -> Vec<String> {
        let verdict = self.run["verdict"].as_array().expect("a verdict");
        let mut failures = Vec::new();
        // The findings split one subject's time: their shares never add to more than all
        // of it, and a lock is one finding, never two that count its waits twice.
        let shares: f64 = verdict.iter().filter_map(|f| f["share"].as_f64()).sum();
        if shares > 1.005 {
            failures.push(format!(
                "contradiction: the findings' shares add to {shares:.3}"
            ));
        }
        let mut locks: Vec<&str> = verdict.iter().filter_map(|f| f["lock"].as_str()).collect();
        locks.sort_unstable();
        for pair in locks.windows(2) {
            if pair[0] == pair[1] {
                failures.push(format!("contradiction: {} is two findings", pair[0]));
            }
        }
        for held in verdict {
            if !LOCK_CAUSES.contains(&held["cause"].as_str().unwrap_or_default()) {
                continue;
            }
            let holder = held["holder"].as_str().unwrap_or_default();
            for (task, function) in holders_asleep(holder) {
                for sleep in verdict {
                    let summary = sleep["summary"].as_str().unwrap_or_default();
                    let evidence: Vec<&str> = sleep["evidence"]
                        .as_array()
                        .map(|e| e.iter().filter_map(|x| x.as_str()).collect())
                        .unwrap_or_default();
                    if sleep["cause"] == "sleep"
                        && summary
                            .contains(&format!("asleep in {function}, holding no contended lock"))
                        && evidence.iter().any(|e| e.contains(&format!("{task} ")))
                    {
                        failures.push(format!(
                            "contradiction: {} says {task} slept in {function} holding it, \
                             and {summary:?} counts that sleep as holding no contended lock",
                            held["lock"]
                        ));
                    }
                }
            }
        }
        failures
    }

    /// The subject's split of the command's time agrees with the CPU time the kernel
    /// charged the command (an independent account): what the trace saw on a CPU is within
    /// what rusage says, and what it may have seen on a CPU (adding spinning on locks)
    /// covers it. No task outlives the recording.
    pub fn assert_subject_agrees_with_the_kernels_accounting(&self) {
        let trace = self.trace();
        let subject = &trace["subject"];
        let usage = &trace["command"];
        let case = self.case;
        assert!(subject.is_object(), "{case}: no subject in {trace:#}");
        let charged = usage["user_ns"].as_u64().unwrap() + usage["system_ns"].as_u64().unwrap();
        let part = |kinds: &[&str]| -> u64 {
            subject["parts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| kinds.contains(&p["kind"].as_str().unwrap()))
                .map(|p| p["total_ns"].as_u64().unwrap())
                .sum()
        };
        let on_cpu = part(&["on_cpu", "cross_cpu"]);
        let at_most_on_cpu = on_cpu + part(&["lock"]);
        // Slack: the trace starts at the fork, before exec. The futex case has shown the
        // kernel charging 14% more than the trace saw on a CPU (1.198 s against 1.048 s),
        // once in a dozen runs, not yet explained: 20% keeps the check on the order of
        // magnitude while that is found.
        let slack = 20_000_000 + charged / 5;
        // The kernel charges CPU time by the tick, to whichever task is running when it
        // fires. A task that sleeps most of the time and is woken by interrupts runs right
        // at the tick an idle CPU programs for the next timer (timerfd-ticks: charged 41 ms
        // for 11 ms the trace and perf sched saw on a CPU): for such tasks the charge is an
        // upper bound only, and only the trace's time is checked against it.
        let asleep = part(&["asleep"]);
        let lived_ns = subject["total_ns"].as_u64().unwrap();
        let mostly_asleep = asleep * 10 >= lived_ns * 7;
        assert!(
            on_cpu <= charged + slack && (mostly_asleep || charged <= at_most_on_cpu + slack),
            "{case}: the trace saw {on_cpu} ns on a CPU ({at_most_on_cpu} with lock waits), the kernel charged {charged} ns\n{subject:#}"
        );
        let tasks = subject["tasks"].as_u64().unwrap();
        let lived = subject["total_ns"].as_u64().unwrap() + subject["joined_ns"].as_u64().unwrap();
        assert!(
            lived <= tasks * self.run_ns() + slack,
            "{case}: {tasks} tasks lived {lived} ns in a {} ns recording",
            self.run_ns()
        );
    }

    /// A compact account of what the trace shows, for failure messages and the test log.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{}: run {} ms, other CPU use {:.0}%\n",
            self.case,
            self.run_ns() / 1_000_000,
            self.run["background"]["other_busy_fraction"]
                .as_f64()
                .unwrap_or(0.0)
                * 100.0
        );
        for lock in self.own_locks().iter().take(4) {
            let frames: Vec<&str> = lock.lock["stacks"][0]["frames"]
                .as_array()
                .map(|f| f.iter().map(|x| symbol(x.as_str().unwrap())).collect())
                .unwrap_or_default();
            out += &format!(
                "  lock {} ({}, modes {}): own {} waits, {} us; all waiters {} us; stack {}\n",
                lock.name(),
                lock.kind(),
                lock.lock["modes"],
                lock.waits,
                lock.wait_ns / 1000,
                lock.lock["total_wait_ns"].as_u64().unwrap() / 1000,
                frames.join(" < ")
            );
        }
        for held in self.trace()["holders"].as_array().unwrap().iter().take(2) {
            let holders: Vec<String> = held["holders"]
                .as_array()
                .unwrap()
                .iter()
                .take(3)
                .map(|h| {
                    format!(
                        "{} {} us",
                        h["comm"].as_str().unwrap(),
                        h["waited_behind_ns"].as_u64().unwrap() / 1000
                    )
                })
                .collect();
            let activity: Vec<String> = held["activity"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    format!(
                        "{}{} {} us",
                        a["activity"].as_str().unwrap(),
                        match a["detail"].as_str().unwrap() {
                            "" => String::new(),
                            d => format!(" ({d})"),
                        },
                        a["wait_ns"].as_u64().unwrap() / 1000
                    )
                })
                .collect();
            out += &format!(
                "  holders of {}: {}; activity: {}\n",
                held["name"].as_str().unwrap(),
                holders.join(", "),
                activity.join(", ")
            );
        }
        for phase in self.phases() {
            let senders: Vec<String> = phase["by_sender"]
                .as_array()
                .unwrap()
                .iter()
                .take(3)
                .map(|s| format!("{} {}", s["comm"].as_str().unwrap(), s["ipis"]))
                .collect();
            out += &format!("  ipis: {} ({})\n", phase["ipis"], senders.join(", "));
        }
        out
    }
}

/// Whether a finding's holder text says its holder `does` (a `holder_does` value): "sleeps"
/// when it slept in a function holding the lock or was asleep for part of the waiting
/// behind it, "runs" when it was running or runnable and did not sleep holding it,
/// "sends-ipis" when it sent IPIs in its holds.
pub fn holder_says(holder: &str, does: &str) -> bool {
    match does {
        "sleeps" => holder.contains(" slept in ") || holder.contains("asleep"),
        "runs" => {
            (holder.contains("running") || holder.contains("runnable"))
                && !holder.contains(" slept in ")
        }
        // Another holder's IPIs are said "X sent N IPIs in its M holds", the first
        // holder's own "..., and sent N IPIs while waiters queued".
        "sends-ipis" => {
            (holder.contains(" in its ") && holder.contains(" IPI"))
                || (holder.contains(" sent ") && holder.contains(" IPIs while waiters queued"))
        }
        _ => panic!("holder_does {does}"),
    }
}

/// The (task "comm/pid", function) pairs a holder text says slept holding the lock:
/// "comm/pid slept in F while holding it" or "comm/pid held it ..., asleep (F) for ...".
/// The holder text names holders one after another, separated by "; ".
pub fn holders_asleep(holder: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut task = String::new();
    for part in holder.split("; ") {
        let first = part.split(' ').next().unwrap_or_default();
        if first
            .rsplit_once('/')
            .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        {
            task = first.to_string();
        }
        if let Some((_, rest)) = part.split_once(" slept in ") {
            out.push((
                task.clone(),
                rest.split(' ').next().unwrap_or_default().to_string(),
            ));
        }
        if let Some((_, rest)) = part.split_once("asleep (") {
            out.push((
                task.clone(),
                rest.split(')').next().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

/// Whether `finding`, ranked `rank` (0 for the first), makes the `must_not` statement:
/// every key the statement gives holds for it (corpus/README.md, "The label").
pub fn statement_made(statement: &Value, rank: usize, finding: &Value) -> bool {
    if statement["first"] == true && rank != 0 {
        return false;
    }
    if let Some(min) = statement["min_share"].as_f64() {
        if finding["share"].as_f64().unwrap_or(0.0) < min {
            return false;
        }
    }
    if let Some(cause) = statement["cause"].as_str() {
        if finding["cause"] != cause {
            return false;
        }
    }
    if let Some(lock) = statement["lock"].as_str() {
        if !finding["lock"]
            .as_str()
            .is_some_and(|named| named.starts_with(lock))
        {
            return false;
        }
    }
    if let Some(does) = statement["holder_does"].as_str() {
        if !finding["holder"]
            .as_str()
            .is_some_and(|h| holder_says(h, does))
        {
            return false;
        }
    }
    if let Some(function) = statement["asleep_in"].as_str() {
        let summary = finding["summary"].as_str().unwrap_or_default();
        // The site as said ("asleep in __synchronize_srcu in kvm_swap_active_memslots,
        // holding ...") names the function anywhere in it; what follows the site (its
        // wakers, what they were doing) is not the site.
        let site = summary.split_once("asleep in ").map_or("", |(_, rest)| {
            rest.split([',', ';']).next().unwrap_or(rest)
        });
        if finding["cause"] != "sleep" || !site.contains(function) {
            return false;
        }
    }
    true
}

/// A `must_not` statement is well formed: known keys of the right types, at least one of
/// what a finding says (cause, lock, holder_does, asleep_in), and none the label's own
/// first finding would make (it would forbid what must be said).
pub fn check_statement(case: &str, label: &Value, statement: &Value) {
    let keys = statement
        .as_object()
        .unwrap_or_else(|| panic!("{case}: must_not entry {statement} is not an object"));
    for key in keys.keys() {
        assert!(
            STATEMENT_KEYS.contains(&key.as_str()),
            "{case}: must_not key {key} (known: {STATEMENT_KEYS:?})"
        );
    }
    assert!(
        ["cause", "lock", "holder_does", "asleep_in"]
            .iter()
            .any(|k| keys.contains_key(*k)),
        "{case}: must_not {statement} says nothing"
    );
    if let Some(cause) = keys.get("cause") {
        assert!(
            cause.as_str().is_some_and(|c| CAUSES.contains(&c)),
            "{case}: must_not cause {cause}"
        );
    }
    if let Some(does) = keys.get("holder_does") {
        assert!(
            does.as_str().is_some_and(|d| HOLDER_DOES.contains(&d)),
            "{case}: must_not holder_does {does}"
        );
    }
    for key in ["lock", "asleep_in"] {
        if let Some(v) = keys.get(key) {
            assert!(
                v.as_str().is_some_and(|v| !v.is_empty()),
                "{case}: must_not {key} {v}"
            );
        }
    }
    if let Some(first) = keys.get("first") {
        assert!(first.is_boolean(), "{case}: must_not first {first}");
    }
    if let Some(min) = keys.get("min_share") {
        assert!(
            min.as_f64().is_some_and(|m| (0.0..=1.0).contains(&m)),
            "{case}: must_not min_share {min}"
        );
    }
    // The finding the label asks for, as the statement would read it.
    let agrees = |key: &str| match key {
        "cause" => label["cause"] == keys[key],
        "lock" => label["lock"]
            .as_str()
            .is_some_and(|l| l.starts_with(keys[key].as_str().unwrap())),
        "holder_does" => label["holder_does"] == keys[key],
        // The label names no function a sleep is in: such a statement only narrows it.
        "asleep_in" => false,
        _ => true,
    };
    assert!(
        !keys.keys().all(|k| agrees(k)),
        "{case}: must_not {statement} forbids the labelled finding itself"
    );
}

/// How long waiters waited behind the holder named `comm` of a lock.
/// mmap_lock's holds come from the kernel's mmap_lock events on this kernel (they exist
/// since 5.10), so each holder's holds have the mode it really took: the mincore readers
/// shared it, and `writer` held it exclusively at least once.
pub fn assert_exact_mmap_lock_holds(holders: &Value, writer: &str, d: &str) {
    assert_eq!(holders["exact_holds"], true, "{d}");
    let of = |prefix: &str| -> Vec<&Value> {
        holders["holders"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["comm"].as_str().unwrap().starts_with(prefix))
            .collect()
    };
    let readers = of("repro-mincore");
    assert!(
        !readers.is_empty(),
        "no mincore reader among the holders\n{d}"
    );
    for reader in readers {
        // Not every one: a thread's first malloc maps its arena, which takes it for writing.
        let (shared, holds) = (reader["shared_holds"].as_u64(), reader["holds"].as_u64());
        assert!(shared.unwrap() * 10 >= holds.unwrap() * 9, "{reader}\n{d}");
    }
    let writers = of(writer);
    assert!(
        writers
            .iter()
            .any(|w| w["shared_holds"].as_u64() < w["holds"].as_u64()),
        "{writer} never held it exclusively\n{d}"
    );
}

pub fn waited_behind(holders: &Value, comm: &str) -> u64 {
    holders["holders"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["comm"] == comm)
        .map(|h| h["waited_behind_ns"].as_u64().unwrap())
        .sum()
}

/// Waiters' time behind a lock's holders while those did `activity`.
pub fn activity_ns(holders: &Value, activity: &str) -> u64 {
    holders["activity"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["activity"] == activity)
        .map(|a| a["wait_ns"].as_u64().unwrap())
        .sum()
}
