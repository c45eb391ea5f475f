//! Decode throughput on one trace-cmd .dat, decoded in place (as `vmscale report FILE.dat`
//! decodes it): raw decode (every event merged in time order), decode with typed views,
//! and the full analysis, each on one thread and on every core, with the pages read (what
//! vmscale does) and mapped (the other [`PageAccess`], measured so that the choice stays
//! checked on each host). Run through bench/decode, which also times libtracecmd and
//! `trace-cmd report` on the same file.

use std::sync::Arc;
use std::time::Instant;

use vmscale_trace::dat::DatFile;
use vmscale_trace::{Decoder, EventKind, PageAccess};

/// Decodes every event and reads its typed view; returns how many have one.
fn typed_views(d: &Decoder) -> u64 {
    let mut typed = 0u64;
    d.for_each(|e| {
        if !matches!(e.kind(), EventKind::Other) {
            typed += 1;
        }
    })
    .unwrap();
    typed
}

fn main() {
    let Some(dat) = std::env::args().nth(1) else {
        eprintln!("usage: decode_bench FILE.dat");
        std::process::exit(2);
    };
    let opened = DatFile::open(std::path::Path::new(&dat))
        .map_err(|e| e.to_string())
        .and_then(|dat| Decoder::from_dat(Arc::new(dat), None).map_err(|e| e.to_string()));
    let decoder = match opened {
        Ok(decoder) => decoder,
        Err(e) => {
            eprintln!("decode_bench: {dat}: {e}");
            std::process::exit(1);
        }
    };
    let cores = decoder.threads();
    let open = |threads: usize, access: PageAccess| {
        Decoder::from_dat(Arc::new(DatFile::open(dat.as_ref()).unwrap()), None)
            .unwrap()
            .with_threads(threads)
            .with_page_access(access)
    };
    let one = open(1, PageAccess::Read);
    let one_mapped = open(1, PageAccess::Mapped);
    let all_mapped = open(cores, PageAccess::Mapped);
    let symbols = decoder.kallsyms().unwrap_or_default();

    // Best of five for each, so a moment of background load does not decide the number.
    let best = |f: &dyn Fn() -> u64| -> (u64, f64) {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                let n = f();
                (n, t.elapsed().as_secs_f64())
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
    };
    let raw = |d: &Decoder| best(&|| d.for_each(|_| {}).unwrap().events());
    let typed = |d: &Decoder| best(&|| typed_views(d));
    let analysis = |d: &Decoder| {
        best(&|| {
            vmscale_analysis::analyse_with(d, &symbols)
                .unwrap()
                .decoded_events
        })
    };
    // `decode_bench FILE.dat STEP THREADS` runs one step once, for a profiler.
    if let (Some(step), Some(threads)) = (std::env::args().nth(2), std::env::args().nth(3)) {
        let d = if threads == "1" { &one } else { &decoder };
        let t = Instant::now();
        let events = match step.as_str() {
            "raw" => d.for_each(|_| {}).unwrap().events(),
            "typed" => typed_views(d),
            "analysis" => {
                vmscale_analysis::analyse_with(d, &symbols)
                    .unwrap()
                    .decoded_events
            }
            "none" => 0,
            _ => panic!("step: raw, typed, analysis or none"),
        };
        let seconds = t.elapsed().as_secs_f64();
        println!("{step}, {threads} threads: {events} events, {seconds:.3} s");
        return;
    }
    let (events, raw_one) = raw(&one);
    let (_, raw_all) = raw(&decoder);
    let (_, typed_one) = typed(&one);
    let (_, typed_all) = typed(&decoder);
    let (analysed, analysis_one) = analysis(&one);
    let (_, analysis_all) = analysis(&decoder);
    assert_eq!(events, analysed);
    let (_, raw_one_mapped) = raw(&one_mapped);
    let (_, analysis_one_mapped) = analysis(&one_mapped);
    let (_, analysis_all_mapped) = analysis(&all_mapped);

    let line = |what: &str, seconds: f64| {
        println!(
            "{what:<52} {seconds:.3} s, {:6.1} M events/s",
            events as f64 / seconds / 1e6
        )
    };
    println!("events: {events}");
    line("vmscale raw decode, one thread:", raw_one);
    line(&format!("vmscale raw decode, {cores} cores:"), raw_all);
    line("vmscale decode + typed views, one thread:", typed_one);
    line(
        &format!("vmscale decode + typed views, {cores} cores:"),
        typed_all,
    );
    line("vmscale full analysis, one thread:", analysis_one);
    line(
        &format!("vmscale full analysis, {cores} cores:"),
        analysis_all,
    );
    println!(
        "full analysis speedup on {cores} cores: {:.2}x",
        analysis_one / analysis_all
    );
    line("pages mapped: raw decode, one thread:", raw_one_mapped);
    line(
        "pages mapped: full analysis, one thread:",
        analysis_one_mapped,
    );
    line(
        &format!("pages mapped: full analysis, {cores} cores:"),
        analysis_all_mapped,
    );
    println!("raw_seconds {raw_one:.6}");
    println!("analysis_one_seconds {analysis_one:.6}");
    println!("analysis_all_seconds {analysis_all:.6}");
}
