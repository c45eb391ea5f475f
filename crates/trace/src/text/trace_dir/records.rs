//! Event records from the text's fields: each event the analyses read is written in its
//! [`super::formats`] layout, reading every value the way the event's print format wrote it.

use super::formats::{Kind, COMMON_LEN};
use super::symbols::Symbols;
use crate::decode::views::contention_flags;
use crate::text::import::{TextEvent, TextStack, MAX_CPUS};

/// Why an event's fields could not be written: the field and its text.
pub(crate) type FieldError = String;

struct Record {
    bytes: Vec<u8>,
}

impl Record {
    fn new(kind: Kind, pid: i32, len: usize) -> Record {
        let mut bytes = vec![0; len.max(COMMON_LEN)];
        bytes[0..2].copy_from_slice(&kind.def().id.to_le_bytes());
        bytes[4..8].copy_from_slice(&pid.to_le_bytes());
        Record { bytes }
    }

    fn u32(&mut self, offset: usize, value: u32) {
        self.bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
    }

    fn u64(&mut self, offset: usize, value: u64) {
        self.bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
    }

    /// A `char[16]` comm: at most 15 bytes and a NUL, as the kernel keeps it.
    fn comm(&mut self, offset: usize, comm: &str) {
        let bytes = comm.as_bytes();
        let len = bytes.len().min(15);
        self.bytes[offset..offset + len].copy_from_slice(&bytes[..len]);
    }
}

fn need<'a>(event: &'a TextEvent, name: &str) -> Result<&'a str, FieldError> {
    event.field(name).ok_or_else(|| format!("no {name}= field"))
}

fn bad(name: &str, value: &str) -> FieldError {
    format!("{name}={value}")
}

fn int<T: std::str::FromStr>(event: &TextEvent, name: &str) -> Result<T, FieldError> {
    let value = need(event, name)?;
    value.trim().parse().map_err(|_| bad(name, value))
}

fn hex(name: &str, value: &str) -> Result<u64, FieldError> {
    let digits = value.trim();
    let digits = digits.strip_prefix("0x").unwrap_or(digits);
    u64::from_str_radix(digits, 16).map_err(|_| bad(name, value))
}

fn symbol(event: &TextEvent, name: &str, symbols: &mut Symbols) -> Result<u64, FieldError> {
    let value = need(event, name)?;
    symbols.resolve(value).ok_or_else(|| bad(name, value))
}

/// The record of `event`; `Ok(None)` when no analysis reads its type.
pub(crate) fn event_record(
    event: &TextEvent,
    symbols: &mut Symbols,
) -> Result<Option<(Kind, Vec<u8>)>, FieldError> {
    let Some(kind) = Kind::of(&event.name) else {
        return Ok(None);
    };
    let mut r = Record::new(kind, event.pid, kind.fixed_len());
    match kind {
        Kind::Print => {
            // ftrace:print's buf ends in the newline trace_marker adds, then a NUL.
            let text = event.field("text").unwrap_or("");
            r.bytes.truncate(16);
            r.bytes.extend_from_slice(text.as_bytes());
            r.bytes.extend_from_slice(b"\n\0");
        }
        Kind::ContentionBegin | Kind::ContentionEnd => {
            let addr = need(event, "lock_addr")?;
            r.u64(8, hex("lock_addr", addr)?);
            let value = match kind {
                Kind::ContentionBegin => contention_flags_of(need(event, "flags")?)?,
                _ => int::<i32>(event, "ret")? as u32,
            };
            r.u32(16, value);
        }
        Kind::SchedSwitch => {
            r.comm(8, need(event, "prev_comm")?);
            r.u32(24, int::<i32>(event, "prev_pid")? as u32);
            r.u32(28, int::<i32>(event, "prev_prio")? as u32);
            r.u64(32, task_state(need(event, "prev_state")?)? as u64);
            r.comm(40, need(event, "next_comm")?);
            r.u32(56, int::<i32>(event, "next_pid")? as u32);
            r.u32(60, int::<i32>(event, "next_prio")? as u32);
        }
        Kind::SchedWaking | Kind::SchedWakeup | Kind::SchedWakeupNew => {
            r.comm(8, need(event, "comm")?);
            r.u32(24, int::<i32>(event, "pid")? as u32);
            r.u32(28, int::<i32>(event, "prio")? as u32);
            r.u32(32, int::<i32>(event, "target_cpu")? as u32);
        }
        Kind::IpiSendCpu => {
            r.u32(8, cpu(event, "cpu")?);
            r.u64(16, symbol(event, "callsite", symbols)?);
            r.u64(24, symbol(event, "callback", symbols)?);
        }
        Kind::IpiSendCpumask => {
            let mask = cpumask(need(event, "cpumask")?)?;
            r.u64(16, symbol(event, "callsite", symbols)?);
            r.u64(24, symbol(event, "callback", symbols)?);
            // __data_loc: length in the high 16 bits, offset from the record start in the low.
            let offset = r.bytes.len();
            r.u32(8, (mask.len() as u32) << 16 | offset as u32);
            r.bytes.extend_from_slice(&mask);
        }
        Kind::CsdQueueCpu => {
            r.u32(8, cpu(event, "cpu")?);
            r.u64(16, symbol(event, "callsite", symbols)?);
            r.u64(24, symbol(event, "func", symbols)?);
            r.u64(32, hex("csd", need(event, "csd")?)?);
        }
        Kind::CsdFunctionEntry | Kind::CsdFunctionExit => {
            r.u64(8, symbol(event, "func", symbols)?);
            r.u64(16, hex("csd", need(event, "csd")?)?);
        }
        Kind::SysEnter => {
            let (id, args) = sys_enter(need(event, "text")?)?;
            r.u64(8, id as u64);
            for (index, arg) in args.iter().enumerate() {
                r.u64(16 + 8 * index, *arg);
            }
        }
        Kind::SysExit => {
            let (id, ret) = sys_exit(need(event, "text")?)?;
            r.u64(8, id as u64);
            r.u64(16, ret as u64);
        }
        Kind::IpiRaise => {
            let mask = cpumask(need(event, "target_mask")?)?;
            r.u64(16, reason(event, symbols)?);
            let offset = r.bytes.len();
            r.u32(8, (mask.len() as u32) << 16 | offset as u32);
            r.bytes.extend_from_slice(&mask);
        }
        Kind::IpiEntry | Kind::IpiExit => r.u64(8, reason(event, symbols)?),
        Kind::RescheduleEntry
        | Kind::RescheduleExit
        | Kind::CallFunctionEntry
        | Kind::CallFunctionExit
        | Kind::CallFunctionSingleEntry
        | Kind::CallFunctionSingleExit => r.u32(8, int::<i32>(event, "vector")? as u32),
        Kind::KernelStack => return Ok(None),
    }
    Ok(Some((kind, r.bytes)))
}

/// The ftrace:kernel_stack record of `stack`: `size` = number of addresses, then the
/// addresses, however many (`__ftrace_trace_stack` writes past the declared eight).
pub(crate) fn stack_record(stack: &TextStack, symbols: &mut Symbols) -> Vec<u8> {
    let addresses: Vec<u64> = stack
        .frames
        .iter()
        .filter_map(|frame| match kernel_address(frame) {
            // A frame the text gave only as a number (`trace-cmd report -R` prints stacks
            // so) is named by that number: the stand-in symbols below it must not lend it
            // a function's name.
            Some(_) => Some(symbols.address(frame.trim(), None, 0)),
            None => symbols.resolve(frame),
        })
        .collect();
    let mut r = Record::new(Kind::KernelStack, stack.pid, 16 + 8 * addresses.len());
    r.u32(8, addresses.len() as u32);
    for (index, address) in addresses.iter().enumerate() {
        r.u64(16 + 8 * index, *address);
    }
    r.bytes
}

/// `0xffffffff813deb8b`: a kernel address printed as a bare number.
fn kernel_address(frame: &str) -> Option<u64> {
    let digits = frame.trim().strip_prefix("0x")?;
    u64::from_str_radix(digits, 16)
        .ok()
        .filter(|&address| address >= 0xffff_0000_0000_0000)
}

/// An IPI's reason: its text gets an address of the directory's printk strings; a raw
/// text's address (`reason_addr`) stays itself, unnamed, as the text left it.
fn reason(event: &TextEvent, symbols: &mut Symbols) -> Result<u64, FieldError> {
    match event.field("reason") {
        Some(text) => Ok(symbols.string(text)),
        None => hex("reason_addr", need(event, "reason_addr")?),
    }
}

fn cpu(event: &TextEvent, name: &str) -> Result<u32, FieldError> {
    let value = need(event, name)?;
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|&cpu| cpu < MAX_CPUS)
        .ok_or_else(|| bad(name, value))
}

/// `SPIN|READ`, as `__print_flags` wrote it; bits without a name follow as `0x..`.
fn contention_flags_of(text: &str) -> Result<u32, FieldError> {
    let mut bits = 0u32;
    for name in text.split('|').filter(|n| !n.is_empty()) {
        bits |= match name {
            "SPIN" => contention_flags::SPIN,
            "READ" => contention_flags::READ,
            "WRITE" => contention_flags::WRITE,
            "RT" => contention_flags::RT,
            "PERCPU" => contention_flags::PERCPU,
            "MUTEX" => contention_flags::MUTEX,
            other => u32::try_from(hex("flags", other)?).map_err(|_| bad("flags", text))?,
        };
    }
    Ok(bits)
}

/// sched_switch's `prev_state`: `R`, `R+`, or state letters joined by `|` (TASK_REPORT
/// bits), a trailing `+` for a preempted task (the bit above them). A letter this kernel
/// does not print is some sleeping state: the analyses only ask whether the task slept.
fn task_state(text: &str) -> Result<i64, FieldError> {
    let (letters, preempted) = match text.strip_suffix('+') {
        Some(letters) => (letters, 0x100),
        None => (text, 0),
    };
    if letters.is_empty() {
        return Err(bad("prev_state", text));
    }
    let mut bits = preempted;
    for letter in letters.split('|') {
        bits |= match letter {
            "R" => 0,
            "S" => 0x01,
            "D" => 0x02,
            "T" => 0x04,
            "t" => 0x08,
            "X" => 0x10,
            "Z" => 0x20,
            "P" => 0x40,
            "I" => 0x80,
            "" => return Err(bad("prev_state", text)),
            _ => 0x01,
        };
    }
    Ok(bits)
}

/// `__get_cpumask`'s text: a CPU list (`%*pbl`, `0-1,3`, what this kernel prints) or a hex
/// bitmap in 32-bit groups (`%*pb`, `00000000,00000003`); as little-endian unsigned longs.
/// CPUs beyond [`MAX_CPUS`] are refused.
fn cpumask(text: &str) -> Result<Vec<u8>, FieldError> {
    let text = text.trim();
    let groups: Vec<&str> = text.split(',').collect();
    let hex = text.bytes().any(|b| matches!(b, b'a'..=b'f' | b'A'..=b'F'))
        || (groups.len() > 1 && groups[1..].iter().all(|g| g.len() == 8));
    // A bitmap of every CPU there can be: ranges set bits, never grow a list.
    let mut mask = vec![0u8; MAX_CPUS as usize / 8];
    let mut set = |cpu: u32| mask[cpu as usize / 8] |= 1 << (cpu % 8);
    if hex {
        let digits: String = groups.concat();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("cpumask", text));
        }
        let significant = digits.trim_start_matches('0');
        if significant.len() * 4 > MAX_CPUS as usize {
            return Err(bad("cpumask", text));
        }
        for (index, digit) in significant.bytes().rev().enumerate() {
            let value = (digit as char).to_digit(16).unwrap_or(0);
            for bit in (0..4).filter(|bit| value & (1 << bit) != 0) {
                set(index as u32 * 4 + bit);
            }
        }
    } else if !text.is_empty() {
        for group in groups {
            let (first, last) = group.split_once('-').unwrap_or((group, group));
            let cpu = |n: &str| n.parse::<u32>().ok().filter(|&cpu| cpu < MAX_CPUS);
            let (Some(first), Some(last)) = (cpu(first), cpu(last)) else {
                return Err(bad("cpumask", text));
            };
            if first > last {
                return Err(bad("cpumask", text));
            }
            (first..=last).for_each(&mut set);
        }
    }
    // As many unsigned longs as the highest CPU needs, at least one.
    let used = mask.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    mask.truncate(used.div_ceil(8).max(1) * 8);
    Ok(mask)
}

/// `NR 1 (1, 55d5f0105000, 1, 7fa9fca704f0, 0, 0)`: the number, then six hex arguments.
fn sys_enter(text: &str) -> Result<(i64, [u64; 6]), FieldError> {
    let error = || bad("sys_enter", text);
    let rest = text.trim().strip_prefix("NR ").ok_or_else(error)?;
    let (id, args) = rest.split_once(" (").ok_or_else(error)?;
    let id = id.trim().parse().map_err(|_| error())?;
    let args = args.trim_end().strip_suffix(')').ok_or_else(error)?;
    let mut values = [0u64; 6];
    let mut count = 0;
    for (slot, arg) in values.iter_mut().zip(args.split(',')) {
        *slot = u64::from_str_radix(arg.trim(), 16).map_err(|_| error())?;
        count += 1;
    }
    if count != 6 || args.split(',').count() != 6 {
        return Err(error());
    }
    Ok((id, values))
}

/// `NR 1 = 1`: the number and the return value.
fn sys_exit(text: &str) -> Result<(i64, i64), FieldError> {
    let error = || bad("sys_exit", text);
    let rest = text.trim().strip_prefix("NR ").ok_or_else(error)?;
    let (id, ret) = rest.split_once(" = ").ok_or_else(error)?;
    Ok((
        id.trim().parse().map_err(|_| error())?,
        ret.trim().parse().map_err(|_| error())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_texts_read_back_as_the_kernel_stored_them() {
        assert_eq!(contention_flags_of("SPIN|WRITE"), Ok(0b101));
        assert_eq!(contention_flags_of(""), Ok(0));
        assert_eq!(contention_flags_of("MUTEX|0x40"), Ok(0x60));
        assert!(contention_flags_of("BOGUS").is_err());
        assert_eq!(task_state("R"), Ok(0));
        assert_eq!(task_state("R+"), Ok(0x100));
        assert_eq!(task_state("S|D"), Ok(3));
        assert_eq!(task_state("I"), Ok(0x80));
        assert!(task_state("").is_err());
        assert_eq!(cpumask("0-1,3").unwrap(), vec![0b1011, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(cpumask("65").unwrap()[8], 2);
        assert_eq!(cpumask("3").unwrap()[0], 8);
        assert_eq!(cpumask("00000001,00000000").unwrap()[4], 1);
        assert_eq!(cpumask("f").unwrap()[0], 0xf);
        assert_eq!(cpumask("").unwrap(), vec![0; 8]);
        assert!(cpumask(&"f".repeat(4096)).is_err());
        assert!(cpumask("3-1").is_err());
        assert!(cpumask("0-99999").is_err());
        assert_eq!(
            sys_enter("NR 1 (1, 55d5f0105000, 1, 7fa9fca704f0, 0, 0)"),
            Ok((1, [1, 0x55d5f0105000, 1, 0x7fa9fca704f0, 0, 0]))
        );
        assert!(sys_enter("NR 1 (1, 2)").is_err());
        assert_eq!(sys_exit("NR 0 = -11"), Ok((0, -11)));
    }
}
