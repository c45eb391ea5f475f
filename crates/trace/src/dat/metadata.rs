//! The descriptive blocks of a .dat file, identical in both versions (in version 6 one after
//! another, in version 7 each in its own section): ring-buffer headers, event formats,
//! kallsyms, printk formats and saved command lines.

use super::error::DatError;
use super::source::Cursor;

/// One event's `format` file as the recording machine's tracefs showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatFile {
    /// The events/ directory it came from (`ftrace` for the ftrace-events block).
    pub system: String,
    /// The event name from its `name:` line.
    pub name: String,
    /// The `ID:` line: the `common_type` of this event's records.
    pub id: Option<u32>,
    /// The file's bytes, unchanged.
    pub text: Vec<u8>,
}

/// Everything in the file that describes the recording machine rather than the events.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    /// events/header_page
    pub header_page: Option<Vec<u8>>,
    /// events/header_event
    pub header_event: Option<Vec<u8>>,
    /// events/ftrace/*/format: the kernel's own events (print, kernel_stack, function...).
    pub ftrace_formats: Vec<FormatFile>,
    /// events/<system>/<event>/format for the recorded events.
    pub event_formats: Vec<FormatFile>,
    /// /proc/kallsyms
    pub kallsyms: Vec<u8>,
    /// printk_formats (trace_printk format strings kept outside the ring buffer).
    pub printk_formats: Vec<u8>,
    /// saved_cmdlines: `pid comm` lines.
    pub cmdlines: Vec<u8>,
}

impl Metadata {
    /// `header_page\0`, u64 size, text; `header_event\0`, u64 size, text.
    pub fn read_header_info(&mut self, cursor: &mut Cursor<'_>) -> Result<(), DatError> {
        cursor.expect_tag(b"header_page\0", "header_page tag")?;
        let size = cursor.u64("header_page size")?;
        self.header_page = Some(cursor.bytes("header_page", size)?);
        cursor.expect_tag(b"header_event\0", "header_event tag")?;
        let size = cursor.u64("header_event size")?;
        self.header_event = Some(cursor.bytes("header_event", size)?);
        Ok(())
    }

    /// u32 count, then per format: u64 size, text.
    pub fn read_ftrace_formats(&mut self, cursor: &mut Cursor<'_>) -> Result<(), DatError> {
        let count = cursor.u32("ftrace format count")?;
        // Each entry takes at least its 8-byte size, so a corrupt count stops at the end of
        // the data instead of allocating for it.
        for _ in 0..count {
            let size = cursor.u64("ftrace format size")?;
            let text = cursor.bytes("ftrace format", size)?;
            self.ftrace_formats.push(FormatFile::new("ftrace", text)?);
        }
        Ok(())
    }

    /// u32 system count, then per system: name\0, u32 count, per format: u64 size, text.
    pub fn read_event_formats(&mut self, cursor: &mut Cursor<'_>) -> Result<(), DatError> {
        let systems = cursor.u32("event system count")?;
        for _ in 0..systems {
            let system = cursor.c_string("event system name")?;
            let count = cursor.u32("event format count")?;
            for _ in 0..count {
                let size = cursor.u64("event format size")?;
                let text = cursor.bytes("event format", size)?;
                self.event_formats.push(FormatFile::new(&system, text)?);
            }
        }
        Ok(())
    }

    /// u32 size, text.
    pub fn read_kallsyms(&mut self, cursor: &mut Cursor<'_>) -> Result<(), DatError> {
        let size = cursor.u32("kallsyms size")?;
        self.kallsyms = cursor.bytes("kallsyms", size as u64)?;
        Ok(())
    }

    /// u32 size, text.
    pub fn read_printk_formats(&mut self, cursor: &mut Cursor<'_>) -> Result<(), DatError> {
        let size = cursor.u32("printk formats size")?;
        self.printk_formats = cursor.bytes("printk formats", size as u64)?;
        Ok(())
    }

    /// u64 size, text.
    pub fn read_cmdlines(&mut self, cursor: &mut Cursor<'_>) -> Result<(), DatError> {
        let size = cursor.u64("cmdlines size")?;
        self.cmdlines = cursor.bytes("cmdlines", size)?;
        Ok(())
    }
}

impl FormatFile {
    fn new(system: &str, text: Vec<u8>) -> Result<FormatFile, DatError> {
        let body = String::from_utf8_lossy(&text);
        let mut name = None;
        let mut id = None;
        for line in body.lines() {
            let line = line.trim();
            if let Some(value) = line.strip_prefix("name:") {
                name = Some(value.trim().to_string());
            } else if let Some(value) = line.strip_prefix("ID:") {
                id = value.trim().parse().ok();
            }
            if name.is_some() && id.is_some() {
                break;
            }
        }
        let name = name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| DatError::BadFormat {
                what: format!("a format file of system `{system}`"),
                message: "no `name:` line".into(),
            })?;
        Ok(FormatFile {
            system: system.to_string(),
            name,
            id,
            text,
        })
    }

    /// `system:event`, the way vmscale names events.
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.system, self.name)
    }
}
