//! Renderings of a small hand-built run.

use std::collections::BTreeMap;

use vmscale_run::{
    BackgroundLoad, HostFacts, LockContention, Phase, Point, RunRecord, Series, ToolInfo,
    TraceSection, WaitStack, Waiter,
};
use vmscale_stats::Summary;

use crate::{render, render_contention_csv, Format};

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
        ..Series::default()
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
        verdict: Vec::new(),
        scaling: Vec::new(),
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
            neighbours: Vec::new(),
        }),
        points: vec![point(1, 1), point(4, 3)],
        trace: None,
        warnings: vec!["4 vCPUs on 2 host CPUs: overcommitted".into()],
    }
}

/// 985 waits of 2 us and 15 of 812.345 us: p99 is the 990th wait, one of the slow ones,
/// exactly 812345 ns (clamped to the maximum), shown as "812".
fn slots_lock() -> LockContention {
    let mut waits = vec![2_000u64; 985];
    waits.extend([812_345u64; 15]);
    // Fourteen frames, two beyond what a rendering shows.
    let deep: Vec<String> = [
        "__mutex_lock_slowpath",
        "mutex_lock",
        "kvm_set_memory_region",
        "kvm_vm_ioctl_set_memory_region",
        "kvm_vm_ioctl",
        "__x64_sys_ioctl",
        "x64_sys_call",
        "do_syscall_64",
        "entry_SYSCALL_64_after_hwframe",
        "frame_10",
        "frame_11",
        "frame_12",
        "frame_13_hidden",
        "frame_14_hidden",
    ]
    .map(String::from)
    .to_vec();
    LockContention {
        lock_addr: 0xffff_8881_04a3_c0d8,
        name: "slots_lock".into(),
        kind: "mutex".into(),
        modes: BTreeMap::from([(String::new(), 1_000)]),
        total_wait_ns: waits.iter().sum(),
        waits: Summary::from_samples(&waits),
        open_waits: 2,
        waiters: vec![
            Waiter {
                comm: "vmscale".into(),
                pid: 4242,
                waits: 990,
                total_wait_ns: 14_000_000,
            },
            Waiter {
                comm: "kworker/3:1".into(),
                pid: 77,
                waits: 10,
                total_wait_ns: 175_000,
            },
        ],
        stacks: vec![
            WaitStack {
                frames: deep,
                waits: 900,
                total_wait_ns: 13_000_000,
            },
            WaitStack {
                frames: ["__mutex_lock_slowpath", "kvm_vcpu_ioctl"]
                    .map(String::from)
                    .to_vec(),
                waits: 100,
                total_wait_ns: 1_175_000,
            },
        ],
    }
}

fn mmu_lock() -> LockContention {
    let waits = vec![700u64; 123];
    LockContention {
        lock_addr: 0xffff_c900_0012_3000,
        name: "mmu_lock".into(),
        kind: "rwlock".into(),
        modes: BTreeMap::from([("read".to_string(), 3), ("write".to_string(), 120)]),
        total_wait_ns: waits.iter().sum(),
        waits: Summary::from_samples(&waits),
        open_waits: 0,
        waiters: vec![Waiter {
            comm: "vmscale-vcpu".into(),
            pid: 4250,
            waits: 123,
            total_wait_ns: 86_100,
        }],
        stacks: vec![WaitStack {
            frames: ["queued_write_lock_slowpath", "kvm_mmu_zap_all_fast"]
                .map(String::from)
                .to_vec(),
            waits: 123,
            total_wait_ns: 86_100,
        }],
    }
}

/// A lock whose only wait never ended: no distribution, one open wait.
fn open_only_lock(name: &str) -> LockContention {
    LockContention {
        lock_addr: 0,
        name: name.into(),
        kind: "rwsem".into(),
        modes: BTreeMap::from([("read".to_string(), 1)]),
        waits: None,
        total_wait_ns: 0,
        open_waits: 1,
        waiters: Vec::new(),
        stacks: Vec::new(),
    }
}

fn trace_section() -> TraceSection {
    TraceSection {
        dir: "trace".into(),
        every_task: false,
        timed_calls: None,
        excluded_tids: Vec::new(),
        lock_format_missing: false,
        span_ns: 0,
        events: [
            "lock:contention_begin",
            "lock:contention_end",
            "sched:sched_switch",
            "ipi:ipi_send_cpu",
        ]
        .map(String::from)
        .to_vec(),
        stacks: true,
        buffer_kib: 16 * 1024,
        lost_per_cpu: BTreeMap::from([("0".to_string(), 0), ("1".to_string(), 0)]),
        decoded_events: 4_567_890,
        stack_cost: Summary::from_samples(&[1_500, 1_500, 1_500, 9_000]),
        contention: vec![
            slots_lock(),
            mmu_lock(),
            open_only_lock("rwsem read in kvm_vcpu_ioctl"),
        ],
        ipis: Vec::new(),
        holders: Vec::new(),
        breakdown: Vec::new(),
        spinlocks: Vec::new(),
        timeline: None,
        command: None,
        subject: None,
        vcpu_resume: None,
        events_seen: Default::default(),
        vmm: Vec::new(),
        on_cpu: None,
        on_cpu_by_n: Vec::new(),
        aggregate: None,
        on_cpu_paths: None,
    }
}

fn traced_record() -> RunRecord {
    RunRecord {
        trace: Some(trace_section()),
        ..record()
    }
}

/// The text of a rendering after `marker`, which must be there.
fn after<'a>(text: &'a str, marker: &str) -> &'a str {
    text.split_once(marker)
        .unwrap_or_else(|| panic!("{marker:?} missing:\n{text}"))
        .1
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
    assert_eq!(lines[0], crate::csv::header().join(","));
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

#[test]
fn table_names_contended_locks_with_their_wait_distribution() {
    let text = render(&traced_record(), Format::Table);
    let section = after(&text, "\nkernel trace\n");
    assert!(section.contains(
        "4 event types recorded (lock, sched, ipi), kernel stacks on, 16 MiB buffer per CPU, \
         4.57M events decoded"
    ));
    assert!(section.contains(
        "kernel stacks cost p50 1.50 us (max 9.00 us) per contended wait; waits below include it"
    ));
    assert!(!section.contains("trace lost"), "no CPU lost events");

    let locks = after(section, "lock contention (worst first)");
    let lines: Vec<&str> = locks.lines().collect();
    let header = lines
        .iter()
        .map(|l| table_cells(l))
        .find(|cells| cells.first() == Some(&"lock"))
        .expect("contention table header");
    assert_eq!(header.len(), 10, "{header:?}");
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let row = |lock: &str| {
        lines
            .iter()
            .map(|l| table_cells(l))
            .find(|cells| cells.len() == header.len() && cells[0] == lock)
            .unwrap_or_else(|| panic!("no row for {lock}:\n{locks}"))
    };

    let slots = row("slots_lock");
    assert_eq!(slots[column("kind")], "mutex");
    assert_eq!(
        slots[column("modes")],
        "1000",
        "an exclusive lock shows its count"
    );
    assert_eq!(slots[column("contended")], "1000");
    assert_eq!(slots[column("p99 (us)")], "812");
    assert_eq!(slots[column("p50 (us)")], "2.00");
    assert_eq!(slots[column("max (us)")], "812");
    assert_eq!(slots[column("open waits")], "2");

    let mmu = row("mmu_lock");
    assert_eq!(mmu[column("kind")], "rwlock");
    assert_eq!(mmu[column("modes")], "write 120, read 3");
    assert_eq!(mmu[column("total wait (us)")], "86.1");

    let open = row("rwsem read in kvm_vcpu_ioctl");
    assert_eq!(open[column("contended")], "0");
    assert_eq!(
        open[column("p99 (us)")],
        "-",
        "no completed wait, no percentile"
    );
    assert_eq!(open[column("open waits")], "1");

    // Worst first, as the analysis sorted them.
    let slots_at = locks.find("slots_lock").unwrap();
    let mmu_at = locks.find("mmu_lock").unwrap();
    assert!(slots_at < mmu_at);
    assert!(!text.contains('\x1b'), "no terminal escape codes");
}

#[test]
fn table_shows_the_waiters_and_stacks_of_the_worst_locks() {
    let text = render(&traced_record(), Format::Table);
    let details = after(
        &text,
        "worst locks: who waited, and from which kernel stacks",
    );
    let slots = after(details, "1. slots_lock (mutex at 0xffff888104a3c0d8)");
    let slots = slots.split("2. mmu_lock").next().unwrap();
    assert!(
        slots.contains("vmscale/4242: 990 waits, total 14000 us"),
        "{slots}"
    );
    assert!(
        slots.contains("kworker/3:1/77: 10 waits, total 175 us"),
        "{slots}"
    );
    assert!(
        slots.contains("stack: 900 waits, total 13000 us"),
        "{slots}"
    );

    // Frames one per line, innermost first, cut after twelve.
    let frames: Vec<&str> = after(slots, "stack: 900 waits, total 13000 us\n")
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("stack:"))
        .collect();
    assert_eq!(frames.len(), 13, "{frames:?}");
    assert_eq!(frames[0], "__mutex_lock_slowpath");
    assert_eq!(frames[2], "kvm_set_memory_region");
    assert_eq!(frames[11], "frame_12");
    assert_eq!(frames[12], "... (2 more frames)");
    assert!(!text.contains("frame_13_hidden"));
    assert!(slots.contains("stack: 100 waits, total 1175 us"), "{slots}");

    let mmu = after(details, "2. mmu_lock (rwlock at 0xffffc90000123000)");
    assert!(mmu.contains("queued_write_lock_slowpath"));
}

#[test]
fn a_trace_that_lost_events_says_so_in_its_own_section() {
    let mut run = traced_record();
    let trace = run.trace.as_mut().unwrap();
    trace.lost_per_cpu.insert("1".into(), 2_345);
    let table = render(&run, Format::Table);
    let header = after(&table, "\nkernel trace\n");
    let header = header.split("lock contention").next().unwrap();
    let lost: Vec<&str> = header
        .lines()
        .filter(|l| l.contains("trace lost"))
        .collect();
    assert_eq!(lost.len(), 1, "only cpu1 lost events:\n{header}");
    assert!(
        lost[0].trim().starts_with("trace lost 2345 events on cpu1"),
        "{}",
        lost[0]
    );
    let md = render(&run, Format::Md);
    assert!(after(&md, "### Kernel trace").contains("- trace lost 2345 events on cpu1"));
}

#[test]
fn a_trace_without_contention_says_so_and_stops() {
    let mut run = traced_record();
    let trace = run.trace.as_mut().unwrap();
    trace.contention.clear();
    trace.stacks = false;
    trace.stack_cost = None;
    for format in [Format::Table, Format::Md] {
        let text = render(&run, format);
        let section = after(&text, "ernel trace\n");
        assert!(section.contains("no lock contention recorded"), "{section}");
        assert!(section.contains("kernel stacks off"), "{section}");
        assert!(!section.contains("kernel stacks cost"), "{section}");
        assert!(
            !section.contains("lock contention (worst first)"),
            "{section}"
        );
        assert!(!section.contains("worst locks"), "{section}");
        assert!(!section.contains('|'), "no table:\n{section}");
    }
}

#[test]
fn long_contention_tables_are_cut_and_say_how_many_locks_are_left_out() {
    let mut run = traced_record();
    let trace = run.trace.as_mut().unwrap();
    for i in 0..14 {
        trace
            .contention
            .push(open_only_lock(&format!("extra_lock_{i}")));
    }
    // 17 locks: 15 rows, then the count of the other two.
    let text = render(&run, Format::Table);
    assert!(text.contains("extra_lock_11"));
    assert!(!text.contains("extra_lock_12"));
    assert!(text.contains("(2 more locks)"));
    let md = render(&run, Format::Md);
    assert!(
        md.contains("\n\n(2 more locks)\n"),
        "a paragraph, not a table row"
    );
    // Details stop at the fifth lock.
    assert!(text.contains("5. extra_lock_1 (rwsem)"));
    assert!(!text.contains("6. extra_lock_2"));
}

#[test]
fn markdown_trace_section_has_a_consistent_table_and_fenced_stacks() {
    let text = render(&traced_record(), Format::Md);
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
    assert_eq!(tables.len(), 3, "latency, phases and contention:\n{text}");
    for table in &tables {
        assert!(
            table.iter().all(|&pipes| pipes == table[0]),
            "{table:?}\n{text}"
        );
    }
    assert_eq!(tables[2][0], 11, "ten contention columns");
    assert_eq!(
        tables[2].len(),
        2 + 3,
        "header, alignment, one row per lock"
    );

    let section = after(&text, "### Kernel trace\n");
    assert!(
        section.contains("| `slots_lock` | mutex | 1000 | 1000 |"),
        "{section}"
    );
    assert!(section.contains("| p99 (us) |"));
    assert!(section.contains("#### 1. `slots_lock` (mutex at 0xffff888104a3c0d8)"));
    assert!(section.contains("- `vmscale/4242`: 990 waits, total 14000 us"));
    assert!(section.contains(
        "Stack, 900 waits, total 13000 us:\n\n```text\n__mutex_lock_slowpath\nmutex_lock\n"
    ));
    // Every fence is closed.
    assert_eq!(section.matches("```").count() % 2, 0, "{section}");
    assert!(!section.contains("Kernel stacks were not recorded"));
}

#[test]
fn a_run_without_a_trace_renders_as_before() {
    let plain = record();
    let traced = traced_record();
    for format in [Format::Table, Format::Md] {
        let without = render(&plain, format);
        assert!(
            !without.to_lowercase().contains("kernel trace"),
            "{without}"
        );
        assert!(!without.contains("lock contention"), "{without}");
        // The section is appended after everything else and changes nothing before it.
        let with = render(&traced, format);
        assert!(with.len() > without.len());
        assert!(
            with.starts_with(&without),
            "{format}: trace changed earlier output"
        );
    }
    assert_eq!(render(&plain, Format::Csv), render(&traced, Format::Csv));
    assert_eq!(render_contention_csv(&plain), None);
}

#[test]
fn contention_csv_has_one_row_per_lock_in_nanoseconds() {
    let mut run = traced_record();
    let csv = render_contention_csv(&run).expect("a traced run has contention rows");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 3);
    assert_eq!(lines[0], crate::csv::contention_header().join(","));
    for line in &lines {
        assert_eq!(csv_fields(line).len(), 16, "{line}");
    }
    let slots = csv_fields(lines[1]);
    assert_eq!(
        slots[..6],
        [
            "memslot",
            "0xffff888104a3c0d8",
            "slots_lock",
            "mutex",
            "1000",
            "1000"
        ]
    );
    assert_eq!(slots[11], "812345", "p99_ns");
    assert_eq!(slots[15], "2", "open_waits");
    let mmu = csv_fields(lines[2]);
    assert_eq!(mmu[4], "write 120, read 3");
    let open = csv_fields(lines[3]);
    assert!(open[6..14].iter().all(String::is_empty), "{open:?}");

    run.trace.as_mut().unwrap().contention.clear();
    assert_eq!(
        render_contention_csv(&run).unwrap().lines().count(),
        1,
        "header only"
    );
}

/// Noise uniform in [-300, 300) ns from a fixed LCG, so every run of the tests sees the same
/// samples.
fn noise(count: usize) -> Vec<i64> {
    let mut state = 42u64;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % 600) as i64 - 300
        })
        .collect()
}

/// 1000 irqfd registrations, the i-th with i irqfds already registered, taking
/// 10 us + 2 ns per irqfd already there, plus noise.
fn growing_series() -> Series {
    let sample_x: Vec<u64> = (0..1_000).collect();
    let samples_ns: Vec<u64> = sample_x
        .iter()
        .zip(noise(1_000))
        .map(|(&x, noise)| (10_000 + 2 * x as i64 + noise) as u64)
        .collect();
    Series {
        name: "register".into(),
        sample_is: "one KVM_IRQFD".into(),
        summary: Summary::from_samples(&samples_ns),
        samples_ns,
        sample_x,
        sample_x_is: "irqfds already registered in this VM".into(),
        notes: vec![
            "RLIMIT_NOFILE 20000 applies per fd table: 9 threads held 174000 irqfds".into(),
        ],
        ..Series::default()
    }
}

/// A scenario without vCPUs, sweeping the irqfds per VM.
fn irqfd_record() -> RunRecord {
    RunRecord {
        scenario: "irqfd".into(),
        sweep: "irqfds".into(),
        warnings: Vec::new(),
        points: vec![Point {
            n: 1_000,
            vcpus_per_host_cpu: 0.0,
            series: vec![growing_series()],
        }],
        ..record()
    }
}

const GROWTH_TITLE: &str =
    "how register grows with irqfds already registered in this VM (x), at irqfds=1000";

/// The lines of a section, from its title to the next blank line.
fn section_lines<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    after(text, title)
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

/// The number before " ns per x" on the line starting with `prefix` (after trimming).
fn slope(lines: &[&str], prefix: &str) -> f64 {
    let line = lines
        .iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in {lines:#?}"));
    let before = line.split(" ns per x").next().unwrap();
    let number = before.rsplit(' ').next().unwrap();
    assert!(number.starts_with(['+', '-']), "signed slope in {line:?}");
    number.parse().unwrap_or_else(|_| panic!("{line:?}"))
}

#[test]
fn table_bins_a_growing_series_by_x_and_fits_its_slope() {
    let text = render(&irqfd_record(), Format::Table);
    let lines = section_lines(&text, GROWTH_TITLE);
    let header = lines
        .iter()
        .map(|l| table_cells(l))
        .find(|cells| cells.first() == Some(&"x"))
        .expect("bin table header");
    assert_eq!(
        header,
        ["x", "n", "mean (us)", "p50 (us)", "p99 (us)", "max (us)"]
    );
    let rows: Vec<Vec<&str>> = lines
        .iter()
        .map(|l| table_cells(l))
        .filter(|cells| cells.len() == 6 && cells[0].starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 10, "{lines:#?}");
    assert_eq!(rows[0][..2], ["0-99", "100"]);
    assert_eq!(rows[9][..2], ["900-999", "100"]);

    // Bins go up in x, and with 200 ns of growth per bin against 300 ns of noise, their
    // medians go up with them.
    let lows: Vec<u64> = rows
        .iter()
        .map(|r| r[0].split('-').next().unwrap().parse().unwrap())
        .collect();
    assert!(lows.windows(2).all(|w| w[0] < w[1]), "{lows:?}");
    let medians: Vec<f64> = rows.iter().map(|r| r[3].parse().unwrap()).collect();
    assert!(medians.windows(2).all(|w| w[0] < w[1]), "{medians:?}");
    assert!((medians[0] - 10.1).abs() < 0.1, "{medians:?}");

    let least_squares = slope(&lines, "least squares over all 1000 samples:");
    assert!((least_squares - 2.0).abs() < 0.1, "{least_squares}");
    let robust = slope(&lines, "slope of the bin medians:");
    assert!((robust - 2.0).abs() < 0.1, "{robust}");
    let fit = lines.iter().find(|l| l.contains("least squares")).unwrap();
    assert!(fit.contains("intercept 10.0 us"), "{fit}");
    assert!(fit.contains("R^2 0.9"), "{fit}");
    assert!(
        !text.contains("driven by outliers"),
        "agreeing slopes need no verdict"
    );
    assert!(!text.contains('\x1b'), "no terminal escape codes");

    let md = render(&irqfd_record(), Format::Md);
    let section = after(
        &md,
        "### How register grows with irqfds already registered in this VM (x), at irqfds=1000\n",
    );
    assert!(section.contains("| x | n | mean (us) | p50 (us) | p99 (us) | max (us) |"));
    assert!(section.contains("| 0-99 | 100 |"), "{section}");
    assert!(section.contains("- least squares over all 1000 samples: +"));
    assert!(section.contains("- slope of the bin medians: +"));
}

#[test]
fn slow_outliers_tilt_the_least_squares_line_and_the_section_says_so() {
    let mut run = irqfd_record();
    let series = &mut run.points[0].series[0];
    // Ten registrations at the highest x that took 10 ms: the line through all samples
    // climbs steeply, the bin medians do not move.
    series.samples_ns.extend([10_000_000; 10]);
    series.sample_x.extend([999; 10]);
    let text = render(&run, Format::Table);
    let lines = section_lines(&text, GROWTH_TITLE);
    let least_squares = slope(&lines, "least squares over all 1010 samples:");
    let robust = slope(&lines, "slope of the bin medians:");
    assert!(least_squares > 50.0, "{least_squares}");
    assert!((robust - 2.0).abs() < 0.1, "{robust}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("the mean is driven by outliers")
                && l.contains("trust the slope of the bin medians")),
        "{lines:#?}"
    );
}

#[test]
fn few_distinct_x_give_few_bins_and_an_unnamed_x_is_called_x() {
    let mut run = irqfd_record();
    let series = &mut run.points[0].series[0];
    series.sample_x_is.clear();
    series.sample_x = (0..1_000).map(|i| if i < 500 { 0 } else { 10 }).collect();
    let text = render(&run, Format::Table);
    let lines = section_lines(&text, "how register grows with x, at irqfds=1000");
    let ranges: Vec<String> = lines
        .iter()
        .map(|l| table_cells(l))
        .filter(|cells| cells.len() == 6 && cells[1] == "500")
        .map(|cells| cells[0].to_string())
        .collect();
    // Eleven whole numbers from 0 to 10 split six and five.
    assert_eq!(ranges, ["0-5", "6-10"], "{lines:#?}");
    // 500 samples at x = 0 and 500 at x = 10 that are 1 us apart: 100 ns per x, which the
    // medians give too because each bin sits at its samples' x, not at its middle.
    let least_squares = slope(&lines, "least squares over all 1000 samples:");
    let robust = slope(&lines, "slope of the bin medians:");
    assert!((least_squares - 100.0).abs() < 5.0, "{least_squares}");
    assert!((robust - 100.0).abs() < 5.0, "{robust}");
}

#[test]
fn x_values_that_do_not_pair_with_the_samples_are_not_binned() {
    let mut run = irqfd_record();
    run.points[0].series[0].sample_x.pop();
    let text = render(&run, Format::Table);
    let lines = section_lines(&text, GROWTH_TITLE);
    assert_eq!(lines, ["  not binned: 999 x values for 1000 samples"]);
}

#[test]
fn series_notes_follow_the_latency_table() {
    let text = render(&irqfd_record(), Format::Table);
    let note = "note (irqfds=1000, register): RLIMIT_NOFILE 20000 applies per fd table: \
                9 threads held 174000 irqfds";
    let latency = after(&text, "\nlatency\n");
    assert!(latency.contains(note), "{latency}");
    let note_at = text.find(note).unwrap();
    assert!(
        text.find("mean (us)").unwrap() < note_at && note_at < text.find(GROWTH_TITLE).unwrap(),
        "the note sits between the latency table and the growth section:\n{text}"
    );

    let md = render(&irqfd_record(), Format::Md);
    let latency = after(&md, "### Latency\n");
    assert!(latency.contains(
        "\n\n- irqfds=1000, register: RLIMIT_NOFILE 20000 applies per fd table: 9 threads held \
         174000 irqfds\n"
    ));

    let plain = render(&record(), Format::Table);
    assert!(!plain.contains("note ("), "no notes, no note lines");
}

#[test]
fn the_vcpu_ratio_column_is_hidden_only_when_no_point_ran_vcpus() {
    for format in [Format::Table, Format::Md] {
        let without = render(&irqfd_record(), format);
        assert!(!without.contains("vCPU/CPU"), "{without}");
        assert!(without.contains("mean (us)"), "{without}");
        assert!(render(&record(), format).contains("vCPU/CPU"));
    }
    let table = render(&irqfd_record(), Format::Table);
    let row = table
        .lines()
        .map(table_cells)
        .find(|cells| cells.first() == Some(&"1000") && cells.get(1) == Some(&"register"))
        .expect("the strategy follows the swept value directly");
    assert_eq!(row.len(), 11, "{row:?}");
    assert_eq!(row[2], "1000", "n");

    let md = render(&irqfd_record(), Format::Md);
    let header = md
        .lines()
        .find(|l| l.starts_with("| irqfds |"))
        .expect("latency header");
    assert_eq!(header.matches('|').count(), 12, "eleven columns: {header}");

    // CSV keeps its columns whatever the ratio.
    let csv = render(&irqfd_record(), Format::Csv);
    assert_eq!(csv.lines().next().unwrap(), crate::csv::header().join(","));
    assert_eq!(csv_fields(csv.lines().nth(1).unwrap())[3], "0");
}

#[test]
fn a_series_without_x_has_no_growth_section() {
    let mut run = irqfd_record();
    run.points[0].series.push(Series {
        name: "unregister".into(),
        ..series("unregister", vec![3_000; 10], Vec::new())
    });
    let text = render(&run, Format::Table);
    assert_eq!(text.matches("grows with").count(), 1, "{text}");
    assert!(!text.contains("how unregister grows"));
    for format in [Format::Table, Format::Md] {
        let plain = render(&record(), format);
        assert!(!plain.to_lowercase().contains("grows with"), "{plain}");
    }
}

/// A pipe mutex whose holder slept in a userfault while three writers queued, and a lock
/// whose holder was never identified.
fn explained_record() -> RunRecord {
    use vmscale_run::findings::{
        ActivityShare, HeldAcrossSleep, Holder, HolderActivity, LockHolders,
    };
    let share = |activity, detail: &str, wait_ns| ActivityShare {
        activity,
        detail: detail.into(),
        wait_ns,
    };
    let pipe = LockHolders {
        lock_addr: 0xffff_8881_0000_1000,
        name: "mutex in anon_pipe_write".into(),
        kind: "mutex".into(),
        waits: 3,
        total_wait_ns: 612_000_000,
        waiter_count: 3,
        waiters: Vec::new(),
        holders: vec![Holder {
            comm: "vmscale".into(),
            pid: 4242,
            holds: 1,
            shared_holds: 0,
            waited_behind_ns: 606_000_000,
            activity: vec![
                share(HolderActivity::Asleep, "handle_userfault", 600_000_000),
                share(HolderActivity::Runnable, "", 6_000_000),
            ],
            ipis_sent: 0,
        }],
        activity: vec![
            share(HolderActivity::Asleep, "handle_userfault", 600_000_000),
            share(HolderActivity::Runnable, "", 6_000_000),
            share(HolderActivity::Handoff, "", 6_000_000),
        ],
        held_across_sleep: vec![HeldAcrossSleep {
            holder_comm: "vmscale".into(),
            holder_pid: 4242,
            function: "handle_userfault".into(),
            stack: vec!["handle_userfault+0x366".into()],
            holds: 1,
            slept_ns: 200_000_000,
            held_ns: 204_000_000,
            held_at_least: false,
            waiters: 3,
            waiter_wait_ns: 600_000_000,
        }],
        exact_holds: false,
        more_holders: Vec::new(),
    };
    let unknown = LockHolders {
        lock_addr: 0xffff_8881_0000_2000,
        name: "rwsem (write) in __x64_sys_munmap".into(),
        kind: "rwsem".into(),
        waits: 1,
        total_wait_ns: 1_500_000,
        waiter_count: 1,
        waiters: Vec::new(),
        holders: Vec::new(),
        activity: vec![share(
            HolderActivity::Unknown,
            "no wakeup names the releaser",
            1_500_000,
        )],
        held_across_sleep: Vec::new(),
        exact_holds: false,
        more_holders: Vec::new(),
    };
    let mut record = traced_record();
    record.trace.as_mut().unwrap().holders = vec![pipe, unknown];
    record
}

#[test]
fn table_explains_each_lock_in_one_numbered_sentence_then_its_holders() {
    let text = render(&explained_record(), Format::Table);
    let section = after(
        &text,
        "explain: what the holders of contended sleeping locks were doing\n",
    );
    let lines: Vec<&str> = section.lines().collect();
    assert_eq!(
        lines[0],
        "  1. mutex in anon_pipe_write: 3 waiters waited 612 ms in total, 98% of it while \
         the holder vmscale/4242 slept in handle_userfault (held 204 ms)"
    );
    assert_eq!(
        lines[1],
        "  2. rwsem (write) in __x64_sys_munmap: 1 waiter waited 1.5 ms in total, 100% of it \
         while the holder is unknown (no wakeup names the releaser)"
    );
    assert!(
        section.contains(
            "1. wait split: asleep in handle_userfault 98%, runnable (not on a CPU) 1.0%, \
             handoff between holders 1.0%"
        ),
        "{section}"
    );
    assert!(section.contains(
        "held across a sleep: vmscale/4242 slept 200 ms in handle_userfault while holding it \
         (1 hold, held 204 ms); 3 waiters waited 600 ms meanwhile"
    ));
    let row = section
        .lines()
        .find(|l| l.starts_with('|') && l.contains("vmscale/4242 "))
        .expect("a holder row");
    let cells = table_cells(row);
    assert_eq!(cells[1], "1");
    assert_eq!(cells[2], "606 ms");
    assert!(
        cells[3].starts_with("asleep in handle_userfault 99"),
        "{cells:?}"
    );
}

#[test]
fn markdown_explains_locks_with_numbered_sentences_and_consistent_tables() {
    let text = render(&explained_record(), Format::Md);
    let section = after(
        &text,
        "#### Explain: what the holders of contended sleeping locks were doing\n",
    );
    assert!(
        section.starts_with(
            "\n1. mutex in anon_pipe_write: 3 waiters waited 612 ms in total, 98% of it while the \
         holder vmscale/4242 slept in handle_userfault (held 204 ms)\n2. "
        ),
        "{section}"
    );
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 3, "header, alignment, one holder: {section}");
    assert!(rows.iter().all(|r| r.matches('|').count() == 5), "{rows:?}");
    assert!(
        rows[2].starts_with("| `vmscale/4242` | 1 | 606 ms |"),
        "{rows:?}"
    );
}

#[test]
fn a_trace_without_sleeping_lock_waits_has_no_explain_section() {
    for format in [Format::Table, Format::Md] {
        let text = render(&traced_record(), format);
        assert!(!text.to_lowercase().contains("explain:"), "{text}");
    }
}

#[test]
fn holders_survive_json_and_old_records_without_them_still_load() {
    let record = explained_record();
    let json = render(&record, Format::Json);
    let back: RunRecord = serde_json::from_str(&json).unwrap();
    let holders = &back.trace.unwrap().holders;
    assert_eq!(holders.len(), 2);
    assert_eq!(holders[0].held_across_sleep[0].function, "handle_userfault");
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    value["trace"].as_object_mut().unwrap().remove("holders");
    let old: RunRecord = serde_json::from_value(value).unwrap();
    assert!(old.trace.unwrap().holders.is_empty());
}

/// Two memslot phases whose update ioctl slows with N because it waits for a CPU, and
/// kvm->mmu_lock contended by writers only.
fn breakdown_record() -> RunRecord {
    use vmscale_run::findings::{
        Component, ComponentKind, ModeWaits, OperationBreakdown, PhaseBreakdown, SpinLockWaits,
        Waker,
    };
    let part = |kind, detail: &str, total_ns, operations| Component {
        cpu_holders: Vec::new(),
        what_if: None,
        wakers: Vec::new(),
        waits_for: String::new(),
        kind,
        detail: detail.into(),
        total_ns,
        operations,
    };
    let ioctl =
        |total_ns: u64, components: Vec<Component>, wakers: Vec<Waker>| OperationBreakdown {
            what_if_together: Vec::new(),
            operation: "ioctl".into(),
            syscall: 16,
            count: 60,
            latency: Summary::from_samples(&[total_ns / 60; 60]),
            total_ns,
            components,
            wakers,
        };
    let small = PhaseBreakdown {
        label: "memslot vcpus=1 strategy=pause-all".into(),
        pid: 870,
        comm: "vmscale".into(),
        duration_ns: 20_000_000,
        operations: vec![ioctl(
            600_000,
            vec![part(ComponentKind::OnCpu, "", 600_000, 60)],
            Vec::new(),
        )],
    };
    let big = PhaseBreakdown {
        label: "memslot vcpus=4 strategy=pause-all".into(),
        pid: 870,
        comm: "vmscale".into(),
        duration_ns: 90_000_000,
        operations: vec![ioctl(
            10_800_000,
            vec![
                part(ComponentKind::Runnable, "", 4_320_000, 50),
                part(ComponentKind::OnCpu, "", 3_780_000, 60),
                part(
                    ComponentKind::Lock,
                    "rwlock (write) in kvm_mmu_free_roots",
                    2_160_000,
                    12,
                ),
                part(ComponentKind::Asleep, "(no stack)", 540_000, 3),
            ],
            vec![Waker {
                comm: "kworker/0:1".into(),
                pid: 21,
                doing: "running, itself woken by vmscale/870".into(),
                wakeups: 3,
                slept_ns: 540_000,
                tasks: 0,
            }],
        )],
    };
    let write = Summary::from_samples(&[40_000, 40_000, 80_000]);
    let mmu = SpinLockWaits {
        lock_addr: 0xffff_c900_0000_1000,
        name: "rwlock (write) in kvm_mmu_free_roots".into(),
        kind: "rwlock".into(),
        waits: 3,
        total_wait_ns: 160_000,
        modes: vec![ModeWaits {
            mode: "write".into(),
            waits: write,
            total_wait_ns: 160_000,
        }],
        writer_waits_overtaken: 0,
        reads_during_writer_waits: 0,
        open_waits: 0,
    };
    let mut record = traced_record();
    let trace = record.trace.as_mut().unwrap();
    trace.breakdown = vec![small, big];
    trace.spinlocks = vec![mmu];
    record
}

#[test]
fn table_explains_each_phase_slowest_first_then_tabulates_components_per_call() {
    let text = render(&breakdown_record(), Format::Table);
    let section = after(&text, "explain: where the measured operations' time went\n");
    let lines: Vec<&str> = section.lines().collect();
    assert_eq!(
        lines[0],
        "  1. memslot vcpus=4 strategy=pause-all: the ioctl call took 180 us on average \
         (60 calls): 40% runnable, 35% on CPU, 20% waiting for rwlock (write) in \
         kvm_mmu_free_roots; woken 3 times by kworker/0:1/21 (running, itself woken by \
         vmscale/870)"
    );
    assert_eq!(
        lines[1],
        "  2. memslot vcpus=1 strategy=pause-all: the ioctl call took 10.0 us on average \
         (60 calls): 100% on CPU"
    );
    // Rows in run order, each component as a per-call mean.
    let rows: Vec<Vec<&str>> = section
        .lines()
        .filter(|l| l.starts_with('|') && l.contains("memslot"))
        .map(table_cells)
        .collect();
    assert_eq!(rows.len(), 2, "{section}");
    assert_eq!(rows[0][0], "memslot vcpus=1 strategy=pause-all");
    assert_eq!(
        &rows[1][1..],
        [
            "ioctl", "60", "180 us", "180 us", "63.0 us", "72.0 us", "36.0 us", "9.0 us", "0 us",
            "0 us"
        ]
    );
}

#[test]
fn spinning_locks_say_the_holder_is_unknown_and_split_waits_by_mode() {
    let text = render(&breakdown_record(), Format::Table);
    let section = after(
        &text,
        "explain: contended spinning locks (a spinning waiter is not woken by the holder, so \
         the trace cannot name who held them)\n",
    );
    let first = section.lines().next().unwrap();
    assert_eq!(
        first,
        "  1. rwlock (write) in kvm_mmu_free_roots: 3 contended waits, 160 us in total; writers \
         3: p50 40.0 us, p99 80.0 us, max 80.0 us; no contended reader was traced"
    );
    let row = section
        .lines()
        .find(|l| l.starts_with('|') && l.contains("kvm_mmu_free_roots"))
        .expect("a lock row");
    assert_eq!(
        &table_cells(row)[1..],
        ["write", "3", "40.0 us", "80.0 us", "80.0 us", "160 us"]
    );
}

#[test]
fn markdown_breakdown_and_spinlock_tables_have_constant_column_counts() {
    let text = render(&breakdown_record(), Format::Md);
    let breakdown = after(
        &text,
        "#### Explain: where the measured operations' time went\n",
    );
    assert!(
        breakdown
            .starts_with("\n1. memslot vcpus=4 strategy=pause-all: the ioctl call took 180 us"),
        "{breakdown}"
    );
    let (breakdown, spin) = breakdown
        .split_once("#### Explain: contended spinning locks\n")
        .expect("the spinning-lock part follows");
    let rows: Vec<&str> = breakdown.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 4, "header, alignment, two phases: {rows:?}");
    assert!(
        rows.iter().all(|r| r.matches('|').count() == 12),
        "{rows:?}"
    );
    assert!(rows[3].contains("| `ioctl` |"), "{rows:?}");
    assert!(spin.contains("cannot name who held"), "{spin}");
    let rows: Vec<&str> = spin.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r.matches('|').count() == 8), "{rows:?}");
}

#[test]
fn breakdown_and_spinlocks_survive_json_and_old_records_without_them_still_load() {
    let json = render(&breakdown_record(), Format::Json);
    let back: RunRecord = serde_json::from_str(&json).unwrap();
    let trace = back.trace.unwrap();
    assert_eq!(trace.breakdown[1].operations[0].components.len(), 4);
    assert_eq!(trace.spinlocks[0].modes[0].mode, "write");
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let section = value["trace"].as_object_mut().unwrap();
    section.remove("breakdown");
    section.remove("spinlocks");
    let old: RunRecord = serde_json::from_value(value).unwrap();
    let old = old.trace.unwrap();
    assert!(old.breakdown.is_empty() && old.spinlocks.is_empty());
}

/// Two measured phases, the second sending TLB-flush IPIs to four CPUs from five sites, the
/// first only rescheduling IPIs.
fn ipi_record() -> RunRecord {
    use vmscale_run::{IpiPhase, IpiSender, IpiSite};
    let site = |callsite: &str, callback: &str, ipis| IpiSite {
        callsite: callsite.into(),
        callback: callback.into(),
        reason: String::new(),
        ipis,
    };
    let quiet = IpiPhase {
        label: "mlock mode=pool".into(),
        duration_ns: 2_000_000,
        ipis: 3,
        csd_queued: 0,
        by_target: BTreeMap::from([("1".to_string(), 3), ("2".to_string(), 0)]),
        by_site: vec![site("ttwu_queue_wakelist", "", 3)],
        by_sender: vec![IpiSender {
            pid: 4242,
            comm: "vmscale".into(),
            ipis: 3,
        }],
        ..IpiPhase::default()
    };
    let storm = IpiPhase {
        label: "mlock mode=map".into(),
        duration_ns: 45_600_000,
        ipis: 12_345,
        csd_queued: 6_000,
        by_target: (0..4).map(|cpu| (cpu.to_string(), 3_000)).collect(),
        by_site: vec![
            site("smp_call_function_many_cond", "flush_tlb_func", 9_000),
            site("native_flush_tlb_multi", "flush_tlb_func", 3_000),
            site("ttwu_queue_wakelist", "", 300),
            site("send_call_function_single_ipi", "do_sync_core", 40),
            site("arch_send_call_function_ipi_mask", "nohz_csd_func", 5),
        ],
        by_sender: vec![
            IpiSender {
                pid: 4242,
                comm: "vmscale".into(),
                ipis: 12_000,
            },
            IpiSender {
                pid: 77,
                comm: "kworker/3:1".into(),
                ipis: 345,
            },
        ],
        victim_work: vec![vmscale_run::findings::IpiVictimWork {
            function: "flush_tlb_func".into(),
            calls: 12_000,
            total_ns: 9_000_000,
        }],
        ..IpiPhase::default()
    };
    let mut record = explained_record();
    let trace = record.trace.as_mut().unwrap();
    trace.ipis = vec![quiet, storm];
    // As recorded on a kernel with them: the senders' and the cross-CPU calls' events.
    trace.events.extend(
        [
            "ipi:ipi_send_cpu",
            "ipi:ipi_send_cpumask",
            "csd:csd_queue_cpu",
            "csd:csd_function_entry",
            "csd:csd_function_exit",
        ]
        .map(String::from),
    );
    record
}

#[test]
fn table_lists_ipis_per_phase_between_the_locks_and_their_explanation() {
    let text = render(&ipi_record(), Format::Table);
    let trace = after(&text, "\nkernel trace\n");
    let ipis = after(trace, "\nIPIs per measured phase\n");
    let lines: Vec<&str> = ipis.lines().collect();
    let header = table_cells(
        lines
            .iter()
            .find(|l| l.contains("cross-CPU calls"))
            .expect("IPI table header"),
    );
    assert_eq!(
        header,
        [
            "phase",
            "duration",
            "IPIs",
            "cross-CPU calls",
            "target CPUs",
            "top sites (call site -> callback, or reason)",
            "top senders",
            "run on the targets"
        ]
    );
    let row = |phase: &str| {
        lines
            .iter()
            .map(|l| table_cells(l))
            .find(|cells| cells.len() == header.len() && cells[0] == phase)
            .unwrap_or_else(|| panic!("no row for {phase}:\n{ipis}"))
    };
    let storm = row("mlock mode=map");
    assert_eq!(storm[1..5], ["45.6 ms", "12.3k", "6.00k", "4"], "{storm:?}");
    assert_eq!(
        storm[5],
        "smp_call_function_many_cond -> flush_tlb_func: 9.00k; native_flush_tlb_multi -> \
         flush_tlb_func: 3.00k; ttwu_queue_wakelist -> reschedule: 300; 2 more"
    );
    assert_eq!(storm[6], "vmscale/4242: 12.0k; kworker/3:1/77: 345");
    assert_eq!(storm[7], "flush_tlb_func: 9.0 ms in 12.0k");
    let quiet = row("mlock mode=pool");
    assert_eq!(quiet[7], "");
    assert_eq!(quiet[4], "1", "a CPU that received nothing is not a target");
    // After the lock sections, before the holders' explanation.
    let at = |marker: &str| text.find(marker).unwrap_or_else(|| panic!("{marker}"));
    assert!(at("worst locks: who waited") < at("IPIs per measured phase"));
    assert!(at("IPIs per measured phase") < at("explain: what the holders"));
}

/// A trace from a kernel with only ipi_raise and the targets' handlers: IPIs are named by
/// reason, the handlers fill the targets' column, and a sentence says what is unknown.
#[test]
fn ipis_counted_from_ipi_raise_are_named_by_reason_and_say_so() {
    use vmscale_run::findings::IpiVictimWork;
    use vmscale_run::{IpiPhase, IpiSite};
    let mut record = explained_record();
    record.trace.as_mut().unwrap().ipis = vec![IpiPhase {
        label: IpiPhase::WHOLE_TRACE.into(),
        duration_ns: 1_000_000_000,
        ipis: 250,
        counted_from: "ipi_raise".into(),
        by_target: BTreeMap::from([("1".to_string(), 250)]),
        by_site: vec![IpiSite {
            callsite: String::new(),
            callback: String::new(),
            reason: "Function call interrupts".into(),
            ipis: 250,
        }],
        handlers: vec![IpiVictimWork {
            function: "Function call interrupts".into(),
            calls: 250,
            total_ns: 2_500_000,
        }],
        ..IpiPhase::default()
    }];
    let text = render(&record, Format::Table);
    let ipis = after(&text, "\nIPIs per measured phase\n");
    assert!(
        ipis.contains("Function call interrupts: 250"),
        "the site is the reason: {ipis}"
    );
    assert!(
        ipis.contains("Function call interrupts: 2.5 ms in 250"),
        "{ipis}"
    );
    assert!(
        ipis.contains("IPIs counted from ipi_raise")
            && ipis.contains("call sites and callbacks are unknown"),
        "{ipis}"
    );
    let row = ipis
        .lines()
        .find(|l| l.contains("| whole trace"))
        .unwrap_or_else(|| panic!("no row: {ipis}"));
    assert!(!row.contains(" -> "), "no invented call site: {row}");
    // No csd events: the cross-CPU calls are unknown, not 0.
    assert!(row.contains(" unknown |"), "{row}");
    assert!(
        ipis.contains("cross-CPU calls unknown: they need csd:csd_queue_cpu"),
        "{ipis}"
    );
}

#[test]
fn markdown_lists_ipis_per_phase_in_a_table_of_constant_width() {
    let text = render(&ipi_record(), Format::Md);
    let ipis = after(&text, "\n#### IPIs per measured phase\n\n");
    let rows: Vec<&str> = ipis.lines().take_while(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 2 + 2, "header, alignment, two phases: {ipis}");
    assert!(rows.iter().all(|r| r.matches('|').count() == 9), "{rows:?}");
    assert_eq!(
        rows[1],
        "| :--- | ---: | ---: | ---: | ---: | :--- | :--- | :--- |"
    );
    assert!(
        rows[3].starts_with("| mlock mode=map | 45.6 ms | 12.3k | 6.00k | 4 | "),
        "{rows:?}"
    );
    assert!(rows[3].contains("vmscale/4242: 12.0k"), "{rows:?}");
    assert!(
        text.find("#### IPIs per measured phase").unwrap()
            < text.find("#### Explain: what the holders").unwrap()
    );
}

#[test]
fn a_trace_without_ipis_has_no_ipi_section_in_any_format() {
    let record = explained_record();
    for format in [Format::Table, Format::Md] {
        assert!(!render(&record, format).contains("IPIs per measured phase"));
    }
    assert!(!crate::html::render_html(&record).contains("IPIs per measured phase"));
}

/// The titles of the trace section's parts, in order, as `marker` starts them in `text`
/// (for HTML, the heading tag, whose attributes are skipped).
fn trace_titles(text: &str, marker: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(marker))
        .map(|t| match marker {
            "<h3" => t.split_once('>').map_or("", |(_, title)| title),
            _ => t,
        })
        .map(|t| t.split(['<', '(']).next().unwrap().trim().to_lowercase())
        .map(|t| t.replace("&#39;", "'"))
        .filter(|t| {
            ["lock contention", "worst locks", "ipis", "explain"]
                .iter()
                .any(|p| t.starts_with(p))
        })
        .collect()
}

#[test]
fn every_format_has_the_same_trace_parts_in_the_same_order() {
    let mut record = ipi_record();
    let trace = record.trace.as_mut().unwrap();
    let breakdown = breakdown_record().trace.unwrap();
    trace.breakdown = breakdown.breakdown;
    trace.spinlocks = breakdown.spinlocks;
    let table = trace_titles(&render(&record, Format::Table), "");
    assert_eq!(table.len(), 6, "{table:?}");
    let markdown = trace_titles(&render(&record, Format::Md), "#### ");
    let html = trace_titles(&crate::html::render_html(&record), "<h3");
    assert_eq!(markdown, table);
    assert_eq!(html, table);
}
