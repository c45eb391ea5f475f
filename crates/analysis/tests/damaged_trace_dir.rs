//! A run's trace directory that is damaged or incomplete is analysed as far as it goes, and
//! every gap is a warning naming the file, what is wrong and what is therefore unknown.
//! Each case damages a copy of the real recording in the trace crate's fixtures.

use std::path::{Path, PathBuf};

const PAGE: usize = 4096;

#[path = "support/fixture_copy.rs"]
mod fixture_copy;

use fixture_copy::copy_dir;

fn fixture() -> PathBuf {
    fixture_copy::trace_fixture("contention")
}

/// A copy of the fixture as `<scratch>/trace`, removed when dropped.
struct Copy(PathBuf);

impl Copy {
    fn new(tag: &str) -> Copy {
        let root =
            std::env::temp_dir().join(format!("vmscale-damaged-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        copy_dir(&fixture(), &root.join("trace"));
        Copy(root)
    }

    fn trace(&self) -> PathBuf {
        self.0.join("trace")
    }

    fn path(&self, file: &str) -> PathBuf {
        self.trace().join(file)
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn truncate(path: &Path, len: usize) {
    let bytes = std::fs::read(path).unwrap();
    std::fs::write(path, &bytes[..len]).unwrap();
}

fn whole() -> vmscale_analysis::TraceAnalysis {
    vmscale_analysis::analyse(&fixture()).unwrap()
}

/// What the analysis still finds: events, contended locks, named by their stacks.
fn locks_named(analysis: &vmscale_analysis::TraceAnalysis) -> Vec<String> {
    analysis
        .contention
        .locks
        .iter()
        .map(|l| l.name.clone())
        .collect()
}

#[test]
fn the_whole_fixture_has_no_warnings() {
    let analysis = whole();
    assert!(analysis.warnings.is_empty(), "{:?}", analysis.warnings);
    assert!(analysis.decoded_events > 500);
    assert!(!analysis.contention.locks.is_empty());
}

#[test]
fn a_cpu_file_cut_inside_a_page_says_so_and_the_rest_decodes() {
    let copy = Copy::new("partial");
    // cpu1.raw has 6 pages; cut 1234 bytes into its fourth.
    truncate(&copy.path("cpu1.raw"), 3 * PAGE + 1234);
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    assert_eq!(
        analysis.warnings,
        [
            "trace/cpu1.raw ends 1,234 bytes into a page: the file was truncated; the partial \
          page was skipped; 2 more of the 6 pages the recorder wrote are missing too"
        ]
    );
    let whole = whole();
    assert!(analysis.decoded_events < whole.decoded_events);
    assert!(analysis.decoded_events > whole.decoded_events / 2);
    assert!(!analysis.contention.locks.is_empty());
}

#[test]
fn a_cpu_file_cut_at_a_page_boundary_is_found_by_the_pages_the_recorder_wrote() {
    let copy = Copy::new("boundary");
    truncate(&copy.path("cpu0.raw"), 4 * PAGE);
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    assert_eq!(
        analysis.warnings,
        [
            "trace/cpu0.raw holds 4 of the 7 pages the recorder wrote: the file was truncated \
          at a page boundary; CPU 0's last 3 pages (12 KiB) of events are missing"
        ]
    );
    assert!(analysis.decoded_events > 0);
    assert!(!analysis.contention.locks.is_empty());
}

#[test]
fn a_missing_cpu_file_leaves_that_cpu_out() {
    let copy = Copy::new("no-cpu");
    std::fs::remove_file(copy.path("cpu1.raw")).unwrap();
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    assert_eq!(
        analysis.warnings,
        [
            "trace/cpu1.raw is missing: CPU 1's events are not in the analysis (the recorder \
          wrote 6 pages, 24 KiB)"
        ]
    );
    assert!(analysis.decoded_events > 0);
}

#[test]
fn missing_lock_formats_make_lock_contention_unknown_with_counts() {
    let copy = Copy::new("no-lock");
    let whole = whole();
    std::fs::remove_dir_all(copy.path("formats/lock")).unwrap();
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    let lock_events = count_events(&fixture(), "lock");
    assert!(lock_events > 10, "{lock_events}");
    assert_eq!(
        analysis.warnings,
        [format!(
            "trace/formats/lock is missing: {} events of 2 unknown types could not be \
             decoded, so lock contention is unknown",
            thousands(lock_events)
        )]
    );
    // Every event is still decoded as far as it goes; the rest of the analysis runs.
    assert_eq!(analysis.decoded_events, whole.decoded_events);
    assert!(analysis.contention.locks.is_empty());
    assert_eq!(analysis.ipis.len(), whole.ipis.len());
}

#[test]
fn a_damaged_format_file_is_left_out_and_named() {
    let copy = Copy::new("bad-format");
    std::fs::write(
        copy.path("formats/lock/contention_end"),
        "name: contention_end\nID: x\n",
    )
    .unwrap();
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    let ends = count_event(&fixture(), "lock", "contention_end");
    assert_eq!(
        analysis.warnings,
        [format!(
            "trace/formats/lock/contention_end is damaged (line 2: ID is not a number): {} \
             events of 1 unknown type could not be decoded, so lock contention is unknown",
            thousands(ends)
        )]
    );
    // Begins without ends: every wait is open.
    assert!(analysis.contention.locks.iter().all(|l| l.waits.is_none()));
}

#[test]
fn a_missing_kallsyms_shows_addresses() {
    let copy = Copy::new("no-kallsyms");
    std::fs::remove_file(copy.path("kallsyms")).unwrap();
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    assert_eq!(
        analysis.warnings,
        [
            "trace/kallsyms is missing: stack frames and other kernel addresses are shown as \
          addresses, not symbols"
        ]
    );
    let whole = whole();
    assert_eq!(analysis.decoded_events, whole.decoded_events);
    assert_eq!(
        analysis.contention.locks.len(),
        whole.contention.locks.len()
    );
    assert_ne!(locks_named(&analysis), locks_named(&whole));
}

#[test]
fn a_kallsyms_cut_mid_line_keeps_the_lines_before() {
    let copy = Copy::new("cut-kallsyms");
    let text = std::fs::read_to_string(copy.path("kallsyms")).unwrap();
    // Cut after the last line's address, before its symbol type.
    let last = text.trim_end().rfind('\n').unwrap() + 1;
    std::fs::write(copy.path("kallsyms"), &text[..last + 17]).unwrap();
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    let line = text[..last].lines().count() + 1;
    assert_eq!(
        analysis.warnings,
        [format!(
            "trace/kallsyms has 1 damaged line that could not be read (the first: kallsyms \
             line {line}: no symbol type), skipped: the addresses only they name are shown as \
             addresses, not symbols"
        )]
    );
}

#[test]
fn a_missing_or_corrupt_meta_json_is_inferred_around() {
    let whole = whole();
    for (tag, damage, what) in [
        ("no-meta", None, "is missing".to_string()),
        (
            "bad-meta",
            Some("{\"page_size\": 4096,"),
            "is not valid (EOF while parsing a value at line 1 column 19)".to_string(),
        ),
    ] {
        let copy = Copy::new(tag);
        match damage {
            None => std::fs::remove_file(copy.path("meta.json")).unwrap(),
            Some(text) => std::fs::write(copy.path("meta.json"), text).unwrap(),
        }
        let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
        assert_eq!(
            analysis.warnings,
            [format!(
                "trace/meta.json {what}: the page size (4,096 bytes, from header_page) and \
                 the CPUs (0, 1, from the cpu*.raw files present) were inferred; which \
                 events were enabled and how many pages the recorder wrote are unknown, so a \
                 missing format or a file cut at a page boundary cannot be detected"
            )],
            "{tag}"
        );
        assert_eq!(analysis.decoded_events, whole.decoded_events, "{tag}");
        assert_eq!(locks_named(&analysis), locks_named(&whole), "{tag}");
    }
}

#[test]
fn several_kinds_of_damage_each_get_their_warning() {
    let copy = Copy::new("several");
    truncate(&copy.path("cpu1.raw"), 2 * PAGE + 100);
    std::fs::remove_dir_all(copy.path("formats/ipi")).unwrap();
    std::fs::remove_file(copy.path("kallsyms")).unwrap();
    let analysis = vmscale_analysis::analyse(&copy.trace()).unwrap();
    let starts: Vec<&str> = analysis
        .warnings
        .iter()
        .map(|w| w.split(':').next().unwrap())
        .collect();
    assert_eq!(
        starts,
        [
            "trace/cpu1.raw ends 100 bytes into a page",
            "trace/formats/ipi is missing",
            "trace/kallsyms is missing"
        ],
        "{:#?}",
        analysis.warnings
    );
    assert!(analysis.warnings[1].ends_with("so IPIs are unknown"));
    assert!(!analysis.contention.locks.is_empty());
}

/// Events of `system` in the fixture, counted from its own decode.
fn count_events(dir: &Path, system: &str) -> u64 {
    let decoder = vmscale_trace::Decoder::open(dir).unwrap();
    let mut n = 0;
    decoder
        .for_each(|e| n += u64::from(e.system() == system))
        .unwrap();
    n
}

fn count_event(dir: &Path, system: &str, name: &str) -> u64 {
    let decoder = vmscale_trace::Decoder::open(dir).unwrap();
    let mut n = 0;
    decoder
        .for_each(|e| n += u64::from(e.system() == system && e.name() == name))
        .unwrap();
    n
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
