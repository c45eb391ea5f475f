//! Pairs function_graph entries with their returns, per task: the kernel keeps the call
//! stack per task, and a task's calls can return on another CPU after a context switch.
//!
//! Which task a line belongs to comes from the funcgraph-proc column, or else from the last
//! context-switch line of its CPU; before either, the CPU's unknown task stands in for it.
//! Memory: at most [`MAX_TASKS`] tasks with calls in progress, [`MAX_DEPTH`] calls each.

use std::collections::{HashMap, VecDeque};

use super::graph_line::{GraphBody, GraphLine};
use super::skip::{Reject, SkipReason, Skipped};
use super::{CallStart, GraphCall, Item};

/// Calls in progress kept per task (the kernel's own limit is lower).
pub const MAX_DEPTH: usize = 128;
/// Tasks with calls in progress kept at once.
pub const MAX_TASKS: usize = 1024;
/// Function names are cut to this many bytes.
const MAX_NAME: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum TaskKey {
    Pid(i32),
    /// Whatever ran on this CPU before a switch line or a proc column named it.
    UnknownOn(u32),
    /// Lines with neither a CPU nor a task column.
    Unknown,
}

struct Open {
    name: String,
    start: Option<CallStart>,
    line: usize,
}

/// The function_graph state of one text.
#[derive(Default)]
pub(crate) struct CallTracker {
    /// CPU -> the task running there, from switch lines and proc columns.
    running: HashMap<u32, (i32, String)>,
    open: HashMap<TaskKey, Vec<Open>>,
    /// Once the text has ended: the entries never returned, last line first.
    unreturned: Option<Vec<Open>>,
}

fn cut(name: &str) -> String {
    let mut end = name.len().min(MAX_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// `name [module]` and `name` are the same function.
fn same_function(a: &str, b: &str) -> bool {
    a.split_whitespace().next() == b.split_whitespace().next()
}

impl CallTracker {
    /// The task a line without a proc column belongs to.
    pub(crate) fn running_on(&self, cpu: u32) -> Option<(&str, i32)> {
        self.running
            .get(&cpu)
            .map(|(pid, comm)| (comm.as_str(), *pid))
    }

    fn key(&mut self, line: &GraphLine<'_>) -> TaskKey {
        match (line.task, line.cpu) {
            (Some((comm, pid)), cpu) => {
                if let Some(cpu) = cpu {
                    self.running.insert(cpu, (pid, cut(comm)));
                }
                TaskKey::Pid(pid)
            }
            (None, Some(cpu)) => match self.running.get(&cpu) {
                Some((pid, _)) => TaskKey::Pid(*pid),
                None => TaskKey::UnknownOn(cpu),
            },
            (None, None) => TaskKey::Unknown,
        }
    }

    fn call(
        &self,
        number: usize,
        line: &GraphLine<'_>,
        name: &str,
        start: Option<CallStart>,
        duration_ns: u64,
    ) -> GraphCall {
        let task = match line.task {
            Some((comm, pid)) => Some((pid, comm.to_string())),
            None => line
                .cpu
                .and_then(|cpu| self.running.get(&cpu))
                .map(|(pid, comm)| (*pid, comm.clone())),
        };
        GraphCall {
            line: number,
            cpu: line.cpu,
            pid: task.as_ref().map(|t| t.0),
            comm: task.map(|t| t.1),
            name: cut(name),
            depth: line.depth,
            duration_ns,
            start,
        }
    }

    /// Takes one line that is not a comment; what it completes goes to `out`.
    pub(crate) fn line(&mut self, number: usize, line: &GraphLine<'_>, out: &mut VecDeque<Item>) {
        let skip = |out: &mut VecDeque<Item>, reason, detail: &str| {
            out.push_back(Item::Skipped(Reject::new(reason, detail).at(number)));
        };
        let start = match (line.abs_ns, line.rel_ns) {
            (Some(ns), _) => Some(CallStart::Absolute(ns)),
            (None, Some(ns)) => Some(CallStart::SinceStart(ns)),
            (None, None) => None,
        };
        match line.body {
            GraphBody::Switch { from, to } => {
                let Some(cpu) = line.cpu else { return };
                // The calls seen before anyone was named on this CPU were the previous task's.
                if let Some(calls) = self.open.remove(&TaskKey::UnknownOn(cpu)) {
                    match self.open.get(&TaskKey::Pid(from.1)) {
                        Some(existing) if !existing.is_empty() => {
                            out.extend(calls.into_iter().map(unreturned))
                        }
                        _ => {
                            self.open.insert(TaskKey::Pid(from.1), calls);
                        }
                    }
                }
                self.running.insert(cpu, (to.1, cut(to.0)));
            }
            GraphBody::IrqEntry | GraphBody::IrqExit | GraphBody::Comment(_) => {}
            GraphBody::Entry(name) => {
                let key = self.key(line);
                if !self.open.contains_key(&key) && self.open.len() >= MAX_TASKS {
                    return skip(out, SkipReason::GraphTooManyTasks, name);
                }
                let calls = self.open.entry(key).or_default();
                if calls.len() >= MAX_DEPTH {
                    return skip(out, SkipReason::GraphTooDeep, name);
                }
                calls.push(Open {
                    name: cut(name),
                    start,
                    line: number,
                });
            }
            GraphBody::Leaf(name) => {
                self.key(line);
                match line.duration_ns {
                    Some(ns) => out.push_back(Item::Call(self.call(number, line, name, start, ns))),
                    None => skip(out, SkipReason::GraphNoDuration, name),
                }
            }
            GraphBody::Return(tail) => {
                let key = self.key(line);
                let entry = self.pop(key, tail, out);
                let name = match (&entry, tail) {
                    (Some(open), _) => open.name.clone(),
                    (None, Some(tail)) => tail.to_string(),
                    (None, None) => {
                        return skip(out, SkipReason::GraphUnmatched, "}");
                    }
                };
                match line.duration_ns {
                    Some(ns) => {
                        let start = entry.and_then(|e| e.start);
                        out.push_back(Item::Call(self.call(number, line, &name, start, ns)))
                    }
                    None => skip(out, SkipReason::GraphNoDuration, &name),
                }
            }
        }
    }

    /// The entry a return closes: the innermost call, or, when the return names its function
    /// and that is not the innermost, the named one (the calls above it lost their returns).
    fn pop(&mut self, key: TaskKey, tail: Option<&str>, out: &mut VecDeque<Item>) -> Option<Open> {
        let calls = self.open.get_mut(&key)?;
        let index = match tail {
            None => calls.len().checked_sub(1)?,
            Some(tail) => calls
                .iter()
                .rposition(|open| same_function(&open.name, tail))?,
        };
        out.extend(calls.drain(index + 1..).map(unreturned));
        let entry = calls.pop();
        if calls.is_empty() {
            self.open.remove(&key);
        }
        entry
    }

    /// One entry whose return never came, once the text has ended, in line order; `None`
    /// when none is left.
    pub(crate) fn next_unreturned(&mut self) -> Option<Skipped> {
        let left = self.unreturned.get_or_insert_with(|| {
            let mut left: Vec<Open> = self.open.drain().flat_map(|(_, calls)| calls).collect();
            left.sort_by_key(|open| std::cmp::Reverse(open.line));
            left
        });
        left.pop().map(unreturned_skip)
    }
}

fn unreturned_skip(open: Open) -> Skipped {
    Reject::new(SkipReason::GraphUnreturned, &open.name).at(open.line)
}

fn unreturned(open: Open) -> Item {
    Item::Skipped(unreturned_skip(open))
}
