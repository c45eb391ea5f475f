//! A `/proc/kallsyms` snapshot: kernel addresses to `name+0xoff [module]`.
//!
//! Text symbols (types t, T, w, W) name stack frames and callbacks; data symbols (d, D, b,
//! B, r, R) name static locks. All names live in one string, so memory is proportional to
//! the number of symbols.

use std::fmt;
use std::path::Path;
use vmscale_sys::bounded;

/// A kallsyms file that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum KallsymsError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("kallsyms line {line}: {what}")]
    Line { line: usize, what: &'static str },
}

const TOO_LARGE: &str = "symbol table too large";

/// Lines [`Kallsyms::parse_damaged`] skipped.
#[derive(Debug, Default)]
pub struct DamagedLines {
    pub count: u64,
    /// The first of them, with why.
    pub first: Option<KallsymsError>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    address: u64,
    /// `names[name_start..name_end]`; a module name follows when `module_len` > 0.
    name_start: u32,
    name_len: u32,
    module_len: u32,
    kind: u8,
}

/// A kernel symbol table.
#[derive(Debug, Clone, Default)]
pub struct Kallsyms {
    names: String,
    /// Sorted by address.
    text: Vec<Entry>,
    /// Sorted by address.
    data: Vec<Entry>,
}

/// An address resolved to the symbol containing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol<'a> {
    pub name: &'a str,
    pub offset: u64,
    pub module: Option<&'a str>,
    /// The kallsyms type letter.
    pub kind: char,
}

impl fmt::Display for Symbol<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{:#x}", self.name, self.offset)?;
        if let Some(module) = self.module {
            write!(f, " [{module}]")?;
        }
        Ok(())
    }
}

impl Kallsyms {
    pub fn load(path: &Path) -> Result<Kallsyms, KallsymsError> {
        let text =
            bounded::read_regular_string(path, bounded::MAX_KALLSYMS_BYTES).map_err(|source| {
                KallsymsError::Io {
                    path: path.display().to_string(),
                    source,
                }
            })?;
        Kallsyms::parse(&text)
    }

    /// Parses `address type name [module]` lines. Symbols at address 0 (addresses hidden
    /// by kptr_restrict) and of other types are skipped.
    pub fn parse(text: &str) -> Result<Kallsyms, KallsymsError> {
        // Without skipping, a damaged line is the error.
        Kallsyms::parse_lines(text, false).map(|(table, _)| table)
    }

    /// [`Kallsyms::parse`] that skips lines it cannot read (a file cut short ends in one)
    /// and says how many it skipped; the other symbols are kept.
    pub fn parse_damaged(text: &str) -> (Kallsyms, DamagedLines) {
        match Kallsyms::parse_lines(text, true) {
            Ok(parsed) => parsed,
            // Only a table too large for its 32-bit offsets fails here: no symbols then.
            Err(first) => (
                Kallsyms::default(),
                DamagedLines {
                    count: text.lines().count() as u64,
                    first: Some(first),
                },
            ),
        }
    }

    fn parse_lines(text: &str, skip: bool) -> Result<(Kallsyms, DamagedLines), KallsymsError> {
        let mut table = Kallsyms::default();
        let mut damaged = DamagedLines::default();
        for (index, line) in text.lines().enumerate() {
            match table.add_line(index + 1, line) {
                Ok(()) => {}
                Err(error @ KallsymsError::Line { what, .. }) if skip && what != TOO_LARGE => {
                    damaged.count += 1;
                    damaged.first.get_or_insert(error);
                }
                Err(error) => return Err(error),
            }
        }
        // Stable: aliases keep file order, and the first alias names an address, as the
        // kernel's own lookup (get_symbol_pos) does.
        table.text.sort_by_key(|e| e.address);
        table.data.sort_by_key(|e| e.address);
        Ok((table, damaged))
    }

    fn add_line(&mut self, number: usize, line: &str) -> Result<(), KallsymsError> {
        let error = |what| KallsymsError::Line { line: number, what };
        let mut parts = line.split_whitespace();
        let Some(address) = parts.next() else {
            return Ok(());
        };
        let address = u64::from_str_radix(address, 16).map_err(|_| error("address is not hex"))?;
        let kind = parts.next().ok_or(error("no symbol type"))?;
        let name = parts.next().ok_or(error("no symbol name"))?;
        let module = match parts.next() {
            Some(m) => Some(
                m.strip_prefix('[')
                    .and_then(|m| m.strip_suffix(']'))
                    .ok_or(error("module is not in brackets"))?,
            ),
            None => None,
        };
        let &[kind] = kind.as_bytes() else {
            return Err(error("symbol type is not one letter"));
        };
        let list = match kind {
            b't' | b'T' | b'w' | b'W' => &mut self.text,
            b'd' | b'D' | b'b' | b'B' | b'r' | b'R' => &mut self.data,
            _ => return Ok(()),
        };
        if address == 0 {
            return Ok(());
        }
        let name_start = self.names.len();
        self.names.push_str(name);
        let module_len = module.map_or(0, |m| {
            self.names.push_str(m);
            m.len()
        });
        let too_big = || error(TOO_LARGE);
        list.push(Entry {
            address,
            name_start: u32::try_from(name_start).map_err(|_| too_big())?,
            name_len: u32::try_from(name.len()).map_err(|_| too_big())?,
            module_len: u32::try_from(module_len).map_err(|_| too_big())?,
            kind,
        });
        Ok(())
    }

    /// Number of text and data symbols kept.
    pub fn len(&self) -> usize {
        self.text.len() + self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text symbol containing `address` (the nearest one at or below it).
    pub fn symbolize(&self, address: u64) -> Option<Symbol<'_>> {
        self.lookup(&self.text, address)
    }

    /// The data symbol at or below `address` (a static lock's variable).
    pub fn data_symbol(&self, address: u64) -> Option<Symbol<'_>> {
        self.lookup(&self.data, address)
    }

    /// The lowest text address: where the kernel image's code starts.
    pub fn lowest_text(&self) -> Option<u64> {
        self.text.first().map(|e| e.address)
    }

    /// The address of the first symbol called `name`.
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.text
            .iter()
            .chain(&self.data)
            .find(|e| self.name(e) == name)
            .map(|e| e.address)
    }

    /// Where the first text symbol called `name` starts, and where the next one does: the
    /// addresses a call site inside that function lies in.
    pub fn text_extent(&self, name: &str) -> Option<(u64, u64)> {
        let start = self.text.iter().find(|e| self.name(e) == name)?.address;
        // Text symbols are in address order.
        let next = self.text.partition_point(|e| e.address <= start);
        Some((start, self.text.get(next).map_or(u64::MAX, |e| e.address)))
    }

    fn lookup<'a>(&'a self, entries: &[Entry], address: u64) -> Option<Symbol<'a>> {
        let after = entries.partition_point(|e| e.address <= address);
        let mut index = after.checked_sub(1)?;
        let found = entries[index].address;
        while index > 0 && entries[index - 1].address == found {
            index -= 1;
        }
        let entry = &entries[index];
        Some(Symbol {
            name: self.name(entry),
            offset: address - entry.address,
            module: (entry.module_len > 0).then(|| {
                let start = (entry.name_start + entry.name_len) as usize;
                &self.names[start..start + entry.module_len as usize]
            }),
            kind: entry.kind as char,
        })
    }

    fn name(&self, entry: &Entry) -> &str {
        let start = entry.name_start as usize;
        &self.names[start..start + entry.name_len as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _text
ffffffff81000100 t helper
ffffffff81000100 T helper_alias
ffffffff81000200 T schedule
ffffffff82000000 D jiffies
ffffffff82000040 b static_lock
0000000000000000 A fixed_percpu_data
ffffffffc0001000 t kvm_fn\t[kvm]
";

    #[test]
    fn addresses_resolve_to_the_containing_symbol() {
        let table = Kallsyms::parse(TEXT).unwrap();
        assert_eq!(table.len(), 7);
        let symbol = table.symbolize(0xffff_ffff_8100_0234).unwrap();
        assert_eq!(symbol.to_string(), "schedule+0x34");
        // The first alias names a shared address.
        assert_eq!(
            table.symbolize(0xffff_ffff_8100_0100).unwrap().name,
            "helper"
        );
        let module = table.symbolize(0xffff_ffff_c000_1010).unwrap();
        assert_eq!(module.to_string(), "kvm_fn+0x10 [kvm]");
        assert_eq!(module.kind, 't');
        assert!(table.symbolize(0x1000).is_none());
        assert_eq!(
            table
                .data_symbol(0xffff_ffff_8200_0048)
                .unwrap()
                .to_string(),
            "static_lock+0x8"
        );
        assert_eq!(table.address_of("jiffies"), Some(0xffff_ffff_8200_0000));
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in ["zz T a", "ffff", "ffff T", "ffff TT a", "ffff T a kvm"] {
            let error = Kallsyms::parse(bad).unwrap_err().to_string();
            assert!(error.starts_with("kallsyms line 1:"), "{bad}: {error}");
        }
        assert!(Kallsyms::parse("\n\n").unwrap().is_empty());
    }
}
