//! What the three QEMU scenarios share: which QEMU, how they are traced, and the notes that
//! say which QEMU a series measured.

use std::path::{Path, PathBuf};

use vmscale_vmm::Qemu;

use crate::{Error, Knob, Syscalls, TraceNeeds};

/// The ioctl system call (x86-64): kept from every task, since the threads QEMU creates
/// mid-run (a migration thread) cannot be named before they exist.
const SYS_IOCTL: i64 = 16;

/// The tracing every QEMU scenario needs: the measuring thread's system calls (the QMP
/// round trips) and QEMU's (named once QEMU runs), every ioctl (QEMU's later threads' KVM
/// calls among them; the analysis keeps QEMU's own), and thread creation, which ties
/// threads QEMU creates later to it.
pub fn trace_needs() -> TraceNeeds {
    TraceNeeds {
        syscalls: Syscalls::MeasuringThreadAnd(vec![SYS_IOCTL]),
        extra_events: vec!["sched:sched_process_fork"],
    }
}

/// What every QEMU scenario checks before anything starts: its knobs, then the QEMU binary
/// (a missing QEMU is a usage error, exit 2). The record describes the host's KVM when
/// /dev/kvm opens.
pub(crate) fn prepare(
    validate: impl FnOnce() -> Result<(), Error>,
    qemu: Option<&Path>,
) -> Result<crate::Prepared<PathBuf>, Error> {
    validate()?;
    let binary = binary(qemu)?;
    Ok(crate::Prepared {
        host: binary,
        kvm: vmscale_kvm::KvmSystem::open().ok().map(|s| s.facts()),
    })
}

/// The tour leaves the QEMU scenarios out when no QEMU is installed, and says how to get one.
pub(crate) fn tour_requirement() -> Result<(), String> {
    if installed() {
        Ok(())
    } else {
        Err(format!(
            "no {} on PATH, so the qemu scenarios are left out (apt-get install qemu-system-x86)",
            vmscale_vmm::QEMU_BINARY
        ))
    }
}

/// `--qemu PATH`, the same in every QEMU scenario.
pub fn qemu_knob() -> Knob {
    Knob {
        flag: "--qemu",
        range: None,
    }
}

/// The QEMU binary a run uses, or a usage error saying how to get one.
pub fn binary(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    Ok(vmscale_vmm::find_qemu(explicit)?)
}

/// Whether a QEMU can be found without `--qemu` (for `tour`).
pub fn installed() -> bool {
    vmscale_vmm::find_qemu(None).is_ok()
}

/// Notes of a series driven through `qemu`: its command line and version, so two runs
/// with different QEMUs are told apart.
pub(crate) fn notes(qemu: &mut Qemu) -> Result<Vec<String>, Error> {
    let version = qemu.execute("query-version", None)?.value;
    let part = |name: &str| version["qemu"][name].as_u64().unwrap_or(0);
    let package = version["package"].as_str().unwrap_or("").trim();
    Ok(vec![
        format!(
            "QEMU {}.{}.{}{}",
            part("major"),
            part("minor"),
            part("micro"),
            if package.is_empty() {
                String::new()
            } else {
                format!(" ({package})")
            }
        ),
        format!("QEMU command line: {}", qemu.command_line()),
    ])
}

/// Refuses to measure a QEMU whose vCPUs are not running: every QEMU scenario claims they
/// do.
pub(crate) fn expect_running(qemu: &mut Qemu) -> Result<(), Error> {
    let status = qemu.execute("query-status", None)?.value;
    if status["status"] != "running" {
        return Err(qemu
            .error(format!(
                "QEMU's vCPUs are not running (status {})",
                status["status"]
            ))
            .into());
    }
    Ok(())
}
