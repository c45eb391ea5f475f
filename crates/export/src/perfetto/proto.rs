//! The subset of Perfetto's trace format the export writes, as prost messages.
//!
//! Field names and numbers are those of protos/perfetto/trace/ in Perfetto: trace.proto,
//! trace_packet.proto, clock_snapshot.proto and track_event/{track_event,
//! track_descriptor, debug_annotation}.proto. Only the fields used are declared; a reader
//! of the full schema sees a valid `Trace`. Perfetto's files are proto2, whose repeated
//! scalars are unpacked, so the flow id lists say `packed = "false"`.

/// `Trace`: the file is this message, its packets one after another.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// The tag byte of `Trace.packet` (field 1, length-delimited): writing it before each
/// length-delimited packet streams a `Trace` without holding it.
pub const TRACE_PACKET_KEY: u8 = (1 << 3) | 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// A `BuiltinClock` id; the export uses [`CLOCK_MONOTONIC`].
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    /// Track events are interpreted per writer sequence; the whole file is one sequence.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// [`SEQ_INCREMENTAL_STATE_CLEARED`] on the first packet of the sequence.
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(oneof = "PacketData", tags = "6, 11, 60")]
    pub data: Option<PacketData>,
}

/// `TracePacket.data`, the members used.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum PacketData {
    #[prost(message, tag = "6")]
    ClockSnapshot(ClockSnapshot),
    #[prost(message, tag = "11")]
    TrackEvent(TrackEvent),
    #[prost(message, tag = "60")]
    TrackDescriptor(TrackDescriptor),
}

/// `BuiltinClock.BUILTIN_CLOCK_MONOTONIC`: the clock of a `mono` trace.
pub const CLOCK_MONOTONIC: u32 = 3;
/// `TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// A `BuiltinClock`: the clock the trace's times are shown in.
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "14")]
    pub description: Option<String>,
    /// `ChildTracksOrdering`; [`ORDER_EXPLICIT`] sorts children by `sibling_order_rank`.
    #[prost(int32, optional, tag = "11")]
    pub child_ordering: Option<i32>,
    #[prost(int32, optional, tag = "12")]
    pub sibling_order_rank: Option<i32>,
}

/// `TrackDescriptor.ChildTracksOrdering.EXPLICIT`.
pub const ORDER_EXPLICIT: i32 = 3;

/// `TrackEvent.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum EventType {
    Unspecified = 0,
    SliceBegin = 1,
    SliceEnd = 2,
    Instant = 3,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(enumeration = "EventType", optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    #[prost(oneof = "AnnotationValue", tags = "3, 4, 6, 7")]
    pub value: Option<AnnotationValue>,
}

/// `DebugAnnotation.value`, the members used.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AnnotationValue {
    #[prost(uint64, tag = "3")]
    Uint(u64),
    #[prost(int64, tag = "4")]
    Int(i64),
    #[prost(string, tag = "6")]
    String(String),
    /// Shown in hex: kernel addresses.
    #[prost(uint64, tag = "7")]
    Pointer(u64),
}

impl DebugAnnotation {
    pub fn new(name: &str, value: AnnotationValue) -> DebugAnnotation {
        DebugAnnotation {
            name: Some(name.to_string()),
            value: Some(value),
        }
    }
}
