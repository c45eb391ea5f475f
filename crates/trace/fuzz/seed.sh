#!/usr/bin/env bash
# Seeds corpus/ from the real fixtures: every recorded page for page_decoder, every format
# and header file (and formats followed by a NUL and a recorded record) for format_parser.
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
echo "page_decoder: $(ls "$here/corpus/page_decoder" | wc -l) seeds, format_parser: $(ls "$here/corpus/format_parser" | wc -l) seeds"
