//! Writes packets as they are made: the output never holds more than one packet.

use std::io::Write;

use prost::Message;

use super::proto::{
    Clock, ClockSnapshot, DebugAnnotation, EventType, PacketData, TracePacket, TrackDescriptor,
    TrackEvent, CLOCK_MONOTONIC, SEQ_INCREMENTAL_STATE_CLEARED, TRACE_PACKET_KEY,
};

/// The one writer sequence of the file.
const SEQUENCE_ID: u32 = 1;

/// What was written, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub packets: u64,
    pub tracks: u64,
    pub slice_begins: u64,
    pub slice_ends: u64,
    pub instants: u64,
    pub flows: u64,
}

/// A packet stream into `out`. The first write error is kept and later writes are
/// skipped, since the decoder's callback that drives the sink cannot return it.
pub struct Sink<W: Write> {
    out: W,
    buf: Vec<u8>,
    error: Option<std::io::Error>,
    next_uuid: u64,
    pub counts: Counts,
}

impl<W: Write> Sink<W> {
    pub fn new(out: W) -> Sink<W> {
        Sink {
            out,
            buf: Vec::with_capacity(256),
            error: None,
            next_uuid: 1,
            counts: Counts::default(),
        }
    }

    fn write(&mut self, mut packet: TracePacket) {
        packet.trusted_packet_sequence_id = Some(SEQUENCE_ID);
        if self.counts.packets == 0 {
            packet.sequence_flags = Some(SEQ_INCREMENTAL_STATE_CLEARED);
        }
        self.counts.packets += 1;
        if self.error.is_some() {
            return;
        }
        self.buf.clear();
        self.buf.push(TRACE_PACKET_KEY);
        // Encoding into a Vec cannot run out of space.
        let _ = packet.encode_length_delimited(&mut self.buf);
        if let Err(error) = self.out.write_all(&self.buf) {
            self.error = Some(error);
        }
    }

    /// Declares the trace's clock: times are CLOCK_MONOTONIC ns and are shown as such.
    pub fn clock(&mut self, ts: u64) {
        self.write(TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: Some(CLOCK_MONOTONIC),
            data: Some(PacketData::ClockSnapshot(ClockSnapshot {
                clocks: vec![Clock {
                    clock_id: Some(CLOCK_MONOTONIC),
                    timestamp: Some(ts),
                }],
                primary_trace_clock: Some(CLOCK_MONOTONIC as i32),
            })),
            ..Default::default()
        });
    }

    /// A new track; returns its uuid. `rank` orders it among its parent's children.
    pub fn track(&mut self, name: &str, parent: Option<u64>, rank: Option<i32>) -> u64 {
        self.track_with(TrackDescriptor {
            parent_uuid: parent,
            name: Some(name.to_string()),
            sibling_order_rank: rank,
            ..Default::default()
        })
    }

    pub fn track_with(&mut self, mut descriptor: TrackDescriptor) -> u64 {
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        descriptor.uuid = Some(uuid);
        self.counts.tracks += 1;
        self.write(TracePacket {
            data: Some(PacketData::TrackDescriptor(descriptor)),
            ..Default::default()
        });
        uuid
    }

    pub fn event(&mut self, ts: u64, event: TrackEvent) {
        match EventType::try_from(event.r#type.unwrap_or(0)) {
            Ok(EventType::SliceBegin) => self.counts.slice_begins += 1,
            Ok(EventType::SliceEnd) => self.counts.slice_ends += 1,
            Ok(EventType::Instant) => self.counts.instants += 1,
            _ => {}
        }
        self.counts.flows += event.flow_ids.len() as u64;
        self.write(TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: Some(CLOCK_MONOTONIC),
            data: Some(PacketData::TrackEvent(event)),
            ..Default::default()
        });
    }

    pub fn begin(&mut self, ts: u64, track: u64, category: &str, name: String, args: Args) {
        self.event(
            ts,
            event(EventType::SliceBegin, track, category, Some(name), args),
        );
    }

    pub fn end(&mut self, ts: u64, track: u64) {
        self.event(ts, event(EventType::SliceEnd, track, "", None, Vec::new()));
    }

    /// Flushes and gives back the writer, or the first write error.
    pub fn finish(mut self) -> std::io::Result<W> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

pub type Args = Vec<DebugAnnotation>;

/// A track event without flows.
pub fn event(
    kind: EventType,
    track: u64,
    category: &str,
    name: Option<String>,
    args: Args,
) -> TrackEvent {
    TrackEvent {
        r#type: Some(kind as i32),
        track_uuid: Some(track),
        name,
        categories: if category.is_empty() {
            Vec::new()
        } else {
            vec![category.to_string()]
        },
        debug_annotations: args,
        ..Default::default()
    }
}
