//! The kernel's text rendering of a trace (`cat instances/X/trace`), parsed, and decoded
//! events rendered the same way, so the two can be compared line by line.

use std::fmt::Write;

use vmscale_trace::{Event, EventKind, Kallsyms, PrintkStrings};

/// One event as the kernel printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextEvent {
    pub comm: String,
    pub pid: i32,
    pub cpu: u32,
    /// The five latency columns, e.g. `d..2.`.
    pub flags: String,
    /// The timestamp column as printed: `secs.usecs`.
    pub time: String,
    pub name: String,
    pub body: String,
    /// ` => frame` lines after a `<stack trace>`.
    pub stack: Vec<String>,
}

/// The events of a text trace, and the `entries-in-buffer` count of its header.
pub fn parse(text: &str) -> (u64, Vec<TextEvent>) {
    let mut entries = None;
    let mut events: Vec<TextEvent> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# entries-in-buffer/entries-written: ") {
            entries = rest.split('/').next().and_then(|n| n.trim().parse().ok());
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(frame) = line.strip_prefix(" => ") {
            events
                .last_mut()
                .expect("a stack frame follows an event")
                .stack
                .push(frame.to_string());
            continue;
        }
        events.push(parse_line(line).unwrap_or_else(|| panic!("unparsed trace line: {line:?}")));
    }
    (entries.expect("entries-in-buffer header"), events)
}

/// `<comm>-<pid> [<cpu>] <flags> <secs>.<usecs>: <name>: <body>`; comm may hold spaces
/// and dashes.
fn parse_line(line: &str) -> Option<TextEvent> {
    let bytes = line.as_bytes();
    let open = (0..bytes.len()).find(|&i| {
        bytes[i] == b'['
            && bytes.get(i + 4) == Some(&b']')
            && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit)
            && line[..i]
                .trim_end()
                .rsplit_once('-')
                .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    })?;
    let (comm, pid) = line[..open].trim().rsplit_once('-')?;
    let cpu = line[open + 1..open + 4].parse().ok()?;
    let rest = line[open + 5..].trim_start();
    let (flags, rest) = rest.split_once(' ')?;
    let rest = rest.trim_start();
    let (time, rest) = rest.split_once(": ")?;
    let (name, body) = match rest.split_once(": ") {
        Some((name, body)) if !name.contains(' ') => (name, body),
        _ => (rest, ""),
    };
    Some(TextEvent {
        comm: comm.to_string(),
        pid: pid.parse().ok()?,
        cpu,
        flags: flags.to_string(),
        time: time.to_string(),
        name: name.to_string(),
        body: body.to_string(),
        stack: Vec::new(),
    })
}

/// `ns2usecs` then `%5lu.%06lu`, as trace_print_context prints a timestamp.
pub fn kernel_time(ns: u64) -> String {
    let usecs = (ns + 500) / 1000;
    format!("{}.{:06}", usecs / 1_000_000, usecs % 1_000_000)
}

/// Drops the `/0xsize` that `%pS` adds after `name+0xoff` (kallsyms has no sizes).
pub fn without_symbol_sizes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(slash) = rest.find("/0x") {
        let before = &rest[..slash];
        let token_start = before.rfind([' ', '=', '(']).map_or(0, |i| i + 1);
        out.push_str(before);
        let after = &rest[slash + 3..];
        let hex_end = after
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(after.len());
        if before[token_start..].contains("+0x") && hex_end > 0 {
            rest = &after[hex_end..];
        } else {
            out.push_str("/0x");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `%pS`: `name+0xoff`, `0x0` for NULL, raw hex when no symbol contains it.
fn symbol_offset(kallsyms: &Kallsyms, address: u64) -> String {
    match kallsyms.symbolize(address) {
        _ if address == 0 => "0x0".into(),
        Some(symbol) => format!("{}+{:#x}", symbol.name, symbol.offset),
        None => format!("{address:#x}"),
    }
}

/// `%ps`: the symbol name alone.
pub fn symbol_name(kallsyms: &Kallsyms, address: u64) -> String {
    match kallsyms.symbolize(address) {
        _ if address == 0 => "0x0".into(),
        Some(symbol) => symbol.name.to_string(),
        None => format!("{address:#x}"),
    }
}

/// `__print_flags(flags, "|", ...)`.
fn print_flags(value: u64, names: &[(u64, &str)]) -> String {
    let mut out = String::new();
    let mut left = value;
    for &(bit, name) in names {
        if left & bit == bit && bit != 0 {
            if !out.is_empty() {
                out.push('|');
            }
            out.push_str(name);
            left &= !bit;
        }
    }
    if left != 0 {
        if !out.is_empty() {
            out.push('|');
        }
        let _ = write!(out, "{left:#x}");
    }
    out
}

/// `%*pbl`: CPU ranges such as `0-1,3`.
fn cpu_list(cpus: impl Iterator<Item = u32>) -> String {
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for cpu in cpus {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == cpu => *end = cpu,
            _ => ranges.push((cpu, cpu)),
        }
    }
    ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// prev_state as sched_switch's print fmt renders it (TASK_REPORT_MAX is 0x100).
fn task_state(state: i64) -> String {
    let state = state as u64;
    let reported = state & 0xff;
    let letters = if reported == 0 {
        "R".to_string()
    } else {
        print_flags(
            reported,
            &[
                (0x01, "S"),
                (0x02, "D"),
                (0x04, "T"),
                (0x08, "t"),
                (0x10, "X"),
                (0x20, "Z"),
                (0x40, "P"),
                (0x80, "I"),
            ],
        )
    };
    let preempted = if state & 0x100 != 0 { "+" } else { "" };
    format!("{letters}{preempted}")
}

/// The name and body the kernel prints for a decoded event, plus its stack frames.
pub fn render(
    event: &Event<'_>,
    kallsyms: &Kallsyms,
    printk: &PrintkStrings,
) -> (String, String, Vec<String>) {
    let name = event.name().to_string();
    let ps = |a| symbol_offset(kallsyms, a);
    let body = match event.kind() {
        EventKind::ContentionBegin(e) => format!(
            "{:016x} (flags={})",
            e.lock_addr,
            print_flags(
                e.flags as u64,
                &[
                    (1, "SPIN"),
                    (2, "READ"),
                    (4, "WRITE"),
                    (8, "RT"),
                    (16, "PERCPU"),
                    (32, "MUTEX")
                ]
            )
        ),
        EventKind::ContentionEnd(e) => format!("{:016x} (ret={})", e.lock_addr, e.ret),
        EventKind::SchedSwitch(e) => format!(
            "prev_comm={} prev_pid={} prev_prio={} prev_state={} ==> next_comm={} next_pid={} next_prio={}",
            e.prev_comm,
            e.prev_pid,
            e.prev_prio,
            task_state(e.prev_state),
            e.next_comm,
            e.next_pid,
            e.next_prio
        ),
        EventKind::SchedWaking(e) | EventKind::SchedWakeup(e) | EventKind::SchedWakeupNew(e) => {
            format!("comm={} pid={} prio={} target_cpu={:03}", e.comm, e.pid, e.prio, e.target_cpu)
        }
        EventKind::IpiSendCpu(e) => {
            format!("cpu={} callsite={} callback={}", e.cpu, ps(e.callsite), ps(e.callback))
        }
        EventKind::IpiSendCpumask(e) => format!(
            "cpumask={} callsite={} callback={}",
            cpu_list(e.cpumask.iter()),
            ps(e.callsite),
            ps(e.callback)
        ),
        EventKind::CsdQueueCpu(e) => format!(
            "cpu={} callsite={} func={} csd={:016x}",
            e.cpu,
            ps(e.callsite),
            symbol_name(kallsyms, e.func),
            e.csd
        ),
        EventKind::CsdFunctionEntry(e) | EventKind::CsdFunctionExit(e) => {
            format!("func={}, csd={:016x}", symbol_name(kallsyms, e.func), e.csd)
        }
        EventKind::IpiRaise(e) => {
            // __get_bitmask: 32-bit groups, most significant first.
            let groups: Vec<String> = e
                .targets
                .0
                .chunks(4)
                .rev()
                .map(|group| {
                    let mut word = [0u8; 4];
                    word[..group.len()].copy_from_slice(group);
                    format!("{:08x}", u32::from_le_bytes(word))
                })
                .collect();
            format!("target_mask={} ({})", groups.join(","), printk.name(e.reason))
        }
        EventKind::IpiEntry(e) | EventKind::IpiExit(e) => format!("({})", printk.name(e.reason)),
        EventKind::IpiVectorEntry(_) | EventKind::IpiVectorExit(_) => {
            format!("vector={}", event.i64("vector").unwrap())
        }
        EventKind::SysEnter(e) => {
            let args = e.args();
            format!(
                "NR {} ({:x}, {:x}, {:x}, {:x}, {:x}, {:x})",
                e.id, args[0], args[1], args[2], args[3], args[4], args[5]
            )
        }
        EventKind::SysExit(e) => format!("NR {} = {}", e.id, e.ret),
        EventKind::Print(e) => return ("tracing_mark_write".into(), e.text().into_owned(), vec![]),
        EventKind::KernelStack(stack) => {
            let frames = stack.iter().map(|a| symbol_name(kallsyms, a)).collect();
            return ("<stack trace>".into(), String::new(), frames);
        }
        // Its text holds memcg_id, which the view does not read; the fixtures have none.
        EventKind::MmapLock(_) | EventKind::Work(_) | EventKind::Other => {
            panic!("{}:{} has no rendering here", event.system(), name)
        }
    };
    (name, body, Vec::new())
}

/// The latency columns the record's common fields determine: irqs-off, preempt depth and
/// migrate-disable depth (trace_print_lat_fmt).
pub fn check_flags(common_flags: u64, preempt: u64, flags: &str) -> Result<(), String> {
    let columns: Vec<char> = flags.chars().collect();
    let digit = |n: u64| {
        if n == 0 {
            '.'
        } else {
            char::from_digit(n as u32, 16).unwrap()
        }
    };
    let irqs_off = common_flags & 0x01 != 0;
    if columns.len() != 5
        || (columns[0] == 'd') != irqs_off
        || columns[3] != digit(preempt & 0xf)
        || columns[4] != digit((preempt >> 4) & 0xf)
    {
        return Err(format!(
            "flags {flags:?} vs common_flags {common_flags:#x} preempt_count {preempt:#x}"
        ));
    }
    Ok(())
}
