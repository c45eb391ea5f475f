//! .dat files recorded on other machines (other kernels, architectures, `long` sizes and
//! trace-cmd versions), listed with their provenance in tests/fixtures/dat-corpus/README.md,
//! decoded in place by `Decoder::from_dat` and compared with Debian's `trace-cmd report -R
//! -t`: the number of events per CPU, and for every event its time to the nanosecond, CPU,
//! pid, name and every field value.
//!
//! The files are checked in under tests/fixtures/dat-corpus/: version 6 files compressed
//! with zstd (`NAME.dat.zst`), version 7 files (zstd inside already) as published. Each is
//! written out to a scratch directory as published, byte for byte (SHA-256 checked), because
//! trace-cmd reads a path. The test always runs: a missing file or a missing `trace-cmd` is a
//! failure.

#[path = "support/big_endian.rs"]
mod big_endian;
#[path = "support/dat_writer.rs"]
mod dat_writer;
#[path = "support/report.rs"]
mod report;
#[path = "support/trace_cmd.rs"]
mod trace_cmd;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use big_endian::{as_stored_big_endian, big_endian_writer, printk_pointer_fields};
use report::{
    bare_hex_fields, compare_with_formats, decode_all, parse_report_of, symbol_addresses,
    Comparison, Decoded, Reported,
};
use trace_cmd::report_raw;
use vmscale_trace::dat::{DatFile, Endian};
use vmscale_trace::Decoder;

/// What the corpus holds and what trace-cmd 3.1 makes of each file.
struct Case {
    file: &'static str,
    sha256: &'static str,
    version: u32,
    long_size: u8,
    /// Size of `local_t commit` in header_page: the kernel's `long`.
    commit_size: usize,
    /// Whether header_event has the `time_stamp` line (kernels from 4.15 on).
    time_stamp_line: bool,
    /// Events `trace-cmd report` prints; 0 for a file that holds no trace data.
    events: usize,
}

const CASES: &[Case] = &[
    Case {
        file: "buildroot-i686-4.13.9-v6.dat",
        sha256: "ee0fb734c201fc299803240a314b4a7aedc2a05a5271debf36150dbd2c6ddc04",
        version: 6,
        long_size: 4,
        commit_size: 4,
        time_stamp_line: false,
        events: 293,
    },
    Case {
        file: "lisa-armv7-exynos-v6.dat",
        sha256: "94f49b256f3cae6f62b858d6d267dbc0de9689aba8758cb39fd55f48e23692c7",
        version: 6,
        long_size: 4,
        commit_size: 4,
        time_stamp_line: false,
        events: 1585,
    },
    Case {
        file: "lisa-arm64-juno-v6.dat",
        sha256: "9b31ec78e6e87ac14a908b985bec758cdf2b3977069519482b933025ccd12f3e",
        version: 6,
        long_size: 8,
        commit_size: 8,
        time_stamp_line: false,
        events: 757,
    },
    Case {
        file: "igt-x86_64-v6.dat",
        sha256: "e0ca30f5f2c38bbc62e984de15e235c36fcd2684c45f3959ceb0be69f868bd9a",
        version: 6,
        long_size: 8,
        commit_size: 8,
        time_stamp_line: false,
        events: 10375,
    },
    Case {
        file: "virtualbox-x86_64-5.15-v7-zstd.dat",
        sha256: "6c940804b3ff235b49206cf1fdfa4d1e7962fc4b8f5a79d3284eb8179b931c81",
        version: 7,
        long_size: 8,
        commit_size: 8,
        time_stamp_line: true,
        events: 41400,
    },
    Case {
        file: "arm64-6.12-ipi-all-v7-zstd.dat",
        sha256: "a5aa0f094bbeffce01e4198d2f887d59e90ab7d1f380cbaffe3c24458b14d7ae",
        version: 7,
        long_size: 8,
        commit_size: 8,
        time_stamp_line: true,
        events: 29383,
    },
    Case {
        file: "arm64-6.1-ipi-v7-zstd.dat",
        sha256: "58a3aabf9f559a3c5bec2cb0c35f364f29035cdeea229b49e3a430b57fbb3f92",
        version: 7,
        long_size: 8,
        commit_size: 8,
        time_stamp_line: true,
        events: 11885,
    },
    Case {
        file: "arch-x86_64-7.1-v7-zstd-no-data.dat",
        sha256: "1a94bebd62ef13263ff0126e3dabad816496b098f7988dfb4efe927d9fa01970",
        version: 7,
        long_size: 8,
        commit_size: 8,
        time_stamp_line: true,
        events: 0,
    },
];

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dat-corpus")
}

/// The published bytes of `file`: `file.zst` decompressed when that is what is checked in,
/// else `file` itself.
fn published_bytes(file: &str) -> Vec<u8> {
    let dir = corpus_dir();
    let compressed = dir.join(format!("{file}.zst"));
    if compressed.is_file() {
        let input = std::fs::File::open(&compressed)
            .unwrap_or_else(|e| panic!("{}: {e}", compressed.display()));
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(input)
            .unwrap_or_else(|e| panic!("{}: not zstd: {e}", compressed.display()));
        let mut bytes = Vec::new();
        decoder
            .read_to_end(&mut bytes)
            .unwrap_or_else(|e| panic!("{}: damaged zstd: {e}", compressed.display()));
        return bytes;
    }
    let plain = dir.join(file);
    std::fs::read(&plain).unwrap_or_else(|e| {
        panic!(
            "{file}: neither {} nor {} can be read ({e}); see tests/fixtures/dat-corpus/README.md",
            compressed.display(),
            plain.display()
        )
    })
}

/// SHA-256 of `bytes`, by coreutils' sha256sum.
fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum runs");
    let mut stdin = child.stdin.take().expect("sha256sum's stdin");
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("sha256sum runs");
    writer.join().unwrap().expect("bytes written to sha256sum");
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `decoded` against trace-cmd's `reported`, with the file's symbols and the fields its
/// formats print as bare hex.
fn compare_in(
    dat: &DatFile,
    decoder: &Decoder,
    decoded: &[Decoded],
    reported: &[Reported],
) -> Comparison {
    compare_in_with(dat, decoder, decoded, reported, Default::default())
}

/// [`compare_in`], reading the fields of `bare_hex` as bare hex digits too.
fn compare_in_with(
    dat: &DatFile,
    decoder: &Decoder,
    decoded: &[Decoded],
    reported: &[Reported],
    bare_hex: std::collections::HashSet<(String, String)>,
) -> Comparison {
    let formats: Vec<_> = decoder.catalog().iter().map(|t| t.format.clone()).collect();
    // trace-cmd prints a `const char *` (ipi_raise's reason) as the printk string it
    // points at: that string names its address, as a symbol names its own.
    let mut symbols = symbol_addresses(&dat.metadata.kallsyms);
    for (address, text) in decoder.printk_strings().iter() {
        symbols.entry(text.to_string()).or_default().push(address);
    }
    let mut bare_hex = bare_hex;
    bare_hex.extend(bare_hex_fields(&formats));
    compare_with_formats(decoded, reported, &symbols, &bare_hex)
}

fn check(scratch: &Path, case: &Case) {
    let label = case.file;
    let bytes = published_bytes(case.file);
    assert_eq!(sha256(&bytes), case.sha256, "{label}: not the corpus file");
    let path = scratch.join(case.file);
    std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dat = Arc::new(DatFile::open(&path).unwrap_or_else(|e| panic!("{label}: {e}")));
    assert_eq!(dat.version, case.version, "{label}: version");
    assert_eq!(dat.long_size, case.long_size, "{label}: long size");
    assert_eq!(dat.endian, Endian::Little, "{label}: byte order");
    let header_page = vmscale_trace::decode::format::HeaderPage::parse(&String::from_utf8_lossy(
        dat.metadata.header_page.as_deref().unwrap_or_default(),
    ))
    .unwrap_or_else(|e| panic!("{label}: header_page: {e}"));
    assert_eq!(header_page.commit_size, case.commit_size, "{label}: commit");
    let header_event = vmscale_trace::decode::format::HeaderEvent::parse(&String::from_utf8_lossy(
        dat.metadata.header_event.as_deref().unwrap_or_default(),
    ))
    .unwrap_or_else(|e| panic!("{label}: header_event: {e}"));
    assert_eq!(
        header_event.time_stamp.is_some(),
        case.time_stamp_line,
        "{label}: time_stamp line"
    );

    let buffer = dat
        .data_buffer()
        .map(|b| b.name.clone())
        .unwrap_or_default();
    let reported = parse_report_of(&dat, &report_raw(&path), &buffer);
    assert_eq!(reported.len(), case.events, "{label}: trace-cmd's events");

    let decoder =
        Decoder::from_dat(Arc::clone(&dat), None).unwrap_or_else(|e| panic!("{label}: {e}"));
    let (decoded, _) = decode_all(&decoder, label);
    compare_in(&dat, &decoder, &decoded, &reported).assert_agrees(label);
    if case.events > 0 {
        check_big_endian(scratch, &dat, &decoded, &reported, label);
    }
}

/// The same recording as a big-endian version 6 file (its `long` size, header variants and
/// formats kept): trace-cmd reports the same events from it, and vmscale reads them.
fn check_big_endian(
    scratch: &Path,
    dat: &DatFile,
    little: &[Decoded],
    reported: &[Reported],
    label: &str,
) {
    let mut writer = big_endian_writer(dat);
    writer.version = 6;
    writer.codec = None;
    let path = scratch.join(format!("big-endian-{label}"));
    std::fs::write(&path, writer.to_bytes()).unwrap();
    let big = Arc::new(DatFile::open(&path).unwrap_or_else(|e| panic!("{label} big-endian: {e}")));
    assert_eq!(big.endian, Endian::Big);
    let decoder = Decoder::from_dat(Arc::clone(&big), None).unwrap();
    let big_label = format!("{label} as big-endian");
    let (decoded, _) = decode_all(&decoder, &big_label);
    assert_eq!(
        format!("{decoded:?}"),
        format!("{little:?}"),
        "{label}: big-endian events differ from the original's"
    );
    let big_reported = parse_report_of(&big, &report_raw(&path), "");
    assert_eq!(
        big_reported.len(),
        reported.len(),
        "{big_label}: trace-cmd's events"
    );
    compare_in_with(
        &big,
        &decoder,
        &as_stored_big_endian(&decoded, &big),
        &big_reported,
        printk_pointer_fields(&big),
    )
    .assert_agrees(&big_label);
}

/// Every file checked in is one of [`CASES`] (or the README), so none goes untested.
#[test]
fn the_corpus_directory_holds_the_cases_and_nothing_else() {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("tests/fixtures/dat-corpus")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "README.md")
        .map(|name| name.trim_end_matches(".zst").to_string())
        .collect();
    names.sort();
    let mut cases: Vec<String> = CASES.iter().map(|c| c.file.to_string()).collect();
    cases.sort();
    assert_eq!(names, cases);
}

#[test]
fn every_corpus_file_decodes_as_trace_cmd_reports_it() {
    let scratch = std::env::temp_dir().join(format!("vmscale-dat-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for case in CASES {
        check(&scratch, case);
    }
    std::fs::remove_dir_all(&scratch).unwrap();
}
