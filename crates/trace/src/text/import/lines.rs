//! Lines of a text of any size with bounded memory: a line longer than [`MAX_LINE`] bytes is
//! cut there (the rest is read and dropped), and bytes that are not UTF-8 become U+FFFD.

use std::io::{self, BufRead};

/// The longest line kept, in bytes. The kernel's lines are a few hundred bytes; a longer one
/// is not trace output, and only its start is needed to say so.
pub const MAX_LINE: usize = 64 * 1024;

/// Reads `\n`-terminated lines (a trailing `\r` is dropped too), counting from 1.
pub(crate) struct LineReader<R> {
    source: R,
    bytes: Vec<u8>,
    text: String,
    number: usize,
}

/// One line as read.
pub(crate) struct Line<'a> {
    pub number: usize,
    pub text: &'a str,
    /// The line was longer than [`MAX_LINE`] and `text` is its start.
    pub cut: bool,
}

impl<R: BufRead> LineReader<R> {
    pub(crate) fn new(source: R) -> LineReader<R> {
        LineReader {
            source,
            bytes: Vec::new(),
            text: String::new(),
            number: 0,
        }
    }

    /// The next line, `None` at the end of the text.
    pub(crate) fn next_line(&mut self) -> Option<io::Result<Line<'_>>> {
        self.bytes.clear();
        let mut cut = false;
        let mut seen = false;
        loop {
            let available = match self.source.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Err(e)),
            };
            if available.is_empty() {
                break;
            }
            seen = true;
            let (chunk, used, ended) = match available.iter().position(|&b| b == b'\n') {
                Some(end) => (&available[..end], end + 1, true),
                None => (available, available.len(), false),
            };
            let room = MAX_LINE - self.bytes.len();
            if chunk.len() > room {
                cut = true;
            }
            self.bytes
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
            self.source.consume(used);
            if ended {
                break;
            }
        }
        if !seen {
            return None;
        }
        if self.bytes.last() == Some(&b'\r') {
            self.bytes.pop();
        }
        self.number += 1;
        self.text.clear();
        self.text.push_str(&String::from_utf8_lossy(&self.bytes));
        Some(Ok(Line {
            number: self.number,
            text: &self.text,
            cut,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<(usize, String, bool)> {
        let mut reader = LineReader::new(io::BufReader::with_capacity(7, input));
        let mut out = Vec::new();
        while let Some(line) = reader.next_line() {
            let line = line.unwrap();
            out.push((line.number, line.text.to_string(), line.cut));
        }
        out
    }

    #[test]
    fn lines_are_split_counted_and_decoded() {
        assert_eq!(
            lines(b"a\r\nbc\n\n\xffd"),
            vec![
                (1, "a".into(), false),
                (2, "bc".into(), false),
                (3, "".into(), false),
                (4, "\u{fffd}d".into(), false),
            ]
        );
        assert!(lines(b"").is_empty());
    }

    #[test]
    fn a_long_line_is_cut_and_the_next_one_is_whole() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\nnext\n");
        let out = lines(&input);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1.len(), MAX_LINE);
        assert!(out[0].2);
        assert_eq!(out[1], (2, "next".into(), false));
    }
}
