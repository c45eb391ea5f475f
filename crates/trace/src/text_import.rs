//! Importer for ftrace's text output: the `trace` and `trace_pipe` files, as pasted into bug
//! reports when no binary recording exists.
//!
//! One event line looks like
//!
//! ```text
//!             bash-16113   [000] d..3.  1104.104052: contention_begin: ffff888627c2ba80 (flags=SPIN)
//! ```
//!
//! that is `COMM-PID [CPU] IRQ-INFO SECS.USECS: NAME: BODY`, where the irq-info column is only
//! there when the `irq-info` option was on. A `<stack trace>` line followed by ` => frame`
//! lines carries the stack of the previous event of the same task on the same CPU.
//!
//! The importer is lenient line by line: whatever it does not understand is reported in
//! [`TextImport::skipped`] with its line number, and the rest is still imported. It never
//! sizes anything from numbers in the input, so hostile text costs only its own length.

use std::collections::HashMap;

/// The result of [`import_text`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextImport {
    /// Events in the order of the text (which is time order for `trace`).
    pub events: Vec<TextEvent>,
    /// Lines that were neither comments, blank, nor understood.
    pub skipped: Vec<Skipped>,
}

/// One event line, with the stack that followed it if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextEvent {
    /// Nanoseconds; text usually has microseconds only, so the last three digits are 0.
    pub ts_ns: u64,
    pub cpu: u32,
    pub comm: String,
    pub pid: i32,
    /// The irq-info column (e.g. `d..3.`), when the text has one.
    pub irq_info: Option<String>,
    /// Event name, e.g. `contention_begin` or `tracing_mark_write`.
    pub name: String,
    /// `name=value` pairs in print order; a body in any other format is one `("text", body)`.
    pub fields: Vec<(String, String)>,
    /// Frames of the `<stack trace>` recorded right after this event, outermost last.
    pub stack: Vec<String>,
}

impl TextEvent {
    /// The value of the first field called `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }
}

/// A line the importer did not understand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// 1-based, as editors count.
    pub line: usize,
    pub reason: String,
}

/// Imports ftrace text output. Never fails: see [`TextImport::skipped`].
pub fn import_text(text: &str) -> TextImport {
    let mut importer = Importer::default();
    for (index, line) in text.lines().enumerate() {
        if let Err(reason) = importer.line(line) {
            importer.out.skipped.push(Skipped {
                line: index + 1,
                reason,
            });
        }
    }
    importer.out
}

#[derive(Default)]
struct Importer {
    out: TextImport,
    /// Index of the last event per (cpu, pid): where a `<stack trace>` belongs. Kept as a
    /// map so finding it does not scan back through the events.
    last_event: HashMap<(u32, i32), usize>,
    /// The event that ` => frame` lines are appended to, set by a `<stack trace>` line and
    /// cleared by any other line so frames never attach across unrelated lines.
    stack_target: Option<usize>,
}

impl Importer {
    fn line(&mut self, line: &str) -> Result<(), String> {
        let trimmed = line.trim();
        if let Some(frame) = trimmed.strip_prefix("=>") {
            return self.frame(frame.trim());
        }
        self.stack_target = None;
        if trimmed.is_empty() || trimmed.starts_with('#') {
            return Ok(());
        }
        let header = parse_header(line)?;
        match header.name {
            "<stack trace>" => self.stack_start(&header),
            _ => self.event(header),
        }
    }

    fn frame(&mut self, frame: &str) -> Result<(), String> {
        let target = self
            .stack_target
            .ok_or("stack frame without a <stack trace> line for a known event before it")?;
        self.out.events[target].stack.push(frame.to_string());
        Ok(())
    }

    fn stack_start(&mut self, header: &Header<'_>) -> Result<(), String> {
        let target = self
            .last_event
            .get(&(header.cpu, header.pid))
            .copied()
            .ok_or("<stack trace> with no earlier event of the same cpu and pid")?;
        self.stack_target = Some(target);
        Ok(())
    }

    fn event(&mut self, header: Header<'_>) -> Result<(), String> {
        let fields = parse_body(header.name, header.body)?;
        self.last_event
            .insert((header.cpu, header.pid), self.out.events.len());
        self.out.events.push(TextEvent {
            ts_ns: header.ts_ns,
            cpu: header.cpu,
            comm: header.comm.to_string(),
            pid: header.pid,
            irq_info: header.irq_info.map(str::to_string),
            name: header.name.to_string(),
            fields,
            stack: Vec::new(),
        });
        Ok(())
    }
}

/// The columns every event line starts with, borrowed from the line.
struct Header<'a> {
    comm: &'a str,
    pid: i32,
    cpu: u32,
    irq_info: Option<&'a str>,
    ts_ns: u64,
    name: &'a str,
    body: &'a str,
}

fn parse_header(line: &str) -> Result<Header<'_>, String> {
    let (task, cpu, rest) = split_at_cpu(line).ok_or("no [CPU] column")?;
    let (comm, pid) = parse_task(task)?;
    let (irq_info, ts_ns, rest) = parse_info_and_time(rest)?;
    // The name ends at the first ": "; `<stack trace>` is the one name with a space, and
    // has no colon after it.
    let rest = rest.trim_end();
    let (name, body) = match rest.split_once(": ") {
        _ if rest == "<stack trace>" => (rest, ""),
        Some((name, body)) => (name, body),
        None => (
            rest.strip_suffix(':')
                .ok_or("no `name:` after the timestamp")?,
            "",
        ),
    };
    if name.is_empty() || (name.contains(char::is_whitespace) && name != "<stack trace>") {
        return Err(format!("not an event name: {name:?}"));
    }
    Ok(Header {
        comm,
        pid,
        cpu,
        irq_info,
        ts_ns,
        name,
        body,
    })
}

/// Finds the first ` [digits]` column: left of it is `COMM-PID`, right of it the rest.
/// Searching for the bracketed number (not the first `[`) lets comms contain brackets.
fn split_at_cpu(line: &str) -> Option<(&str, u32, &str)> {
    let mut from = 0;
    while let Some(offset) = line[from..].find('[') {
        let open = from + offset;
        from = open + 1;
        let preceded_by_space = line[..open].ends_with(char::is_whitespace);
        // No `]` anywhere after this `[` means none after a later `[` either.
        let len = line[open + 1..].find(']')?;
        let digits = &line[open + 1..open + 1 + len];
        if preceded_by_space && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            let cpu = digits.parse().ok()?;
            return Some((&line[..open], cpu, &line[open + 2 + len..]));
        }
    }
    None
}

/// `COMM-PID`, where COMM may hold spaces and dashes: the pid follows the last dash.
/// A `(TGID)` column (the record-tgid option) may follow and is dropped.
fn parse_task(task: &str) -> Result<(&str, i32), String> {
    let mut task = task.trim();
    if task.ends_with(')') {
        if let Some(open) = task.rfind(" (") {
            task = task[..open].trim_end();
        }
    }
    let (comm, pid) = task
        .rsplit_once('-')
        .ok_or_else(|| format!("no -PID in task column {task:?}"))?;
    let pid = pid
        .parse()
        .map_err(|_| format!("bad pid {pid:?} in task column"))?;
    Ok((comm.trim_start(), pid))
}

/// The optional irq-info column, then `SECS.FRACTION:`, then the rest of the line.
fn parse_info_and_time(rest: &str) -> Result<(Option<&str>, u64, &str), String> {
    let (first, after_first) = next_token(rest).ok_or("nothing after the [CPU] column")?;
    if let Some(time) = first.strip_suffix(':') {
        if let Some(ts_ns) = parse_time(time) {
            return Ok((None, ts_ns, after_first.trim_start()));
        }
    }
    let (second, after_second) = next_token(after_first).ok_or("no timestamp")?;
    let time = second
        .strip_suffix(':')
        .ok_or_else(|| format!("timestamp {second:?} does not end in ':'"))?;
    let ts_ns = parse_time(time).ok_or_else(|| format!("bad timestamp {time:?}"))?;
    Ok((Some(first), ts_ns, after_second.trim_start()))
}

fn next_token(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start();
    if text.is_empty() {
        return None;
    }
    Some(text.split_once(char::is_whitespace).unwrap_or((text, "")))
}

/// `SECS.FRACTION` to nanoseconds; up to 9 fraction digits are kept (`trace` prints 6,
/// other clocks and tools print more).
fn parse_time(time: &str) -> Option<u64> {
    let (secs, fraction) = time.split_once('.')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(secs) || !all_digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let scale = 10u64.pow(9 - fraction.len() as u32);
    let secs: u64 = secs.parse().ok()?;
    let fraction: u64 = fraction.parse().ok()?;
    secs.checked_mul(1_000_000_000)?
        .checked_add(fraction * scale)
}

fn parse_body(name: &str, body: &str) -> Result<Vec<(String, String)>, String> {
    match name {
        // The marker text is whatever user space wrote, even if it looks like name=value.
        "tracing_mark_write" => Ok(text_field(body)),
        "contention_begin" => parse_contention(body, "flags"),
        "contention_end" => parse_contention(body, "ret"),
        _ if looks_like_pairs(body) => Ok(parse_pairs(body)),
        _ => Ok(text_field(body)),
    }
}

fn text_field(body: &str) -> Vec<(String, String)> {
    vec![("text".to_string(), body.trim_end().to_string())]
}

/// The lock events print `ADDR (key=VALUE)` rather than name=value pairs.
fn parse_contention(body: &str, key: &str) -> Result<Vec<(String, String)>, String> {
    let bad = || format!("expected `ADDR ({key}=VALUE)`, got {body:?}");
    let (addr, rest) = body.trim().split_once(' ').ok_or_else(bad)?;
    let addr = addr.strip_prefix("0x").unwrap_or(addr);
    if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let value = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|r| r.strip_prefix(key))
        .and_then(|r| r.strip_prefix('='))
        .ok_or_else(bad)?;
    Ok(vec![
        ("lock_addr".to_string(), addr.to_string()),
        (key.to_string(), value.to_string()),
    ])
}

fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn as_pair(token: &str) -> Option<(&str, &str)> {
    token
        .split_once('=')
        .filter(|(name, _)| is_field_name(name))
}

fn looks_like_pairs(body: &str) -> bool {
    body.split_whitespace().next().and_then(as_pair).is_some()
}

/// `a=1 b=x y c=2`: a token that is not `name=value` continues the previous value (comms
/// may hold spaces). sched_switch's `==>` separator is dropped, and the `,` some formats
/// put between pairs (`func=f, csd=0`) is trimmed off the value it ends.
fn parse_pairs(body: &str) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = Vec::new();
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
                fields.push((name.to_string(), value.to_string()));
            }
            (None, Some((_, previous))) => {
                previous.push(' ');
                previous.push_str(token);
            }
            // Unreachable: looks_like_pairs checked the first token is a pair.
            (None, None) => fields.push(("text".to_string(), token.to_string())),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> TextEvent {
        let import = import_text(line);
        assert_eq!(import.skipped, vec![], "{line}");
        assert_eq!(import.events.len(), 1);
        import.events.into_iter().next().unwrap()
    }

    #[test]
    fn line_with_irq_info() {
        let e = one("            bash-16113   [000] d..3.  1104.104052: contention_begin: ffff888627c2ba80 (flags=SPIN|READ)");
        assert_eq!(
            (e.comm.as_str(), e.pid, e.cpu, e.ts_ns),
            ("bash", 16113, 0, 1_104_104_052_000)
        );
        assert_eq!(e.irq_info.as_deref(), Some("d..3."));
        assert_eq!(e.name, "contention_begin");
        assert_eq!(e.field("lock_addr"), Some("ffff888627c2ba80"));
        assert_eq!(e.field("flags"), Some("SPIN|READ"));
    }

    #[test]
    fn line_without_irq_info_and_more_digits() {
        let e =
            one("  <idle>-0     [003]  98.123456789: contention_end: ffff888627c2ba80 (ret=-4)");
        assert_eq!((e.comm.as_str(), e.pid, e.cpu), ("<idle>", 0, 3));
        assert_eq!(e.irq_info, None);
        assert_eq!(e.ts_ns, 98_123_456_789);
        assert_eq!(e.field("ret"), Some("-4"));
    }

    #[test]
    fn comm_with_dash_and_space() {
        let e = one("  my-app worker-77 [001] .... 5.000001: sched_waking: comm=my app pid=9 prio=120 target_cpu=001");
        assert_eq!((e.comm.as_str(), e.pid), ("my-app worker", 77));
        assert_eq!(e.field("comm"), Some("my app"));
        assert_eq!(e.field("target_cpu"), Some("001"));
    }

    #[test]
    fn sched_switch_and_comma_separated_pairs() {
        let e = one("b-1 [000] d..2. 1.000000: sched_switch: prev_comm=bash prev_pid=1 prev_prio=120 prev_state=S ==> next_comm=seq next_pid=2 next_prio=120");
        assert_eq!(e.field("prev_state"), Some("S"));
        assert_eq!(e.field("next_pid"), Some("2"));
        assert_eq!(e.fields.len(), 7);
        let e = one("b-1 [000] d..2. 1.000000: csd_function_entry: func=flush_tlb_func, csd=0000000000000000");
        assert_eq!(e.field("func"), Some("flush_tlb_func"));
    }

    #[test]
    fn marker_and_free_text_bodies() {
        let e = one("bash-1 [000] ...1. 2.5: tracing_mark_write: phase=2 starts");
        assert_eq!(e.ts_ns, 2_500_000_000);
        assert_eq!(e.fields, vec![("text".into(), "phase=2 starts".into())]);
        let e = one("bash-1 [000] ...1. 2.5: workqueue_thing: free text here");
        assert_eq!(e.field("text"), Some("free text here"));
    }

    #[test]
    fn stack_attaches_to_the_previous_event_of_the_same_task() {
        let text = "\
a-1 [000] d..3. 1.000001: contention_begin: ffff0000 (flags=SPIN)
b-2 [001] d..2. 1.000002: sched_waking: comm=a pid=1 prio=120 target_cpu=000
a-1 [000] d..3. 1.000003: <stack trace>
 => _raw_spin_lock
 => __schedule
b-2 [001] d..2. 1.000004: sched_waking: comm=a pid=1 prio=120 target_cpu=000
";
        let import = import_text(text);
        assert_eq!(import.skipped, vec![]);
        assert_eq!(import.events.len(), 3);
        assert_eq!(import.events[0].stack, ["_raw_spin_lock", "__schedule"]);
        assert!(import.events[1].stack.is_empty());
    }

    #[test]
    fn garbage_is_skipped_with_line_numbers() {
        let text = "\
# tracer: nop

garbage
 => orphan_frame
x-1 [000] d..3. 1.000003: <stack trace>
bash-1 [000] d..3. 99999999999999999999.1: sched_waking: pid=1
bash-x [000] d..3. 1.1: sched_waking: pid=1
bash-1 [99999999999] d..3. 1.1: sched_waking: pid=1
bash-1 [000] d..3. 1.1: contention_begin: nonsense
bash-1 [000] d..3. 1.1
bash-1 [000]
ok-1 [000] 1.1: e:
\u{0}\u{ffff}[[[ ]]] -[0] -- [1]
";
        let import = import_text(text);
        let lines: Vec<usize> = import.skipped.iter().map(|s| s.line).collect();
        assert_eq!(
            lines,
            [3, 4, 5, 6, 7, 8, 9, 10, 11, 13],
            "{:#?}",
            import.skipped
        );
        assert_eq!(import.events.len(), 1);
        assert_eq!(import.events[0].name, "e");
        assert!(import.skipped.iter().all(|s| !s.reason.contains('\n')));
    }
}
