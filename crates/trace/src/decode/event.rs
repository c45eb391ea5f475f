//! One decoded event, borrowing its record from the reader's page buffer.

use crate::decode::catalog::EventType;
use crate::decode::views::EventKind;

/// An event of the merged stream. It borrows the record bytes, so it lives until the
/// stream is advanced; copy out what must outlive that.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    ts: u64,
    cpu: u32,
    pid: i32,
    id: u16,
    record: &'a [u8],
    event_type: &'a EventType,
}

impl<'a> Event<'a> {
    #[inline]
    pub(crate) fn new(
        ts: u64,
        cpu: u32,
        pid: i32,
        id: u16,
        record: &'a [u8],
        event_type: &'a EventType,
    ) -> Event<'a> {
        Event {
            ts,
            cpu,
            pid,
            id,
            record,
            event_type,
        }
    }

    /// The same event at another time (the decoder's [`crate::decode::clock::TimeConversion`]).
    #[inline]
    pub(crate) fn at(self, ts: u64) -> Event<'a> {
        Event { ts, ..self }
    }

    /// Time in ns on the trace clock (CLOCK_MONOTONIC for `mono`), after any conversion
    /// the trace file asks for ([`crate::decode::clock`]).
    #[inline]
    pub fn ts(&self) -> u64 {
        self.ts
    }

    /// The CPU whose buffer held the event (where it happened).
    #[inline]
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// `common_pid`: the thread that was running.
    #[inline]
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// `common_type`: the event type id.
    #[inline]
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The event's type; a stand-in named `unknown` when the trace has no format for `id`.
    #[inline]
    pub fn event_type(&self) -> &'a EventType {
        self.event_type
    }

    #[inline]
    pub fn system(&self) -> &'a str {
        &self.event_type.system
    }

    #[inline]
    pub fn name(&self) -> &'a str {
        &self.event_type.format.name
    }

    /// The whole record, from `common_type` on.
    #[inline]
    pub fn record(&self) -> &'a [u8] {
        self.record
    }

    /// Whether the event was traced in interrupt context (hard or soft IRQ, NMI), from the
    /// record's `common_flags`: then `pid` is whatever task the interrupt came in on, not
    /// the one that caused the event (a timer's wakeup is "by" the task it interrupted).
    #[inline]
    pub fn in_interrupt(&self) -> bool {
        // include/linux/trace_events.h: TRACE_FLAG_HARDIRQ, _SOFTIRQ, _NMI.
        const INTERRUPT: u8 = 0x08 | 0x10 | 0x40;
        self.record
            .get(2)
            .is_some_and(|flags| flags & INTERRUPT != 0)
    }

    /// The typed view of this event.
    #[inline(always)]
    pub fn kind(&self) -> EventKind<'a> {
        self.event_type.kind(self.record)
    }

    /// A field by name as an unsigned integer (looks the name up: resolve a
    /// [`crate::decode::field::FieldRef`] once via [`EventType::field`] for hot loops).
    pub fn u64(&self, field: &str) -> Option<u64> {
        self.event_type.field(field)?.u64(self.record)
    }

    /// A field by name as a signed integer.
    pub fn i64(&self, field: &str) -> Option<i64> {
        self.event_type.field(field)?.i64(self.record)
    }

    /// A field's bytes (inline, `__data_loc` target, or trailing array).
    pub fn bytes(&self, field: &str) -> Option<&'a [u8]> {
        self.event_type.field(field)?.bytes(self.record)
    }

    /// A string field (fixed char array, `__data_loc char[]`, trailing `char buf[]`) up to
    /// its NUL.
    pub fn str(&self, field: &str) -> Option<&'a [u8]> {
        self.event_type.field(field)?.c_str(self.record)
    }
}
