//! Big-endian .dat files: the `contention` fixture (recorded here, x86-64) written as a
//! big-endian file, its container numbers, page headers, event headers and record fields in
//! big-endian order. Debian's `trace-cmd report` reads it; vmscale must read the same
//! events from it, in place and extracted, as from the little-endian original.

#[path = "support/big_endian.rs"]
mod big_endian;
#[path = "support/dat_writer.rs"]
mod dat_writer;
#[path = "support/report.rs"]
mod report;
#[path = "support/trace_cmd.rs"]
mod trace_cmd;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use big_endian::{as_stored_big_endian, big_endian_writer};
use dat_writer::Codec;
use report::{compare, decode_all, fields_of, parse_report, symbol_addresses, Decoded};
use trace_cmd::report_raw;
use vmscale_trace::dat::write::{write_dat, DatWriteOptions};
use vmscale_trace::dat::{DatFile, Endian};
use vmscale_trace::Decoder;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmscale-be-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn decode(decoder: &Decoder) -> Vec<Decoded> {
    let (events, summary) = decode_all(decoder, "");
    assert_eq!(summary.unknown_events(), 0);
    events
}

fn same(a: &[Decoded], b: &[Decoded], label: &str) {
    assert_eq!(a.len(), b.len(), "{label}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.ts, x.cpu, x.pid, &x.name, format!("{:?}", x.fields)),
            (y.ts, y.cpu, y.pid, &y.name, format!("{:?}", y.fields)),
            "{label}"
        );
    }
}

#[test]
fn a_big_endian_file_reads_as_trace_cmd_reads_it() {
    let dir = scratch("contention");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contention");
    let little = dir.join("little.dat");
    write_dat(&fixture, &little, &DatWriteOptions::default()).unwrap();
    let original = Arc::new(DatFile::open(&little).unwrap());
    let expected = decode(&Decoder::from_dat(Arc::clone(&original), None).unwrap());
    assert!(expected.len() > 100);

    for (label, version, codec) in [("v6", 6, None), ("v7-zstd", 7, Some(Codec::Zstd))] {
        let mut writer = big_endian_writer(&original);
        writer.version = version;
        writer.codec = codec;
        let path = dir.join(format!("big-{label}.dat"));
        std::fs::write(&path, writer.to_bytes()).unwrap();
        let dat = Arc::new(DatFile::open(&path).unwrap());
        assert_eq!(dat.endian, Endian::Big, "{label}");

        // In place and extracted, the same events as the little-endian original.
        let in_place = decode(&Decoder::from_dat(Arc::clone(&dat), None).unwrap());
        same(&in_place, &expected, label);
        let extracted = dir.join(format!("big-{label}-trace"));
        dat.extract(None, &extracted).unwrap();
        same(
            &decode(&Decoder::open(&extracted).unwrap()),
            &expected,
            label,
        );

        // trace-cmd reads the big-endian file as vmscale does. It prints arrays as the
        // bytes stored in the file, so numeric arrays are compared in the file's order.
        let reported = parse_report(&report_raw(&path), "", &[], &fields_of(&dat));
        let stored = as_stored_big_endian(&in_place, &dat);
        compare(
            &stored,
            &reported,
            &symbol_addresses(&dat.metadata.kallsyms),
        )
        .assert_agrees(label);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What the conversion costs: the fixture's pages repeated to about 50 MB, decoded in place
/// from the little-endian and the big-endian v6 file. Ignored by default; measure with
/// `cargo test -p vmscale-trace --release --test dat_big_endian -- --ignored --nocapture`.
#[test]
#[ignore]
fn big_endian_decode_throughput() {
    let dir = scratch("throughput");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contention");
    let little = dir.join("little.dat");
    write_dat(&fixture, &little, &DatWriteOptions::default()).unwrap();
    let original = DatFile::open(&little).unwrap();
    let mut little_writer = dat_writer::DatWriter::from_dat(&original);
    let mut big_writer = big_endian_writer(&original);
    for writer in [&mut little_writer, &mut big_writer] {
        writer.version = 6;
        for pages in &mut writer.cpus {
            *pages = pages.repeat(1000);
        }
    }
    for (label, writer) in [("little-endian", little_writer), ("big-endian", big_writer)] {
        let dat = Arc::new(DatFile::from_bytes(writer.to_bytes()).unwrap());
        let bytes: u64 = dat
            .buffers
            .iter()
            .flat_map(|b| &b.cpus)
            .map(|c| c.size)
            .sum();
        let decoder = Decoder::from_dat(dat, None).unwrap();
        let start = std::time::Instant::now();
        let summary = decoder.for_each(|_| {}).unwrap();
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "{label}: {} events, {:.1} MB of pages in {seconds:.3} s: {:.1} M events/s, {:.0} MB/s",
            summary.events(),
            bytes as f64 / 1e6,
            summary.events() as f64 / seconds / 1e6,
            bytes as f64 / seconds / 1e6
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
