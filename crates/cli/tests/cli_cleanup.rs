//! Signals, on the real kernel: every scenario and `record`, interrupted by a Ctrl-C to the
//! whole process group (as a terminal sends it) and by a SIGTERM or SIGHUP to vmscale
//! alone; an export interrupted and killed half-way through its file. Each
//! run must end with exit 130 and one line, leave no tracefs instance, no process and (for
//! scenarios) no run directory; `record` keeps its trace, marked. A SIGKILLed run's leftovers
//! are listed by `doctor` and removed by `doctor --cleanup`. Runs alone in its own test
//! binary, since it inspects tracefs instances by pid.

mod common;

use common::*;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTANCES: &str = "/sys/kernel/tracing/instances";

fn instances_of(pid: u32) -> Vec<String> {
    let prefix = format!("vmscale-{pid}-");
    std::fs::read_dir(INSTANCES)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the run is inside a measured phase (its instance is tracing) or has started a
/// child (teardown holders, record's command): past setup, in the part a user interrupts.
fn measuring(pid: u32) -> bool {
    let tracing = instances_of(pid).iter().any(|name| {
        std::fs::read_to_string(Path::new(INSTANCES).join(name).join("tracing_on"))
            .is_ok_and(|on| on.trim() == "1")
    });
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .is_ok_and(|c| !c.trim().is_empty());
    !instances_of(pid).is_empty() && (tracing || children)
}

/// Every process of the group `pgid` is gone (holders, the traced command).
fn group_gone(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks that the group exists; nothing is delivered.
    let rc = unsafe { libc::kill(-(pgid as i32), 0) };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Starts vmscale in its own process group (a terminal's job) and waits until it measures.
fn start(args: &[&str], out: &Path) -> Child {
    // Options go before a `--`, which starts record's command.
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let mut child = Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .args(&args[..split])
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .args(&args[split..])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !measuring(child.id()) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("vmscale {args:?} ended before measuring: {status}");
        }
        assert!(Instant::now() < deadline, "vmscale {args:?} never measured");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Each scenario with knobs that keep it measuring for far longer than the test waits.
const SCENARIOS: &[(&str, &[&str])] = &[
    (
        "memslot",
        &[
            "run",
            "memslot",
            "--vcpus",
            "2",
            "--repeat",
            "1000000",
            "--warmup",
            "0",
            "--strategy",
            "pause-all",
        ],
    ),
    (
        "zap",
        &[
            "run",
            "zap",
            "--vcpus",
            "2",
            "--repeat",
            "1000000",
            "--no-baseline",
        ],
    ),
    (
        "teardown",
        &[
            "run", "teardown", "--vms", "1", "--vcpus", "1", "--mode", "close", "--repeat", "10000",
        ],
    ),
    (
        "irqfd",
        &["run", "irqfd", "--total", "150000", "--threads", "2"],
    ),
    (
        "mlock",
        &["run", "mlock", "--calls", "1000000", "--busy", "0"],
    ),
];

/// How a signal reaches vmscale: the terminal's Ctrl-C goes to the whole process group,
/// `kill` to vmscale alone; a terminal that closes (a dropped ssh session) sends SIGHUP,
/// which must end a run as cleanly as SIGTERM does.
const SIGNALS: &[(i32, bool, &str)] = &[
    (libc::SIGINT, true, "Ctrl-C"),
    (libc::SIGTERM, false, "SIGTERM"),
    (libc::SIGHUP, false, "SIGHUP"),
];

fn send(child: &Child, signal: i32, to_group: bool) {
    let target = if to_group {
        -(child.id() as i32)
    } else {
        child.id() as i32
    };
    // SAFETY: our own child (not yet reaped) or its process group; only a signal is sent.
    assert_eq!(unsafe { libc::kill(target, signal) }, 0);
}

#[test]
fn every_scenario_stops_cleanly_on_ctrl_c_sigterm_and_sighup() {
    assert!(
        Path::new(INSTANCES).exists(),
        "tracefs is not mounted at /sys/kernel/tracing"
    );
    for (scenario, args) in SCENARIOS {
        for &(signal, to_group, how) in SIGNALS {
            let out = scratch(&format!("signal-{scenario}-{signal}"));
            let _removed = RemovedOnDrop(out.clone());
            let child = start(args, &out);
            let pid = child.id();
            send(&child, signal, to_group);
            let output = child.wait_with_output().unwrap();
            let err = stderr(&output);
            let case = format!("{scenario} after {how}");
            assert_eq!(output.status.code(), Some(130), "{case}: {err}");
            assert!(err.contains("interrupted"), "{case}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{case}: {err}");
            assert!(
                instances_of(pid).is_empty(),
                "{case}: tracefs instance left"
            );
            assert!(
                group_gone(pid),
                "{case}: a process of the run is still alive"
            );
            let left: Vec<_> = std::fs::read_dir(&out)
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "{case}: left in --out: {left:?}");
        }
    }
}

#[test]
fn record_passes_the_signal_on_and_keeps_the_trace_marked() {
    for &(signal, to_group, how) in SIGNALS {
        let out = scratch(&format!("signal-record-{signal}"));
        let _removed = RemovedOnDrop(out.clone());
        let child = start(&["record", "--format", "json", "--", "sleep", "600"], &out);
        let pid = child.id();
        send(&child, signal, to_group);
        let output = child.wait_with_output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(130), "{how}: {err}");
        assert!(
            group_gone(pid),
            "{how}: the traced command outlived vmscale"
        );
        assert!(instances_of(pid).is_empty(), "{how}: tracefs instance left");
        let run = only_run_dir(&out);
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
        let warnings = record["warnings"].to_string();
        assert!(
            warnings.contains("recording interrupted by"),
            "{how}: {warnings}"
        );
        assert!(run.join("trace").is_dir(), "{how}: the trace was not kept");
        assert!(err.contains("interrupted by"), "{how}: {err}");
    }
}

#[test]
fn an_interrupted_tour_keeps_what_finished_and_says_where_it_stopped() {
    let out = scratch("signal-tour");
    let _removed = RemovedOnDrop(out.clone());
    let mut child = Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .args(["tour", "--quiet", "--out"])
        .arg(&out)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the first scenario has finished (its directory got its final name
    // inside the tour's temporary one) and the second one measures.
    let deadline = Instant::now() + Duration::from_secs(120);
    let finished_one = || {
        std::fs::read_dir(&out)
            .into_iter()
            .flatten()
            .flatten()
            .any(|tour| {
                std::fs::read_dir(tour.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|run| {
                        let name = run.file_name().to_string_lossy().into_owned();
                        name.ends_with("-memslot")
                    })
            })
    };
    while !(finished_one() && measuring(child.id())) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the tour ended by itself"
        );
        assert!(
            Instant::now() < deadline,
            "the tour never reached its second scenario"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    send(&child, libc::SIGINT, true);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let tour = only_run_dir(&out);
    assert!(tour
        .file_name()
        .unwrap()
        .to_string_lossy()
        .ends_with("-tour"));
    let summary = std::fs::read_to_string(tour.join("summary.md")).unwrap();
    assert!(
        summary.starts_with(
            "**This tour did not finish: interrupted during zap. Finished: memslot; never ran:"
        ),
        "{}",
        &summary[..summary.len().min(300)]
    );
    let page = std::fs::read_to_string(tour.join("report.html")).unwrap();
    assert!(page.contains("did not finish"));
}

#[test]
fn a_killed_runs_leftovers_are_listed_by_doctor_and_removed_by_cleanup() {
    let out = scratch("SIGKILL");
    let _removed = RemovedOnDrop(out.clone());
    let mut child = start(SCENARIOS[0].1, &out);
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    // SIGKILL runs no cleanup at all: its instance and temporary directory stay.
    assert!(
        !instances_of(pid).is_empty(),
        "the killed run's instance should still be there"
    );
    let partial: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        partial.len() == 1 && partial[0].starts_with(&format!(".partial-{pid}-")),
        "{partial:?}"
    );
    let doctor = |cleanup: bool| {
        let mut command = vmscale();
        command.arg("doctor").arg("--out").arg(&out);
        if cleanup {
            command.arg("--cleanup");
        }
        stdout(&command.output().unwrap())
    };
    let listed = doctor(false);
    assert!(listed.contains(&format!("vmscale-{pid}-")), "{listed}");
    assert!(listed.contains(&partial[0]), "{listed}");
    assert!(
        !instances_of(pid).is_empty(),
        "plain doctor removed an instance"
    );
    let cleaned = doctor(true);
    assert!(cleaned.contains(&format!("vmscale-{pid}-")), "{cleaned}");
    assert!(cleaned.contains(&partial[0]), "{cleaned}");
    assert!(
        instances_of(pid).is_empty(),
        "stale instance survived doctor --cleanup"
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "partial directory survived"
    );
}

/// A traced zap run in `out`, small and quick.
fn small_run(out: &Path) -> std::path::PathBuf {
    let o = vmscale()
        .args([
            "run", "zap", "--vcpus", "1", "--repeat", "3", "--quiet", "--out",
        ])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    only_run_dir(out)
}

/// Hidden files in `dir`: temporary outputs.
fn hidden(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

/// Starts `vmscale export --dat RUN -o TARGET` and waits until its temporary file exists.
fn start_export(run: &Path, target: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .args(["export", "--dat"])
        .arg(run)
        .arg("-o")
        .arg(target)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dir = target.parent().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while hidden(dir).is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("export ended before writing: {status}");
        }
        assert!(Instant::now() < deadline, "export never started writing");
        std::thread::sleep(Duration::from_millis(1));
    }
    child
}

#[test]
fn an_interrupted_export_leaves_nothing_and_a_killed_ones_file_is_removed_later() {
    let out = scratch("signal-export");
    let _removed = RemovedOnDrop(out.clone());
    let small = small_run(&out.join("small"));
    let big = small_run(&out.join("big"));
    // 512 MiB of holes: an export that runs long enough to be interrupted.
    std::fs::OpenOptions::new()
        .write(true)
        .open(big.join("trace/cpu0.raw"))
        .unwrap()
        .set_len(512 << 20)
        .unwrap();
    let targets = out.join("targets");
    std::fs::create_dir_all(&targets).unwrap();
    let target = targets.join("big.dat");
    for &(signal, to_group, how) in SIGNALS {
        let child = start_export(&big, &target);
        send(&child, signal, to_group);
        let output = child.wait_with_output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(130), "{how}: {err}");
        // The holes made above are warned about before the copy starts; the error is the
        // one line after.
        let lines: Vec<&str> = err.trim_end().lines().collect();
        assert_eq!(lines.len(), 2, "{how}: {err}");
        assert!(
            lines[0].starts_with("vmscale: warning: trace/cpu0.raw holds"),
            "{how}: {err}"
        );
        assert!(lines[1].contains("interrupted"), "{how}: {err}");
        assert_eq!(hidden(&targets), Vec::<String>::new(), "{how}: left behind");
        assert!(
            !target.exists(),
            "{how}: an unfinished export under its name"
        );
    }
    // SIGKILL runs nothing: the temporary file stays, doctor lists it, --cleanup removes it.
    let doctor = |cleanup: bool| {
        let mut command = vmscale();
        command.arg("doctor").arg("--out").arg(&targets);
        if cleanup {
            command.arg("--cleanup");
        }
        stdout(&command.output().unwrap())
    };
    for later in ["doctor", "export"] {
        let mut child = start_export(&big, &target);
        child.kill().unwrap();
        child.wait().unwrap();
        let left = hidden(&targets);
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(doctor(false).contains(&left[0]), "{}", doctor(false));
        if later == "doctor" {
            assert!(doctor(true).contains(&left[0]));
        } else {
            // The next export into the same directory removes it.
            let o = vmscale()
                .args(["export", "--dat"])
                .arg(&small)
                .arg("-o")
                .arg(targets.join("small.dat"))
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
        }
        assert_eq!(hidden(&targets), Vec::<String>::new(), "after {later}");
    }
}

/// A pseudo-terminal: the master end (what sshd or a terminal emulator holds) and the
/// slave end, which becomes vmscale's controlling terminal and its stdin, stdout and stderr.
fn pseudo_terminal() -> (OwnedFd, OwnedFd) {
    // SAFETY: posix_openpt takes flags only and returns a new descriptor or -1 (checked).
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    assert!(
        master >= 0,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `master` was just opened and is owned by nothing else.
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    // SAFETY: grantpt, unlockpt and TIOCGPTPEER act on the master we own; TIOCGPTPEER
    // returns a new descriptor of its slave or -1 (checked), and F_SETFL sets flags only.
    let slave = unsafe {
        assert_eq!(libc::grantpt(master.as_raw_fd()), 0);
        assert_eq!(libc::unlockpt(master.as_raw_fd()), 0);
        let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
        let slave = libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags);
        assert!(
            slave >= 0,
            "TIOCGPTPEER: {}",
            std::io::Error::last_os_error()
        );
        // Drained while vmscale runs; a full terminal would stop it writing.
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK);
        OwnedFd::from_raw_fd(slave)
    };
    (master, slave)
}

/// Reads what the terminal shows so far, without waiting.
fn drain(master: &OwnedFd, shown: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads into a live buffer of its length from a descriptor we own.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            return;
        }
        shown.extend_from_slice(&buf[..n as usize]);
    }
}

#[test]
fn a_terminal_that_hangs_up_ends_a_run_as_sigterm_does() {
    // The real thing rather than a kill: vmscale in its own session on a pseudo-terminal,
    // showing its progress there, and the terminal's master closed as a dropped ssh
    // session closes it. The kernel then hangs the terminal up: SIGHUP (and SIGCONT) to
    // the session, and every later write to the terminal fails.
    let memslot = SCENARIOS[0].1;
    let record: &[&str] = &["record", "--", "sleep", "600"];
    for (what, args) in [("memslot", memslot), ("record", record)] {
        let out = scratch(&format!("hangup-{what}"));
        let _removed = RemovedOnDrop(out.clone());
        let (master, slave) = pseudo_terminal();
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        let mut command = Command::new(env!("CARGO_BIN_EXE_vmscale"));
        command
            .args(&args[..split])
            .arg("--out")
            .arg(&out)
            .args(&args[split..])
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: setsid and ioctl are async-signal-safe and only affect the child about
        // to exec: a new session whose controlling terminal is the slave on its stdin.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().unwrap();
        // The command's copies of the slave are gone with it: only vmscale holds it now.
        drop(command);
        let pid = child.id();
        let mut shown = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !measuring(pid) {
            drain(&master, &mut shown);
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "{what} ended before measuring: {status}: {}",
                    String::from_utf8_lossy(&shown)
                );
            }
            assert!(Instant::now() < deadline, "{what} never measured");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Let it draw progress for a moment, then hang up.
        std::thread::sleep(Duration::from_millis(300));
        drain(&master, &mut shown);
        let hung_up = Instant::now();
        drop(master);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                hung_up.elapsed() < Duration::from_secs(30),
                "{what} still running 30 s after its terminal hung up"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = hung_up.elapsed();
        eprintln!("{what}: ended {took:?} after the hang-up, {status}");
        assert_eq!(status.code(), Some(130), "{what}: {status}");
        assert!(
            instances_of(pid).is_empty(),
            "{what}: tracefs instance left"
        );
        assert!(
            group_gone(pid),
            "{what}: a process of the run is still alive"
        );
        let left: Vec<String> = std::fs::read_dir(&out)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.iter().all(|name| !name.starts_with(".partial-")),
            "{what}: an unfinished directory is left: {left:?}"
        );
        if what == "record" {
            // The trace so far is kept, marked as interrupted, as after a SIGHUP by kill.
            let run = only_run_dir(&out);
            let json = std::fs::read_to_string(run.join("run.json")).unwrap();
            assert!(json.contains("recording interrupted by"), "{json}");
        } else {
            assert!(left.is_empty(), "{what}: left in --out: {left:?}");
        }
    }
}
