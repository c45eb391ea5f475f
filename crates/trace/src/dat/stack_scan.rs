//! Notices kernel stacks in trace data as it is copied out.
//!
//! A .dat file does not say whether stacks were recorded (`trace-cmd record -T` or a
//! stacktrace trigger leave no option behind), but the trace directory's meta.json does;
//! the only truthful answer is whether an `ftrace:kernel_stack` record is in the pages.

use std::io::Write;

use crate::decode::field::read_uint;
use crate::decode::format::HeaderPage;
use crate::decode::page::{Page, PageLayout};

/// A writer that passes everything through and looks for one record type on the way.
pub struct StackScan<W: Write> {
    inner: W,
    /// `None` when there is nothing to look for (no kernel_stack format, or a header_page
    /// the page decoder cannot use).
    target: Option<(PageLayout, u16)>,
    page: Vec<u8>,
    found: bool,
}

impl<W: Write> StackScan<W> {
    pub fn new(
        inner: W,
        header_page: &[u8],
        page_size: usize,
        stack_id: Option<u32>,
    ) -> StackScan<W> {
        let layout = std::str::from_utf8(header_page)
            .ok()
            .and_then(|text| HeaderPage::parse(text).ok())
            .and_then(|header| PageLayout::new(&header, page_size));
        let id = stack_id.and_then(|id| u16::try_from(id).ok());
        StackScan {
            inner,
            target: layout.zip(id),
            page: Vec::new(),
            found: false,
        }
    }

    /// True once a kernel_stack record went through.
    pub fn found(&self) -> bool {
        self.found
    }

    pub fn into_inner(self) -> W {
        self.inner
    }

    fn scan_full_pages(&mut self) {
        let Some((layout, id)) = self.target else {
            return;
        };
        let mut start = 0;
        while !self.found && self.page.len() - start >= layout.page_size {
            let bytes = &self.page[start..start + layout.page_size];
            // A corrupt page is the decoder's to report; here it just holds no stack.
            if let Ok(page) = Page::parse(&layout, bytes) {
                self.found = page
                    .records()
                    .map_while(Result::ok)
                    .any(|record| read_uint(record.payload, 0, 2) == Some(id as u64));
            }
            start += layout.page_size;
        }
        if self.found {
            self.page = Vec::new();
        } else {
            self.page.drain(..start);
        }
    }
}

impl<W: Write> Write for StackScan<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write_all(buf)?;
        if self.target.is_some() && !self.found {
            self.page.extend_from_slice(buf);
            self.scan_full_pages();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
