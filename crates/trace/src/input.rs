//! What is this file? The files `vmscale report` takes, told apart by their content, not
//! their names: a run.json, a trace-cmd .dat file, or ftrace text. (Directories, run or
//! trace directories, are told apart by the files they hold, where they are opened.)

/// How much of a file is looked at.
pub const HEAD_BYTES: u64 = 64 << 10;

/// What a file holds, as far as its first bytes tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file that starts with trace-cmd's magic (whether or not the rest holds together).
    Dat,
    /// A JSON object: a run.json, or something that will say why it is not one.
    Json,
    /// Text (what it holds, the text importer says).
    Text,
    /// A file of zero bytes.
    Empty,
    /// Anything else; what its first bytes look like, for an error message.
    Unknown { starts_with: String },
}

impl Input {
    /// What the input is called in messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Input::Dat => "a trace-cmd .dat file",
            Input::Json => "a JSON file",
            Input::Text => "ftrace text",
            Input::Empty => "an empty file",
            Input::Unknown { .. } => "not a run directory, run.json, trace-cmd .dat or ftrace text",
        }
    }
}

/// What a file holds, from its first bytes ([`HEAD_BYTES`] are enough to tell).
pub fn sniff_bytes(head: &[u8]) -> Input {
    if head.is_empty() {
        return Input::Empty;
    }
    if head.starts_with(crate::dat::preamble::MAGIC) {
        return Input::Dat;
    }
    let first = head.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        return Input::Json;
    }
    if is_ftrace_text(head) {
        return Input::Text;
    }
    Input::Unknown {
        starts_with: describe_bytes(head),
    }
}

/// Text: bytes a text has, whatever its lines hold, so that the text importer, not a
/// guess from the name, says what the file holds and why it cannot be read when it
/// cannot. Bytes a text never has (NUL, control characters other than whitespace and ESC)
/// mark a binary file, as do mostly high bytes that are not UTF-8; a few (Latin-1, broken
/// UTF-8) are still text.
fn is_ftrace_text(head: &[u8]) -> bool {
    let controls_of_text = head
        .iter()
        .all(|&b| b >= 0x20 || matches!(b, b'\t' | b'\n' | b'\r' | 0x0c | 0x1b));
    // Not UTF-8 (a character cut at the end of the head aside) and mostly high bytes: binary.
    let utf8 = match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    };
    let high = head.iter().filter(|&&b| b >= 0x80).count();
    controls_of_text && (utf8 || high * 8 < head.len())
}

/// The first bytes of a file as a reader can recognise them: quoted text (newlines and
/// tabs written `\n`, `\t`) when they are printable, else hex.
fn describe_bytes(head: &[u8]) -> String {
    let shown = &head[..head.len().min(16)];
    if shown
        .iter()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        let mut text = String::from("\"");
        for &b in shown {
            match b {
                b'\n' => text.push_str("\\n"),
                b'\t' => text.push_str("\\t"),
                b'\r' => text.push_str("\\r"),
                b'"' | b'\\' => {
                    text.push('\\');
                    text.push(b as char);
                }
                _ => text.push(b as char),
            }
        }
        text.push('"');
        text
    } else {
        let hex: Vec<String> = shown.iter().map(|b| format!("{b:02x}")).collect();
        format!("bytes {}", hex.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_told_apart_by_their_first_bytes() {
        assert_eq!(sniff_bytes(b""), Input::Empty);
        assert_eq!(sniff_bytes(b"\x17\x08\x44tracing6\0"), Input::Dat);
        // The magic alone is enough: a damaged file is still a .dat file, and its reader
        // says what is wrong with it.
        assert_eq!(sniff_bytes(b"\x17\x08\x44tracing"), Input::Dat);
        assert_eq!(sniff_bytes(b"  \n{\"schema_version\": 1}"), Input::Json);
        assert_eq!(
            sniff_bytes(b"# tracer: nop\n#\n"),
            Input::Text,
            "a tracer header"
        );
        assert_eq!(
            sniff_bytes(b"\x17\x08\x44trac"),
            Input::Unknown {
                starts_with: "bytes 17 08 44 74 72 61 63".into()
            }
        );
        // Any text is for the text importer to read, or to say why it cannot.
        assert_eq!(sniff_bytes(b"hello world"), Input::Text);
        assert_eq!(sniff_bytes("caf\u{e9}\tno\n".as_bytes()), Input::Text);
        assert_eq!(
            sniff_bytes(b"hello\0world\n"),
            Input::Unknown {
                starts_with: "bytes 68 65 6c 6c 6f 00 77 6f 72 6c 64 0a".into()
            }
        );
        assert_eq!(
            sniff_bytes(&[0xde, 0xad, 0xbe, 0xef]),
            Input::Unknown {
                starts_with: "bytes de ad be ef".into()
            }
        );
    }
}
