//! The kernel's printk strings: constant strings that events store as pointers (`const char *`
//! fields such as ipi_raise's `reason`, and trace_printk formats), with the text each pointer
//! names. The kernel lists them in tracefs' `printk_formats`, one `0xADDRESS : "TEXT"` a line;
//! trace-cmd keeps that file in its .dat, and the recorder keeps it in the trace directory.

use std::collections::HashMap;

/// Address -> text, from a `printk_formats` listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrintkStrings {
    strings: HashMap<u64, String>,
}

impl PrintkStrings {
    /// Reads a `printk_formats` listing. A line that is not `0xADDRESS : "TEXT"` names
    /// nothing and is skipped: a missing string leaves a pointer unnamed, never wrong.
    pub fn parse(text: &str) -> PrintkStrings {
        let strings = text
            .lines()
            .filter_map(|line| {
                let (address, quoted) = line.split_once(" : ")?;
                let address = address.trim().strip_prefix("0x")?;
                let address = u64::from_str_radix(address, 16).ok()?;
                let text = quoted.trim().strip_prefix('"')?.strip_suffix('"')?;
                Some((address, text.to_string()))
            })
            .collect();
        PrintkStrings { strings }
    }

    /// The text at `address`, if the listing has it.
    pub fn get(&self, address: u64) -> Option<&str> {
        self.strings.get(&address).map(String::as_str)
    }

    /// The text at `address`, or the address itself when the listing lacks it.
    pub fn name(&self, address: u64) -> String {
        self.get(address)
            .map_or_else(|| format!("{address:#x}"), str::to_string)
    }

    /// Every (address, text), in no order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &str)> {
        self.strings
            .iter()
            .map(|(&address, text)| (address, text.as_str()))
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    /// The listing's text, for writing it back (ascending addresses).
    pub fn to_text(&self) -> String {
        let mut entries: Vec<(&u64, &String)> = self.strings.iter().collect();
        entries.sort();
        entries
            .into_iter()
            .map(|(address, text)| format!("{address:#x} : \"{text}\"\n"))
            .collect()
    }

    /// Adds `text` at `address` (a synthetic trace directory's own strings).
    pub fn insert(&mut self, address: u64, text: &str) {
        self.strings.insert(address, text.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernel_listing_and_skips_what_is_not_an_entry() {
        let strings = PrintkStrings::parse(
            "0xffff800081a2b3c8 : \"Rescheduling interrupts\"\n\
             0xffffffff8281972f : \"thaw_processes\"\n\
             garbage\n\
             0xzz : \"x\"\n\
             0xffffffff82800000 : unquoted\n\
             0xffffffff82800010 : \"line\\n\"\n",
        );
        assert_eq!(strings.len(), 3);
        assert_eq!(
            strings.get(0xffff_8000_81a2_b3c8),
            Some("Rescheduling interrupts")
        );
        assert_eq!(strings.get(0xffff_ffff_8280_0010), Some("line\\n"));
        assert_eq!(strings.name(0x10), "0x10");
        assert_eq!(PrintkStrings::parse(&strings.to_text()), strings);
    }
}
