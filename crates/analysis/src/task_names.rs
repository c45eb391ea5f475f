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

#[cfg(test)]
mod tests {
    #[test]
    fn the_latest_name_wins() {
        let mut comms = std::collections::HashMap::new();
        super::remember(&mut comms, 7, b"vmscale");
        super::remember(&mut comms, 7, b"repro-writer");
        assert_eq!(comms[&7], "repro-writer");
    }
}
