//! How the passes that split a task's time by cause (the breakdown of timed samples, a
//! recorded command's subject) name each cause: the lock, the function slept in, the
//! function other CPUs were asked to run. One copy, so both say the same thing.

use foldhash::HashMap;

use crate::holders::sleep_function;
use crate::naming;
use crate::stacks::{StackId, StackTable};
use crate::symbols::Symbols;

const NO_STACK: &str = "(no stack)";

/// The lock as a cause: its contention-table name, or a name from the flags its waits
/// gave. Per-CPU and on-stack locks carry their address to tell them apart in the table;
/// as a cause they are one, so the address is dropped.
pub(crate) fn lock_site(
    lock: u64,
    names: &HashMap<u64, &str>,
    flags: &HashMap<u64, u32>,
) -> String {
    let name = names.get(&lock).map_or_else(
        || {
            let flags = flags.get(&lock).copied().unwrap_or(0);
            naming::stack_name(naming::kind(flags), naming::mode(flags), None)
        },
        |n| n.to_string(),
    );
    match name.rsplit_once(" @0x") {
        Some((site, _)) => site.to_string(),
        None => name,
    }
}

/// The kernel function a sleeping stack slept in, or "(no stack)".
pub(crate) fn sleep_site(
    stacks: &StackTable,
    stack: Option<StackId>,
    symbols: &dyn Symbols,
) -> String {
    let frames: Vec<String> = stack
        .map(|s| stacks.frames(s).iter().map(|&a| symbols.frame(a)).collect())
        .unwrap_or_default();
    sleep_function(&frames).unwrap_or_else(|| NO_STACK.into())
}

/// The function at `address`, without its offset.
pub(crate) fn function(symbols: &dyn Symbols, address: u64) -> String {
    let frame = symbols.frame(address);
    frame.split(['+', ' ']).next().unwrap_or(&frame).to_string()
}

/// Functions run on other CPUs through cross-CPU calls that the sender queues and never
/// waits for: a remote wakeup (`ttwu_queue_wakelist`) hands the woken task to its CPU's
/// queue. The kernel also runs a whole batch of them under the first one's csd, so the
/// others never get a csd_function_exit of their own: counted as waits, they would never
/// end. `nohz_csd_func` is the idle-load-balance kick (`kick_ilb`), sent with
/// `smp_call_function_single_async`: nobody waits for it either.
pub const ASYNC_CROSS_CALLS: [&str; 2] = ["sched_ttwu_pending", "nohz_csd_func"];

/// The addresses of [`ASYNC_CROSS_CALLS`] in `symbols` (none without kallsyms).
pub fn async_cross_calls(symbols: &vmscale_trace::Kallsyms) -> Vec<u64> {
    ASYNC_CROSS_CALLS
        .iter()
        .filter_map(|name| symbols.address_of(name))
        .collect()
}
