//! Arbitrary bytes as a ring-buffer page: decoding gives records inside the page or an
//! error, and every record's typed view reads within its bounds. The same bytes are also
//! read as the page of a 32-bit kernel (4-byte `commit`, data at 12), and as a big-endian
//! page converted to little-endian (`dat::byte_order`, both word sizes) and back, which
//! must neither panic nor read or write outside the page.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vmscale_trace::dat::byte_order::Convert;
use vmscale_trace::dat::Endian;
use vmscale_trace::decode::format::EventFormat;
use vmscale_trace::decode::page::{Page, PageLayout};
use vmscale_trace::{EventCatalog, EventKind, EventType};

/// The formats of the events the analyses view, as this kernel declares them.
fn catalog() -> &'static EventCatalog {
    static CATALOG: OnceLock<EventCatalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        macro_rules! formats {
            ($($system:literal / $name:literal),*) => {
                vec![$(EventType::new(
                    $system,
                    EventFormat::parse(include_str!(concat!(
                        "../../tests/fixtures/contention/formats/", $system, "/", $name
                    )))
                    .unwrap(),
                )),*]
            };
        }
        let mut types = formats!(
            "lock" / "contention_begin",
            "lock" / "contention_end",
            "sched" / "sched_switch",
            "sched" / "sched_waking",
            "sched" / "sched_wakeup",
            "sched" / "sched_wakeup_new",
            "ipi" / "ipi_send_cpu",
            "ipi" / "ipi_send_cpumask",
            "csd" / "csd_queue_cpu",
            "csd" / "csd_function_entry",
            "csd" / "csd_function_exit",
            "ftrace" / "kernel_stack",
            "ftrace" / "print"
        );
        for name in ["sys_enter", "sys_exit"] {
            let text = match name {
                "sys_enter" => {
                    include_str!("../../tests/fixtures/overrun/formats/raw_syscalls/sys_enter")
                }
                _ => include_str!("../../tests/fixtures/overrun/formats/raw_syscalls/sys_exit"),
            };
            types.push(EventType::new(
                "raw_syscalls",
                EventFormat::parse(text).unwrap(),
            ));
        }
        EventCatalog::new(types).unwrap()
    })
}

/// The page layout of a 32-bit kernel with 4 KiB pages.
const I686: PageLayout = PageLayout {
    page_size: 4096,
    timestamp_offset: 0,
    commit_offset: 8,
    commit_size: 4,
    data_offset: 12,
};

/// The conversion of each layout's big-endian pages, made once.
fn conversions() -> &'static [Convert; 2] {
    static CONVERSIONS: OnceLock<[Convert; 2]> = OnceLock::new();
    CONVERSIONS.get_or_init(|| {
        [
            Convert::new(PageLayout::X86_64, catalog()),
            Convert::new(I686, catalog()),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let catalog = catalog();
    for (layout, convert) in [PageLayout::X86_64, I686].iter().zip(conversions()) {
        decode(catalog, layout, data);
        // Shorter inputs are a page with zeros after them, so every input converts.
        let mut page = data.to_vec();
        page.resize(layout.page_size, 0);
        convert.page(&mut page, Endian::Big);
        decode(catalog, layout, &page);
        // And the other way, as the test writer does. (Not an inverse on arbitrary bytes:
        // a location word may point its data over other fields.)
        convert.page(&mut page, Endian::Little);
        decode(catalog, layout, &page);
    }
});

fn decode(catalog: &EventCatalog, layout: &PageLayout, data: &[u8]) {
    let Ok(page) = Page::parse(layout, data) else {
        return;
    };
    let bounds = page.data.as_ptr_range();
    let mut last_ts = None;
    for record in page.records() {
        let Ok(record) = record else {
            break;
        };
        let within = record.payload.as_ptr_range();
        assert!(within.start >= bounds.start && within.end <= bounds.end);
        last_ts = Some(record.ts);
        let id = u16::from_le_bytes([
            record.payload.first().copied().unwrap_or(0),
            record.payload.get(1).copied().unwrap_or(0),
        ]);
        let Some(event_type) = catalog.get(id) else {
            continue;
        };
        match event_type.kind(record.payload) {
            EventKind::KernelStack(stack) => {
                assert!(stack.iter().count() == stack.len());
            }
            EventKind::IpiSendCpumask(mask) => {
                assert!(mask.cpumask.iter().count() as u32 == mask.cpumask.count());
            }
            EventKind::SchedSwitch(switch) => {
                assert!(switch.prev_comm.as_bytes().len() <= 16);
            }
            EventKind::Print(print) => {
                let _ = print.text();
            }
            _ => {}
        }
    }
    let _ = last_ts;
}
