//! A mutex held across a sleep, built on the real kernel and explained from its trace.
//!
//! One thread write()s to a pipe from a page registered with userfaultfd and not populated:
//! anon_pipe_write takes pipe->mutex, faults in copy_page_from_iter and sleeps in
//! handle_userfault with the mutex held. Other writers of the same pipe queue on the mutex.
//! After a known delay the test resolves the fault, everyone completes, and the analysis must
//! name the lock, the faulting thread as the holder, where it slept, and the waiters' time.
//! Needs root, tracefs and userfaultfd; fails (never skips) without.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "support/early_stop.rs"]
mod early_stop;

use vmscale_run::findings::{HolderActivity, LockRole, TaskState};
use vmscale_trace::recorder::{default_events, RecordConfig, Recording};
use vmscale_trace::tracefs;

/// How long the holder sleeps in the fault with the waiters queued.
const HOLD: Duration = Duration::from_millis(200);
const WAITERS: usize = 3;

// include/uapi/linux/userfaultfd.h (values checked against this machine's headers).
const UFFD_API: u64 = 0xaa;
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_MSG_SIZE: usize = 32;

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    start: u64,
    len: u64,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// What the reproducer did, measured on CLOCK_MONOTONIC (Instant).
struct Outcome {
    holder_tid: i32,
    waiter_tids: Vec<i32>,
    /// Each waiter's write(), call to return.
    waiter_waits: Vec<Duration>,
    /// From the holder's fault reaching userfaultfd to its resolution.
    fault_held: Duration,
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

fn check(ret: libc::c_long, what: &str) -> libc::c_long {
    assert!(
        ret >= 0,
        "{what} failed: {}",
        std::io::Error::last_os_error()
    );
    ret
}

/// One anonymous page registered with userfaultfd in missing mode, unmapped on drop.
struct FaultPage {
    uffd: OwnedFd,
    addr: *mut libc::c_void,
    len: usize,
}

// The page is only read by the kernel on behalf of a writer thread (through its address)
// and populated by the ioctl; nothing dereferences the pointer in Rust.
unsafe impl Send for FaultPage {}
unsafe impl Sync for FaultPage {}

impl FaultPage {
    fn new() -> FaultPage {
        // SAFETY: sysconf only reads a system value.
        let len = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: the userfaultfd syscall takes flags only; the result is checked.
        let fd = check(
            unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) },
            "userfaultfd",
        );
        // SAFETY: fd is a fresh descriptor we own.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut api = UffdioApi {
            api: UFFD_API,
            ..Default::default()
        };
        // SAFETY: UFFDIO_API reads and writes the struct we pass, sized as the ioctl says.
        check(
            unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_API, &mut api) }.into(),
            "UFFDIO_API",
        );
        // SAFETY: a fresh anonymous private mapping; the result is checked.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED, "mmap failed");
        let page = FaultPage { uffd, addr, len };
        let mut register = UffdioRegister {
            start: addr as u64,
            len: len as u64,
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        // SAFETY: registers our own mapping; the struct is sized as the ioctl says.
        check(
            unsafe { libc::ioctl(page.uffd.as_raw_fd(), UFFDIO_REGISTER, &mut register) }.into(),
            "UFFDIO_REGISTER",
        );
        page
    }

    /// Blocks until a thread faults on the page.
    fn wait_for_fault(&self) {
        let mut msg = [0u8; UFFD_MSG_SIZE];
        // SAFETY: the fd stays open for the File's life; ManuallyDrop leaves it to `uffd`.
        let mut file =
            std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(self.uffd.as_raw_fd()) });
        file.read_exact(&mut msg).expect("read userfaultfd message");
        assert_eq!(msg[0], UFFD_EVENT_PAGEFAULT, "unexpected userfaultfd event");
    }

    /// Populates the page, waking the faulting thread.
    fn resolve(&self) {
        let source = vec![b'x'; self.len];
        let mut copy = UffdioCopy {
            dst: self.addr as u64,
            src: source.as_ptr() as u64,
            len: self.len as u64,
            ..Default::default()
        };
        // SAFETY: copies our own buffer into our own registered page.
        check(
            unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_COPY, &mut copy) }.into(),
            "UFFDIO_COPY",
        );
    }
}

impl Drop for FaultPage {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping this value created; nothing uses it afterwards.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

fn write_all(fd: i32, buf: *const libc::c_void, len: usize) {
    // SAFETY: `buf` points at `len` bytes the caller keeps alive (or at the fault page,
    // which the kernel reads once the fault is resolved).
    let n = unsafe { libc::write(fd, buf, len) };
    assert_eq!(
        n,
        len as isize,
        "write: {}",
        std::io::Error::last_os_error()
    );
}

/// The task's state letter from /proc (D: uninterruptible sleep, e.g. on a mutex).
fn task_state(tid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn wait_for_state(tids: &[i32], state: char, failure: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !tids.iter().all(|&t| task_state(t) == Some(state)) {
        assert!(Instant::now() < deadline, "{failure}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs the reproducer: the holder faults inside anon_pipe_write, `WAITERS` writers queue on
/// pipe->mutex, the fault is resolved after `HOLD`.
fn pipe_writers_behind_a_userfault() -> Outcome {
    let page = FaultPage::new();
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors; the result is checked.
    check(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }.into(),
        "pipe2",
    );
    // SAFETY: fresh descriptors we own.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let w = write_end.as_raw_fd();

    // The reader drains the pipe so no writer blocks on a full pipe. It must be asleep
    // waiting for data (not holding or queued on the mutex) before the holder writes.
    let (reader_tx, reader_rx) = mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("pipe-reader".into())
        .spawn(move || {
            reader_tx.send(gettid()).unwrap();
            let mut file = File::from(read_end);
            let mut sink = Vec::new();
            file.read_to_end(&mut sink).expect("drain the pipe");
            sink.len()
        })
        .unwrap();
    let reader_tid = reader_rx.recv().unwrap();
    wait_for_state(&[reader_tid], 'S', "the reader never waited for data");

    std::thread::scope(|scope| {
        let (tid_tx, tid_rx) = mpsc::channel();
        let page_ref = &page;
        let holder = std::thread::Builder::new()
            .name("fault-holder".into())
            .spawn_scoped(scope, move || {
                tid_tx.send(gettid()).unwrap();
                write_all(w, page_ref.addr, 64);
            })
            .unwrap();
        let holder_tid = tid_rx.recv().unwrap();
        page.wait_for_fault();
        let faulted = Instant::now();

        let (tx, rx) = mpsc::channel();
        let waiters: Vec<_> = (0..WAITERS)
            .map(|index| {
                let tx = tx.clone();
                std::thread::Builder::new()
                    .name(format!("pipe-writer-{index}"))
                    .spawn_scoped(scope, move || {
                        let buf = [b'w'; 64];
                        tx.send(gettid()).unwrap();
                        let start = Instant::now();
                        write_all(w, buf.as_ptr().cast(), buf.len());
                        start.elapsed()
                    })
                    .unwrap()
            })
            .collect();
        let waiter_tids: Vec<i32> = (0..WAITERS).map(|_| rx.recv().unwrap()).collect();
        // Every waiter must be asleep on the mutex before the clock runs out.
        wait_for_state(&waiter_tids, 'D', "waiters never blocked on the pipe mutex");
        std::thread::sleep(HOLD.saturating_sub(faulted.elapsed()));
        page.resolve();
        let fault_held = faulted.elapsed();

        holder.join().unwrap();
        let waiter_waits = waiters.into_iter().map(|h| h.join().unwrap()).collect();
        drop(write_end);
        assert_eq!(reader.join().unwrap(), 64 * (WAITERS + 1));
        Outcome {
            holder_tid,
            waiter_tids,
            waiter_waits,
            fault_held,
        }
    })
}

fn within(found: u64, expected: u64, fraction: f64) -> bool {
    (found as f64 - expected as f64).abs() <= expected as f64 * fraction
}

#[test]
fn a_pipe_mutex_held_across_a_userfault_names_its_holder_and_where_it_slept() {
    let mount =
        tracefs::mount_point().unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"));
    let dir =
        std::env::temp_dir().join(format!("vmscale-held-across-sleep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RecordConfig {
        events: default_events(),
        stack_events: vec!["lock:contention_begin".into(), "sched:sched_switch".into()],
        ..RecordConfig::default()
    };
    let mut recording = Recording::prepare(&mount, &dir, config).unwrap();
    recording.set_on(true).unwrap();
    let outcome = pipe_writers_behind_a_userfault();
    recording.set_on(false).unwrap();
    recording.finish().unwrap();
    let analysis = vmscale_analysis::analyse(&dir);
    let early = analysis
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|analysis| early_stop::check(&dir, analysis));
    std::fs::remove_dir_all(&dir).unwrap();
    let analysis = analysis.unwrap();
    // The timeline pass stops once its window is complete. Here holds outlive short
    // windows (the holder keeps the mutex for the whole fault), so stopping at the window's
    // end would lose them. The report's own window may run to the trace's end: the trace
    // stops soon after the longest wait.
    let early = early.unwrap();
    eprintln!("early stop: {early:?}");
    assert!(early.windows_stopped_early >= 1, "{early:?}");
    assert!(early.holds_released_after_the_window >= 1, "{early:?}");

    let measured: u64 = outcome
        .waiter_waits
        .iter()
        .map(|d| d.as_nanos() as u64)
        .sum();
    let lock = analysis
        .holders
        .iter()
        .find(|l| l.holders.iter().any(|h| h.pid == outcome.holder_tid) && l.kind == "mutex")
        .unwrap_or_else(|| {
            panic!(
                "no mutex held by {}: {:#?}",
                outcome.holder_tid, analysis.holders
            )
        });
    eprintln!(
        "measured: holder {} fault held {:?}, waiters {:?} waited {:?} ({} ns in total)\nfound: {lock:#?}",
        outcome.holder_tid, outcome.fault_held, outcome.waiter_tids, outcome.waiter_waits, measured
    );

    assert!(lock.name.contains("pipe_write"), "{}", lock.name);
    // The writers waited; the reader may also have waited briefly for the mutex while the
    // writers took turns, which is why the lock can list one more waiter.
    let writers: Vec<&vmscale_run::Waiter> = lock
        .waiters
        .iter()
        .filter(|w| outcome.waiter_tids.contains(&w.pid))
        .collect();
    assert_eq!(writers.len(), WAITERS, "{:?}", lock.waiters);
    assert!(writers.iter().all(|w| w.comm.starts_with("pipe-writer-")));
    let traced: u64 = writers.iter().map(|w| w.total_wait_ns).sum();
    assert!(
        within(traced, measured, 0.10),
        "writers' traced wait {traced} ns vs measured {measured} ns"
    );
    assert!(
        within(lock.total_wait_ns, measured, 0.10),
        "lock wait {} ns vs measured {measured} ns",
        lock.total_wait_ns
    );

    // Most of the wait was spent while the holder slept in the fault.
    let top = &lock.activity[0];
    assert_eq!(top.activity, HolderActivity::Asleep, "{:?}", lock.activity);
    assert_eq!(top.detail, "handle_userfault");
    assert!(
        within(top.wait_ns, measured, 0.10),
        "{} vs {measured}",
        top.wait_ns
    );

    let sleep = &lock.held_across_sleep[0];
    assert_eq!(sleep.holder_pid, outcome.holder_tid);
    assert_eq!(sleep.holder_comm, "fault-holder");
    assert_eq!(sleep.function, "handle_userfault");
    assert_eq!(sleep.waiters, WAITERS as u64);
    assert!(
        within(sleep.waiter_wait_ns, measured, 0.10),
        "{} vs {measured}",
        sleep.waiter_wait_ns
    );
    let held = outcome.fault_held.as_nanos() as u64;
    assert!(
        within(sleep.slept_ns, held, 0.10),
        "slept {} ns vs fault held {held} ns",
        sleep.slept_ns
    );
    assert!(
        sleep.stack.iter().any(|f| f.contains("pipe_write")),
        "{:?}",
        sleep.stack
    );

    // The timeline excerpt centres on the longest writer's wait and shows the chain: the
    // holder holding the mutex across its sleep in the fault, the writers waiting.
    let timeline = analysis.timeline.as_ref().expect("a timeline excerpt");
    eprintln!(
        "timeline: {} ({} us), {} cpu lanes, tasks {:?}",
        timeline.focus,
        (timeline.end_ns - timeline.start_ns) / 1_000,
        timeline.cpus.len(),
        timeline
            .tasks
            .iter()
            .map(|t| (t.pid, t.comm.as_str(), t.states.len(), t.locks.len()))
            .collect::<Vec<_>>()
    );
    assert!(timeline.focus.contains("pipe_write"), "{}", timeline.focus);
    let lane = |pid: i32| timeline.tasks.iter().find(|t| t.pid == pid);
    let holder = lane(outcome.holder_tid).expect("the holder has a lane");
    let hold = holder
        .locks
        .iter()
        .find(|l| l.role == LockRole::Hold && l.lock == lock.name)
        .expect("the holder's hold of the mutex");
    // It held the mutex across most of the fault, and slept in it meanwhile.
    assert!(
        hold.end_ns - hold.start_ns >= held * 8 / 10,
        "hold {} ns vs fault {held} ns",
        hold.end_ns - hold.start_ns
    );
    let asleep: u64 = holder
        .states
        .iter()
        .filter(|s| s.state == TaskState::Asleep)
        .map(|s| {
            s.end_ns
                .min(hold.end_ns)
                .saturating_sub(s.start_ns.max(hold.start_ns))
        })
        .sum();
    assert!(
        asleep >= (hold.end_ns - hold.start_ns) * 8 / 10,
        "asleep {asleep} ns of a {} ns hold",
        hold.end_ns - hold.start_ns
    );
    let waiting_writers = outcome
        .waiter_tids
        .iter()
        .filter(|&&tid| {
            lane(tid).is_some_and(|t| {
                t.locks
                    .iter()
                    .any(|l| l.role == LockRole::Wait && l.lock == lock.name)
            })
        })
        .count();
    assert_eq!(waiting_writers, WAITERS);
    // Slices are inside the window and each lane's states do not overlap.
    for t in &timeline.tasks {
        for pair in t.states.windows(2) {
            assert!(pair[0].end_ns <= pair[1].start_ns, "{t:?}");
        }
        assert!(t
            .states
            .iter()
            .all(|s| s.start_ns >= timeline.start_ns && s.end_ns <= timeline.end_ns));
    }
    assert!(!timeline.cpus.is_empty());
}
