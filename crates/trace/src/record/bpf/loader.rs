//! Loading, attaching and reading back the aggregate program (libbpf-rs, through the
//! skeleton libbpf-cargo generated from the committed object).

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use super::dump::{self, AggregateDump, DUMP_VERSION};
use super::{AggregateConfig, AggregateError, Subject, AGGREGATE_EVENTS};
use crate::record::recorder::TraceMeta;

#[allow(clippy::all, clippy::pedantic, unsafe_op_in_unsafe_fn)]
mod skel {
    include!("aggregate.skel.rs");
}

use skel::types;
use skel::{AggregateSkel, AggregateSkelBuilder};

/// Frames a stack map value holds (aggregate.h's AGG_STACK_DEPTH).
const STACK_DEPTH: usize = 32;
/// Buckets of a wait histogram (AGG_HIST).
const HIST: usize = 40;

/// Names of the `drops` counters, by index (aggregate.h's enum agg_drop).
const DROP_NAMES: [&str; 13] = [
    "stack",
    "waits_full",
    "waiters_full",
    "locks_full",
    "holders_full",
    "parts_full",
    "comms_full",
    "task_storage",
    "nested",
    "unmatched_end",
    "lost_end",
    "ipis_full",
    "subject_full",
];

/// Names of the `seen` counters, by index (enum agg_seen).
const SEEN_NAMES: [&str; 11] = [
    "lock:contention_begin",
    "lock:contention_end",
    "sched:sched_switch",
    "sched:sched_waking",
    "sched:sched_process_fork",
    "ipi:ipi_send_cpu",
    "ipi:ipi_send_cpumask",
    "stack_ns",
    "stacks",
    "stacks_reused",
    "sleep_stacks_reused",
];

/// What libbpf said last (its warnings: a verifier log's end), for a one-line error.
static LIBBPF_SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remember_libbpf(_level: libbpf_rs::PrintLevel, text: String) {
    let mut said = LIBBPF_SAID.lock().unwrap_or_else(|e| e.into_inner());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        said.push(line.trim().to_string());
    }
    let excess = said.len().saturating_sub(8);
    said.drain(..excess);
}

fn libbpf_said() -> String {
    let said = LIBBPF_SAID.lock().unwrap_or_else(|e| e.into_inner());
    said.iter()
        .rev()
        .find(|l| !l.starts_with("libbpf: prog") || l.contains("failed"))
        .cloned()
        .unwrap_or_default()
}

fn classify(what: &str, e: libbpf_rs::Error) -> AggregateError {
    let said = libbpf_said();
    let detail = if said.is_empty() {
        e.to_string()
    } else {
        format!("{e} ({said})")
    };
    match e.kind() {
        libbpf_rs::ErrorKind::PermissionDenied => {
            AggregateError::NotAllowed(format!("{what}: {detail}"))
        }
        _ => AggregateError::Failed(format!("{what}: {detail}")),
    }
}

/// An aggregated recording in progress: the programs attached, counting while enabled.
pub struct Aggregation {
    skel: AggregateSkel<'static>,
    dir: PathBuf,
    windows: Vec<(u64, u64)>,
    on_since: Option<u64>,
    started_ns: Option<u64>,
    config: AggregateConfig,
    extra_ioctl_tids: Vec<u32>,
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> AggregateError + '_ {
    move |e| AggregateError::Failed(format!("{}: {e}", path.display()))
}

impl Aggregation {
    /// Loads and attaches the programs (disabled until [`Aggregation::set_on`]); `dir`
    /// (created) receives kallsyms now and the maps at the end.
    pub fn prepare(dir: &Path, config: AggregateConfig) -> Result<Aggregation, AggregateError> {
        super::check_allowed()?;
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, remember_libbpf)));
        let kallsyms = crate::record::tracefs::read_whole(Path::new("/proc/kallsyms"))
            .ok()
            .and_then(|bytes| crate::Kallsyms::parse(&String::from_utf8_lossy(&bytes)).ok());
        let wakeup_site = kallsyms
            .as_ref()
            .and_then(|k| k.text_extent("ttwu_queue_wakelist"))
            .unwrap_or((0, 0));
        // The object lives as long as the skeleton, which owns and frees it; only the
        // slot it is opened into (a few words) is left behind.
        let object: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = AggregateSkelBuilder::default()
            .open(object)
            .map_err(|e| classify("cannot open the BPF object", e))?;
        {
            let rodata =
                open.maps.rodata_data.as_deref_mut().ok_or_else(|| {
                    AggregateError::Failed("the BPF object has no .rodata".into())
                })?;
            rodata.every_task = matches!(config.subject, Subject::EveryTask);
            rodata.ioctl_every_task = config.ioctl_every_task;
            rodata.sleep_stacks = config.sleep_stacks;
            rodata.wait_stacks = config.wait_stacks;
            rodata.exclude_tgid = config.exclude_tgid as i32;
            rodata.stack_budget = config.stack_budget;
            rodata.wakeup_site_start = wakeup_site.0;
            rodata.wakeup_site_end = wakeup_site.1;
        }
        let mut skel = open
            .load()
            .map_err(|e| classify("the kernel refused the BPF programs", e))?;
        if let Subject::Roots(roots) = &config.subject {
            for &pid in roots {
                insert_u8(&skel.maps.subject, pid)?;
            }
        }
        for &tid in &config.ioctl_tids {
            insert_u8(&skel.maps.ioctl_tids, tid)?;
        }
        skel.attach()
            .map_err(|e| classify("cannot attach the BPF programs to their tracepoints", e))?;
        // The programs attach one at a time: an interrupt that began after its entry's
        // program was attached and ended before its exit's was leaves its CPU's depth at
        // one for good, and every wakeup on that CPU would read as an interrupt's (no
        // releaser named, ever). Every program is attached now: the depths start from zero.
        reset_irq_depth(&skel.maps.irq_depth)?;
        // After loading: the programs' own symbols name their frames in the stacks.
        let target = dir.join("kallsyms");
        std::fs::copy("/proc/kallsyms", &target).map_err(io_error(&target))?;
        Ok(Aggregation {
            skel,
            dir: dir.to_path_buf(),
            windows: Vec::new(),
            on_since: None,
            started_ns: None,
            config,
            extra_ioctl_tids: Vec::new(),
        })
    }

    fn bss(&mut self) -> &mut types::bss {
        self.skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("the skeleton maps .bss (checked at load)")
    }

    /// Counts while on; each time it turns on, state left from before (waits and sleeps
    /// whose ends were not seen) is forgotten.
    pub fn set_on(&mut self, on: bool) {
        match (on, self.on_since) {
            (true, None) => {
                let now = monotonic_ns();
                let bss = self.bss();
                let epoch = bss.epoch.wrapping_add(1);
                // SAFETY: the fields are plain integers in memory the kernel maps for the
                // program; volatile stores make the writes happen, in this order.
                unsafe {
                    std::ptr::write_volatile(&mut bss.epoch, epoch);
                    std::ptr::write_volatile(&mut bss.enabled, true);
                }
                self.started_ns.get_or_insert(now);
                self.on_since = Some(now);
            }
            (false, Some(since)) => {
                let bss = self.bss();
                // SAFETY: as above.
                unsafe { std::ptr::write_volatile(&mut bss.enabled, false) };
                self.windows.push((since, monotonic_ns()));
                self.on_since = None;
            }
            _ => {}
        }
    }

    /// The next task the calling thread `tid` creates is the subject (a command vmscale
    /// starts), and so is every task it creates; `None` stops adopting.
    pub fn adopt_children_of(&mut self, tid: Option<u32>) {
        let bss = self.bss();
        // SAFETY: as in set_on.
        unsafe { std::ptr::write_volatile(&mut bss.adopt_children_of, tid.unwrap_or(0) as i32) };
    }

    /// Makes `pid` a root of the subject (a command started meanwhile).
    pub fn add_subject(&mut self, pid: u32) -> Result<(), AggregateError> {
        if let Subject::Roots(roots) = &mut self.config.subject {
            if !roots.contains(&pid) {
                roots.push(pid);
            }
        }
        insert_u8(&self.skel.maps.subject, pid)
    }

    /// Names the ioctls of `tids` too from now on, in place of those a previous call named.
    pub fn follow_ioctls_of(&mut self, tids: &[u32]) -> Result<(), AggregateError> {
        if self.extra_ioctl_tids == tids {
            return Ok(());
        }
        for tid in std::mem::take(&mut self.extra_ioctl_tids) {
            if !self.config.ioctl_tids.contains(&tid) {
                let _ = self
                    .skel
                    .maps
                    .ioctl_tids
                    .delete(&(tid as i32).to_ne_bytes());
            }
        }
        for &tid in tids {
            insert_u8(&self.skel.maps.ioctl_tids, tid)?;
        }
        self.extra_ioctl_tids = tids.to_vec();
        Ok(())
    }

    /// Stops counting, reads every map, and writes aggregate.json and meta.json.
    pub fn finish(mut self) -> Result<(TraceMeta, AggregateDump), AggregateError> {
        self.set_on(false);
        let dump = self.read_maps()?;
        dump.write(&self.dir).map_err(io_error(&self.dir))?;
        let meta = TraceMeta {
            page_size: 0,
            cpus: Vec::new(),
            clock: "mono".into(),
            events: AGGREGATE_EVENTS.iter().map(|e| e.to_string()).collect(),
            stacks: self.config.wait_stacks,
            buffer_kib: 0,
            lost: BTreeMap::new(),
            started_ns: self.started_ns.unwrap_or(0),
            stopped_ns: self.windows.last().map(|w| w.1).unwrap_or(0),
            windows: self.windows.clone(),
            pages: BTreeMap::new(),
        };
        let path = self.dir.join("meta.json");
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| AggregateError::Failed(format!("{}: {e}", path.display())))?;
        std::fs::write(&path, json).map_err(io_error(&path))?;
        Ok((meta, dump))
    }

    fn read_maps(&self) -> Result<AggregateDump, AggregateError> {
        let maps = &self.skel.maps;
        let mut dump = AggregateDump {
            version: DUMP_VERSION,
            subject_roots: match &self.config.subject {
                Subject::Roots(roots) => roots.clone(),
                _ => Vec::new(),
            },
            every_task: matches!(self.config.subject, Subject::EveryTask),
            ..AggregateDump::default()
        };
        for (k, v) in entries::<types::wait_key, types::wait_val>(&maps.waits)? {
            dump.waits.push(dump::WaitAggregate {
                lock: k.lock,
                ioctl: (k.ioctl & (1 << 63) != 0).then_some(k.ioctl & 0xffff_ffff),
                stack: u32::try_from(k.stack).ok(),
                flags: k.flags,
                count: v.count,
                total_ns: v.total_ns,
                min_ns: v.min_ns,
                max_ns: v.max_ns,
                log2_hist: v.hist[..HIST].to_vec(),
            });
        }
        for (k, v) in entries::<types::waiter_key, types::waiter_val>(&maps.waiters)? {
            dump.waiters.push(dump::WaiterTime {
                lock: k.lock,
                pid: k.pid,
                count: v.count,
                total_ns: v.total_ns,
            });
        }
        for (k, ns) in entries::<types::act_key, u64>(&maps.acts)? {
            dump.holder_time.push(dump::HolderTime {
                lock: k.lock,
                holder: k.holder,
                activity: k.activity,
                detail: k.detail,
                ns,
            });
        }
        for (k, v) in entries::<types::hold_key, types::hold_val>(&maps.holds)? {
            dump.holds.push(dump::HoldCount {
                lock: k.lock,
                holder: k.holder,
                holds: v.holds,
                shared: v.shared,
                ipis: v.ipis,
            });
        }
        for (k, v) in entries::<types::sleep_key, types::sleep_val>(&maps.sleeps)? {
            dump.held_asleep.push(dump::HeldAsleep {
                lock: k.lock,
                holder: k.holder,
                stack: u32::try_from(k.stack).ok(),
                holds: v.holds,
                slept_ns: v.slept_ns,
                held_ns: v.held_ns,
                waiter_wait_ns: v.waiter_wait_ns,
                releases: v.releases,
                held_at_least: v.held_at_least != 0,
            });
        }
        for (k, ns) in entries::<types::part_key, u64>(&maps.parts)? {
            dump.parts.push(dump::PartTime {
                pid: k.pid,
                kind: k.kind,
                detail: k.detail,
                ns,
            });
        }
        for (k, ns) in entries::<types::waker_key, u64>(&maps.wakers)? {
            dump.sleep_wakers.push(dump::SleepWaker {
                stack: k.stack,
                waker: k.waker,
                ns,
            });
        }
        for (pid, ns) in entries::<i32, u64>(&maps.joined)? {
            dump.joined.insert(pid, ns);
        }
        for (pid, v) in entries::<i32, types::comm_val>(&maps.comms)? {
            let bytes: Vec<u8> = v
                .comm
                .iter()
                .map(|&c| c as u8)
                .take_while(|&c| c != 0)
                .collect();
            dump.tasks.push(dump::TaskName {
                pid,
                tgid: v.tgid,
                comm: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        for (k, n) in entries::<types::ipi_key, u64>(&maps.ipis)? {
            dump.ipis.push(dump::IpiCount {
                callsite: k.callsite,
                callback: k.callback,
                sender: k.sender,
                ipis: n,
            });
        }
        // Stacks the other maps refer to.
        let mut ids: Vec<u32> = dump
            .waits
            .iter()
            .filter_map(|w| w.stack)
            .chain(dump.held_asleep.iter().filter_map(|s| s.stack))
            .chain(
                dump.parts
                    .iter()
                    .filter(|p| p.kind == dump::part::ASLEEP)
                    .filter_map(|p| dump::stack_of_detail(p.detail)),
            )
            .chain(
                dump.holder_time
                    .iter()
                    .filter(|h| h.activity == dump::activity::ASLEEP)
                    .filter_map(|h| dump::stack_of_detail(h.detail)),
            )
            .chain(
                dump.sleep_wakers
                    .iter()
                    .filter_map(|w| dump::stack_of_detail(w.stack)),
            )
            .collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let value = maps
                .stacks
                .lookup(&id.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| classify("cannot read the stack map", e))?;
            if let Some(value) = value {
                let frames: Vec<u64> = value
                    .chunks_exact(8)
                    .take(STACK_DEPTH)
                    .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                    .take_while(|&a| a != 0)
                    .collect();
                dump.stacks.insert(id, frames);
            }
        }
        for (index, name) in DROP_NAMES.iter().enumerate() {
            let n = percpu_sum(&maps.drops, index as u32)?;
            if n > 0 {
                dump.drops.insert(name.to_string(), n);
            }
        }
        for (index, name) in SEEN_NAMES.iter().enumerate() {
            dump.seen
                .insert(name.to_string(), percpu_sum(&maps.seen, index as u32)?);
        }
        dump.recursion_misses = self.recursion_misses();
        let all: [&libbpf_rs::MapMut; 14] = [
            &maps.waits,
            &maps.waiters,
            &maps.locks,
            &maps.acts,
            &maps.holds,
            &maps.sleeps,
            &maps.parts,
            &maps.wakers,
            &maps.joined,
            &maps.subject,
            &maps.comms,
            &maps.ipis,
            &maps.stacks,
            &maps.ioctl_tids,
        ];
        for map in all {
            let capacity = map.max_entries() as u64;
            let entry = (map.key_size() + map.value_size()) as u64;
            dump.map_bytes += capacity * entry;
            let held = map.keys().count() as u64;
            dump.map_fill
                .insert(map.name().to_string_lossy().into_owned(), (held, capacity));
        }
        dump.map_bytes += u64::from(maps.zeros.value_size());
        Ok(dump)
    }

    fn recursion_misses(&self) -> u64 {
        let progs = &self.skel.progs;
        let ids: Vec<u32> = [
            &progs.on_contention_begin,
            &progs.on_contention_end,
            &progs.on_sched_switch,
            &progs.on_sched_waking,
            &progs.on_sched_process_fork,
            &progs.on_ipi_send_cpu,
            &progs.on_ipi_send_cpumask,
        ]
        .iter()
        .filter_map(|p| libbpf_rs::Program::id_from_fd(p.as_fd()).ok())
        .collect();
        libbpf_rs::query::ProgInfoIter::default()
            .filter(|info| ids.contains(&info.id))
            .map(|info| info.recursion_misses)
            .sum()
    }
}

fn insert_u8(map: &libbpf_rs::MapMut, key: u32) -> Result<(), AggregateError> {
    map.update(&(key as i32).to_ne_bytes(), &[1u8], MapFlags::ANY)
        .map_err(|e| classify(&format!("cannot add task {key} to a BPF map"), e))
}

fn percpu_sum(map: &libbpf_rs::MapMut, index: u32) -> Result<u64, AggregateError> {
    let values = map
        .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| classify("cannot read a per-CPU counter", e))?
        .unwrap_or_default();
    Ok(values
        .iter()
        .filter_map(|v| v.get(..8))
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        .sum())
}

/// Map keys and values: plain integer structs (`#[repr(C)]`, no padding the program
/// leaves uninitialized that a reader would trust, no pointers) of the skeleton's types.
trait Plain: Copy + Default {}
impl Plain for u64 {}
impl Plain for i32 {}
impl Plain for types::wait_key {}
impl Plain for types::wait_val {}
impl Plain for types::waiter_key {}
impl Plain for types::waiter_val {}
impl Plain for types::act_key {}
impl Plain for types::hold_key {}
impl Plain for types::hold_val {}
impl Plain for types::sleep_key {}
impl Plain for types::sleep_val {}
impl Plain for types::part_key {}
impl Plain for types::waker_key {}
impl Plain for types::comm_val {}
impl Plain for types::ipi_key {}

fn from_bytes<T: Plain>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: T is Plain (integers only, any bit pattern valid), and `bytes` holds at
    // least size_of::<T>() bytes; read_unaligned copes with the Vec's alignment.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

fn entries<K: Plain, V: Plain>(map: &libbpf_rs::MapMut) -> Result<Vec<(K, V)>, AggregateError> {
    let mut out = Vec::new();
    for key in map.keys() {
        let value = map
            .lookup(&key, MapFlags::ANY)
            .map_err(|e| classify("cannot read a BPF map", e))?;
        if let (Some(k), Some(v)) = (
            from_bytes::<K>(&key),
            value.as_deref().and_then(from_bytes::<V>),
        ) {
            out.push((k, v));
        }
    }
    Ok(out)
}

/// Zeroes every CPU's interrupt nesting depth (`irq_depth`, a one-element per-CPU array).
fn reset_irq_depth(map: &dyn MapCore) -> Result<(), AggregateError> {
    let cpus = libbpf_rs::num_possible_cpus()
        .map_err(|e| classify("cannot count the possible CPUs", e))?;
    let zeros: Vec<Vec<u8>> = vec![0u32.to_ne_bytes().to_vec(); cpus];
    map.update_percpu(&0u32.to_ne_bytes(), &zeros, MapFlags::ANY)
        .map_err(|e| classify("cannot reset the interrupt depths", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skeletons_types_have_the_c_layout() {
        // aggregate.h: keys and values as the program writes them.
        assert_eq!(std::mem::size_of::<types::wait_key>(), 24);
        assert_eq!(std::mem::size_of::<types::wait_val>(), 32 + 8 * HIST);
        assert_eq!(std::mem::size_of::<types::waiter_key>(), 16);
        assert_eq!(std::mem::size_of::<types::act_key>(), 24);
        assert_eq!(std::mem::size_of::<types::sleep_val>(), 48);
        assert_eq!(std::mem::size_of::<types::part_key>(), 16);
        assert_eq!(std::mem::size_of::<types::comm_val>(), 24);
        assert_eq!(std::mem::size_of::<types::ipi_key>(), 24);
    }

    #[test]
    fn plain_values_read_back_from_bytes() {
        let key = types::part_key {
            detail: 7,
            pid: -1,
            kind: 4,
        };
        let mut bytes = 7u64.to_ne_bytes().to_vec();
        bytes.extend((-1i32).to_ne_bytes());
        bytes.extend(4u32.to_ne_bytes());
        let back: types::part_key = from_bytes(&bytes).unwrap();
        assert_eq!(
            (back.detail, back.pid, back.kind),
            (key.detail, key.pid, key.kind)
        );
        assert!(from_bytes::<types::part_key>(&bytes[..8]).is_none());
    }
}
