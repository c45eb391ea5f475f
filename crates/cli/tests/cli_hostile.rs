//! Hostile input: out-of-range knobs, malformed arguments, a closed or full stdout, files
//! that are not what `report` reads, and event names that try to leave vmscale's tracefs
//! instance. Each must end in one clear line and a non-zero exit (or, for a reader that
//! went away, a quiet exit 0), never a panic, a hang, or something left behind.

mod common;

use common::*;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `command`, failing the test if it has not ended within `limit`: a hang is a bug
/// here, and the test must say so rather than hang itself.
fn output_within(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{command:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn no_panic(o: &Output) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(o.status.code(), Some(101), "{err}");
}

#[test]
fn every_knob_outside_its_range_is_one_line_before_anything_is_created() {
    let out = scratch("hostile-ranges");
    let _removed = RemovedOnDrop(out.clone());
    let mut checked = 0;
    for scenario in vmscale_scenario::catalogue() {
        for knob in &scenario.knobs {
            let Some(range) = knob.range else { continue };
            let mut bad = vec![range.max + 1];
            if range.min > 0 {
                bad.push(range.min - 1);
            }
            for value in bad {
                let o = vmscale()
                    .args(["run", scenario.name, knob.flag, &value.to_string(), "--out"])
                    .arg(&out)
                    .output()
                    .unwrap();
                one_line_failure(&o, 2, knob.flag);
                assert!(
                    !out.exists(),
                    "{} {} {value} created {}",
                    scenario.name,
                    knob.flag,
                    out.display()
                );
                checked += 1;
            }
            // --help states the range the check enforces.
            let help = stdout(
                &vmscale()
                    .args(["run", scenario.name, "--help"])
                    .output()
                    .unwrap(),
            );
            let stated = format!("({} to {})", range.min, range.max);
            assert!(
                help.lines()
                    .any(|l| l.contains(knob.flag) && l.contains(&stated)),
                "{} {}: --help does not say {stated}",
                scenario.name,
                knob.flag
            );
        }
    }
    assert!(checked >= 20, "only {checked} knob limits checked");
}

#[test]
fn a_sweep_that_names_a_point_twice_is_one_line_before_anything_is_created() {
    let out = scratch("hostile-twice");
    let _removed = RemovedOnDrop(out.clone());
    // Every list knob; the repeated value need not be next to its twin.
    for (scenario, flag, values, twice) in [
        ("memslot", "--vcpus", "2,2,2", "2"),
        ("zap", "--vcpus", "1,2,1", "1"),
        ("teardown", "--vms", "1,4,4", "4"),
        ("mlock", "--busy", "0,1,0", "0"),
        ("irqfd", "--total", "1000,1000", "1000"),
        ("qemu-start", "--vcpus", "1,1", "1"),
        ("qemu-start", "--mem-mib", "256,512,256", "256"),
        ("qemu-hotplug", "--vcpus", "4,4", "4"),
        ("qemu-migrate", "--vcpus", "2,1,2", "2"),
    ] {
        let o = vmscale()
            .args(["run", scenario, flag, values, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        one_line_failure(&o, 2, &format!("{flag} lists {twice} more than once"));
        assert!(
            !out.exists(),
            "{scenario} {flag} {values} created {}",
            out.display()
        );
    }
}

#[test]
fn malformed_arguments_are_one_line() {
    for args in [
        &["run", "memslot", "--repeat", "abc"][..],
        &["run", "memslot", "--repeat", "99999999999999999999999999"],
        &["run", "memslot", "--no-such-flag"],
        &["run", "no-such-scenario"],
        &["run", "zap", "--buffer-kib", "1"],
        &["compare", "only-one"],
    ] {
        let o = vmscale().args(args).output().unwrap();
        one_line_failure(&o, 2, "vmscale: error:");
    }
}

/// A pipe whose reader is already gone: every write to it fails with EPIPE, as when
/// `vmscale ... | head -1` has exited.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two fresh fds into the array we own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both fds are ours and open; each is owned exactly once from here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

fn text_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/fixtures/text/events/default.txt")
}

#[test]
fn a_reader_that_goes_away_ends_output_quietly() {
    let fixture = text_fixture();
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["list".as_ref()],
        vec!["doctor".as_ref()],
        vec![
            "report".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            fixture.as_os_str(),
        ],
    ];
    for args in commands {
        let o = vmscale()
            .args(&args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        no_panic(&o);
        // doctor's own verdict (a failed check) is its exit code; the closed pipe adds none.
        assert!(
            stderr(&o).lines().all(|l| !l.contains("standard output")),
            "{args:?}: {}",
            stderr(&o)
        );
        if args[0] != "doctor" {
            assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        }
    }
}

#[test]
fn a_full_stdout_is_one_line() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = vmscale()
        .arg("list")
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    no_panic(&o);
    one_line_failure(&o, 1, "cannot write to standard output");
}

#[test]
fn out_naming_a_file_is_one_line() {
    let file = scratch("hostile-out-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let o = vmscale()
        .args([
            "run",
            "zap",
            "--vcpus",
            "1",
            "--repeat",
            "1",
            "--no-trace",
            "--out",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("is not a directory"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn report_names_what_it_cannot_read_without_blocking() {
    let dir = scratch("hostile-report");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::fs::write(dir.join("empty.json"), b"").unwrap();
    std::fs::write(
        dir.join("random.dat"),
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::write(
        dir.join("cut.json"),
        b"{\"schema_version\": 1, \"points\": [",
    )
    .unwrap();
    std::fs::File::create(dir.join("sparse.json"))
        .unwrap()
        .set_len(16 << 30)
        .unwrap();
    let mut dat_header = b"\x17\x08\x44tracing6\0".to_vec();
    dat_header.extend([0xff; 64]);
    std::fs::write(dir.join("hostile.dat"), dat_header).unwrap();
    std::fs::create_dir_all(dir.join("killed/trace")).unwrap();
    std::fs::create_dir_all(dir.join(".partial-1-1-20260101T000000Z-zap-1")).unwrap();
    let cases: [(&Path, &str); 9] = [
        (&fifo, "FIFO"),
        (Path::new("/dev/zero"), "device"),
        (&dir.join("empty.json"), "empty file"),
        (
            &dir.join("random.dat"),
            "not a run.json, trace-cmd .dat or ftrace text",
        ),
        (&dir.join("cut.json"), "not a vmscale run.json"),
        (
            &dir.join("sparse.json"),
            "not a run.json, trace-cmd .dat or ftrace text",
        ),
        (&dir.join("hostile.dat"), "hostile.dat"),
        (&dir.join("killed"), "killed before it ended"),
        (
            &dir.join(".partial-1-1-20260101T000000Z-zap-1"),
            "not a finished run",
        ),
    ];
    for (path, needle) in cases {
        let o = output_within(vmscale().arg("report").arg(path), Duration::from_secs(30));
        no_panic(&o);
        one_line_failure(&o, 1, needle);
    }
}

#[test]
fn event_names_never_become_paths() {
    let tracing_on = Path::new("/sys/kernel/tracing/tracing_on");
    let before = std::fs::read_to_string(tracing_on).expect("tracefs is not mounted");
    let canary = scratch("hostile-canary");
    std::fs::create_dir_all(canary.join("sched/x")).unwrap();
    std::fs::write(canary.join("sched/x/enable"), b"0").unwrap();
    let escape = format!("sched:../../../../../../..{}/sched/x", canary.display());
    let out = scratch("hostile-events");
    for event in [
        "../../tracing_on",
        "/etc/passwd",
        "sched:../../../tracing_on",
        escape.as_str(),
        "sched:*",
        "sched:sched_switch/enable",
    ] {
        let o = vmscale()
            .args([
                "record",
                "--duration",
                "0.1",
                "--quiet",
                "-e",
                event,
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        no_panic(&o);
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "{event}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{event}: {err}");
        assert!(err.contains("not an event name"), "{event}: {err}");
    }
    assert_eq!(std::fs::read_to_string(tracing_on).unwrap(), before);
    assert_eq!(std::fs::read(canary.join("sched/x/enable")).unwrap(), b"0");
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in --out: {left:?}");
    let _ = std::fs::remove_dir_all(&canary);
    let _ = std::fs::remove_dir_all(&out);
}

/// A tmpfs of `kib` KiB, unmounted and removed when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(name: &str, kib: u64) -> SmallDisk {
        let dir = scratch(name);
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cannot mount a tmpfs (run the tests as root)"
        );
        SmallDisk(dir)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_full_disk_leaves_no_run_that_looks_finished() {
    // Room for run.json and summary.md of a small run, not for its report.html (hundreds
    // of KiB with plots), which is written before run.json.
    let disk = SmallDisk::mount("hostile-full-disk", 48);
    let o = vmscale()
        .args([
            "run",
            "zap",
            "--vcpus",
            "1,2",
            "--repeat",
            "5",
            "--no-trace",
            "--quiet",
            "--out",
        ])
        .arg(&disk.0)
        .output()
        .unwrap();
    no_panic(&o);
    one_line_failure(&o, 1, "No space left on device");
    let left: Vec<_> = std::fs::read_dir(&disk.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left on the full disk: {left:?}");
}

/// A small traced run in `out`, for the commands that read one.
fn traced_run(out: &Path) -> PathBuf {
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

#[test]
fn outputs_never_replace_what_is_not_a_regular_file() {
    use std::os::unix::fs::FileTypeExt;
    let out = scratch("hostile-outputs");
    let _removed = RemovedOnDrop(out.clone());
    let run = traced_run(&out);
    let targets = scratch("hostile-output-targets");
    let _removed_targets = RemovedOnDrop(targets.clone());
    std::fs::create_dir_all(targets.join("dir")).unwrap();
    let fifo = targets.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/null", targets.join("to-device")).unwrap();
    std::os::unix::fs::symlink(targets.join("dir"), targets.join("to-dir")).unwrap();
    let cases: [(PathBuf, &str); 5] = [
        (PathBuf::from("/dev/null"), "a character device"),
        (targets.join("dir"), "a directory"),
        (fifo.clone(), "a FIFO"),
        (
            targets.join("to-device"),
            "a symbolic link to a character device",
        ),
        (targets.join("to-dir"), "a symbolic link to a directory"),
    ];
    for (target, what) in &cases {
        for command in [
            vec!["export", "--dat"],
            vec!["export", "--dat", "--compression", "zstd"],
            vec!["export", "--perfetto"],
        ] {
            let o = output_within(
                vmscale().args(&command).arg(&run).arg("-o").arg(target),
                Duration::from_secs(60),
            );
            no_panic(&o);
            one_line_failure(&o, 2, what);
        }
        let o = output_within(
            vmscale()
                .arg("compare")
                .arg(&run)
                .arg(&run)
                .arg("--html")
                .arg(target),
            Duration::from_secs(60),
        );
        no_panic(&o);
        one_line_failure(&o, 2, what);
    }
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(std::fs::read_dir(targets.join("dir")).unwrap().count(), 0);
    // A symbolic link to a regular file is followed: the file is replaced, the link kept.
    let real = targets.join("real.dat");
    std::fs::write(&real, b"old").unwrap();
    std::os::unix::fs::symlink(&real, targets.join("link.dat")).unwrap();
    let o = vmscale()
        .args(["export", "--dat"])
        .arg(&run)
        .arg("-o")
        .arg(targets.join("link.dat"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(targets.join("link.dat"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read(&real)
        .unwrap()
        .starts_with(b"\x17\x08\x44tracing"));
    let temporaries: Vec<_> = std::fs::read_dir(&targets)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(temporaries.is_empty(), "{temporaries:?}");
}

/// A fake QEMU for `--qemu`: connects to the QMP socket vmscale gives it and then, as
/// FAKE_QMP_MODE says, floods one endless line, trickles a byte every half second, or says
/// nothing. It writes its pid to FAKE_QMP_PIDFILE first.
const FAKE_QEMU: &str = r#"#!/usr/bin/env python3
import os, socket, sys, time
path = sys.argv[sys.argv.index("-qmp") + 1][len("unix:"):]
with open(os.environ["FAKE_QMP_PIDFILE"], "w") as f:
    f.write(str(os.getpid()))
s = socket.socket(socket.AF_UNIX)
s.connect(path)
mode = os.environ["FAKE_QMP_MODE"]
if mode == "flood":
    chunk = b"x" * 65536
    while True:
        s.sendall(chunk)
elif mode == "trickle":
    while True:
        s.sendall(b"{")
        time.sleep(0.5)
else:
    time.sleep(3600)
"#;

/// Starts `run qemu-start` against the fake QEMU in `mode`; returns vmscale and the fake's
/// pid once the fake has connected.
fn start_fake_qemu(dir: &Path, mode: &str) -> (std::process::Child, i32) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let fake = dir.join("fake-qemu");
    if !fake.exists() {
        std::fs::write(&fake, FAKE_QEMU).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let pidfile = dir.join(format!("pid-{mode}"));
    let _ = std::fs::remove_file(&pidfile);
    let child = Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .args([
            "run",
            "qemu-start",
            "--vcpus",
            "1",
            "--repeat",
            "1",
            "--no-trace",
        ])
        .args(["--quiet", "--qemu"])
        .arg(&fake)
        .arg("--out")
        .arg(dir.join("out"))
        .env("FAKE_QMP_MODE", mode)
        .env("FAKE_QMP_PIDFILE", &pidfile)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the fake QEMU never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    // Connected and being read (or waited for).
    std::thread::sleep(Duration::from_millis(300));
    (child, pid)
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is delivered.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn a_qmp_peer_that_floods_is_refused_in_one_line_with_bounded_memory() {
    let dir = scratch("hostile-qmp-flood");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let (child, qemu) = start_fake_qemu(&dir, "flood");
    let vmscale = child.id();
    let mut peak_kib = 0u64;
    let start = Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        let status = std::fs::read_to_string(format!("/proc/{vmscale}/status")).unwrap_or_default();
        if let Some(kib) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "still reading the flood"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let o = child.wait_with_output().unwrap();
    no_panic(&o);
    one_line_failure(&o, 1, "a line of more than 4 MiB");
    assert!(
        peak_kib < 200 << 10,
        "vmscale grew to {peak_kib} KiB reading one line"
    );
    assert!(!alive(qemu), "the fake QEMU outlived the error");
}

#[test]
fn a_signal_ends_a_wait_on_a_silent_or_trickling_qmp_peer_at_once() {
    let dir = scratch("hostile-qmp-signals");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    for mode in ["silent", "trickle"] {
        for (signal, to_group, how) in [
            (libc::SIGINT, true, "Ctrl-C"),
            (libc::SIGTERM, false, "SIGTERM"),
            (libc::SIGHUP, false, "SIGHUP"),
        ] {
            let (child, qemu) = start_fake_qemu(&dir, mode);
            let target = if to_group {
                -(child.id() as i32)
            } else {
                child.id() as i32
            };
            let sent = Instant::now();
            // SAFETY: our own child or its process group; only a signal is sent.
            assert_eq!(unsafe { libc::kill(target, signal) }, 0);
            let mut child = child;
            while child.try_wait().unwrap().is_none() {
                assert!(
                    sent.elapsed() < Duration::from_secs(10),
                    "{mode} after {how}: still running"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            let took = sent.elapsed();
            let o = child.wait_with_output().unwrap();
            let case = format!("{mode} after {how}");
            no_panic(&o);
            one_line_failure(&o, 130, "interrupted");
            assert!(took < Duration::from_secs(1), "{case}: {took:?} to exit");
            assert!(!alive(qemu), "{case}: the fake QEMU outlived vmscale");
            eprintln!("{case}: exit 130 after {took:?}");
        }
    }
    assert!(
        std::fs::read_dir(dir.join("out"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "a run directory was left"
    );
}

/// `vmscale ARGS --quiet --out OUT` with resource limit `resource` set to `limit` in the
/// child alone (as `ulimit` in a shell would), with its pid.
fn limited(
    resource: libc::__rlimit_resource_t,
    limit: u64,
    args: &[&str],
    out: &Path,
) -> (Output, u32) {
    use std::os::unix::process::CommandExt;
    let mut command = vmscale();
    command.args(args).args(["--quiet", "--out"]).arg(out);
    // SAFETY: runs in the forked child before exec and calls only setrlimit, which is
    // async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let rlim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(resource, &rlim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    (o, pid)
}

/// Nothing of the run with `pid` is left: no run directory in `out`, no tracefs instance.
fn nothing_left(out: &Path, pid: u32, case: &str) {
    let left: Vec<_> = std::fs::read_dir(out)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{case}: left in --out: {left:?}");
    let prefix = format!("vmscale-{pid}-");
    let instances: Vec<_> = std::fs::read_dir("/sys/kernel/tracing/instances")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(
        instances.is_empty(),
        "{case}: tracefs instance left: {instances:?}"
    );
}

#[test]
fn too_few_file_descriptors_are_one_line_exit_2_and_leave_nothing() {
    let out = scratch("hostile-nofile");
    let _removed = RemovedOnDrop(out.clone());
    for limit in [4, 6, 16, 40] {
        for args in [
            &["record", "--duration", "0.2"][..],
            &["run", "irqfd", "--total", "1000"],
            &["run", "zap", "--vcpus", "1", "--repeat", "3"],
            &["run", "zap", "--vcpus", "1", "--repeat", "3", "--no-trace"],
            &["tour"],
        ] {
            let (o, pid) = limited(libc::RLIMIT_NOFILE, limit, args, &out);
            let case = format!("ulimit -n {limit}: {args:?}");
            no_panic(&o);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{case}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{case}: {err}");
            assert!(
                err.contains("file descriptors") && err.contains("ulimit -n"),
                "{case}: {err}"
            );
            nothing_left(&out, pid, &case);
        }
    }
}

/// The program's loaded size, in KiB: the sum of its ELF file's loadable segments in memory
/// (what `size` calls text, data and bss), which exec maps before anything of it runs.
fn loaded_kib(program: &str) -> u64 {
    let elf = std::fs::read(program).unwrap();
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not a 64-bit ELF program");
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    let loaded: u64 = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&ph| u32::from_le_bytes(elf[ph..ph + 4].try_into().unwrap()) == 1)
        .map(|ph| u64_at(ph + 0x28))
        .sum();
    loaded.div_ceil(1024)
}

#[test]
fn an_address_space_limit_never_aborts_and_leaves_nothing() {
    let out = scratch("hostile-as");
    let _removed = RemovedOnDrop(out.clone());
    let mut failed = 0;
    // From where vmscale barely loads to where small runs fit: each allocation, map and
    // thread that fails on the way must end in one line with exit 1 or 2, cleaned up.
    // Below its own program image (and the C library's) no program gets to run at all:
    // the kernel ends it at exec, so the limits start a few MB above that image.
    let image = loaded_kib(env!("CARGO_BIN_EXE_vmscale"));
    let floor = (image + 4_000).div_ceil(1_000) * 1_000;
    assert!(floor < 40_000, "vmscale's program image is {image} KiB");
    let limits = (0..8)
        .map(|step| floor + step * 5_000)
        .chain([150_000, 300_000]);
    for kib in limits {
        for args in [
            &["record", "--duration", "0.2"][..],
            &["run", "irqfd", "--total", "1000"],
            &["run", "zap", "--vcpus", "1,2", "--repeat", "3"],
        ] {
            let (o, pid) = limited(libc::RLIMIT_AS, kib << 10, args, &out);
            let case = format!("ulimit -v {kib}: {args:?}");
            no_panic(&o);
            let err = stderr(&o);
            match o.status.code() {
                Some(0) => {
                    let _ = std::fs::remove_dir_all(&out);
                }
                Some(1 | 2) => {
                    failed += 1;
                    // The error is one line, the last. Before it may come a warning about
                    // what the limit cost a run that went on (sampling that found no room
                    // for its buffers), never a second error or a panic.
                    let lines: Vec<&str> = err.trim_end().lines().collect();
                    let (last, before) = lines.split_last().expect("an error line");
                    assert!(last.starts_with("vmscale: error: "), "{case}: {err}");
                    assert!(
                        before.iter().all(|l| l.starts_with("vmscale: ")
                            && !l.starts_with("vmscale: error")
                            && l.ends_with("goes on without them")),
                        "{case}: {err}"
                    );
                    nothing_left(&out, pid, &case);
                }
                other => panic!("{case}: exit {other:?} (134 is an abort): {err}"),
            }
        }
    }
    assert!(
        failed >= 10,
        "only {failed} runs hit the limit: the test no longer tests it"
    );
    // A VM that cannot fit is refused before anything is made.
    let (o, pid) = limited(
        libc::RLIMIT_AS,
        300_000 << 10,
        &["run", "memslot", "--vcpus", "1024"],
        &out,
    );
    one_line_failure(&o, 2, "address-space limit");
    nothing_left(&out, pid, "memslot 1024 vCPUs under ulimit -v 300000");
}

#[test]
fn threads_that_start_at_an_address_space_limit_leave_no_instance_and_print_no_panic() {
    // irqfd's holder threads start, and give themselves private fd tables, right where the
    // limit runs out: a holder parked half-way with copies of the trace's files kept the
    // tracefs instance from being removed, and a thread whose signal stack found no room
    // panicked before any of vmscale's code ran. The window is narrow; tries widen it.
    let out = scratch("hostile-as-threads");
    let _removed = RemovedOnDrop(out.clone());
    for kib in [45_000, 50_000, 55_000] {
        for attempt in 0..6 {
            let (o, pid) = limited(
                libc::RLIMIT_AS,
                kib << 10,
                &["run", "irqfd", "--total", "1000"],
                &out,
            );
            let case = format!("ulimit -v {kib}, try {attempt}");
            no_panic(&o);
            let err = stderr(&o);
            match o.status.code() {
                Some(0) => {
                    let _ = std::fs::remove_dir_all(&out);
                }
                Some(1 | 2) => {
                    let last = err.trim_end().lines().last().unwrap_or_default();
                    assert!(last.starts_with("vmscale: error: "), "{case}: {err}");
                    nothing_left(&out, pid, &case);
                }
                other => panic!("{case}: exit {other:?} (134 is an abort): {err}"),
            }
        }
    }
}

#[test]
fn a_command_that_cannot_start_is_one_line_and_records_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("hostile-record-command");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let not_executable = dir.join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Executable, but no format exec knows: refused by exec itself, after the checks.
    let garbage = dir.join("garbage");
    std::fs::write(&garbage, b"\x7fELF but not really\0\x01\x02").unwrap();
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join("out");
    let cases: [(&std::ffi::OsStr, i32, &str); 5] = [
        ("/nonexistent/command".as_ref(), 2, "No such file"),
        ("no-such-command-anywhere".as_ref(), 2, "command not found"),
        (not_executable.as_os_str(), 2, "not executable"),
        (dir.as_os_str(), 2, "is a directory"),
        (garbage.as_os_str(), 1, "could not start"),
    ];
    for (command, code, needle) in cases {
        let o = output_within(
            vmscale()
                .args(["record", "--quiet", "--out"])
                .arg(&out)
                .arg("--")
                .arg(command),
            Duration::from_secs(60),
        );
        no_panic(&o);
        one_line_failure(&o, code, needle);
        let case = format!("record -- {}", Path::new(command).display());
        assert!(o.stdout.is_empty(), "{case}: printed {}", stdout(&o));
        let left: Vec<_> = std::fs::read_dir(&out)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{case}: left a run directory: {left:?}");
    }
}

#[test]
fn compare_judges_300000_samples_per_series_in_seconds() {
    let out = scratch("hostile-compare-many");
    let _removed = RemovedOnDrop(out.clone());
    let o = vmscale()
        .args([
            "run",
            "zap",
            "--vcpus",
            "1",
            "--repeat",
            "3",
            "--no-trace",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let template: serde_json::Value =
        serde_json::from_slice(&std::fs::read(only_run_dir(&out).join("run.json")).unwrap())
            .unwrap();
    // Two runs of 300,000 samples per series, B 10% slower: what `--repeat 300000` writes.
    const N: usize = 300_000;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut write = |name: &str, scale: f64| {
        let mut run = template.clone();
        // Whether this shared host was busy during the template run is not the question.
        run["background"] = serde_json::Value::Null;
        for point in run["points"].as_array_mut().unwrap() {
            for series in point["series"].as_array_mut().unwrap() {
                let samples: Vec<u64> = (0..N)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        ((10_000 + rng % 4_000) as f64 * scale) as u64
                    })
                    .collect();
                series["samples_ns"] = samples.into();
                series.as_object_mut().unwrap().remove("sample_start_ns");
            }
        }
        let path = out.join(name);
        std::fs::write(&path, serde_json::to_vec(&run).unwrap()).unwrap();
        path
    };
    let (a, b) = (write("a.json", 1.0), write("b.json", 1.10));
    let start = Instant::now();
    let o = output_within(
        vmscale()
            .arg("compare")
            .arg(&a)
            .arg(&b)
            .args(["--format", "json"]),
        Duration::from_secs(120),
    );
    let took = start.elapsed();
    assert!(o.status.success(), "{}", stderr(&o));
    let comparison: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = comparison["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert_eq!(row["samples_a"], N, "{row}");
        assert_eq!(row["verdict"], "slower", "{row}");
    }
    // 0.15 ms per sample before: 45 s per series of 300,000 samples.
    let per_series = took / rows.len() as u32;
    eprintln!("compare: {took:?} for {} series of {N} samples", rows.len());
    assert!(
        per_series < Duration::from_secs(3),
        "{per_series:?} per series"
    );
}

/// `vmscale ARGS` in a private mount namespace where a tmpfs, made to look like tracefs
/// (an `instances/` directory, an `available_events` file), covers /sys/kernel/tracing.
/// /proc/mounts there still lists tracefs at that path, under the tmpfs. A debugfs mounted
/// on the host is covered too: its tracing directory is a real tracefs, which vmscale
/// rightly falls back to (trace-cmd mounts debugfs where it looks for tracing).
fn over_tracefs(args: &[&str]) -> Output {
    let script = "mount -t tmpfs none /sys/kernel/tracing \
        && mkdir /sys/kernel/tracing/instances \
        && : > /sys/kernel/tracing/available_events \
        && { ! mountpoint -q /sys/kernel/debug || mount -t tmpfs none /sys/kernel/debug; } \
        && exec \"$0\" \"$@\"";
    Command::new("unshare")
        .args(["-m", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_vmscale"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_filesystem_over_tracefs_is_named_not_taken_for_tracefs() {
    let out = scratch("hostile-over-tracefs");
    let _removed = RemovedOnDrop(out.clone());
    let out_arg = out.to_str().unwrap();
    let o = over_tracefs(&[
        "run", "zap", "--vcpus", "1", "--repeat", "3", "--quiet", "--out", out_arg,
    ]);
    no_panic(&o);
    one_line_failure(&o, 1, "/sys/kernel/tracing is tmpfs, not tracefs");
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in --out: {left:?}");
    // doctor, as root, names what is there instead of telling root to run as root.
    let o = over_tracefs(&["doctor", "--out", out_arg]);
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.contains(" tracefs "))
        .unwrap_or_else(|| panic!("no tracefs line: {text}"));
    assert!(line.starts_with("FAIL"), "{line}");
    assert!(line.contains("is tmpfs, not tracefs"), "{line}");
    assert!(!line.contains("run as root"), "{line}");
}

#[test]
fn an_export_of_a_cpu_file_grown_to_holes_says_so_as_report_does() {
    let out = scratch("hostile-sparse-export");
    let _removed = RemovedOnDrop(out.clone());
    let run = traced_run(&out.join("runs"));
    // 64 MiB of holes after the recorded pages: a file that changed after recording.
    std::fs::OpenOptions::new()
        .write(true)
        .open(run.join("trace/cpu0.raw"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let said = "trace/cpu0.raw holds 16,384 pages but the recorder wrote";
    let report = vmscale()
        .args(["report", "--details"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", stderr(&report));
    assert!(
        stdout(&report).contains(said),
        "report: {}",
        stdout(&report)
    );
    let target = out.join("sparse.dat");
    let o = vmscale()
        .args(["export", "--dat"])
        .arg(&run)
        .arg("-o")
        .arg(&target)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let warning = err
        .lines()
        .find(|l| l.starts_with("vmscale: warning: "))
        .unwrap_or_else(|| panic!("no warning: {err}"));
    assert!(warning.contains(said), "{warning}");
    assert!(target.is_file());
}
