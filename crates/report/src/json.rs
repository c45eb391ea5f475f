//! JSON: the whole record, raw samples included, in the `run.json` schema, so that a
//! rendering can be read back like the run itself.

use vmscale_run::RunRecord;

pub(crate) fn render(record: &RunRecord) -> String {
    let mut text = serde_json::to_string_pretty(record)
        .expect("a RunRecord always serialises: every map in it is keyed by strings");
    text.push('\n');
    text
}
