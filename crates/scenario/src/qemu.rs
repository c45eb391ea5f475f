//! What the three QEMU scenarios share: which QEMU, how a sample of QMP commands is timed,
//! and the notes that say which QEMU a series measured.

use std::path::{Path, PathBuf};

use vmscale_vmm::Qemu;

use crate::{Error, Knob};

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
