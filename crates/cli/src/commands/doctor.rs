//! `vmscale doctor`: one line per precondition, with what to do when it fails.

use std::path::Path;

use vmscale_kvm::preflight::{fd_limits, FDS_BASE, FDS_PER_VCPU};
use vmscale_kvm::KvmSystem;
use vmscale_run::host::host_memory;
use vmscale_trace::record::tracefs::{tracing_dir, TracingDir};

use crate::console::outln;
use crate::failure::Failure;

const TRACEFS: &str = "/sys/kernel/tracing";

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Ok,
    /// Works, with a limitation worth knowing.
    Note,
    Fail,
}

struct Check {
    name: &'static str,
    verdict: Verdict,
    detail: String,
}

impl Check {
    fn new(name: &'static str, verdict: Verdict, detail: impl Into<String>) -> Check {
        Check {
            name,
            verdict,
            detail: detail.into(),
        }
    }
}

pub fn doctor(cleanup: bool, out: &Path) -> Result<(), Failure> {
    let checks = [
        check_root(),
        check_kvm(),
        check_tracefs(),
        check_kallsyms(),
        check_fd_limit(),
        check_host(),
    ];
    for c in &checks {
        let tag = match c.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Note => "note",
            Verdict::Fail => "FAIL",
        };
        outln!("{tag}  {:<10} {}", c.name, c.detail)?;
    }
    stale_instances(cleanup)?;
    unfinished_runs(cleanup, out)?;
    unfinished_outputs(cleanup, out)?;
    let failed = checks.iter().filter(|c| c.verdict == Verdict::Fail).count();
    if failed > 0 {
        return Err(Failure::runtime(format!(
            "{failed} check(s) failed; see the lines marked FAIL"
        )));
    }
    Ok(())
}

/// Lists the tracefs instances vmscale runs left behind (killed with SIGKILL, so their own
/// cleanup never ran) and the live runs tracing now; removes the leftovers only with
/// `--cleanup`. An unreadable `instances/` is an error, never "none".
fn stale_instances(cleanup: bool) -> Result<(), Failure> {
    use vmscale_trace::record::tracefs;
    if !tracefs_mounted() {
        return outln!("instances  tracefs is not mounted: no vmscale instance can exist");
    }
    let mount = Path::new(TRACEFS);
    let found = tracefs::vmscale_instances(mount).map_err(|e| Failure::runtime(e.to_string()))?;
    let live: Vec<String> = found
        .iter()
        .filter(|f| f.alive)
        .map(|f| format!("{} (pid {})", f.name, f.owner.pid()))
        .collect();
    if !live.is_empty() {
        outln!(
            "note  instances  vmscale runs tracing now: {}; a run started meanwhile shares the machine with them",
            live.join(", ")
        )?;
    }
    if cleanup {
        let removed =
            tracefs::remove_stale_instances(mount).map_err(|e| Failure::runtime(e.to_string()))?;
        return match removed.is_empty() {
            true => outln!("ok    cleanup    no stale vmscale tracefs instances"),
            false => outln!(
                "ok    cleanup    removed stale tracefs instances {}",
                removed.join(", ")
            ),
        };
    }
    let stale: Vec<&str> = found
        .iter()
        .filter(|f| !f.alive)
        .map(|f| f.name.as_str())
        .collect();
    if stale.is_empty() {
        outln!("ok    instances  no stale vmscale tracefs instances")
    } else {
        outln!(
            "note  instances  stale tracefs instances of killed runs: {} (remove them with `vmscale doctor --cleanup`)",
            stale.join(", ")
        )
    }
}

/// Run directories that killed runs left under their temporary names in `out`.
fn unfinished_runs(cleanup: bool, out: &Path) -> Result<(), Failure> {
    use vmscale_run::dir::{partial_owner, remove_stale_partials};
    let shown = out.display();
    if cleanup {
        let removed = remove_stale_partials(out)
            .map_err(|e| Failure::runtime(format!("cannot clean {shown}: {e}")))?;
        return match removed.is_empty() {
            true => outln!("ok    runs       no unfinished run directories in {shown}"),
            false => outln!(
                "ok    cleanup    removed unfinished run directories in {shown}: {}",
                removed.join(", ")
            ),
        };
    }
    let stale: Vec<String> = match std::fs::read_dir(out) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| partial_owner(name).is_some_and(|owner| !owner.is_alive()))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Failure::runtime(format!("cannot read {shown}: {e}"))),
    };
    if stale.is_empty() {
        outln!("ok    runs       no unfinished run directories in {shown}")
    } else {
        outln!(
            "note  runs       unfinished run directories of killed runs in {shown}: {} (remove them with `vmscale doctor --cleanup`)",
            stale.join(", ")
        )
    }
}

/// Temporary files of killed writers (an export, a comparison page, a run's own files)
/// where outputs land under `out`, and scratch directories of killed reports.
fn unfinished_outputs(cleanup: bool, out: &Path) -> Result<(), Failure> {
    use vmscale_run::output;
    let mut stale: Vec<std::path::PathBuf> = Vec::new();
    for dir in output::output_dirs(out) {
        stale.extend(output::stale_temporaries(&dir).unwrap_or_default());
    }
    stale.extend(output::stale_scratch_dirs().unwrap_or_default());
    if stale.is_empty() {
        return outln!("ok    outputs    no unfinished output files");
    }
    let names = || {
        stale
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !cleanup {
        return outln!(
            "note  outputs    unfinished output files of killed runs: {} (remove them with `vmscale doctor --cleanup`)",
            names()
        );
    }
    for path in &stale {
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        removed.map_err(|e| Failure::runtime(format!("cannot remove {}: {e}", path.display())))?;
    }
    outln!(
        "ok    cleanup    removed unfinished output files {}",
        names()
    )
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn check_root() -> Check {
    if is_root() {
        Check::new("root", Verdict::Ok, "running as root")
    } else {
        Check::new(
            "root",
            Verdict::Fail,
            "not root: tracing needs root (run with sudo); scenarios need /dev/kvm access",
        )
    }
}

fn check_kvm() -> Check {
    match KvmSystem::open() {
        Ok(system) => {
            let facts = system.facts();
            let tdp = match facts.tdp_mmu {
                Some(true) => ", TDP MMU",
                Some(false) => ", shadow paging (tdp_mmu off)",
                None => "",
            };
            let stats = if system.has_binary_stats() {
                "binary stats"
            } else {
                "no binary stats (KVM counters will be missing)"
            };
            Check::new(
                "/dev/kvm",
                Verdict::Ok,
                format!(
                    "API {}, KVM_CAP_MAX_VCPUS {}, backend {}{tdp}, {stats}",
                    facts.api_version, facts.max_vcpus, facts.backend
                ),
            )
        }
        Err(e) => Check::new("/dev/kvm", Verdict::Fail, e.to_string()),
    }
}

/// Whether tracefs is what the path shows (not whether /proc/mounts lists it: a
/// filesystem mounted over it hides it).
fn tracefs_mounted() -> bool {
    tracing_dir(Path::new(TRACEFS)) == TracingDir::Tracefs
}

fn check_tracefs() -> Check {
    let supported = std::fs::read_to_string("/proc/filesystems")
        .map(|f| f.lines().any(|l| l.trim_end().ends_with("tracefs")))
        .unwrap_or(false);
    if !supported {
        return Check::new(
            "tracefs",
            Verdict::Fail,
            "this kernel has no tracefs (CONFIG_TRACING off): scenarios run, but nothing can be traced",
        );
    }
    match tracing_dir(Path::new(TRACEFS)) {
        TracingDir::Tracefs => {}
        // Being root would not help: say what is there.
        TracingDir::Other(kind) => {
            return Check::new(
                "tracefs",
                Verdict::Fail,
                format!("{TRACEFS} is {kind}, not tracefs: something is mounted over it (unmount it, and vmscale mounts tracefs there)"),
            )
        }
        TracingDir::Unmounted | TracingDir::Unreachable(_) if is_root() => {
            return Check::new(
                "tracefs",
                Verdict::Ok,
                format!("supported, not mounted; vmscale mounts it at {TRACEFS} when it traces"),
            )
        }
        TracingDir::Unmounted | TracingDir::Unreachable(_) => {
            return Check::new(
                "tracefs",
                Verdict::Fail,
                format!("not mounted and only root can mount it: run as root or `mount -t tracefs nodev {TRACEFS}`"),
            )
        }
    }
    // An instance of our own is all vmscale ever writes to; prove one can be made (it is
    // removed again when the guard drops).
    match vmscale_trace::record::tracefs::Instance::create(Path::new(TRACEFS)) {
        Ok(_instance) => Check::new(
            "tracefs",
            Verdict::Ok,
            format!("mounted at {TRACEFS}; private instances can be created"),
        ),
        Err(e) => Check::new(
            "tracefs",
            Verdict::Fail,
            if is_root() {
                format!("mounted at {TRACEFS} but an instance cannot be created ({e})")
            } else {
                format!("mounted at {TRACEFS} but an instance cannot be created ({e}): run as root")
            },
        ),
    }
}

fn check_kallsyms() -> Check {
    let text = match std::fs::read_to_string("/proc/kallsyms") {
        Ok(t) => t,
        Err(e) => {
            return Check::new(
                "kallsyms",
                Verdict::Fail,
                format!("cannot read /proc/kallsyms ({e}): stacks will show addresses only"),
            )
        }
    };
    let mut total = 0usize;
    let mut nonzero = 0usize;
    let mut data = 0usize;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(address), Some(kind)) = (fields.next(), fields.next()) else {
            continue;
        };
        total += 1;
        if address.bytes().any(|b| b != b'0') {
            nonzero += 1;
        }
        if matches!(kind, "d" | "D" | "b" | "B") {
            data += 1;
        }
    }
    if nonzero == 0 {
        return Check::new(
            "kallsyms",
            Verdict::Fail,
            "addresses are hidden (kptr_restrict): run as root, or set /proc/sys/kernel/kptr_restrict to 0",
        );
    }
    if data < 1000 {
        return Check::new(
            "kallsyms",
            Verdict::Note,
            format!(
                "{total} symbols with real addresses, but only {data} data symbols (CONFIG_KALLSYMS_ALL off): static locks are named by the stack that waits on them, not by symbol"
            ),
        );
    }
    Check::new(
        "kallsyms",
        Verdict::Ok,
        format!("{total} symbols with real addresses, {data} data symbols (static locks named by symbol)"),
    )
}

fn check_fd_limit() -> Check {
    let (soft, hard) = fd_limits();
    let max_vcpus = hard.saturating_sub(FDS_BASE) / FDS_PER_VCPU;
    let detail = format!(
        "RLIMIT_NOFILE soft {soft}, hard {hard}: room for about {max_vcpus} vCPUs in one VM (vmscale raises soft to hard)"
    );
    if max_vcpus < 64 {
        Check::new(
            "fd limit",
            Verdict::Fail,
            format!("{detail}; raise it with `ulimit -n 4096`"),
        )
    } else {
        Check::new("fd limit", Verdict::Ok, detail)
    }
}

fn check_host() -> Check {
    let cpus = vmscale_run::host::online_cpus();
    let memory = host_memory()
        .map(|m| {
            format!(
                "{} MiB available of {} MiB",
                m.available_bytes >> 20,
                m.total_bytes >> 20
            )
        })
        .unwrap_or_else(|| "memory unknown".into());
    let verdict = if cpus < 4 { Verdict::Note } else { Verdict::Ok };
    Check::new(
        "host",
        verdict,
        format!("{cpus} online CPUs, {memory}; more running vCPUs than CPUs is overcommit and is flagged in results"),
    )
}
