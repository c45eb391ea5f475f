//! Prints what the memslot driver's timed loop costs with nothing behind it, next to a real
//! direct update on the same host. Run through bench/driver-overhead.

use vmscale_kvm::{GuestProgram, KvmSystem};
use vmscale_scenario::memslot::{self, MemslotKnobs, Strategy};
use vmscale_scenario::{Cancel, NoPhaseHook, NoProgress};
use vmscale_stats::Summary;

fn main() {
    const REPEAT: usize = 1_000_000;
    println!("driver overhead per sample ({REPEAT} samples, no VM behind the timed code):");
    for strategy in [Strategy::Direct, Strategy::PauseAll] {
        let s = Summary::from_samples(&memslot::driver_overhead(strategy, 1, REPEAT)).unwrap();
        println!(
            "  {:<10} mean {:>6.1} ns  p50 {:>4} ns  p99 {:>5} ns  max {:>7} ns",
            strategy.name(),
            s.mean_ns,
            s.p50_ns,
            s.p99_ns,
            s.max_ns
        );
    }
    let overhead =
        Summary::from_samples(&memslot::driver_overhead(Strategy::Direct, 1, REPEAT)).unwrap();

    let system = KvmSystem::open().unwrap_or_else(|e| {
        eprintln!("driver_overhead: {e}");
        std::process::exit(1)
    });
    let knobs = MemslotKnobs {
        vcpus: vec![1],
        repeat: 500,
        strategies: vec![Strategy::Direct],
        guest: GuestProgram::Halt,
        ..MemslotKnobs::default()
    };
    let points = memslot::run(
        &system,
        &knobs,
        &NoProgress,
        &Cancel::never(),
        &mut NoPhaseHook,
    )
    .unwrap();
    let real = points[0].series[0].summary.clone().unwrap();
    println!(
        "real direct update (1 halted vCPU, 500 samples): p50 {} ns; driver overhead is {:.3}% of it (p50 / p50)",
        real.p50_ns,
        overhead.p50_ns as f64 * 100.0 / real.p50_ns as f64
    );
}
