//! System calls by number, in the numbering of the trace's architecture: x86-64's own, or
//! the generic table arm64 (and RISC-V) use. Names cover the calls the scenarios and their
//! analyses meet; others print as their number.

/// Which numbering a trace's system calls use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arch {
    #[default]
    X86_64,
    /// asm-generic/unistd.h: arm64, RISC-V, LoongArch.
    Generic,
}

impl Arch {
    /// The trace's architecture, from its kernel's system call entry points (x86-64's are
    /// `__x64_sys_*`, arm64's `__arm64_sys_*`, RISC-V's `__riscv_sys_*`); without symbols,
    /// this host's.
    pub fn of(symbols: &vmscale_trace::Kallsyms) -> Arch {
        if symbols.address_of("__x64_sys_ioctl").is_some() {
            Arch::X86_64
        } else if ["__arm64_sys_ioctl", "__riscv_sys_ioctl", "__se_sys_ioctl"]
            .iter()
            .any(|name| symbols.address_of(name).is_some())
        {
            Arch::Generic
        } else {
            Arch::host()
        }
    }

    pub fn host() -> Arch {
        if cfg!(target_arch = "x86_64") {
            Arch::X86_64
        } else {
            Arch::Generic
        }
    }

    pub fn ioctl(self) -> i64 {
        match self {
            Arch::X86_64 => 16,
            Arch::Generic => 29,
        }
    }

    /// The system call's name, or "syscall N".
    pub fn name(self, id: i64) -> String {
        match self {
            Arch::X86_64 => name(id),
            Arch::Generic => generic_name(id),
        }
    }
}

/// asm-generic/unistd.h's numbers.
fn generic_name(id: i64) -> String {
    let name = match id {
        29 => "ioctl",
        57 => "close",
        62 => "lseek",
        63 => "read",
        64 => "write",
        65 => "readv",
        66 => "writev",
        67 => "pread64",
        68 => "pwrite64",
        98 => "futex",
        101 => "nanosleep",
        115 => "clock_nanosleep",
        124 => "sched_yield",
        129 => "kill",
        130 => "tkill",
        131 => "tgkill",
        206 => "sendto",
        207 => "recvfrom",
        211 => "sendmsg",
        212 => "recvmsg",
        215 => "munmap",
        216 => "mremap",
        220 => "clone",
        222 => "mmap",
        226 => "mprotect",
        228 => "mlock",
        229 => "munlock",
        233 => "madvise",
        278 => "getrandom",
        279 => "memfd_create",
        435 => "clone3",
        _ => return format!("syscall {id}"),
    };
    name.to_string()
}

/// x86-64's numbers.
pub fn name(id: i64) -> String {
    let name = match id {
        0 => "read",
        1 => "write",
        3 => "close",
        7 => "poll",
        8 => "lseek",
        9 => "mmap",
        10 => "mprotect",
        11 => "munmap",
        12 => "brk",
        13 => "rt_sigaction",
        14 => "rt_sigprocmask",
        15 => "rt_sigreturn",
        16 => "ioctl",
        17 => "pread64",
        18 => "pwrite64",
        19 => "readv",
        20 => "writev",
        25 => "mremap",
        28 => "madvise",
        32 => "dup",
        33 => "dup2",
        39 => "getpid",
        41 => "socket",
        42 => "connect",
        43 => "accept",
        44 => "sendto",
        45 => "recvfrom",
        46 => "sendmsg",
        47 => "recvmsg",
        56 => "clone",
        61 => "wait4",
        62 => "kill",
        72 => "fcntl",
        24 => "sched_yield",
        35 => "nanosleep",
        149 => "mlock",
        150 => "munlock",
        200 => "tkill",
        202 => "futex",
        228 => "clock_gettime",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        234 => "tgkill",
        233 => "epoll_ctl",
        257 => "openat",
        270 => "pselect6",
        271 => "ppoll",
        285 => "fallocate",
        290 => "eventfd2",
        291 => "epoll_create1",
        292 => "dup3",
        293 => "pipe2",
        318 => "getrandom",
        319 => "memfd_create",
        435 => "clone3",
        _ => return format!("syscall {id}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's numbers are libc's: the table is checked against them where it can be.
    #[test]
    fn the_hosts_numbers_are_libcs() {
        let host = Arch::host();
        assert_eq!(host.ioctl(), libc::SYS_ioctl);
        for (id, expected) in [
            (libc::SYS_read, "read"),
            (libc::SYS_write, "write"),
            (libc::SYS_close, "close"),
            (libc::SYS_futex, "futex"),
            (libc::SYS_mprotect, "mprotect"),
            (libc::SYS_munmap, "munmap"),
            (libc::SYS_mlock, "mlock"),
            (libc::SYS_getrandom, "getrandom"),
            (libc::SYS_clone3, "clone3"),
        ] {
            assert_eq!(host.name(id), expected);
        }
    }
}
