//! A whole decode on two threads when every CPU's pages are mapped: one thread decodes and
//! merges them, the calling thread hands the merged events to the caller.
//!
//! Decoding each CPU on a thread of its own ([`super::Decoder::for_each`]'s other way)
//! leaves the merge and the caller's work on one thread, and a caller that analyses every
//! event does more work than the decode. Here the merge moves too: the decoding thread
//! sends the merged order as compact places (CPU, time, where the record lies in its
//! CPU's mapping) a chunk at a time, and the calling thread rebuilds each event from its
//! own handle on the mappings, so nothing borrowed crosses threads.

use std::sync::mpsc::{self, Receiver, Sender, SyncSender};

use crate::decode::catalog::EventType;
use crate::decode::cpu_stream::RELEASE_BYTES;
use crate::decode::error::DecodeError;
use crate::decode::event::Event;
use crate::decode::merge::EventStream;
use crate::decode::CpuSummary;
use crate::mapped::MappedRange;

/// Events per chunk: enough that handing a chunk over costs little per event, few enough
/// that the chunks in flight (40 bytes per event) take a few MiB.
const CHUNK_EVENTS: usize = 8192;
/// Chunks the decoding thread may have ready before the caller takes them.
const CHUNKS_IN_FLIGHT: usize = 2;

/// A [`Place::lane`] saying the record was copied into its chunk.
const COPIED: u16 = u16::MAX;

/// One merged event: what [`Event`] holds, with its record as a place in a mapping (or
/// in the chunk's copies).
#[derive(Debug, Clone, Copy)]
struct Place<'c> {
    event_type: &'c EventType,
    ts: u64,
    start: usize,
    len: u32,
    pid: i32,
    cpu: u32,
    lane: u16,
    id: u16,
}

/// Merged events in order, with the errors met between them.
#[derive(Debug, Default)]
struct Chunk<'c> {
    places: Vec<Place<'c>>,
    /// Records of lanes that are not mapped: none when [`mappings_of`] chose this way,
    /// unless a file grew after it was measured.
    copied: Vec<u8>,
    /// Each error with the number of this chunk's events that came before it.
    errors: Vec<(usize, DecodeError)>,
    /// The stream has ended (after its last error, if that was fatal).
    end: Option<Vec<CpuSummary>>,
}

/// Whether `stream` can be decoded this way: every lane that may hold data is mapped.
pub(crate) fn mappings_of(
    stream: &EventStream<'_>,
    has_data: &[bool],
) -> Option<Vec<Option<MappedRange>>> {
    let mappings = stream.mappings();
    let all = mappings
        .iter()
        .zip(has_data)
        .all(|(mapping, &data)| mapping.is_some() || !data);
    (all && mappings.len() < COPIED as usize).then_some(mappings)
}

/// Runs `stream` on a thread of its own and hands each of its events to `event` and each
/// of its errors to `error` on this one, in order; returns the per-CPU summaries at the
/// end, or `None` when `error` stopped it (by returning false) first. `mappings` are the
/// stream's own ([`mappings_of`]). Fails only when the thread cannot be started.
pub(crate) fn run<'c>(
    mut stream: EventStream<'c>,
    mappings: Vec<Option<MappedRange>>,
    mut event: impl FnMut(Event<'_>),
    mut error: impl FnMut(DecodeError) -> bool,
) -> std::io::Result<Option<Vec<CpuSummary>>> {
    // The records are read here, after the decoding thread has moved on: this side gives
    // the mappings back.
    stream.keep_mapped_pages();
    std::thread::scope(|scope| {
        let (chunks, received) = mpsc::sync_channel(CHUNKS_IN_FLIGHT);
        let (spent, returned) = mpsc::channel();
        std::thread::Builder::new()
            .name("decode-merge".into())
            .spawn_scoped(scope, move || produce(stream, chunks, returned))?;
        Ok(consume(
            &received, &spent, &mappings, &mut event, &mut error,
        ))
    })
}

/// The calling thread's side.
fn consume<'c>(
    received: &Receiver<Chunk<'c>>,
    spent: &Sender<Chunk<'c>>,
    mappings: &[Option<MappedRange>],
    each: &mut impl FnMut(Event<'_>),
    error: &mut impl FnMut(DecodeError) -> bool,
) -> Option<Vec<CpuSummary>> {
    let bytes: Vec<&[u8]> = mappings
        .iter()
        .map(|m| m.as_ref().map_or(&[][..], |m| m.bytes()))
        .collect();
    // Per lane: how far its events have been handed out, and given back.
    let mut reached = vec![0usize; mappings.len()];
    let mut released = vec![0usize; mappings.len()];
    // A closed channel means the decoding thread panicked: the scope raises that panic.
    while let Ok(mut chunk) = received.recv() {
        let mut errors = std::mem::take(&mut chunk.errors).into_iter().peekable();
        for (index, place) in chunk.places.iter().enumerate() {
            while errors.peek().is_some_and(|(at, _)| *at == index) {
                let (_, met) = errors.next().expect("peeked");
                if !error(met) {
                    return None;
                }
            }
            // In range: the place was taken from this same mapping's records, or copy.
            let from = match place.lane {
                COPIED => &chunk.copied[..],
                lane => {
                    // A CPU's events lie in its mapping in the order they come.
                    reached[lane as usize] = place.start;
                    bytes[lane as usize]
                }
            };
            let record = &from[place.start..place.start + place.len as usize];
            each(Event::new(
                place.ts,
                place.cpu,
                place.pid,
                place.id,
                record,
                place.event_type,
            ));
        }
        for (_, met) in errors {
            if !error(met) {
                return None;
            }
        }
        if let Some(summaries) = chunk.end.take() {
            return Some(summaries);
        }
        for ((mapping, &reached), released) in mappings.iter().zip(&reached).zip(&mut released) {
            if reached.saturating_sub(*released) >= RELEASE_BYTES {
                if let Some(read) = mapping.as_ref().and_then(|m| m.sub(*released, reached)) {
                    read.release();
                }
                *released = reached;
            }
        }
        chunk.places.clear();
        chunk.copied.clear();
        // The decoding thread is gone once it sent its last chunk.
        let _ = spent.send(chunk);
    }
    None
}

/// The decoding thread's side: fills chunks until the stream ends, a fatal error ends it,
/// or the caller stops taking them.
fn produce<'c>(
    mut stream: EventStream<'c>,
    chunks: SyncSender<Chunk<'c>>,
    returned: Receiver<Chunk<'c>>,
) {
    let catalog = stream.catalog();
    loop {
        let mut chunk = returned.try_recv().unwrap_or_default();
        let mut ended = false;
        while chunk.places.len() < CHUNK_EVENTS {
            match stream.step() {
                Some(Ok(())) => {
                    let place = stream.mapped_place();
                    let event = stream.current();
                    let (lane, start) = match place {
                        Some((lane, start)) => (lane as u16, start),
                        None => {
                            let start = chunk.copied.len();
                            chunk.copied.extend_from_slice(event.record());
                            (COPIED, start)
                        }
                    };
                    chunk.places.push(Place {
                        event_type: catalog.get_or_unknown(event.id()),
                        ts: event.ts(),
                        start,
                        len: event.record().len() as u32,
                        pid: event.pid(),
                        cpu: event.cpu(),
                        lane,
                        id: event.id(),
                    });
                }
                Some(Err(error)) => {
                    let fatal = error.is_fatal();
                    chunk.errors.push((chunk.places.len(), error));
                    if fatal {
                        ended = true;
                        break;
                    }
                }
                None => {
                    ended = true;
                    break;
                }
            }
        }
        if ended {
            chunk.end = Some(stream.summaries());
        }
        if chunks.send(chunk).is_err() || ended {
            return;
        }
    }
}
