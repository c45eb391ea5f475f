//! Arbitrary bytes as tracefs' `printk_formats` (`0xADDRESS : "TEXT"` lines, as the kernel
//! lists them and a .dat keeps them): parsing never panics, every entry kept is one of the
//! input's lines, and a listing written back parses to the same entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscale_trace::PrintkStrings;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let strings = PrintkStrings::parse(&text);
    assert!(strings.len() <= text.lines().count());
    for (address, string) in strings.iter() {
        assert_eq!(strings.get(address), Some(string));
        assert!(!string.contains('\n'));
        assert_eq!(strings.name(address), string);
    }
    let again = PrintkStrings::parse(&strings.to_text());
    assert_eq!(again, strings);
});
