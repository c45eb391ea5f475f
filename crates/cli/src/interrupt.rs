//! Ctrl-C and SIGTERM become a flag that scenarios poll between samples, so VMs are torn
//! down by their destructors instead of by process death half-way through a sample. Which
//! signal arrived is kept too: `record` passes it on to the command it traces.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

const SIGNALS: [i32; 2] = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];

/// The last signal received (0: none yet).
fn last() -> &'static Arc<AtomicUsize> {
    static LAST: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    LAST.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

pub fn install() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in SIGNALS {
        // Registration fails only for forbidden signals, which these are not; without it a
        // Ctrl-C still ends the process and the kernel closes every VM fd.
        let _ = signal_hook::flag::register(signal, Arc::clone(&flag));
        let _ = signal_hook::flag::register_usize(signal, Arc::clone(last()), signal as usize);
    }
    flag
}

/// The signal that set the flag, if one did.
pub fn received() -> Option<i32> {
    match last().load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal as i32),
    }
}

/// `SIGINT`, `SIGTERM`: how a user names the signal.
pub fn name(signal: i32) -> &'static str {
    match signal {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
