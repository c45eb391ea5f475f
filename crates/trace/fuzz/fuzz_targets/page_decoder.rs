//! Arbitrary bytes as a ring-buffer page: decoding gives records inside the page or an
//! error, and every record's typed view reads within its bounds.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vmscale_trace::format::EventFormat;
use vmscale_trace::page::{Page, PageLayout};
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

fuzz_target!(|data: &[u8]| {
    let catalog = catalog();
    let Ok(page) = Page::parse(&PageLayout::X86_64, data) else {
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
});
