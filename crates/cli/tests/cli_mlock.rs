//! `vmscale run mlock` on the real kernel. Alone in its test binary: whether an unmap needs
//! a TLB-shootdown IPI depends on the busy sibling really running on the other CPU, which
//! tests running beside it would take away.

mod common;

use common::*;

#[test]
fn mlock_map_with_a_busy_sibling_storms_and_a_pool_does_not() {
    let run = json_run(
        &[
            "run", "mlock", "--calls", "4000", "--busy", "1", "--mode", "map,pool",
        ],
        "mlock",
    );
    let phases = run["trace"]["ipis"].as_array().unwrap();
    let ipis = |label: &str| {
        phases
            .iter()
            .find(|p| p["label"] == label)
            .unwrap_or_else(|| panic!("no phase {label} in {phases:?}"))["ipis"]
            .as_u64()
            .unwrap() as f64
    };
    let map = ipis("mlock mode=map busy=1") / 4000.0;
    let pool = ipis("mlock mode=pool busy=1") / 4000.0;
    // Every unmap must shoot down the sibling's TLB: about one IPI per call.
    assert!(map >= 0.5, "map sent only {map:.3} IPIs per call");
    assert!(pool < 0.01, "the pool sent {pool:.3} IPIs per call");
    let notes = run["points"][0]["series"][0]["notes"].to_string();
    assert!(
        notes.contains("per call") && notes.contains("formula"),
        "{notes}"
    );
}
