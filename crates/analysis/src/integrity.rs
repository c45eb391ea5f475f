//! What a damaged or incomplete trace directory costs the analysis, as one sentence per
//! problem for the run's warnings: the file, what is wrong with it, and what is therefore
//! unknown, with counts. A CPU's missing pages, a missing format or a missing symbol table
//! otherwise only make findings smaller, and an absence would read as "none found".

use std::collections::BTreeSet;
use std::path::Path;

use vmscale_stats::units::{self, grouped};
use vmscale_trace::{DecodeSummary, Decoder, DirDamage, Kallsyms, MetaDamage};

/// Why the symbols are fewer than the trace's kernel had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KallsymsProblem {
    Missing,
    Unreadable(String),
    Damaged { lines: u64, first: String },
    Empty,
}

/// The trace directory's kallsyms, as much of it as reads, and what was wrong with it.
pub(crate) fn load_kallsyms(dir: &Path) -> (Kallsyms, Option<KallsymsProblem>) {
    use vmscale_run::bounded;
    let text =
        match bounded::read_regular_string(&dir.join("kallsyms"), bounded::MAX_KALLSYMS_BYTES) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (Kallsyms::default(), Some(KallsymsProblem::Missing))
            }
            Err(e) => {
                return (
                    Kallsyms::default(),
                    Some(KallsymsProblem::Unreadable(e.to_string())),
                )
            }
        };
    let (symbols, damaged) = Kallsyms::parse_damaged(&text);
    let problem = if damaged.count > 0 {
        Some(KallsymsProblem::Damaged {
            lines: damaged.count,
            first: damaged.first.map(|e| e.to_string()).unwrap_or_default(),
        })
    } else if symbols.is_empty() {
        Some(KallsymsProblem::Empty)
    } else {
        None
    };
    (symbols, problem)
}

/// The warnings for a trace directory shown as `label` (e.g. `trace/`, which prefixes
/// every file named).
pub(crate) fn dir_warnings(
    label: &str,
    decoder: &Decoder,
    damage: &DirDamage,
    kallsyms: Option<&KallsymsProblem>,
    summary: &DecodeSummary,
) -> Vec<String> {
    let mut warnings = file_warnings_of(label, decoder, damage);
    warnings.extend(format_warning(label, damage, summary));
    if let Some(problem) = kallsyms {
        warnings.extend(kallsyms_warning(label, problem, summary));
    }
    warnings
}

/// What is wrong with a trace directory's files (meta.json, each CPU's file), in the
/// words of a run's warnings, for a reader that copies the files without analysing them
/// (an export): a CPU file that grew to gigabytes of holes is then said before it is
/// copied, as `report` says it.
pub fn file_warnings(dir: &Path) -> Result<Vec<String>, vmscale_trace::DecodeError> {
    let (decoder, damage) = Decoder::open_damaged(dir)?;
    Ok(file_warnings_of(&dir_label(dir), &decoder, &damage))
}

/// How a trace directory's files are named in warnings: `trace/` for a run's.
pub(crate) fn dir_label(dir: &Path) -> String {
    dir.file_name()
        .map_or_else(String::new, |name| format!("{}/", name.to_string_lossy()))
}

fn file_warnings_of(label: &str, decoder: &Decoder, damage: &DirDamage) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(meta) = &damage.meta {
        warnings.push(meta_warning(label, meta, decoder));
    }
    let page_size = decoder.page_layout().page_size as u64;
    for file in &damage.cpu_files {
        warnings.extend(cpu_file_warning(label, file, page_size));
    }
    warnings
}

/// The warning for events without a format in a trace that is not a directory (a .dat
/// file decoded in place), where no file can be named.
pub(crate) fn unknown_types_warning(summary: &DecodeSummary) -> Option<String> {
    let events = summary.unknown_events();
    (events > 0).then(|| {
        format!(
            "{} of {} without a format in the trace ({}) could not be decoded: what they \
             recorded is unknown",
            counted(events, "event"),
            counted(summary.unknown_types.len() as u64, "type"),
            type_ids(summary)
        )
    })
}

fn meta_warning(label: &str, meta: &MetaDamage, decoder: &Decoder) -> String {
    let what = match meta {
        MetaDamage::Missing => "is missing".to_string(),
        MetaDamage::Unreadable(why) => format!("could not be read ({why})"),
        MetaDamage::Invalid(why) => format!("is not valid ({why})"),
    };
    let cpus = if decoder.cpus().is_empty() {
        "none".to_string()
    } else {
        decoder
            .cpus()
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{label}meta.json {what}: the page size ({} bytes, from header_page) and the CPUs \
         ({cpus}, from the cpu*.raw files present) were inferred; which events were enabled \
         and how many pages the recorder wrote are unknown, so a missing format or a file \
         cut at a page boundary cannot be detected",
        grouped(decoder.page_layout().page_size as u64)
    )
}

fn cpu_file_warning(label: &str, file: &vmscale_trace::CpuFile, page_size: u64) -> Option<String> {
    let cpu = file.cpu;
    let name = format!("{label}cpu{cpu}.raw");
    let Some(bytes) = file.bytes else {
        let recorded = file.recorded_pages.map_or(String::new(), |pages| {
            format!(
                " (the recorder wrote {}, {})",
                counted(pages, "page"),
                units::kib(pages * page_size)
            )
        });
        return Some(format!(
            "{name} is missing: CPU {cpu}'s events are not in the analysis{recorded}"
        ));
    };
    let (whole, partial) = (bytes / page_size, bytes % page_size);
    let recorded = file.recorded_pages;
    if partial > 0 {
        let more = match recorded {
            Some(pages) if pages > whole + 1 => format!(
                "; {} more of the {pages} pages the recorder wrote {} missing too",
                grouped(pages - whole - 1),
                if pages - whole - 1 == 1 { "is" } else { "are" }
            ),
            _ => String::new(),
        };
        return Some(format!(
            "{name} ends {} into a page: the file was truncated; the partial page was \
             skipped{more}",
            counted(partial, "byte")
        ));
    }
    let pages = recorded?;
    if whole < pages {
        let lost = pages - whole;
        Some(format!(
            "{name} holds {} of the {} pages the recorder wrote: the file was truncated at a \
             page boundary; CPU {cpu}'s last {} ({}) of events are missing",
            grouped(whole),
            grouped(pages),
            counted(lost, "page"),
            units::kib(lost * page_size)
        ))
    } else if whole > pages {
        Some(format!(
            "{name} holds {} but the recorder wrote {}: the file changed after recording; \
             all of it was decoded",
            counted(whole, "page"),
            grouped(pages)
        ))
    } else {
        None
    }
}

fn format_warning(label: &str, damage: &DirDamage, summary: &DecodeSummary) -> Option<String> {
    let events = summary.unknown_events();
    let types = summary.unknown_types.len() as u64;
    let mut clauses: Vec<String> = damage
        .missing_formats
        .iter()
        .map(|path| format!("{label}{path} is missing"))
        .collect();
    clauses.extend(damage.damaged_formats.iter().map(|d| {
        format!(
            "{label}formats/{}/{} is damaged ({})",
            d.system, d.event, d.why
        )
    }));
    if clauses.is_empty() {
        return (events > 0).then(|| {
            format!(
                "{} of {} have no format in {label}formats ({}) and could not be decoded: \
                 what they recorded is unknown",
                counted(events, "event"),
                counted(types, "type"),
                type_ids(summary)
            )
        });
    }
    let subject = join_and(&clauses);
    if events == 0 {
        return Some(format!(
            "{subject}, but no event in the trace was of a type without a format: nothing \
             was lost"
        ));
    }
    let mut unknown = BTreeSet::new();
    for path in &damage.missing_formats {
        let mut parts = path.split('/').skip(1);
        unknown.insert(consequence(parts.next(), parts.next()));
    }
    for d in &damage.damaged_formats {
        unknown.insert(consequence(Some(&d.system), Some(&d.event)));
    }
    let unknown: Vec<String> = unknown.into_iter().collect();
    Some(format!(
        "{subject}: {} of {} could not be decoded, so {}",
        counted(events, "event"),
        counted(types, "unknown type"),
        join_and(&unknown)
    ))
}

/// What the analyses cannot know without the events of `system` (`event`: one of them;
/// neither: every format is missing).
fn consequence(system: Option<&str>, event: Option<&str>) -> String {
    match (system, event) {
        (None, _) => "nothing the trace recorded is known".into(),
        (Some("lock"), _) => "lock contention is unknown".into(),
        (Some("sched"), _) => {
            "which tasks ran, slept and woke is unknown, so lock holders and what they did \
             are unknown"
                .into()
        }
        (Some("ipi"), _) => "IPIs are unknown".into(),
        (Some("csd"), _) => "cross-CPU function calls are unknown".into(),
        (Some("raw_syscalls"), _) => {
            "system calls are unknown, so the per-operation breakdown is missing".into()
        }
        (Some("ftrace"), Some("kernel_stack")) => {
            "kernel stacks are unknown, so waits are not named by their stacks".into()
        }
        (Some("ftrace"), Some("print")) => {
            "phase markers are unknown, so results per measured phase are missing".into()
        }
        (Some("ftrace"), None) => "kernel stacks and phase markers are unknown".into(),
        (Some(system), _) => format!("what its {system} events recorded is unknown"),
    }
}

fn kallsyms_warning(
    label: &str,
    problem: &KallsymsProblem,
    summary: &DecodeSummary,
) -> Option<String> {
    const CONSEQUENCE: &str = "stack frames and other kernel addresses are shown as \
                               addresses, not symbols";
    let name = format!("{label}kallsyms");
    Some(match problem {
        KallsymsProblem::Missing => format!("{name} is missing: {CONSEQUENCE}"),
        KallsymsProblem::Unreadable(why) => {
            format!("{name} could not be read ({why}): {CONSEQUENCE}")
        }
        KallsymsProblem::Damaged { lines, first } => format!(
            "{name} has {} that could not be read (the first: {first}), skipped: the \
             addresses only they name are shown as addresses, not symbols",
            counted(*lines, "damaged line")
        ),
        // A trace without stacks may well have been recorded without symbols; with stacks
        // the frames cannot be named.
        KallsymsProblem::Empty if summary.kernel_stacks() > 0 => {
            format!("{name} has no symbols: {CONSEQUENCE}")
        }
        KallsymsProblem::Empty => return None,
    })
}

/// "ids 312, 313" of the unknown types, the first five.
fn type_ids(summary: &DecodeSummary) -> String {
    let ids: Vec<String> = summary
        .unknown_types
        .keys()
        .take(5)
        .map(u16::to_string)
        .collect();
    let more = if summary.unknown_types.len() > ids.len() {
        ", ..."
    } else {
        ""
    };
    let word = if ids.len() == 1 { "id" } else { "ids" };
    format!("type {word} {}{more}", ids.join(", "))
}

fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// "5,123 pages": the exact count, as a reader compares it with the file's own numbers.
fn counted(n: u64, what: &str) -> String {
    format!("{} {}", grouped(n), units::noun_for(n, what))
}

/// "the trace misses context switches: ...", where a CPU's next switch came from another
/// task than the one switched in last (`count` times). Some hosts never trace events in the
/// context of some of their own tasks, nor the switches to and from them: a task's running
/// ends with its last event before such a gap, and it is found running again by its own
/// events; what it did between is said as not traced, never as a cause.
pub(crate) fn missed_switches_warning((count, tasks): (u64, Vec<String>)) -> Option<String> {
    (count > 0).then(|| {
        format!(
            "the trace misses context switches: {} a CPU's next switch came from another task \
             than the one switched in last{}; tasks the host does not trace ran between, and \
             a task's time from its last traced event before such a gap to its next is said as \
             not traced, not as any cause",
            units::plural(count, "time"),
            if tasks.is_empty() {
                String::new()
            } else {
                format!(", most often after {}", tasks.join(", "))
            }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(counted(5123, "page"), "5,123 pages");
        assert_eq!(counted(1, "page"), "1 page");
        assert_eq!(counted(3, "page"), "3 pages");
    }

    #[test]
    fn a_cpu_file_is_compared_with_what_the_recorder_wrote() {
        let file = |bytes, recorded_pages| vmscale_trace::CpuFile {
            cpu: 1,
            bytes,
            recorded_pages,
        };
        let warn = |f| cpu_file_warning("trace/", &f, 4096);
        assert_eq!(warn(file(Some(7 * 4096), Some(7))), None);
        assert_eq!(warn(file(Some(7 * 4096), None)), None);
        assert_eq!(
            warn(file(Some(5 * 4096 + 1234), Some(7))).unwrap(),
            "trace/cpu1.raw ends 1,234 bytes into a page: the file was truncated; the partial \
             page was skipped; 1 more of the 7 pages the recorder wrote is missing too"
        );
        assert_eq!(
            warn(file(Some(4 * 4096), Some(7))).unwrap(),
            "trace/cpu1.raw holds 4 of the 7 pages the recorder wrote: the file was truncated \
             at a page boundary; CPU 1's last 3 pages (12 KiB) of events are missing"
        );
        assert_eq!(
            warn(file(None, Some(6))).unwrap(),
            "trace/cpu1.raw is missing: CPU 1's events are not in the analysis (the recorder \
             wrote 6 pages, 24 KiB)"
        );
        assert!(warn(file(Some(9 * 4096), Some(7)))
            .unwrap()
            .starts_with("trace/cpu1.raw holds 9 pages but the recorder wrote 7"));
    }

    #[test]
    fn events_without_a_format_in_a_dat_file_are_counted_by_type() {
        let mut summary = DecodeSummary::default();
        assert_eq!(unknown_types_warning(&summary), None);
        summary.unknown_types.insert(312, 5000);
        summary.unknown_types.insert(313, 123);
        assert_eq!(
            unknown_types_warning(&summary).unwrap(),
            "5,123 events of 2 types without a format in the trace (type ids 312, 313) could \
             not be decoded: what they recorded is unknown"
        );
    }
}
