//! The converter's bytes decoded back with the same messages.

use std::collections::HashMap;

use prost::Message;
use vmscale_trace::decode::views::contention_flags;
use vmscale_trace::Kallsyms;

use super::convert::Converter;
use super::names::Names;
use super::proto::{
    AnnotationValue, EventType, PacketData, Trace, TrackEvent, CLOCK_MONOTONIC,
    SEQ_INCREMENTAL_STATE_CLEARED,
};

const KALLSYMS: &str = "\
ffffffff81000000 T smp_call_function_many_cond
ffffffff81000400 t flush_tlb_func
ffffffff82000040 b static_lock
";

fn convert(drive: impl FnOnce(&mut Converter<&mut Vec<u8>>)) -> Trace {
    let mut bytes = Vec::new();
    let names = Names::new(Kallsyms::parse(KALLSYMS).unwrap(), None);
    let mut converter = Converter::new(&mut bytes, names, Some("test scenario".into()));
    drive(&mut converter);
    let (_, counts) = converter.finish().unwrap();
    let trace = Trace::decode(bytes.as_slice()).unwrap();
    assert_eq!(counts.packets, trace.packet.len() as u64);
    trace
}

/// Track names by uuid, and the track events with their times.
fn split(trace: &Trace) -> (HashMap<u64, String>, Vec<(u64, TrackEvent)>) {
    let (mut tracks, mut events) = (HashMap::new(), Vec::new());
    for packet in &trace.packet {
        match &packet.data {
            Some(PacketData::TrackDescriptor(d)) => {
                tracks.insert(d.uuid.unwrap(), d.name.clone().unwrap());
            }
            Some(PacketData::TrackEvent(e)) => {
                assert_eq!(packet.timestamp_clock_id, Some(CLOCK_MONOTONIC));
                events.push((packet.timestamp.unwrap(), e.clone()));
            }
            _ => {}
        }
    }
    (tracks, events)
}

fn on<'a>(
    tracks: &HashMap<u64, String>,
    events: &'a [(u64, TrackEvent)],
    track: &str,
) -> Vec<&'a (u64, TrackEvent)> {
    events
        .iter()
        .filter(|(_, e)| tracks[&e.track_uuid.unwrap()] == track)
        .collect()
}

fn kind(event: &TrackEvent) -> EventType {
    EventType::try_from(event.r#type.unwrap()).unwrap()
}

#[test]
fn the_first_packet_declares_the_monotonic_clock_and_starts_the_sequence() {
    let trace = convert(|c| c.print(1_000, "vmscale: begin x"));
    let first = &trace.packet[0];
    assert_eq!(first.sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
    let Some(PacketData::ClockSnapshot(snapshot)) = &first.data else {
        panic!("first packet is {first:?}");
    };
    assert_eq!(snapshot.primary_trace_clock, Some(CLOCK_MONOTONIC as i32));
    assert_eq!(snapshot.clocks[0].timestamp, Some(1_000));
    assert!(trace
        .packet
        .iter()
        .all(|p| p.trusted_packet_sequence_id == Some(1)));
}

#[test]
fn switches_become_slices_on_cpu_tracks_and_idle_is_blank() {
    let trace = convert(|c| {
        c.switch(100, 1, (0, "swapper/1"), (42, "worker"));
        c.switch(250, 1, (42, "worker"), (0, "swapper/1"));
        c.switch(300, 1, (0, "swapper/1"), (7, "other"));
    });
    let (tracks, events) = split(&trace);
    let cpu = on(&tracks, &events, "cpu 1");
    let shape: Vec<_> = cpu
        .iter()
        .map(|(ts, e)| (*ts, kind(e), e.name.clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (100, EventType::SliceBegin, Some("worker 42".to_string())),
            (250, EventType::SliceEnd, None),
            (300, EventType::SliceBegin, Some("other 7".to_string())),
            // Closed at the last event's time.
            (300, EventType::SliceEnd, None),
        ]
    );
}

#[test]
fn lock_waits_nest_on_the_task_track_with_the_address() {
    let trace = convert(|c| {
        c.switch(10, 0, (0, "swapper/0"), (42, "vcpu"));
        c.contention_begin(20, 42, 0xffff_8881_0000_0040, contention_flags::MUTEX);
        // The mutex's second begin (spinning gave way to sleeping) is the same wait.
        c.contention_begin(25, 42, 0xffff_8881_0000_0040, contention_flags::MUTEX);
        c.contention_begin(30, 42, 0xffff_ffff_8200_0048, contention_flags::SPIN);
        c.contention_end(35, 42, 0xffff_ffff_8200_0048, 0);
        c.contention_end(40, 42, 0xffff_8881_0000_0040, 0);
        // Its begin was before the trace.
        c.contention_end(45, 42, 0x1234, 0);
    });
    let (tracks, events) = split(&trace);
    let waits = on(&tracks, &events, "vcpu 42");
    let shape: Vec<_> = waits
        .iter()
        .map(|(ts, e)| (*ts, kind(e), e.name.clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (
                20,
                EventType::SliceBegin,
                Some("wait: 0xffff888100000040".into())
            ),
            (
                30,
                EventType::SliceBegin,
                Some("wait: static_lock+0x8".into())
            ),
            (35, EventType::SliceEnd, None),
            (40, EventType::SliceEnd, None),
        ]
    );
    let args = &waits[0].1.debug_annotations;
    assert_eq!(args[0].name.as_deref(), Some("lock_addr"));
    assert_eq!(
        args[0].value,
        Some(AnnotationValue::Pointer(0xffff_8881_0000_0040))
    );
    assert_eq!(args[1].value, Some(AnnotationValue::String("mutex".into())));
}

#[test]
fn ipis_are_instants_with_flows_to_each_target() {
    let trace = convert(|c| {
        c.ipi(
            500,
            (0, 9),
            &[1, 3],
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0400,
        )
    });
    let (tracks, events) = split(&trace);
    let sent = on(&tracks, &events, "cpu 0 ipis");
    assert_eq!(sent.len(), 1);
    let send = &sent[0].1;
    assert_eq!(kind(send), EventType::Instant);
    assert_eq!(send.name.as_deref(), Some("ipi: flush_tlb_func"));
    assert_eq!(send.flow_ids.len(), 2);
    let callsite = send
        .debug_annotations
        .iter()
        .find(|a| a.name.as_deref() == Some("callsite"))
        .unwrap();
    assert_eq!(
        callsite.value,
        Some(AnnotationValue::String(
            "smp_call_function_many_cond+0x10".into()
        ))
    );
    for (cpu, flow) in [(1, send.flow_ids[0]), (3, send.flow_ids[1])] {
        let received = on(&tracks, &events, &format!("cpu {cpu} ipis"));
        assert_eq!(received.len(), 1);
        assert_eq!(received[0].1.terminating_flow_ids, vec![flow]);
        assert_eq!(received[0].0, 500);
    }
}

#[test]
fn phases_are_slices_and_other_markers_instants() {
    let trace = convert(|c| {
        c.print(10, "vmscale: begin outer");
        c.print(20, "vmscale: begin inner");
        c.print(25, "a note");
        c.print(30, "vmscale: end outer");
        c.print(40, "vmscale: end never-begun");
        c.print(50, "vmscale: begin open");
    });
    let (tracks, events) = split(&trace);
    let phases = on(&tracks, &events, "vmscale phases");
    let shape: Vec<_> = phases
        .iter()
        .map(|(ts, e)| (*ts, kind(e), e.name.clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (10, EventType::SliceBegin, Some("outer".into())),
            (20, EventType::SliceBegin, Some("inner".into())),
            (25, EventType::Instant, Some("a note".into())),
            (30, EventType::SliceEnd, None),
            (30, EventType::SliceEnd, None),
            (50, EventType::SliceBegin, Some("open".into())),
            (50, EventType::SliceEnd, None),
        ]
    );
    let descriptor = trace.packet.iter().find_map(|p| match &p.data {
        Some(PacketData::TrackDescriptor(d)) if d.name.as_deref() == Some("vmscale phases") => {
            Some(d)
        }
        _ => None,
    });
    assert_eq!(
        descriptor.unwrap().description.as_deref(),
        Some("test scenario")
    );
}

#[test]
fn an_empty_trace_is_a_valid_file_with_its_clock() {
    let trace = convert(|_| {});
    assert!(matches!(
        trace.packet[0].data,
        Some(PacketData::ClockSnapshot(_))
    ));
}

#[test]
fn holds_are_written_once_with_the_end_of_their_last_release() {
    use vmscale_analysis::holders::Hold;
    let lock = 0xffff_8881_0000_0040;
    let trace = convert(|c| {
        c.switch(10, 0, (0, "swapper/0"), (7, "holder"));
        let hold = Hold {
            lock,
            holder: 7,
            start: 10,
            start_known: false,
            end: 40,
        };
        c.hold(hold);
        // The same hold released a second waiter later: one slice, to the later end.
        c.hold(Hold { end: 55, ..hold });
        // The next holder's hold ends the first.
        c.hold(Hold {
            lock,
            holder: 8,
            start: 55,
            start_known: true,
            end: 90,
        });
    });
    let (tracks, events) = split(&trace);
    let first = on(&tracks, &events, "holder 7 holds 0xffff888100000040");
    let shape: Vec<_> = first
        .iter()
        .map(|(ts, e)| (*ts, kind(e), e.name.clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (
                10,
                EventType::SliceBegin,
                Some("hold: 0xffff888100000040".into())
            ),
            (55, EventType::SliceEnd, None),
        ]
    );
    // The last hold is written at the end, on its own track.
    let second = on(&tracks, &events, "pid 8 holds 0xffff888100000040");
    assert_eq!(second.len(), 2);
    assert_eq!((second[0].0, second[1].0), (55, 90));
}

#[test]
fn a_releaser_waking_a_waiter_is_a_flow_to_where_the_wait_ends() {
    let lock = 0xffff_8881_0000_0040;
    let trace = convert(|c| {
        c.switch(10, 0, (0, "swapper/0"), (7, "holder"));
        c.switch(11, 1, (0, "swapper/1"), (42, "waiter"));
        c.contention_begin(20, 42, lock, contention_flags::MUTEX);
        // A wakeup of a task that waits on nothing draws nothing.
        c.waking(25, (0, 7), 99);
        // An interrupt on an idle CPU is no releaser.
        c.waking(28, (1, 0), 42);
        c.waking(30, (0, 7), 42);
        c.contention_end(45, 42, lock, 0);
        // A wait that gives up (a signal) says so.
        c.contention_begin(50, 42, lock, contention_flags::MUTEX);
        c.waking(55, (0, 7), 42);
        c.contention_end(60, 42, lock, -4);
    });
    let (tracks, events) = split(&trace);
    let cpu0 = on(&tracks, &events, "cpu 0");
    let wakes: Vec<_> = cpu0
        .iter()
        .filter(|(_, e)| kind(e) == EventType::Instant)
        .collect();
    assert_eq!(wakes.len(), 2);
    assert!(on(&tracks, &events, "cpu 1")
        .iter()
        .all(|(_, e)| kind(e) != EventType::Instant));
    assert_eq!(wakes[0].0, 30);
    assert_eq!(wakes[0].1.name.as_deref(), Some("wake waiter 42"));
    let flow = wakes[0].1.flow_ids[0];
    let waits = on(&tracks, &events, "waiter 42");
    let got = waits
        .iter()
        .find(|(_, e)| kind(e) == EventType::Instant)
        .expect("a got-lock instant");
    assert_eq!(got.0, 45);
    assert_eq!(got.1.terminating_flow_ids, vec![flow]);
    let gave_up = waits
        .iter()
        .filter(|(_, e)| kind(e) == EventType::Instant)
        .nth(1)
        .expect("a gave-up instant");
    assert_eq!(gave_up.0, 60);
    assert!(gave_up.1.name.as_deref().unwrap().starts_with("gave up on"));
    assert_eq!(gave_up.1.terminating_flow_ids, wakes[1].1.flow_ids);
}

#[test]
fn system_calls_are_slices_named_by_call_and_a_lost_exit_is_closed() {
    let trace = convert(|c| {
        c.switch(1, 0, (0, "swapper/0"), (42, "vmscale"));
        c.sys_enter(10, 42, "ioctl".into());
        c.sys_exit(30, 42);
        c.sys_enter(40, 42, "munmap".into());
        // The exit of munmap was lost.
        c.sys_enter(60, 42, "ioctl".into());
        c.sys_exit(70, 42);
        c.sys_exit(80, 42);
    });
    let (tracks, events) = split(&trace);
    let calls = on(&tracks, &events, "vmscale 42");
    let shape: Vec<_> = calls
        .iter()
        .map(|(ts, e)| (*ts, kind(e), e.name.clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (10, EventType::SliceBegin, Some("ioctl".into())),
            (30, EventType::SliceEnd, None),
            (40, EventType::SliceBegin, Some("munmap".into())),
            (60, EventType::SliceEnd, None),
            (60, EventType::SliceBegin, Some("ioctl".into())),
            (70, EventType::SliceEnd, None),
        ]
    );
}
