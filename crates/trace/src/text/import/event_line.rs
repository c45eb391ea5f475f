//! The columns that start an event line, in the three layouts the kernel prints
//! (kernel/trace/trace_output.c):
//!
//! ```text
//! default    `trace_print_context`:      bash-16113   [000] d..3.  1104.104052: NAME: BODY
//!            (the irq-info column `d..3.` only with options/irq-info, a `(TGID)` column
//!            after the task with options/record-tgid, a bare integer time for counter clocks)
//! latency    `trace_print_lat_context`:     bash-14856     0d..2. 200129us+: NAME: BODY
//!            (options/latency-format: comm cut to 8, CPU glued to the flags, microseconds
//!            since the buffer started and a mark for the gap to the next event)
//! verbose    the same with options/verbose:
//!                    bash   14856   0 1 00000002 00000001 [21e5817fe] 200.129ms (+0.037ms): NAME: BODY
//!            (the bracketed number is the absolute time in microseconds, in hex)
//! trace-cmd  `trace-cmd report` prints the default layout without the irq-info column, and
//!            with `-l` the latency layout with the trace clock's time in place of the
//!            microseconds:    bash-14856   0d..2. 9099.024382: NAME: BODY
//! ```
//!
//! The function tracer prints `FUNCTION <-PARENT` (or only `FUNCTION` with print-parent off)
//! where events print `NAME: BODY`; such lines come out as an event named `function` whose
//! body is that text.

use super::skip::{Reject, SkipReason};
use super::{TextClock, MAX_CPUS};

/// The columns of one event line, borrowed from the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header<'a> {
    pub comm: &'a str,
    pub pid: i32,
    pub cpu: u32,
    pub irq_info: Option<&'a str>,
    pub ts_ns: u64,
    pub clock: TextClock,
    pub name: &'a str,
    pub body: &'a str,
    pub layout: Layout,
}

/// Which of the layouts a line was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    Default,
    /// The kernel's latency-format: microseconds since the buffer started.
    Latency,
    /// `trace-cmd report -l`: the latency columns with the trace clock's time.
    LatencyAbsolute,
    Verbose,
}

/// The header of an event line in any of the three layouts.
pub(crate) fn parse(line: &str) -> Result<Header<'_>, Reject> {
    let default = default_layout(line);
    if default.is_ok() {
        return default;
    }
    if let Some(verbose) = verbose_layout(line) {
        return verbose;
    }
    if let Some(latency) = latency_layout(line) {
        return latency;
    }
    default
}

/// Whitespace-separated tokens with their byte offsets (any Unicode whitespace, so offsets
/// always fall on character boundaries).
fn tokens(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = text;
    let mut offset = 0;
    std::iter::from_fn(move || {
        let trimmed = rest.trim_start();
        offset += rest.len() - trimmed.len();
        if trimmed.is_empty() {
            return None;
        }
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        let token = (offset, &trimmed[..end]);
        offset += end;
        rest = &trimmed[end..];
        Some(token)
    })
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

fn parse_cpu(digits: &str) -> Result<u32, Reject> {
    digits
        .parse::<u32>()
        .ok()
        .filter(|&cpu| cpu < MAX_CPUS)
        .ok_or_else(|| Reject::new(SkipReason::Cpu, digits))
}

// ---- default layout ----

fn default_layout(line: &str) -> Result<Header<'_>, Reject> {
    let (task, cpu, rest) =
        split_at_cpu(line).ok_or_else(|| Reject::new(SkipReason::NotTrace, line))?;
    let (comm, pid) = parse_task(task)?;
    let cpu = parse_cpu(cpu)?;
    let (irq_info, ts_ns, clock, rest) = parse_info_and_time(rest)?;
    let (name, body) = split_name(rest)?;
    Ok(Header {
        comm,
        pid,
        cpu,
        irq_info,
        ts_ns,
        clock,
        name,
        body,
        layout: Layout::Default,
    })
}

/// Finds the first ` [digits]` column: left of it is `COMM-PID`, right of it the rest.
/// Searching for the bracketed number (not the first `[`) lets comms contain brackets.
fn split_at_cpu(line: &str) -> Option<(&str, &str, &str)> {
    let mut from = 0;
    while let Some(offset) = line[from..].find('[') {
        let open = from + offset;
        from = open + 1;
        let preceded_by_space = line[..open].ends_with(char::is_whitespace);
        // No `]` anywhere after this `[` means none after a later `[` either.
        let len = line[open + 1..].find(']')?;
        let digits = &line[open + 1..open + 1 + len];
        if preceded_by_space && all_digits(digits) {
            return Some((&line[..open], digits, &line[open + 2 + len..]));
        }
    }
    None
}

/// `COMM-PID`, where COMM may hold spaces and dashes: the pid follows the last dash.
/// A `(TGID)` column (options/record-tgid) may follow and is dropped.
fn parse_task(task: &str) -> Result<(&str, i32), Reject> {
    let mut task = task.trim();
    if task.ends_with(')') {
        if let Some(open) = task.rfind('(') {
            task = task[..open].trim_end();
        }
    }
    let (comm, pid) = task
        .rsplit_once('-')
        .ok_or_else(|| Reject::new(SkipReason::Task, task))?;
    let pid = pid
        .parse()
        .map_err(|_| Reject::new(SkipReason::Task, task))?;
    Ok((comm.trim_start(), pid))
}

/// The optional irq-info column, then the time and its colon, then the rest of the line.
fn parse_info_and_time(rest: &str) -> Result<(Option<&str>, u64, TextClock, &str), Reject> {
    let no_time = || Reject::new(SkipReason::Time, rest);
    let (first, after_first) = next_token(rest).ok_or_else(no_time)?;
    if let Some(time) = first.strip_suffix(':') {
        if let Some((ts_ns, clock)) = parse_time(time) {
            return Ok((None, ts_ns, clock, after_first.trim_start()));
        }
    }
    let (second, after_second) = next_token(after_first).ok_or_else(no_time)?;
    let time = second.strip_suffix(':').ok_or_else(no_time)?;
    let (ts_ns, clock) = parse_time(time).ok_or_else(|| Reject::new(SkipReason::Time, time))?;
    Ok((Some(first), ts_ns, clock, after_second.trim_start()))
}

fn next_token(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start();
    if text.is_empty() {
        return None;
    }
    Some(text.split_once(char::is_whitespace).unwrap_or((text, "")))
}

/// `SECS.FRACTION` to nanoseconds, up to 9 fraction digits kept (`trace` prints 6); a bare
/// integer is a counter clock's raw value (`trace_print_time` without TIME_IN_NS).
fn parse_time(time: &str) -> Option<(u64, TextClock)> {
    let Some((secs, fraction)) = time.split_once('.') else {
        return all_digits(time)
            .then(|| time.parse().ok())
            .flatten()
            .map(|ticks| (ticks, TextClock::Counter));
    };
    if !all_digits(secs) || !all_digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let scale = 10u64.pow(9 - fraction.len() as u32);
    let secs: u64 = secs.parse().ok()?;
    let fraction: u64 = fraction.parse().ok()?;
    let ts = secs
        .checked_mul(1_000_000_000)?
        .checked_add(fraction * scale)?;
    Some((
        ts,
        TextClock::Absolute {
            resolution_ns: scale as u32,
        },
    ))
}

/// The event name and its body. The name ends at the first `: `; `<stack trace>` and
/// `<user stack trace>` are the names with a space, and have nothing after them.
pub(crate) fn split_name(rest: &str) -> Result<(&str, &str), Reject> {
    let rest = rest.trim_end();
    if rest == "<stack trace>" || rest == "<user stack trace>" {
        return Ok((rest, ""));
    }
    let (name, body) = match rest.split_once(": ") {
        Some((name, body)) => (name, body),
        None => match rest.strip_suffix(':') {
            Some(name) => (name, ""),
            // The function tracer prints `func <-parent`, or `func` alone with print-parent
            // off, where events print `name: body`; sym-addr adds ` <address>` after each.
            // What precedes ` <-` must be a kernel symbol too: a user stack's `/bin/a[+0x4]`
            // is not a function call.
            None if is_function_call(rest) => return Ok(("function", rest)),
            None => return Err(Reject::new(SkipReason::EventName, rest)),
        },
    };
    let name = printed_symbol(name).unwrap_or(name);
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(Reject::new(SkipReason::EventName, name));
    }
    Ok((name, body))
}

/// `func`, `func <-parent`, with sym-addr's ` <address>` after either.
fn is_function_call(text: &str) -> bool {
    let (call, parent) = match text.split_once(" <-") {
        Some((call, parent)) => (call, Some(parent)),
        None => (text, None),
    };
    let symbol = |part: &str| {
        let part = part.trim();
        let part = part.strip_prefix('-').unwrap_or(part).trim_start();
        let bare = match part.rsplit_once(" <") {
            Some((symbol, address))
                if address.strip_suffix('>').is_some_and(|hex| {
                    !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())
                }) =>
            {
                symbol
            }
            _ => part,
        };
        // An address where kallsyms had no name.
        let address = bare
            .strip_prefix("0x")
            .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        is_symbol(bare) || address
    };
    symbol(call) && parent.is_none_or(|parent| parent.trim().is_empty() || symbol(parent))
}

/// `name`, `name.isra.0` or `name+0x10/0x9c`, as `%ps` and `%pS` print a kernel function.
fn is_symbol(text: &str) -> bool {
    text.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'+' | b'/'))
}

/// The function of a name printed as a symbol: ftrace:print (the marker) and trace_printk
/// print their caller with `%ps`, which sym-offset and sym-addr turn into
/// `tracing_mark_write+0x8a/0x170 <ffffffff8149ab1a>`.
fn printed_symbol(name: &str) -> Option<&str> {
    let (function, offset) = name.split_once("+0x")?;
    let offset = offset.split([' ', '/']).next().unwrap_or("");
    let hex = !offset.is_empty() && offset.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !function.is_empty() && !function.contains(char::is_whitespace)).then_some(function)
}

// ---- latency layout ----

/// `%8.8s-%-7d %3d` + flags + ` %4lldus%c: `. Only recognised when the CPU-and-flags token is
/// followed by a `NNNus` time; `None` otherwise.
fn latency_layout(line: &str) -> Option<Result<Header<'_>, Reject>> {
    let toks: Vec<(usize, &str)> = tokens(line).take(8).collect();
    // The comm is at most 8 characters: at most a few tokens before the CPU column.
    for k in 1..toks.len() {
        let (cpu_at, cpu_flags) = toks[k - 1];
        let (time_at, time) = toks[k];
        let Some((cpu, flags)) = split_cpu_flags(cpu_flags) else {
            continue;
        };
        let Some(stamp) = latency_time(time) else {
            continue;
        };
        return Some(latency_header(
            line, cpu_at, cpu, flags, time_at, time, stamp,
        ));
    }
    None
}

fn latency_header<'a>(
    line: &'a str,
    cpu_at: usize,
    cpu: &'a str,
    flags: &'a str,
    time_at: usize,
    time: &'a str,
    stamp: LatencyTime<'a>,
) -> Result<Header<'a>, Reject> {
    let (comm, pid) = parse_task(&line[..cpu_at])?;
    let cpu = parse_cpu(cpu)?;
    let (ts_ns, clock, layout, colon) = match stamp {
        LatencyTime::Micros { digits, colon } => {
            let ts_ns = digits
                .parse::<u64>()
                .ok()
                .and_then(|us| us.checked_mul(1000))
                .ok_or_else(|| Reject::new(SkipReason::Time, digits))?;
            (ts_ns, TextClock::SinceStart, Layout::Latency, colon)
        }
        LatencyTime::Absolute { ts_ns, clock } => (ts_ns, clock, Layout::LatencyAbsolute, true),
    };
    let mut rest = &line[time_at + time.len()..];
    if !colon {
        rest = rest
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| Reject::new(SkipReason::Time, time))?;
    }
    let (name, body) = split_name(rest.trim_start())?;
    Ok(Header {
        comm,
        pid,
        cpu,
        irq_info: Some(flags),
        ts_ns,
        clock,
        name,
        body,
        layout,
    })
}

/// `0d..2.` (CPU digits glued to 4 or 5 latency flags; the first flag is never a digit).
fn split_cpu_flags(token: &str) -> Option<(&str, &str)> {
    let digits = token.bytes().take_while(u8::is_ascii_digit).count();
    let (cpu, flags) = token.split_at(digits);
    let first_ok = flags
        .bytes()
        .next()
        .is_some_and(|b| matches!(b, b'D' | b'd' | b'b' | b'X' | b'.'));
    let rest_ok = flags
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.');
    (digits > 0 && (4..=5).contains(&flags.len()) && first_ok && rest_ok).then_some((cpu, flags))
}

/// The time column of a latency-layout line.
#[derive(Debug, Clone, Copy)]
enum LatencyTime<'a> {
    /// The kernel's `200129us+:`, `5us` (then ` :`), `5us!`; `colon` when this token has it.
    Micros { digits: &'a str, colon: bool },
    /// trace-cmd's `9099.024382:`.
    Absolute { ts_ns: u64, clock: TextClock },
}

fn latency_time(token: &str) -> Option<LatencyTime<'_>> {
    let (token, colon) = match token.strip_suffix(':') {
        Some(t) => (t, true),
        None => (token, false),
    };
    if colon {
        if let Some((ts_ns, clock)) = parse_time(token) {
            return Some(LatencyTime::Absolute { ts_ns, clock });
        }
    }
    let us = token.find("us")?;
    let (digits, tail) = (&token[..us], &token[us + 2..]);
    let mark_ok = tail.is_empty() || (tail.len() == 1 && "+!#*@$".contains(tail));
    (all_digits(digits) && mark_ok).then_some(LatencyTime::Micros { digits, colon })
}

// ---- verbose latency layout ----

/// `%16s %7d %3d %d %08x %08lx [%08llx] %ld.%03ldms (+%ld.%03ldms): `; `None` when the
/// bracketed time and the two millisecond columns are not there.
fn verbose_layout(line: &str) -> Option<Result<Header<'_>, Reject>> {
    if !line.contains("ms (+") {
        return None;
    }
    let toks: Vec<(usize, &str)> = tokens(line).take(12).collect();
    let b = (5..toks.len().saturating_sub(2)).find(|&b| {
        let (_, stamp) = toks[b];
        stamp.len() > 2
            && stamp.starts_with('[')
            && stamp.ends_with(']')
            && stamp[1..stamp.len() - 1]
                .bytes()
                .all(|c| c.is_ascii_hexdigit())
            && toks[b + 1].1.ends_with("ms")
            && toks[b + 2].1.starts_with("(+")
            && toks[b + 2].1.contains("ms)")
    })?;
    Some(verbose_header(line, &toks, b))
}

fn verbose_header<'a>(
    line: &'a str,
    toks: &[(usize, &'a str)],
    b: usize,
) -> Result<Header<'a>, Reject> {
    let (comm_end, pid) = toks[b - 5];
    let pid = pid
        .parse()
        .map_err(|_| Reject::new(SkipReason::Task, pid))?;
    let cpu = parse_cpu(toks[b - 4].1)?;
    let stamp = toks[b].1;
    let ts_ns = u64::from_str_radix(&stamp[1..stamp.len() - 1], 16)
        .ok()
        .and_then(|us| us.checked_mul(1000))
        .ok_or_else(|| Reject::new(SkipReason::Time, stamp))?;
    let (rel_at, rel) = toks[b + 2];
    let after = &line[rel_at..];
    let close = after
        .find("):")
        .ok_or_else(|| Reject::new(SkipReason::Time, rel))?;
    let (name, body) = split_name(after[close + 2..].trim_start())?;
    Ok(Header {
        comm: line[..comm_end].trim(),
        pid,
        cpu,
        irq_info: None,
        ts_ns,
        clock: TextClock::Absolute {
            resolution_ns: 1000,
        },
        name,
        body,
        layout: Layout::Verbose,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_layouts_give_the_same_columns() {
        let default = parse("            bash-14856   [000] d..2.  9099.024382: sched_wakeup_new: comm=bash pid=14904").unwrap();
        assert_eq!(
            (default.comm, default.pid, default.cpu, default.irq_info),
            ("bash", 14856, 0, Some("d..2."))
        );
        assert_eq!(default.ts_ns, 9_099_024_382_000);
        assert_eq!(
            (default.name, default.body),
            ("sched_wakeup_new", "comm=bash pid=14904")
        );

        let latency =
            parse("    bash-14856     0d..2. 200129us+: sched_wakeup_new: comm=bash pid=14904")
                .unwrap();
        assert_eq!(
            (latency.comm, latency.pid, latency.cpu, latency.irq_info),
            ("bash", 14856, 0, Some("d..2."))
        );
        assert_eq!(
            (latency.ts_ns, latency.clock),
            (200_129_000, TextClock::SinceStart)
        );
        assert_eq!(latency.name, "sched_wakeup_new");

        let spaced = parse("  kworker-7        12d.h1.    5us : <stack trace>").unwrap();
        assert_eq!(
            (spaced.cpu, spaced.ts_ns, spaced.name),
            (12, 5000, "<stack trace>")
        );

        let verbose = parse("            bash   14856   0 1 00000002 00000001 [21e5817fe] 200.129ms (+0.037ms): sched_wakeup_new: comm=bash pid=14904").unwrap();
        assert_eq!((verbose.comm, verbose.pid, verbose.cpu), ("bash", 14856, 0));
        assert_eq!(verbose.ts_ns, 0x21e5817fe * 1000);
        assert_eq!(verbose.body, "comm=bash pid=14904");
    }

    #[test]
    fn trace_cmd_latency_columns_with_the_trace_clock() {
        let h = parse("   sleep-19560   1dN.4. 23219.229485: sched_wakeup:         migration/1:21 [0] CPU:001").unwrap();
        assert_eq!(
            (h.comm, h.pid, h.cpu, h.irq_info),
            ("sleep", 19560, 1, Some("dN.4."))
        );
        assert_eq!(
            (h.ts_ns, h.layout),
            (23_219_229_485_000, Layout::LatencyAbsolute)
        );
        assert_eq!(h.body.trim(), "migration/1:21 [0] CPU:001");
    }

    #[test]
    fn tgid_column_and_counter_clock() {
        let h =
            parse("  <idle>-0       (-------) [001] d.s4.  9099.024960: sched_waking: comm=bash")
                .unwrap();
        assert_eq!((h.comm, h.pid, h.cpu), ("<idle>", 0, 1));
        let h = parse("  bash-14856   (  14856) [000] ...1.  9099.024151: tracing_mark_write: x")
            .unwrap();
        assert_eq!(h.pid, 14856);
        let h = parse("  bash-1 [000] .... 123456789: e: x").unwrap();
        assert_eq!((h.ts_ns, h.clock), (123_456_789, TextClock::Counter));
    }

    #[test]
    fn symbol_names_lose_what_sym_offset_and_sym_addr_add() {
        let h = parse("  bash-1 [000] ...1. 1.000001: tracing_mark_write+0x8a/0x170 <ffffffff8149ab1a>: hi there").unwrap();
        assert_eq!((h.name, h.body), ("tracing_mark_write", "hi there"));
        let h = parse("  bash-1 [000] ...1. 1.000001: tracing_mark_write+0x8a/0x170: hi").unwrap();
        assert_eq!(h.name, "tracing_mark_write");
    }

    #[test]
    fn function_tracer_lines_are_events_named_function() {
        let h = parse("  bash-1 [000] ..... 1.000001: do_sys_open <-do_syscall_64").unwrap();
        assert_eq!(
            (h.name, h.body),
            ("function", "do_sys_open <-do_syscall_64")
        );
        let h = parse("  bash-1 [000] ..... 1.000001: schedule+0x10/0x9c").unwrap();
        assert_eq!((h.name, h.body), ("function", "schedule+0x10/0x9c"));
        let h = parse("  <idle>-0       3dN.2   22us : enqueue_hrtimer <-__hrtimer_start").unwrap();
        assert_eq!((h.name, h.layout), ("function", Layout::Latency));
        let e = parse("  bash-1 [000] ..... 1.000001: two words").unwrap_err();
        assert_eq!(e.reason, SkipReason::EventName);
        // sym-addr, trace-cmd's `<--`, and an address kallsyms could not name.
        let h = parse("  bash-4000  [01]  1477.606694: simple_strtoul <c0339346>").unwrap();
        assert_eq!((h.name, h.body), ("function", "simple_strtoul <c0339346>"));
        let h = parse("  sh-1 [000] 1.000001: do_splice_to <-- sys_splice").unwrap();
        assert_eq!(h.name, "function");
        let h = parse("  sh-1 [000] 1.000001: handle_irq <-0xffffffff81001234").unwrap();
        assert_eq!(h.name, "function");
        // A user stack (sym-userobj) is no function call, even with its arrows.
        let e = parse("  a.out-1623  [000] 40874.465068: /root/a.out[+0x480] <-/root/a.out[+0")
            .unwrap_err();
        assert_eq!(e.reason, SkipReason::EventName);
        let e = parse("  bash-1 [9000] ..... 1.000001: e: x").unwrap_err();
        assert_eq!(e.reason, SkipReason::Cpu);
    }
}
