//! `vmscale run teardown` (case 1) and the hidden holder process it runs.

use vmscale_kvm::KvmSystem;
use vmscale_scenario::teardown::{self, Mode, Teardown, TeardownKnobs};

use crate::args::{TeardownArgs, TeardownHolderArgs};
use crate::failure::Failure;

pub fn command(args: &TeardownArgs) -> Result<(), Failure> {
    let knobs = TeardownKnobs {
        vms: args.vms.clone(),
        vcpus: args.vcpus,
        mem_mib: args.mem_mib,
        touch: !args.untouched,
        modes: Mode::parse_list(&args.mode)?,
        repeat: args.repeat,
        vfio: args.vfio.clone(),
    };
    crate::commands::run::command(Teardown, knobs, &args.output, &args.trace)
}

/// The hidden `teardown-holder` command: holds VMs for the teardown scenario.
pub fn holder(args: &TeardownHolderArgs) -> Result<(), Failure> {
    // A terminal's Ctrl-C reaches the whole process group. The parent decides what an
    // interruption means and ends its holders itself (SIGKILL, or closing their stdin), so
    // a holder dying first would only turn an interruption into a holder failure.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: SIG_IGN installs no handler code; it only changes the disposition.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    if !args.vfio.is_empty() {
        teardown::hold_devices_and_release(&args.vfio, &args.release)?;
        return Ok(());
    }
    let system = KvmSystem::open()?;
    teardown::hold_and_release(
        &system,
        args.vms,
        args.vcpus,
        args.mem_mib,
        !args.untouched,
        &args.release,
    )?;
    Ok(())
}
