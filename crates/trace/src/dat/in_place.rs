//! One buffer of a .dat file read where it lies, for a [`crate::Decoder`] that decodes the
//! file without extracting it: each CPU's pages as a byte stream (a range of the file, or
//! compressed chunks decompressed as the stream advances), and the format files as the
//! trace directory of an extraction would hold them.

use std::collections::BTreeMap;
use std::io::Read;

use super::buffer::{self, Buffer};
use super::byte_order::{Convert, LittleEndianPages};
use super::error::DatError;
use super::extract::path_component;
use super::metadata::FormatFile;
use super::source::Endian;
use super::stack_scan::StackScan;
use super::DatFile;
use crate::decode::catalog::{EventCatalog, EventType};
use crate::decode::format::{EventFormat, HeaderPage};
use crate::decode::page::PageLayout;
use crate::mapped::MappedRange;
use std::sync::Arc;

impl DatFile {
    /// The pages of `cpu` in `buffer` as a byte stream, decompressed as it is read; empty
    /// when the buffer has no data for the CPU. A read error carries a [`DatError`]
    /// (`std::io::Error::downcast`).
    pub fn cpu_pages(
        &self,
        buffer: &Buffer,
        cpu: u32,
    ) -> Result<Box<dyn Read + Send + '_>, DatError> {
        let Some(data) = buffer.cpu(cpu) else {
            return Ok(Box::new(std::io::empty()));
        };
        let pages = buffer::cpu_reader(&self.source, buffer, data, self.endian)?;
        if self.endian == Endian::Little {
            return Ok(pages);
        }
        let convert = Arc::new(self.page_conversion(buffer)?);
        Ok(Box::new(LittleEndianPages::new(pages, convert)))
    }

    /// The pages of `cpu` in `buffer` where they lie in the file, when they can be decoded
    /// there: stored uncompressed and little-endian, in a file that could be mapped.
    /// `None` otherwise, and for a CPU without data: [`DatFile::cpu_pages`] then reads them.
    pub fn cpu_pages_mapped(&self, buffer: &Buffer, cpu: u32) -> Option<MappedRange> {
        if buffer.compression.is_some() || self.endian != Endian::Little {
            return None;
        }
        let data = buffer.cpu(cpu).filter(|data| data.stored_size > 0)?;
        let file = self.mapping.get_or_init(|| self.source.map()).as_ref()?;
        file.range(data.offset, data.stored_size)
    }

    /// How the pages of `buffer` turn little-endian: its page layout and the fields of
    /// every format in the file. A format that does not parse leaves its records with only
    /// their common fields converted (the decoder reports such formats itself).
    fn page_conversion(&self, buffer: &Buffer) -> Result<Convert, DatError> {
        let bad = |what: &str, message: String| DatError::BadFormat {
            what: what.to_string(),
            message,
        };
        let header_page = std::str::from_utf8(self.header_page()?)
            .map_err(|_| DatError::NotUtf8("header_page"))?;
        let header_page =
            HeaderPage::parse(header_page).map_err(|e| bad("header_page", e.to_string()))?;
        let layout = PageLayout::new(&header_page, buffer.page_size as usize).ok_or_else(|| {
            bad(
                "header_page",
                format!("does not fit a page of {} bytes", buffer.page_size),
            )
        })?;
        let mut types: Vec<EventType> = Vec::new();
        for format in self.trace_formats()? {
            let parsed = std::str::from_utf8(&format.text)
                .ok()
                .and_then(|text| EventFormat::parse(text).ok());
            if let Some(parsed) = parsed {
                if types.iter().all(|t| t.format.id != parsed.id) {
                    types.push(EventType::new(&format.system, parsed));
                }
            }
        }
        let catalog = EventCatalog::new(types).map_err(|e| bad("event formats", e.to_string()))?;
        Ok(Convert::new(layout, &catalog))
    }

    /// The format files, one per system and event name, sorted by both: what formats/ of
    /// an extraction holds (where a later file of the same name replaces an earlier one).
    /// A name that cannot name a file there is refused the same way.
    pub fn trace_formats(&self) -> Result<Vec<&FormatFile>, DatError> {
        let mut formats = BTreeMap::new();
        let all = self
            .metadata
            .ftrace_formats
            .iter()
            .chain(&self.metadata.event_formats);
        for format in all {
            let key = (
                path_component(&format.system)?,
                path_component(&format.name)?,
            );
            formats.insert(key, format);
        }
        Ok(formats.into_values().collect())
    }

    /// Whether an `ftrace:kernel_stack` record is among the pages of `buffer`: a pass over
    /// them that stops at the first.
    pub fn has_kernel_stacks(&self, buffer: &Buffer) -> Result<bool, DatError> {
        let Some(id) = self.kernel_stack_id() else {
            return Ok(false);
        };
        let header_page = self.header_page()?;
        for data in &buffer.cpus {
            let mut scan = StackScan::new(
                std::io::sink(),
                header_page,
                buffer.page_size as usize,
                Some(id),
            );
            self.copy_cpu_data(buffer, data, &mut scan)?;
            if scan.found() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
