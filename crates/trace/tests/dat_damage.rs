//! A .dat file damaged in the middle of a CPU's data: every page outside the damage is
//! decoded exactly as from the undamaged file, and what was lost is counted per CPU.
//!
//! The files are written from the recorded `contention` fixture, with CPU 0's seven pages
//! repeated five times so that its data spans several compressed chunks (ten pages each).

#[path = "support/dat_writer.rs"]
mod dat_writer;

use std::path::Path;
use std::sync::Arc;

use dat_writer::{Codec, DatWriter};
use vmscale_trace::dat::write::{write_dat, DatWriteOptions};
use vmscale_trace::dat::DatFile;
use vmscale_trace::decode::page::{Page, PageLayout};
use vmscale_trace::{DecodeSummary, Decoder};

const PAGE: usize = 4096;
const REPEATS: usize = 5;

/// Per CPU, every event as (time, record bytes), in buffer order.
type Events = Vec<Vec<(u64, Vec<u8>)>>;

fn writer() -> DatWriter {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contention");
    // One directory per call: the tests run at the same time.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scratch =
        std::env::temp_dir().join(format!("vmscale-dat-damage-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let written = scratch.join("contention.dat");
    write_dat(&fixture, &written, &DatWriteOptions::default()).unwrap();
    let dat = DatFile::open(&written).unwrap();
    let mut writer = DatWriter::from_dat(&dat);
    std::fs::remove_dir_all(&scratch).unwrap();
    writer.cpus[0] = writer.cpus[0].repeat(REPEATS);
    writer
}

fn decode(bytes: Vec<u8>) -> (Events, DecodeSummary) {
    let dat = Arc::new(DatFile::from_bytes(bytes).unwrap());
    let decoder = Decoder::from_dat(dat, None).unwrap();
    let mut events: Events = vec![Vec::new(); 2];
    let summary = decoder
        .for_each(|event| events[event.cpu() as usize].push((event.ts(), event.record().to_vec())))
        .unwrap();
    (events, summary)
}

/// How many events each of CPU 0's pages holds, read with the page decoder alone.
fn events_per_page(pages: &[u8]) -> Vec<usize> {
    pages
        .chunks_exact(PAGE)
        .map(|page| {
            Page::parse(&PageLayout::X86_64, page)
                .unwrap()
                .records()
                .count()
        })
        .collect()
}

/// CPU 0's events of the undamaged file without those of `pages`.
fn without_pages(
    events: &[(u64, Vec<u8>)],
    per_page: &[usize],
    pages: std::ops::Range<usize>,
) -> Vec<(u64, Vec<u8>)> {
    let start: usize = per_page[..pages.start].iter().sum();
    let end: usize = per_page[..pages.end.min(per_page.len())].iter().sum();
    let mut kept = events[..start].to_vec();
    kept.extend_from_slice(&events[end..]);
    kept
}

/// Offsets in `file` of CPU 0's compressed chunks: (header offset, compressed size).
fn chunks_of_cpu0(file: &[u8]) -> Vec<(usize, usize)> {
    let dat = DatFile::from_bytes(file.to_vec()).unwrap();
    let data = dat.data_buffer().unwrap().cpu(0).unwrap();
    let mut at = data.offset as usize;
    let count = u32::from_le_bytes(file[at..at + 4].try_into().unwrap());
    at += 4;
    (0..count)
        .map(|_| {
            let compressed = u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
            let chunk = (at, compressed);
            at += 8 + compressed;
            chunk
        })
        .collect()
}

fn one_line(warnings: &[String]) -> &str {
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(!warnings[0].contains('\n'), "{}", warnings[0]);
    &warnings[0]
}

#[test]
fn a_damaged_compressed_chunk_costs_its_pages_and_nothing_else() {
    for (codec, name) in [(Codec::Zstd, "zstd"), (Codec::Zlib, "zlib")] {
        let mut writer = writer();
        writer.version = 7;
        writer.codec = Some(codec);
        let per_page = events_per_page(&writer.cpus[0]);
        assert_eq!(per_page.len(), 7 * REPEATS);
        let file = writer.to_bytes();
        let (clean, summary) = decode(file.clone());
        assert_eq!(summary.corrupt_pages(), 0);
        assert_eq!(clean[0].len(), per_page.iter().sum::<usize>());

        let chunks = chunks_of_cpu0(&file);
        assert_eq!(chunks.len(), 4, "35 pages in chunks of 10");
        // The start of the second chunk's stream: it cannot be decompressed at all.
        let mut damaged = file.clone();
        let (header, _) = chunks[1];
        damaged[header + 8..header + 12].copy_from_slice(b"junk");
        let (events, summary) = decode(damaged);
        assert_eq!(
            events[0],
            without_pages(&clean[0], &per_page, 10..20),
            "{name}"
        );
        assert_eq!(events[1], clean[1], "{name}: the other CPU is whole");
        let cpu0 = &summary.cpus[0];
        assert_eq!(
            (cpu0.damaged_chunks, cpu0.lost_bytes),
            (1, 10 * PAGE as u64),
            "{name}"
        );
        assert_eq!(cpu0.pages, 25, "{name}");
        let warning = one_line(&summary.damage_warnings(PAGE)).to_string();
        let expected = format!(
            "cpu0: 10 of 35 pages (40 KiB) could not be read (first: cpu0: damaged \
             compressed chunk at offset {header} (40960 bytes of pages): corrupt {name} data; \
             its pages were skipped); {} events from the other pages were decoded",
            events[0].len()
        );
        assert_eq!(warning, expected);
    }
}

#[test]
fn a_damaged_chunk_table_costs_the_rest_of_that_cpu() {
    let mut writer = writer();
    writer.version = 7;
    writer.codec = Some(Codec::Zstd);
    let per_page = events_per_page(&writer.cpus[0]);
    let file = writer.to_bytes();
    let (clean, _) = decode(file.clone());
    // The third chunk claims more compressed bytes than the file holds: nothing after
    // its header can be found.
    let mut damaged = file.clone();
    let (header, _) = chunks_of_cpu0(&file)[2];
    damaged[header..header + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let (events, summary) = decode(damaged);
    assert_eq!(events[0], without_pages(&clean[0], &per_page, 20..35));
    assert_eq!(events[1], clean[1]);
    let cpu0 = &summary.cpus[0];
    assert!(cpu0.rest_unknown);
    let warning = one_line(&summary.damage_warnings(PAGE)).to_string();
    assert!(
        warning.contains("and an unknown amount after them"),
        "{warning}"
    );
    assert!(
        warning.contains("the rest of this CPU's data is lost"),
        "{warning}"
    );
}

#[test]
fn a_damaged_page_in_an_uncompressed_file_costs_that_page() {
    let mut writer = writer();
    writer.version = 6;
    let per_page = events_per_page(&writer.cpus[0]);
    let file = writer.to_bytes();
    let (clean, _) = decode(file.clone());
    let dat = DatFile::from_bytes(file.clone()).unwrap();
    let offset = dat.data_buffer().unwrap().cpu(0).unwrap().offset as usize;
    let mut damaged = file;
    // Page 12's commit claims more data than a page holds.
    let commit = offset + 12 * PAGE + 8;
    damaged[commit..commit + 8].copy_from_slice(&5000u64.to_le_bytes());
    let (events, summary) = decode(damaged);
    assert_eq!(events[0], without_pages(&clean[0], &per_page, 12..13));
    assert_eq!(events[1], clean[1]);
    assert_eq!(summary.cpus[0].corrupt_pages, 1);
    let warning = one_line(&summary.damage_warnings(PAGE)).to_string();
    assert!(warning.starts_with("cpu0: 1 of 35 pages (4 KiB) could not be read (first: cpu0.raw page 12: commit says 5000 data bytes"), "{warning}");
}

#[test]
fn a_version_6_file_cut_short_keeps_the_whole_pages_before_the_cut() {
    let mut writer = writer();
    writer.version = 6;
    let file = writer.to_bytes();
    let (clean, _) = decode(file.clone());
    // CPU 1's data comes last; cut it 100 bytes into its fourth page.
    let dat = DatFile::from_bytes(file.clone()).unwrap();
    let cpu1 = *dat.data_buffer().unwrap().cpu(1).unwrap();
    let cut = cpu1.offset as usize + 3 * PAGE + 100;
    let (events, summary) = decode(file[..cut].to_vec());
    assert_eq!(events[0], clean[0], "the first CPU is whole");
    let pages_of_cpu1 = (cpu1.size as usize) / PAGE;
    let cpu1_pages = events_per_page(&writer.cpus[1]);
    let kept: usize = cpu1_pages[..3].iter().sum();
    assert_eq!(events[1], clean[1][..kept].to_vec());
    let lost = (pages_of_cpu1 - 3) * PAGE;
    assert_eq!(summary.cpus[1].lost_bytes, lost as u64);
    let warning = one_line(&summary.damage_warnings(PAGE)).to_string();
    assert_eq!(
        warning,
        format!(
            "cpu1: {} of {pages_of_cpu1} pages ({} KiB) could not be read (first: cpu1: the \
             file ends {lost} bytes before this CPU's data does); {kept} events from the other \
             pages were decoded",
            pages_of_cpu1 - 3,
            lost / 1024
        )
    );
}

#[test]
fn an_extraction_of_a_damaged_file_keeps_every_page_the_decode_in_place_keeps() {
    let mut writer = writer();
    writer.version = 7;
    writer.codec = Some(Codec::Zstd);
    let file = writer.to_bytes();
    let (header, _) = chunks_of_cpu0(&file)[1];
    let mut damaged = file;
    damaged[header + 8..header + 12].copy_from_slice(b"junk");
    let (in_place, summary) = decode(damaged.clone());
    assert_eq!(summary.cpus[0].damaged_chunks, 1);

    let scratch =
        std::env::temp_dir().join(format!("vmscale-dat-damage-extract-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let path = scratch.join("damaged.dat");
    std::fs::write(&path, &damaged).unwrap();
    let out = scratch.join("trace");
    let extracted = vmscale_trace::dat::extract_to_trace_dir(&path, &out).unwrap();
    assert_eq!(
        extracted.damaged_chunks.len(),
        1,
        "{:?}",
        extracted.damaged_chunks
    );
    assert!(
        extracted.damaged_chunks[0].starts_with(&format!(
            "cpu0: damaged compressed chunk at offset {header} "
        )),
        "{:?}",
        extracted.damaged_chunks
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        meta["dat"]["damaged_chunks"][0],
        extracted.damaged_chunks[0]
    );

    // The extracted directory decodes to exactly the events the damaged file decodes to.
    let decoder = Decoder::open(&out).unwrap();
    let mut events: Events = vec![Vec::new(); 2];
    decoder
        .for_each(|event| events[event.cpu() as usize].push((event.ts(), event.record().to_vec())))
        .unwrap();
    assert_eq!(events, in_place);
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// Where each zstd frame starts in `file` (its magic number), in file order.
fn zstd_frames(file: &[u8]) -> Vec<usize> {
    file.windows(4)
        .enumerate()
        .filter(|(_, w)| *w == [0x28, 0xb5, 0x2f, 0xfd])
        .map(|(at, _)| at)
        .collect()
}

#[test]
fn a_zstd_chunk_whose_checksum_disagrees_costs_its_pages_and_says_why() {
    let mut writer = writer();
    writer.version = 7;
    writer.codec = Some(Codec::Zstd);
    let per_page = events_per_page(&writer.cpus[0]);
    let file = writer.to_bytes();
    let (clean, _) = decode(file.clone());
    let chunks = chunks_of_cpu0(&file);
    // The frame's last four bytes are its content checksum: the data still decompresses
    // to the right size, and only the checksum tells it from the original.
    let mut damaged = file.clone();
    let (header, compressed) = chunks[2];
    damaged[header + 8 + compressed - 1] ^= 0x5a;
    let (events, summary) = decode(damaged);
    assert_eq!(events[0], without_pages(&clean[0], &per_page, 20..30));
    assert_eq!(events[1], clean[1]);
    let warning = one_line(&summary.damage_warnings(PAGE)).to_string();
    assert!(
        warning.contains(&format!(
            "damaged compressed chunk at offset {header} (40960 bytes of pages): zstd checksum mismatch"
        )),
        "{warning}"
    );
}

#[test]
fn a_zstd_section_that_decompresses_to_other_bytes_is_an_error_at_its_real_offset() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contention");
    let scratch = std::env::temp_dir().join(format!("vmscale-dat-checksum-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let written = scratch.join("zstd.dat");
    let options = DatWriteOptions {
        compression: Some(vmscale_trace::dat::Algorithm::Zstd),
    };
    write_dat(&fixture, &written, &options).unwrap();
    let file = std::fs::read(&written).unwrap();
    std::fs::remove_dir_all(&scratch).unwrap();
    DatFile::from_bytes(file.clone()).expect("the undamaged file reads");
    // The first frame is the first metadata section's (the header info); its compressed
    // size is the u32 eight bytes before it.
    let frame = zstd_frames(&file)[0];
    let compressed = u32::from_le_bytes(file[frame - 8..frame - 4].try_into().unwrap()) as usize;
    let mut damaged = file.clone();
    damaged[frame + compressed - 2] ^= 0xff;
    let Err(e) = DatFile::from_bytes(damaged) else {
        panic!("a damaged checksum is an error");
    };
    let text = e.to_string();
    assert!(text.contains("checksum mismatch"), "{text}");
    assert!(text.contains(&format!("at offset {frame}")), "{text}");
    // Bytes that do not decompress at all: the error names the same real offset, not one
    // inside the section.
    let mut damaged = file.clone();
    damaged[frame + 4..frame + 8].copy_from_slice(b"junk");
    let Err(e) = DatFile::from_bytes(damaged) else {
        panic!("a frame that is no zstd is an error");
    };
    let text = e.to_string();
    assert!(text.contains(&format!("offset {frame}")), "{text}");
}
