//! System calls by number, in the numbering of the trace's architecture: x86-64's own, or
//! the generic table arm64 (and RISC-V) use.

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

    /// The system call's name, or "syscall N" for a number the table does not know.
    pub fn name(self, id: i64) -> String {
        // The tables are the `syscalls` crate's, generated from the kernel's own: x86-64's
        // syscall_64.tbl and arm64's, which is asm-generic's numbering.
        let known = usize::try_from(id).ok().and_then(|id| match self {
            Arch::X86_64 => syscalls::x86_64::Sysno::new(id).map(|s| s.name()),
            Arch::Generic => syscalls::aarch64::Sysno::new(id).map(|s| s.name()),
        });
        known.map_or_else(|| format!("syscall {id}"), str::to_string)
    }
}

/// An x86-64 system call's name, or "syscall N".
pub fn name(id: i64) -> String {
    Arch::X86_64.name(id)
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

    /// Both numberings name every call, the ones no scenario makes too, and say the number
    /// of one no table has.
    #[test]
    fn both_numberings_name_every_call() {
        for (arch, id, expected) in [
            (Arch::X86_64, 275, "splice"),
            (Arch::X86_64, 16, "ioctl"),
            (Arch::Generic, 63, "read"),
            (Arch::Generic, 64, "write"),
            (Arch::Generic, 29, "ioctl"),
            (Arch::Generic, 98, "futex"),
            (Arch::Generic, 76, "splice"),
        ] {
            assert_eq!(arch.name(id), expected, "{arch:?} {id}");
        }
        assert_eq!(Arch::X86_64.name(100_000), "syscall 100000");
        assert_eq!(Arch::Generic.name(-1), "syscall -1");
    }
}
