//! Names for kernel addresses, from the kallsyms snapshot taken at record time.

use vmscale_trace::Kallsyms;

/// Names a stack frame or a lock's address.
pub trait Symbols {
    /// `name+0xoff [module]`, or the bare address when no symbol covers it.
    fn frame(&self, address: u64) -> String;
    /// The static variable a lock lives in, when the kernel exports data symbols.
    fn data_symbol(&self, address: u64) -> Option<String>;
    /// Whether `address` is in the kernel image or a module (a static variable) rather
    /// than allocated memory; `None` where the symbols cannot tell.
    fn is_static(&self, _address: u64) -> Option<bool> {
        None
    }
}

/// x86-64's fixed layout: the kernel image is mapped at the start of the top 2 GiB and
/// modules right above it, while allocated memory (the direct map, vmalloc, per-CPU areas)
/// lies below. A kernel whose code starts there uses that layout.
const X86_64_KERNEL_IMAGE: u64 = 0xffff_ffff_8000_0000;

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

    fn is_static(&self, address: u64) -> Option<bool> {
        let text = self.lowest_text()?;
        (text >= X86_64_KERNEL_IMAGE).then_some(address >= X86_64_KERNEL_IMAGE)
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

    #[test]
    fn static_and_allocated_memory_are_told_apart_where_the_layout_is_known() {
        let x86 =
            Kallsyms::parse("ffffffff81000000 T _text\nffffffff81000100 T do_thing\n").unwrap();
        assert_eq!(x86.is_static(0xffff_ffff_8340_0000), Some(true));
        assert_eq!(
            x86.is_static(0xffff_ffff_a012_0000),
            Some(true),
            "a module's data"
        );
        assert_eq!(
            x86.is_static(0xffff_8881_0000_0000),
            Some(false),
            "the direct map"
        );
        assert_eq!(x86.is_static(0xffff_c900_0000_0000), Some(false), "vmalloc");
        // arm64 maps its image inside the vmalloc area: no claim.
        let arm = Kallsyms::parse("ffff800080000000 T _text\n").unwrap();
        assert_eq!(arm.is_static(0xffff_8000_8100_0000), None);
    }
}
