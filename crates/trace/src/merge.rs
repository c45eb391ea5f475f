//! The per-CPU streams merged into one, ordered by time.
//!
//! A k-way merge: a min-heap holds each CPU's next record as (time, CPU index), so equal
//! times come out by CPU number, and within one CPU records keep their order in the buffer
//! (the kernel's own text output, `__find_next_entry`, breaks ties the same way).

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::BinaryHeap;

use crate::catalog::EventCatalog;
use crate::clock::TimeConversion;
use crate::cpu_stream::{CpuStream, CpuSummary};
use crate::decode::DecodeError;
use crate::event::Event;

/// Time-ordered events of a trace. Each [`Event`] borrows the stream, so take them one at
/// a time:
///
/// ```ignore
/// let mut events = decoder.events()?;
/// while let Some(event) = events.next_event() {
///     let event = event?;
///     // ...
/// }
/// ```
pub struct EventStream<'d> {
    catalog: &'d EventCatalog,
    cpus: Vec<CpuStream<'d>>,
    /// (time of the CPU's current record, index into `cpus`).
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// CPUs that have not reached their first record yet.
    to_start: Vec<usize>,
    /// The heap's top CPU had its record handed out: it moves on before the next pick,
    /// once the caller is done with that event (which borrows the CPU's buffer).
    top_handed_out: bool,
    /// Applied to each event as it is handed out; the merge orders by raw time, which the
    /// conversion keeps in order.
    time: TimeConversion,
}

impl<'d> EventStream<'d> {
    /// Merges `cpus`, which must be in ascending CPU order.
    pub(crate) fn new(
        catalog: &'d EventCatalog,
        cpus: Vec<CpuStream<'d>>,
        time: TimeConversion,
    ) -> EventStream<'d> {
        EventStream {
            catalog,
            heap: BinaryHeap::with_capacity(cpus.len()),
            to_start: (0..cpus.len()).rev().collect(),
            cpus,
            top_handed_out: false,
            time,
        }
    }

    /// The next event in time order; `None` when every CPU is done. A corrupt page is an
    /// `Err` and the stream goes on after it; after a read failure that CPU's stream ends.
    #[inline]
    #[allow(clippy::should_implement_trait)] // lends from the stream: cannot be Iterator
    pub fn next_event(&mut self) -> Option<Result<Event<'_>, DecodeError>> {
        while let Some(&index) = self.to_start.last() {
            match self.cpus[index].advance() {
                Some(Ok(())) => {
                    self.to_start.pop();
                    self.heap.push(Reverse((self.cpus[index].ts(), index)));
                }
                None => {
                    self.to_start.pop();
                }
                Some(Err(error)) => {
                    if error.is_fatal() {
                        self.to_start.pop();
                    }
                    return Some(Err(error));
                }
            }
        }
        if self.top_handed_out {
            // Advancing the top in place costs one sift-down instead of a pop and a push.
            let mut top = self.heap.peek_mut()?;
            let index = top.0 .1;
            match self.cpus[index].advance() {
                Some(Ok(())) => top.0 .0 = self.cpus[index].ts(),
                None => {
                    PeekMut::pop(top);
                }
                Some(Err(error)) => {
                    // After a damaged page the same CPU is advanced again on the next
                    // call; its stale key is still the smallest, so it stays on top.
                    if error.is_fatal() {
                        PeekMut::pop(top);
                        self.top_handed_out = false;
                    }
                    return Some(Err(error));
                }
            }
            self.top_handed_out = false;
        }
        let Reverse((_, index)) = *self.heap.peek()?;
        self.top_handed_out = true;
        let event = self.cpus[index].event(self.catalog);
        if self.time.is_identity() {
            return Some(Ok(event));
        }
        Some(Ok(event.at(self.time.apply(event.ts()))))
    }

    /// What each CPU's pages held so far (complete once the stream is exhausted).
    /// Loss times are converted as event times are.
    pub fn summaries(&self) -> Vec<CpuSummary> {
        self.cpus
            .iter()
            .map(|c| {
                let mut summary = c.summary().clone();
                for loss in &mut summary.losses {
                    loss.ts = self.time.apply(loss.ts);
                }
                summary
            })
            .collect()
    }
}
