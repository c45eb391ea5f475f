//! One QEMU process: launched with exactly the options asked for, connected over QMP, and
//! never outliving vmscale.

use std::io::BufRead;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::qmp::{Qmp, QmpError, Reply};
use crate::Error;

/// The machine a scenario needs, and nothing more.
#[derive(Debug, Clone)]
pub struct QemuConfig {
    pub binary: PathBuf,
    pub vcpus: usize,
    /// Boot memory.
    pub mem_mib: u64,
    /// DIMM slots for memory hotplug (0: none, and no maxmem).
    pub dimm_slots: usize,
    /// Boot memory plus every DIMM that may be plugged.
    pub maxmem_mib: u64,
    /// `-S`: vCPUs stay stopped until `cont`.
    pub start_paused: bool,
    /// Longest wait for QMP to come up, for one command's reply, and for QEMU to exit.
    pub timeout: Duration,
    /// Set by a signal: every wait on this QEMU (its connection, a reply, an event, its
    /// exit) ends within tens of milliseconds with [`Error::Interrupted`].
    pub interrupt: Option<Arc<AtomicBool>>,
}

impl QemuConfig {
    pub fn new(binary: PathBuf, vcpus: usize, mem_mib: u64) -> QemuConfig {
        QemuConfig {
            binary,
            vcpus,
            mem_mib,
            dimm_slots: 0,
            maxmem_mib: 0,
            start_paused: false,
            timeout: Duration::from_secs(30),
            interrupt: None,
        }
    }

    /// QEMU's arguments, with its QMP socket at `qmp`: a KVM machine with no default
    /// devices and no display, so the only work QEMU does is the firmware on the vCPUs and
    /// what QMP asks of it.
    pub fn args(&self, qmp: &Path) -> Vec<String> {
        let memory = if self.dimm_slots > 0 {
            format!(
                "{}M,slots={},maxmem={}M",
                self.mem_mib, self.dimm_slots, self.maxmem_mib
            )
        } else {
            format!("{}M", self.mem_mib)
        };
        let mut args: Vec<String> = [
            "-enable-kvm",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-smp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(self.vcpus.to_string());
        // Thread names (`CPU 0/KVM`, ...) tell the trace which threads are vCPUs, also
        // those that never leave KVM_RUN while traced.
        args.extend(["-name".to_string(), "vmscale,debug-threads=on".to_string()]);
        args.extend(["-m".to_string(), memory]);
        if self.start_paused {
            args.push("-S".into());
        }
        // QEMU connects to vmscale's listening socket: ready is the greeting arriving, with
        // no polling for a socket file to appear.
        args.extend(["-qmp".to_string(), format!("unix:{}", qmp.display())]);
        args
    }
}

/// The last line QEMU wrote on stderr, kept by a reader thread.
#[derive(Default)]
struct StderrTail {
    last: Option<String>,
}

/// A QEMU that vmscale started.
pub struct Qemu {
    /// `None` once reaped.
    child: Option<Child>,
    pid: u32,
    /// Set by [`Qemu::connect`].
    qmp: Option<Qmp>,
    listener: Option<UnixListener>,
    command_line: String,
    stderr: Arc<Mutex<StderrTail>>,
    stderr_reader: Option<JoinHandle<()>>,
    timeout: Duration,
    interrupt: Option<Arc<AtomicBool>>,
    /// When `spawn` was called (CLOCK_MONOTONIC ns).
    spawned_ns: u64,
    // Last: removed after QEMU is gone.
    _dir: PrivateDir,
}

impl Qemu {
    /// Starts QEMU; [`Qemu::connect`] then waits for its QMP monitor. QEMU is killed when
    /// the calling thread ends (that is how `PR_SET_PDEATHSIG` works): spawn from a thread
    /// that outlives it.
    pub fn spawn(config: &QemuConfig) -> Result<Qemu, Error> {
        let dir = PrivateDir::create()?;
        let socket = dir.path.join("qmp.sock");
        let args = config.args(&socket);
        let command_line = std::iter::once(config.binary.display().to_string())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        let failed = |what: String| Error::Qemu {
            what,
            command_line: command_line.clone(),
            stderr: "nothing on stderr".into(),
        };
        let listener = UnixListener::bind(&socket)
            .map_err(|e| failed(format!("cannot listen on {}: {e}", socket.display())))?;
        let mut command = Command::new(&config.binary);
        command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own group: a terminal's Ctrl-C reaches vmscale alone, which tears QEMU down
            // itself, and a kill of the group also ends what QEMU spawned (a migration's
            // `exec:` helper).
            .process_group(0);
        // The parent's pid, read before fork: the child checks it still has that parent.
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the forked child before exec and calls only prctl and
        // getppid, both async-signal-safe; it allocates nothing and touches no lock.
        unsafe {
            command.pre_exec(move || {
                // QEMU dies with the thread that forked it: a killed vmscale leaves none.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // vmscale died between fork and prctl: the signal will never come.
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("vmscale exited while starting QEMU"));
                }
                Ok(())
            })
        };
        let spawned_ns = crate::monotonic_ns();
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("cannot start {}: {e}", config.binary.display())))?;
        let pid = child.id();
        let stderr = Arc::new(Mutex::new(StderrTail::default()));
        let stderr_reader = child.stderr.take().map(|pipe| {
            let tail = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let line = line.trim();
                    if !line.is_empty() {
                        if let Ok(mut tail) = tail.lock() {
                            tail.last = Some(line.chars().take(300).collect());
                        }
                    }
                }
            })
        });
        Ok(Qemu {
            child: Some(child),
            pid,
            qmp: None,
            listener: Some(listener),
            command_line,
            stderr,
            stderr_reader,
            timeout: config.timeout,
            interrupt: config.interrupt.clone(),
            spawned_ns,
            _dir: dir,
        })
    }

    /// Waits until QEMU's monitor accepts commands (greeting read, capabilities
    /// negotiated); returns the nanoseconds from spawn to then.
    pub fn connect(&mut self) -> Result<u64, Error> {
        let listener = self.listener.take().expect("connect is called once");
        let deadline = Instant::now() + self.timeout;
        let stream = loop {
            let mut fd = libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for a listening socket this function owns.
            let ready = unsafe { libc::poll(&mut fd, 1, 20) };
            if ready > 0 {
                let (stream, _) = listener
                    .accept()
                    .map_err(|e| self.error(format!("accepting QEMU's QMP connection: {e}")))?;
                break stream;
            }
            if self.interrupted() {
                return Err(Error::Interrupted);
            }
            // QEMU connects early in its start-up; an exit before that is its own error.
            if let Some(status) = self.try_reap() {
                return Err(self.error(format!(
                    "QEMU exited ({status}) before connecting to its QMP socket"
                )));
            }
            if Instant::now() >= deadline {
                return Err(self.error(format!(
                    "QEMU did not connect to its QMP socket within {:?}",
                    self.timeout
                )));
            }
        };
        drop(listener);
        let qmp = Qmp::handshake(stream, self.timeout, self.interrupt.clone())
            .map_err(|e| self.qmp_error("greeting", e))?;
        let ready = crate::monotonic_ns() - self.spawned_ns;
        self.qmp = Some(qmp);
        Ok(ready)
    }

    /// Spawn and connect in one.
    pub fn start(config: &QemuConfig) -> Result<Qemu, Error> {
        let mut qemu = Qemu::spawn(config)?;
        qemu.connect()?;
        Ok(qemu)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn interrupted(&self) -> bool {
        self.interrupt
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    pub fn command_line(&self) -> &str {
        &self.command_line
    }

    /// Its threads now, the main thread first.
    pub fn threads(&self) -> Vec<u32> {
        let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|dir| {
                dir.flatten()
                    .filter_map(|t| t.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        tids.sort_unstable_by_key(|&tid| (tid != self.pid, tid));
        tids
    }

    /// Runs one QMP command; the reply carries its round trip.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Reply, Error> {
        let timeout = self.timeout;
        let result = match self.qmp.as_mut() {
            Some(qmp) => qmp.execute(command, arguments, timeout),
            None => Err(QmpError::Closed),
        };
        result.map_err(|e| self.qmp_error(command, e))
    }

    /// Waits for a QMP event for which `wanted` holds.
    pub fn wait_event(
        &mut self,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Result<Value, Error> {
        let timeout = self.timeout;
        let result = match self.qmp.as_mut() {
            Some(qmp) => qmp.wait_event(wanted, timeout),
            None => Err(QmpError::Closed),
        };
        result.map_err(|e| self.qmp_error(what, e))
    }

    pub fn clear_events(&mut self) {
        if let Some(qmp) = self.qmp.as_mut() {
            qmp.clear_events();
        }
    }

    /// `quit`, then waits until the process is reaped; returns the nanoseconds from sending
    /// `quit` to the reap.
    pub fn quit(&mut self) -> Result<u64, Error> {
        let start = crate::monotonic_ns();
        let timeout = self.timeout;
        if let Some(qmp) = self.qmp.as_mut() {
            match qmp.execute("quit", None, timeout) {
                // QEMU may exit before its reply leaves.
                Ok(_) | Err(QmpError::Closed) | Err(QmpError::Io(_)) => {}
                Err(e) => return Err(self.qmp_error("quit", e)),
            }
        }
        let status = self.wait_exit(timeout)?;
        let reaped = crate::monotonic_ns() - start;
        self.qmp = None;
        if !status.success() {
            return Err(self.error(format!("QEMU exited with {status} after quit")));
        }
        Ok(reaped)
    }

    /// Blocks until QEMU exits (pidfd: woken at the exit, not by polling), then reaps it.
    /// The wait looks at the interrupt flag every 20 ms.
    fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        let Some(child) = self.child.as_mut() else {
            return Err(self.error("QEMU was already reaped".into()));
        };
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; the pid is our
        // own unreaped child, so it names this QEMU and no other process.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
        if pidfd >= 0 {
            let deadline = Instant::now() + timeout;
            let exited = loop {
                if self.interrupted() {
                    break Err(Error::Interrupted);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Ok(false);
                }
                let mut fd = libc::pollfd {
                    fd: pidfd as i32,
                    events: libc::POLLIN,
                    revents: 0,
                };
                let millis = left.as_millis().clamp(1, 20) as i32;
                // SAFETY: one valid pollfd on the pidfd opened above.
                if unsafe { libc::poll(&mut fd, 1, millis) } > 0 {
                    break Ok(true);
                }
            };
            // SAFETY: closes the fd opened above, exactly once.
            unsafe { libc::close(pidfd as i32) };
            if !exited? {
                return Err(self.error(format!("QEMU did not exit within {timeout:?} of quit")));
            }
        }
        let child = self.child.as_mut().expect("checked above");
        let status = child.wait().map_err(|e| Error::Qemu {
            what: format!("waiting for QEMU: {e}"),
            command_line: self.command_line.clone(),
            stderr: "nothing on stderr".into(),
        })?;
        self.child = None;
        Ok(status)
    }

    /// Reaps QEMU if it has exited.
    fn try_reap(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        // Its stderr closes with it (nothing it spawned is left before QMP came up): the
        // last line is then complete.
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        Some(status)
    }

    fn qmp_error(&mut self, command: &str, e: QmpError) -> Error {
        if matches!(e, QmpError::Interrupted) {
            return Error::Interrupted;
        }
        let what = match &e {
            QmpError::Reply { .. } => format!("QMP {command} failed: {e}"),
            QmpError::Closed => {
                // Give an exiting QEMU a moment to be reaped so its status is named.
                let status = self.child.as_mut().and_then(|c| {
                    for _ in 0..50 {
                        if let Ok(Some(status)) = c.try_wait() {
                            return Some(status);
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    None
                });
                match status {
                    Some(status) => {
                        self.child = None;
                        if let Some(reader) = self.stderr_reader.take() {
                            let _ = reader.join();
                        }
                        format!("QEMU exited ({status}) during QMP {command}")
                    }
                    None => format!("QMP {command}: {e}"),
                }
            }
            QmpError::Timeout(t) => format!("QMP {command}: no answer within {t:?}"),
            _ => format!("QMP {command}: {e}"),
        };
        self.error(what)
    }

    /// An error about this QEMU: `what`, with its command line and last stderr line.
    pub fn error(&self, what: String) -> Error {
        let stderr = match self.stderr.lock().ok().and_then(|t| t.last.clone()) {
            Some(line) => format!("its last stderr line: {line}"),
            None => "nothing on stderr".into(),
        };
        Error::Qemu {
            what,
            command_line: self.command_line.clone(),
            stderr,
        }
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        self.qmp = None;
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill only sends a signal. The group is the one QEMU leads (spawned with
            // process_group(0)), and QEMU is not reaped yet, so its pid, and with it the
            // group id, cannot have been reused by anything vmscale did not start.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
        }
        if let Some(reader) = self.stderr_reader.take() {
            // The group is gone, so every writer of the pipe is; the reader ends.
            let _ = reader.join();
        }
    }
}

/// A directory only this user can enter, for the QMP socket; removed on drop.
struct PrivateDir {
    path: PathBuf,
}

/// Private directories are named `vmscale-qemu-<pid>-XXXXXX` after the vmscale that made
/// them, so one a killed vmscale left is known by its dead owner.
const DIR_PREFIX: &str = "vmscale-qemu-";

impl PrivateDir {
    fn create() -> Result<PrivateDir, Error> {
        remove_stale_dirs();
        let template =
            std::env::temp_dir().join(format!("{DIR_PREFIX}{}-XXXXXX", std::process::id()));
        let mut bytes = template.as_os_str().as_encoded_bytes().to_vec();
        bytes.push(0);
        // SAFETY: mkdtemp rewrites the trailing XXXXXX of the NUL-terminated buffer we own in
        // place and creates the directory with mode 0700.
        let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
        if made.is_null() {
            return Err(Error::Qemu {
                what: format!(
                    "cannot create a private directory for QEMU's QMP socket in {}: {}",
                    std::env::temp_dir().display(),
                    std::io::Error::last_os_error()
                ),
                command_line: "(not started)".into(),
                stderr: "nothing on stderr".into(),
            });
        }
        bytes.pop();
        // SAFETY: the bytes came from an OsStr plus ASCII replacements by mkdtemp.
        let path =
            PathBuf::from(unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(bytes) });
        Ok(PrivateDir { path })
    }
}

/// Removes the private directories of vmscale processes that no longer exist (killed
/// before they could remove their own). A live owner's, or one whose name does not parse,
/// is left alone.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 sends nothing; it only asks whether the pid exists.
        let gone = unsafe { libc::kill(owner, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
