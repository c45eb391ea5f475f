//! What must not outlive vmscale, however it ends.
//!
//! Everything temporary vmscale puts on the system is registered here while it exists: a
//! file written beside its final name ([`crate::output`]), a run directory under its hidden
//! name (run directory (`vmscale_run::RunDir`)), a scratch directory, a tracefs instance. Its owner removes it on
//! every ordinary path: drop on an error, unwinding from a panic, a cooperative stop after a
//! signal. The registry serves the exits that skip owners:
//!
//! - a signal in a command that has no cooperative stop (export, compare, report):
//!   [`remove_all_for_exit`] removes everything and the caller exits;
//! - an allocation that fails, on which Rust would abort: [`GuardedAlloc`] runs
//!   [`abandon`], which removes everything and exits with one line;
//! - SIGKILL, where nothing runs: every registered name carries its owner
//!   ([`crate::ProcessStamp`]), so the next run, or `vmscale doctor --cleanup`, removes it.
//!
//! Failure paths need what has just run out, so they reserve it before anything starts:
//! file descriptors ([`reserve_fds`]) and, under an address-space limit (`ulimit -v`), room
//! to allocate in ([`reserve_memory`]). Both are given back at the start of a cleanup.
//!
//! Creating and finishing a registered thing happen under the registry's lock
//! ([`create`], [`settle`]), and an exit takes the lock for good, so nothing is created
//! after the exit path has looked, and nothing it removed is renamed into place.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// What a registered path is, which says how to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file: unlinked.
    File,
    /// A directory and everything in it.
    Tree,
    /// A tracefs instance directory: tracing switched off, then removed (the kernel tears
    /// down its events and buffers with it).
    TraceInstance,
}

struct Entry {
    id: u64,
    kind: Kind,
    path: CString,
}

/// Room for the few things alive at once (a run directory, its tracefs instance, an output
/// file), allocated when the registry is first used so that registering does not allocate
/// under the lock an allocation failure's exit path needs.
const ENTRIES: usize = 64;

static REGISTRY: OnceLock<Mutex<Vec<Entry>>> = OnceLock::new();

fn registry() -> &'static Mutex<Vec<Entry>> {
    REGISTRY.get_or_init(|| Mutex::new(Vec::with_capacity(ENTRIES)))
}

fn lock() -> MutexGuard<'static, Vec<Entry>> {
    // Entries are pushed and removed whole: a panic elsewhere cannot leave one half-made.
    registry()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: NUL in path", path.display()),
        )
    })
}

/// A registered path. Dropping it only forgets the path (its owner has removed it, or made
/// it permanent); see [`settle`] to do either under the registry's lock.
#[derive(Debug)]
pub struct Registered {
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let id = self.id;
        lock().retain(|e| e.id != id);
    }
}

/// Runs `create` (which makes `path`) under the registry's lock and registers `path` if it
/// succeeds: an exit path that runs meanwhile either sees it or runs before it exists (and
/// then holds the lock until the process is gone, so it never will).
pub fn create<T>(
    kind: Kind,
    path: &Path,
    create: impl FnOnce(&Path) -> std::io::Result<T>,
) -> std::io::Result<(T, Registered)> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let c = c_path(path)?;
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut entries = lock();
    let made = create(path)?;
    entries.push(Entry { id, kind, path: c });
    Ok((made, Registered { id }))
}

/// Runs `finish` (a rename into place, or the owner's own removal) under the registry's
/// lock, then forgets the path: an exit path cannot remove it half-way through, nor after
/// it has become permanent.
pub fn settle<T>(registered: Registered, finish: impl FnOnce() -> T) -> T {
    let mut entries = lock();
    let result = finish();
    entries.retain(|e| e.id != registered.id);
    drop(entries);
    // Already forgotten: dropping it would take the lock again for nothing.
    std::mem::forget(registered);
    result
}

/// [`settle`] for a `finish` that may fail (a rename to a name that is taken): the path is
/// forgotten only when it succeeds, and stays registered otherwise.
pub fn settle_on_success<T, E>(
    registered: &mut Option<Registered>,
    finish: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    let mut entries = lock();
    let result = finish();
    if result.is_ok() {
        if let Some(done) = registered.take() {
            entries.retain(|e| e.id != done.id);
            std::mem::forget(done);
        }
    }
    result
}

/// [`settle_on_success`] for paths that belong together (one run's table files): `finish(i)`
/// makes the `i`th permanent, all under one hold of the registry's lock, so an exit path
/// finds every one of them still registered or none. On the first failure the rest stay
/// registered, for their owners to remove.
pub fn settle_all_on_success<E>(
    registered: &mut [Option<Registered>],
    mut finish: impl FnMut(usize) -> Result<(), E>,
) -> Result<(), E> {
    let mut entries = lock();
    for (i, slot) in registered.iter_mut().enumerate() {
        finish(i)?;
        if let Some(done) = slot.take() {
            entries.retain(|e| e.id != done.id);
            std::mem::forget(done);
        }
    }
    Ok(())
}

/// Removes everything registered, for a process about to exit without running its owners'
/// cleanup (a signal in a command that does not stop cooperatively). The registry stays
/// locked: nothing can be created or renamed into place until the process is gone. Returns
/// how many things were removed.
pub fn remove_all_for_exit() -> usize {
    let entries = lock();
    let removed = entries.iter().filter(|e| remove(e)).count();
    std::mem::forget(entries);
    removed
}

/// Removes one entry; whether something was there to remove.
fn remove(entry: &Entry) -> bool {
    let path = Path::new(std::ffi::OsStr::from_bytes(entry.path.as_bytes()));
    match entry.kind {
        Kind::File => std::fs::remove_file(path).is_ok(),
        Kind::Tree => {
            // A writer may still be adding files: a few tries empty it.
            for _ in 0..5 {
                match std::fs::remove_dir_all(path) {
                    Ok(()) => return true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            false
        }
        Kind::TraceInstance => {
            let _ = std::fs::write(path.join("tracing_on"), "0");
            // rmdir is refused while a reader still has a per-CPU file open.
            let deadline = Instant::now() + Duration::from_secs(1);
            loop {
                match std::fs::remove_dir(path) {
                    Ok(()) => return true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => return false,
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reserves

/// Descriptors held back for cleanup: removing a run directory opens one per level, and
/// switching a tracefs instance off opens its `tracing_on`.
pub const RESERVED_FDS: usize = 4;

static FDS: OnceLock<Mutex<Vec<std::fs::File>>> = OnceLock::new();

fn fd_reserve() -> &'static Mutex<Vec<std::fs::File>> {
    FDS.get_or_init(|| Mutex::new(Vec::with_capacity(RESERVED_FDS)))
}

/// Holds [`RESERVED_FDS`] descriptors (of /dev/null) until [`release_fds`], so a cleanup
/// that runs because descriptors ran out has some. Fails when they cannot be opened: the
/// caller's limit is too low to start.
pub fn reserve_fds() -> std::io::Result<()> {
    let mut held = fd_reserve()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    while held.len() < RESERVED_FDS {
        held.push(std::fs::File::open("/dev/null")?);
    }
    Ok(())
}

/// Closes the reserved descriptors, making room for a cleanup. Allocates nothing.
pub fn release_fds() {
    if let Some(Ok(mut held)) = FDS.get().map(Mutex::try_lock) {
        held.clear();
    }
}

/// Address space held back under an address-space limit: enough for a cleanup's
/// allocations, an error line and the exit.
const MEMORY_RESERVE: usize = 16 << 20;

static MEMORY: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The address-space limit (`ulimit -v`, RLIMIT_AS) in bytes, if there is one.
pub fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// The smallest reserve worth holding: a cleanup removes a run directory and a tracefs
/// instance with a few pages; below this, a limit that tight leaves vmscale no room to run.
const MIN_MEMORY_RESERVE: usize = 2 << 20;

/// Room left beside the reserve for the first threads (the signal thread's 2 MiB stack,
/// guard and signal stack).
const THREAD_ROOM: usize = 4 << 20;

/// The size of the reserve mapped at [`MEMORY`].
static MEMORY_LEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Under an address-space limit, maps (without touching) up to [`MEMORY_RESERVE`] bytes
/// that [`abandon`] unmaps first, so the cleanup after an allocation failure has room: the
/// largest of 16, 8, 4 and 2 MiB that fits. Without a limit there is nothing to hold back
/// for. Fails when not even [`MIN_MEMORY_RESERVE`] fits, before anything is created: a
/// failure then could not be cleaned up.
pub fn reserve_memory() -> Result<(), String> {
    let Some(limit) = address_space_limit() else {
        return Ok(());
    };
    if !MEMORY.load(Ordering::Acquire).is_null() {
        return Ok(());
    }
    // Each of glibc's per-thread arenas reserves 64 MiB of address space; with one per
    // thread up to 8 per CPU they alone exhaust a limit of a few hundred MiB. Under a limit,
    // two are enough; under one below 256 MiB, one: a second arena would take a quarter or
    // more of it, and where it cannot be made at all, the threads that asked for it map
    // pages of their own for each allocation until none fits, and glibc aborts the first
    // whose TLS destructor list it cannot allocate (every `record` at 38 MB did).
    let arenas = if limit < 256 << 20 { 1 } else { 2 };
    // SAFETY: mallopt only sets a tunable of the allocator.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    let map = |len: usize| {
        // SAFETY: a fresh anonymous mapping with no access; nothing else refers to it.
        unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        }
    };
    let mut len = MEMORY_RESERVE;
    while len >= MIN_MEMORY_RESERVE {
        // The reserve only where the first threads fit beside it: their stacks are mapped
        // outside the allocator, and std panics in a thread whose signal stack finds no
        // room.
        let probe = map(len + THREAD_ROOM);
        if probe == libc::MAP_FAILED {
            len /= 2;
            continue;
        }
        // SAFETY: the probe just mapped, never accessed.
        unsafe { libc::munmap(probe, len + THREAD_ROOM) };
        let region = map(len);
        if region != libc::MAP_FAILED {
            MEMORY_LEN.store(len, Ordering::Release);
            if MEMORY
                .compare_exchange(
                    std::ptr::null_mut(),
                    region,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
            {
                // SAFETY: our own mapping, which lost the race to be the reserve; unused.
                unsafe { libc::munmap(region, len) };
            }
            return Ok(());
        }
        len /= 2;
    }
    Err(format!(
        "the address-space limit of {} KiB (ulimit -v) leaves no room for vmscale to run and \
         clean up after itself: raise it",
        limit >> 10
    ))
}

fn release_memory() {
    let region = MEMORY.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !region.is_null() {
        // SAFETY: the mapping made by reserve_memory, of the size it stored before
        // publishing it, never accessed, unmapped once (the swap above hands it to one
        // caller).
        unsafe { libc::munmap(region, MEMORY_LEN.load(Ordering::Acquire)) };
    }
}

// ---------------------------------------------------------------------------------------
// The exit after an allocation failure

static DYING: AtomicBool = AtomicBool::new(false);
/// The thread that runs the exit, to tell its own re-entry (an allocation failing again
/// inside the cleanup) from another thread's.
static DYING_TID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Whether the process is ending through [`abandon`]. What other threads see go wrong
/// meanwhile (files that vanish under them, the run directory removed) is the cleanup's
/// doing, not news: they say nothing, so that the exit stays one line.
pub fn ending() -> bool {
    DYING.load(Ordering::Acquire)
}

/// Ends the process after something it cannot recover from (an allocation failed): gives
/// back the reserves, lets go of every open file above stderr ([`release_files`]: a
/// tracefs instance cannot be removed while its per-CPU files are open, and nothing will
/// read or write them again), removes everything registered, writes `message` as one line
/// and exits with `code`.
/// Other threads that get here meanwhile wait for the exit.
pub fn abandon(code: i32, message: &[u8]) -> ! {
    let tid = crate::gettid() as libc::pid_t;
    if DYING.swap(true, Ordering::AcqRel) {
        if DYING_TID.load(Ordering::Acquire) == tid {
            // The cleanup itself failed to allocate: say so and go, without it.
            write_stderr(message);
            // SAFETY: ends the process at once.
            unsafe { libc::_exit(code) }
        }
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    DYING_TID.store(tid, Ordering::Release);
    release_memory();
    release_fds();
    // Threads that lose their files must not panic onto the terminal: the one line
    // below is the error. (A boxed closure that captures nothing allocates nothing.)
    // A thread already panicking may not change the hook (it would panic, here, where
    // nothing may unwind).
    if !std::thread::panicking() {
        std::panic::set_hook(Box::new(|_| {}));
    }
    release_files();
    release_shared_files();
    // The thread that failed may hold the registry's lock; then nothing can be removed
    // safely and the next run removes what is left.
    let deadline = Instant::now() + Duration::from_secs(1);
    // A registry never used has nothing to remove (and making it would allocate).
    let Some(registry) = REGISTRY.get() else {
        write_stderr(message);
        // SAFETY: ends the process at once.
        unsafe { libc::_exit(code) }
    };
    let entries = loop {
        match registry.try_lock() {
            Ok(entries) => break Some(entries),
            Err(std::sync::TryLockError::Poisoned(p)) => break Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => break None,
        }
    };
    if let Some(entries) = entries {
        for entry in entries.iter() {
            remove(entry);
        }
        std::mem::forget(entries);
    }
    write_stderr(message);
    // SAFETY: _exit ends the process at once, without running anything that could
    // allocate; the kernel closes what is left.
    unsafe { libc::_exit(code) }
}

std::thread_local! {
    /// This thread runs on a private copy of the fd table ([`note_private_fd_table`]).
    static PRIVATE_FD_TABLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The process's shared fd table was let go of by [`on_release_signal`].
static SHARED_RELEASED: AtomicBool = AtomicBool::new(false);
static RELEASE_HANDLER: AtomicBool = AtomicBool::new(false);

/// Says that the calling thread now runs on a private fd table (`unshare(CLONE_FILES)`):
/// if it ever has to end the process, [`release_files`] on its own table would not let go
/// of the process's files (a tracefs instance's per-CPU files, which keep the instance
/// from being removed), so it asks the main thread to ([`install_release_handler`]).
pub fn note_private_fd_table() {
    PRIVATE_FD_TABLE.with(|private| private.set(true));
}

/// Installs the handler through which a thread on a private fd table has the main thread,
/// which always runs on the process's shared table, let go of that table's files when the
/// process must end. Allocates nothing. Call once, early, from the main thread.
pub fn install_release_handler() {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler is an
    // extern "C" function that makes only async-signal-safe system calls (open, fcntl,
    // dup3, getrlimit) and an atomic store.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_release_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(RELEASE_SIGNAL, &action, std::ptr::null_mut()) == 0 {
            RELEASE_HANDLER.store(true, Ordering::Release);
        }
    }
}

/// Makes an abort (glibc's own, when it cannot allocate for a thread's TLS destructors
/// under an address-space limit; or any other) end the process as a failed allocation does:
/// what the run created removed, one line, exit 2 under an address-space limit and 1
/// otherwise. Without it, an abort left the tracefs instance and the partial run directory
/// behind. Allocates nothing. Call once, early.
pub fn install_abort_handler() {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler ends
    // the process through `abandon`, which releases the memory reserve before it allocates
    // and never returns.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_abort_signal as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGABRT, &action, std::ptr::null_mut());
    }
}

extern "C" fn on_abort_signal(_: libc::c_int) {
    let code = if address_space_limit().is_some() {
        2
    } else {
        1
    };
    abandon(
        code,
        b"vmscale: error: aborted by the C library (its reason is the line above: under an address-space limit, memory it could not get); what the run had created was removed\n",
    )
}

/// The signal [`install_release_handler`] takes over; nothing else in vmscale uses it.
const RELEASE_SIGNAL: libc::c_int = libc::SIGUSR2;

extern "C" fn on_release_signal(_: libc::c_int) {
    release_files();
    SHARED_RELEASED.store(true, Ordering::Release);
}

/// From a thread on a private fd table: has the main thread let go of the shared table's
/// files, and waits for it a little (it runs the handler as soon as it is scheduled,
/// whether it waits in a join, sleeps or runs).
fn release_shared_files() {
    if !PRIVATE_FD_TABLE.with(|private| private.get()) || !RELEASE_HANDLER.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: getpid has no preconditions; tgkill sends the signal to the main thread
    // (whose tid is the process id), whose handler is installed.
    unsafe {
        let pid = libc::getpid();
        libc::syscall(libc::SYS_tgkill, pid, pid, RELEASE_SIGNAL);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while !SHARED_RELEASED.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Lets go of every file the process has open above stderr, without closing a number: each
/// descriptor is made a copy of /dev/null. A tracefs instance cannot be removed while its
/// per-CPU files are open, and the threads that own them are not going to close them; but
/// closing the numbers would let a thread that does close its own later close a descriptor
/// the cleanup has opened under the same number meanwhile.
fn release_files() {
    // SAFETY: open with a NUL-terminated literal path; the result is checked.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if null < 0 {
        return;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let highest = limit.rlim_cur.min(1 << 20) as libc::c_int;
    for fd in 3..highest {
        // SAFETY: F_GETFD only asks whether `fd` is open; dup3 then replaces that open
        // descriptor with a copy of /dev/null, closing its file and keeping the number.
        unsafe {
            if fd != null && libc::fcntl(fd, libc::F_GETFD) >= 0 {
                libc::dup3(null, fd, libc::O_CLOEXEC);
            }
        }
    }
}

fn write_stderr(bytes: &[u8]) {
    let mut left = bytes;
    while !left.is_empty() {
        // SAFETY: writes from a live slice to stderr.
        let n = unsafe { libc::write(2, left.as_ptr().cast(), left.len()) };
        if n <= 0 {
            return;
        }
        left = &left[n as usize..];
    }
}

/// A line built without allocating, for the allocation-failure path.
struct Line {
    bytes: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line {
            bytes: [0; 256],
            len: 0,
        }
    }

    fn push(&mut self, text: &[u8]) -> &mut Line {
        let n = text.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&text[..n]);
        self.len += n;
        self
    }

    fn number(&mut self, mut value: u64) -> &mut Line {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.push(&digits[at..])
    }
}

/// Exit code after an allocation failure: 2 under an address-space limit (the request
/// does not fit what this process may use, like any request the host cannot satisfy), 1
/// when memory itself ran out.
pub fn out_of_memory(size: usize) -> ! {
    let limit = address_space_limit();
    let mut line = Line::new();
    line.push(b"vmscale: error: out of memory: an allocation of ")
        .number(size as u64)
        .push(b" bytes failed");
    match limit {
        Some(limit) => line
            .push(b" under the address-space limit of ")
            .number(limit >> 10)
            .push(b" KiB (raise `ulimit -v` or ask for less)"),
        None => line.push(b" (free memory or ask for less)"),
    };
    line.push(b"; what the run had created was removed\n");
    let Line { bytes, len } = line;
    abandon(if limit.is_some() { 2 } else { 1 }, &bytes[..len])
}

/// Under an address-space limit, a thread that starts while the limit is reached cannot map
/// its signal stack, and std panics in it before it runs any of vmscale's code ("failed to
/// allocate an alternative stack"), on the way to an abort. That is an allocation failure
/// like any other: this hook ends the process as [`out_of_memory`] does (cleanup, one line,
/// exit 2) and leaves every other panic to the hook it replaces.
pub fn install_thread_stack_hook() {
    if address_space_limit().is_none() {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info
            .payload_as_str()
            .is_some_and(|m| m.starts_with("failed to allocate an alternative stack"))
        {
            let limit = address_space_limit().unwrap_or(0);
            let mut line = Line::new();
            line.push(b"vmscale: error: out of memory: a new thread's signal stack found no room under the address-space limit of ")
                .number(limit >> 10)
                .push(b" KiB (raise `ulimit -v` or ask for less); what the run had created was removed\n");
            let Line { bytes, len } = line;
            abandon(2, &bytes[..len]);
        }
        previous(info);
    }));
}

/// Once the process is ending ([`abandon`]), every thread but the one cleaning up stops at
/// its next allocation until the exit: the room the reserve gave back is the cleanup's.
/// Without this, the other threads (trace readers, the sampler) took it back within
/// microseconds, and removing the run directory failed half way for want of a page.
#[inline]
fn park_unless_cleaning() {
    if DYING.load(Ordering::Acquire) && DYING_TID.load(Ordering::Acquire) != crate::gettid() as i32
    {
        loop {
            // Sleeping allocates nothing; the process exits under this thread.
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// The system allocator, except that a failed allocation ends the process through
/// [`out_of_memory`] (cleanup, one line, exit 2 or 1) instead of Rust's abort, which would
/// leave the run's directory and tracefs instance behind. Install it in the binary:
/// `#[global_allocator] static ALLOC: GuardedAlloc = GuardedAlloc;`.
pub struct GuardedAlloc;

// SAFETY: every call is forwarded to the system allocator with its arguments unchanged; a
// null result never returns (out_of_memory diverges), which callers accept as any non-null
// pointer of the requested layout.
unsafe impl GlobalAlloc for GuardedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        park_unless_cleaning();
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        park_unless_cleaning();
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        park_unless_cleaning();
        // SAFETY: forwarded as received.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vmscale-cleanup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn settled_paths_are_forgotten_and_created_ones_registered() {
        let dir = scratch("registry");
        let file = dir.join("f");
        let (_, registered) = create(Kind::File, &file, |p| std::fs::write(p, b"x")).unwrap();
        assert!(lock()
            .iter()
            .any(|e| e.path.as_bytes() == file.as_os_str().as_bytes()));
        settle(registered, || ());
        assert!(!lock()
            .iter()
            .any(|e| e.path.as_bytes() == file.as_os_str().as_bytes()));
        // A failed creation registers nothing.
        let missing = dir.join("no/such/dir/f");
        assert!(create(Kind::File, &missing, |p| std::fs::write(p, b"x")).is_err());
        assert!(!lock()
            .iter()
            .any(|e| e.path.as_bytes() == missing.as_os_str().as_bytes()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_kind_is_removed() {
        let dir = scratch("kinds");
        let file = dir.join("file");
        std::fs::write(&file, b"x").unwrap();
        let tree = dir.join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/c"), b"x").unwrap();
        for (kind, path) in [(Kind::File, &file), (Kind::Tree, &tree)] {
            let entry = Entry {
                id: 0,
                kind,
                path: c_path(path).unwrap(),
            };
            assert!(remove(&entry), "{kind:?}");
            assert!(!path.exists(), "{kind:?}");
            assert!(!remove(&entry), "{kind:?} removed twice");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_are_built_without_allocating() {
        let mut line = Line::new();
        line.push(b"a ")
            .number(0)
            .push(b" ")
            .number(18_446_744_073_709_551_615);
        assert_eq!(&line.bytes[..line.len], b"a 0 18446744073709551615");
    }

    #[test]
    fn reserved_fds_are_held_and_released() {
        reserve_fds().unwrap();
        assert_eq!(fd_reserve().lock().unwrap().len(), RESERVED_FDS);
        release_fds();
        assert!(fd_reserve().lock().unwrap().is_empty());
    }
}
