//! Samples and kernel events share one timeline: a userspace CLOCK_MONOTONIC reading taken
//! just before a trace_marker write must land within 10 us before the kernel's timestamp
//! of that marker. Needs root and tracefs; fails without.

use vmscale_trace::record::recorder::{RecordConfig, Recording};
use vmscale_trace::{Decoder, EventKind};

#[test]
fn markers_land_within_ten_microseconds_of_the_userspace_clock() {
    let mount = vmscale_trace::record::tracefs::mount_point()
        .unwrap_or_else(|e| panic!("needs tracefs as root: {e}"));
    let dir = std::env::temp_dir().join(format!("vmscale-align-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RecordConfig {
        events: vec!["sched:sched_switch".into()],
        stack_events: vec![],
        ..RecordConfig::default()
    };
    let mut rec = Recording::prepare(&mount, &dir, config).unwrap();
    rec.set_on(true).unwrap();
    const MARKERS: usize = 200;
    for _ in 0..MARKERS {
        rec.mark(&format!("align {}", vmscale_sys::monotonic_ns()))
            .unwrap();
    }
    rec.finish().unwrap();

    let mut deltas = Vec::new();
    Decoder::open(&dir)
        .unwrap()
        .for_each(|event| {
            if let EventKind::Print(print) = event.kind() {
                let text = print.text();
                if let Some(sent) = text
                    .strip_prefix("align ")
                    .and_then(|t| t.trim().parse::<u64>().ok())
                {
                    deltas.push(event.ts() as i64 - sent as i64);
                }
            }
        })
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(deltas.len(), MARKERS, "markers missing from the trace");
    // Same clock: the kernel stamps the marker after userspace read the clock, never before.
    assert!(
        deltas.iter().all(|&d| d >= 0),
        "a marker predates its own clock reading: {deltas:?}"
    );
    deltas.sort_unstable();
    let median = deltas[MARKERS / 2];
    assert!(
        median < 10_000,
        "median offset {median} ns: timelines not aligned within 10 us"
    );
    eprintln!(
        "marker offset: min {} ns, median {median} ns, max {} ns",
        deltas[0],
        deltas[MARKERS - 1]
    );
}
