//! Arbitrary bytes as pasted ftrace text (events in every layout, function_graph output):
//! the reader gives items or skipped lines, the trace directory written from them (in
//! memory) holds whole pages that decode without error, in time order per CPU, into
//! records of its own formats whose typed views read within bounds, with a printk_formats
//! listing that reads back as written.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vmscale_trace::decode::format::EventFormat;
use vmscale_trace::decode::page::{Page, PageLayout};
use vmscale_trace::text::import::TextReader;
use vmscale_trace::text::trace_dir::{write_trace_dir, MemorySink, PAGE_SIZE, SLOWEST_CALLS};
use vmscale_trace::{EventCatalog, EventType, Kallsyms};

/// The formats every directory gets (they do not depend on the text): parsed once.
fn catalog(files: &BTreeMap<String, Vec<u8>>) -> &'static EventCatalog {
    static CATALOG: OnceLock<EventCatalog> = OnceLock::new();
    CATALOG.get_or_init(|| parse_catalog(files))
}

fn parse_catalog(files: &BTreeMap<String, Vec<u8>>) -> EventCatalog {
    let types = files
        .iter()
        .filter_map(|(name, text)| {
            let (system, _) = name.strip_prefix("formats/")?.split_once('/')?;
            let format = EventFormat::parse(std::str::from_utf8(text).ok()?).unwrap();
            Some(EventType::new(system, format))
        })
        .collect();
    EventCatalog::new(types).unwrap()
}

fuzz_target!(|data: &[u8]| {
    let mut sink = MemorySink::default();
    let summary = write_trace_dir(TextReader::new(data), &mut sink).expect("memory never fails");
    assert!(summary.slowest.len() <= SLOWEST_CALLS);
    assert!(summary
        .slowest
        .windows(2)
        .all(|w| w[0].duration_ns >= w[1].duration_ns));
    let _ = summary.warnings();
    let _ = summary.call_notes();

    let catalog = catalog(&sink.files);
    let kallsyms = std::str::from_utf8(&sink.files["kallsyms"]).unwrap();
    Kallsyms::parse(kallsyms).unwrap();
    // The reasons' strings (ipi_raise, ipi_entry) list back as they were written.
    let printk = std::str::from_utf8(&sink.files["printk_formats"]).unwrap();
    let strings = vmscale_trace::PrintkStrings::parse(printk);
    assert_eq!(strings.len(), printk.lines().count());
    assert_eq!(strings.to_text(), printk);
    let mut records = 0u64;
    for (name, bytes) in &sink.files {
        if !name.ends_with(".raw") {
            continue;
        }
        assert_eq!(bytes.len() % PAGE_SIZE, 0, "{name} is not whole pages");
        let mut last = 0u64;
        for page in bytes.chunks(PAGE_SIZE) {
            let page = Page::parse(&PageLayout::X86_64, page).unwrap();
            for record in page.records() {
                let record = record.unwrap();
                assert!(record.ts >= last, "{name}: time went back");
                last = record.ts;
                let id = u16::from_le_bytes([record.payload[0], record.payload[1]]);
                let event_type = catalog.get(id).expect("a record of a written format");
                assert!(event_type.has_view());
                let _ = event_type.kind(record.payload);
                records += 1;
            }
        }
    }
    assert_eq!(records, summary.converted_events() + summary.stacks);
    let raw_files = sink.files.keys().filter(|n| n.ends_with(".raw")).count();
    assert_eq!(raw_files, summary.cpus.len());
});
