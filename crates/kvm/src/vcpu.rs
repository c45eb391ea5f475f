//! vCPU threads and the protocol that kicks them out of KVM_RUN, counts them back in and
//! resumes them.
//!
//! A kick is `immediate_exit = 1` in the vCPU's shared `kvm_run` page plus a real-time
//! signal sent to its thread. The signal interrupts a KVM_RUN in progress (the guest exits
//! with EINTR); the flag covers the window where the thread is just about to enter KVM_RUN
//! and the signal would land before it. Both are needed for a kick that is never lost.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_ioctls::{VcpuExit, VcpuFd};
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

use crate::Error;

/// Signal used for kicks: the first real-time signal, unused by the Rust runtime.
fn kick_signal() -> libc::c_int {
    SIGRTMIN()
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Nothing to do: delivery alone makes KVM_RUN return EINTR.
}

fn install_kick_handler() -> Result<(), Error> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let outcome = INSTALLED
        .get_or_init(|| register_signal_handler(kick_signal(), on_kick).map_err(|e| e.errno()));
    outcome.map_err(|errno| {
        Error::Setup(format!(
            "cannot install the vCPU kick signal handler (errno {errno})"
        ))
    })
}

/// State shared by the controller and every vCPU thread, under one mutex.
#[derive(Default)]
struct Shared {
    pause_requested: bool,
    stop: bool,
    /// vCPU threads that are out of KVM_RUN and waiting for resume.
    paused: usize,
    /// Threads that hit an unexpected exit; they park (still counted as out) until stop.
    failures: Vec<String>,
}

/// The start and the stop of the vCPU threads avoid the shared mutex. Under overcommit (512
/// vCPUs spinning on 2 CPUs) a thread preempted while holding it makes every other waiter
/// wait a whole round of the run queue, about a second; the controller must see a signal,
/// and the threads must leave, faster than that.
pub(crate) struct Control {
    shared: Mutex<Shared>,
    changed: Condvar,
    /// Set first when the set stops: a thread back from KVM_RUN leaves without the mutex.
    stop: AtomicBool,
    /// vCPU threads that have entered KVM_RUN at least once, and those that failed.
    started: AtomicUsize,
    failed: AtomicUsize,
    /// Opened once every vCPU thread exists (or the set stops): until then each waits, so
    /// that threads already running guest code do not starve the thread still creating the
    /// others, and its checks of the interrupt flag.
    gate: Mutex<bool>,
    gate_opened: Condvar,
    /// Per vCPU: the host TSC when its thread last entered KVM_RUN after a pause, written
    /// by that thread, so a caller can tell a resumed thread's scheduling delay from KVM's
    /// entry into the guest.
    entered_tsc: Vec<AtomicU64>,
    /// Per vCPU: its thread's kernel task id, for the trace (0 until the thread runs).
    tids: Vec<AtomicI32>,
}

impl Control {
    fn open_gate(&self) {
        *self.gate.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.gate_opened.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A vCPU thread never panics while holding the lock (it holds it only for counter
        // updates), so a poisoned lock still has consistent counters.
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Pointer to the `immediate_exit` byte of one vCPU's `kvm_run` page.
#[derive(Clone, Copy)]
struct ImmediateExit(*mut u8);

// SAFETY: the pointer targets the vCPU's kvm_run mapping, which lives as long as its VcpuFd.
// The vCPU thread owns that VcpuFd and hands it back through its JoinHandle instead of
// dropping it, and the controller drops it only after joining the thread, after its last
// write through this pointer; so every write happens while the mapping exists, however
// early the thread returns. Writes are volatile single bytes, which KVM reads at KVM_RUN
// entry.
unsafe impl Send for ImmediateExit {}

impl ImmediateExit {
    fn set(self, value: u8) {
        // SAFETY: see the Send impl: the mapping outlives every holder of this pointer.
        unsafe { std::ptr::write_volatile(self.0, value) }
    }
}

struct VcpuThread {
    /// Gives back the thread's VcpuFd, so its kvm_run page is unmapped only after the join.
    handle: JoinHandle<VcpuFd>,
    immediate_exit: ImmediateExit,
}

/// The running vCPUs of one VM.
pub(crate) struct VcpuSet {
    control: Arc<Control>,
    threads: Vec<VcpuThread>,
    /// Set by a signal: a pause or resume waiting for slow vCPUs ends with
    /// [`Error::Interrupted`] (the set is then dropped, which stops every thread).
    interrupt: Option<Arc<AtomicBool>>,
}

/// Why a wait on the vCPU threads ended before they got there.
enum WaitEnd {
    TimedOut(Duration),
    Interrupted,
}

/// How long a pause may wait for the slowest vCPU before it is reported as stuck.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the wait for vCPUs to start looks at them and at the interrupt flag.
const START_POLL: Duration = Duration::from_millis(5);
/// How often a pause or resume waiting for slow vCPUs looks at the interrupt flag.
const INTERRUPT_POLL: Duration = Duration::from_millis(20);

impl VcpuSet {
    /// Starts one thread per vCPU, each looping in KVM_RUN until stopped.
    ///
    /// With `cpus` non-empty, vCPU i runs only on `cpus[i % cpus.len()]`; otherwise on every
    /// CPU the process may use (never the caller's own pin, which threads would inherit).
    /// Returns once every vCPU has entered KVM_RUN ([`Error::Stuck`] after
    /// `start_timeout`). A set `interrupt` stops the start between two threads or while
    /// waiting for them; those started are stopped.
    pub(crate) fn start(
        vcpus: Vec<VcpuFd>,
        cpus: &[usize],
        interrupt: Option<Arc<AtomicBool>>,
        start_timeout: Duration,
    ) -> Result<VcpuSet, Error> {
        install_kick_handler()?;
        let control = Arc::new(Control {
            shared: Mutex::new(Shared::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            gate: Mutex::new(false),
            gate_opened: Condvar::new(),
            entered_tsc: (0..vcpus.len()).map(|_| AtomicU64::new(0)).collect(),
            tids: (0..vcpus.len()).map(|_| AtomicI32::new(0)).collect(),
        });
        let process_cpus = crate::affinity::process_cpus()
            .map_err(|e| Error::Setup(format!("cannot read the process's CPU set: {e}")))?;
        let mut set = VcpuSet {
            control,
            threads: Vec::with_capacity(vcpus.len()),
            interrupt,
        };
        for (index, mut vcpu) in vcpus.into_iter().enumerate() {
            if set.interrupted() {
                // `set` drops here and stops the threads already started.
                return Err(Error::Interrupted);
            }
            let immediate_exit = ImmediateExit(&mut vcpu.get_kvm_run().immediate_exit);
            let control = Arc::clone(&set.control);
            let placement = match cpus {
                [] => process_cpus.clone(),
                _ => vec![cpus[index % cpus.len()]],
            };
            let spawned = std::thread::Builder::new()
                .name(format!("vcpu{index}"))
                .stack_size(256 * 1024)
                .spawn(move || {
                    if let Err(e) = crate::affinity::set_current_thread_cpus(&placement) {
                        let failure =
                            format!("vCPU {index}: cannot run on CPUs {placement:?}: {e}");
                        park_until_stop(failure, &control);
                        return vcpu;
                    }
                    run_loop(index, vcpu, immediate_exit, &control)
                });
            match spawned {
                Ok(handle) => set.threads.push(VcpuThread {
                    handle,
                    immediate_exit,
                }),
                // `set` drops here and stops the threads already started.
                Err(e) => {
                    return Err(Error::Setup(format!(
                        "cannot start vCPU thread {index}: {e}"
                    )))
                }
            }
        }
        // Every thread exists (threads inherit their creator's policy, so not before):
        // served at once from here, or the wakeup of every vCPU at the gate would make this
        // thread wait a whole run-queue round before its next step. Best effort (root).
        let urgent = crate::affinity::FifoGuard::enter().ok();
        set.control.open_gate();
        if let Err(e) = set.wait_started(start_timeout) {
            // Stopped while still served at once: back to its own policy first, this thread
            // would wait a run-queue round before it could stop anything.
            drop(set);
            drop(urgent);
            return Err(e);
        }
        drop(urgent);
        Ok(set)
    }

    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Whether the interrupt flag the set was started with is set.
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupt
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// Waits until every vCPU thread has entered KVM_RUN once, or the interrupt flag is set
    /// (looked at every few milliseconds, without taking the shared mutex).
    fn wait_started(&self, timeout: Duration) -> Result<(), Error> {
        let n = self.len();
        let start = Instant::now();
        loop {
            let started = self.control.started.load(Ordering::Acquire);
            if started + self.control.failed.load(Ordering::Acquire) >= n {
                break;
            }
            if self.interrupted() {
                return Err(Error::Interrupted);
            }
            if start.elapsed() >= timeout {
                return Err(Error::Stuck(format!(
                    "{started} of {n} vCPUs entered KVM_RUN within {timeout:?}"
                )));
            }
            std::thread::sleep(START_POLL);
        }
        self.check_failures()
    }

    /// Kicks every vCPU out of KVM_RUN and returns once all of them are out.
    pub(crate) fn pause(&self) -> Result<(), Error> {
        {
            let mut shared = self.control.lock();
            shared.pause_requested = true;
            // Under the lock, so a thread cannot clear the flag after we set it.
            for t in &self.threads {
                t.immediate_exit.set(1);
            }
        }
        self.signal_all();
        let n = self.len();
        self.wait_for(PAUSE_TIMEOUT, |s| s.paused + s.failures.len() >= n)
            .map_err(|end| match end {
                WaitEnd::Interrupted => Error::Interrupted,
                WaitEnd::TimedOut(waited) => {
                    Error::Stuck(format!("vCPUs still in KVM_RUN {waited:?} after a kick"))
                }
            })?;
        self.check_failures()
    }

    /// Lets paused vCPUs go and returns once every one has left the paused state.
    pub(crate) fn resume(&self) -> Result<(), Error> {
        self.release();
        self.wait_released()
    }

    /// Lets paused vCPUs go without waiting for them, as a VMM's resume does: the caller's
    /// cost ends here, while each vCPU still has to be woken, get a CPU and enter the guest.
    pub(crate) fn release(&self) {
        self.control.lock().pause_requested = false;
        self.control.changed.notify_all();
    }

    /// Returns once every released vCPU has left the paused state.
    pub(crate) fn wait_released(&self) -> Result<(), Error> {
        self.wait_for(PAUSE_TIMEOUT, |s| s.paused == 0)
            .map_err(|end| match end {
                WaitEnd::Interrupted => Error::Interrupted,
                WaitEnd::TimedOut(_) => Error::Stuck("paused vCPUs did not resume".into()),
            })?;
        self.check_failures()
    }

    /// Host TSC at vCPU `index`'s last entry into KVM_RUN after a pause (0 before any).
    pub(crate) fn entered_tsc(&self, index: usize) -> u64 {
        self.control.entered_tsc[index].load(Ordering::Acquire)
    }

    /// Kernel task ids of the vCPU threads, in vCPU order.
    pub(crate) fn tids(&self) -> Vec<i32> {
        self.control
            .tids
            .iter()
            .map(|t| t.load(Ordering::Acquire))
            .collect()
    }

    fn check_failures(&self) -> Result<(), Error> {
        match self.control.lock().failures.first() {
            Some(first) => Err(Error::Guest(first.clone())),
            None => Ok(()),
        }
    }

    fn signal_all(&self) {
        for t in &self.threads {
            // ESRCH cannot happen: threads live until joined in Drop.
            let _ = t.handle.kill(kick_signal());
        }
    }

    /// Waits until `done` holds, for at most `timeout`; the interrupt flag is looked at
    /// every [`INTERRUPT_POLL`].
    fn wait_for(&self, timeout: Duration, done: impl Fn(&Shared) -> bool) -> Result<(), WaitEnd> {
        let start = Instant::now();
        let mut shared = self.control.lock();
        while !done(&shared) {
            if self.interrupted() {
                return Err(WaitEnd::Interrupted);
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(WaitEnd::TimedOut(elapsed));
            }
            shared = self
                .control
                .changed
                .wait_timeout(shared, (timeout - elapsed).min(INTERRUPT_POLL))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }
}

impl Drop for VcpuSet {
    fn drop(&mut self) {
        // Best effort (root): each join is served as its thread leaves, not once per
        // run-queue round of the vCPUs still spinning.
        let _urgent = crate::affinity::FifoGuard::enter().ok();
        self.control.stop.store(true, Ordering::Release);
        self.control.open_gate();
        {
            let mut shared = self.control.lock();
            shared.stop = true;
            for t in &self.threads {
                t.immediate_exit.set(1);
            }
        }
        self.control.changed.notify_all();
        self.signal_all();
        for t in self.threads.drain(..) {
            // The VcpuFd comes back and is closed here, after the last write to its page.
            drop(t.handle.join());
        }
    }
}

/// Runs the vCPU until the set stops; returns its VcpuFd for the controller to drop after
/// the join (see the Send impl of [`ImmediateExit`]).
fn run_loop(
    index: usize,
    mut vcpu: VcpuFd,
    immediate_exit: ImmediateExit,
    control: &Control,
) -> VcpuFd {
    let tid = vmscale_sys::gettid() as libc::pid_t;
    control.tids[index].store(tid, Ordering::Release);
    let mut first_entry = true;
    {
        let mut open = control.gate.lock().unwrap_or_else(|p| p.into_inner());
        while !*open {
            open = control
                .gate_opened
                .wait(open)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
    loop {
        if control.stop.load(Ordering::Acquire) {
            return vcpu;
        }
        let mut was_paused = false;
        {
            let mut shared = control.lock();
            if shared.pause_requested && !shared.stop {
                was_paused = true;
                shared.paused += 1;
                control.changed.notify_all();
                while shared.pause_requested && !shared.stop {
                    shared = control
                        .changed
                        .wait(shared)
                        .unwrap_or_else(|p| p.into_inner());
                }
                shared.paused -= 1;
                control.changed.notify_all();
            }
            if shared.stop {
                return vcpu;
            }
            immediate_exit.set(0);
            if first_entry {
                control.started.fetch_add(1, Ordering::Release);
                first_entry = false;
            }
        }
        if was_paused {
            control.entered_tsc[index].store(crate::rdtsc(), Ordering::Release);
        }
        let outcome = match vcpu.run() {
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => None,
            Ok(VcpuExit::Intr) => None,
            Ok(exit) => Some(format!("vCPU {index} exited unexpectedly: {exit:?}")),
            Err(e) => Some(format!("vCPU {index}: KVM_RUN failed: {e}")),
        };
        if let Some(failure) = outcome {
            park_until_stop(failure, control);
            return vcpu;
        }
    }
}

/// A failed vCPU waits for the set to stop (its VcpuFd, and so its kvm_run page, goes back
/// to the controller at the join), counted as out of KVM_RUN meanwhile.
fn park_until_stop(failure: String, control: &Control) {
    let mut shared = control.lock();
    shared.failures.push(failure);
    control.failed.fetch_add(1, Ordering::Release);
    control.changed.notify_all();
    while !shared.stop {
        shared = control
            .changed
            .wait(shared)
            .unwrap_or_else(|p| p.into_inner());
    }
}
