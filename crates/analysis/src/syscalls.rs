//! Names of the x86-64 system calls the scenarios and their analyses meet; others print as
//! their number.

pub fn name(id: i64) -> String {
    let name = match id {
        0 => "read",
        1 => "write",
        7 => "poll",
        9 => "mmap",
        11 => "munmap",
        16 => "ioctl",
        24 => "sched_yield",
        35 => "nanosleep",
        149 => "mlock",
        150 => "munlock",
        200 => "tkill",
        202 => "futex",
        230 => "clock_nanosleep",
        234 => "tgkill",
        _ => return format!("syscall {id}"),
    };
    name.to_string()
}
