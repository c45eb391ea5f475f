//! A reproducer of a mutex held across a sleep, on the real kernel: one thread write()s to
//! a pipe from a page registered with userfaultfd and not populated, so anon_pipe_write
//! takes pipe->mutex, faults in copy_page_from_iter and sleeps in handle_userfault with the
//! mutex held, while other writers of the same pipe queue on the mutex. Shared by the
//! analysis tests and the command-line tests (`#[path]`). Needs userfaultfd.
#![allow(dead_code)] // each test binary uses its own subset

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
pub struct Outcome {
    pub holder_tid: i32,
    pub waiter_tids: Vec<i32>,
    /// Each waiter's write(), call to return.
    pub waiter_waits: Vec<Duration>,
    /// From the holder's fault reaching userfaultfd to its resolution.
    pub fault_held: Duration,
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

/// Runs the reproducer: the holder faults inside anon_pipe_write, `waiters` writers queue on
/// pipe->mutex, the fault is resolved `hold` after it began.
pub fn pipe_writers_behind_a_userfault(hold: Duration, waiters: usize) -> Outcome {
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
        let writers: Vec<_> = (0..waiters)
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
        let waiter_tids: Vec<i32> = (0..waiters).map(|_| rx.recv().unwrap()).collect();
        // Every waiter must be asleep on the mutex before the clock runs out.
        wait_for_state(&waiter_tids, 'D', "waiters never blocked on the pipe mutex");
        std::thread::sleep(hold.saturating_sub(faulted.elapsed()));
        page.resolve();
        let fault_held = faulted.elapsed();

        holder.join().unwrap();
        let waiter_waits = writers.into_iter().map(|h| h.join().unwrap()).collect();
        drop(write_end);
        assert_eq!(reader.join().unwrap(), 64 * (waiters + 1));
        Outcome {
            holder_tid,
            waiter_tids,
            waiter_waits,
            fault_held,
        }
    })
}
