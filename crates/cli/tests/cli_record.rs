//! `vmscale record` and traced scenario runs on the real kernel: what lands in the run, and
//! the one-line failures. Needs root, tracefs and /dev/kvm; fails without.

mod common;

use common::*;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[test]
fn record_traces_a_command_and_finds_contended_locks() {
    let out = scratch("cmd");
    // Many short processes at once: the scheduler's and the process table's locks contend.
    let o = vmscale()
        .args(["record", "--format", "json", "--out"])
        .arg(&out)
        .args([
            "--",
            "sh",
            "-c",
            "for i in $(seq 200); do /bin/true & done; wait",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(run["scenario"], "record");
    let trace = &run["trace"];
    assert!(
        trace["decoded_events"].as_u64().unwrap() > 1000,
        "too few events: {}",
        trace["decoded_events"]
    );
    let locks = trace["contention"].as_array().unwrap();
    assert!(
        !locks.is_empty(),
        "200 concurrent forks contended on no lock"
    );
    for lock in locks {
        let name = lock["name"].as_str().unwrap();
        assert!(
            !name.is_empty() && !name.starts_with("0x"),
            "unnamed lock: {lock}"
        );
        if let Some(waits) = lock["waits"].as_object() {
            assert!(waits["p50_ns"].as_u64() <= waits["max_ns"].as_u64());
            assert!(lock["total_wait_ns"].as_u64().unwrap() >= waits["max_ns"].as_u64().unwrap());
        }
    }
    // Stacks were on: the worst lock has a symbolized waiting stack, and their cost is known.
    let frames = &locks[0]["stacks"][0]["frames"];
    assert!(
        frames
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x.as_str().unwrap().contains("+0x"))),
        "{frames}"
    );
    assert!(trace["stack_cost"]["p50_ns"].as_u64().unwrap() > 0);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn traced_scenario_keeps_its_raw_trace_and_report_reanalyses_it() {
    let out = scratch("scenario");
    let o = vmscale()
        .args([
            "run",
            "memslot",
            "--vcpus",
            "2",
            "--repeat",
            "40",
            "--strategy",
            "direct",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run_dir = std::fs::read_dir(&out)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for file in [
        "trace/meta.json",
        "trace/cpu0.raw",
        "trace/kallsyms",
        "trace/formats/lock/contention_begin",
    ] {
        assert!(run_dir.join(file).exists(), "{file} missing");
    }
    let run: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    let decoded = run["trace"]["decoded_events"].as_u64().unwrap();
    assert!(decoded > 0);
    // The measuring thread's ioctls are in the trace: 40 direct updates are 80 memslot ioctls.
    let again = json_report(&run_dir);
    assert_eq!(
        again["trace"]["decoded_events"].as_u64().unwrap(),
        decoded,
        "re-analysis decoded a different trace"
    );

    let untraced = vmscale()
        .args([
            "run",
            "memslot",
            "--vcpus",
            "1",
            "--repeat",
            "5",
            "--no-trace",
            "--quiet",
            "--format",
            "json",
            "--out",
        ])
        .arg(scratch("untraced"))
        .output()
        .unwrap();
    assert!(untraced.status.success());
    let untraced: Value = serde_json::from_slice(&untraced.stdout).unwrap();
    assert!(untraced["trace"].is_null(), "--no-trace still traced");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(scratch("untraced"));
}

#[test]
fn tracing_failures_are_one_line() {
    let out = scratch("bad");
    let _removed = RemovedOnDrop(out.clone());
    let nobody_out = std::path::PathBuf::from("/tmp/vmscale-nobody");
    let _removed_too = RemovedOnDrop(nobody_out.clone());
    let o = vmscale()
        .args([
            "record",
            "-e",
            "lock:no_such_event",
            "--duration",
            "0.1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    one_line_failure(&o, 1, "lock:no_such_event does not exist on this kernel");
    let o = vmscale()
        .args([
            "run",
            "memslot",
            "--vcpus",
            "1",
            "--buffer-kib",
            "1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    one_line_failure(
        &o,
        2,
        "'--buffer-kib <KIB>': must be between 64 and 1048576 KiB",
    );
    let o = vmscale()
        .args(["record", "--duration", "-1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Not root: tracing refuses with a clear line (setpriv drops to nobody).
    let o = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_vmscale"))
        .args(["record", "--duration", "0.1", "--out"])
        .arg(&nobody_out)
        .output()
        .unwrap();
    one_line_failure(&o, 1, "tracing needs root");
    let runs = std::fs::read_dir(&out).map(|d| d.count()).unwrap_or(0);
    assert_eq!(runs, 0, "failed runs left run directories");
}

/// A copy of `dat` whose second page of trace data (of the first CPU that has two) says it
/// holds more bytes than a page can.
fn damage_second_page(dat: &Path) -> PathBuf {
    let file = vmscale_trace::dat::DatFile::open(dat).unwrap();
    let buffer = file.decodable_buffer(None).unwrap();
    let page = u64::from(buffer.page_size);
    let cpu = buffer
        .cpus
        .iter()
        .find(|c| c.stored_size == c.size && c.size >= 2 * page)
        .unwrap_or_else(|| panic!("no uncompressed CPU with two pages: {:?}", buffer.cpus));
    // The commit word follows the page's u64 timestamp.
    overwrite(
        dat,
        "damaged-page",
        cpu.offset + page + 8,
        &(page * 4).to_le_bytes(),
    )
}

/// A copy of `dat` with 64 bytes in the middle of its first CPU's compressed data
/// replaced.
fn damage_compressed_data(dat: &Path) -> PathBuf {
    let file = vmscale_trace::dat::DatFile::open(dat).unwrap();
    let buffer = file.decodable_buffer(None).unwrap();
    let cpu = buffer
        .cpus
        .iter()
        .find(|c| c.stored_size < c.size && c.stored_size > 256)
        .unwrap_or_else(|| panic!("no compressed CPU data: {:?}", buffer.cpus));
    overwrite(
        dat,
        "damaged-zstd",
        cpu.offset + cpu.stored_size / 2,
        &[0xa5; 64],
    )
}

fn overwrite(dat: &Path, label: &str, at: u64, bytes: &[u8]) -> PathBuf {
    use std::os::unix::fs::FileExt;
    let copy = dat.with_extension(format!("{label}.dat"));
    std::fs::copy(dat, &copy).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
    f.write_all_at(bytes, at).unwrap();
    copy
}

#[test]
fn report_analyses_a_trace_cmd_dat_recorded_elsewhere() {
    // Recorded by Debian's trace-cmd, not by vmscale: the import path end to end, in its
    // default layout (v7, compressed), as v6, on the TSC clock, and with two instances.
    let files = RemovedOnDrop(scratch("import-dat"));
    std::fs::create_dir_all(&files.0).unwrap();
    let file = |label: &str| files.0.join(format!("trace{label}.dat"));
    let (dat, v6, tsc, two) = (file(""), file("-v6"), file("-tsc"), file("-two"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/support/record-with-trace-cmd.sh");
    let scheduler = "-e sched:sched_switch -e sched:sched_waking";
    let recordings = [
        (&dat, &[][..], "mono", ""),
        (&v6, &["--file-version", "6"][..], "mono", ""),
        (&tsc, &[][..], "x86-tsc", ""),
        (&two, &[][..], "mono", scheduler),
    ];
    for (out, options, clock, second_instance) in recordings {
        // trace-cmd sizes a tracefs file (saved_cmdlines, ...) and copies it in two reads;
        // when tasks started meanwhile (other tests run beside this one) the size no longer
        // matches and the file is damaged for every reader, trace-cmd report too. Such a
        // recording is made again: the test is of vmscale reading trace-cmd's files.
        let mut damaged = String::new();
        for _attempt in 0..3 {
            let recorded = std::process::Command::new("bash")
                .arg(&script)
                .arg(out)
                .arg("--stacks")
                .args(options)
                .env("VMSCALE_XCHECK_CLOCK", clock)
                .env("VMSCALE_XCHECK_SECOND_EVENTS", second_instance)
                .env(
                    "VMSCALE_XCHECK_WORKLOAD",
                    "for i in $(seq 200); do /bin/true & done; wait",
                )
                .output()
                .unwrap();
            assert!(
                recorded.status.success(),
                "trace-cmd record failed: {}",
                stderr(&recorded)
            );
            let read = std::process::Command::new("trace-cmd")
                .arg("report")
                .arg(out)
                .stdout(std::process::Stdio::null())
                .output()
                .expect("trace-cmd report runs");
            if read.status.success() {
                damaged.clear();
                break;
            }
            damaged = format!("{}{}", stderr(&recorded), stderr(&read));
        }
        assert!(
            damaged.is_empty(),
            "trace-cmd could not read its own recording three times: {damaged}"
        );
    }
    let run = json_report(&dat);
    let v6_run = json_report(&v6);
    let tsc_run = json_report(&tsc);
    // Two instances with data: the user picks one, as with trace-cmd's -B.
    let report_buffer = |buffer: Option<&str>| {
        let mut command = vmscale();
        command.args(["report", "--format", "json"]);
        if let Some(buffer) = buffer {
            command.args(["--buffer", buffer]);
        }
        command.arg(&two).output().unwrap()
    };
    let unpicked = report_buffer(None);
    let second = vmscale_trace::dat::DatFile::open(&two)
        .unwrap()
        .buffers
        .iter()
        .find(|b| b.name.ends_with("-b"))
        .expect("the second instance")
        .name
        .clone();
    let picked = report_buffer(Some(&second));
    let missing = report_buffer(Some("no-such-instance"));
    let damaged = damage_second_page(&v6);
    let damaged_zstd = damage_compressed_data(&dat);
    let damaged_run = json_report(&damaged);
    let zstd = vmscale()
        .args(["report", "--format", "json"])
        .arg(&damaged_zstd)
        .output()
        .unwrap();
    // Damaged compressed data fails the import with one line, or costs pages it names.
    match zstd.status.code() {
        Some(0) => {
            let run: serde_json::Value = serde_json::from_slice(&zstd.stdout).unwrap();
            assert!(
                run["warnings"].to_string().contains("damaged"),
                "{}",
                run["warnings"]
            );
        }
        Some(1) => assert_eq!(stderr(&zstd).trim().lines().count(), 1, "{}", stderr(&zstd)),
        other => panic!("exit {other:?}: {}", stderr(&zstd)),
    }
    assert_eq!(run["scenario"], "import");
    assert_eq!(unpicked.status.code(), Some(1), "{}", stderr(&unpicked));
    assert_eq!(stderr(&unpicked).trim().lines().count(), 1);
    assert!(
        stderr(&unpicked).contains("--buffer NAME") && stderr(&unpicked).contains(&second),
        "{}",
        stderr(&unpicked)
    );
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("no buffer named `no-such-instance`"));
    assert!(picked.status.success(), "{}", stderr(&picked));
    let picked: Value = serde_json::from_slice(&picked.stdout).unwrap();
    assert_eq!(picked["knobs"]["buffer"], second.as_str());
    assert!(picked["trace"]["decoded_events"].as_u64().unwrap() > 100);
    // The second instance traced the scheduler only.
    assert_eq!(
        picked["trace"]["contention"].as_array().map(Vec::len),
        Some(0)
    );
    // TSC ticks are no nanoseconds, and the report says so; mono times raise no warning.
    let ticks = "every time and duration below is in x86-tsc ticks";
    assert!(
        tsc_run["warnings"].to_string().contains(ticks),
        "{}",
        tsc_run["warnings"]
    );
    assert!(!run["warnings"].to_string().contains("ticks"));
    assert!(run["trace"]["decoded_events"].as_u64().unwrap() > 100);
    let events = v6_run["trace"]["decoded_events"].as_u64().unwrap();
    assert!(events > 100);
    // A damaged page costs its events and says so; the rest is still analysed.
    let warnings = damaged_run["warnings"].to_string();
    assert!(
        warnings.contains("1 damaged trace pages were skipped"),
        "{warnings}"
    );
    let left = damaged_run["trace"]["decoded_events"].as_u64().unwrap();
    assert!(left < events && left > 0, "{left} of {events} events");
    let locks = run["trace"]["contention"].as_array().unwrap();
    assert!(
        !locks.is_empty(),
        "200 concurrent forks contended on no lock"
    );
    // Named from where it was waited on (the kernel's name first when it is a known lock).
    let name = locks[0]["name"].as_str().unwrap();
    assert!(name.contains(" in ") || name.contains("(in "), "{name}");
    // Nothing of the import is left in the temp directory.
    let leftovers = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("vmscale-import-")
                && e.path().is_dir()
        });
    assert!(!leftovers, "import scratch directory left behind");
}

#[test]
fn an_imported_trace_splits_on_cpu_time_by_its_system_calls() {
    // A trace recorded elsewhere has no rusage to split its on-CPU time into kernel and
    // user: its raw_syscalls events do. A one-byte `dd` makes one read and one write per
    // block; trace-cmd report, an independent decoder, gives the reference: each task's
    // on-CPU time between its sys_enter and sys_exit.
    let files = RemovedOnDrop(scratch("import-syscalls"));
    std::fs::create_dir_all(&files.0).unwrap();
    let dat = files.0.join("dd.dat");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/support/record-with-trace-cmd.sh");
    const BLOCKS: u64 = 20_000;
    let recorded = Command::new("bash")
        .arg(&script)
        .arg(&dat)
        .env(
            "VMSCALE_XCHECK_EVENTS",
            "-b 8192 -e raw_syscalls -e sched:sched_switch",
        )
        .env(
            "VMSCALE_XCHECK_WORKLOAD",
            format!("dd if=/dev/zero of=/dev/null bs=1 count={BLOCKS} status=none"),
        )
        .output()
        .unwrap();
    assert!(
        recorded.status.success(),
        "trace-cmd record failed: {}",
        stderr(&recorded)
    );
    let run = json_report(&dat);
    let on_cpu = run["trace"]["subject"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "on_cpu")
        .unwrap_or_else(|| panic!("no on-CPU part: {}", run["trace"]["subject"]));
    let calls = on_cpu["in_syscalls"].as_array().unwrap();
    let call = |name: &str| calls.iter().find(|c| c["name"] == name);
    for name in ["read", "write"] {
        let counted = call(name).map_or(0, |c| c["calls"].as_u64().unwrap());
        assert!(
            counted >= BLOCKS,
            "{name}: {counted} calls, dd made {BLOCKS}: {calls:?}"
        );
    }
    let inside: u64 = calls.iter().map(|c| c["ns"].as_u64().unwrap()).sum();
    assert!(inside > 0 && inside <= on_cpu["total_ns"].as_u64().unwrap());
    // The reference, from trace-cmd's own reading of the file.
    let text = Command::new("trace-cmd")
        .args(["report", "-R", "-t"])
        .arg(&dat)
        .output()
        .unwrap();
    assert!(text.status.success(), "{}", stderr(&text));
    let reference = in_syscall_on_cpu_ns(&String::from_utf8_lossy(&text.stdout));
    let (read, write) = (
        call("read").unwrap()["ns"].as_u64().unwrap(),
        call("write").unwrap()["ns"].as_u64().unwrap(),
    );
    for (name, ours, id) in [("read", read, 0), ("write", write, 1)] {
        let want = reference.get(&id).copied().unwrap_or(0);
        let off = ours.abs_diff(want) as f64 / want.max(1) as f64;
        assert!(
            off < 0.01,
            "{name}: vmscale {ours} ns inside it on a CPU, trace-cmd report's events {want} ns"
        );
    }
    // Where the verdict says it, read and write are among the calls that took the time.
    // Other tests' tasks are traced too (every task is): their calls may lead it, or their
    // runnable time may push it out of the findings kept, so its presence is not asked
    // here (the verdict's unit test asks it of a fixed split).
    let verdict = run["verdict"].to_string();
    if let Some(inside) = run["verdict"].as_array().unwrap().iter().find(|f| {
        f["summary"]
            .as_str()
            .unwrap()
            .contains("inside system calls (")
    }) {
        let parts = inside["explained_by"].to_string();
        assert!(
            parts.contains("\"read (") && parts.contains("\"write ("),
            "{parts}"
        );
    }
    assert!(
        !verdict.contains("kernel and user space not told apart"),
        "{verdict}"
    );
}

/// System call id -> on-CPU time inside it, summed over every task, from `trace-cmd report
/// -R -t` text: a task is in a call from its sys_enter to its sys_exit and counts while it
/// runs (from its own events or a switch to it until a switch away); a task's time before
/// its first sys_enter is not known to be in any call. x86-64 numbering (read 0, write 1).
fn in_syscall_on_cpu_ns(text: &str) -> std::collections::HashMap<i64, u64> {
    use std::collections::HashMap;
    let mut inside: HashMap<i64, u64> = HashMap::new();
    // pid -> (call id, counted up to), while in a call; pid -> running.
    let mut call: HashMap<i64, (i64, u64)> = HashMap::new();
    let mut running: HashMap<i64, bool> = HashMap::new();
    let mut last = 0;
    let field = |fields: &str, name: &str| -> Option<i64> {
        fields
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    let credit = |inside: &mut HashMap<i64, u64>, at: Option<&(i64, u64)>, ts: u64| {
        if let Some(&(id, from)) = at {
            *inside.entry(id).or_default() += ts.saturating_sub(from);
        }
    };
    for line in text.lines() {
        // "...comm-PID [CPU] SECONDS.NANOS: event: fields"
        let Some((head, rest)) = line.split_once("] ") else {
            continue;
        };
        let Some(pid) = head
            .rsplit_once('[')
            .and_then(|(task, _)| task.trim_end().rsplit_once('-'))
            .and_then(|(_, pid)| pid.parse::<i64>().ok())
        else {
            continue;
        };
        let mut parts = rest.trim_start().splitn(3, ':');
        let (Some(time), Some(event), Some(fields)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Some((s, ns)) = time.split_once('.') else {
            continue;
        };
        let (Ok(s), Ok(ns)) = (s.parse::<u64>(), ns.parse::<u64>()) else {
            continue;
        };
        let ts = s * 1_000_000_000 + ns;
        last = ts;
        let event = event.trim();
        // A task's own event shows it running; from a switch it was not seen coming back
        // from, its call counts from here.
        if event != "sched_switch" && running.insert(pid, true) != Some(true) {
            if let Some(c) = call.get_mut(&pid) {
                c.1 = ts;
            }
        }
        match event {
            "sys_enter" => {
                let id = field(fields, "id").unwrap();
                if let Some(&(old, from)) = call.get(&pid) {
                    credit(&mut inside, Some(&(old, from)), ts);
                }
                call.insert(pid, (id, ts));
            }
            "sys_exit" => {
                if let Some(c) = call.remove(&pid) {
                    credit(&mut inside, Some(&c), ts);
                }
            }
            "sched_switch" => {
                let (prev, next) = (
                    field(fields, "prev_pid").unwrap(),
                    field(fields, "next_pid").unwrap(),
                );
                if running.insert(prev, false) == Some(true) {
                    credit(&mut inside, call.get(&prev), ts);
                }
                running.insert(next, true);
                if let Some(c) = call.get_mut(&next) {
                    c.1 = ts;
                }
            }
            _ => {}
        }
    }
    for (pid, c) in &call {
        if running.get(pid) == Some(&true) {
            credit(&mut inside, Some(c), last);
        }
    }
    inside
}

#[test]
fn a_traced_run_exports_to_perfetto_and_writes_its_html_report() {
    let out = scratch("export");
    let o = vmscale()
        .args([
            "run",
            "memslot",
            "--vcpus",
            "2",
            "--repeat",
            "20",
            "--strategy",
            "pause-all",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run_dir = only_run_dir(&out);
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    assert!(
        html.contains("<svg") && html.contains("pause-all"),
        "report.html lacks its plots"
    );
    // A trace with a completed lock wait gets a timeline excerpt around the longest one,
    // drawn on the page; one without has neither.
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap();
    let waited = run["trace"]["contention"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["waits"].is_object());
    assert_eq!(
        run["trace"]["timeline"].is_object(),
        waited,
        "{}",
        run["trace"]
    );
    assert_eq!(html.contains("class=\"timeline\""), waited);
    let e = vmscale()
        .args(["export", "--perfetto"])
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", stderr(&e));
    let exported = std::fs::metadata(run_dir.join("trace.perfetto-trace"))
        .unwrap()
        .len();
    assert!(exported > 1000, "perfetto trace of {exported} bytes");
    assert!(stderr(&e).contains("slices"), "{}", stderr(&e));

    let untraced = scratch("export-untraced");
    let o = vmscale()
        .args([
            "run",
            "memslot",
            "--vcpus",
            "1",
            "--repeat",
            "5",
            "--no-trace",
            "--quiet",
            "--out",
        ])
        .arg(&untraced)
        .output()
        .unwrap();
    assert!(o.status.success());
    let e = vmscale()
        .args(["export", "--perfetto"])
        .arg(only_run_dir(&untraced))
        .output()
        .unwrap();
    one_line_failure(&e, 1, "has no kernel trace");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&untraced);
}

/// `record --duration` of no command: every task is the subject, grouped by process, with
/// vmscale's own tasks and the tasks' idle sleeps left out.
#[test]
fn a_system_wide_recording_explains_every_task_by_process() {
    let out = scratch("system-wide");
    let _removed = RemovedOnDrop(out.clone());
    // A process of two busy threads on the machine's CPUs: on-CPU time the trace must put
    // in that process's name, whatever else runs.
    let mut busy = Command::new("sh")
        .args(["-c", "(while :; do :; done) & while :; do :; done"])
        .process_group(0)
        .spawn()
        .unwrap();
    let busy_pid = busy.id() as i64;
    let recording = vmscale()
        .args(["record", "--duration", "1", "--format", "json", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let own_pid = recording.id() as i64;
    let o = recording.wait_with_output().unwrap();
    // The loop's subshell is a process of its own, in the group busy leads.
    // SAFETY: kill only sends a signal, to the group of our unreaped child.
    unsafe { libc::kill(-(busy.id() as i32), libc::SIGKILL) };
    let _ = busy.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let trace = &run["trace"];
    assert_eq!(trace["every_task"], true, "{trace}");
    let subject = &trace["subject"];
    assert_eq!(subject["every_task"], true, "{subject}");
    let parts = subject["parts"].as_array().unwrap();
    let asleep: u64 = parts
        .iter()
        .filter(|p| p["kind"] == "asleep")
        .map(|p| p["total_ns"].as_u64().unwrap())
        .sum();
    assert!(asleep > 0, "{subject}");
    assert_eq!(subject["asleep_left_out_ns"].as_u64(), Some(asleep));
    let all: u64 = parts.iter().map(|p| p["total_ns"].as_u64().unwrap()).sum();
    // Time around context switches the trace misses (this host never traces some of its
    // own tasks) is said as such and left out too.
    let unseen = subject["unseen_left_out_ns"].as_u64().unwrap_or(0);
    assert_eq!(subject["total_ns"].as_u64(), Some(all - asleep - unseen));
    // No more on-CPU time than the CPUs had: a task switched away by a switch the trace
    // misses does not run on until its next traced switch.
    let on_cpu_ns: u64 = parts
        .iter()
        .filter(|p| p["kind"] == "on_cpu")
        .map(|p| p["total_ns"].as_u64().unwrap())
        .sum();
    let cpus = run["host"]["online_cpus"].as_u64().unwrap();
    let span = trace["span_ns"].as_u64().unwrap();
    assert!(
        on_cpu_ns <= cpus * span,
        "{on_cpu_ns} ns on a CPU in {span} ns of trace on {cpus} CPUs: {subject}"
    );
    // The busy process ran, under its own pid (a loaded machine gives it less than the
    // CPU-second it asks for).
    let on_cpu = parts
        .iter()
        .find(|p| p["kind"] == "on_cpu")
        .expect("on-CPU time");
    let busy_ns = on_cpu["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == busy_pid)
        .map(|p| p["ns"].as_u64().unwrap());
    assert!(
        busy_ns.is_some_and(|ns| ns >= 100_000_000),
        "busy process {busy_pid} not found with its on-CPU time: {on_cpu}"
    );
    // vmscale itself is not what it explains.
    for part in parts {
        for who in part["tasks"].as_array().unwrap().iter().chain(
            part["processes"]
                .as_array()
                .map(|p| p.as_slice())
                .unwrap_or(&[]),
        ) {
            assert_ne!(who["pid"], own_pid, "vmscale's own task in {part}");
        }
    }
    // The verdict says what it explains, and blames no idle sleep.
    let verdict = run["verdict"].as_array().unwrap();
    assert!(
        verdict[0]["evidence"][0]
            .as_str()
            .unwrap()
            .starts_with("subject: every task the trace shows"),
        "{verdict:?}"
    );
    assert!(verdict.iter().all(|f| f["cause"] != "sleep"), "{verdict:?}");
}
