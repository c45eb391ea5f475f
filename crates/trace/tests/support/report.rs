//! `trace-cmd report -R -t` output parsed, and compared with decoded events: per CPU, in
//! buffer order, timestamp, pid, event name and every field value.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use vmscale_trace::dat::DatFile;
use vmscale_trace::decode::format::{EventFormat, FieldLayout};
use vmscale_trace::{DecodeSummary, Decoder};

/// A field value as the decoder read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Scalars, zero-extended from their size.
    Int {
        value: u64,
        size: usize,
    },
    Str(String),
    /// Arrays and `__data_loc` data. A fixed array the record ends inside (kernel_stack's
    /// `caller[8]` when the stack is shorter) holds only the bytes inside the record:
    /// `declared` says how long the format says it is.
    Bytes {
        bytes: Vec<u8>,
        declared: usize,
    },
    /// A non-character field of size 0 (the rest of the record). Kernels before 4.x declare
    /// ftrace:bprint's `u32 buf` without brackets; trace-cmd then reads it as a number of
    /// no bytes and prints 0, so only a listing of the same bytes or that 0 agree.
    Rest(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct Decoded {
    pub ts: u64,
    pub cpu: u32,
    pub pid: i32,
    pub name: String,
    pub fields: Vec<(String, Value)>,
}

impl Decoded {
    /// The event with its non-common fields, the way `trace-cmd report -R` prints them.
    pub fn of(event: &vmscale_trace::Event<'_>) -> Decoded {
        let mut fields = Vec::new();
        for field in event
            .event_type()
            .format
            .fields
            .iter()
            .filter(|f| !f.is_common())
        {
            let is_char = field.type_text.ends_with("char") || field.type_text.ends_with("char[]");
            let value = match field.layout {
                FieldLayout::Scalar => Value::Int {
                    value: event.u64(&field.name).unwrap_or_else(|| {
                        panic!("{}: scalar {} not in the record", event.name(), field.name)
                    }),
                    size: field.size,
                },
                _ if is_char => Value::Str(
                    String::from_utf8_lossy(event.str(&field.name).expect("string in the record"))
                        .into_owned(),
                ),
                FieldLayout::Trailing => Value::Rest(
                    event
                        .bytes(&field.name)
                        .expect("data in the record")
                        .to_vec(),
                ),
                FieldLayout::Array { .. } => {
                    // The record may end inside a fixed array (kernel_stack's caller[8] for
                    // short stacks): keep what the record holds.
                    let rest = event.record().get(field.offset..).unwrap_or(&[]);
                    Value::Bytes {
                        bytes: rest[..rest.len().min(field.size)].to_vec(),
                        declared: field.size,
                    }
                }
                _ => {
                    let bytes = event.bytes(&field.name).expect("data in the record");
                    Value::Bytes {
                        bytes: bytes.to_vec(),
                        declared: bytes.len(),
                    }
                }
            };
            fields.push((field.name.clone(), value));
        }
        Decoded {
            ts: event.ts(),
            cpu: event.cpu(),
            pid: event.pid(),
            name: event.name().to_string(),
            fields,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Reported {
    pub ts: u64,
    pub cpu: u32,
    pub pid: i32,
    pub name: String,
    pub fields: Vec<(String, String)>,
    pub line: String,
}

/// Parses `[buffer:] comm-pid [cpu] secs.nsecs: event: name=value ...` lines of `buffer`;
/// lines of the buffers in `others` are skipped, any other line fails. `fields_of` gives an
/// event's non-common field names in format order, which is how the values are told apart
/// (comms contain spaces).
pub fn parse_report(
    text: &str,
    buffer: &str,
    others: &[&str],
    fields_of: &HashMap<String, Vec<String>>,
) -> Vec<Reported> {
    let prefix_of = |name: &str| {
        if name.is_empty() {
            String::new()
        } else {
            format!("{name}:")
        }
    };
    let prefix = prefix_of(buffer);
    let other_prefixes: Vec<String> = others.iter().map(|o| prefix_of(o)).collect();
    let mut events = Vec::new();
    for line in text.lines() {
        if line.starts_with("cpus=") || line.trim().is_empty() {
            continue;
        }
        // With several buffers trace-cmd right-aligns their names. The top level's lines
        // have no name, so another buffer's are told apart first.
        let theirs = other_prefixes
            .iter()
            .any(|p| !p.is_empty() && line.trim_start().starts_with(p.as_str()));
        if theirs {
            continue;
        }
        let named = if buffer.is_empty() {
            line
        } else {
            line.trim_start()
        };
        let Some(rest) = named.strip_prefix(prefix.as_str()) else {
            panic!("report line of another buffer: {line:?}");
        };
        let parsed = parse_report_line(rest, fields_of)
            .unwrap_or_else(|| panic!("cannot parse report line {line:?}"));
        events.push(Reported {
            line: line.to_string(),
            ..parsed
        });
    }
    events
}

fn parse_report_line(rest: &str, fields_of: &HashMap<String, Vec<String>>) -> Option<Reported> {
    // The CPU column is the first " [digits]" (a comm could hold one only in theory).
    let (bracket, cpu_end) = rest.match_indices(" [").find_map(|(i, _)| {
        let after = &rest[i + 2..];
        let close = after.find(']')?;
        after[..close]
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then_some((i, i + 2 + close))
    })?;
    let cpu: u32 = rest[bracket + 2..cpu_end].parse().ok()?;
    let (_comm, pid) = rest[..bracket].trim_start().rsplit_once('-')?;
    let pid: i32 = pid.trim().parse().ok()?;
    let after_cpu = rest[cpu_end + 1..].trim_start();
    let (time, after_time) = after_cpu.split_once(": ")?;
    // `-t` prints seconds and nine digits of nanoseconds. Once in many runs trace-cmd 3.1
    // printed the same time as bare nanoseconds, right after the CPU column
    // (`[002]106439675570920:`, seen on the LISA arm64 file in CI), which libtraceevent
    // does when the time's precision is 0: both say the same time, both are read.
    let ts = match time.split_once('.') {
        Some((secs, nanos)) => {
            if nanos.len() != 9 {
                return None;
            }
            secs.parse::<u64>().ok()? * 1_000_000_000 + nanos.parse::<u64>().ok()?
        }
        None => time.parse::<u64>().ok()?,
    };
    let (name, body) = after_time.split_once(':')?;
    let body = body.trim();
    let names = fields_of.get(name)?;
    let mut fields = Vec::new();
    let mut value_start = None;
    let mut cursor = 0;
    for (index, field) in names.iter().enumerate() {
        let key = format!("{field}=");
        let at = if index == 0 {
            body.starts_with(&key).then_some(0)?
        } else {
            cursor + body[cursor..].find(&format!(" {key}"))? + 1
        };
        if let Some((previous, start)) = value_start.take() {
            fields.push((previous, body[start..at - 1].to_string()));
        }
        value_start = Some((field.clone(), at + key.len()));
        cursor = at + key.len();
    }
    if let Some((previous, start)) = value_start {
        fields.push((previous, body[start..].trim_end().to_string()));
    }
    Some(Reported {
        ts,
        cpu,
        pid,
        name: name.to_string(),
        fields,
        line: String::new(),
    })
}

/// `name -> addresses` of every kallsyms line, to resolve `sym+0xoff` values.
pub fn symbol_addresses(kallsyms: &[u8]) -> HashMap<String, Vec<u64>> {
    let mut map: HashMap<String, Vec<u64>> = HashMap::new();
    for line in String::from_utf8_lossy(kallsyms).lines() {
        let mut parts = line.split_whitespace();
        let (Some(address), Some(_kind), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if let Ok(address) = u64::from_str_radix(address, 16) {
            map.entry(name.to_string()).or_default().push(address);
        }
    }
    map
}

/// Why a reported value differs from the decoded one, or `None` when they agree.
fn mismatch(
    decoded: &Value,
    reported: &str,
    symbols: &HashMap<String, Vec<u64>>,
    sorted: &[(u64, &str)],
    bare_hex: bool,
) -> Option<String> {
    match decoded {
        // A string that ends in a newline (trace_marker text) ends the report's line there.
        Value::Str(s) => {
            (s.strip_suffix('\n').unwrap_or(s) != reported).then(|| format!("decoded {s:?}"))
        }
        Value::Int { value, size } => {
            let mask = if *size >= 8 {
                u64::MAX
            } else {
                (1u64 << (size * 8)) - 1
            };
            let candidates: Vec<u64> = if let Some(hex) = reported.strip_prefix("0x") {
                u64::from_str_radix(hex, 16).ok().into_iter().collect()
            } else if bare_hex {
                u64::from_str_radix(reported, 16).ok().into_iter().collect()
            } else if let Some((name, offset)) = reported.rsplit_once("+0x") {
                // A pointer printed as a symbol: any symbol of that name, plus the offset.
                match (u64::from_str_radix(offset, 16), symbols.get(name)) {
                    (Ok(offset), Some(addresses)) => {
                        addresses.iter().map(|a| a.wrapping_add(offset)).collect()
                    }
                    _ => Vec::new(),
                }
            } else if reported == "(nil)" {
                vec![0]
            } else if let Ok(signed) = reported.parse::<i64>() {
                vec![signed as u64]
            } else if symbols.contains_key(reported) {
                // A pointer printed as the symbol it lies in (`%ps`): the symbol at or
                // below the value must have that name.
                let at = sorted.partition_point(|&(address, _)| address <= *value);
                match at.checked_sub(1).map(|i| sorted[i]) {
                    Some((_, name)) if name == reported => vec![*value],
                    _ => Vec::new(),
                }
            } else {
                reported.parse::<u64>().ok().into_iter().collect()
            };
            (!candidates.iter().any(|c| c & mask == value & mask))
                .then(|| format!("decoded {value:#x}"))
        }
        Value::Rest(_) if reported == "0" => None,
        Value::Rest(bytes) => mismatch(
            &Value::Bytes {
                bytes: bytes.clone(),
                declared: bytes.len(),
            },
            reported,
            symbols,
            sorted,
            bare_hex,
        ),
        // `trace-cmd report -R` prints a __data_loc field whose type it does not read as an
        // array (`__data_loc cpumask_t`) as the raw __data_loc word, length << 16 | offset:
        // its length must be the decoded one.
        Value::Bytes { bytes, .. } if reported.parse::<u32>().is_ok() => {
            let word = reported.parse::<u32>().unwrap_or(0);
            ((word >> 16) as usize != bytes.len())
                .then(|| format!("decoded {} bytes, __data_loc word {word:#x}", bytes.len()))
        }
        Value::Bytes { bytes, declared } => {
            let listed = reported
                .strip_prefix("ARRAY[")
                .and_then(|r| r.strip_suffix(']'));
            let parsed: Option<Vec<u8>> = listed.map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|b| !b.is_empty())
                    .map(|b| u8::from_str_radix(b, 16).unwrap_or(0))
                    .collect()
            });
            // trace-cmd prints the declared length even past the record's end (bytes of
            // whatever follows in the page); only the bytes inside the record must agree.
            let agrees = parsed.as_deref().is_some_and(|p| {
                p.starts_with(bytes) && (p.len() == bytes.len() || p.len() == *declared)
            });
            (!agrees).then(|| format!("decoded bytes {bytes:02x?}"))
        }
    }
}

/// Every event `decoder` yields, as [`Decoded::of`] gives it, with the summary; fails on any
/// corrupt page.
#[allow(dead_code)] // not every test that includes this file calls it
pub fn decode_all(decoder: &Decoder, label: &str) -> (Vec<Decoded>, DecodeSummary) {
    let mut events = Vec::new();
    let summary = decoder
        .for_each(|event| events.push(Decoded::of(&event)))
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(summary.corrupt_pages(), 0, "{label}: {:?}", summary.errors);
    (events, summary)
}

/// Event name -> its non-common field names in format order, for every format in `dat`:
/// the names `trace-cmd report -R` prints before each value.
#[allow(dead_code)] // not every test that includes this file calls it
pub fn fields_of(dat: &DatFile) -> HashMap<String, Vec<String>> {
    dat.metadata
        .event_formats
        .iter()
        .chain(&dat.metadata.ftrace_formats)
        .map(|f| {
            let format = EventFormat::parse(&String::from_utf8_lossy(&f.text))
                .unwrap_or_else(|e| panic!("format of {}: {e}", f.name));
            let names = format
                .fields
                .iter()
                .filter(|x| !x.is_common())
                .map(|x| x.name.clone())
                .collect();
            (f.name.clone(), names)
        })
        .collect()
}

/// [`parse_report`] of `text`, trace-cmd's report of `dat`, for the lines of `buffer` (`""`:
/// the top-level one), with the other buffers of `dat` and its formats' field names.
#[allow(dead_code)] // not every test that includes this file calls it
pub fn parse_report_of(dat: &DatFile, text: &str, buffer: &str) -> Vec<Reported> {
    let others: Vec<&str> = dat
        .buffers
        .iter()
        .map(|b| b.name.as_str())
        .filter(|&name| name != buffer)
        .collect();
    parse_report(text, buffer, &others, &fields_of(dat))
}

/// What a cross-check compared.
#[derive(Debug, Default)]
pub struct Comparison {
    pub events: usize,
    pub by_name: BTreeMap<String, usize>,
    pub fields: usize,
    /// Array values the record ends inside (see [`Value::Bytes`]).
    pub clipped_arrays: usize,
    pub mismatches: Vec<String>,
}

impl Comparison {
    /// Prints what was compared and fails on any mismatch, listing the first 20.
    pub fn assert_agrees(&self, label: &str) {
        println!(
            "{label}: {} events ({:?}), {} field values compared with trace-cmd report \
             ({} arrays end with their record), {} mismatches",
            self.events,
            self.by_name,
            self.fields,
            self.clipped_arrays,
            self.mismatches.len()
        );
        assert!(
            self.mismatches.is_empty(),
            "{label}: vmscale and trace-cmd disagree:\n{}",
            self.mismatches[..self.mismatches.len().min(20)].join("\n")
        );
    }
}

#[allow(dead_code)] // not every test that includes this file calls it
pub fn compare(
    decoded: &[Decoded],
    reported: &[Reported],
    symbols: &HashMap<String, Vec<u64>>,
) -> Comparison {
    compare_with_formats(decoded, reported, symbols, &HashSet::new())
}

/// `(event, field)` pairs whose print format shows the field as `name=%x` (any width or
/// length modifier) without a `0x` before it. Older trace-cmd builds print such a field's
/// raw value in that form, as bare hex digits (`offset=0284d000`).
#[allow(dead_code)] // not every test that includes this file calls it
pub fn bare_hex_fields(
    formats: &[vmscale_trace::decode::format::EventFormat],
) -> HashSet<(String, String)> {
    let mut fields = HashSet::new();
    for format in formats {
        let Some(print) = format.print_fmt.as_deref() else {
            continue;
        };
        for field in &format.fields {
            let key = format!("{}=%", field.name);
            let Some(at) = print.find(&key) else {
                continue;
            };
            let conversion: String = print[at + key.len()..]
                .chars()
                .take_while(|c| {
                    c.is_ascii_digit() || matches!(c, 'l' | 'h' | 'z' | 'x' | 'X' | '#')
                })
                .collect();
            if conversion.ends_with(['x', 'X']) && !conversion.contains('#') {
                fields.insert((format.name.clone(), field.name.clone()));
            }
        }
    }
    fields
}

/// [`compare`], reading the fields of `bare_hex` as hex digits without `0x`.
pub fn compare_with_formats(
    decoded: &[Decoded],
    reported: &[Reported],
    symbols: &HashMap<String, Vec<u64>>,
    bare_hex: &HashSet<(String, String)>,
) -> Comparison {
    let mut sorted: Vec<(u64, &str)> = symbols
        .iter()
        .flat_map(|(name, addresses)| addresses.iter().map(move |&a| (a, name.as_str())))
        .collect();
    sorted.sort_unstable();
    let mut result = Comparison {
        events: decoded.len(),
        ..Comparison::default()
    };
    if decoded.len() != reported.len() {
        result.mismatches.push(format!(
            "{} events decoded, {} reported",
            decoded.len(),
            reported.len()
        ));
    }
    // Per CPU, in buffer order: the two merges may break timestamp ties differently.
    let cpus: BTreeSet<u32> = decoded
        .iter()
        .map(|e| e.cpu)
        .chain(reported.iter().map(|e| e.cpu))
        .collect();
    for cpu in cpus {
        let ours: Vec<&Decoded> = decoded.iter().filter(|e| e.cpu == cpu).collect();
        let theirs: Vec<&Reported> = reported.iter().filter(|e| e.cpu == cpu).collect();
        if ours.len() != theirs.len() {
            result.mismatches.push(format!(
                "cpu{cpu}: {} events decoded, {} reported",
                ours.len(),
                theirs.len()
            ));
        }
        for (d, r) in ours.iter().zip(&theirs) {
            *result.by_name.entry(d.name.clone()).or_default() += 1;
            let mut problems = Vec::new();
            if d.ts != r.ts {
                problems.push(format!("ts {} vs {}", d.ts, r.ts));
            }
            if d.pid != r.pid {
                problems.push(format!("pid {} vs {}", d.pid, r.pid));
            }
            if d.name != r.name {
                problems.push(format!("event {} vs {}", d.name, r.name));
            }
            if d.fields.len() != r.fields.len() {
                problems.push(format!("{} fields vs {}", d.fields.len(), r.fields.len()));
            }
            for ((name, value), (reported_name, text)) in d.fields.iter().zip(&r.fields) {
                result.fields += 1;
                if let Value::Bytes { bytes, declared } = value {
                    result.clipped_arrays += usize::from(bytes.len() < *declared);
                }
                if name != reported_name {
                    problems.push(format!("field {name} vs {reported_name}"));
                } else if let Some(why) = mismatch(
                    value,
                    text,
                    symbols,
                    &sorted,
                    bare_hex.contains(&(d.name.clone(), name.clone())),
                ) {
                    problems.push(format!("{name}={text}: {why}"));
                }
            }
            if !problems.is_empty() {
                result
                    .mismatches
                    .push(format!("{}: {}", r.line, problems.join("; ")));
            }
        }
    }
    result
}
