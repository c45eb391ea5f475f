//! The per-CPU streams merged into one, ordered by time.
//!
//! A k-way merge: a min-heap holds each CPU's next record as (time, CPU index), so equal
//! times come out by CPU number, and within one CPU records keep their order in the buffer
//! (the kernel's own text output, `__find_next_entry`, breaks ties the same way).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{Receiver, Sender};

use crate::decode::catalog::{EventCatalog, EventType};
use crate::decode::clock::TimeConversion;
use crate::decode::cpu_stream::{Batch, CpuStream, CpuSummary};
use crate::decode::error::DecodeError;
use crate::decode::event::Event;

/// Where a lane's batches come from.
pub(crate) enum Feed<'d> {
    /// Decoded on the reading thread, a batch whenever the last one is used up.
    Here(Box<CpuStream<'d>>),
    /// Decoded on a thread of its own; spent batches go back to it to be filled again.
    Thread {
        batches: Receiver<Batch>,
        spent: Sender<Batch>,
    },
}

/// One CPU's records as the merge reads them: a batch at a time, record by record, with
/// each error where the stream met it.
pub(crate) struct Lane<'d> {
    cpu: u32,
    feed: Feed<'d>,
    batch: Batch,
    /// The record the lane stands on.
    current: usize,
    /// Records of the batch handed out so far.
    next: usize,
    /// Where the batch's next error comes: after this many records (`usize::MAX`: none).
    next_error: usize,
    /// What the stream held, once a thread's stream sent its last batch.
    summary: Option<Box<CpuSummary>>,
}

impl<'d> Lane<'d> {
    pub(crate) fn here(stream: CpuStream<'d>) -> Lane<'d> {
        Lane::new(stream.cpu(), Feed::Here(Box::new(stream)))
    }

    pub(crate) fn threaded(cpu: u32, batches: Receiver<Batch>, spent: Sender<Batch>) -> Lane<'d> {
        Lane::new(cpu, Feed::Thread { batches, spent })
    }

    fn new(cpu: u32, feed: Feed<'d>) -> Lane<'d> {
        Lane {
            cpu,
            feed,
            batch: Batch::default(),
            current: 0,
            next: 0,
            next_error: usize::MAX,
            summary: None,
        }
    }

    /// Moves to the next record: `None` at the end of the stream, an error where the
    /// stream met one (after a fatal one the stream has ended).
    #[inline(always)]
    fn advance(&mut self) -> Option<Result<(), DecodeError>> {
        // Within a batch, between errors: all but a few records of a trace.
        if self.next != self.next_error && self.next < self.batch.records.len() {
            self.current = self.next;
            self.next += 1;
            return Some(Ok(()));
        }
        self.advance_across()
    }

    /// [`Lane::advance`] at an error or at the end of a batch.
    #[inline(never)]
    fn advance_across(&mut self) -> Option<Result<(), DecodeError>> {
        loop {
            if self.next_error == self.next {
                let error = self.batch.errors.pop_front().map(|(_, error)| Err(error));
                self.next_error = self.batch.errors.front().map_or(usize::MAX, |e| e.0);
                return error;
            }
            if self.next < self.batch.records.len() {
                self.current = self.next;
                self.next += 1;
                return Some(Ok(()));
            }
            if self.batch.last || !self.next_batch() {
                return None;
            }
        }
    }

    /// Replaces the used-up batch; false when there is none (its thread is gone).
    #[cold]
    fn next_batch(&mut self) -> bool {
        self.current = 0;
        self.next = 0;
        match &mut self.feed {
            Feed::Here(stream) => stream.fill(&mut self.batch),
            Feed::Thread { batches, spent } => {
                // A closed channel means the thread panicked: the scope that ran it
                // raises that panic once the merge is dropped.
                let Ok(batch) = batches.recv() else {
                    self.batch = Batch {
                        last: true,
                        ..Batch::default()
                    };
                    return false;
                };
                let used = std::mem::replace(&mut self.batch, batch);
                // The thread is gone after its last batch; the buffer is then dropped.
                let _ = spent.send(used);
                if self.batch.last {
                    self.summary = self.batch.summary.take();
                }
            }
        }
        self.next_error = self.batch.errors.front().map_or(usize::MAX, |e| e.0);
        true
    }

    /// Where the current record's bytes begin in the CPU's mapping, when it is mapped.
    #[inline(always)]
    fn mapped_offset(&self) -> Option<usize> {
        let window = self.batch.mapped.as_ref()?;
        let record = self.batch.records[self.current];
        Some(self.batch.mapped_end - window.len() + record.start as usize)
    }

    /// Every page of this lane's CPU where it is mapped: `None` when they are read
    /// instead, or come from another thread.
    fn mapping(&self) -> Option<&crate::mapped::MappedRange> {
        match &self.feed {
            Feed::Here(stream) => stream.mapping(),
            Feed::Thread { .. } => None,
        }
    }

    #[inline(always)]
    fn ts(&self) -> u64 {
        self.batch.records[self.current].ts
    }

    /// The current record as an event, its type found in `types` (by id; past its end,
    /// `unknown`).
    #[inline(always)]
    fn event<'a>(&'a self, types: &[&'a EventType], unknown: &'a EventType) -> Event<'a> {
        let record = self.batch.records[self.current];
        Event::new(
            record.ts,
            self.cpu,
            record.pid,
            record.id,
            &self.batch.bytes()[record.start as usize..record.end as usize],
            types.get(record.id as usize).copied().unwrap_or(unknown),
        )
    }

    fn summary(&self) -> CpuSummary {
        match (&self.feed, &self.summary) {
            (Feed::Here(stream), _) => stream.summary().clone(),
            (Feed::Thread { .. }, Some(summary)) => (**summary).clone(),
            (Feed::Thread { .. }, None) => CpuSummary {
                cpu: self.cpu,
                ..CpuSummary::default()
            },
        }
    }
}

/// Time-ordered events of a trace. Each [`Event`] borrows the stream, so take them one at
/// a time:
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let decoder = vmscale_trace::Decoder::open("run/trace")?;
/// let mut events = decoder.events()?;
/// while let Some(event) = events.next_event() {
///     let event = event?;
///     // ...
/// #   let _ = event;
/// }
/// # Ok(())
/// # }
/// ```
pub struct EventStream<'d> {
    catalog: &'d EventCatalog,
    /// The catalog's type of every id below its bound, looked up once: an event's type is
    /// then one load, where the catalog takes two.
    types: Vec<&'d EventType>,
    cpus: Vec<Lane<'d>>,
    /// The CPU whose record comes next, or was handed out last: (time of its record,
    /// index into `cpus`). Ties in time go to the lower index.
    top: Option<(u64, usize)>,
    /// The same for every other CPU standing on a record.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// CPUs that have not reached their first record yet.
    to_start: Vec<usize>,
    /// The top CPU had its record handed out: it moves on before the next pick,
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
        cpus: Vec<Lane<'d>>,
        time: TimeConversion,
    ) -> EventStream<'d> {
        EventStream {
            catalog,
            types: (0..catalog.id_bound())
                .map(|id| catalog.get_or_unknown(id as u16))
                .collect(),
            top: None,
            heap: BinaryHeap::with_capacity(cpus.len()),
            to_start: (0..cpus.len()).rev().collect(),
            cpus,
            top_handed_out: false,
            time,
        }
    }

    /// The next event in time order; `None` when every CPU is done. A corrupt page is an
    /// `Err` and the stream goes on after it; after a read failure that CPU's stream ends.
    #[inline(always)]
    #[allow(clippy::should_implement_trait)] // lends from the stream: cannot be Iterator
    pub fn next_event(&mut self) -> Option<Result<Event<'_>, DecodeError>> {
        match self.step()? {
            Ok(()) => Some(Ok(self.current())),
            Err(error) => Some(Err(error)),
        }
    }

    /// Moves to the next event ([`EventStream::current`]), or to the next error.
    #[inline(always)]
    pub(crate) fn step(&mut self) -> Option<Result<(), DecodeError>> {
        if !self.to_start.is_empty() {
            if let Some(error) = self.start() {
                return Some(Err(error));
            }
        }
        if self.top_handed_out {
            let index = self.top?.1;
            match self.cpus[index].advance() {
                Some(Ok(())) => {
                    let key = (self.cpus[index].ts(), index);
                    // Most of the time the same CPU is next again and the heap of the
                    // others is not touched; else one sift-down swaps it for their first.
                    self.top = Some(match self.heap.peek_mut() {
                        Some(mut first) if first.0 < key => std::mem::replace(&mut first.0, key),
                        _ => key,
                    });
                }
                None => self.top = self.heap.pop().map(|Reverse(key)| key),
                Some(Err(error)) => {
                    // After a damaged page the same CPU is advanced again on the next
                    // call; its stale key is still the smallest, so it stays first.
                    if error.is_fatal() {
                        self.top = self.heap.pop().map(|Reverse(key)| key);
                        self.top_handed_out = false;
                    }
                    return Some(Err(error));
                }
            }
            self.top_handed_out = false;
        }
        self.top?;
        self.top_handed_out = true;
        Some(Ok(()))
    }

    /// The event [`EventStream::step`] moved to.
    #[inline(always)]
    pub(crate) fn current(&self) -> Event<'_> {
        let index = self.top.map_or(0, |(_, index)| index);
        let event = self.cpus[index].event(&self.types, self.catalog.unknown());
        if self.time.is_identity() {
            return event;
        }
        event.at(self.time.apply(event.ts()))
    }

    /// The lane (an index into [`EventStream::mappings`]) and the place in its mapping of
    /// the [`EventStream::current`] event, when its pages are mapped.
    #[inline(always)]
    pub(crate) fn mapped_place(&self) -> Option<(usize, usize)> {
        let index = self.top?.1;
        Some((index, self.cpus[index].mapped_offset()?))
    }

    /// Leaves giving back each CPU's mapping to the caller, which reads the events' bytes
    /// after the stream has moved on ([`crate::mapped::MappedRange::release`]).
    pub(crate) fn keep_mapped_pages(&mut self) {
        for lane in &mut self.cpus {
            if let Feed::Here(stream) = &mut lane.feed {
                stream.keep_pages();
            }
        }
    }

    /// The event types the stream's events are of.
    pub(crate) fn catalog(&self) -> &'d EventCatalog {
        self.catalog
    }

    /// Each lane's mapping, in lane order (`None`: not mapped).
    pub(crate) fn mappings(&self) -> Vec<Option<crate::mapped::MappedRange>> {
        self.cpus
            .iter()
            .map(|lane| lane.mapping().cloned())
            .collect()
    }

    /// Brings every CPU not yet started to its first record (in CPU order), or returns
    /// the error one of them met first; once all have started the first in time leads.
    #[cold]
    fn start(&mut self) -> Option<DecodeError> {
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
                    return Some(error);
                }
            }
        }
        self.top = self.heap.pop().map(|Reverse(key)| key);
        None
    }

    /// What each CPU's pages held: complete once the stream is exhausted (before that, a
    /// CPU decoded on the reading thread counts up to the end of its current batch, one
    /// decoded on its own thread counts nothing yet). Loss times are converted as event
    /// times are.
    pub fn summaries(&self) -> Vec<CpuSummary> {
        self.cpus
            .iter()
            .map(|c| {
                let mut summary = c.summary();
                for loss in &mut summary.losses {
                    loss.ts = self.time.apply(loss.ts);
                }
                summary
            })
            .collect()
    }
}
