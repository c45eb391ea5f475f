//! Kernel events to track events, one event at a time.
//!
//! Tracks:
//! - "vmscale phases": the scenario's phases (from its `vmscale: begin/end <label>`
//!   markers) as slices, any other marker as an instant;
//! - "cpus" / "cpu N": the task running on each CPU as slices, from sched_switch (idle is
//!   left blank). Per CPU rather than per task, so that a task's lock waits, which start
//!   while it runs and may end after it slept, get a track of their own and slices on
//!   every track nest;
//! - "ipis" / "cpu N ipis": an instant where an IPI was sent, with a flow to an instant on
//!   each target CPU's track;
//! - "lock waits" / "<comm> <pid>": from contention_begin to contention_end on the waiting
//!   task's track, named "wait: <lock>". When the task that released a sleeping lock woke
//!   the waiter, a flow runs from a "wake" instant on the releaser's CPU to a "got lock"
//!   instant where the wait ends;
//! - "lock holds" / "<comm> <pid> holds <lock>": each hold of a sleeping lock, as the
//!   holders analysis infers it (known only at its release, so written late: Perfetto
//!   sorts by time);
//! - "syscalls" / "<comm> <pid>": the traced system calls (scenario runs trace the
//!   measuring thread's), named by call.
//!
//! State is what is open (the task on each CPU, each task's waits, the phases) and the
//! names seen, never the events.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use vmscale_analysis::holders::Hold;

use super::names::{lock_kind, Names};
use super::proto::{AnnotationValue, DebugAnnotation, EventType};
use super::sink::{event, Counts, Sink};

const PHASE_BEGIN: &str = "vmscale: begin ";
const PHASE_END: &str = "vmscale: end ";

/// Sibling order of the top-level groups.
const RANK_PHASES: i32 = 0;
const RANK_CPUS: i32 = 1;
const RANK_IPIS: i32 = 2;
const RANK_WAITS: i32 = 3;
const RANK_HOLDS: i32 = 4;
const RANK_SYSCALLS: i32 = 5;

/// A task's track and its open waits, innermost last.
struct TaskTrack {
    uuid: u64,
    waits: Vec<u64>,
}

pub struct Converter<W: Write> {
    sink: Sink<W>,
    names: Names,
    comms: HashMap<i32, String>,
    started: bool,
    last_ts: u64,
    phases: Option<(u64, Vec<String>)>,
    cpus_group: Option<u64>,
    /// Per CPU: its track and the pid running there, if a slice is open.
    cpus: BTreeMap<u32, (u64, Option<i32>)>,
    ipis_group: Option<u64>,
    ipi_tracks: BTreeMap<u32, u64>,
    waits_group: Option<u64>,
    tasks: BTreeMap<i32, TaskTrack>,
    next_flow: u64,
    phase_description: Option<String>,
    holds_group: Option<u64>,
    /// (holder, lock) -> its holds track.
    hold_tracks: HashMap<(i32, u64), u64>,
    /// Per lock, the latest hold, written once no later release can extend it.
    pending_holds: HashMap<u64, Hold>,
    /// Waiter pid -> flows from the wakeups sent to it during its wait.
    wake_flows: HashMap<i32, Vec<u64>>,
    syscalls_group: Option<u64>,
    /// pid -> (its syscalls track, a call is open).
    syscall_tracks: HashMap<i32, (u64, bool)>,
}

impl<W: Write> Converter<W> {
    /// `description` goes on the phases track (the scenario and sweep, when known).
    pub fn new(out: W, names: Names, description: Option<String>) -> Converter<W> {
        Converter {
            sink: Sink::new(out),
            names,
            comms: HashMap::new(),
            started: false,
            last_ts: 0,
            phases: None,
            cpus_group: None,
            cpus: BTreeMap::new(),
            ipis_group: None,
            ipi_tracks: BTreeMap::new(),
            waits_group: None,
            tasks: BTreeMap::new(),
            next_flow: 1,
            phase_description: description,
            holds_group: None,
            hold_tracks: HashMap::new(),
            pending_holds: HashMap::new(),
            wake_flows: HashMap::new(),
            syscalls_group: None,
            syscall_tracks: HashMap::new(),
        }
    }

    /// Every event passes here first: the clock is declared before the first timed packet.
    fn at(&mut self, ts: u64) {
        if !self.started {
            self.started = true;
            self.sink.clock(ts);
            self.phases_track();
        }
        self.last_ts = self.last_ts.max(ts);
    }

    fn phases_track(&mut self) -> u64 {
        if let Some((uuid, _)) = self.phases {
            return uuid;
        }
        let uuid = self.sink.track_with(super::proto::TrackDescriptor {
            name: Some("vmscale phases".to_string()),
            description: self.phase_description.take(),
            sibling_order_rank: Some(RANK_PHASES),
            ..Default::default()
        });
        self.phases = Some((uuid, Vec::new()));
        uuid
    }

    fn group(sink: &mut Sink<W>, slot: &mut Option<u64>, name: &str, rank: i32) -> u64 {
        *slot.get_or_insert_with(|| sink.track(name, None, Some(rank)))
    }

    fn comm(&self, pid: i32) -> String {
        match self.comms.get(&pid) {
            Some(comm) => format!("{comm} {pid}"),
            None => format!("pid {pid}"),
        }
    }

    /// Remembers a task's name (sched events carry it; contention events do not).
    pub fn name_task(&mut self, pid: i32, comm: &str) {
        if pid != 0 && self.comms.get(&pid).is_none_or(|c| c != comm) {
            self.comms.insert(pid, comm.to_string());
        }
    }

    pub fn switch(&mut self, ts: u64, cpu: u32, prev: (i32, &str), next: (i32, &str)) {
        self.at(ts);
        self.name_task(prev.0, prev.1);
        self.name_task(next.0, next.1);
        let group = Self::group(&mut self.sink, &mut self.cpus_group, "cpus", RANK_CPUS);
        let sink = &mut self.sink;
        let (track, running) = self.cpus.entry(cpu).or_insert_with(|| {
            let uuid = sink.track(&format!("cpu {cpu}"), Some(group), Some(cpu as i32));
            (uuid, None)
        });
        let track = *track;
        let was_running = running.take().is_some();
        // The idle task (pid 0) leaves the CPU blank.
        *running = (next.0 != 0).then_some(next.0);
        if was_running {
            self.sink.end(ts, track);
        }
        if next.0 != 0 {
            let args = vec![DebugAnnotation::new(
                "pid",
                AnnotationValue::Int(next.0.into()),
            )];
            let name = format!("{} {}", next.1, next.0);
            self.sink.begin(ts, track, "sched", name, args);
        }
    }

    fn task_track(&mut self, pid: i32) -> &mut TaskTrack {
        let group = Self::group(
            &mut self.sink,
            &mut self.waits_group,
            "lock waits",
            RANK_WAITS,
        );
        if !self.tasks.contains_key(&pid) {
            let name = self.comm(pid);
            let uuid = self.sink.track(&name, Some(group), Some(pid));
            self.tasks.insert(
                pid,
                TaskTrack {
                    uuid,
                    waits: Vec::new(),
                },
            );
        }
        self.tasks.get_mut(&pid).expect("inserted above")
    }

    pub fn contention_begin(&mut self, ts: u64, pid: i32, lock: u64, flags: u32) {
        self.at(ts);
        let name = format!("wait: {}", self.names.lock(lock));
        let task = self.task_track(pid);
        // Mutexes and rwsems trace a second begin on the same lock when optimistic
        // spinning gives way to sleeping, and one end for both: one wait, one slice.
        if task.waits.last() == Some(&lock) {
            return;
        }
        task.waits.push(lock);
        let track = task.uuid;
        let args = vec![
            DebugAnnotation::new("lock_addr", AnnotationValue::Pointer(lock)),
            DebugAnnotation::new("kind", AnnotationValue::String(lock_kind(flags))),
            DebugAnnotation::new("pid", AnnotationValue::Int(pid.into())),
        ];
        self.sink.begin(ts, track, "lock", name, args);
    }

    /// `ret` is the wait's result: 0 when the lock was taken, a negative errno when the
    /// wait gave up (interrupted).
    pub fn contention_end(&mut self, ts: u64, pid: i32, lock: u64, ret: i32) {
        self.at(ts);
        let Some(task) = self.tasks.get_mut(&pid) else {
            return;
        };
        // An end without its begin started before the trace: nothing to close. An end of
        // an outer wait closes the inner ones too (their ends were lost), so slices nest.
        let Some(depth) = task.waits.iter().rposition(|&l| l == lock) else {
            return;
        };
        let track = task.uuid;
        let closed = task.waits.len() - depth;
        task.waits.truncate(depth);
        if let Some(flows) = self.wake_flows.remove(&pid) {
            // Every wakeup during the wait ends here: a waiter woken more than once (a
            // spurious or stolen wakeup) shows each arrow.
            let outcome = if ret == 0 { "got" } else { "gave up on" };
            let mut got = event(
                EventType::Instant,
                track,
                "lock",
                Some(format!("{outcome} {}", self.names.lock(lock))),
                Vec::new(),
            );
            got.terminating_flow_ids = flows;
            self.sink.event(ts, got);
        }
        for _ in 0..closed {
            self.sink.end(ts, track);
        }
    }

    /// `waker` on `cpu` woke `woken`: when `woken` waits on a lock, this is the handoff,
    /// drawn as a flow to where its wait ends.
    pub fn waking(&mut self, ts: u64, (cpu, waker): (u32, i32), woken: i32) {
        self.at(ts);
        let waiting = self.tasks.get(&woken).is_some_and(|t| !t.waits.is_empty());
        // pid 0 is an interrupt on an idle CPU, not a releaser.
        if !waiting || waker == woken || waker == 0 {
            return;
        }
        let Some(&(track, _)) = self.cpus.get(&cpu) else {
            return;
        };
        let flow = self.next_flow;
        self.next_flow += 1;
        let mut wake = event(
            EventType::Instant,
            track,
            "lock",
            Some(format!("wake {}", self.comm(woken))),
            vec![DebugAnnotation::new(
                "waker",
                AnnotationValue::String(self.comm(waker)),
            )],
        );
        wake.flow_ids = vec![flow];
        self.sink.event(ts, wake);
        self.wake_flows.entry(woken).or_default().push(flow);
    }

    /// A hold the holders analysis found; the same hold may come again with a later end.
    pub fn hold(&mut self, hold: Hold) {
        if let Some(pending) = self.pending_holds.get_mut(&hold.lock) {
            if pending.holder == hold.holder && pending.start == hold.start {
                pending.end = pending.end.max(hold.end);
                return;
            }
        }
        if let Some(done) = self.pending_holds.insert(hold.lock, hold) {
            self.write_hold(done);
        }
    }

    fn write_hold(&mut self, hold: Hold) {
        let group = Self::group(
            &mut self.sink,
            &mut self.holds_group,
            "lock holds",
            RANK_HOLDS,
        );
        let lock = self.names.lock(hold.lock).to_string();
        let name = format!("{} holds {lock}", self.comm(hold.holder));
        let sink = &mut self.sink;
        let track = *self
            .hold_tracks
            .entry((hold.holder, hold.lock))
            .or_insert_with(|| sink.track(&name, Some(group), Some(hold.holder)));
        let args = vec![
            DebugAnnotation::new("lock_addr", AnnotationValue::Pointer(hold.lock)),
            DebugAnnotation::new(
                "start",
                AnnotationValue::String(
                    if hold.start_known {
                        "traced acquisition"
                    } else {
                        "held at least since here (acquisition not traced)"
                    }
                    .to_string(),
                ),
            ),
        ];
        self.sink
            .begin(hold.start, track, "lock", format!("hold: {lock}"), args);
        self.sink.end(hold.end, track);
    }

    fn syscall_track(&mut self, pid: i32) -> &mut (u64, bool) {
        let group = Self::group(
            &mut self.sink,
            &mut self.syscalls_group,
            "syscalls",
            RANK_SYSCALLS,
        );
        if !self.syscall_tracks.contains_key(&pid) {
            let uuid = self.sink.track(&self.comm(pid), Some(group), Some(pid));
            self.syscall_tracks.insert(pid, (uuid, false));
        }
        self.syscall_tracks.get_mut(&pid).expect("inserted above")
    }

    pub fn sys_enter(&mut self, ts: u64, pid: i32, name: String) {
        self.at(ts);
        let &mut (track, open) = self.syscall_track(pid);
        // An enter while a call is open means its exit was lost: close it here.
        if open {
            self.sink.end(ts, track);
        }
        self.sink.begin(ts, track, "syscall", name, Vec::new());
        self.syscall_track(pid).1 = true;
    }

    pub fn sys_exit(&mut self, ts: u64, pid: i32) {
        self.at(ts);
        if let Some((track, open)) = self.syscall_tracks.get_mut(&pid) {
            if *open {
                *open = false;
                let track = *track;
                self.sink.end(ts, track);
            }
        }
    }

    fn ipi_track(&mut self, cpu: u32) -> u64 {
        let group = Self::group(&mut self.sink, &mut self.ipis_group, "ipis", RANK_IPIS);
        let sink = &mut self.sink;
        *self.ipi_tracks.entry(cpu).or_insert_with(|| {
            sink.track(&format!("cpu {cpu} ipis"), Some(group), Some(cpu as i32))
        })
    }

    /// An IPI sent from `cpu` by `pid` to `targets`.
    pub fn ipi(
        &mut self,
        ts: u64,
        (cpu, pid): (u32, i32),
        targets: &[u32],
        callsite: u64,
        callback: u64,
    ) {
        self.at(ts);
        // The callback says what the IPI does; a plain reschedule or TLB IPI has none, and
        // then its sender's function does.
        let function = self
            .names
            .function(if callback != 0 { callback } else { callsite });
        let args = vec![
            DebugAnnotation::new(
                "callsite",
                AnnotationValue::String(self.names.code(callsite).to_string()),
            ),
            DebugAnnotation::new(
                "callback",
                AnnotationValue::String(self.names.code(callback).to_string()),
            ),
            DebugAnnotation::new("sender", AnnotationValue::String(self.comm(pid))),
            DebugAnnotation::new(
                "targets",
                AnnotationValue::String(
                    targets
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            ),
        ];
        let flows: Vec<u64> = (0..targets.len() as u64)
            .map(|i| self.next_flow + i)
            .collect();
        self.next_flow += targets.len() as u64;
        let sender = self.ipi_track(cpu);
        let mut send = event(
            EventType::Instant,
            sender,
            "ipi",
            Some(format!("ipi: {function}")),
            args,
        );
        send.flow_ids = flows.clone();
        self.sink.event(ts, send);
        for (&target, flow) in targets.iter().zip(flows) {
            let track = self.ipi_track(target);
            let mut receive = event(
                EventType::Instant,
                track,
                "ipi",
                Some(format!("ipi from cpu {cpu}: {function}")),
                Vec::new(),
            );
            receive.terminating_flow_ids = vec![flow];
            self.sink.event(ts, receive);
        }
    }

    /// A trace_marker write: a phase boundary or a note.
    pub fn print(&mut self, ts: u64, message: &str) {
        self.at(ts);
        let track = self.phases_track();
        let (_, open) = self.phases.as_mut().expect("phases_track made it");
        if let Some(label) = message.strip_prefix(PHASE_BEGIN) {
            open.push(label.to_string());
            self.sink
                .begin(ts, track, "vmscale", label.to_string(), Vec::new());
        } else if let Some(label) = message.strip_prefix(PHASE_END) {
            // As with waits: an end without a begin is dropped, an outer end closes
            // what is still open inside it.
            if let Some(depth) = open.iter().rposition(|l| l == label) {
                let closed = open.len() - depth;
                open.truncate(depth);
                for _ in 0..closed {
                    self.sink.end(ts, track);
                }
            }
        } else {
            let note = event(
                EventType::Instant,
                track,
                "vmscale",
                Some(message.to_string()),
                Vec::new(),
            );
            self.sink.event(ts, note);
        }
    }

    /// Closes whatever is still open at the last event's time (every slice has its end),
    /// flushes, and gives back the writer and what was written.
    pub fn finish(mut self) -> std::io::Result<(W, Counts)> {
        let ts = self.last_ts;
        if !self.started {
            // An empty trace still says which clock it would be on.
            self.at(0);
        }
        let mut pending: Vec<Hold> = self.pending_holds.drain().map(|(_, h)| h).collect();
        pending.sort_by_key(|h| (h.start, h.lock));
        for hold in pending {
            self.write_hold(hold);
        }
        let open_calls: Vec<u64> = self
            .syscall_tracks
            .values()
            .filter(|(_, open)| *open)
            .map(|(track, _)| *track)
            .collect();
        for track in open_calls {
            self.sink.end(ts, track);
        }
        for (track, running) in self.cpus.values() {
            if running.is_some() {
                self.sink.end(ts, *track);
            }
        }
        for task in self.tasks.values() {
            for _ in &task.waits {
                self.sink.end(ts, task.uuid);
            }
        }
        if let Some((track, open)) = &self.phases {
            for _ in open {
                self.sink.end(ts, *track);
            }
        }
        let counts = self.sink.counts;
        Ok((self.sink.finish()?, counts))
    }
}
