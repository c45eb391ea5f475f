#!/usr/bin/env bash
# Seeds corpus/text_forms (and adds to corpus/text_import) from every text fixture: the
# kernel's renderings, trace-cmd report in its default, -R and -l forms, the mail-quoted
# excerpt, the public texts and the hand-written function_graph output, cut at line ends
# into pieces of at most 1000 bytes (small inputs keep the executions fast).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$here/../tests/fixtures
for target in text_forms text_import; do
    mkdir -p "$here/corpus/$target"
    for text in "$fixtures"/*/expected.txt "$fixtures"/text/*/*.txt; do
        name=$(basename "$(dirname "$text")")-$(basename "$text" .txt)
        split -C 1000 -d -a 3 "$text" "$here/corpus/$target/$name-"
    done
    echo "$target: $(ls "$here/corpus/$target" | wc -l) seeds"
done
