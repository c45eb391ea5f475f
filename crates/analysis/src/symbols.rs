//! Names for kernel addresses, from the kallsyms snapshot taken at record time.

use vmscale_trace::Kallsyms;

/// Names a stack frame or a lock's address.
pub trait Symbols {
    /// `name+0xoff [module]`, or the bare address when no symbol covers it.
    fn frame(&self, address: u64) -> String;
    /// The static variable a lock lives in, when the kernel exports data symbols.
    fn data_symbol(&self, address: u64) -> Option<String>;
}

/// kallsyms has no symbol sizes: a lock up to this far past a data symbol is taken to be
/// inside it (a lock embedded in a static struct); further away it is someone else's memory.
const MAX_OFFSET_INTO_DATA_SYMBOL: u64 = 4096;

impl Symbols for Kallsyms {
    fn frame(&self, address: u64) -> String {
        match self.symbolize(address) {
            Some(symbol) => symbol.to_string(),
            None => format!("{address:#x}"),
        }
    }

    fn data_symbol(&self, address: u64) -> Option<String> {
        let symbol = Kallsyms::data_symbol(self, address)?;
        if symbol.offset > MAX_OFFSET_INTO_DATA_SYMBOL {
            return None;
        }
        let mut name = symbol.name.to_string();
        if symbol.offset > 0 {
            name.push_str(&format!("+{:#x}", symbol.offset));
        }
        if let Some(module) = symbol.module {
            name.push_str(&format!(" [{module}]"));
        }
        Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_locks_get_their_symbol_and_heap_locks_none() {
        let table = Kallsyms::parse(
            "ffffffff81000000 T vfio_pci_core_disable\t[vfio_pci_core]\n\
             ffffffff82000000 b driver_lock\t[vfio_pci]\n\
             ffffffff82004000 d other_table\n",
        )
        .unwrap();
        assert_eq!(
            Symbols::data_symbol(&table, 0xffff_ffff_8200_0000).as_deref(),
            Some("driver_lock [vfio_pci]")
        );
        assert_eq!(
            Symbols::data_symbol(&table, 0xffff_ffff_8200_0010).as_deref(),
            Some("driver_lock+0x10 [vfio_pci]")
        );
        // A heap address far from any data symbol is not named after one.
        assert_eq!(Symbols::data_symbol(&table, 0xffff_ffff_8200_3000), None);
        assert_eq!(Symbols::data_symbol(&table, 0xffff_8881_0000_0000), None);
        assert_eq!(table.frame(0x1234), "0x1234");
    }
}
