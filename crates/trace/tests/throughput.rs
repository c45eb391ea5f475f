//! Decode throughput on a large trace made of the contention fixture's real pages, repeated
//! with shifted page timestamps. Ignored by default; measure in release mode:
//!
//! ```text
//! cargo test -p vmscale-trace --release --test throughput -- --ignored --nocapture
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use vmscale_trace::decode::page::{Page, PageLayout};
use vmscale_trace::{Decoder, EventKind};

const REPEATS: u64 = 6_000;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contention")
}

/// The fixture directory with every cpu<N>.raw repeated `REPEATS` times, each repeat's
/// page timestamps moved past the previous one's.
fn build_large_trace() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmscale-trace-throughput-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("formats")).unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_file() && !name.ends_with(".raw") {
            std::fs::copy(entry.path(), dir.join(&name)).unwrap();
        }
    }
    for system in std::fs::read_dir(fixture().join("formats")).unwrap() {
        let system = system.unwrap();
        std::fs::create_dir_all(dir.join("formats").join(system.file_name())).unwrap();
        for event in std::fs::read_dir(system.path()).unwrap() {
            let event = event.unwrap();
            std::fs::copy(
                event.path(),
                dir.join("formats")
                    .join(system.file_name())
                    .join(event.file_name()),
            )
            .unwrap();
        }
    }
    let span = 2_000_000_000u64;
    for cpu in 0..2 {
        let raw = std::fs::read(fixture().join(format!("cpu{cpu}.raw"))).unwrap();
        let mut out = Vec::with_capacity(raw.len() * REPEATS as usize);
        for repeat in 0..REPEATS {
            for page in raw.chunks_exact(4096) {
                let ts = u64::from_le_bytes(page[..8].try_into().unwrap()) + repeat * span;
                out.extend_from_slice(&ts.to_le_bytes());
                out.extend_from_slice(&page[8..]);
            }
        }
        std::fs::write(dir.join(format!("cpu{cpu}.raw")), out).unwrap();
    }
    dir
}

fn rate(events: u64, seconds: f64) -> String {
    format!(
        "{events} events in {seconds:.3} s = {:.1} M events/s",
        events as f64 / seconds / 1e6
    )
}

#[test]
#[ignore = "a measurement: run in release mode with --ignored --nocapture"]
fn decode_throughput() {
    let dir = build_large_trace();
    let decoder = Decoder::open(&dir).unwrap();
    // Warm the page cache so the runs measure decoding, not the disk.
    decoder.for_each(|_| {}).unwrap();

    // 1. Pages alone: header, event headers, time; one core, no merge.
    let raw = std::fs::read(dir.join("cpu0.raw")).unwrap();
    let start = Instant::now();
    let (mut events, mut checksum) = (0u64, 0u64);
    for bytes in raw.chunks_exact(4096) {
        let page = Page::parse(&PageLayout::X86_64, bytes).unwrap();
        for record in page.records() {
            let record = record.unwrap();
            checksum = checksum.wrapping_add(record.ts ^ record.payload.len() as u64);
            events += 1;
        }
    }
    println!(
        "pages in memory:            {}",
        rate(events, start.elapsed().as_secs_f64())
    );

    // 2. The merged stream from the files: read, decode, k-way merge, event type.
    let start = Instant::now();
    let (mut merged, mut pids) = (0u64, 0i64);
    let summary = decoder
        .for_each(|event| {
            merged += 1;
            pids += event.pid() as i64;
            checksum = checksum.wrapping_add(event.ts());
        })
        .unwrap();
    let merged_time = start.elapsed().as_secs_f64();
    println!("merged stream:              {}", rate(merged, merged_time));

    // 3. The same with every event turned into its typed view.
    let start = Instant::now();
    let (mut typed, mut switches) = (0u64, 0u64);
    decoder
        .for_each(|event| {
            typed += 1;
            match event.kind() {
                EventKind::SchedSwitch(s) => switches += s.next_pid as u64,
                EventKind::ContentionBegin(b) => checksum ^= b.lock_addr,
                EventKind::KernelStack(s) => checksum ^= s.get(0).unwrap_or(0),
                _ => {}
            }
        })
        .unwrap();
    println!(
        "merged stream + typed view: {}",
        rate(typed, start.elapsed().as_secs_f64())
    );
    println!("(checksum {checksum:x} {pids} {switches})");

    assert_eq!(merged, summary.events());
    assert_eq!(summary.corrupt_pages(), 0);
    assert!(merged > 5_000_000);
    std::fs::remove_dir_all(&dir).unwrap();
}
