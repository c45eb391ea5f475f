//! Renderings of a small hand-built run.

use std::collections::BTreeMap;

use vmscale_run::{BackgroundLoad, HostFacts, Phase, Point, RunRecord, Series, ToolInfo};
use vmscale_stats::Summary;

use crate::{render, Format};

/// 980 samples of 1 us and 20 of 4567 us: p99 falls among the slow ones and is exactly
/// 4567 us (the histogram's bucket edge is clamped to the exact maximum), the mean 92.3 us.
fn bimodal_samples() -> Vec<u64> {
    let mut samples = vec![1_000u64; 980];
    samples.extend([4_567_000u64; 20]);
    samples
}

fn series(name: &str, samples_ns: Vec<u64>, phases: Vec<Phase>) -> Series {
    Series {
        name: name.into(),
        sample_is: "one memslot add or delete".into(),
        summary: Summary::from_samples(&samples_ns),
        samples_ns,
        phases,
        kvm_stats: BTreeMap::from([
            ("vm.remote_tlb_flush".to_string(), 1_000),
            ("vcpu.exits".to_string(), 3_000),
            ("vcpu.halt_wait_ns".to_string(), 0),
        ]),
        vcpu_progress: vec![1_200_000, 1_300_000],
    }
}

/// A pause-all series whose three phases add up to every sample.
fn phased_series(scale: u64) -> Series {
    let kick: Vec<u64> = (1..=100).map(|i| i * 10 * scale).collect();
    let update: Vec<u64> = (1..=100).map(|i| 2_000 + i * scale).collect();
    let resume: Vec<u64> = vec![500 * scale; 100];
    let total: Vec<u64> = (0..100).map(|i| kick[i] + update[i] + resume[i]).collect();
    series(
        "pause-all",
        total,
        vec![
            Phase::new("kick+wait", kick),
            Phase::new("update", update),
            Phase::new("resume", resume),
        ],
    )
}

fn host() -> HostFacts {
    serde_json::from_value(serde_json::json!({
        "hostname": "testhost",
        "kernel_release": "6.8.0-test",
        "kernel_version": "#1 SMP",
        "cpu_model": "Example CPU @ 2.00GHz",
        "online_cpus": 2,
        "memory_bytes": 8u64 << 30,
        "kvm": {
            "api_version": 12,
            "max_vcpus": 1024,
            "recommended_vcpus": 2,
            "backend": "vmx",
            "tdp_mmu": true,
            "halt_poll_ns": 200000
        }
    }))
    .expect("test host facts match the schema")
}

fn record() -> RunRecord {
    let point = |n: u64, scale: u64| Point {
        n,
        vcpus_per_host_cpu: n as f64 / 2.0,
        series: vec![
            series(
                "direct",
                bimodal_samples().iter().map(|s| s * scale).collect(),
                Vec::new(),
            ),
            phased_series(scale),
        ],
    };
    RunRecord {
        schema_version: vmscale_run::SCHEMA_VERSION,
        tool: ToolInfo::current("0.1.0"),
        scenario: "memslot".into(),
        sweep: "vcpus".into(),
        command_line: ["vmscale", "run", "memslot", "--vcpus", "1,4"]
            .map(String::from)
            .to_vec(),
        started_utc: "2026-01-02T03:04:05Z".into(),
        finished_utc: "2026-01-02T03:05:00Z".into(),
        host: host(),
        knobs: serde_json::json!({"iterations": 1000, "vcpus": [1, 4]}),
        background: Some(BackgroundLoad {
            wall_ns: 1_000_000_000,
            host_busy_ns: 300_000_000,
            own_ns: 200_000_000,
            other_busy_fraction: 0.05,
        }),
        points: vec![point(1, 1), point(4, 3)],
        trace: None,
        warnings: vec!["4 vCPUs on 2 host CPUs: overcommitted".into()],
    }
}

/// The cells of a bordered table line, trimmed.
fn table_cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// Fields of one CSV line, honouring RFC 4180 quotes.
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[test]
fn table_shows_every_strategy_and_the_p99_in_microseconds() {
    let text = render(&record(), Format::Table);
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .find(|l| l.contains("mean (us)"))
        .expect("latency header names its unit");
    let columns = table_cells(header);
    let p99 = columns.iter().position(|c| *c == "p99 (us)").unwrap();
    let mean = columns.iter().position(|c| *c == "mean (us)").unwrap();
    assert_eq!(columns[0], "vcpus");

    let direct_at_1 = lines
        .iter()
        .map(|l| table_cells(l))
        .find(|cells| cells.len() == columns.len() && cells[0] == "1" && cells[2] == "direct")
        .expect("a row for direct at vcpus=1");
    assert_eq!(direct_at_1[1], "0.50x");
    assert_eq!(direct_at_1[p99], "4567");
    assert_eq!(direct_at_1[mean], "92.3");
    assert!(lines
        .iter()
        .any(|l| l.contains("pause-all") && l.contains("2.0x")));

    assert!(text.contains("warning: 4 vCPUs on 2 host CPUs"));
    assert!(text.contains("other processes used 5.0% of the CPUs"));
    assert!(text.contains("vmx, tdp_mmu on, max 1024 vCPUs"));
    assert!(text.contains("8.0 GiB"));
    assert!(text.contains("vmscale run memslot --vcpus 1,4"));
    assert!(!text.contains('\x1b'), "no terminal escape codes");
}

#[test]
fn table_splits_phases_and_reports_counters_per_sample() {
    let text = render(&record(), Format::Table);
    let (_, after) = text
        .split_once("where the time goes")
        .expect("phases get their own table");
    let shares: f64 = after
        .lines()
        .map(table_cells)
        .filter(|cells| cells.len() == 7 && cells[0] == "1" && cells[1] == "pause-all")
        .map(|cells| cells[6].parse::<f64>().unwrap())
        .sum();
    assert!((shares - 100.0).abs() < 0.5, "phase shares sum to {shares}");
    for phase in ["kick+wait", "update", "resume"] {
        assert!(after.contains(phase), "{phase} missing");
    }
    // 1000 flushes over 1000 samples for direct; pause-all has 100 samples.
    let flush_rows: Vec<Vec<&str>> = text
        .lines()
        .map(table_cells)
        .filter(|cells| cells.len() == 4 && cells[2] == "vm.remote_tlb_flush")
        .collect();
    assert_eq!(flush_rows.len(), 4, "one per point and series");
    assert!(flush_rows.iter().any(|cells| cells[3] == "1.0"));
    assert!(flush_rows.iter().any(|cells| cells[3] == "10"));
    assert!(
        !text.contains("halt_wait_ns"),
        "unchanged counters are left out"
    );
    assert!(
        text.contains("vcpus=4  direct: min 1.20M max 1.30M iterations/vCPU, all 2 vCPUs advanced")
    );
}

#[test]
fn csv_has_one_row_per_part_and_constant_columns() {
    let mut run = record();
    run.points[1].series[0].name = "direct, batched \"fast\"".into();
    let text = render(&run, Format::Csv);
    let lines: Vec<&str> = text.lines().collect();
    // Per point: direct (total) + pause-all (total and three phases).
    assert_eq!(lines.len(), 1 + 2 * (1 + 4));
    assert_eq!(lines[0], crate::csv::HEADER.join(","));
    for line in &lines {
        assert_eq!(csv_fields(line).len(), 15, "{line}");
    }
    assert!(text.contains(",\"direct, batched \"\"fast\"\"\",total,"));
    let direct = csv_fields(lines[1]);
    assert_eq!(
        direct[..7],
        ["memslot", "vcpus", "1", "0.5", "direct", "total", "1000"]
    );
    assert_eq!(direct[12], "4567000", "p99_ns");
    let parts: Vec<String> = lines[2..6]
        .iter()
        .map(|l| csv_fields(l)[5].clone())
        .collect();
    assert_eq!(parts, ["total", "kick+wait", "update", "resume"]);
}

#[test]
fn markdown_tables_have_a_constant_column_count() {
    let text = render(&record(), Format::Md);
    let mut tables: Vec<Vec<usize>> = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with('|') {
            if !in_table {
                tables.push(Vec::new());
            }
            tables.last_mut().unwrap().push(line.matches('|').count());
        }
        in_table = line.starts_with('|');
    }
    assert_eq!(tables.len(), 2, "latency and phase tables:\n{text}");
    for table in &tables {
        assert!(
            table.iter().all(|&pipes| pipes == table[0]),
            "{table:?}\n{text}"
        );
    }
    assert_eq!(tables[0][0], 13, "twelve latency columns");
    assert_eq!(
        tables[0].len(),
        2 + 4,
        "header, alignment, two rows per point"
    );
    assert!(text.contains("| p99 (us) |"));
    assert!(text.contains("> - 4 vCPUs on 2 host CPUs: overcommitted"));
    assert!(text.contains("- **command:** `vmscale run memslot --vcpus 1,4`"));
}

#[test]
fn json_round_trips_points_and_samples() {
    let run = record();
    let back: RunRecord = serde_json::from_str(&render(&run, Format::Json)).unwrap();
    let samples = |r: &RunRecord| -> usize {
        r.points
            .iter()
            .flat_map(|p| &p.series)
            .map(|s| {
                s.samples_ns.len() + s.phases.iter().map(|p| p.samples_ns.len()).sum::<usize>()
            })
            .sum()
    };
    assert_eq!(back.points.len(), 2);
    assert_eq!(samples(&back), samples(&run));
    assert_eq!(
        back.points[1].series[1].samples_ns,
        run.points[1].series[1].samples_ns
    );
}

#[test]
fn format_names_parse_and_unknown_ones_list_the_valid_ones() {
    assert_eq!("table".parse(), Ok(Format::Table));
    assert_eq!("json".parse(), Ok(Format::Json));
    assert_eq!("csv".parse(), Ok(Format::Csv));
    assert_eq!("md".parse(), Ok(Format::Md));
    assert_eq!("Markdown".parse(), Ok(Format::Md));
    let error = "xml".parse::<Format>().unwrap_err().to_string();
    for name in ["\"xml\"", "table", "json", "csv", "md", "markdown"] {
        assert!(error.contains(name), "{error}");
    }
    for format in Format::ALL {
        assert_eq!(format.name().parse(), Ok(format));
    }
}

#[test]
fn a_series_without_samples_renders_as_missing_values() {
    let mut run = record();
    let empty = &mut run.points[0].series[1];
    empty.samples_ns.clear();
    empty.summary = None;
    for phase in &mut empty.phases {
        phase.samples_ns.clear();
        phase.summary = None;
    }
    for format in Format::ALL {
        assert!(!render(&run, format).is_empty());
    }

    let table = render(&run, Format::Table);
    let row = table
        .lines()
        .map(table_cells)
        .find(|cells| cells.len() == 12 && cells[0] == "1" && cells[2] == "pause-all")
        .expect("the empty series still has a row");
    assert_eq!(row[3], "0");
    assert!(row[4..].iter().all(|c| *c == "-"), "{row:?}");
    assert!(
        table.contains("(total)"),
        "counters without samples are totals"
    );

    let csv = render(&run, Format::Csv);
    let fields = csv_fields(csv.lines().nth(2).unwrap());
    assert_eq!(fields.len(), 15);
    assert_eq!(fields[6], "0");
    assert!(fields[7..].iter().all(String::is_empty), "{fields:?}");
}

#[test]
fn a_run_without_points_or_host_kvm_still_renders() {
    let mut run = record();
    run.points.clear();
    run.host.kvm = None;
    run.background = None;
    let table = render(&run, Format::Table);
    assert!(
        !table.contains("latency"),
        "an empty latency table was printed"
    );
    assert!(table.contains("not measured"));
    assert!(!table.contains("tdp_mmu"));
    assert_eq!(render(&run, Format::Csv).lines().count(), 1);
}
