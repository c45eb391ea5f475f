//! What a sweep of running vCPUs means on this host, said as the run's warnings: vCPUs
//! beyond the host's CPUs, and spinning vCPUs that never ran while measured.

use vmscale_kvm::GuestProgram;
use vmscale_run::Point;

/// vCPUs beyond the host's CPUs change what every number means; say so once per run.
pub fn overcommit_warnings(points: &[Point], host_cpus: usize, guest: GuestProgram) -> Vec<String> {
    let over: Vec<String> = points
        .iter()
        .filter(|p| p.n as usize > host_cpus)
        .map(|p| p.n.to_string())
        .collect();
    if over.is_empty() {
        return Vec::new();
    }
    let consequence = match guest {
        GuestProgram::Spin => {
            "spinning vCPUs compete for the CPUs with the measuring thread, so latencies include waiting for a CPU (try --fifo, or --guest halt)"
        }
        GuestProgram::Halt => {
            "halted vCPUs mostly sleep, but every update wakes all of them at once"
        }
    };
    vec![format!(
        "overcommit: {} vCPUs on {host_cpus} host CPUs (points {}); {consequence}",
        over.last().expect("not empty"),
        over.join(", ")
    )]
}

/// A spinning vCPU that made no progress while measured did not run: its point is suspect.
pub fn stalled_vcpu_warnings(points: &[Point], guest: GuestProgram) -> Vec<String> {
    if guest != GuestProgram::Spin {
        return Vec::new();
    }
    points
        .iter()
        .flat_map(|p| p.series.iter().map(move |s| (p.n, s)))
        .filter_map(|(n, s)| {
            let stuck = s.vcpu_progress.iter().filter(|&&v| v == 0).count();
            (stuck > 0).then(|| {
                format!(
                    "{stuck} of {n} spinning vCPUs made no progress during {}: they never ran while it was measured",
                    s.name
                )
            })
        })
        .collect()
}
