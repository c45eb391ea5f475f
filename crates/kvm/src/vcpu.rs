//! vCPU threads and the protocol that kicks them out of KVM_RUN, counts them back in and
//! resumes them.
//!
//! A kick is `immediate_exit = 1` in the vCPU's shared `kvm_run` page plus a real-time
//! signal sent to its thread. The signal interrupts a KVM_RUN in progress (the guest exits
//! with EINTR); the flag covers the window where the thread is just about to enter KVM_RUN
//! and the signal would land before it. Both are needed for a kick that is never lost.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
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
    /// vCPU threads that have entered KVM_RUN at least once.
    started: usize,
    /// Threads that hit an unexpected exit; they park (still counted as out) until stop.
    failures: Vec<String>,
}

pub(crate) struct Control {
    shared: Mutex<Shared>,
    changed: Condvar,
    /// Per vCPU: the host TSC when its thread last entered KVM_RUN after a pause, written
    /// by that thread, so a caller can tell a resumed thread's scheduling delay from KVM's
    /// entry into the guest.
    entered_tsc: Vec<AtomicU64>,
    /// Per vCPU: its thread's kernel task id, for the trace (0 until the thread runs).
    tids: Vec<AtomicI32>,
}

impl Control {
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
// The vCPU thread owns that VcpuFd and drops it only after `stop`, and the controller joins
// the thread before dropping its copy, so every write through this pointer happens while
// the mapping exists. Writes are volatile single bytes, which KVM reads at KVM_RUN entry.
unsafe impl Send for ImmediateExit {}

impl ImmediateExit {
    fn set(self, value: u8) {
        // SAFETY: see the Send impl: the mapping outlives every holder of this pointer.
        unsafe { std::ptr::write_volatile(self.0, value) }
    }
}

struct VcpuThread {
    handle: JoinHandle<()>,
    immediate_exit: ImmediateExit,
}

/// The running vCPUs of one VM.
pub(crate) struct VcpuSet {
    control: Arc<Control>,
    threads: Vec<VcpuThread>,
}

/// How long a pause may wait for the slowest vCPU before it is reported as stuck.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(30);

impl VcpuSet {
    /// Starts one thread per vCPU, each looping in KVM_RUN until stopped.
    ///
    /// With `cpus` non-empty, vCPU i runs only on `cpus[i % cpus.len()]`; otherwise on every
    /// CPU the process may use (never the caller's own pin, which threads would inherit).
    pub(crate) fn start(vcpus: Vec<VcpuFd>, cpus: &[usize]) -> Result<VcpuSet, Error> {
        install_kick_handler()?;
        let control = Arc::new(Control {
            shared: Mutex::new(Shared::default()),
            changed: Condvar::new(),
            entered_tsc: (0..vcpus.len()).map(|_| AtomicU64::new(0)).collect(),
            tids: (0..vcpus.len()).map(|_| AtomicI32::new(0)).collect(),
        });
        let process_cpus = crate::affinity::process_cpus()
            .map_err(|e| Error::Setup(format!("cannot read the process's CPU set: {e}")))?;
        let mut set = VcpuSet {
            control,
            threads: Vec::with_capacity(vcpus.len()),
        };
        for (index, mut vcpu) in vcpus.into_iter().enumerate() {
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
                        return;
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
        Ok(set)
    }

    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Waits until every vCPU thread has entered KVM_RUN once.
    pub(crate) fn wait_started(&self, timeout: Duration) -> Result<(), Error> {
        let n = self.len();
        self.wait_for(timeout, |s| s.started + s.failures.len() >= n)
            .map_err(|_| {
                Error::Stuck(format!("not every vCPU entered KVM_RUN within {timeout:?}"))
            })?;
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
            .map_err(|waited| {
                Error::Stuck(format!("vCPUs still in KVM_RUN {waited:?} after a kick"))
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
            .map_err(|_| Error::Stuck("paused vCPUs did not resume".into()))?;
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

    fn wait_for(&self, timeout: Duration, done: impl Fn(&Shared) -> bool) -> Result<(), Duration> {
        let start = Instant::now();
        let mut shared = self.control.lock();
        while !done(&shared) {
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(elapsed);
            }
            shared = self
                .control
                .changed
                .wait_timeout(shared, timeout - elapsed)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }
}

impl Drop for VcpuSet {
    fn drop(&mut self) {
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
            let _ = t.handle.join();
        }
    }
}

fn run_loop(index: usize, mut vcpu: VcpuFd, immediate_exit: ImmediateExit, control: &Control) {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    control.tids[index].store(tid, Ordering::Release);
    let mut first_entry = true;
    loop {
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
                return;
            }
            immediate_exit.set(0);
            if first_entry {
                shared.started += 1;
                first_entry = false;
                control.changed.notify_all();
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
            return;
        }
    }
}

/// A failed vCPU keeps its VcpuFd (and so its kvm_run page) alive until the VM stops, so
/// a kick sent to it later still writes to mapped memory.
fn park_until_stop(failure: String, control: &Control) {
    let mut shared = control.lock();
    shared.failures.push(failure);
    control.changed.notify_all();
    while !shared.stop {
        shared = control
            .changed
            .wait(shared)
            .unwrap_or_else(|p| p.into_inner());
    }
}
