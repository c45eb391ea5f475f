//! Ctrl-C and SIGTERM become a flag that scenarios poll between samples, so VMs are torn
//! down by their destructors instead of by process death half-way through a sample.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub fn install() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registration fails only for forbidden signals, which these are not; without it a
        // Ctrl-C still ends the process and the kernel closes every VM fd.
        let _ = signal_hook::flag::register(signal, Arc::clone(&flag));
    }
    flag
}
