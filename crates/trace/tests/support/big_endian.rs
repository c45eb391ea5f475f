//! A big-endian .dat file made from a little-endian one, for checking the reader against
//! trace-cmd on a byte order no machine here records in: the container written big-endian
//! by the test writer, every page converted by `dat::byte_order` from the file's formats.

use vmscale_trace::dat::byte_order::{element_size, Convert};
use vmscale_trace::dat::{DatFile, Endian};
use vmscale_trace::decode::format::{EventFormat, HeaderPage};
use vmscale_trace::decode::page::PageLayout;
use vmscale_trace::{EventCatalog, EventType};

use std::collections::HashMap;

use vmscale_trace::decode::format::FieldLayout;

use super::dat_writer::DatWriter;
use super::report::{Decoded, Value};

/// `dat` (little-endian) as a big-endian version-6 file, or version 7 with `writer`'s codec
/// when the caller sets one on the returned writer.
pub fn big_endian_writer(dat: &DatFile) -> DatWriter {
    assert_eq!(dat.endian, Endian::Little);
    let mut writer = DatWriter::from_dat(dat);
    let header_page =
        HeaderPage::parse(&String::from_utf8_lossy(&writer.header_page)).expect("header_page");
    let layout = PageLayout::new(&header_page, writer.page_size as usize).expect("page layout");
    let mut types: Vec<EventType> = Vec::new();
    for format in dat
        .metadata
        .ftrace_formats
        .iter()
        .chain(&dat.metadata.event_formats)
    {
        if let Ok(parsed) = EventFormat::parse(&String::from_utf8_lossy(&format.text)) {
            if types.iter().all(|t| t.format.id != parsed.id) {
                types.push(EventType::new(&format.system, parsed));
            }
        }
    }
    let convert = Convert::new(layout, &EventCatalog::new(types).expect("catalog"));
    for pages in &mut writer.cpus {
        for page in pages.chunks_exact_mut(layout.page_size) {
            convert.page(page, Endian::Little);
        }
    }
    writer.big_endian = true;
    writer
}

/// The events with the elements of their numeric arrays (kernel_stack's `caller`) back in
/// big-endian order, and their printk-string pointers (`const char *`, ipi_raise's
/// `reason`) as trace-cmd 3.1 reads them from a big-endian file: in host order. It then
/// finds no printk string at that address and prints the pointer as bare hex digits, which
/// [`printk_pointer_fields`] lists for the comparison.
#[allow(dead_code)] // not every test that includes this file compares with trace-cmd
pub fn as_stored_big_endian(events: &[Decoded], dat: &DatFile) -> Vec<Decoded> {
    let pointers = printk_pointer_fields(dat);
    let mut element_sizes: HashMap<(String, String), usize> = HashMap::new();
    for format in dat
        .metadata
        .event_formats
        .iter()
        .chain(&dat.metadata.ftrace_formats)
    {
        let parsed = vmscale_trace::decode::format::EventFormat::parse(&String::from_utf8_lossy(
            &format.text,
        ))
        .unwrap();
        for field in &parsed.fields {
            // Elements as the kernel's type says (the test writer converted by the same
            // rule); fixed arrays of other types by their declared length.
            let size = match (
                element_size(&field.type_text, dat.long_size as usize),
                field.layout,
            ) {
                (Some(size), _) => size,
                (None, FieldLayout::Array { len }) if len > 0 => field.size / len,
                _ => continue,
            };
            if size > 1 && !field.type_text.contains("char") {
                element_sizes.insert((parsed.name.clone(), field.name.clone()), size);
            }
        }
    }
    events
        .iter()
        .map(|event| {
            let mut event = event.clone();
            for (name, value) in &mut event.fields {
                let size = element_sizes.get(&(event.name.clone(), name.clone()));
                if let (Some(&size), Value::Bytes { bytes, .. }) = (size, &mut *value) {
                    for element in bytes.chunks_mut(size) {
                        element.reverse();
                    }
                }
                if let Value::Int { value, size: 8 } = value {
                    if pointers.contains(&(event.name.clone(), name.clone())) {
                        *value = value.swap_bytes();
                    }
                }
            }
            event
        })
        .collect()
}

/// `(event, field)` of every `const char *` field of 8 bytes: a pointer to a printk string.
#[allow(dead_code)] // not every test that includes this file compares with trace-cmd
pub fn printk_pointer_fields(dat: &DatFile) -> std::collections::HashSet<(String, String)> {
    dat.metadata
        .event_formats
        .iter()
        .filter_map(|format| {
            vmscale_trace::decode::format::EventFormat::parse(&String::from_utf8_lossy(
                &format.text,
            ))
            .ok()
        })
        .flat_map(|parsed| {
            parsed
                .fields
                .iter()
                .filter(|f| f.type_text.replace(' ', "") == "constchar*" && f.size == 8)
                .map(|f| (parsed.name.clone(), f.name.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}
