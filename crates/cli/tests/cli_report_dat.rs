//! `vmscale report FILE.dat` on files that hold nothing to analyse: one line on stderr that
//! names the file and says what is wrong, exit 1; and on every file of the trace crate's
//! corpus of .dat files from other machines.

mod common;

use std::path::{Path, PathBuf};

use common::{one_line_failure, scratch, vmscale, RemovedOnDrop};
use vmscale_trace::dat::write::{write_dat, DatWriteOptions};
use vmscale_trace::dat::Algorithm;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/contention")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_dat_file_without_events_fails_with_one_line_naming_it() {
    let dir = scratch("report-dat-empty");
    let _removed = RemovedOnDrop(dir.clone());
    // The recording's formats and kallsyms, but CPUs that recorded no page.
    let trace = dir.join("trace");
    copy_dir(&fixture(), &trace);
    for cpu in [0, 1] {
        std::fs::write(trace.join(format!("cpu{cpu}.raw")), b"").unwrap();
    }
    let dat = dir.join("nothing.dat");
    write_dat(&trace, &dat, &DatWriteOptions::default()).unwrap();
    let o = vmscale().arg("report").arg(&dat).output().unwrap();
    one_line_failure(
        &o,
        1,
        "nothing.dat: no events: the trace buffer holds no pages",
    );
}

#[test]
fn files_that_are_no_dat_are_named_for_what_they_are() {
    let dir = scratch("report-dat-not");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("zero.dat"), b"").unwrap();
    std::fs::write(dir.join("random.dat"), [0x8b, 0x1f, 0x00, 0xff, 0x42, 0x17]).unwrap();
    let o = vmscale()
        .arg("report")
        .arg(dir.join("zero.dat"))
        .output()
        .unwrap();
    one_line_failure(&o, 1, "zero.dat: empty file");
    let o = vmscale()
        .arg("report")
        .arg(dir.join("random.dat"))
        .output()
        .unwrap();
    one_line_failure(
        &o,
        1,
        "random.dat: not a run.json, trace-cmd .dat or ftrace text (it starts with bytes 8b 1f 00 ff 42 17)",
    );
}

#[test]
fn damaged_zstd_metadata_is_named_in_words() {
    let dir = scratch("report-dat-zstd");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let dat = dir.join("packed.dat");
    write_dat(
        &fixture(),
        &dat,
        &DatWriteOptions {
            compression: Some(Algorithm::Zstd),
        },
    )
    .unwrap();
    // The header-info section comes first after the preamble; damage its compressed data
    // past the frame header, where only the decoder can tell.
    let mut bytes = std::fs::read(&dat).unwrap();
    let preamble = bytes.windows(4).position(|w| w == b"zstd").unwrap();
    let section = bytes[preamble..].iter().position(|&b| b == 0).unwrap() + preamble + 1;
    let version_end = bytes[section..].iter().position(|&b| b == 0).unwrap() + section + 1;
    // u64 options offset, 16-byte section header, u32 + u32 sizes, then the frame.
    let frame = version_end + 8 + 16 + 8;
    assert_eq!(&bytes[frame..frame + 4], &[0x28, 0xb5, 0x2f, 0xfd]);
    for byte in &mut bytes[frame + 12..frame + 40] {
        *byte ^= 0xa5;
    }
    std::fs::write(&dat, &bytes).unwrap();
    let o = vmscale().arg("report").arg(&dat).output().unwrap();
    one_line_failure(&o, 1, "packed.dat: ");
    let err = common::stderr(&o);
    assert!(
        !err.contains('{') && !err.contains("Error("),
        "debug formatting in: {err}"
    );
}

/// The trace crate's corpus (crates/trace/tests/fixtures/dat-corpus/README.md): version 6
/// files checked in as `NAME.dat.zst`, version 7 files as published.
fn corpus_file(name: &str, dir: &Path) -> PathBuf {
    use std::io::Read;
    let corpus =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/dat-corpus");
    let plain = corpus.join(name);
    if plain.is_file() {
        return plain;
    }
    let compressed = corpus.join(format!("{name}.zst"));
    let input = std::fs::File::open(&compressed)
        .unwrap_or_else(|e| panic!("{}: {e}", compressed.display()));
    let mut bytes = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(input)
        .unwrap_or_else(|e| panic!("{}: {e}", compressed.display()))
        .read_to_end(&mut bytes)
        .unwrap_or_else(|e| panic!("{}: {e}", compressed.display()));
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn every_corpus_file_reports_or_says_in_one_line_why_not() {
    let dir = scratch("report-dat-corpus");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    for name in [
        "buildroot-i686-4.13.9-v6.dat",
        "lisa-armv7-exynos-v6.dat",
        "lisa-arm64-juno-v6.dat",
        "igt-x86_64-v6.dat",
        "virtualbox-x86_64-5.15-v7-zstd.dat",
        "arm64-6.12-ipi-all-v7-zstd.dat",
        "arm64-6.1-ipi-v7-zstd.dat",
    ] {
        let o = vmscale()
            .arg("report")
            .arg(corpus_file(name, &dir))
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", common::stderr(&o));
        let out = common::stdout(&o);
        assert!(out.starts_with("verdict for import"), "{name}: {out}");
    }
    // Formats and kallsyms, but no trace data: trace-cmd prints nothing either.
    let name = "arch-x86_64-7.1-v7-zstd-no-data.dat";
    let o = vmscale()
        .arg("report")
        .arg(corpus_file(name, &dir))
        .output()
        .unwrap();
    one_line_failure(
        &o,
        1,
        &format!("{name}: no events: the trace buffer holds no pages"),
    );
}

/// A trace from another host with scheduler events is explained as a system-wide recording
/// is: every task's time by cause, not only its lock waits. On a kernel before 6.3 (arm64
/// 6.1) the IPIs are counted from ipi_raise and named by reason, and the verdict says that
/// waits for other CPUs are unknown rather than absent.
#[test]
fn an_imported_arm64_trace_explains_every_task_and_what_it_cannot_show() {
    let dir = scratch("report-dat-arm64");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let o = vmscale()
        .args(["report", "--format", "json"])
        .arg(corpus_file("arm64-6.1-ipi-v7-zstd.dat", &dir))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::stderr(&o));
    let json: serde_json::Value = serde_json::from_str(&common::stdout(&o)).unwrap();
    let verdict = json["verdict"].as_array().unwrap();
    let first = &verdict[0];
    let evidence: Vec<&str> = first["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        evidence[0].starts_with("subject: every task the trace shows"),
        "{first}"
    );
    assert!(
        verdict.iter().any(|f| f["cause"] == "lock-wait"),
        "the 6.1 kernel traces lock contention: {verdict:?}"
    );
    let on_cpu = verdict
        .iter()
        .find(|f| f["cause"] == "on-cpu")
        .expect("an on-cpu finding");
    assert!(
        on_cpu["evidence"].as_array().unwrap().iter().any(|e| e
            .as_str()
            .unwrap()
            .starts_with("waits for other CPUs unknown")),
        "{on_cpu}"
    );
    let ipis = &json["trace"]["ipis"][0];
    assert_eq!(ipis["label"], "whole trace");
    assert_eq!(ipis["counted_from"], "ipi_raise");
    assert!(ipis["by_site"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["reason"] == "Function call interrupts"));
    assert!(!ipis["handlers"].as_array().unwrap().is_empty());
}

/// A trace without scheduler events (igt: only i915 events) places no task's time: the
/// verdict must not call its tasks "on a CPU" for the whole trace, and says why.
#[test]
fn an_import_without_scheduler_events_claims_no_time_split() {
    let dir = scratch("report-dat-nosched");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let o = vmscale()
        .args(["report", "--format", "json"])
        .arg(corpus_file("igt-x86_64-v6.dat", &dir))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::stderr(&o));
    let json: serde_json::Value = serde_json::from_str(&common::stdout(&o)).unwrap();
    let verdict = json["verdict"].as_array().unwrap();
    assert!(
        verdict
            .iter()
            .all(|f| f["cause"] != "on-cpu" && f["cause"] != "cpu-starvation"),
        "{verdict:?}"
    );
    assert!(
        verdict[0]["evidence"][0]
            .as_str()
            .unwrap()
            .contains("no sched:sched_switch"),
        "{verdict:?}"
    );
}
