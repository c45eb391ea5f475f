//! Arbitrary text as a `format`, `header_page` and `header_event` file: parsing gives a value
//! or an error, and a parsed format's typed view reads any record within its bounds.
//! Input: the text, then optionally a NUL and record bytes to view with the parsed format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscale_trace::decode::format::{EventFormat, HeaderEvent, HeaderPage};
use vmscale_trace::decode::page::PageLayout;
use vmscale_trace::EventType;

fuzz_target!(|data: &[u8]| {
    let (text, record) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    if let Ok(header) = HeaderPage::parse(&text) {
        let _ = PageLayout::new(&header, 4096);
    }
    if let Ok(header) = HeaderEvent::parse(&text) {
        let _ = header.check_supported();
    }
    let Ok(format) = EventFormat::parse(&text) else {
        return;
    };
    for field in &format.fields {
        let field = vmscale_trace::decode::field::FieldRef::new(field);
        let _ = (field.u64(record), field.i64(record), field.c_str(record));
        let _ = field.element(record, 8, 3);
    }
    // Whatever the format calls itself, view records with it as each viewed event: the
    // view resolves against arbitrary offsets and sizes.
    for (system, name) in [
        ("lock", "contention_begin"),
        ("lock", "contention_end"),
        ("sched", "sched_switch"),
        ("sched", "sched_waking"),
        ("ipi", "ipi_send_cpu"),
        ("ipi", "ipi_send_cpumask"),
        ("csd", "csd_queue_cpu"),
        ("csd", "csd_function_exit"),
        ("raw_syscalls", "sys_enter"),
        ("raw_syscalls", "sys_exit"),
        ("ftrace", "kernel_stack"),
        ("ftrace", "print"),
    ] {
        let mut renamed = format.clone();
        renamed.name = name.to_string();
        let event_type = EventType::new(system, renamed);
        let _ = event_type.kind(record);
    }
});
