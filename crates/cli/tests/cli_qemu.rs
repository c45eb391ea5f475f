//! The QEMU scenarios and attaching to a QEMU, through the command line, on the real QEMU
//! and /dev/kvm of this host. A host without QEMU fails these tests (scripts/test installs
//! it): they exist to prove vmscale drives one.
//!
//! The test process makes itself a child subreaper, so a QEMU that a vmscale run left
//! behind is reparented to it instead of to init, where the test could not see it: after
//! every run, no QEMU may have the test as its parent. The tests run one at a time, since
//! one test's orphan (a killed vmscale's QEMU before it dies) or its own QEMU would be
//! another's leftover.

mod common;

use common::*;

use std::process::Stdio;
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Held by every test for its whole run.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Makes this process the subreaper of orphans and returns the test's turn.
fn subreaper() -> MutexGuard<'static, ()> {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only changes who adopts orphans.
        let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(r, 0, "PR_SET_CHILD_SUBREAPER failed");
    });
    turn
}

fn qemu_binary() -> std::path::PathBuf {
    vmscale_vmm::find_qemu(None)
        .unwrap_or_else(|e| panic!("these tests need QEMU (scripts/test installs it): {e}"))
}

/// (pid, parent, state, comm) of every process.
fn processes() -> Vec<(u32, u32, char, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let comm = stat[open + 1..close].to_string();
            let mut rest = stat[close + 1..].split_whitespace();
            let state = rest.next()?.chars().next()?;
            let parent = rest.next()?.parse().ok()?;
            Some((pid, parent, state, comm))
        })
        .collect()
}

fn children_named_qemu(parent: u32) -> Vec<(u32, char)> {
    processes()
        .into_iter()
        .filter(|(_, p, _, comm)| *p == parent && comm.starts_with("qemu-system"))
        .map(|(pid, _, state, _)| (pid, state))
        .collect()
}

/// No QEMU was left behind by a vmscale run of this test process.
fn assert_no_qemu_left() {
    let left = children_named_qemu(std::process::id());
    assert!(left.is_empty(), "QEMUs left behind (pid, state): {left:?}");
}

/// Runs vmscale with `args` plus `--quiet --format json --out <scratch>`; returns the
/// printed run after checking no QEMU outlived it.
fn qemu_run(args: &[&str], name: &str) -> Value {
    let _turn = subreaper();
    qemu_binary();
    let run = json_run(args, name);
    assert_no_qemu_left();
    run
}

fn series(run: &Value) -> Vec<&Value> {
    run["points"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["series"].as_array().unwrap())
        .collect()
}

/// Every phase of a sample adds up to the sample exactly.
fn assert_phases_sum(series: &Value) {
    let samples = u64s(&series["samples_ns"]);
    let phases = series["phases"].as_array().unwrap();
    assert!(!phases.is_empty());
    for (i, &sample) in samples.iter().enumerate() {
        let sum: u64 = phases
            .iter()
            .map(|p| p["samples_ns"][i].as_u64().unwrap())
            .sum();
        assert_eq!(sum, sample, "phases of sample {i} of {}", series["name"]);
    }
}

fn vmm_ioctl<'a>(vmm: &'a Value, names: &[&str]) -> Option<&'a Value> {
    vmm["ioctls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| names.contains(&i["name"].as_str().unwrap()))
}

#[test]
fn qemu_hotplug_gives_a_distribution_per_n_the_ioctls_of_each_hotplug_and_a_verdict() {
    let run = qemu_run(
        &[
            "run",
            "qemu-hotplug",
            "--vcpus",
            "1,2",
            "--repeat",
            "8",
            "--warmup",
            "1",
            "--dimm-mib",
            "64",
        ],
        "qemu-hotplug",
    );
    assert_eq!(run["scenario"], "qemu-hotplug");
    let points: Vec<u64> = run["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["n"].as_u64().unwrap())
        .collect();
    assert_eq!(points, [1, 2]);
    for s in series(&run) {
        assert_eq!(s["name"], "hotplug");
        assert_eq!(s["summary"]["n"], 8, "{}", s["summary"]);
        assert_phases_sum(s);
        let notes = s["notes"].to_string();
        assert!(notes.contains("\"QEMU "), "the QEMU version: {notes}");
        assert!(
            notes.contains("-smp") && notes.contains("slots=9"),
            "{notes}"
        );
        // The QEMU's threads: its pid first, then at least one vCPU and the main loop's
        // helpers.
        assert!(u64s(&s["vmm_tids"]).len() >= 2, "{}", s["vmm_tids"]);
    }
    // Per point, the memslot updates QEMU made for the DIMMs: a new DIMM is a new memslot,
    // so at least one KVM_SET_USER_MEMORY_REGION(2) per hotplug, each with a latency.
    let vmm = run["trace"]["vmm"].as_array().unwrap();
    assert_eq!(vmm.len(), 2, "{:#}", run["trace"]["vmm"]);
    for (v, n) in vmm.iter().zip([1, 2]) {
        assert_eq!(v["n"], n);
        assert_eq!(v["samples"], 8);
        let region = vmm_ioctl(
            v,
            &["KVM_SET_USER_MEMORY_REGION", "KVM_SET_USER_MEMORY_REGION2"],
        )
        .unwrap_or_else(|| panic!("no memslot update at vcpus={n}: {v:#}"));
        assert!(region["calls"].as_u64().unwrap() >= 8, "{region:#}");
        assert!(
            region["latency"]["p50_ns"].as_u64().unwrap() > 0,
            "{region:#}"
        );
        // QEMU's main thread runs the QMP commands: its own system calls were traced too
        // (it answers each command on the QMP socket).
        let main: Vec<&str> = v["main_thread"]
            .as_array()
            .unwrap_or_else(|| panic!("no main-thread calls at vcpus={n}: {v:#}"))
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert!(
            main.iter()
                .any(|c| ["sendmsg", "write", "writev", "sendto"].contains(c)),
            "{main:?}"
        );
    }
    // The verdict speaks of the VMM: what it spent the samples in and outside of.
    let verdict = run["verdict"].as_array().unwrap();
    let outside = verdict
        .iter()
        .find(|f| {
            f["summary"]
                .as_str()
                .unwrap()
                .contains("the VMM spent outside KVM ioctls")
        })
        .unwrap_or_else(|| panic!("{verdict:#?}"));
    let evidence = outside["evidence"].to_string();
    assert!(
        evidence.contains("vcpus=1 (hotplug)") && evidence.contains("vcpus=2 (hotplug)"),
        "{evidence}"
    );
    assert!(evidence.contains("the VMM's main thread in"), "{evidence}");
    assert!(
        verdict.iter().all(|f| f["cause"] != "sleep"),
        "the wait for QMP's reply is not a cause: {verdict:#?}"
    );
}

#[test]
fn qemu_start_times_ready_and_reaped_for_every_qemu_started_at_once() {
    let run = qemu_run(
        &[
            "run",
            "qemu-start",
            "--vcpus",
            "1,2",
            "--mem-mib",
            "64,128",
            "--vms",
            "2",
            "--repeat",
            "2",
        ],
        "qemu-start",
    );
    for point in run["points"].as_array().unwrap() {
        let names: Vec<&str> = point["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "start 64 MiB",
                "quit 64 MiB",
                "start 128 MiB",
                "quit 128 MiB"
            ]
        );
        for s in point["series"].as_array().unwrap() {
            // Two rounds of two QEMUs each: four samples, every one a real interval.
            let samples = u64s(&s["samples_ns"]);
            assert_eq!(samples.len(), 4, "{}", s["name"]);
            assert!(samples.iter().all(|&ns| ns > 0), "{samples:?}");
        }
        assert!(point["series"][0]["notes"]
            .to_string()
            .contains("2 QEMUs started at once"));
    }
}

#[test]
fn qemu_migrate_times_each_migration_with_its_dirty_log_ioctls() {
    let run = qemu_run(
        &[
            "run",
            "qemu-migrate",
            "--vcpus",
            "1,2",
            "--repeat",
            "2",
            "--warmup",
            "0",
            "--mem-mib",
            "64",
        ],
        "qemu-migrate",
    );
    for s in series(&run) {
        assert_eq!(s["name"], "migrate");
        assert_eq!(s["summary"]["n"], 2);
        assert_phases_sum(s);
    }
    let vmm = run["trace"]["vmm"].as_array().unwrap();
    assert_eq!(vmm.len(), 2);
    for v in vmm {
        // Every pass reads the dirty log of the RAM slots.
        let dirty = vmm_ioctl(
            v,
            &[
                "KVM_GET_DIRTY_LOG",
                "KVM_CLEAR_DIRTY_LOG",
                "KVM_RESET_DIRTY_RINGS",
            ],
        )
        .unwrap_or_else(|| panic!("no dirty-log ioctl: {v:#}"));
        assert!(dirty["calls"].as_u64().unwrap() >= 2, "{dirty:#}");
        // The last pass stops the vCPUs: they left KVM_RUN during the samples.
        assert!(v["vcpus"]["threads"].as_u64().unwrap() >= 1, "{v:#}");
        assert!(v["vcpus"]["exits"].as_u64().unwrap() >= 1, "{v:#}");
    }
}

#[test]
fn record_attached_to_a_running_qemu_explains_its_threads() {
    let _turn = subreaper();
    let mut config = vmscale_vmm::QemuConfig::new(qemu_binary(), 2, 128);
    config.dimm_slots = 64;
    config.maxmem_mib = 128 + 64 * 32;
    let mut qemu = vmscale_vmm::Qemu::start(&config).unwrap();
    let pid = qemu.pid();
    // Its vCPU threads exist from start-up to exit (other threads come and go).
    let vcpus: Vec<u64> = qemu
        .threads()
        .into_iter()
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|comm| comm.starts_with("CPU ") && comm.trim_end().ends_with("/KVM"))
        })
        .map(u64::from)
        .collect();
    assert_eq!(vcpus.len(), 2, "{:?}", qemu.threads());
    let dir = scratch("record-qemu");
    let _removed = RemovedOnDrop(dir.clone());
    let mut record = vmscale()
        .args(["record", "--pid", &pid.to_string(), "--duration", "2"])
        .args(["--quiet", "--format", "json", "--out"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Give the VMM work while it is recorded: DIMM hotplugs until the recording ends.
    let mut plugged = 0;
    while record.try_wait().unwrap().is_none() && plugged < 64 {
        let id = format!("m{plugged}");
        qemu.execute(
            "object-add",
            Some(json!({"qom-type": "memory-backend-ram", "id": id, "size": 32u64 << 20})),
        )
        .unwrap();
        qemu.execute(
            "device_add",
            Some(json!({"driver": "pc-dimm", "id": format!("d{plugged}"), "memdev": id})),
        )
        .unwrap();
        plugged += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = record.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(run["knobs"]["pid"], pid);
    assert_eq!(run["knobs"]["comm"], "qemu-system-x86");
    let command = &run["trace"]["command"];
    assert_eq!(command["pid"], pid);
    let named = u64s(&command["threads"]);
    assert!(
        vcpus.iter().all(|tid| named.contains(tid)),
        "its vCPU threads {vcpus:?} are among the threads named when recording began: {command}"
    );
    assert!(!named.contains(&u64::from(pid)), "{command}");
    let subject = &run["trace"]["subject"];
    assert!(subject["tasks"].as_u64().unwrap() >= 1, "{subject:#}");
    assert!(subject["total_ns"].as_u64().unwrap() > 0, "{subject:#}");
    // The verdict is about the QEMU's threads.
    let evidence = run["verdict"][0]["evidence"].to_string();
    assert!(
        evidence.contains(&format!("qemu-system-x86 (pid {pid})")),
        "{:#}",
        run["verdict"]
    );
    // What the VMM did while recorded: the memslot updates of the hotplugs, made by its
    // main thread, which answered them on the QMP socket.
    assert!(plugged > 0);
    let vmm = &run["trace"]["vmm"][0];
    let region = vmm_ioctl(
        vmm,
        &["KVM_SET_USER_MEMORY_REGION", "KVM_SET_USER_MEMORY_REGION2"],
    )
    .unwrap_or_else(|| panic!("no memslot update recorded: {:#}", run["trace"]["vmm"]));
    assert!(region["calls"].as_u64().unwrap() >= 1, "{region:#}");
    assert!(
        vmm["main_thread"].to_string().contains("\"sendmsg\""),
        "{:#}",
        vmm["main_thread"]
    );
    assert_eq!(vmm["vcpus"]["threads"], 2, "{:#}", vmm["vcpus"]);
    // vmscale never touched it: it still runs and answers.
    let status = qemu.execute("query-status", None).unwrap();
    assert_eq!(status.value["status"], "running");
    qemu.quit().unwrap();
    assert_no_qemu_left();
}

#[test]
fn a_missing_qemu_or_an_impossible_knob_is_one_line_and_exit_2() {
    let _turn = subreaper();
    let o = vmscale()
        .args([
            "run",
            "qemu-hotplug",
            "--qemu",
            "/nonexistent/qemu-system-x86_64",
        ])
        .args(["--quiet", "--no-trace", "--out"])
        .arg(scratch("qemu-missing"))
        .output()
        .unwrap();
    one_line_failure(&o, 2, "--qemu /nonexistent/qemu-system-x86_64");
    assert!(
        stderr(&o).contains("apt-get install qemu-system-x86"),
        "{}",
        stderr(&o)
    );
    let o = vmscale()
        .args(["run", "qemu-hotplug", "--repeat", "250", "--warmup", "10"])
        .args(["--quiet", "--no-trace"])
        .output()
        .unwrap();
    one_line_failure(&o, 2, "at most 256");
    assert_no_qemu_left();
}

#[test]
fn a_qemu_that_exits_at_once_is_one_line_naming_its_command_line_and_stderr() {
    let _turn = subreaper();
    // A shell given QEMU's options refuses the first one on stderr and exits.
    let out = scratch("qemu-exits");
    let o = vmscale()
        .args(["run", "qemu-migrate", "--qemu", "/bin/sh", "--vcpus", "1"])
        .args(["--quiet", "--no-trace", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    one_line_failure(&o, 1, "before connecting to its QMP socket");
    let err = stderr(&o);
    assert!(err.contains("QEMU: /bin/sh -enable-kvm"), "{err}");
    assert!(err.contains("its last stderr line: "), "{err}");
    // A failed run leaves no run directory.
    assert!(std::fs::read_dir(&out).map_or(true, |mut d| d.next().is_none()));
    assert_no_qemu_left();
}

/// Starts a long vmscale QEMU run and returns it with its QEMU's pid once the QEMU runs,
/// and the test's turn.
fn long_run(
    name: &str,
) -> (
    std::process::Child,
    u32,
    std::path::PathBuf,
    MutexGuard<'static, ()>,
) {
    let turn = subreaper();
    qemu_binary();
    let out = scratch(name);
    let child = vmscale()
        .args(["run", "qemu-migrate", "--vcpus", "1", "--repeat", "10000"])
        .args(["--mem-mib", "64", "--quiet", "--no-trace", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let vmscale_pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let qemu = loop {
        if let Some(&(pid, _)) = children_named_qemu(vmscale_pid).first() {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "vmscale started no QEMU within a minute"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    (child, qemu, out, turn)
}

#[test]
fn sigterm_tears_qemu_down_and_writes_nothing() {
    let (child, qemu, out, _turn) = long_run("qemu-sigterm");
    // SAFETY: kill only sends a signal to our own unreaped child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    // vmscale reaped its QEMU before exiting; had it left it running, the QEMU would now
    // be our orphan.
    let gone = std::fs::read_to_string(format!("/proc/{qemu}/comm"))
        .map_or(true, |comm| !comm.starts_with("qemu-system"));
    assert!(gone, "QEMU {qemu} outlived vmscale");
    assert_no_qemu_left();
    assert!(std::fs::read_dir(&out).map_or(true, |mut d| d.next().is_none()));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_killed_vmscale_takes_its_qemu_with_it() {
    let (mut child, qemu, out, _turn) = long_run("qemu-sigkill");
    child.kill().unwrap();
    child.wait().unwrap();
    // QEMU is now our orphan (we are its subreaper) and must die of its parent-death
    // signal; waiting for it proves it, since a live QEMU never ends on its own.
    let mut status = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // SAFETY: waits only for that pid, which is our child since vmscale died.
        let r = unsafe { libc::waitpid(qemu as libc::pid_t, &mut status, libc::WNOHANG) };
        if r == qemu as libc::pid_t {
            break;
        }
        assert!(r == 0, "QEMU {qemu} is not our orphan (waitpid {r})");
        assert!(
            Instant::now() < deadline,
            "QEMU {qemu} outlived the vmscale that started it"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(libc::WIFSIGNALED(status), "status {status:#x}");
    assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
    assert_no_qemu_left();
    // The killed vmscale could not remove its QMP socket's directory; the next run that
    // starts a QEMU does.
    let killed = format!("vmscale-qemu-{}-", child.id());
    let left = || {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&killed))
    };
    assert!(
        left(),
        "the killed run's directory was expected under {killed}*"
    );
    json_run(
        &[
            "run",
            "qemu-start",
            "--vcpus",
            "1",
            "--repeat",
            "1",
            "--no-trace",
        ],
        "qemu-after-kill",
    );
    assert!(
        !left(),
        "a later run left the killed run's {killed}* in place"
    );
    assert_no_qemu_left();
    let _ = std::fs::remove_dir_all(&out);
}
