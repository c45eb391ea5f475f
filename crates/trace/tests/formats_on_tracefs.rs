//! Every event format this kernel has parses, and the viewed events resolve to typed views.
//! Needs root and tracefs; fails (never skips) without.

use std::path::PathBuf;

use vmscale_trace::decode::format::{EventFormat, FieldLayout, HeaderEvent, HeaderPage};
use vmscale_trace::decode::page::PageLayout;
use vmscale_trace::record::tracefs;
use vmscale_trace::{EventCatalog, EventType};

fn events_dir() -> PathBuf {
    tracefs::mount_point()
        .unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"))
        .join("events")
}

/// tracefs answers a small first read of some files (header_page) with a truncated text
/// and end of file, so read them in one large read.
fn read_tracefs(path: &std::path::Path) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 16];
    let n = std::fs::File::open(path).unwrap().read(&mut buf).unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn all_event_types() -> Vec<EventType> {
    let mut types = Vec::new();
    for system in std::fs::read_dir(events_dir()).unwrap() {
        let system = system.unwrap();
        if !system.file_type().unwrap().is_dir() {
            continue;
        }
        let system_name = system.file_name().to_string_lossy().into_owned();
        for event in std::fs::read_dir(system.path()).unwrap() {
            let path = event.unwrap().path().join("format");
            if !path.exists() {
                continue;
            }
            let text = read_tracefs(&path);
            let format =
                EventFormat::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!format.fields.is_empty(), "{}", path.display());
            for field in &format.fields {
                // Sizes agree with the declared shape.
                match field.layout {
                    FieldLayout::DataLoc | FieldLayout::RelLoc => {
                        assert_eq!(field.size, 4, "{}", path.display())
                    }
                    FieldLayout::Trailing => assert_eq!(field.size, 0, "{}", path.display()),
                    FieldLayout::Array { len } if len > 0 => {
                        assert_eq!(field.size % len, 0, "{} {}", path.display(), field.name)
                    }
                    _ => {}
                }
            }
            types.push(EventType::new(&system_name, format));
        }
    }
    types
}

#[test]
fn every_format_file_of_this_kernel_parses_into_one_catalog() {
    let types = all_event_types();
    assert!(types.len() > 500, "only {} formats", types.len());
    let catalog = EventCatalog::new(types).unwrap();
    assert_eq!(catalog.common().len, 8);
    for (system, name) in [
        ("lock", "contention_begin"),
        ("lock", "contention_end"),
        ("sched", "sched_switch"),
        ("sched", "sched_waking"),
        ("sched", "sched_wakeup"),
        ("sched", "sched_wakeup_new"),
        ("ipi", "ipi_send_cpu"),
        ("ipi", "ipi_send_cpumask"),
        ("csd", "csd_queue_cpu"),
        ("csd", "csd_function_entry"),
        ("csd", "csd_function_exit"),
        ("raw_syscalls", "sys_enter"),
        ("raw_syscalls", "sys_exit"),
        ("ftrace", "kernel_stack"),
        ("ftrace", "print"),
    ] {
        let event_type = catalog
            .find(system, name)
            .unwrap_or_else(|| panic!("{system}:{name} missing"));
        assert!(
            event_type.has_view(),
            "{system}:{name} did not resolve to its view"
        );
        assert_eq!(catalog.get(event_type.format.id).unwrap().name(), name);
    }
    assert!(!catalog
        .find("sched", "sched_process_exit")
        .unwrap()
        .has_view());
}

#[test]
fn header_files_describe_the_decoded_page() {
    let events = events_dir();
    let header_page = HeaderPage::parse(&read_tracefs(&events.join("header_page"))).unwrap();
    let page_size = system_page_size();
    let layout = PageLayout::new(&header_page, page_size).unwrap();
    assert_eq!(layout.data_offset + header_page.data_size, page_size);
    let header_event = HeaderEvent::parse(&read_tracefs(&events.join("header_event"))).unwrap();
    header_event.check_supported().unwrap();
}

fn system_page_size() -> usize {
    let output = std::process::Command::new("getconf")
        .arg("PAGESIZE")
        .output()
        .unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
