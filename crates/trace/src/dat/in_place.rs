//! One buffer of a .dat file read where it lies, for a [`crate::Decoder`] that decodes the
//! file without extracting it: each CPU's pages as a byte stream (a range of the file, or
//! compressed chunks decompressed as the stream advances), and the format files as the
//! trace directory of an extraction would hold them.

use std::collections::BTreeMap;
use std::io::Read;

use super::buffer::{self, Buffer};
use super::error::DatError;
use super::extract::path_component;
use super::metadata::FormatFile;
use super::stack_scan::StackScan;
use super::DatFile;

impl DatFile {
    /// The pages of `cpu` in `buffer` as a byte stream, decompressed as it is read; empty
    /// when the buffer has no data for the CPU. A read error carries a [`DatError`]
    /// (`std::io::Error::downcast`).
    pub fn cpu_pages(
        &self,
        buffer: &Buffer,
        cpu: u32,
    ) -> Result<Box<dyn Read + Send + '_>, DatError> {
        match buffer.cpu(cpu) {
            Some(data) => buffer::cpu_reader(&self.source, buffer, data, self.endian),
            None => Ok(Box::new(std::io::empty())),
        }
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
