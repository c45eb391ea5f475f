//! Importer for ftrace's text output (the `trace` and `trace_pipe` files) and for
//! `trace-cmd report`'s, as pasted into bug reports and mailing lists when no binary
//! recording exists.
//!
//! It reads event lines in the kernel's three layouts (default, `latency-format` and
//! `latency-format` + `verbose`; with or without irq-info and record-tgid, see
//! `event_line.rs`), `<stack trace>` blocks with their ` => frame` lines, the kernel's
//! `CPU:N [LOST M EVENTS]` notes, the function tracer's `func <-parent` lines (as events
//! named `function`), and the function_graph tracer's output (see `graph_line.rs`), whose
//! entries and returns become calls with durations and whose `/* event */` comments become
//! events. Any of them may be mixed in one text.
//!
//! `trace-cmd report` output reads the same way in its default, `-R` (raw fields) and `-l`
//! (latency columns) forms: its `cpus=N`, `version = N`, `CPU N is empty` and `buffer: NAME`
//! lines, the instance name it puts in front of each line of an instance's buffer, its
//! `kernel_stack: <stack trace >` with ` => name (address)` frames, its `EVENTS DROPPED`
//! notes, its function_graph lines (`funcgraph_entry:`/`funcgraph_exit:` and then the
//! kernel's duration and call columns), and the plugin and raw forms of event bodies
//! (`body.rs`), which become the fields the kernel's print format gives. Lines quoted in an e-mail reply (`> `, `>> `) read as
//! the lines themselves. What the text turned out to be is kept as [`Forms`].
//!
//! [`TextReader`] streams: it holds one line, the stack being read, and the function_graph
//! calls still in progress (bounded, see [`MAX_DEPTH`] and [`MAX_TASKS`]), never the text
//! or its events. Whatever it does not understand comes out as [`Item::Skipped`] with the
//! line number and a [`SkipReason`]; it never fails and never sizes anything from numbers in
//! the text, so hostile input costs only its own length.
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::io::BufReader;
//! # use vmscale_trace::text::import::{Item, TextReader};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let reader = TextReader::new(BufReader::new(File::open("trace.txt")?));
//! for item in reader {
//!     match item {
//!         Item::Event(event) => { /* event.name, event.field("lock_addr") */ }
//!         Item::Stack(stack) => { /* stack.frames */ }
//!         Item::Call(call) => { /* call.name, call.duration_ns */ }
//!         Item::Lost(_) | Item::Skipped(_) => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod body;
mod calls;
mod event_line;
mod graph_line;
mod headline;
mod lines;
mod skip;

pub use headline::LatencyHeadline;

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufRead};

pub use calls::{MAX_DEPTH, MAX_TASKS};
pub use lines::MAX_LINE;
pub(crate) use skip::Reject;
pub use skip::{SkipReason, Skipped};

use body::BodyForm;
use calls::CallTracker;
use event_line::Layout;
use graph_line::{GraphBody, GraphLine};
use lines::LineReader;
use skip::cut_to;

/// CPU numbers at or above this are refused (the limit .dat files have too).
pub const MAX_CPUS: u32 = crate::dat::MAX_CPUS;
/// Frames kept per stack; deeper ones are counted in [`TextStack::dropped_frames`].
pub const MAX_FRAMES: usize = 256;
/// Bytes kept of one frame.
const MAX_FRAME_LEN: usize = 512;

/// What the times of a line count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TextClock {
    /// The trace clock, printed as `SECS.FRACTION`; `resolution_ns` is what the printed
    /// digits resolve (1000 for `trace`'s six digits).
    Absolute { resolution_ns: u32 },
    /// Microseconds since the trace buffer started (`latency-format`).
    SinceStart,
    /// A counter clock (`x86-tsc`, `counter`) printed as a bare integer: units unknown.
    Counter,
}

/// One event line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextEvent {
    /// 1-based, as editors count.
    pub line: usize,
    /// Nanoseconds on [`TextEvent::clock`].
    pub ts_ns: u64,
    pub clock: TextClock,
    pub cpu: u32,
    pub comm: String,
    pub pid: i32,
    /// The irq-info or latency flags column (e.g. `d..3.`), when the text has one.
    pub irq_info: Option<String>,
    /// Event name, e.g. `contention_begin` or `tracing_mark_write`.
    pub name: String,
    /// `name=value` pairs in print order; a body in any other format is one `("text", body)`.
    pub fields: Vec<(String, String)>,
    /// Frames of the `<stack trace>` that followed the event. Only [`import_text`] fills
    /// this; [`TextReader`] gives stacks as their own [`Item::Stack`].
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

/// A `<stack trace>` line and its ` => frame` lines: the kernel records it right after the
/// event it belongs to, on the same CPU and in the same task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextStack {
    pub line: usize,
    pub ts_ns: u64,
    pub clock: TextClock,
    pub cpu: u32,
    pub comm: String,
    pub pid: i32,
    /// Innermost first, as printed (`name`, `name+0x8e/0xd0`, `name+0x8e/0xd0 [kvm]`,
    /// optionally followed by `<address>`).
    pub frames: Vec<String>,
    /// Frames beyond [`MAX_FRAMES`], and those `trace-cmd report -R` did not print (it shows
    /// kernel_stack's declared eight).
    pub dropped_frames: usize,
}

/// When a function_graph call started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStart {
    /// funcgraph-abstime: the trace clock, ns.
    Absolute(u64),
    /// The relative-time column: ns since the trace buffer started.
    SinceStart(u64),
}

/// One completed function_graph call: a leaf line, or an entry paired with its return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphCall {
    /// The line that gave the duration (the leaf or the return).
    pub line: usize,
    pub cpu: Option<u32>,
    /// From the funcgraph-proc column, or the CPU's last context-switch line.
    pub pid: Option<i32>,
    pub comm: Option<String>,
    /// As printed (`%ps`), e.g. `kvm_mmu_zap_all` or `vmx_vcpu_run [kvm_intel]`.
    pub name: String,
    /// Call depth, 0 for the outermost traced call.
    pub depth: u32,
    pub duration_ns: u64,
    /// When the line (the entry's, for a nested call) has a time column.
    pub start: Option<CallStart>,
}

/// The kernel's `CPU:N [LOST M EVENTS]`: events it dropped at this point of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    pub line: usize,
    pub cpu: u32,
    pub events: u64,
}

/// What the reader makes of the text, in text order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Event(TextEvent),
    Stack(TextStack),
    Call(GraphCall),
    Lost(Lost),
    Skipped(Skipped),
}

/// One trait of a text that says what printed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Form {
    /// Event lines with the kernel's columns (`trace`, `trace_pipe`).
    Kernel = 1 << 0,
    /// The kernel's latency-format (microseconds since the buffer started).
    KernelLatency = 1 << 1,
    /// The kernel's latency-format with options/verbose.
    KernelVerbose = 1 << 2,
    /// `trace-cmd report`: its header lines, instance names or plugin forms.
    TraceCmd = 1 << 3,
    /// `trace-cmd report -R`: raw field values.
    TraceCmdRaw = 1 << 4,
    /// `trace-cmd report -l`: latency columns with the trace clock's time.
    TraceCmdLatency = 1 << 5,
    /// The function tracer's `func <-parent` lines.
    FunctionTracer = 1 << 6,
    /// The function_graph tracer's call lines.
    FunctionGraph = 1 << 7,
    /// Lines quoted in an e-mail reply.
    MailQuoted = 1 << 8,
}

/// The [`Form`]s seen in a text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forms(u16);

impl Forms {
    pub fn contains(self, form: Form) -> bool {
        self.0 & form as u16 != 0
    }

    fn insert(&mut self, form: Form) {
        self.0 |= form as u16;
    }

    /// True when no line had any trace text's shape.
    pub fn is_empty(self) -> bool {
        self.0 & !(Form::MailQuoted as u16) == 0
    }

    /// What printed the text, e.g. `trace-cmd report -R output, mail-quoted`.
    pub fn describe(self) -> String {
        let mut kinds = Vec::new();
        let trace_cmd = self.contains(Form::TraceCmd)
            || self.contains(Form::TraceCmdRaw)
            || self.contains(Form::TraceCmdLatency);
        if trace_cmd {
            let mut options = Vec::new();
            if self.contains(Form::TraceCmdRaw) {
                options.push(" -R");
            }
            if self.contains(Form::TraceCmdLatency) {
                options.push(" -l");
            }
            kinds.push(format!("trace-cmd report{} output", options.concat()));
        } else if self.contains(Form::KernelVerbose) {
            kinds.push("the kernel's trace text (latency-format, verbose)".to_string());
        } else if self.contains(Form::KernelLatency) {
            kinds.push("the kernel's trace text (latency-format)".to_string());
        } else if self.contains(Form::Kernel) {
            kinds.push("the kernel's trace text".to_string());
        }
        if self.contains(Form::FunctionTracer) {
            kinds.push("function tracer lines".to_string());
        }
        if self.contains(Form::FunctionGraph) {
            kinds.push("function_graph output".to_string());
        }
        if kinds.is_empty() {
            return "no line has the columns of ftrace or trace-cmd output".to_string();
        }
        let mut out = kinds.join(" with ");
        if self.contains(Form::MailQuoted) {
            out.push_str(", mail-quoted");
        }
        out
    }
}

/// The tracing system of an event the analyses read, by the name the text prints.
pub fn event_system(name: &str) -> Option<&'static str> {
    Some(match name {
        "contention_begin" | "contention_end" => "lock",
        "sched_switch" | "sched_waking" | "sched_wakeup" | "sched_wakeup_new" => "sched",
        "ipi_send_cpu" | "ipi_send_cpumask" | "ipi_raise" | "ipi_entry" | "ipi_exit" => "ipi",
        "reschedule_entry"
        | "reschedule_exit"
        | "call_function_entry"
        | "call_function_exit"
        | "call_function_single_entry"
        | "call_function_single_exit" => "irq_vectors",
        "csd_queue_cpu" | "csd_function_entry" | "csd_function_exit" => "csd",
        "sys_enter" | "sys_exit" => "raw_syscalls",
        "tracing_mark_write" => "ftrace",
        _ => return None,
    })
}

/// Streams the items of a text, reading it line by line.
pub struct TextReader<R> {
    lines: LineReader<R>,
    parser: Parser,
    error: Option<io::Error>,
    ended: bool,
}

impl<R: BufRead> TextReader<R> {
    pub fn new(source: R) -> TextReader<R> {
        TextReader {
            lines: LineReader::new(source),
            parser: Parser::default(),
            error: None,
            ended: false,
        }
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> usize {
        self.parser.lines
    }

    /// What the lines read so far looked like.
    pub fn forms(&self) -> Forms {
        self.parser.forms
    }

    /// The headlines of the latency tracers' traces read so far ([`LatencyHeadline`]).
    pub fn latency_headlines(&self) -> Vec<LatencyHeadline> {
        self.parser.headlines.headlines()
    }

    /// The CPU count a `trace-cmd report` header (`cpus=N`) gave, if one did.
    pub fn header_cpus(&self) -> Option<u32> {
        self.parser.header_cpus
    }

    /// The read error that ended the text early, if one did (taken once).
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }
}

impl<R: BufRead> Iterator for TextReader<R> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.parser.queue.pop_front() {
                return Some(item);
            }
            if self.ended {
                return self.parser.calls.next_unreturned().map(Item::Skipped);
            }
            match self.lines.next_line() {
                Some(Ok(line)) => self.parser.line(line.number, line.text, line.cut),
                Some(Err(error)) => {
                    self.error = Some(error);
                    self.ended = true;
                    self.parser.end_stack();
                }
                None => {
                    self.ended = true;
                    self.parser.end_stack();
                }
            }
        }
    }
}

/// The state between lines.
#[derive(Default)]
struct Parser {
    lines: usize,
    /// Items of the current line (a line completes at most a few).
    queue: VecDeque<Item>,
    /// The stack whose frames are being read.
    stack: Option<TextStack>,
    /// ` => ` lines now belong to a user-space stack.
    user_stack: bool,
    calls: CallTracker,
    forms: Forms,
    header_cpus: Option<u32>,
    headlines: headline::HeadlineReader,
}

impl Parser {
    fn skip(&mut self, line: usize, reject: Reject) {
        self.queue.push_back(Item::Skipped(reject.at(line)));
    }

    fn end_stack(&mut self) {
        if let Some(stack) = self.stack.take() {
            self.queue.push_back(Item::Stack(stack));
        }
    }

    fn line(&mut self, number: usize, text: &str, cut: bool) {
        self.lines = number;
        let quoted = unquoted(text);
        if quoted.len() != text.len() {
            self.forms.insert(Form::MailQuoted);
        }
        // Old systrace HTML holds the trace in a JavaScript string, each line ending in an
        // escaped newline and a continuation backslash.
        let text = quoted.strip_suffix("\\n\\").unwrap_or(quoted);
        let trimmed = text.trim();
        if let Some(frame) = trimmed.strip_prefix("=>") {
            return self.frame(number, frame.trim());
        }
        self.end_stack();
        self.user_stack = false;
        if cut {
            return self.skip(number, Reject::new(SkipReason::LongLine, text));
        }
        if trimmed.starts_with("# tracer: ") {
            self.forms.insert(Form::Kernel);
        }
        if trimmed.starts_with('#') {
            return self.headlines.comment(number, trimmed);
        }
        if trimmed.is_empty()
            || trimmed.bytes().all(|b| b == b'-')
            // funcgraph-overrun's note after a return: the kernel's own bookkeeping.
            || trimmed.starts_with("(Overruns:")
        {
            return;
        }
        if let Some(lost) = lost_line(trimmed) {
            let lost = Lost {
                line: number,
                ..lost
            };
            return self.queue.push_back(Item::Lost(lost));
        }
        if let Some(cpus) = trace_cmd_header(trimmed) {
            self.forms.insert(Form::TraceCmd);
            if cpus.is_some() {
                self.header_cpus = cpus;
            }
            return;
        }
        let (instance, text) = instance_prefix(text);
        match event_line::parse(text) {
            Ok(header) => {
                if instance {
                    self.forms.insert(Form::TraceCmd);
                }
                self.event(number, header)
            }
            Err(event_error) => match graph_line::parse(text) {
                Some(Ok(graph)) => {
                    self.forms.insert(Form::FunctionGraph);
                    self.graph(number, &graph)
                }
                Some(Err(graph_error)) => self.skip(number, graph_error),
                None => self.skip(number, event_error),
            },
        }
    }

    fn frame(&mut self, number: usize, frame: &str) {
        if let Some(stack) = &mut self.stack {
            if stack.frames.len() < MAX_FRAMES {
                stack.frames.push(cut_to(frame, MAX_FRAME_LEN));
            } else {
                stack.dropped_frames += 1;
            }
        } else if self.user_stack {
            self.skip(number, Reject::new(SkipReason::UserStack, frame));
        } else {
            self.skip(number, Reject::new(SkipReason::OrphanFrame, frame));
        }
    }

    fn event(&mut self, number: usize, header: event_line::Header<'_>) {
        self.forms.insert(match header.layout {
            Layout::Default => Form::Kernel,
            Layout::Latency => Form::KernelLatency,
            Layout::LatencyAbsolute => Form::TraceCmdLatency,
            Layout::Verbose => Form::KernelVerbose,
        });
        if header.body.starts_with(' ') {
            // trace-cmd pads the event name to a column; the kernel puts one space after it.
            self.forms.insert(Form::TraceCmd);
        }
        let body = header.body.trim();
        let stack_start = match header.name {
            "<stack trace>" => true,
            // trace-cmd prints the kernel_stack event with a space before the `>`.
            "kernel_stack" => matches!(body, "<stack trace >" | "<stack trace>"),
            _ => false,
        };
        if header.name == "kernel_stack" {
            self.forms.insert(Form::TraceCmd);
        }
        if header.name == "kernel_stack" && !stack_start {
            return self.raw_stack(number, &header);
        }
        if matches!(header.name, "funcgraph_entry" | "funcgraph_exit") {
            return self.trace_cmd_graph(number, &header);
        }
        let name = if stack_start {
            "<stack trace>"
        } else {
            header.name
        };
        match name {
            "<stack trace>" => {
                self.stack = Some(TextStack {
                    line: number,
                    ts_ns: header.ts_ns,
                    clock: header.clock,
                    cpu: header.cpu,
                    comm: header.comm.to_string(),
                    pid: header.pid,
                    frames: Vec::new(),
                    dropped_frames: 0,
                })
            }
            "<user stack trace>" | "user_stack" => {
                self.user_stack = true;
                self.skip(number, Reject::new(SkipReason::UserStack, header.name));
            }
            _ => {
                let (name, body) = marker(header.name, header.body);
                match body::parse(name, body) {
                    Ok((fields, form)) => {
                        match form {
                            BodyForm::Kernel => {}
                            BodyForm::Plugin => self.forms.insert(Form::TraceCmd),
                            BodyForm::Raw => self.forms.insert(Form::TraceCmdRaw),
                        }
                        if name == "function" {
                            self.forms.insert(Form::FunctionTracer);
                        }
                        self.queue.push_back(Item::Event(TextEvent {
                            line: number,
                            ts_ns: header.ts_ns,
                            clock: header.clock,
                            cpu: header.cpu,
                            comm: header.comm.to_string(),
                            pid: header.pid,
                            irq_info: header.irq_info.map(str::to_string),
                            name: name.to_string(),
                            fields,
                            stack: Vec::new(),
                        }))
                    }
                    Err(reject) => self.skip(number, reject),
                }
            }
        }
    }

    /// trace-cmd's function_graph lines: the event columns, then what the kernel prints after
    /// its own columns (`0.593 us   |        find_sec();`). The call gets the event's CPU,
    /// task and time.
    fn trace_cmd_graph(&mut self, number: usize, header: &event_line::Header<'_>) {
        self.forms.insert(Form::TraceCmd);
        self.forms.insert(Form::FunctionGraph);
        let mut graph = match graph_line::parse(header.body) {
            Some(Ok(graph)) if graph.cpu.is_none() && graph.task.is_none() => graph,
            Some(Err(reject)) => return self.skip(number, reject),
            _ => return self.skip(number, Reject::new(SkipReason::GraphBody, header.body)),
        };
        graph.cpu = Some(header.cpu);
        graph.task = Some((header.comm, header.pid));
        if let TextClock::Absolute { .. } = header.clock {
            graph.abs_ns = Some(header.ts_ns);
        }
        self.graph(number, &graph)
    }

    /// `trace-cmd report -R`'s kernel_stack: `size=N caller=ARRAY[bytes]`, the return
    /// addresses as little-endian words, of which the first `size` are the stack's: the
    /// array shows the event's declared eight words whatever `size` says, so a deeper stack
    /// loses the rest and a shallower one shows bytes that are not its own.
    fn raw_stack(&mut self, number: usize, header: &event_line::Header<'_>) {
        let bad = || Reject::new(SkipReason::Body, header.body);
        let mut size = None;
        let mut bytes = None;
        for token in header.body.split_whitespace() {
            // kernel_stack's size is an int: anything larger is not one.
            if let Some(n) = token.strip_prefix("size=") {
                size = n.parse::<u32>().ok().map(|n| n as usize);
            }
        }
        if let Some(at) = header.body.find("caller=") {
            bytes = body::array_bytes(&header.body[at + "caller=".len()..]);
        }
        let (Some(size), Some(bytes)) = (size, bytes) else {
            return self.skip(number, bad());
        };
        self.forms.insert(Form::TraceCmdRaw);
        let words = bytes.chunks_exact(8).take(size);
        let mut frames = Vec::new();
        let mut dropped = size.saturating_sub(bytes.len() / 8);
        for word in words {
            let address = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
            if frames.len() < MAX_FRAMES {
                frames.push(format!("{address:#x}"));
            } else {
                dropped += 1;
            }
        }
        self.stack = Some(TextStack {
            line: number,
            ts_ns: header.ts_ns,
            clock: header.clock,
            cpu: header.cpu,
            comm: header.comm.to_string(),
            pid: header.pid,
            frames,
            dropped_frames: dropped,
        });
    }

    fn graph(&mut self, number: usize, graph: &GraphLine<'_>) {
        match graph.body {
            GraphBody::Comment(text) => self.graph_comment(number, graph, text),
            _ => self.calls.line(number, graph, &mut self.queue),
        }
    }

    /// An event or a marker the function_graph tracer printed as a comment: it has a time
    /// only with funcgraph-abstime, and a task only with funcgraph-proc or after a switch.
    fn graph_comment(&mut self, number: usize, graph: &GraphLine<'_>, text: &str) {
        let Some(ts_ns) = graph.abs_ns else {
            return self.skip(number, Reject::new(SkipReason::GraphEventNoTime, text));
        };
        let Some(cpu) = graph.cpu else {
            return self.skip(number, Reject::new(SkipReason::Cpu, text));
        };
        let task = graph
            .task
            .or_else(|| self.calls.running_on(cpu))
            .map(|(comm, pid)| (comm.to_string(), pid));
        let Some((comm, pid)) = task else {
            return self.skip(number, Reject::new(SkipReason::GraphEventNoTask, text));
        };
        // `name: body` of an event (the analysed ones by name, others by their fields);
        // anything else is what trace_marker or trace_printk wrote.
        let event = event_line::split_name(text).ok().filter(|(name, body)| {
            event_system(name).is_some()
                || (name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && body::looks_like_pairs(body))
        });
        let (name, fields) = match event {
            Some((name, body)) => match body::parse(name, body) {
                Ok((fields, _)) => (name, fields),
                Err(reject) => return self.skip(number, reject),
            },
            None => (
                "tracing_mark_write",
                vec![("text".to_string(), text.to_string())],
            ),
        };
        self.queue.push_back(Item::Event(TextEvent {
            line: number,
            ts_ns,
            clock: TextClock::Absolute {
                resolution_ns: 1000,
            },
            cpu,
            comm,
            pid,
            irq_info: None,
            name: name.to_string(),
            fields,
            stack: Vec::new(),
        }));
    }
}

/// trace-cmd's name for the marker event (ftrace:print) is `print`, with the writer's `%ps`
/// before the text (`tracing_mark_write: text`), or `ip=0x... buf=text` with `-R`.
fn marker<'a>(name: &'a str, body: &'a str) -> (&'a str, &'a str) {
    if name != "print" {
        return (name, body);
    }
    let body = body.trim_start();
    if let Some(at) = body.find("buf=").filter(|_| body.starts_with("ip=")) {
        return ("tracing_mark_write", &body[at + 4..]);
    }
    match body.split_once(": ") {
        Some((caller, text)) if !caller.contains(char::is_whitespace) => {
            ("tracing_mark_write", text)
        }
        _ => ("tracing_mark_write", body),
    }
}

/// trace-cmd's lines before and between the events: `cpus=N` (which it gives as
/// `Some(Some(N))`), `version = N`, `CPU N is empty`, `buffer: NAME`.
fn trace_cmd_header(line: &str) -> Option<Option<u32>> {
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    if let Some(n) = line.strip_prefix("cpus=") {
        return number(n).then(|| n.parse().ok().filter(|&n| n <= MAX_CPUS));
    }
    if let Some(n) = line.strip_prefix("version = ") {
        return number(n).then_some(None);
    }
    if let Some(n) = line
        .strip_prefix("CPU ")
        .and_then(|rest| rest.strip_suffix(" is empty"))
    {
        return number(n).then_some(None);
    }
    if let Some(name) = line.strip_prefix("buffer: ") {
        return (!name.is_empty() && !name.contains(char::is_whitespace)).then_some(None);
    }
    None
}

/// trace-cmd puts `NAME: ` in front of every line of an instance's buffer. A kernel line's
/// task column is right-aligned, so only a line starting with a word that ends in `:` and
/// is followed by whitespace can have one; `true` and the rest of the line when it does.
fn instance_prefix(line: &str) -> (bool, &str) {
    let Some(end) = line.find(char::is_whitespace) else {
        return (false, line);
    };
    let word = &line[..end];
    let is_name = word.len() > 1
        && word.ends_with(':')
        && !word.starts_with(char::is_whitespace)
        && word[..word.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if is_name && event_line::parse(&line[end..]).is_ok() {
        (true, &line[end..])
    } else {
        (false, line)
    }
}

/// A line without the `> ` marks of a quoting e-mail reply (no ftrace line starts with `>`).
fn unquoted(line: &str) -> &str {
    let mut line = line;
    while let Some(rest) = line.strip_prefix('>') {
        line = rest.strip_prefix(' ').unwrap_or(rest);
    }
    line
}

/// `CPU:1 [LOST 1234 EVENTS]`, printed by the kernel where the buffer overran, and
/// trace-cmd's `CPU:1 [1234 EVENTS DROPPED]` or, when the count is unknown,
/// `CPU:1 [EVENTS DROPPED]` (counted as one: at least one was).
fn lost_line(line: &str) -> Option<Lost> {
    let rest = line.strip_prefix("CPU:")?;
    let (cpu, rest) = rest.split_once(' ')?;
    let note = rest.trim().strip_prefix('[')?.strip_suffix(']')?;
    let count = if let Some(count) = note
        .strip_prefix("LOST ")
        .and_then(|n| n.strip_suffix(" EVENTS"))
    {
        count
    } else if note == "EVENTS DROPPED" {
        "1"
    } else {
        note.strip_suffix(" EVENTS DROPPED")?
    };
    let cpu: u32 = cpu.parse().ok().filter(|&cpu| cpu < MAX_CPUS)?;
    Some(Lost {
        line: 0,
        cpu,
        events: count.parse().unwrap_or(u64::MAX),
    })
}

/// A whole text read at once, with stacks attached to their events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextImport {
    /// Events in text order (time order for `trace`), each with the stack that followed it.
    pub events: Vec<TextEvent>,
    pub calls: Vec<GraphCall>,
    pub lost: Vec<Lost>,
    /// Lines that were neither comments, blank, nor understood.
    pub skipped: Vec<Skipped>,
}

/// Imports a text held in memory; for small texts and tests ([`TextReader`] streams).
/// A stack goes to the last event of its task on its CPU.
pub fn import_text(text: &str) -> TextImport {
    let mut out = TextImport::default();
    let mut last_event: HashMap<(u32, i32), usize> = HashMap::new();
    for item in TextReader::new(text.as_bytes()) {
        match item {
            Item::Event(event) => {
                last_event.insert((event.cpu, event.pid), out.events.len());
                out.events.push(event);
            }
            Item::Stack(stack) => match last_event.get(&(stack.cpu, stack.pid)) {
                Some(&index) => out.events[index].stack = stack.frames,
                None => out
                    .skipped
                    .push(Reject::new(SkipReason::StackOwner, "<stack trace>").at(stack.line)),
            },
            Item::Call(call) => out.calls.push(call),
            Item::Lost(lost) => out.lost.push(lost),
            Item::Skipped(skipped) => out.skipped.push(skipped),
        }
    }
    out.skipped.sort_by_key(|s| s.line);
    out
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
        assert_eq!(
            e.clock,
            TextClock::Absolute {
                resolution_ns: 1000
            }
        );
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
    fn the_reader_gives_stacks_as_items_of_their_own() {
        let text = "\
a-1 [000] d..3. 1.000001: contention_begin: ffff0000 (flags=SPIN)
a-1 [000] d..3. 1.000003: <stack trace>
 => _raw_spin_lock+0x2a/0x40
";
        let items: Vec<Item> = TextReader::new(text.as_bytes()).collect();
        assert_eq!(items.len(), 2);
        let Item::Stack(stack) = &items[1] else {
            panic!("{items:?}")
        };
        assert_eq!((stack.ts_ns, stack.cpu, stack.pid), (1_000_003_000, 0, 1));
        assert_eq!(stack.frames, ["_raw_spin_lock+0x2a/0x40"]);
    }

    #[test]
    fn lines_quoted_in_an_email_reply() {
        let text = "\
> a-1 [000] d..3. 1.000001: contention_begin: ffff0000 (flags=SPIN)
>> a-1 [000] d..3. 1.000003: <stack trace>
>  => _raw_spin_lock
> 0)   1.382 us    |  leaf();
";
        let import = import_text(text);
        assert_eq!(import.skipped, vec![]);
        assert_eq!(import.events[0].comm, "a");
        assert_eq!(import.events[0].stack, ["_raw_spin_lock"]);
        assert_eq!(import.calls[0].name, "leaf");
    }

    #[test]
    fn entries_never_returned_are_reported_in_line_order() {
        let text = " 1)   |  a() {\n 0)   |  b() {\n 2)   |  c() {\n 0)   |    d() {\n";
        let lines: Vec<usize> = import_text(text).skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, [1, 2, 3, 4]);
        let items: Vec<usize> = TextReader::new(text.as_bytes())
            .map(|item| match item {
                Item::Skipped(s) => s.line,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(items, [1, 2, 3, 4]);
    }

    #[test]
    fn trace_cmd_headers_instances_stacks_and_dropped_events() {
        let text = "\
version = 6
CPU 0 is empty
cpus=2
buffer: inst
inst:             bash-1 [001] 5.000001: sched_waking:        comm=a pid=2 prio=120 target_cpu=001
CPU:1 [12 EVENTS DROPPED]
CPU:0 [EVENTS DROPPED]
inst:             bash-1 [001] 5.000002: kernel_stack:         <stack trace >
=> __schedule (ffffffff81a0b2c1)
=> schedule (ffffffff81a0b6b8)
             bash-7 [000] 5.000003: sched_waking:          comm=b pid=8 prio=120 target_cpu=000
             bash-7 [000] 5.000004: kernel_stack:          size=2 caller=ARRAY[c1, b2, a0, 81, ff, ff, ff, ff]
             bash-7 [000] 5.000005: kernel_stack:          size=4294967295 caller=ARRAY[00]
";
        let mut reader = TextReader::new(text.as_bytes());
        let items: Vec<Item> = reader.by_ref().collect();
        assert_eq!(reader.header_cpus(), Some(2));
        assert!(reader.forms().contains(Form::TraceCmd));
        assert!(reader.forms().contains(Form::TraceCmdRaw));
        let stacks: Vec<(&[String], usize)> = items
            .iter()
            .filter_map(|item| match item {
                Item::Stack(s) => Some((&s.frames[..], s.dropped_frames)),
                _ => None,
            })
            .collect();
        assert_eq!(stacks.len(), 3, "{items:#?}");
        assert_eq!(
            stacks[0].0,
            [
                "__schedule (ffffffff81a0b2c1)",
                "schedule (ffffffff81a0b6b8)"
            ]
        );
        // One of the two words `size` claims is there.
        assert_eq!(
            (stacks[1].0, stacks[1].1),
            (&["0xffffffff81a0b2c1".to_string()][..], 1)
        );
        let skipped: Vec<SkipReason> = items
            .iter()
            .filter_map(|item| match item {
                Item::Skipped(s) => Some(s.reason),
                _ => None,
            })
            .collect();
        // The last claims more frames than its bytes hold: counted as missing, never used
        // to size anything.
        assert_eq!((stacks[2].0.len(), stacks[2].1), (0, u32::MAX as usize));
        assert!(skipped.is_empty(), "{skipped:?}");
        let import = import_text(text);
        assert_eq!(import.events.len(), 2);
        assert_eq!(import.events[0].comm, "bash");
        assert_eq!(import.events[0].stack.len(), 2);
        assert_eq!(
            import.lost,
            [
                Lost {
                    line: 6,
                    cpu: 1,
                    events: 12
                },
                Lost {
                    line: 7,
                    cpu: 0,
                    events: 1
                }
            ]
        );
    }

    #[test]
    fn lost_events_lines() {
        let import = import_text("CPU:1 [LOST 1234 EVENTS]\nCPU:x [LOST 1 EVENTS]\n");
        assert_eq!(
            import.lost,
            [Lost {
                line: 1,
                cpu: 1,
                events: 1234
            }]
        );
        assert_eq!(import.skipped.len(), 1);
    }

    #[test]
    fn graph_calls_pair_entries_with_returns() {
        let text = "\
# tracer: function_graph
 0)               |  outer() {
 0)   1.382 us    |    leaf();
 0)               |    mid() {
 0) + 12.500 us   |    }
 0) ! 200.000 us  |  }
 1)   3.000 us    |  } /* before_the_text */
 1)   4.000 us    |  }
";
        let import = import_text(text);
        let calls: Vec<(&str, u32, u64)> = import
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.depth, c.duration_ns))
            .collect();
        assert_eq!(
            calls,
            [
                ("leaf", 1, 1382),
                ("mid", 1, 12_500),
                ("outer", 0, 200_000),
                ("before_the_text", 0, 3000)
            ]
        );
        assert_eq!(import.skipped.len(), 1);
        assert_eq!(import.skipped[0].reason, SkipReason::GraphUnmatched);
        assert_eq!(import.skipped[0].line, 8);
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
        assert!(import.skipped.iter().all(|s| !s.detail.contains('\n')));
    }
}
