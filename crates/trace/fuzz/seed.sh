#!/usr/bin/env bash
# Seeds corpus/ from the real fixtures: every recorded page for page_decoder, every format
# and header file (and formats followed by a NUL and a recorded record) for format_parser,
# and small .dat files cut from a real recording for dat_reader.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$here/../tests/fixtures
mkdir -p "$here/corpus/page_decoder" "$here/corpus/format_parser"
for raw in "$fixtures"/*/cpu*.raw; do
    name=$(basename "$(dirname "$raw")")-$(basename "$raw" .raw)
    split -b 4096 -d -a 3 "$raw" "$here/corpus/page_decoder/$name-"
done
n=0
for file in "$fixtures"/*/formats/*/* "$fixtures"/*/header_page "$fixtures"/*/header_event; do
    n=$((n + 1))
    cp "$file" "$here/corpus/format_parser/text-$n"
    # The same text with a record of plausible bytes to view.
    { cat "$file"; printf '\0'; head -c 96 "$fixtures/contention/cpu0.raw" | tail -c 72; } \
        >"$here/corpus/format_parser/record-$n"
done
# dat_reader: small .dat files of every layout (version 6 with data at the top level and
# in an instance, version 7 uncompressed, zlib and zstd), which the test suite cuts from a
# trace-cmd recording it makes on this machine (root and trace-cmd needed).
mkdir -p "$here/corpus/dat_reader"
VMSCALE_DAT_SEEDS="$here/corpus/dat_reader" cargo test --quiet --release \
    --manifest-path "$here/../Cargo.toml" --test dat_crosscheck \
    small_files_decode_in_place_and_seed_the_fuzzer >/dev/null
# text_import: every ftrace text of the fixtures (recorded event renderings, hand-written
# function_graph), cut at line ends into pieces of at most 1000 bytes (small inputs keep
# the executions fast).
mkdir -p "$here/corpus/text_import"
for text in "$fixtures"/*/expected.txt "$fixtures"/text/*/*.txt; do
    name=$(basename "$(dirname "$text")")-$(basename "$text" .txt)
    split -C 1000 -d -a 3 "$text" "$here/corpus/text_import/$name-"
done
echo "text_import: $(ls "$here/corpus/text_import" | wc -l) seeds"
echo "page_decoder: $(ls "$here/corpus/page_decoder" | wc -l) seeds, format_parser: $(ls "$here/corpus/format_parser" | wc -l) seeds, dat_reader: $(ls "$here/corpus/dat_reader" | wc -l) seeds"
