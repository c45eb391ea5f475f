//! Damaged input gives errors, never panics: real fixture pages mutated with a fixed seed,
//! truncated and corrupted per-CPU files, and broken trace directories.

use std::path::{Path, PathBuf};

use vmscale_trace::decode::page::{Page, PageError, PageLayout};
use vmscale_trace::{DecodeError, Decoder};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// xorshift64*: a fixed, dependency-free sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn fixture_pages() -> Vec<Vec<u8>> {
    let mut pages = Vec::new();
    for name in ["contention", "overrun"] {
        for cpu in 0..2 {
            let raw = std::fs::read(fixture(name).join(format!("cpu{cpu}.raw"))).unwrap();
            pages.extend(raw.chunks_exact(4096).map(<[u8]>::to_vec));
        }
    }
    pages
}

/// Decodes a page completely; the number of records, or the error that stopped it.
fn decode(bytes: &[u8]) -> Result<usize, PageError> {
    let page = Page::parse(&PageLayout::X86_64, bytes)?;
    let mut count = 0;
    for record in page.records() {
        let record = record?;
        // Every payload lies inside the page's committed data.
        let data = page.data.as_ptr_range();
        let payload = record.payload.as_ptr_range();
        assert!(payload.start >= data.start && payload.end <= data.end);
        count += 1;
    }
    Ok(count)
}

#[test]
fn every_fixture_page_decodes_cleanly() {
    let pages = fixture_pages();
    assert!(pages.len() > 10);
    let total: usize = pages.iter().map(|p| decode(p).unwrap()).sum();
    assert!(total > 1000, "{total} records");
}

#[test]
fn mutated_pages_give_errors_not_panics() {
    let pages = fixture_pages();
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let (mut errors, mut decoded) = (0, 0);
    for round in 0..20_000 {
        let mut page = pages[rng.below(pages.len())].clone();
        match round % 5 {
            // Truncated anywhere, header included.
            0 => page.truncate(rng.below(page.len())),
            // A few flipped bits.
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let bit = rng.below(page.len() * 8);
                    page[bit / 8] ^= 1 << (bit % 8);
                }
            }
            // An oversize length word (or type_len 0 header) somewhere in the data.
            2 => {
                let at = 16 + rng.below(page.len() - 20) / 4 * 4;
                let value = [0, 3, 4081, u32::MAX, rng.next() as u32][rng.below(5)];
                page[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
            // A random commit word: lengths past the page, flags without room for a count.
            3 => {
                let commit = match rng.below(3) {
                    0 => rng.next(),
                    1 => rng.next() & 0x1fff,
                    _ => (rng.next() & 0xfff) | 0xffff_ffff_c000_0000,
                };
                page[8..16].copy_from_slice(&commit.to_le_bytes());
            }
            // Random bytes over a stretch of events.
            _ => {
                let start = 16 + rng.below(page.len() - 16);
                let end = (start + 1 + rng.below(64)).min(page.len());
                for byte in &mut page[start..end] {
                    *byte = rng.next() as u8;
                }
            }
        }
        match decode(&page) {
            Ok(_) => decoded += 1,
            Err(error) => {
                // Errors are one line.
                assert!(!error.to_string().contains('\n'));
                errors += 1;
            }
        }
    }
    // The checks fire: a large share of the damage is detected, and the rest still
    // decodes within bounds.
    assert!(errors > 4_000, "{errors} errors, {decoded} decoded");
    assert!(decoded > 1_000, "{errors} errors, {decoded} decoded");
}

#[test]
fn hand_made_damage_is_named() {
    let pages = fixture_pages();
    let page = &pages[0];
    assert!(matches!(
        decode(&page[..8]),
        Err(PageError::ShortPage { .. })
    ));
    let mut oversize = page.clone();
    oversize[8..16].copy_from_slice(&4081u64.to_le_bytes());
    assert!(matches!(
        decode(&oversize),
        Err(PageError::CommitBeyondPage { .. })
    ));
    // The first event: make it claim a long type_len 0 event running past the data.
    let mut long = page.clone();
    long[16..20].copy_from_slice(&(7u32 << 5).to_le_bytes());
    long[20..24].copy_from_slice(&5000u32.to_le_bytes());
    assert!(matches!(
        decode(&long),
        Err(PageError::EventBeyondData { offset: 0, .. })
    ));
}

/// A copy of a fixture directory to damage.
fn scratch_copy(name: &str, tag: &str) -> PathBuf {
    let target = std::env::temp_dir().join(format!("vmscale-trace-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&target);
    copy_dir(&fixture(name), &target);
    target
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
fn a_damaged_trace_decodes_around_the_damage() {
    let clean = Decoder::open(fixture("contention"))
        .unwrap()
        .for_each(|_| {})
        .unwrap();
    let dir = scratch_copy("contention", "damaged");
    // cpu0: page 1's first event claims the whole page; cpu1: cut in the last page.
    let mut cpu0 = std::fs::read(dir.join("cpu0.raw")).unwrap();
    cpu0[4096 + 16..4096 + 20].copy_from_slice(&0u32.to_le_bytes());
    cpu0[4096 + 20..4096 + 24].copy_from_slice(&100_000u32.to_le_bytes());
    std::fs::write(dir.join("cpu0.raw"), &cpu0).unwrap();
    let cpu1 = std::fs::read(dir.join("cpu1.raw")).unwrap();
    std::fs::write(dir.join("cpu1.raw"), &cpu1[..cpu1.len() - 100]).unwrap();

    let decoder = Decoder::open(&dir).unwrap();
    let mut times = Vec::new();
    let summary = decoder.for_each(|e| times.push(e.ts())).unwrap();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(summary.cpus[0].corrupt_pages, 1);
    assert_eq!(summary.cpus[0].pages, clean.cpus[0].pages);
    assert_eq!(summary.cpus[1].pages, clean.cpus[1].pages - 1);
    assert!(summary.events() < clean.events());
    assert!(summary.events() > clean.events() / 2);
    assert_eq!(summary.errors.len(), 2, "{:?}", summary.errors);
    assert!(summary
        .errors
        .iter()
        .any(|e| e.starts_with("cpu0.raw page 1: event at data offset 0 claims")));
    assert!(summary
        .errors
        .iter()
        .any(|e| e == "cpu1.raw ends in a partial page of 3996 bytes"));

    // The same errors arrive inline from the stream, which goes on after them.
    let mut stream = decoder.events().unwrap();
    let (mut events, mut inline_errors) = (0, Vec::new());
    while let Some(next) = stream.next_event() {
        match next {
            Ok(_) => events += 1,
            Err(error) => {
                assert!(!error.is_fatal());
                inline_errors.push(error);
            }
        }
    }
    assert_eq!(events, summary.events());
    assert!(matches!(
        inline_errors[0],
        DecodeError::Page {
            cpu: 0,
            page: 1,
            ..
        }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_broken_trace_directory_is_one_error() {
    let expect_error = |tag: &str, damage: &dyn Fn(&Path), wanted: &str| {
        let dir = scratch_copy("overrun", tag);
        damage(&dir);
        let error = Decoder::open(&dir)
            .and_then(|d| d.for_each(|_| {}))
            .unwrap_err()
            .to_string();
        assert!(error.contains(wanted), "{tag}: {error}");
        assert!(!error.contains('\n'), "{tag}: {error}");
        std::fs::remove_dir_all(&dir).unwrap();
    };
    let write = |file: &'static str, text: &'static str| {
        move |dir: &Path| std::fs::write(dir.join(file), text).unwrap()
    };
    expect_error("meta-json", &write("meta.json", "{"), "meta.json: EOF");
    expect_error(
        "page-size",
        &write("meta.json", r#"{"page_size": 3000, "cpus": [0]}"#),
        "page_size 3000 is not a power of two",
    );
    expect_error(
        "cpus",
        &write("meta.json", r#"{"page_size": 4096, "cpus": [0, 0]}"#),
        "cpu 0 appears twice",
    );
    expect_error(
        "header-page",
        &write(
            "header_page",
            "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n",
        ),
        "header_page: field `commit` missing",
    );
    expect_error(
        "header-event",
        &write("header_event", "\ttype_len : 6 bits\n"),
        "header_event: no `time_delta` line",
    );
    expect_error(
        "format",
        &write("formats/sched/sched_switch", "name: sched_switch\nID: x\n"),
        "formats/sched/sched_switch: line 2: ID is not a number",
    );
    expect_error(
        "duplicate-id",
        &|dir: &Path| {
            std::fs::copy(
                dir.join("formats/raw_syscalls/sys_exit"),
                dir.join("formats/raw_syscalls/sys_exit_copy"),
            )
            .unwrap();
        },
        "event id 442 is both raw_syscalls:sys_exit and raw_syscalls:sys_exit",
    );
    expect_error(
        "missing-cpu",
        &|dir: &Path| std::fs::remove_file(dir.join("cpu1.raw")).unwrap(),
        "cpu1.raw: No such file",
    );
}
