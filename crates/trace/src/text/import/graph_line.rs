//! One line of the function_graph tracer's output (kernel/trace/trace_functions_graph.c),
//! taken apart into its columns:
//!
//! ```text
//! [ABSTIME |  ] [RELTIME us |  ] [ CPU)] [COMM-PID | ] [FLAGS | ] [MARK DURATION us |  ] BODY
//!  9099.024430 |   1)  bash-1234   | d..1. | + 14.791 us   |      } /* do_sys_open */
//! ```
//!
//! Every column but the body is optional (funcgraph-abstime, funcgraph-cpu, funcgraph-proc,
//! latency-format, funcgraph-duration); the mark is one of `+ ! # * @ $` (more than 10 us,
//! 100 us, 1 ms, 10 ms, 100 ms, 1 s). The body is a function entry `name() {`, a leaf call
//! `name();`, a return `}` (with `/* name */` after it when the entry is not on the page or
//! funcgraph-tail is on), an event or marker as `/* text */`, or the interrupt markers
//! `==========>` / `<==========` in the duration column. A context switch is its own line,
//! ` CPU) COMM-PID => COMM-PID`.

use super::skip::{Reject, SkipReason};
use super::MAX_CPUS;

/// The columns of one function_graph line, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GraphLine<'a> {
    /// funcgraph-abstime: the trace clock, ns (printed in microseconds).
    pub abs_ns: Option<u64>,
    /// The relative-time column: ns since the buffer started (printed in microseconds).
    pub rel_ns: Option<u64>,
    pub cpu: Option<u32>,
    /// funcgraph-proc: `(comm, pid)`; the kernel cuts the comm to 7 characters.
    pub task: Option<(&'a str, i32)>,
    /// The duration column of a leaf call or a return, ns.
    pub duration_ns: Option<u64>,
    /// Call depth from the indentation (two spaces a level).
    pub depth: u32,
    pub body: GraphBody<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GraphBody<'a> {
    /// `name() {`
    Entry(&'a str),
    /// `name();`
    Leaf(&'a str),
    /// `}`, with the name from `} /* name */` when printed.
    Return(Option<&'a str>),
    /// `/* text */`: an event or a marker printed inside the graph.
    Comment(&'a str),
    IrqEntry,
    IrqExit,
    /// ` CPU) COMM-PID => COMM-PID`
    Switch {
        from: (&'a str, i32),
        to: (&'a str, i32),
    },
}

/// `None` when the line has none of function_graph's columns or bodies; an error when it
/// has the columns but a body this parser does not know.
pub(crate) fn parse(line: &str) -> Option<Result<GraphLine<'_>, Reject>> {
    let mut rest = line;
    let mut columns = false;
    let mut abs_ns = None;
    let mut rel_ns = None;
    if let Some((ns, after)) = abs_time(rest) {
        abs_ns = Some(ns);
        rest = after;
        columns = true;
    }
    let mut cpu = None;
    if let Some((n, after)) = cpu_column(rest) {
        cpu = Some(n);
        rest = after;
        columns = true;
    } else if let Some((ns, after)) = rel_time(rest) {
        // The relative time is only trusted in front of a CPU column: alone it reads like a
        // duration without a fraction.
        if let Some((n, after)) = cpu_column(after) {
            rel_ns = Some(ns);
            cpu = Some(n);
            rest = after;
            columns = true;
        }
    }
    let cpu = match cpu {
        Some(n) if n >= MAX_CPUS => return Some(Err(Reject::new(SkipReason::Cpu, line))),
        other => other,
    };
    if cpu.is_some() {
        if let Some((from, to)) = switch(rest) {
            return Some(Ok(GraphLine {
                abs_ns,
                rel_ns,
                cpu,
                task: None,
                duration_ns: None,
                depth: 0,
                body: GraphBody::Switch { from, to },
            }));
        }
    }
    let mut task = None;
    if let Some((t, after)) = bar_column(rest, proc_column) {
        task = Some(t);
        rest = after;
        columns = true;
    }
    if let Some((_, after)) = bar_column(rest, flags_column) {
        rest = after;
        columns = true;
    }
    let (duration, has_bar, body_text) = match bar_column(rest, duration_column) {
        Some((duration, after)) => (duration, true, after),
        None => (Duration::None, false, rest),
    };
    let spaces = body_text.len() - body_text.trim_start().len();
    // After the duration bar come two spaces, after any other column one; then two a level.
    let depth = (spaces.saturating_sub(if has_bar { 2 } else { 1 }) / 2) as u32;
    let body = match duration {
        Duration::IrqEntry => Some(GraphBody::IrqEntry),
        Duration::IrqExit => Some(GraphBody::IrqExit),
        _ => match body_text.trim() {
            "==========>" => Some(GraphBody::IrqEntry),
            "<==========" => Some(GraphBody::IrqExit),
            text => parse_body(text),
        },
    };
    let duration_ns = match duration {
        Duration::Ns(ns) => Some(ns),
        _ => None,
    };
    if !(columns || has_bar) {
        // A bare `name();` could be any text; only the columns make it function_graph's.
        return None;
    }
    match body {
        Some(body) => Some(Ok(GraphLine {
            abs_ns,
            rel_ns,
            cpu,
            task,
            duration_ns,
            depth,
            body,
        })),
        None => Some(Err(Reject::new(SkipReason::GraphBody, line))),
    }
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// `%5lu.%06lu |  `: the absolute time of the line.
fn abs_time(text: &str) -> Option<(u64, &str)> {
    let trimmed = text.trim_start();
    let bar = trimmed.find('|')?;
    let (secs, fraction) = trimmed[..bar].trim_end().split_once('.')?;
    if !all_digits(secs) || !all_digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let scale = 10u64.pow(9 - fraction.len() as u32);
    let ns = secs
        .parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(fraction.parse::<u64>().ok()? * scale)?;
    Some((ns, &trimmed[bar + 1..]))
}

/// `%9llu us |  `: microseconds since the buffer started.
fn rel_time(text: &str) -> Option<(u64, &str)> {
    let trimmed = text.trim_start();
    let bar = trimmed.find('|')?;
    let usecs = trimmed[..bar].trim_end().strip_suffix("us")?.trim_end();
    if !all_digits(usecs) {
        return None;
    }
    Some((
        usecs.parse::<u64>().ok()?.checked_mul(1000)?,
        &trimmed[bar + 1..],
    ))
}

/// ` %*d) `: the CPU, then the rest from right after the parenthesis.
fn cpu_column(text: &str) -> Option<(u32, &str)> {
    let trimmed = text.trim_start();
    let close = trimmed.find(')')?;
    let digits = &trimmed[..close];
    let after = &trimmed[close + 1..];
    if !all_digits(digits) || !(after.is_empty() || after.starts_with(' ')) {
        return None;
    }
    Some((digits.parse().unwrap_or(u32::MAX), after))
}

/// A task as `(comm, pid)`.
type Task<'a> = (&'a str, i32);

/// `COMM-PID`, the comm possibly with spaces and dashes.
fn task(text: &str) -> Option<Task<'_>> {
    let (comm, pid) = text.trim().rsplit_once('-')?;
    if !all_digits(pid) || comm.contains("/*") {
        return None;
    }
    Some((comm.trim_start(), pid.parse().ok()?))
}

/// `COMM-PID => COMM-PID`, the context-switch line.
fn switch(text: &str) -> Option<(Task<'_>, Task<'_>)> {
    let (from, to) = text.split_once(" => ")?;
    Some((task(from)?, task(to)?))
}

/// A column ended by `|`: `column` reads the text before the bar; the rest starts after it.
fn bar_column<'a, T>(text: &'a str, column: impl Fn(&'a str) -> Option<T>) -> Option<(T, &'a str)> {
    let bar = text.find('|')?;
    Some((column(&text[..bar])?, &text[bar + 1..]))
}

fn proc_column(text: &str) -> Option<(&str, i32)> {
    task(text)
}

/// ` d..1. | `: the latency flags (4 or 5 characters).
fn flags_column(text: &str) -> Option<&str> {
    let flags = text.trim();
    let first_ok = flags
        .bytes()
        .next()
        .is_some_and(|b| matches!(b, b'D' | b'd' | b'b' | b'X' | b'.'));
    let rest_ok = flags
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.');
    ((4..=5).contains(&flags.len()) && first_ok && rest_ok).then_some(flags)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Duration {
    /// The column is there but blank (a function entry, a comment).
    None,
    Ns(u64),
    IrqEntry,
    IrqExit,
}

/// `[MARK] N[.FFF] us` (`trace_print_graph_duration`: up to 7 digits with the fraction cut
/// to fit, more digits without one), blank, or an interrupt marker.
fn duration_column(text: &str) -> Option<Duration> {
    let text = text.trim();
    match text {
        "" => return Some(Duration::None),
        "==========>" => return Some(Duration::IrqEntry),
        "<==========" => return Some(Duration::IrqExit),
        _ => {}
    }
    let text = match text.as_bytes()[0] {
        b'+' | b'!' | b'#' | b'*' | b'@' | b'$' => text[1..].trim_start(),
        _ => text,
    };
    let number = text.strip_suffix("us")?.trim_end();
    let (usecs, fraction) = number.split_once('.').unwrap_or((number, ""));
    if !all_digits(usecs) || fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The kernel cuts the three nanosecond digits from the right: `12345.67` is 67x ns.
    let mut ns = 0u64;
    for (index, digit) in fraction.bytes().enumerate() {
        ns += u64::from(digit - b'0') * 10u64.pow(2 - index as u32);
    }
    let ns = usecs
        .parse::<u64>()
        .ok()?
        .checked_mul(1000)?
        .checked_add(ns)?;
    Some(Duration::Ns(ns))
}

/// The function part of a line.
fn parse_body(text: &str) -> Option<GraphBody<'_>> {
    if let Some(comment) = text.strip_prefix("/*") {
        let inner = comment.strip_suffix("*/").unwrap_or(comment);
        return Some(GraphBody::Comment(inner.trim()));
    }
    if let Some(tail) = text.strip_prefix('}') {
        let tail = tail.trim();
        if tail.is_empty() {
            return Some(GraphBody::Return(None));
        }
        // `} /* name */` (`name [module]` for a module's), or with funcgraph-retval
        // `} /* name ret=0x0 */`.
        let inner = tail.strip_prefix("/*")?;
        let inner = inner.strip_suffix("*/").unwrap_or(inner);
        let name = inner.split(" ret=").next().unwrap_or(inner).trim();
        return (!name.is_empty()).then_some(GraphBody::Return(Some(name)));
    }
    // A trailing comment (funcgraph-retaddr `/* <-caller */`, funcgraph-retval) is not the
    // call itself.
    let call = match text.rfind(" /*") {
        Some(comment) if text.ends_with("*/") => text[..comment].trim_end(),
        _ => text,
    };
    let open = call.find('(')?;
    let name = call[..open].trim();
    let valid = !name.is_empty() && !name.contains(['{', '}', ';', '(', ')', '|']);
    if !valid {
        return None;
    }
    if call.ends_with('{') {
        Some(GraphBody::Entry(name))
    } else if call.ends_with(';') {
        Some(GraphBody::Leaf(name))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> GraphLine<'_> {
        parse(line).unwrap().unwrap()
    }

    #[test]
    fn default_columns() {
        let l = ok(" 0)               |  do_sys_open() {");
        assert_eq!(
            (l.cpu, l.depth, l.body),
            (Some(0), 0, GraphBody::Entry("do_sys_open"))
        );
        let l = ok(" 0)   1.382 us    |      __might_sleep();");
        assert_eq!(l.duration_ns, Some(1382));
        assert_eq!((l.depth, l.body), (2, GraphBody::Leaf("__might_sleep")));
        let l = ok(" 1) + 14.791 us   |    }");
        assert_eq!((l.cpu, l.duration_ns, l.depth), (Some(1), Some(14_791), 1));
        assert_eq!(l.body, GraphBody::Return(None));
        let l = ok(" 1) $ 14791992 us |  } /* kvm_vm_release [kvm] */");
        assert_eq!(l.duration_ns, Some(14_791_992_000));
        assert_eq!(l.body, GraphBody::Return(Some("kvm_vm_release [kvm]")));
        let l = ok(" 1)   1.000 us    |  } /* f ret=-22 */");
        assert_eq!(l.body, GraphBody::Return(Some("f")));
        let l = ok(" 1) ! 123456.7 us |  }");
        assert_eq!(l.duration_ns, Some(123_456_700));
    }

    #[test]
    fn every_optional_column() {
        let l = ok(" 9099.024430 |   1)   bash-1234    |  d..1. | + 10.500 us   |    foo(a=1, b=2); /* ret=0x0 */");
        assert_eq!(l.abs_ns, Some(9_099_024_430_000));
        assert_eq!((l.cpu, l.task), (Some(1), Some(("bash", 1234))));
        assert_eq!((l.duration_ns, l.depth), (Some(10_500), 1));
        assert_eq!(l.body, GraphBody::Leaf("foo"));
        let l = ok(
            "      1234 us |   0)               |  /* contention_begin: ffff (flags=SPIN|READ) */",
        );
        assert_eq!((l.rel_ns, l.cpu), (Some(1_234_000), Some(0)));
        assert_eq!(
            l.body,
            GraphBody::Comment("contention_begin: ffff (flags=SPIN|READ)")
        );
    }

    #[test]
    fn switches_interrupts_and_no_duration_column() {
        let l = ok(" 1)  migrati-16   =>    sshd-1755  ");
        assert_eq!(
            l.body,
            GraphBody::Switch {
                from: ("migrati", 16),
                to: ("sshd", 1755)
            }
        );
        assert_eq!(ok(" 0)   ==========> |").body, GraphBody::IrqEntry);
        assert_eq!(ok(" 0)   <========== |").body, GraphBody::IrqExit);
        let l = ok(" 0)     bar() {");
        assert_eq!(
            (l.duration_ns, l.depth, l.body),
            (None, 2, GraphBody::Entry("bar"))
        );
    }

    #[test]
    fn other_text_is_not_a_graph_line() {
        assert!(parse("hello world").is_none());
        assert!(parse("a | b").is_none());
        assert_eq!(
            parse(" 0)   1.0 us   |  what is this")
                .unwrap()
                .unwrap_err()
                .reason,
            SkipReason::GraphBody
        );
        assert_eq!(
            parse(" 99999) foo();").unwrap().unwrap_err().reason,
            SkipReason::Cpu
        );
    }
}
