//! Decoding each CPU on a thread of its own, or decoding and merging on one thread while
//! the caller works on another, with pages read or mapped, must hand the caller exactly
//! what decoding read pages on one thread does: the same events in the same order, the same damage reports in the
//! same order, the same summary, and so the same analysis.
//!
//! The trace is the trace crate's real fixture (a recording of this kernel with lock
//! contention, IPIs and kernel stacks), as it is, then with its pages repeated (times
//! shifted) so that each CPU's data spans many read buffers, then repeated and damaged.

use std::path::{Path, PathBuf};

use vmscale_run::TraceSection;
use vmscale_trace::{DecodeSummary, Decoder, PageAccess};

const PAGE: usize = 4096;
/// Each repeat is 7 (cpu0) or 6 (cpu1) pages: 60 repeats make about 1.5 MiB per CPU, many
/// times the 256 KiB a CPU reads (and decodes as one batch) at a time.
const REPEATS: u64 = 60;

#[path = "support/fixture_copy.rs"]
mod fixture_copy;

fn fixture() -> PathBuf {
    fixture_copy::trace_fixture("contention")
}

/// The fixture with every cpu<N>.raw repeated, each repeat's page times moved past the
/// previous one's; `damage` then edits the pages.
fn repeated(name: &str, damage: impl Fn(u32, &mut Vec<u8>)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "vmscale-parallel-decode-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    fixture_copy::copy_dir(&fixture(), &dir);
    let span = 1_000_000_000u64;
    for cpu in 0..2u32 {
        let raw = std::fs::read(fixture().join(format!("cpu{cpu}.raw"))).unwrap();
        let mut out = Vec::with_capacity(raw.len() * REPEATS as usize);
        for repeat in 0..REPEATS {
            for page in raw.chunks_exact(PAGE) {
                let ts = u64::from_le_bytes(page[..8].try_into().unwrap()) + repeat * span;
                out.extend_from_slice(&ts.to_le_bytes());
                out.extend_from_slice(&page[8..]);
            }
        }
        damage(cpu, &mut out);
        assert!(
            out.len() > 4 * (256 << 10),
            "cpu{cpu} must span many read buffers"
        );
        std::fs::write(dir.join(format!("cpu{cpu}.raw")), out).unwrap();
    }
    // meta.json's page counts would now be wrong: without them nothing is compared.
    let meta = std::fs::read_to_string(dir.join("meta.json")).unwrap();
    let mut meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
    meta.as_object_mut().unwrap().remove("pages");
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    dir
}

/// Every event as (time, CPU, pid, type id, record bytes), and the decode's summary.
type Decoded = (Vec<(u64, u32, i32, u16, Vec<u8>)>, DecodeSummary);

fn decode(dir: &Path, threads: usize, access: PageAccess) -> Decoded {
    let decoder = Decoder::open(dir)
        .unwrap()
        .with_threads(threads)
        .with_page_access(access);
    let mut events = Vec::new();
    let summary = decoder
        .for_each(|e| events.push((e.ts(), e.cpu(), e.pid(), e.id(), e.record().to_vec())))
        .unwrap();
    // The other way, for a caller as heavy as the decode: with mapped pages one thread
    // decodes and merges, this one takes the events.
    let mut overlapped = Vec::new();
    let same = decoder
        .for_each_overlapped(|e| {
            overlapped.push((e.ts(), e.cpu(), e.pid(), e.id(), e.record().to_vec()))
        })
        .unwrap();
    assert!(
        overlapped == events,
        "{threads} threads: overlapped event sequence"
    );
    assert_eq!(
        same.cpus, summary.cpus,
        "{threads} threads: overlapped summaries"
    );
    assert_eq!(
        same.errors, summary.errors,
        "{threads} threads: overlapped errors"
    );
    (events, summary)
}

/// The whole analysis, as the run record would hold it, and what it says besides.
fn analyse(dir: &Path, threads: usize, access: PageAccess) -> (String, Vec<String>, Vec<String>) {
    let decoder = Decoder::open(dir)
        .unwrap()
        .with_threads(threads)
        .with_page_access(access);
    let symbols = decoder.kallsyms().unwrap();
    let analysis = vmscale_analysis::analyse_with(&decoder, &symbols).unwrap();
    let (errors, warnings) = (analysis.decode_errors.clone(), analysis.warnings.clone());
    let mut section = TraceSection::default();
    analysis.fill(&mut section);
    (serde_json::to_string(&section).unwrap(), errors, warnings)
}

/// Decodes `dir` with read pages on one thread, then every other way, checks they all
/// agree, and returns the events and summary.
fn same_both_ways(dir: &Path) -> Decoded {
    let (one_events, one) = decode(dir, 1, PageAccess::Read);
    let one_analysis = analyse(dir, 1, PageAccess::Read);
    for access in [PageAccess::Read, PageAccess::Mapped] {
        for threads in [1, 2, 3] {
            let way = format!("{threads} threads, {access:?}");
            let (events, summary) = decode(dir, threads, access);
            assert_eq!(events.len(), one_events.len(), "{way}: events");
            assert!(events == one_events, "{way}: event sequence");
            assert_eq!(summary.cpus, one.cpus, "{way}: per-CPU summaries");
            assert_eq!(summary.errors, one.errors, "{way}: errors");
            assert_eq!(summary.unknown_types, one.unknown_types);
            assert_eq!(
                analyse(dir, threads, access),
                one_analysis,
                "{way}: analysis"
            );
        }
    }
    (one_events, one)
}

#[test]
fn the_fixture_decodes_and_analyses_the_same_on_one_thread_and_several() {
    let (events, summary) = same_both_ways(&fixture());
    assert!(events.len() > 500, "{} events", events.len());
    assert_eq!(summary.events(), events.len() as u64);
    assert!(summary.kernel_stacks() > 0);
    let (findings, _, _) = analyse(&fixture(), 1, PageAccess::Read);
    assert!(findings.contains("lock_addr"), "the fixture has contention");
}

#[test]
fn a_trace_of_many_read_buffers_decodes_the_same_on_one_thread_and_several() {
    let dir = repeated("clean", |_, _| {});
    let (events, summary) = same_both_ways(&dir);
    let (once, _) = decode(&fixture(), 1, PageAccess::Read);
    assert_eq!(events.len(), once.len() * REPEATS as usize);
    assert!(summary.errors.is_empty());
    assert!(events.windows(2).all(|pair| pair[0].0 <= pair[1].0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn damage_is_reported_in_the_same_places_on_one_thread_and_several() {
    let dir = repeated("damaged", |cpu, pages| {
        // A commit beyond the page, a last event beyond the data, and a file that ends in
        // part of a page; in different read buffers, on both CPUs.
        let page = if cpu == 0 { 70 } else { 130 };
        pages[page * PAGE + 8..page * PAGE + 16].copy_from_slice(&(PAGE as u64 * 2).to_le_bytes());
        // Two bytes less data cut the page's last event short.
        let at = (if cpu == 0 { 200 } else { 20 }) * PAGE + 8;
        let commit = u64::from_le_bytes(pages[at..at + 8].try_into().unwrap());
        pages[at..at + 8].copy_from_slice(&(commit - 2).to_le_bytes());
        if cpu == 1 {
            pages.truncate(pages.len() - PAGE / 2);
        }
    });
    let (events, summary) = same_both_ways(&dir);
    assert!(!events.is_empty());
    assert!(summary.errors.len() >= 3, "{:?}", summary.errors);
    assert_eq!(summary.corrupt_pages(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}
