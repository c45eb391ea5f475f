//! An event's body, the part its `print fmt` produced, as `(name, value)` fields.
//!
//! The kernel prints a body with the event's own print format. `trace-cmd report` prints most
//! events the same way, but libtraceevent's plugins print the scheduler's events in forms of
//! their own (`bash:25569 [120] S ==> bash:25580 [120]`, `work:25581 [120] CPU:000`), and
//! `trace-cmd report -R` prints every field as `name=value` with numbers left as numbers
//! (`prev_state=256`, `flags=2`). Both are turned into the fields and values the kernel's print
//! format gives, so that every form of one recording imports as the same events.

use super::skip::{Reject, SkipReason};

/// Which printer a body came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyForm {
    /// The event's print format (the kernel's `trace`, and trace-cmd for most events).
    Kernel,
    /// A libtraceevent plugin's own form (trace-cmd's default output).
    Plugin,
    /// The raw fields of `trace-cmd report -R`.
    Raw,
}

pub(crate) type Fields = Vec<(String, String)>;

/// `name=value` pairs in print order; a body in any other format is one `("text", body)`.
pub(crate) fn parse(name: &str, body: &str) -> Result<(Fields, BodyForm), Reject> {
    let kernel = |fields| Ok((fields, BodyForm::Kernel));
    match name {
        // The marker text is whatever user space wrote, even if it looks like name=value.
        "tracing_mark_write" => kernel(text_field(body)),
        "contention_begin" | "contention_end" if looks_like_pairs(body) => raw_contention(body),
        "contention_begin" => kernel(parse_contention(body, "flags")?),
        "contention_end" => kernel(parse_contention(body, "ret")?),
        "sched_switch" => {
            // `trace-cmd report -w` appends the wakeup latency to the switch that ends it.
            let body = body.split(" Latency: ").next().unwrap_or(body);
            if looks_like_pairs(body) {
                raw_switch(body)
            } else {
                Ok((plugin_switch(body)?, BodyForm::Plugin))
            }
        }
        "sched_wakeup" | "sched_wakeup_new" | "sched_waking" if !looks_like_pairs(body) => {
            Ok((plugin_wakeup(body)?, BodyForm::Plugin))
        }
        "function" => function(body),
        "ipi_raise" => ipi_raise(body),
        "ipi_entry" | "ipi_exit" => ipi_handler(body),
        "sys_enter" if body.trim_start().starts_with("id=") => raw_sys_enter(body),
        "sys_exit" if body.trim_start().starts_with("id=") => raw_sys_exit(body),
        _ if looks_like_pairs(body) => kernel(parse_pairs(body)),
        _ => kernel(text_field(body)),
    }
}

/// True when a body reads as `name=value` pairs (an event's own print format, not free text).
pub(crate) fn looks_like_pairs(body: &str) -> bool {
    body.split_whitespace().next().and_then(as_pair).is_some()
}

fn text_field(body: &str) -> Fields {
    vec![("text".to_string(), body.trim().to_string())]
}

fn field(name: &str, value: impl Into<String>) -> (String, String) {
    (name.to_string(), value.into())
}

/// The lock events print `ADDR (key=VALUE)` rather than name=value pairs.
fn parse_contention(body: &str, key: &str) -> Result<Fields, Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let (addr, rest) = body.trim().split_once(' ').ok_or_else(bad)?;
    let addr = lock_addr(addr).ok_or_else(bad)?;
    let value = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|r| r.strip_prefix(key))
        .and_then(|r| r.strip_prefix('='))
        .ok_or_else(bad)?;
    Ok(vec![field("lock_addr", addr), field(key, value)])
}

/// A lock address as the kernel prints it (`%p` with hash-ptr off): hex digits, without the
/// `0x` that trace-cmd puts before them.
fn lock_addr(addr: &str) -> Option<&str> {
    let addr = addr.strip_prefix("0x").unwrap_or(addr);
    (!addr.is_empty() && addr.bytes().all(|b| b.is_ascii_hexdigit())).then_some(addr)
}

/// `lock_addr=0xffff8881cea69378 flags=2` (or `ret=0`): the address as the kernel prints it
/// (`%p` with hash-ptr off, no `0x`) and the flags by name as `__print_flags` writes them.
fn raw_contention(body: &str) -> Result<(Fields, BodyForm), Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let pairs = Pairs::of(body);
    let addr = lock_addr(pairs.get("lock_addr").ok_or_else(bad)?).ok_or_else(bad)?;
    let mut fields = vec![field("lock_addr", addr)];
    if let Some(flags) = pairs.get("flags") {
        let bits: u32 = flags.parse().map_err(|_| bad())?;
        fields.push(field("flags", contention_flag_names(bits)));
    } else {
        fields.push(field("ret", pairs.get("ret").ok_or_else(bad)?));
    }
    Ok((fields, BodyForm::Raw))
}

/// The names lock:contention_begin's print format gives its flag bits (LCB_F_*); bits
/// without a name follow as hex, as `__print_flags` prints them.
fn contention_flag_names(bits: u32) -> String {
    const NAMES: [(u32, &str); 6] = [
        (1 << 0, "SPIN"),
        (1 << 1, "READ"),
        (1 << 2, "WRITE"),
        (1 << 3, "RT"),
        (1 << 4, "PERCPU"),
        (1 << 5, "MUTEX"),
    ];
    let mut names: Vec<String> = NAMES
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| name.to_string())
        .collect();
    let rest = bits & !NAMES.iter().fold(0, |all, (bit, _)| all | bit);
    if rest != 0 {
        names.push(format!("{rest:#x}"));
    }
    names.join("|")
}

/// The raw fields of a switch: `prev_state` as a number becomes the letters the kernel's
/// print format gives it (TASK_REPORT bits `SDTtXZPI`, `+` for the preempted bit above them).
fn raw_switch(body: &str) -> Result<(Fields, BodyForm), Reject> {
    let mut fields = parse_pairs(body);
    let mut form = BodyForm::Kernel;
    for (name, value) in &mut fields {
        if name == "prev_state" {
            if let Ok(bits) = value.parse::<u64>() {
                *value = task_state_letters(bits);
                form = BodyForm::Raw;
            }
        }
    }
    Ok((fields, form))
}

fn task_state_letters(bits: u64) -> String {
    const LETTERS: &[u8; 8] = b"SDTtXZPI";
    let letters: Vec<String> = (0..8)
        .filter(|bit| bits & (1 << bit) != 0)
        .map(|bit| (LETTERS[bit] as char).to_string())
        .collect();
    let mut out = if letters.is_empty() {
        "R".to_string()
    } else {
        letters.join("|")
    };
    if bits & 0x100 != 0 {
        out.push('+');
    }
    out
}

/// libtraceevent's state letters as the kernel prints them. Its plugin names the bits
/// `SDTtZXxW` (trace-cmd 3.1 with libtraceevent 1.7 prints these) where the kernel says
/// `SDTtXZPI`; later versions may print the kernel's letters, which read the same except that
/// X and Z (both a dead task) trade places. The plugin prints a preempted task as `R`,
/// without the kernel's `+`.
fn plugin_state(letters: &str) -> Option<String> {
    let mut out = Vec::new();
    for letter in letters.split('|') {
        out.push(match letter {
            "R" | "S" | "D" | "T" | "t" | "P" | "I" => letter,
            "Z" => "X",
            "X" => "Z",
            "W" => "I",
            "x" => "P",
            _ => return None,
        });
    }
    Some(out.join("|"))
}

/// `comm:pid [prio]` (the prio is left out by some versions); a comm may hold `:` and spaces.
fn plugin_task(text: &str) -> Option<(&str, &str, Option<&str>)> {
    let text = text.trim();
    let (task, prio) = match text.rfind(" [") {
        Some(open) if text.ends_with(']') => (&text[..open], Some(&text[open + 2..text.len() - 1])),
        _ => (text, None),
    };
    let (comm, pid) = task.rsplit_once(':')?;
    let numeric = |n: &str| {
        let digits = n.strip_prefix('-').unwrap_or(n);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    };
    (numeric(pid) && prio.is_none_or(numeric)).then_some((comm, pid, prio))
}

/// `prev:91 [120] S ==> next:90 [120]`.
fn plugin_switch(body: &str) -> Result<Fields, Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let (prev, next) = body.split_once(" ==> ").ok_or_else(bad)?;
    let (prev, state) = prev.trim().rsplit_once(' ').ok_or_else(bad)?;
    let state = plugin_state(state).ok_or_else(bad)?;
    let (prev_comm, prev_pid, prev_prio) = plugin_task(prev).ok_or_else(bad)?;
    // Whatever follows the next task's `[prio]` is trace-cmd's own (marks, latencies).
    let next = match next.find(']') {
        Some(close) => &next[..=close],
        None => next,
    };
    let (next_comm, next_pid, next_prio) = plugin_task(next).ok_or_else(bad)?;
    Ok(vec![
        field("prev_comm", prev_comm),
        field("prev_pid", prev_pid),
        field("prev_prio", prev_prio.unwrap_or("120")),
        field("prev_state", state),
        field("next_comm", next_comm),
        field("next_pid", next_pid),
        field("next_prio", next_prio.unwrap_or("120")),
    ])
}

/// `comm:pid [prio] success=1 CPU:001`: the success and CPU columns are there when the
/// event has those fields.
fn plugin_wakeup(body: &str) -> Result<Fields, Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let body = body.trim();
    // The task ends at its `[prio]`, or before the first column after it.
    let task_end = match body.find(']') {
        Some(close) => close + 1,
        None => [" success=", " CPU:"]
            .iter()
            .filter_map(|column| body.find(column))
            .min()
            .unwrap_or(body.len()),
    };
    let (comm, pid, prio) = plugin_task(&body[..task_end]).ok_or_else(bad)?;
    let mut fields = vec![
        field("comm", comm),
        field("pid", pid),
        field("prio", prio.unwrap_or("120")),
    ];
    for column in body[task_end..].split_whitespace() {
        if let Some(success) = column.strip_prefix("success=") {
            fields.push(field("success", success));
        } else if let Some(cpu) = column.strip_prefix("CPU:") {
            fields.push(field("target_cpu", cpu));
        }
    }
    Ok(fields)
}

/// A function tracer call: the kernel's `func <-parent`, trace-cmd's `func <-- parent`, the
/// function alone (print-parent off, or trace-cmd's default in some versions), or `-R`'s
/// `ip=0x... parent_ip=0x...`. Fields `ip` and, when printed, `parent_ip`.
fn function(body: &str) -> Result<(Fields, BodyForm), Reject> {
    let body = body.trim();
    if looks_like_pairs(body) {
        return Ok((parse_pairs(body), BodyForm::Raw));
    }
    let (ip, parent) = match body.split_once(" <-") {
        Some((ip, parent)) => {
            let parent = parent.strip_prefix('-').unwrap_or(parent).trim();
            (ip.trim(), Some(parent))
        }
        None => (body, None),
    };
    if ip.is_empty() {
        return Err(Reject::new(SkipReason::Body, body));
    }
    let mut fields = vec![field("ip", ip)];
    if let Some(parent) = parent.filter(|p| !p.is_empty()) {
        fields.push(field("parent_ip", parent));
    }
    Ok((fields, BodyForm::Kernel))
}

/// `id=0 args=ARRAY[00, 01, ...]` as raw_syscalls:sys_enter's print format writes it:
/// `NR 0 (a, b, c, d, e, f)`, the six arguments as little-endian 64-bit words in hex.
fn raw_sys_enter(body: &str) -> Result<(Fields, BodyForm), Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let (pairs, id) = raw_syscall(body)?;
    let bytes = array_bytes(pairs.get("args").ok_or_else(bad)?).ok_or_else(bad)?;
    if bytes.len() < 48 {
        return Err(bad());
    }
    let args: Vec<String> = bytes[..48]
        .chunks(8)
        .map(|word| {
            format!(
                "{:x}",
                u64::from_le_bytes(word.try_into().unwrap_or([0; 8]))
            )
        })
        .collect();
    let text = format!("NR {id} ({})", args.join(", "));
    Ok((vec![field("text", text)], BodyForm::Raw))
}

/// `id=1 ret=2` as `NR 1 = 2`.
fn raw_sys_exit(body: &str) -> Result<(Fields, BodyForm), Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let (pairs, id) = raw_syscall(body)?;
    let ret: i64 = pairs
        .get("ret")
        .and_then(|ret| ret.parse().ok())
        .ok_or_else(bad)?;
    Ok((
        vec![field("text", format!("NR {id} = {ret}"))],
        BodyForm::Raw,
    ))
}

/// The pairs of a raw_syscalls body, and its syscall number (`id=`).
fn raw_syscall(body: &str) -> Result<(Pairs, i64), Reject> {
    let pairs = Pairs::of(body);
    let id = pairs
        .get("id")
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| Reject::new(SkipReason::Body, body))?;
    Ok((pairs, id))
}

/// ipi_raise as its print format writes it, `target_mask=00000000,00000004 (Rescheduling
/// interrupts)`, or raw, `target_cpus=ARRAY[04, 00, ..] reason=ffff80000a1b2c3d`: the targets
/// as `target_mask`, the reason's text as `reason` or, raw, its address as `reason_addr`.
fn ipi_raise(body: &str) -> Result<(Fields, BodyForm), Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let body = body.trim();
    if let Some(rest) = body.strip_prefix("target_mask=") {
        let (mask, reason) = rest.split_once(' ').ok_or_else(bad)?;
        let reason = in_parentheses(reason).ok_or_else(bad)?;
        return Ok((
            vec![field("target_mask", mask), field("reason", reason)],
            BodyForm::Kernel,
        ));
    }
    let pairs = Pairs::of(body);
    let bytes = array_bytes(pairs.get("target_cpus").ok_or_else(bad)?).ok_or_else(bad)?;
    let cpus: Vec<String> = bytes
        .iter()
        .enumerate()
        .flat_map(|(index, &byte)| {
            (0..8)
                .filter(move |bit| byte & (1 << bit) != 0)
                .map(move |bit| (index * 8 + bit).to_string())
        })
        .collect();
    let reason = reason_field(pairs.get("reason").ok_or_else(bad)?);
    Ok((
        vec![field("target_mask", cpus.join(",")), reason],
        BodyForm::Raw,
    ))
}

/// A raw `reason=`: libtraceevent prints the string the pointer names when the file's
/// printk formats have it (`reason=Function call interrupts`), else the pointer.
fn reason_field(value: &str) -> (String, String) {
    let digits = value.strip_prefix("0x").unwrap_or(value);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        field("reason_addr", value)
    } else {
        field("reason", value)
    }
}

/// ipi_entry and ipi_exit: `(Rescheduling interrupts)`, or raw, `reason=ffff80000a1b2c3d`.
fn ipi_handler(body: &str) -> Result<(Fields, BodyForm), Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    if let Some(reason) = in_parentheses(body) {
        return Ok((vec![field("reason", reason)], BodyForm::Kernel));
    }
    let pairs = Pairs::of(body);
    let reason = reason_field(pairs.get("reason").ok_or_else(bad)?);
    Ok((vec![reason], BodyForm::Raw))
}

/// The text of `(text)`.
fn in_parentheses(text: &str) -> Option<&str> {
    text.trim().strip_prefix('(')?.strip_suffix(')')
}

/// `ARRAY[8b, eb, 3d]`: the bytes libtraceevent prints for an array field. At most 64 KiB of
/// them, the longest line there is.
pub(crate) fn array_bytes(text: &str) -> Option<Vec<u8>> {
    let inner = text.trim().strip_prefix("ARRAY[")?.strip_suffix(']')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    inner
        .split(',')
        .map(|byte| u8::from_str_radix(byte.trim(), 16).ok())
        .collect()
}

fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn as_pair(token: &str) -> Option<(&str, &str)> {
    token
        .split_once('=')
        .filter(|(name, _)| is_field_name(name))
}

/// The `name=value` pairs of a body, looked up by name (the first of a name).
struct Pairs(Fields);

impl Pairs {
    fn of(body: &str) -> Pairs {
        Pairs(parse_pairs(body))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `a=1 b=x y c=2`: a token that is not `name=value` continues the previous value (comms
/// may hold spaces). sched_switch's `==>` separator is dropped, and the `,` some formats
/// put between pairs (`func=f, csd=0`) is trimmed off the value it ends.
fn parse_pairs(body: &str) -> Fields {
    let mut fields: Fields = Vec::new();
    for token in body.split_whitespace() {
        if token == "==>" {
            continue;
        }
        match (as_pair(token), fields.last_mut()) {
            (Some((name, value)), last) => {
                if let Some((_, previous)) = last {
                    if previous.ends_with(',') {
                        previous.pop();
                    }
                }
                fields.push(field(name, value));
            }
            (None, Some((_, previous))) => {
                previous.push(' ');
                previous.push_str(token);
            }
            // Only when the first token is not a pair, which the caller ruled out.
            (None, None) => fields.push(field("text", token)),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(name: &str, body: &str) -> (Vec<(String, String)>, BodyForm) {
        parse(name, body).unwrap()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, v)| field(n, *v)).collect()
    }

    #[test]
    fn plugin_forms_read_as_the_kernel_prints_them() {
        let kernel = pairs(&[
            ("prev_comm", "memfd:sealed-91"),
            ("prev_pid", "17764"),
            ("prev_prio", "120"),
            ("prev_state", "S"),
            ("next_comm", "opt cgu.04"),
            ("next_pid", "21700"),
            ("next_prio", "125"),
        ]);
        assert_eq!(
            fields(
                "sched_switch",
                "memfd:sealed-91:17764 [120] S ==> opt cgu.04:21700 [125]"
            ),
            (kernel.clone(), BodyForm::Plugin)
        );
        assert_eq!(
            fields("sched_switch", "prev_comm=memfd:sealed-91 prev_pid=17764 prev_prio=120 prev_state=1 next_comm=opt cgu.04 next_pid=21700 next_prio=125"),
            (kernel, BodyForm::Raw)
        );
        let (f, _) = fields(
            "sched_switch",
            "ls:2952 [120] D|W ==> swapper/0:0 [120] Latency: 885.901 usecs",
        );
        assert_eq!(f[3].1, "D|I");
        let (f, _) = fields("sched_switch", "prev_comm=a prev_pid=1 prev_prio=120 prev_state=258 next_comm=b next_pid=2 next_prio=120");
        assert_eq!(f[3].1, "D+");
        assert!(parse("sched_switch", "a:1 [120] ? ==> b:2 [120]").is_err());

        let wake = pairs(&[
            ("comm", "migration/1"),
            ("pid", "12"),
            ("prio", "0"),
            ("success", "1"),
            ("target_cpu", "001"),
        ]);
        assert_eq!(
            fields("sched_wakeup", "migration/1:12 [0] success=1 CPU:001"),
            (wake, BodyForm::Plugin)
        );
        let (f, _) = fields(
            "sched_wakeup",
            "vivid-000-vid-c:212 [120]<CANT FIND FIELD success> CPU:000",
        );
        assert_eq!(f[0].1, "vivid-000-vid-c");
    }

    #[test]
    fn ipi_raise_and_handler_in_kernel_and_raw_forms() {
        assert_eq!(
            fields(
                "ipi_raise",
                "target_mask=00000000,00000004 (Rescheduling interrupts)"
            ),
            (
                pairs(&[
                    ("target_mask", "00000000,00000004"),
                    ("reason", "Rescheduling interrupts")
                ]),
                BodyForm::Kernel
            )
        );
        assert_eq!(
            fields(
                "ipi_raise",
                "target_cpus=ARRAY[06, 00, 00, 00, 00, 00, 00, 00] reason=ffff800081a2b3c8"
            ),
            (
                pairs(&[("target_mask", "1,2"), ("reason_addr", "ffff800081a2b3c8")]),
                BodyForm::Raw
            )
        );
        assert_eq!(
            fields("ipi_entry", "(Function call interrupts)").0,
            pairs(&[("reason", "Function call interrupts")])
        );
        assert_eq!(
            fields("ipi_exit", "reason=ffff800081a2b3c8").0,
            pairs(&[("reason_addr", "ffff800081a2b3c8")])
        );
        assert_eq!(
            fields(
                "ipi_raise",
                "target_cpus=ARRAY[01, 00, 00, 00, 00, 00, 00, 00] reason=Function call interrupts"
            )
            .0,
            pairs(&[("target_mask", "0"), ("reason", "Function call interrupts")])
        );
        assert_eq!(
            fields("ipi_entry", "reason=Function call interrupts").0,
            pairs(&[("reason", "Function call interrupts")])
        );
        assert!(parse("ipi_raise", "target_mask=1").is_err());
        assert!(parse("ipi_entry", "Function call").is_err());
    }

    #[test]
    fn raw_lock_and_syscall_fields() {
        assert_eq!(
            fields("contention_begin", "lock_addr=0xffff8881cea69378 flags=34"),
            (
                pairs(&[("lock_addr", "ffff8881cea69378"), ("flags", "READ|MUTEX")]),
                BodyForm::Raw
            )
        );
        assert_eq!(contention_flag_names(0x41), "SPIN|0x40");
        assert_eq!(
            fields("contention_end", "lock_addr=0xffff8881cea69378 ret=0").0[1],
            field("ret", "0")
        );
        let args = "ARRAY[01, 00, 00, 00, 00, 00, 00, 00, 00, 50, 10, f0, d5, 55, 00, 00, 01, 00, 00, 00, 00, 00, 00, 00, f0, 04, a7, fc, a9, 7f, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00, 00]";
        assert_eq!(
            fields("sys_enter", &format!("id=1 args={args}")).0,
            pairs(&[("text", "NR 1 (1, 55d5f0105000, 1, 7fa9fca704f0, 0, 0)")])
        );
        assert_eq!(
            fields("sys_exit", "id=0 ret=-11").0,
            pairs(&[("text", "NR 0 = -11")])
        );
    }

    #[test]
    fn function_tracer_bodies() {
        assert_eq!(
            fields("function", "do_sys_open <-do_syscall_64").0,
            pairs(&[("ip", "do_sys_open"), ("parent_ip", "do_syscall_64")])
        );
        assert_eq!(
            fields("function", "            do_splice_to <-- sys_splice").0,
            pairs(&[("ip", "do_splice_to"), ("parent_ip", "sys_splice")])
        );
        assert_eq!(
            fields("function", "net_rx_action").0,
            pairs(&[("ip", "net_rx_action")])
        );
        assert_eq!(
            fields("function", "ip=0xffffffff81a0 parent_ip=0xffffffff81b0").1,
            BodyForm::Raw
        );
    }
}
