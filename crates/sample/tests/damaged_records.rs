//! The record decoder on damaged input: bit flips, cut files, random bytes and absurd
//! sizes are counted as damage and never panic, through the in-memory decoder and through
//! a whole samples directory (reader, merge, symbolizer, profile).

use std::path::PathBuf;

use vmscale_sample::format::{encode, Mmap, SampleId, Task};
use vmscale_sample::read::records_of;
use vmscale_sample::sampler::{SampleMeta, FORMAT_VERSION};
use vmscale_sample::{Filter, Profile, Samples, Symbolizer};

fn valid_stream() -> Vec<u8> {
    let id = |time| SampleId {
        pid: 10,
        tid: 11,
        time,
        cpu: 0,
    };
    let mut out = Vec::new();
    out.extend(encode::comm(10, 11, "qemu-system-x86", true, id(1)));
    out.extend(encode::mmap2(&Mmap {
        pid: 10,
        tid: 11,
        addr: 0x5555_0000_0000,
        len: 0x10_0000,
        pgoff: 0,
        maj: 8,
        min: 1,
        ino: 1,
        prot: 5,
        flags: 2,
        filename: "/usr/bin/true",
        id: id(2),
    }));
    out.extend(encode::task(
        true,
        &Task {
            pid: 12,
            ppid: 10,
            tid: 12,
            ptid: 11,
            time: 3,
            id: id(3),
        },
    ));
    for t in 0..20u64 {
        out.extend(encode::sample(
            10,
            11,
            10 + t,
            0,
            1_003_009,
            &[0xffff_ffff_8100_0000 + t, 0xffff_ffff_8100_1000],
            &[0x5555_0000_1000 + t, 0x5555_0000_2000],
        ));
    }
    out.extend(encode::lost(3, id(40)));
    out
}

/// xorshift: deterministic, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn damage(rng: &mut Rng, bytes: &mut Vec<u8>) {
    match rng.below(5) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            let cut = rng.below(bytes.len());
            bytes.truncate(cut);
        }
        2 => {
            let i = rng.below(bytes.len());
            let n = rng.below(64).min(bytes.len() - i);
            for b in &mut bytes[i..i + n] {
                *b = rng.next() as u8;
            }
        }
        3 => {
            // A header's size field (bytes 6..8 of some 8-aligned record start).
            let i = rng.below(bytes.len() / 8) * 8 + 6;
            if i + 2 <= bytes.len() {
                let size = [0u16, 1, 7, 8, 9, 0xffff][rng.below(6)];
                bytes[i..i + 2].copy_from_slice(&size.to_ne_bytes());
            }
        }
        _ => {
            // A sample's nr field set to something absurd.
            let i = rng.below(bytes.len() / 8) * 8;
            if i + 8 <= bytes.len() {
                bytes[i..i + 8].copy_from_slice(&(rng.next() | 1 << 60).to_ne_bytes());
            }
        }
    }
}

#[test]
fn the_intact_stream_decodes_whole() {
    let summary = records_of(&valid_stream(), |_| {});
    assert_eq!((summary.samples, summary.lost, summary.damaged), (20, 3, 0));
}

#[test]
fn damaged_streams_never_panic_and_count_their_damage() {
    let valid = valid_stream();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut damaged_runs = 0;
    for _ in 0..20_000 {
        let mut bytes = valid.clone();
        for _ in 0..1 + rng.below(3) {
            if !bytes.is_empty() {
                damage(&mut rng, &mut bytes);
            }
        }
        let summary = records_of(&bytes, |r| {
            let _ = r.time();
        });
        assert!(summary.samples <= 20 + 2, "{summary:?}");
        if summary.damaged > 0 {
            damaged_runs += 1;
        }
    }
    assert!(
        damaged_runs > 1000,
        "damage was seen in only {damaged_runs} runs"
    );
    // Pure noise.
    for len in [1usize, 7, 8, 9, 100, 4096] {
        let noise: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        records_of(&noise, |_| {});
    }
}

fn samples_dir(name: &str, cpu0: &[u8], procs: &[u8]) -> PathBuf {
    let trace = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&trace);
    let dir = trace.join("samples");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cpu0"), cpu0).unwrap();
    std::fs::write(dir.join("procs"), procs).unwrap();
    let meta = SampleMeta {
        format: FORMAT_VERSION,
        event: "cpu-clock".into(),
        hz: 997,
        period_ns: 1_003_009,
        clock: "mono".into(),
        sample_type: vmscale_sample::format::SAMPLE_TYPE,
        byte_order: if cfg!(target_endian = "little") {
            "little"
        } else {
            "big"
        }
        .into(),
        max_stack: 127,
        data_pages: 128,
        cpus: vec![0, 1],
        per_cpu: Default::default(),
        procs_records: 0,
        windows: vec![],
    };
    std::fs::write(dir.join("meta.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
    trace
}

#[test]
fn a_damaged_samples_directory_reads_as_far_as_it_goes() {
    let valid = valid_stream();
    let mut rng = Rng(42);
    for round in 0..300 {
        let mut cpu0 = valid.clone();
        let mut procs = valid.clone();
        damage(&mut rng, &mut cpu0);
        if round % 2 == 0 {
            damage(&mut rng, &mut procs);
        }
        // cpu1 is missing altogether: counted, not fatal.
        let trace = samples_dir("damaged-samples", &cpu0, &procs);
        let samples = Samples::open(&trace).unwrap();
        let summary = samples.for_each(|s| {
            let _ = (s.kernel.len(), s.user.len());
        });
        let summary = summary.unwrap();
        assert!(summary.damaged >= 1, "the missing cpu1 file is damage");
        let mut symbols = Symbolizer::load(&samples, &trace).unwrap();
        let _ = symbols.user(10, 15, 0x5555_0000_1000);
        let profile = Profile::on_cpu(&trace, &Filter::default()).unwrap();
        assert!(profile.samples <= 42);
    }
}
