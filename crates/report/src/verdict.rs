//! The verdict block every rendering starts with: built once as data here, written per
//! format by the renderers.

use vmscale_run::verdict::Finding;
use vmscale_run::RunRecord;

/// Evidence lines shown per finding in the text and Markdown renderings; JSON and HTML
/// carry all of them.
const EVIDENCE_SHOWN: usize = 2;
/// Lines under each finding on the terminal's first screen.
pub(crate) const BRIEF_DETAILS: usize = 1;

/// "verdict for memslot: what the explained time went to, largest first".
pub(crate) fn title(record: &RunRecord) -> String {
    format!(
        "verdict for {}: what the explained time went to, largest first",
        record.scenario
    )
}

/// One finding as the renderings show it.
pub(crate) struct Entry<'a> {
    pub rank: usize,
    pub finding: &'a Finding,
    pub cause: &'static str,
    /// Lines under the sentence: the holder, then the first pieces of evidence.
    pub details: Vec<String>,
    /// Evidence lines left out of the short renderings.
    pub more: usize,
}

pub(crate) fn entries(record: &RunRecord) -> Vec<Entry<'_>> {
    record
        .verdict
        .iter()
        .enumerate()
        .map(|(i, finding)| {
            let mut details: Vec<String> = finding
                .holder
                .iter()
                .map(|h| format!("holder: {h}"))
                .collect();
            details.extend(finding.evidence.iter().take(EVIDENCE_SHOWN).cloned());
            Entry {
                rank: i + 1,
                finding,
                cause: finding.cause.label(),
                details,
                more: finding.evidence.len().saturating_sub(EVIDENCE_SHOWN),
            }
        })
        .collect()
}

/// The plain-text block, with at most `details` lines under each finding.
pub(crate) fn text(record: &RunRecord, details: usize) -> String {
    let entries = entries(record);
    if entries.is_empty() {
        return String::new();
    }
    let mut out = format!("{}\n", title(record));
    for e in entries {
        out.push_str(&format!(
            "  {}. [{}] {}\n",
            e.rank, e.cause, e.finding.summary
        ));
        for line in e.details.iter().take(details) {
            out.push_str(&format!("       {line}\n"));
        }
        let more = e.more + e.details.len().saturating_sub(details);
        if more > 0 && details > BRIEF_DETAILS {
            out.push_str(&format!(
                "       (+{more} more in report.html and --format json)\n"
            ));
        }
    }
    out
}

pub(crate) fn markdown(record: &RunRecord) -> String {
    let entries = entries(record);
    if entries.is_empty() {
        return String::new();
    }
    let mut out = "### Verdict\n\n".to_string();
    for e in entries {
        out.push_str(&format!(
            "{}. **{}**: {}\n",
            e.rank, e.cause, e.finding.summary
        ));
        for line in &e.details {
            out.push_str(&format!("   - {line}\n"));
        }
        if e.more > 0 {
            out.push_str(&format!(
                "   - (+{} more in report.html and `--format json`)\n",
                e.more
            ));
        }
    }
    out.push('\n');
    out
}

pub(crate) fn html(record: &RunRecord) -> String {
    use crate::html::escape;
    let entries = entries(record);
    if entries.is_empty() {
        return String::new();
    }
    let mut out = "<section class=\"verdict\"><h2>Verdict</h2>\n<ol>\n".to_string();
    for e in entries {
        out.push_str(&format!(
            "<li><strong>{}</strong>: {}",
            escape(e.cause),
            escape(&e.finding.summary)
        ));
        let lines: Vec<String> = e
            .finding
            .holder
            .iter()
            .map(|h| format!("holder: {h}"))
            .chain(e.finding.evidence.iter().cloned())
            .collect();
        if !lines.is_empty() {
            out.push_str("<ul>");
            for line in lines {
                out.push_str(&format!("<li>{}</li>", escape(&line)));
            }
            out.push_str("</ul>");
        }
        out.push_str("</li>\n");
    }
    out.push_str("</ol></section>\n");
    out
}
