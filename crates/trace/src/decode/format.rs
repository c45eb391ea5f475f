//! Parsing of the kernel's self-descriptions: an event's `format` file, `header_page` and
//! `header_event`.
//!
//! These are the same files tracefs shows under `events/`; the trace directory keeps copies
//! (docs/trace-dir.md). Every malformed input is an [`FormatError`] naming the line, never a
//! panic.

use std::fmt;

/// A malformed `format`, `header_page` or `header_event` file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("line {line}: {what}")]
    Line { line: usize, what: &'static str },
    #[error("no `{0}` line")]
    Missing(&'static str),
    #[error("field `{0}` missing from header_page")]
    MissingHeaderField(&'static str),
    #[error("header_page field `{field}` has size {size}, expected {expected}")]
    HeaderFieldSize {
        field: &'static str,
        size: usize,
        expected: &'static str,
    },
    #[error("header_event says {what} = {found}, this decoder reads {expected}")]
    UnsupportedHeaderEvent {
        what: &'static str,
        found: u32,
        expected: u32,
    },
}

fn line_error(line: usize, what: &'static str) -> FormatError {
    FormatError::Line { line, what }
}

/// Where a field's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldLayout {
    /// A single value of `size` bytes at `offset`.
    Scalar,
    /// `type name[len]`: `len` elements inline, `size` bytes in all.
    Array { len: usize },
    /// `type name[]` of size 0 (e.g. `char buf[]` of ftrace:print): from `offset` to the
    /// end of the record.
    Trailing,
    /// `__data_loc type[] name`: a u32 at `offset` whose low 16 bits are the data's offset
    /// from the start of the record and high 16 bits its length in bytes.
    DataLoc,
    /// `__rel_loc type[] name`: as `DataLoc`, but the offset counts from the end of the u32.
    RelLoc,
}

/// One field of an event record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// The declared type as the kernel wrote it, without the name or array suffix
    /// (`unsigned long`, `void *`, `__data_loc char[]`).
    pub type_text: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    pub layout: FieldLayout,
}

impl Field {
    /// True for the fields every event starts with (`common_type`, `common_pid`, ...).
    pub fn is_common(&self) -> bool {
        self.name.starts_with("common_")
    }
}

/// A parsed `events/<system>/<event>/format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    /// The value of `common_type` in this event's records.
    pub id: u16,
    /// All fields, common ones first, in file order.
    pub fields: Vec<Field>,
    pub print_fmt: Option<String>,
}

impl EventFormat {
    /// Parses the text of a `format` file.
    pub fn parse(text: &str) -> Result<EventFormat, FormatError> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        let mut print_fmt = None;
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if let Some(rest) = trimmed.strip_prefix("name:") {
                let value = rest.trim();
                if value.is_empty() {
                    return Err(line_error(line, "empty event name"));
                }
                name = Some(value.to_string());
            } else if let Some(rest) = trimmed.strip_prefix("ID:") {
                let value: u32 = rest
                    .trim()
                    .parse()
                    .map_err(|_| line_error(line, "ID is not a number"))?;
                // common_type is an unsigned short: larger IDs cannot appear in records.
                let value = u16::try_from(value)
                    .map_err(|_| line_error(line, "ID does not fit common_type"))?;
                id = Some(value);
            } else if trimmed.starts_with("field:") || trimmed.starts_with("field special:") {
                fields.push(parse_field_line(trimmed, line)?);
            } else if let Some(rest) = trimmed.strip_prefix("print fmt:") {
                print_fmt = Some(rest.trim().to_string());
            }
        }
        Ok(EventFormat {
            name: name.ok_or(FormatError::Missing("name"))?,
            id: id.ok_or(FormatError::Missing("ID"))?,
            fields,
            print_fmt,
        })
    }

    /// The field called `name`, if the event has one.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Parses `field:<declaration>;\toffset:N;\tsize:N;\tsigned:N;`.
fn parse_field_line(text: &str, line: usize) -> Result<Field, FormatError> {
    let body = text
        .strip_prefix("field special:")
        .or_else(|| text.strip_prefix("field:"))
        .ok_or_else(|| line_error(line, "not a field line"))?;
    let mut parts = body.split(';');
    let declaration = parts.next().unwrap_or("").trim();
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((key, value)) = part.split_once(':') else {
            return Err(line_error(line, "field attribute without `:`"));
        };
        let number = || -> Result<usize, FormatError> {
            value
                .trim()
                .parse()
                .map_err(|_| line_error(line, "field attribute is not a number"))
        };
        match key.trim() {
            "offset" => offset = Some(number()?),
            "size" => size = Some(number()?),
            "signed" => signed = number()? != 0,
            _ => {}
        }
    }
    let offset = offset.ok_or_else(|| line_error(line, "field without offset"))?;
    let size = size.ok_or_else(|| line_error(line, "field without size"))?;
    if offset
        .checked_add(size)
        .is_none_or(|end| end > u32::MAX as usize)
    {
        return Err(line_error(line, "field offset + size out of range"));
    }
    let (type_text, name, array) = split_declaration(declaration, line)?;
    let layout = if type_text.starts_with("__data_loc") {
        FieldLayout::DataLoc
    } else if type_text.starts_with("__rel_loc") {
        FieldLayout::RelLoc
    } else {
        match array {
            // Older kernels declare ftrace's trailing strings without brackets
            // (`char buf; size:0` of ftrace:print): no scalar has zero bytes, so such a
            // field is the rest of the record, as `char buf[]` is.
            None if size == 0 => FieldLayout::Trailing,
            None => FieldLayout::Scalar,
            Some("") => FieldLayout::Trailing,
            Some(len) => match len.trim().parse() {
                Ok(len) => FieldLayout::Array { len },
                // A symbolic length the kernel did not expand: the size still bounds it.
                Err(_) => FieldLayout::Array { len: 0 },
            },
        }
    };
    Ok(Field {
        name: name.to_string(),
        type_text: type_text.to_string(),
        offset,
        size,
        signed,
        layout,
    })
}

/// Splits `unsigned long caller[8]` into (`unsigned long`, `caller`, Some("8")).
fn split_declaration(
    declaration: &str,
    line: usize,
) -> Result<(&str, &str, Option<&str>), FormatError> {
    let (base, array) = match declaration.strip_suffix(']') {
        Some(open) => {
            let bracket = open
                .rfind('[')
                .ok_or_else(|| line_error(line, "`]` without `[` in field declaration"))?;
            (&open[..bracket], Some(&open[bracket + 1..]))
        }
        None => (declaration, None),
    };
    let base = base.trim_end();
    let name_start = base
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let name = &base[name_start..];
    if name.is_empty() {
        return Err(line_error(line, "field declaration without a name"));
    }
    let type_text = base[..name_start].trim();
    if type_text.is_empty() {
        return Err(line_error(line, "field declaration without a type"));
    }
    Ok((type_text, name, array))
}

/// Where `header_page` says the parts of a ring-buffer page are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPage {
    pub timestamp_offset: usize,
    pub commit_offset: usize,
    /// Size of `local_t commit`, which is also the size of the `unsigned long` missed-events
    /// count the kernel may store after the data.
    pub commit_size: usize,
    pub data_offset: usize,
    /// The data capacity the kernel declares (the page size minus the header).
    pub data_size: usize,
}

impl HeaderPage {
    /// Parses the text of `events/header_page`.
    pub fn parse(text: &str) -> Result<HeaderPage, FormatError> {
        let mut timestamp = None;
        let mut commit = None;
        let mut data = None;
        for (index, raw) in text.lines().enumerate() {
            let trimmed = raw.trim();
            if !trimmed.starts_with("field") {
                continue;
            }
            let field = parse_field_line(trimmed, index + 1)?;
            match field.name.as_str() {
                "timestamp" => timestamp = Some(field),
                "commit" => commit = Some(field),
                "data" => data = Some(field),
                _ => {}
            }
        }
        let timestamp = timestamp.ok_or(FormatError::MissingHeaderField("timestamp"))?;
        let commit = commit.ok_or(FormatError::MissingHeaderField("commit"))?;
        let data = data.ok_or(FormatError::MissingHeaderField("data"))?;
        if timestamp.size != 8 {
            return Err(FormatError::HeaderFieldSize {
                field: "timestamp",
                size: timestamp.size,
                expected: "8",
            });
        }
        if commit.size != 4 && commit.size != 8 {
            return Err(FormatError::HeaderFieldSize {
                field: "commit",
                size: commit.size,
                expected: "4 or 8",
            });
        }
        Ok(HeaderPage {
            timestamp_offset: timestamp.offset,
            commit_offset: commit.offset,
            commit_size: commit.size,
            data_offset: data.offset,
            data_size: data.size,
        })
    }
}

/// The event-header encoding `header_event` declares.
///
/// The kernel has printed this file the same way since 2.6.3x except for the last type:
/// kernels before 4.15 have no `time_stamp` line (type 31 was reserved and never written
/// by them), so it is optional here; so is `time_extend`, which no kernel leaves out but
/// which a reader does not need in order to tell the encoding apart. When a line is there
/// its value must be the one the page decoder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderEvent {
    pub type_len_bits: u32,
    pub time_delta_bits: u32,
    pub padding: u32,
    pub time_extend: Option<u32>,
    pub time_stamp: Option<u32>,
    pub data_max_type_len: u32,
}

impl HeaderEvent {
    /// The encoding of every kernel since 2.6.3x, the only one the page decoder reads.
    pub const SUPPORTED: HeaderEvent = HeaderEvent {
        type_len_bits: 5,
        time_delta_bits: 27,
        padding: 29,
        time_extend: Some(30),
        time_stamp: Some(31),
        data_max_type_len: 28,
    };

    /// Parses the text of `events/header_event`.
    pub fn parse(text: &str) -> Result<HeaderEvent, FormatError> {
        let mut found = [None::<u32>; 6];
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            let Some((key, value)) = trimmed.split_once(':').or_else(|| trimmed.split_once("=="))
            else {
                continue;
            };
            let key = key.trim();
            let slot = match key {
                "type_len" => 0,
                "time_delta" => 1,
                "padding" => 2,
                "time_extend" => 3,
                "time_stamp" => 4,
                _ if key.starts_with("data max type_len") => 5,
                _ => continue,
            };
            let number = value
                .trim()
                .trim_start_matches("type")
                .trim_start_matches([' ', '=', '\t'])
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| line_error(line, "header_event value is not a number"))?;
            found[slot] = Some(number);
        }
        let required =
            |slot: usize, name: &'static str| found[slot].ok_or(FormatError::Missing(name));
        Ok(HeaderEvent {
            type_len_bits: required(0, "type_len")?,
            time_delta_bits: required(1, "time_delta")?,
            padding: required(2, "padding")?,
            time_extend: found[3],
            time_stamp: found[4],
            data_max_type_len: required(5, "data max type_len")?,
        })
    }

    /// Fails unless this is the encoding [`crate::decode::page`] decodes.
    pub fn check_supported(&self) -> Result<(), FormatError> {
        let expected = Self::SUPPORTED;
        let mut pairs = vec![
            ("type_len bits", self.type_len_bits, expected.type_len_bits),
            (
                "time_delta bits",
                self.time_delta_bits,
                expected.time_delta_bits,
            ),
            ("padding type", self.padding, expected.padding),
            (
                "data max type_len",
                self.data_max_type_len,
                expected.data_max_type_len,
            ),
        ];
        // A line the kernel did not print cannot disagree.
        if let (Some(found), Some(wanted)) = (self.time_extend, expected.time_extend) {
            pairs.push(("time_extend type", found, wanted));
        }
        if let (Some(found), Some(wanted)) = (self.time_stamp, expected.time_stamp) {
            pairs.push(("time_stamp type", found, wanted));
        }
        for (what, found, expected) in pairs {
            if found != expected {
                return Err(FormatError::UnsupportedHeaderEvent {
                    what,
                    found,
                    expected,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for FieldLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldLayout::Scalar => f.write_str("scalar"),
            FieldLayout::Array { len } => write!(f, "array[{len}]"),
            FieldLayout::Trailing => f.write_str("trailing array"),
            FieldLayout::DataLoc => f.write_str("__data_loc"),
            FieldLayout::RelLoc => f.write_str("__rel_loc"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHED_SWITCH: &str = "name: sched_switch\nID: 372\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:__data_loc cpumask_t cpumask;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:0;\n\
\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;\n\n\
print fmt: \"prev_comm=%s\", REC->prev_comm\n";

    #[test]
    fn fields_keep_type_name_offset_size_sign_and_layout() {
        let format = EventFormat::parse(SCHED_SWITCH).unwrap();
        assert_eq!(format.name, "sched_switch");
        assert_eq!(format.id, 372);
        let comm = format.field("prev_comm").unwrap();
        assert_eq!(
            (comm.type_text.as_str(), comm.offset, comm.size),
            ("char", 8, 16)
        );
        assert_eq!(comm.layout, FieldLayout::Array { len: 16 });
        let state = format.field("prev_state").unwrap();
        assert!(state.signed);
        assert_eq!(state.layout, FieldLayout::Scalar);
        let mask = format.field("cpumask").unwrap();
        assert_eq!(mask.type_text, "__data_loc cpumask_t");
        assert_eq!(mask.layout, FieldLayout::DataLoc);
        assert_eq!(format.field("buf").unwrap().layout, FieldLayout::Trailing);
        // ftrace:print of a 3.x kernel.
        let old_print =
            "name: print\nID: 5\n\tfield:unsigned long ip;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char buf;\toffset:12;\tsize:0;\tsigned:0;\n";
        let old_print = EventFormat::parse(old_print).unwrap();
        assert_eq!(
            old_print.field("buf").unwrap().layout,
            FieldLayout::Trailing
        );
        assert_eq!(old_print.field("ip").unwrap().layout, FieldLayout::Scalar);
        assert_eq!(format.field("lock_addr").unwrap().type_text, "void *");
        assert!(format.field("common_pid").unwrap().is_common());
        assert_eq!(
            format.print_fmt.as_deref(),
            Some("\"prev_comm=%s\", REC->prev_comm")
        );
    }

    #[test]
    fn a_multibyte_character_before_the_name_splits_cleanly() {
        // Found by fuzzing: the split once cut inside the character.
        let text = "name: x\nID: 1\n\tfield:int\u{fffd}a;\toffset:0;\tsize:4;\n";
        let format = EventFormat::parse(text).unwrap();
        assert_eq!(format.fields[0].name, "a");
        assert_eq!(format.fields[0].type_text, "int\u{fffd}");
    }

    #[test]
    fn malformed_format_files_are_errors() {
        let cases = [
            ("", "no `name`"),
            ("name: x\n", "no `ID`"),
            ("name: x\nID: 70000\n", "does not fit"),
            ("name: x\nID: q\n", "not a number"),
            (
                "name: x\nID: 1\n\tfield:int a;\tsize:4;\n",
                "without offset",
            ),
            (
                "name: x\nID: 1\n\tfield:int a;\toffset:4;\n",
                "without size",
            ),
            (
                "name: x\nID: 1\n\tfield:int a;\toffset:z;\tsize:4;\n",
                "not a number",
            ),
            (
                "name: x\nID: 1\n\tfield:char *;\toffset:0;\tsize:4;\n",
                "without a name",
            ),
            (
                "name: x\nID: 1\n\tfield:int ;\toffset:0;\tsize:4;\n",
                "without a type",
            ),
            (
                "name: x\nID: 1\n\tfield:int a];\toffset:0;\tsize:4;\n",
                "without `[`",
            ),
            (
                "name: x\nID: 1\n\tfield:int a;\toffset:18446744073709551615;\tsize:4;\n",
                "out of range",
            ),
            ("name: x\nID: 1\n\tfield:int a;\toffset\n", "without `:`"),
        ];
        for (text, expected) in cases {
            let error = EventFormat::parse(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn header_page_gives_the_page_layout() {
        let text = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n";
        let header = HeaderPage::parse(text).unwrap();
        assert_eq!(
            header,
            HeaderPage {
                timestamp_offset: 0,
                commit_offset: 8,
                commit_size: 8,
                data_offset: 16,
                data_size: 4080
            }
        );
        assert!(HeaderPage::parse("\tfield: u64 timestamp;\toffset:0;\tsize:8;\n").is_err());
        let bad_commit = text.replace(
            "offset:8;\tsize:8;\tsigned:1;",
            "offset:8;\tsize:2;\tsigned:1;",
        );
        assert!(HeaderPage::parse(&bad_commit).is_err());
    }

    #[test]
    fn header_event_is_checked_against_the_decoded_encoding() {
        let text = "# compressed entry header\n\ttype_len    :    5 bits\n\
\ttime_delta  :   27 bits\n\tarray       :   32 bits\n\n\tpadding     : type == 29\n\
\ttime_extend : type == 30\n\ttime_stamp : type == 31\n\tdata max type_len  == 28\n";
        let header = HeaderEvent::parse(text).unwrap();
        assert_eq!(header, HeaderEvent::SUPPORTED);
        header.check_supported().unwrap();
        let other = HeaderEvent::parse(&text.replace("27 bits", "26 bits")).unwrap();
        assert!(other.check_supported().is_err());
        assert!(HeaderEvent::parse("type_len : x bits").is_err());
        assert!(HeaderEvent::parse("").is_err());
        let wrong_stamp = HeaderEvent::parse(&text.replace("type == 31", "type == 27")).unwrap();
        assert!(wrong_stamp.check_supported().is_err());
    }

    /// header_event as kernels before 4.15 print it (here 4.14 on 32-bit ARM): no
    /// `time_stamp` line.
    #[test]
    fn header_event_of_older_kernels_has_no_time_stamp_line() {
        let text = "# compressed entry header\n\ttype_len    :    5 bits\n\
\ttime_delta  :   27 bits\n\tarray       :   32 bits\n\n\tpadding     : type == 29\n\
\ttime_extend : type == 30\n\tdata max type_len  == 28\n";
        let header = HeaderEvent::parse(text).unwrap();
        assert_eq!(header.time_stamp, None);
        assert_eq!(header.time_extend, Some(30));
        header.check_supported().unwrap();
        let without_extend = text.replace("\ttime_extend : type == 30\n", "");
        let header = HeaderEvent::parse(&without_extend).unwrap();
        assert_eq!(header.time_extend, None);
        header.check_supported().unwrap();
        // The lines every kernel prints stay required.
        let error = HeaderEvent::parse(&text.replace("\tpadding     : type == 29\n", ""))
            .unwrap_err()
            .to_string();
        assert_eq!(error, "no `padding` line");
    }

    /// header_page of a 32-bit kernel: `local_t commit` is 4 bytes and the data starts at
    /// 12 (4.13 on i686).
    #[test]
    fn header_page_of_a_32_bit_kernel() {
        let text = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
\tfield: local_t commit;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
\tfield: char data;\toffset:12;\tsize:4084;\tsigned:1;\n";
        let header = HeaderPage::parse(text).unwrap();
        assert_eq!(
            (header.commit_offset, header.commit_size, header.data_offset),
            (8, 4, 12)
        );
        let without_overwrite = text.replace(
            "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n",
            "",
        );
        assert_eq!(HeaderPage::parse(&without_overwrite).unwrap(), header);
    }
}
