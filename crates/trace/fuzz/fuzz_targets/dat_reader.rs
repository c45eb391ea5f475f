//! Arbitrary bytes as a trace-cmd .dat file: reading the container gives a `DatFile` or a
//! `DatError`, and decoding its data buffer in place (`Decoder::from_dat`: pages streamed
//! out of the input, compressed chunks decompressed as the stream advances) gives events
//! and page errors until it ends — never a panic, a hang or an allocation the input did not
//! pay for (libFuzzer's -rss_limit_mb and -malloc_limit_mb catch those).
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use vmscale_trace::dat::DatFile;
use vmscale_trace::Decoder;

/// Events and page errors looked at per input.
const MAX_ITEMS: u64 = 100_000;

/// Pages a buffer may claim before only its container is checked: a few bytes of zstd can
/// claim and really expand to gigabytes of empty pages, which decode correctly but slowly.
const MAX_CLAIMED_BYTES: u64 = 16 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(dat) = DatFile::from_bytes(data.to_vec()) else {
        return;
    };
    let dat = Arc::new(dat);
    let Ok(buffer) = dat.decodable_buffer(None) else {
        return;
    };
    let claimed: u64 = buffer
        .cpus
        .iter()
        .map(|c| c.size)
        .fold(0, u64::saturating_add);
    let meta = dat.trace_meta(buffer, false);
    assert_eq!(meta.cpus, dat.trace_cpus(buffer));
    if claimed > MAX_CLAIMED_BYTES {
        return;
    }
    let _ = dat.has_kernel_stacks(buffer);
    let _ = dat.trace_formats();
    let Ok(decoder) = Decoder::from_dat(Arc::clone(&dat), None) else {
        return;
    };
    let _ = decoder.kallsyms();
    let Ok(mut events) = decoder.events() else {
        return;
    };
    let mut items = 0u64;
    while let Some(next) = events.next_event() {
        match next {
            Ok(event) => {
                assert!(event.record().len() >= decoder.catalog().common().len);
                let _ = (event.kind(), event.name(), event.ts());
            }
            Err(error) => {
                let _ = error.to_string();
            }
        }
        items += 1;
        if items >= MAX_ITEMS {
            break;
        }
    }
    let _ = events.summaries();
});
