//! The signals that ask vmscale to stop: SIGINT (Ctrl-C), SIGTERM, and SIGHUP (a closed
//! terminal or a dropped ssh session), all three alike, as perf treats them.
//!
//! Two ways to stop, chosen by the command:
//! - cooperatively ([`cooperate`]: run, tour, record): the signal becomes a flag that
//!   scenarios poll between samples and every wait in setup polls too, so VMs are torn down
//!   by their destructors instead of by process death half-way through a sample;
//! - at once (every other command, the default after [`install`]): such a command has
//!   nothing to tear down but its temporary files, so the signal thread removes everything
//!   registered with [`vmscale_run::cleanup`] and exits with 130 and one line.
//!
//! Which signal arrived is kept too: `record` passes it on to the command it traces.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The last signal received (0: none yet).
fn last() -> &'static Arc<AtomicUsize> {
    static LAST: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    LAST.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}
/// Whether the command stops cooperatively (polls the flag) rather than at once.
static COOPERATIVE: AtomicBool = AtomicBool::new(false);

fn flag() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Starts watching for the signals, in the stop-at-once mode. Called once, first thing.
pub fn install() {
    // The flag is set in the handler itself, so a child that the same Ctrl-C ended is seen
    // as part of the interruption, not as a failure of its own.
    for signal in SIGNALS {
        // Registration fails only for forbidden signals, which these are not.
        let _ = signal_hook::flag::register(signal, Arc::clone(flag()));
        let _ = signal_hook::flag::register_usize(signal, Arc::clone(last()), signal as usize);
    }
    let Ok(mut signals) = signal_hook::iterator::Signals::new(SIGNALS) else {
        // Without it the default action ends the process, and the kernel still closes
        // every VM fd; a later run removes what is left.
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if !COOPERATIVE.load(Ordering::SeqCst) {
                    exit_now(signal);
                }
            }
        });
    // Without the thread (no thread could start), a non-cooperative command is not ended
    // by these signals until it finishes; there is nothing else to do this early.
    let _ = spawned;
}

/// Removes every registered temporary and ends the process with 130.
fn exit_now(signal: i32) -> ! {
    let removed = vmscale_run::cleanup::remove_all_for_exit();
    let what = match removed {
        0 => String::new(),
        _ => "; its unfinished output was removed".to_string(),
    };
    crate::console::note!("vmscale: error: interrupted by {}{what}", name(signal));
    std::process::exit(crate::failure::EXIT_INTERRUPTED)
}

/// Switches to the cooperative mode and returns the flag a signal sets: from now on the
/// command stops itself, and cleans up as it does on any error.
pub fn cooperate() -> Arc<AtomicBool> {
    COOPERATIVE.store(true, Ordering::SeqCst);
    let flag = Arc::clone(flag());
    // A signal that came before the switch has ended the process already.
    flag
}

/// The signal that set the flag, if one did.
pub fn received() -> Option<i32> {
    match last().load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal as i32),
    }
}

/// `SIGINT`, `SIGTERM`, `SIGHUP`: how a user names the signal.
pub fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}
