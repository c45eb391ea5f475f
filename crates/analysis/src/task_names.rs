//! Task names as the trace shows them over time.

use std::collections::HashMap;
use std::hash::BuildHasher;

/// Remembers `pid`'s name; the latest one wins. A new thread starts with its parent's name
/// and renames itself, and exec renames the process: the name a report shows is the one
/// the task ended with, the same in every section.
pub(crate) fn remember<S: BuildHasher>(comms: &mut HashMap<i32, String, S>, pid: i32, comm: &[u8]) {
    match comms.get_mut(&pid) {
        Some(known) if known.as_bytes() == comm => {}
        Some(known) => *known = String::from_utf8_lossy(comm).into_owned(),
        None => {
            comms.insert(pid, String::from_utf8_lossy(comm).into_owned());
        }
    }
}

/// A thread name with its numbers as "N" ("vcpu3" -> "vcpuN", "CPU 0/KVM" -> "CPU N/KVM"):
/// the kind of thread, for names that number their threads; None for names without a
/// number, whose threads are not told apart by it.
pub(crate) fn kind_of(comm: &str) -> Option<String> {
    let mut out = String::with_capacity(comm.len());
    let mut numbered = false;
    let mut in_number = false;
    for c in comm.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
                numbered = true;
            }
            in_number = true;
        } else {
            out.push(c);
            in_number = false;
        }
    }
    numbered.then_some(out)
}

/// What tasks are grouped by: a numbered name's kind ("vcpuN"), else the name itself
/// (the threads of a pool that names them all alike).
pub(crate) fn group_of(comm: &str) -> String {
    kind_of(comm).unwrap_or_else(|| comm.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_kind_is_its_name_with_numbers_as_n() {
        assert_eq!(super::kind_of("vcpu12").as_deref(), Some("vcpuN"));
        assert_eq!(super::kind_of("CPU 3/KVM").as_deref(), Some("CPU N/KVM"));
        assert_eq!(
            super::kind_of("kworker/1:0").as_deref(),
            Some("kworker/N:N")
        );
        assert_eq!(super::kind_of("vmscale"), None);
    }

    #[test]
    fn the_latest_name_wins() {
        let mut comms = std::collections::HashMap::new();
        super::remember(&mut comms, 7, b"vmscale");
        super::remember(&mut comms, 7, b"repro-writer");
        assert_eq!(comms[&7], "repro-writer");
    }
}
