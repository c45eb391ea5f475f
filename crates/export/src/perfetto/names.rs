//! Names for kernel addresses: locks and IPI call sites.

use std::collections::HashMap;

use vmscale_run::RunRecord;
use vmscale_trace::decode::views::contention_flags;
use vmscale_trace::Kallsyms;

/// A static lock is a data symbol or a field of one; past this distance the nearest
/// symbol below an address says nothing about it.
const MAX_LOCK_OFFSET: u64 = 4096;

/// Addresses to names, each formatted once.
pub struct Names {
    kallsyms: Kallsyms,
    /// The analysis' names for contended locks (from the run record), which cover the
    /// heap-allocated locks kallsyms cannot name.
    locks: HashMap<u64, String>,
    text: HashMap<u64, String>,
}

impl Names {
    pub fn new(kallsyms: Kallsyms, record: Option<&RunRecord>) -> Names {
        let locks = record
            .and_then(|r| r.trace.as_ref())
            .map(|t| {
                t.contention
                    .iter()
                    .filter(|lock| !lock.name.is_empty())
                    .map(|lock| (lock.lock_addr, lock.name.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Names {
            kallsyms,
            locks,
            text: HashMap::new(),
        }
    }

    /// The lock's name from the record or kallsyms, else its address.
    pub fn lock(&self, address: u64) -> String {
        if let Some(name) = self.locks.get(&address) {
            return name.clone();
        }
        match self.kallsyms.data_symbol(address) {
            Some(symbol) if symbol.offset < MAX_LOCK_OFFSET => symbol.to_string(),
            _ => format!("{address:#x}"),
        }
    }

    /// A code address as `function+0xoff`, else in hex; 0 (no callback) as "-".
    pub fn code(&mut self, address: u64) -> &str {
        let kallsyms = &self.kallsyms;
        self.text.entry(address).or_insert_with(|| {
            if address == 0 {
                return "-".to_string();
            }
            kallsyms
                .symbolize(address)
                .map_or_else(|| format!("{address:#x}"), |s| s.to_string())
        })
    }

    /// The function containing a code address, without the offset.
    pub fn function(&mut self, address: u64) -> String {
        let full = self.code(address);
        full.split('+').next().unwrap_or(full).to_string()
    }
}

/// `lock:contention_begin` flags in words ("spin|mutex"); "0" when none is set.
pub fn lock_kind(flags: u32) -> String {
    const NAMES: [(u32, &str); 6] = [
        (contention_flags::SPIN, "spin"),
        (contention_flags::READ, "read"),
        (contention_flags::WRITE, "write"),
        (contention_flags::RT, "rt"),
        (contention_flags::PERCPU, "percpu"),
        (contention_flags::MUTEX, "mutex"),
    ];
    let words: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    if words.is_empty() {
        "0".to_string()
    } else {
        words.join("|")
    }
}
