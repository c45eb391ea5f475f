//! Addresses for the symbols a text names (`flush_tlb_func`, `on_each_cpu_cond_mask+0x20/0x60`,
//! `kvm_mmu_free_roots+0x12/0x30 [kvm]`): each distinct function gets a base address of its
//! own, the offset the text printed is added to it, and a kallsyms file lists the bases, so
//! the trace directory's own symbolization gives the text's names back.
//!
//! The bases are spaced 4 GiB apart in a range no x86-64 kernel uses for text, so any offset
//! a text can print stays inside its function; at most [`MAX_SYMBOLS`] are kept, further
//! names all share one stand-in symbol.

use std::collections::HashMap;
use std::fmt::Write;

/// Distinct functions kept.
pub const MAX_SYMBOLS: usize = 1 << 16;
const BASE: u64 = 0xfffe_0000_0000_0000;
const SPACING: u64 = 1 << 32;
/// Bytes kept of a symbol or module name.
const MAX_NAME: usize = 256;
/// What names the functions beyond [`MAX_SYMBOLS`].
const OVERFLOW_NAME: &str = "(symbols_beyond_the_import_limit)";
/// Distinct printk strings kept (IPI reasons: a kernel has a handful).
const MAX_STRINGS: usize = 1024;
/// Where the printk strings' addresses start: below the functions' range, one apart.
const STRING_BASE: u64 = 0xfffd_0000_0000_0000;
/// What names the strings beyond [`MAX_STRINGS`].
const OVERFLOW_STRING: &str = "(strings beyond the import limit)";

#[derive(Default)]
pub(crate) struct Symbols {
    by_name: HashMap<(String, Option<String>), u64>,
    /// In address order (bases are handed out ascending).
    entries: Vec<(u64, String, Option<String>)>,
    overflow: Option<u64>,
    /// Names that did not get a symbol of their own.
    pub dropped: u64,
    /// Printk strings (`const char *` fields' texts) and the addresses they were given.
    strings: HashMap<String, u64>,
}

impl Symbols {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The address of `offset` bytes into `name` (of `module`).
    pub(crate) fn address(&mut self, name: &str, module: Option<&str>, offset: u64) -> u64 {
        let key = (cut(name), module.map(cut));
        let base = match self.by_name.get(&key) {
            Some(&base) => base,
            None if self.entries.len() < MAX_SYMBOLS => {
                let base = BASE + self.entries.len() as u64 * SPACING;
                self.entries.push((base, key.0.clone(), key.1.clone()));
                self.by_name.insert(key, base);
                base
            }
            None => {
                self.dropped += 1;
                self.overflow_base()
            }
        };
        base + offset.min(SPACING - 1)
    }

    fn overflow_base(&mut self) -> u64 {
        if let Some(base) = self.overflow {
            return base;
        }
        let base = BASE + MAX_SYMBOLS as u64 * SPACING;
        self.entries.push((base, OVERFLOW_NAME.to_string(), None));
        self.overflow = Some(base);
        base
    }

    /// The address a printed symbol stands for: `0x...` and `0` are literal addresses,
    /// anything else is `name[+0xOFF[/0xSIZE]] [[module]] [<address>]`.
    pub(crate) fn resolve(&mut self, printed: &str) -> Option<u64> {
        let mut words = printed.split_whitespace();
        let symbol = words.next()?;
        if let Some(address) = literal(symbol) {
            return Some(address);
        }
        let module = words
            .find(|w| w.len() > 2 && w.starts_with('[') && w.ends_with(']'))
            .map(|w| &w[1..w.len() - 1]);
        let (name, offset) = match symbol.split_once('+') {
            Some((name, rest)) => {
                let offset = rest.split('/').next().unwrap_or("");
                let offset = offset.strip_prefix("0x").unwrap_or(offset);
                (name, u64::from_str_radix(offset, 16).ok()?)
            }
            None => (symbol, 0),
        };
        if name.is_empty() {
            return None;
        }
        Some(self.address(name, module, offset))
    }

    /// The address standing for the constant string `text` (what a `const char *` field
    /// printed), listed by [`Symbols::printk_formats`].
    pub(crate) fn string(&mut self, text: &str) -> u64 {
        let text = cut(text);
        if let Some(&address) = self.strings.get(&text) {
            return address;
        }
        let text = if self.strings.len() < MAX_STRINGS {
            text
        } else {
            OVERFLOW_STRING.to_string()
        };
        let next = STRING_BASE + self.strings.len() as u64;
        *self.strings.entry(text).or_insert(next)
    }

    /// tracefs' `printk_formats` lines for every string handed out.
    pub(crate) fn printk_formats(&self) -> String {
        let mut strings = crate::PrintkStrings::default();
        for (text, &address) in &self.strings {
            strings.insert(address, text);
        }
        strings.to_text()
    }

    /// `/proc/kallsyms` lines for every symbol handed out.
    pub(crate) fn kallsyms(&self) -> String {
        let mut text = String::new();
        for (address, name, module) in &self.entries {
            let _ = write!(text, "{address:016x} T {name}");
            if let Some(module) = module {
                let _ = write!(text, "\t[{module}]");
            }
            text.push('\n');
        }
        text
    }
}

/// A name cut to [`MAX_NAME`] bytes: kernel symbols are far shorter, and the table's size
/// must not follow the text's line length.
fn cut(name: &str) -> String {
    let mut end = name.len().min(MAX_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// `0`, `0x0`, `0xffffffff81234567`: an address printed as a number (no symbol covered it).
fn literal(text: &str) -> Option<u64> {
    if text == "0" {
        return Some(0);
    }
    let hex = text.strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kallsyms;

    #[test]
    fn names_come_back_from_the_kallsyms_written() {
        let mut symbols = Symbols::default();
        let a = symbols.resolve("on_each_cpu_cond_mask+0x20/0x60").unwrap();
        let b = symbols.resolve("flush_tlb_func").unwrap();
        let c = symbols
            .resolve("kvm_mmu_free_roots+0x12/0x30 [kvm] <ffffffffc0a01234>")
            .unwrap();
        assert_eq!(
            symbols.resolve("on_each_cpu_cond_mask+0x8/0x60"),
            Some(a - 0x18)
        );
        assert_eq!(symbols.resolve("0x0"), Some(0));
        assert_eq!(
            symbols.resolve("0xffffffff81000010"),
            Some(0xffff_ffff_8100_0010)
        );
        assert_eq!(symbols.resolve("bad+0xzz"), None);
        assert_eq!(symbols.len(), 3);
        let table = Kallsyms::parse(&symbols.kallsyms()).unwrap();
        let name = |address| table.symbolize(address).unwrap().to_string();
        assert_eq!(name(a), "on_each_cpu_cond_mask+0x20");
        assert_eq!(name(b), "flush_tlb_func+0x0");
        assert_eq!(name(c), "kvm_mmu_free_roots+0x12 [kvm]");
    }

    #[test]
    fn strings_come_back_from_the_printk_formats_written() {
        let mut symbols = Symbols::default();
        let a = symbols.string("Rescheduling interrupts");
        let b = symbols.string("Function call interrupts");
        assert_eq!(symbols.string("Rescheduling interrupts"), a);
        assert_ne!(a, b);
        let strings = crate::PrintkStrings::parse(&symbols.printk_formats());
        assert_eq!(strings.get(a), Some("Rescheduling interrupts"));
        assert_eq!(strings.get(b), Some("Function call interrupts"));
        for index in 0..MAX_STRINGS + 5 {
            symbols.string(&format!("s{index}"));
        }
        let strings = crate::PrintkStrings::parse(&symbols.printk_formats());
        assert_eq!(strings.len(), MAX_STRINGS + 1);
        assert_eq!(
            strings.get(symbols.string("one more")),
            Some(OVERFLOW_STRING)
        );
    }

    #[test]
    fn names_beyond_the_limit_share_one_symbol() {
        let mut symbols = Symbols::default();
        for index in 0..MAX_SYMBOLS + 3 {
            symbols.address(&format!("f{index}"), None, 0);
        }
        assert_eq!(symbols.dropped, 3);
        assert_eq!(symbols.len(), MAX_SYMBOLS + 1);
        let last = symbols.address("another", None, 5);
        let table = Kallsyms::parse(&symbols.kallsyms()).unwrap();
        assert_eq!(table.symbolize(last).unwrap().name, OVERFLOW_NAME);
        assert_eq!(symbols.address("f0", None, u64::MAX), BASE + SPACING - 1);
        let long = "x".repeat(10_000);
        assert_eq!(
            symbols.address(&long, None, 0),
            symbols.address(&long[..MAX_NAME], None, 0)
        );
    }
}
