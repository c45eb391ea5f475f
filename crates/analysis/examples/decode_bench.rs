//! Decode throughput on one trace-cmd .dat: raw decode (every event merged in time order),
//! decode with typed views, and the full analysis. Run through bench/decode, which also
//! times `trace-cmd report` on the same file.

use std::time::Instant;

use vmscale_trace::{Decoder, EventKind};

fn main() {
    let Some(dat) = std::env::args().nth(1) else {
        eprintln!("usage: decode_bench FILE.dat");
        std::process::exit(2);
    };
    let dir = std::env::temp_dir().join(format!("vmscale-decode-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let start = Instant::now();
    if let Err(e) = vmscale_trace::dat::extract_to_trace_dir(std::path::Path::new(&dat), &dir) {
        eprintln!("decode_bench: {e}");
        std::process::exit(1);
    }
    let extract = start.elapsed();
    let decoder = Decoder::open(&dir).expect("extracted trace opens");

    // Best of three for each, so a moment of background load does not decide the number.
    let best = |f: &dyn Fn() -> u64| -> (u64, f64) {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                let n = f();
                (n, t.elapsed().as_secs_f64())
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
    };
    let (events, raw) = best(&|| decoder.for_each(|_| {}).unwrap().events());
    let (_, typed) = best(&|| {
        let mut typed = 0u64;
        decoder
            .for_each(|e| {
                if !matches!(e.kind(), EventKind::Other) {
                    typed += 1;
                }
            })
            .unwrap();
        typed
    });
    let symbols = decoder.kallsyms().unwrap_or_default();
    let (_, analysis) = best(&|| {
        vmscale_analysis::analyse_with(&decoder, &symbols)
            .unwrap()
            .decoded_events
    });
    let _ = std::fs::remove_dir_all(&dir);

    println!("events: {events}");
    println!(
        "extract .dat to a trace directory: {:.3} s",
        extract.as_secs_f64()
    );
    println!(
        "vmscale raw decode (merged, time-ordered): {:.3} s, {:.1} M events/s",
        raw,
        events as f64 / raw / 1e6
    );
    println!(
        "vmscale decode + typed views:              {:.3} s, {:.1} M events/s",
        typed,
        events as f64 / typed / 1e6
    );
    println!(
        "vmscale full analysis (contention + IPIs): {:.3} s, {:.1} M events/s",
        analysis,
        events as f64 / analysis / 1e6
    );
    println!("raw_seconds {raw:.6}");
}
