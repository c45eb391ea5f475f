//! `vmscale report FILE.txt` on ftrace text: a real recording's `trace` text gives the same
//! findings as the binary pages of the same buffer, and the hand-written function_graph
//! fixture gives its calls. Needs root and tracefs; fails (never skips) without.

mod common;
#[path = "../../analysis/tests/support/userfault.rs"]
mod userfault;

use common::*;

use std::fs::OpenOptions;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use vmscale_trace::record::tracefs;

const TRACEFS: &str = "/sys/kernel/tracing";
/// How long the holder sleeps in its page fault with the pipe mutex held.
const HOLD: Duration = Duration::from_millis(150);
const WAITERS: usize = 3;
const EVENTS: [&str; 6] = [
    "lock/contention_begin",
    "lock/contention_end",
    "sched/sched_switch",
    "sched/sched_waking",
    "sched/sched_wakeup",
    "sched/sched_wakeup_new",
];
/// A stack where a lock wait starts and where a task goes to sleep, as `vmscale record` takes.
const STACK_EVENTS: [&str; 2] = ["lock/contention_begin", "sched/sched_switch"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/fixtures/text")
        .join(name)
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// vmscale's own kind of private tracefs instance (removed on drop), tracing `EVENTS` on
/// the mono clock with stacks on `STACK_EVENTS`.
fn instance() -> tracefs::Instance {
    let mount =
        tracefs::mount_point().unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"));
    let instance = tracefs::Instance::create(&mount).expect("create a tracefs instance");
    for (file, value) in [
        ("trace_clock", "mono"),
        ("options/hash-ptr", "0"),
        ("buffer_size_kb", "8192"),
    ] {
        instance.write(file, value).unwrap();
    }
    for event in EVENTS {
        instance.enable_event(&event.replace('/', ":")).unwrap();
    }
    for event in STACK_EVENTS {
        instance
            .add_stack_trigger(&event.replace('/', ":"))
            .unwrap();
    }
    instance
}

/// Writes the instance's buffer as a trace directory (docs/trace-dir.md): the pages as
/// trace_pipe_raw hands them out (this consumes them), the formats, kallsyms, meta.json.
fn save_pages(instance: &tracefs::Instance, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    let page_size = 4096usize;
    let cpus = instance.cpus().unwrap();
    for cpu in &cpus {
        let mut raw = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(
                instance
                    .path()
                    .join(format!("per_cpu/cpu{cpu}/trace_pipe_raw")),
            )
            .unwrap();
        let mut pages = Vec::new();
        let mut page = vec![0u8; page_size];
        loop {
            match raw.read(&mut page) {
                Ok(0) => break,
                Ok(n) => {
                    assert_eq!(n, page_size, "trace_pipe_raw gave a partial page");
                    pages.extend_from_slice(&page);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("trace_pipe_raw: {e}"),
            }
        }
        std::fs::write(out.join(format!("cpu{cpu}.raw")), pages).unwrap();
        let stats = instance.read(&format!("per_cpu/cpu{cpu}/stats")).unwrap();
        assert!(
            stats.contains("overrun: 0\n"),
            "cpu{cpu} lost events, the text and the pages would differ:\n{stats}"
        );
    }
    for name in ["header_page", "header_event"] {
        std::fs::copy(Path::new(TRACEFS).join("events").join(name), out.join(name)).unwrap();
    }
    for event in EVENTS
        .iter()
        .chain(&["ftrace/kernel_stack", "ftrace/print"])
    {
        let (system, name) = event.split_once('/').unwrap();
        std::fs::create_dir_all(out.join("formats").join(system)).unwrap();
        std::fs::copy(
            instance.path().join("events").join(event).join("format"),
            out.join("formats").join(system).join(name),
        )
        .unwrap();
    }
    std::fs::copy("/proc/kallsyms", out.join("kallsyms")).unwrap();
    let meta = serde_json::json!({
        "page_size": page_size,
        "cpus": cpus,
        "clock": "mono",
        "events": EVENTS.iter().map(|e| e.replace('/', ":")).collect::<Vec<_>>(),
        "stacks": true,
        "buffer_kib": 8192,
        "lost": {},
        "started_ns": 0,
        "stopped_ns": 0,
        "windows": [],
        "pages": {},
    });
    std::fs::write(out.join("meta.json"), meta.to_string()).unwrap();
}

// ---- the tests ----

fn report_json(path: &Path) -> Value {
    let o = vmscale()
        .args(["report", "--format", "json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// One contended lock as the report gives it.
#[derive(Debug)]
struct Lock {
    name: String,
    kind: String,
    waits: u64,
    total_ns: u64,
    /// The worst waiters' pids (the report keeps five), ascending.
    waiter_pids: Vec<u64>,
}

/// Every contended lock of a report, by address.
fn locks(run: &Value) -> std::collections::BTreeMap<u64, Lock> {
    run["trace"]["contention"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| {
            let mut waiter_pids: Vec<u64> = lock["waiters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["pid"].as_u64().unwrap())
                .collect();
            waiter_pids.sort_unstable();
            (
                lock["lock_addr"].as_u64().unwrap(),
                Lock {
                    name: lock["name"].as_str().unwrap().to_string(),
                    kind: lock["kind"].as_str().unwrap().to_string(),
                    waits: lock["waits"]["n"].as_u64().unwrap_or(0),
                    total_ns: lock["total_wait_ns"].as_u64().unwrap(),
                    waiter_pids,
                },
            )
        })
        .collect()
}

#[test]
fn the_text_of_a_real_recording_gives_the_findings_of_its_binary_pages() {
    let dir = scratch("report-text");
    std::fs::create_dir_all(&dir).unwrap();
    let instance = instance();
    instance.set_tracing(true).unwrap();
    // One writer faults inside the pipe write with pipe->mutex held and sleeps in
    // handle_userfault; `WAITERS` more writers queue on the mutex until `HOLD` has passed.
    let outcome = userfault::pipe_writers_behind_a_userfault(HOLD, WAITERS);
    let (holder, waiters) = (outcome.holder_tid, outcome.waiter_tids);
    instance.set_tracing(false).unwrap();
    // `trace` does not consume the buffer; trace_pipe_raw then hands out the same events.
    let text_path = dir.join("trace.txt");
    write(&text_path, &instance.read("trace").unwrap());
    let run_dir = dir.join("binary");
    save_pages(&instance, &run_dir.join("trace"));
    drop(instance);

    let from_text = report_json(&text_path);
    assert_eq!(from_text["scenario"], "import");
    assert_eq!(
        from_text["knobs"]["skipped_lines"], 0,
        "{}",
        from_text["warnings"]
    );
    let warnings = from_text["warnings"].to_string();
    assert!(warnings.contains("resolve only 1 us"), "{warnings}");

    // The same buffer's pages, analysed as a recorded run: the text import's own record
    // with its trace section pointing at them.
    let mut run = from_text.clone();
    run["trace"]["dir"] = "trace".into();
    run["warnings"] = serde_json::json!([]);
    std::fs::write(run_dir.join("run.json"), run.to_string()).unwrap();
    let from_pages = report_json(&run_dir);
    assert_eq!(
        from_text["trace"]["decoded_events"],
        from_pages["trace"]["decoded_events"]
    );

    // Every contended lock, with the same kind, waits and waiters; each wait's two ends are
    // rounded to the microsecond in the text.
    let (text_locks, page_locks) = (locks(&from_text), locks(&from_pages));
    assert!(!page_locks.is_empty());
    assert_eq!(
        text_locks.keys().collect::<Vec<_>>(),
        page_locks.keys().collect::<Vec<_>>()
    );
    for (addr, theirs) in &page_locks {
        let ours = &text_locks[addr];
        assert_eq!(
            (&ours.kind, ours.waits),
            (&theirs.kind, theirs.waits),
            "{ours:?} vs {theirs:?}"
        );
        assert!(
            ours.total_ns.abs_diff(theirs.total_ns) <= theirs.waits * 1000,
            "{ours:?} vs {theirs:?}"
        );
        // Below five the report lists every waiter; at five, near-equal waits may rank
        // differently once rounded.
        if theirs.waiter_pids.len() < 5 {
            assert_eq!(
                ours.waiter_pids, theirs.waiter_pids,
                "{ours:?} vs {theirs:?}"
            );
        }
    }

    // The pipe mutex, named alike: its waiters are the writers, its holder slept in the
    // fault. Other pipes may be contended meanwhile (the test harness's own output), so it
    // is the pipe mutex a writer waited on.
    let (addr, lock) = text_locks
        .iter()
        .find(|(_, lock)| {
            lock.name.contains("pipe_write") && lock.waiter_pids.contains(&(waiters[0] as u64))
        })
        .unwrap_or_else(|| panic!("no pipe mutex among {text_locks:?}"));
    assert_eq!(lock.name, page_locks[addr].name);
    assert_eq!(lock.kind, "mutex", "{lock:?}");
    assert!(lock.waits >= WAITERS as u64, "{lock:?}");
    assert!(
        waiters
            .iter()
            .all(|w| lock.waiter_pids.contains(&(*w as u64))),
        "{lock:?}"
    );
    assert!(
        lock.total_ns >= WAITERS as u64 * HOLD.as_nanos() as u64 / 2,
        "{lock:?}"
    );
    let name = &lock.name;
    eprintln!(
        "{} contended locks in {} events; {lock:?}",
        page_locks.len(),
        from_pages["trace"]["decoded_events"]
    );
    let holders = |run: &Value| {
        run["trace"]["holders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no holders for {name}: {}", run["trace"]["holders"]))
            .clone()
    };
    let (text_holders, page_holders) = (holders(&from_text), holders(&from_pages));
    let sleep = &text_holders["held_across_sleep"][0];
    assert_eq!(sleep["holder_pid"], holder);
    assert_eq!(sleep["function"], "handle_userfault");
    assert_eq!(
        sleep["holder_pid"],
        page_holders["held_across_sleep"][0]["holder_pid"]
    );
    assert_eq!(
        sleep["waiters"],
        page_holders["held_across_sleep"][0]["waiters"]
    );

    // Every format renders it.
    for format in ["table", "md", "csv"] {
        let o = vmscale()
            .args(["report", "--details", "--format", format])
            .arg(&text_path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{format}: {}", stderr(&o));
        let out = stdout(&o);
        if format != "csv" {
            assert!(out.contains(name.as_str()), "{format}: {out}");
            assert!(out.contains("resolve only 1 us"), "{format}");
        } else {
            assert!(out.starts_with("scenario,"), "{out}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn function_graph_text_reports_its_slowest_calls_and_its_events() {
    let run = report_json(&fixture("graph/abstime-proc.txt"));
    let locks = locks(&run);
    let lock = &locks[&0xffff_9a4c_8f2c_1040];
    assert_eq!(
        (
            lock.name.as_str(),
            lock.kind.as_str(),
            lock.waits,
            lock.total_ns,
            lock.waiter_pids.as_slice()
        ),
        (
            "kvm->mmu_lock (read, in kvm_tdp_mmu_map)",
            "rwlock",
            1,
            261_000,
            &[14900][..]
        )
    );
    let warnings: Vec<&str> = run["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(warnings.contains(
        &"function_graph slowest #1: kvm_vm_ioctl took 281.512 us (line 18, cpu 0, depth 0, task bash-14856, started at 9099.024160)"
    ), "{warnings:#?}");
    assert_eq!(run["knobs"]["function_graph_calls"], 4);

    // Without times and tasks only the calls are there, and the lines left out are said.
    for format in ["table", "md", "json"] {
        let o = vmscale()
            .args(["report", "--details", "--format", format])
            .arg(fixture("graph/default.txt"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(
            out.contains("function_graph slowest #1: kvm_vm_release [kvm] took 14.791992 s"),
            "{format}: {out}"
        );
        assert!(
            out.contains(
                "1 line skipped: function_graph returns whose entry is not in the text (line 34"
            ),
            "{format}: {out}"
        );
    }
}

#[test]
fn files_that_give_nothing_to_analyse_say_what_they_look_like_and_why() {
    let dir = scratch("report-not-text");
    std::fs::create_dir_all(&dir).unwrap();
    let report = read_fixture("trace-cmd/report.txt");
    // Valid trace lines, none of an analysed event: named with their counts.
    let kvm: String = report
        .lines()
        .filter(|l| l.contains(": kvm_"))
        .map(|l| format!("{l}\n"))
        .collect();
    let kvm_lines = kvm.lines().count();
    // Every kind of line the importer leaves out, each a known number of times.
    let mut mixed = String::from("notes from the machine\nmore prose\n");
    mixed.push_str(&"x".repeat(70_000));
    mixed.push('\n');
    mixed.push_str("  bash-1 [000] 1.000001: contention_begin: not an address\n");
    mixed.push_str("  bash-1 [000] 1.000002: sched_switch: what ==> ever\n");
    mixed.push_str("  bash-1 [99999] 1.000003: sched_waking: comm=a pid=1 prio=1 target_cpu=0\n");
    mixed.push_str("  bash-1 [000] 1.000004: sched_waking: comm=a pid=x prio=1 target_cpu=0\n");
    let cases: [(&str, Vec<u8>, String); 6] = [
        (
            "empty-trace.txt",
            b"# tracer: nop\n#\n".to_vec(),
            "nothing vmscale can analyse: it looks like the kernel's trace text; it holds no event lines".into(),
        ),
        (
            "header-only.txt",
            b"version = 6\nCPU 0 is empty\ncpus=2\n".to_vec(),
            "nothing vmscale can analyse: it looks like trace-cmd report output; it holds no event lines".into(),
        ),
        (
            "kvm-only.txt",
            kvm.clone().into_bytes(),
            format!(
                "nothing vmscale can analyse: it looks like trace-cmd report output; {kvm_lines} trace lines of events vmscale does not analyse: kvm_fpu x"
            ),
        ),
        (
            "mixed.txt",
            mixed.into_bytes(),
            "nothing vmscale can analyse: it looks like the kernel's trace text; 7 lines skipped: 2 not trace lines, 2 of an unknown event format, 1 truncated (longer than 64 KiB), 1 with the CPU column missing or beyond the CPU limit, 1 events with a field value not understood"
                .into(),
        ),
        (
            "notes.txt",
            b"hello\nworld\n".to_vec(),
            "nothing vmscale can analyse: it does not look like trace text (no line has the columns of ftrace or trace-cmd output); 2 lines skipped: 2 not trace lines".into(),
        ),
        (
            // Text that is not UTF-8 is still text: its lines are read and said to be no trace.
            "latin1.txt",
            b"caf\xe9 au lait\n\xff\xfe line two\n".to_vec(),
            "2 lines skipped: 2 not trace lines".into(),
        ),
    ];
    for (name, content, why) in cases {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        let o = vmscale().arg("report").arg(&path).output().unwrap();
        one_line_failure(&o, 1, &why);
        assert!(stderr(&o).contains(&path.display().to_string()), "{name}");
    }
    // JSON goes to the run loader, which refuses it; binary bytes are named as such.
    for (name, content, why) in [
        ("run.json", &b"{\"a\": 1}"[..], "not a vmscale run.json"),
        (
            "blob.bin",
            &b"\x01\x02\x00\x7f binary"[..],
            "not a run.json, trace-cmd .dat or ftrace text (it starts with bytes 01 02 00",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        let o = vmscale().arg("report").arg(&path).output().unwrap();
        one_line_failure(&o, 1, why);
        assert!(
            !stderr(&o).contains("nothing vmscale"),
            "{name}: {}",
            stderr(&o)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn read_fixture(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// The trace-cmd fixtures are one recording (tests/fixtures/text/trace-cmd/record.sh): the
/// kernel's own text of instance A and trace-cmd's report of it in every form give the same
/// lock findings, whatever the files are called.
#[test]
fn every_form_of_a_trace_cmd_report_gives_the_findings_of_the_kernel_text() {
    let dir = scratch("report-trace-cmd-forms");
    std::fs::create_dir_all(&dir).unwrap();
    let kernel = report_json(&fixture("trace-cmd/kernel.txt"));
    let reference = locks(&kernel);
    assert!(!reference.is_empty());
    assert_eq!(kernel["knobs"]["format"], "the kernel's trace text");
    for (file, format) in [
        ("report.txt", "trace-cmd report output"),
        ("report-raw.txt", "trace-cmd report -R output"),
        ("report-latency.txt", "trace-cmd report -l output"),
    ] {
        // Instance A's lines only, under a name that says nothing of the format.
        let text: String = {
            let mut keep = false;
            read_fixture(&format!("trace-cmd/{file}"))
                .lines()
                .filter(|line| {
                    if !line.starts_with("=>") {
                        keep = !line.starts_with("vmscale-b:");
                    }
                    keep
                })
                .map(|line| format!("{line}\n"))
                .collect()
        };
        let path = dir.join(format!("{}.log", file.replace('.', "-")));
        write(&path, &text);
        let run = report_json(&path);
        assert_eq!(run["knobs"]["format"], format, "{file}");
        assert_eq!(
            run["knobs"]["skipped_lines"], 0,
            "{file}: {}",
            run["warnings"]
        );
        assert_eq!(run["host"]["online_cpus"], 2, "{file}");
        let ours = locks(&run);
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            reference.keys().collect::<Vec<_>>(),
            "{file}"
        );
        for (addr, theirs) in &reference {
            let lock = &ours[addr];
            assert_eq!(
                (&lock.kind, lock.waits, lock.total_ns, &lock.waiter_pids),
                (
                    &theirs.kind,
                    theirs.waits,
                    theirs.total_ns,
                    &theirs.waiter_pids
                ),
                "{file}"
            );
            // -R prints stacks as bare addresses: its locks are named by those.
            if file != "report-raw.txt" {
                assert_eq!(lock.name, theirs.name, "{file}");
            }
        }
    }
    // The mail-quoted excerpt reads too, and says it was quoted.
    let quoted = report_json(&fixture("trace-cmd/report-quoted.txt"));
    assert_eq!(
        quoted["knobs"]["format"],
        "trace-cmd report output, mail-quoted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn function_tracer_text_reports_the_functions_called_most() {
    let run = report_json(&fixture("public/linux-ftrace-rst.txt"));
    assert_eq!(run["knobs"]["function_tracer_calls"], 21);
    let warnings = run["warnings"].to_string();
    assert!(
        warnings.contains("function tracer: 21 calls of 21 functions (no durations: the function tracer records entries only); most called: "),
        "{warnings}"
    );
    // A function trace has no lock events: contention is unknown, never "none".
    let verdict = &run["verdict"][0];
    assert!(
        verdict["summary"]
            .as_str()
            .unwrap()
            .starts_with("lock contention unknown: it needs lock:contention_begin/end"),
        "{verdict}"
    );
    assert!(run["trace"]["events_seen"]
        .as_object()
        .is_none_or(|seen| !seen.contains_key("lock:contention_begin")));
    let text = vmscale()
        .args(["report", "--details"])
        .arg(fixture("public/linux-ftrace-rst.txt"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(!text.contains("no lock contention recorded"), "{text}");
    assert!(!text.contains("0 event types recorded"), "{text}");
    assert!(!text.contains("0 KiB buffer"), "{text}");
    let run = report_json(&fixture("public/trace-cmd-report-man.txt"));
    assert_eq!(run["knobs"]["function_tracer_calls"], 11);
    assert_eq!(
        run["knobs"]["format"],
        "trace-cmd report output with function tracer lines"
    );
    assert!(
        run["warnings"]
            .to_string()
            .contains("function tracer: 11 calls of 11 functions"),
        "{}",
        run["warnings"]
    );
}

/// A latency tracer's trace says its own finding first: the worst latency, where and in
/// which task, as the header gave it.
#[test]
fn a_latency_tracers_headline_comes_first() {
    let o = vmscale()
        .arg("report")
        .arg(fixture("public/linux-ftrace-irqsoff-stacks.txt"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    assert_eq!(
        warnings[..2],
        [
            "warning: latency tracer irqsoff: the worst latency was 16 us, on CPU 0, in \
             swapper/0-0, from run_timer_softirq to run_timer_softirq (kernel 3.8.0-test+)",
            "warning: latency tracer preemptoff: the worst latency was 46 us, on CPU 1, in \
             sshd-1991, from do_IRQ to do_IRQ (kernel 3.8.0-test+)",
        ],
        "{text}"
    );
}
