//! What an aggregated recording leaves in its trace directory: the BPF maps as read at its
//! end, as plain data (`aggregate.json`, docs/trace-dir.md). Addresses stay raw; the
//! analysis names them with the directory's kallsyms, as it does a recorded trace's.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The file an aggregated recording writes in its trace directory.
pub const AGGREGATE_FILE: &str = "aggregate.json";

/// The layout of [`AggregateDump`] this vmscale writes.
pub const DUMP_VERSION: u32 = 1;

/// Activities of a lock's holders ([`HolderTime::activity`]).
pub mod activity {
    pub const RUNNING: u32 = 1;
    pub const RUNNABLE: u32 = 2;
    /// `detail`: the sleep's stack id, or `u64::MAX` (-1) without one.
    pub const ASLEEP: u32 = 3;
    /// `detail`: the other lock the holder waited on.
    pub const NESTED: u32 = 4;
    /// Released, the next holder not yet running with it (holder 0).
    pub const HANDOFF: u32 = 5;
    /// `detail`: one of [`super::unknown`].
    pub const UNKNOWN: u32 = 6;
    /// Holder 0: the time the lock's waiters spun on it, a mutex's owner running
    /// (`mutex_optimistic_spin` spins only while it is on a CPU). Not a split of the
    /// waiting behind holds like the others: the maps keep how long waiters spun, not when.
    pub const SPUN: u32 = 7;
}

/// Why waiting has no holder ([`activity::UNKNOWN`]'s detail).
pub mod unknown {
    pub const NO_RELEASER: u64 = 1;
    pub const NOT_PROVEN: u64 = 2;
    pub const BEFORE_FIRST_EVENT: u64 = 3;
    pub const TRIMMED: u64 = 4;
}

/// What a subject task's time went to ([`PartTime::kind`]).
pub mod part {
    pub const ON_CPU: u32 = 1;
    pub const RUNNABLE: u32 = 2;
    /// `detail`: the lock.
    pub const LOCK: u32 = 3;
    /// `detail`: the sleep's stack id, or `u64::MAX` (-1) without one.
    pub const ASLEEP: u32 = 4;
}

/// The maps of one aggregated recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateDump {
    pub version: u32,
    /// Contended waits per (lock, the waiter's ioctl, its stack, the flags of its last
    /// contention_begin).
    pub waits: Vec<WaitAggregate>,
    pub waiters: Vec<WaiterTime>,
    /// Kernel stacks by id, return addresses innermost first, as the BPF stack map holds
    /// them (the program's own tracing frames first).
    pub stacks: BTreeMap<u32, Vec<u64>>,
    /// Waiters' time behind each lock's holders, by what the holder did.
    pub holder_time: Vec<HolderTime>,
    pub holds: Vec<HoldCount>,
    pub held_asleep: Vec<HeldAsleep>,
    /// The subject's time by task and part.
    pub parts: Vec<PartTime>,
    /// Subject sleeps by who ended them (waker 0: an interrupt or no task).
    pub sleep_wakers: Vec<SleepWaker>,
    /// Per task, its sleeps that another subject task ended while exiting (joins).
    pub joined: BTreeMap<i32, u64>,
    /// Task names and thread groups, the latest seen.
    pub tasks: Vec<TaskName>,
    pub ipis: Vec<IpiCount>,
    /// The recording's subject: a command's or a process's tasks (`roots`, and what they
    /// create), every task, or none (a scenario's lock waits only).
    pub subject_roots: Vec<u32>,
    pub every_task: bool,
    /// What was not counted, by reason, and the events the programs saw, by kind.
    pub drops: BTreeMap<String, u64>,
    pub seen: BTreeMap<String, u64>,
    /// Runs of a program skipped by the kernel because another BPF program was running on
    /// that CPU (bpf_prog_info.recursion_misses), summed.
    pub recursion_misses: u64,
    /// Kernel memory the maps may use at most (preallocated hash maps, stack map), and the
    /// largest the task storage reached is not included: it is per task, freed with it.
    pub map_bytes: u64,
    /// Entries each map held at the end, and its capacity: how close it came to full.
    pub map_fill: BTreeMap<String, (u64, u64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitAggregate {
    pub lock: u64,
    /// The ioctl command the waiter was in, where its system calls name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ioctl: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u32>,
    pub flags: u32,
    pub count: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Waits per log2 bucket: bucket b holds waits of [2^b, 2^(b+1)) ns.
    pub log2_hist: Vec<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaiterTime {
    pub lock: u64,
    pub pid: i32,
    pub count: u64,
    pub total_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HolderTime {
    pub lock: u64,
    /// 0 for [`activity::HANDOFF`] and the unknown time no holder is proven for.
    pub holder: i32,
    pub activity: u32,
    pub detail: u64,
    pub ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HoldCount {
    pub lock: u64,
    pub holder: i32,
    pub holds: u64,
    /// Holds taken for reading.
    pub shared: u64,
    /// Function-call IPIs sent during the holds.
    pub ipis: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldAsleep {
    pub lock: u64,
    pub holder: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u32>,
    pub holds: u64,
    pub slept_ns: u64,
    pub held_ns: u64,
    pub waiter_wait_ns: u64,
    /// Waiters released from such holds (not distinct tasks: the maps keep no sets).
    pub releases: u64,
    pub held_at_least: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PartTime {
    pub pid: i32,
    pub kind: u32,
    pub detail: u64,
    pub ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SleepWaker {
    /// The sleep's stack id, or `u64::MAX` without one.
    pub stack: u64,
    pub waker: i32,
    pub ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskName {
    pub pid: i32,
    pub tgid: i32,
    pub comm: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpiCount {
    pub callsite: u64,
    pub callback: u64,
    /// 0: sent from an interrupt, or by no task the program could tell.
    pub sender: i32,
    pub ipis: u64,
}

impl AggregateDump {
    /// Reads `dir`'s aggregate.json; `Ok(None)` when the directory has none (a tracefs
    /// recording).
    pub fn read(dir: &Path) -> std::io::Result<Option<AggregateDump>> {
        let path = dir.join(AGGREGATE_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let dump: AggregateDump = serde_json::from_slice(&bytes).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })?;
        if dump.version != DUMP_VERSION {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: layout version {} (this vmscale reads {DUMP_VERSION})",
                    path.display(),
                    dump.version
                ),
            ));
        }
        Ok(Some(dump))
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(AGGREGATE_FILE), bytes)
    }

    /// Everything dropped, summed.
    pub fn dropped(&self) -> u64 {
        self.drops.values().sum::<u64>() + self.recursion_misses
    }

    /// The stack `id`'s frames (empty for an unknown id).
    pub fn frames(&self, id: Option<u32>) -> &[u64] {
        id.and_then(|id| self.stacks.get(&id))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// A stack id as the maps store it in a u64 detail (-1: none).
pub fn stack_of_detail(detail: u64) -> Option<u32> {
    let id = detail as i64;
    (0..=u32::MAX as i64).contains(&id).then_some(id as u32)
}
