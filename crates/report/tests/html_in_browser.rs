//! The HTML report opened in a real headless browser: it must render its charts, take a
//! screenshot of some substance and log no console error.
//!
//! Needs Debian's `chromium` at /usr/bin/chromium (or on PATH); `.ci/run` installs it. The
//! test fails rather than skips without it, so a missing browser cannot pass unnoticed.
//! The screenshot stays in `target/html-report-test/report.png` for people to look at.

#[path = "support/fixture.rs"]
mod fixture;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fixture::record;
use vmscale_report::html::render_html;

fn chromium() -> PathBuf {
    let candidates = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
    if let Some(found) = candidates.iter().map(PathBuf::from).find(|p| p.exists()) {
        return found;
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v chromium || command -v chromium-browser"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|p| !p.is_empty());
    match on_path {
        Some(path) => PathBuf::from(path),
        None => panic!(
            "chromium is missing: this test renders the HTML report in a real headless \
             browser. .ci/run installs it (apt-get install chromium)"
        ),
    }
}

/// Where the page and its screenshot go: kept under target/ for people to look at.
fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/html-report-test");
    std::fs::create_dir_all(&dir).expect("create the test output directory");
    dir.canonicalize()
        .expect("the test output directory exists")
}

fn run_chromium(page: &Path, extra: &[String]) -> Output {
    // A fresh profile per run, so no earlier state (or a lock from a crashed run) leaks in.
    let profile = std::env::temp_dir().join(format!(
        "vmscale-html-test-{}-{}",
        std::process::id(),
        extra.len()
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let output = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    output
}

/// Console messages and uncaught errors from the page, as chromium logs them.
/// The text after `marker`, which must be there.
fn after<'a>(text: &'a str, marker: &str) -> &'a str {
    text.split_once(marker)
        .unwrap_or_else(|| panic!("{marker:?} missing"))
        .1
}

fn console_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect()
}

/// One test runs the browser checks one after the other: two chromium instances started
/// by one process at once refused each other's profile directories here.
#[test]
fn the_report_renders_in_a_headless_browser_and_its_flame_graph_zooms() {
    the_report_renders();
    the_flame_graph_zooms_on_click_and_searches();
}

/// The fixture with a timed phase's breakdown: a sleep partly ended by a worker that was
/// itself woken, and runnable time behind a vCPU thread, for the off-CPU flame graph.
fn record_with_waits() -> vmscale_run::RunRecord {
    use vmscale_run::findings::{
        Component, ComponentKind, CpuHolder, OperationBreakdown, PhaseBreakdown, Waker,
        TIMED_SAMPLE,
    };
    let mut record = record();
    let component = |kind, detail: &str, total_ns| Component {
        kind,
        detail: detail.into(),
        total_ns,
        operations: 10,
        cpu_holders: Vec::new(),
        what_if: None,
        wakers: Vec::new(),
        waits_for: String::new(),
    };
    let mut asleep = component(ComponentKind::Asleep, "flush_workqueue", 3_000_000);
    asleep.wakers = vec![Waker {
        comm: "kworker/0:1".into(),
        pid: 7,
        doing: "running, itself woken by irqfd1/9".into(),
        wakeups: 10,
        slept_ns: 2_500_000,
        tasks: 0,
    }];
    let mut runnable = component(ComponentKind::Runnable, "", 1_000_000);
    runnable.cpu_holders = vec![CpuHolder {
        comm: "vcpu0".into(),
        pid: 11,
        ns: 1_000_000,
        subject: true,
    }];
    record
        .trace
        .as_mut()
        .expect("the fixture is traced")
        .breakdown
        .push(PhaseBreakdown {
            label: "memslot n=8".into(),
            pid: 42,
            comm: "vmscale".into(),
            duration_ns: 5_000_000,
            operations: vec![OperationBreakdown {
                operation: "sample".into(),
                syscall: TIMED_SAMPLE,
                count: 10,
                latency: None,
                total_ns: 5_000_000,
                components: vec![
                    component(ComponentKind::OnCpu, "", 1_000_000),
                    asleep,
                    runnable,
                ],
                wakers: Vec::new(),
                what_if_together: Vec::new(),
            }],
        });
    record
}

fn the_report_renders() {
    let dir = out_dir();
    let page = dir.join("report.html");
    let html = render_html(&record_with_waits());
    std::fs::write(&page, &html).expect("write report.html");

    let screenshot = dir.join("report.png");
    let _ = std::fs::remove_file(&screenshot);
    let shot = run_chromium(&page, &[format!("--screenshot={}", screenshot.display())]);
    let stderr = String::from_utf8_lossy(&shot.stderr);
    assert!(shot.status.success(), "chromium failed: {stderr}");
    let size = std::fs::metadata(&screenshot)
        .unwrap_or_else(|e| panic!("no screenshot at {}: {e}\n{stderr}", screenshot.display()))
        .len();
    assert!(
        size > 50_000,
        "screenshot is only {size} bytes: a blank page?"
    );
    assert!(
        console_errors(&stderr).is_empty(),
        "console errors: {:?}",
        console_errors(&stderr)
    );

    let dump = run_chromium(&page, &["--dump-dom".to_string()]);
    let dom = String::from_utf8_lossy(&dump.stdout);
    let stderr = String::from_utf8_lossy(&dump.stderr);
    assert!(
        dump.status.success(),
        "chromium --dump-dom failed: {stderr}"
    );
    // Scaling curve, a fit per series (three), five CDFs, one phase chart, five growth
    // charts, the timeline, the flame graph, the differential one and the off-CPU one.
    let svgs = dom.matches("<svg").count();
    assert_eq!(svgs, 19, "svg elements in the rendered DOM");
    // Each growth chart draws every point's interval, and the model with its band where
    // one fits.
    let fits = dom.matches(": p50 growth").count();
    assert_eq!(fits, 3, "growth charts");
    assert_eq!(dom.matches("with its 99% interval (bar)").count(), 3);
    assert!(dom.contains("Dashed: the linear (Amdahl) fit with its 99% band"));
    // The flame graph: every frame drawn (the root and 9 distinct paths), names escaped.
    let flame = after(&dom, "id=\"flame-on-cpu\"");
    let flame = &flame[..flame.find("</svg>").expect("the flame graph ends")];
    assert_eq!(flame.matches("class=\"fr\"").count(), 10, "{flame}");
    assert!(flame.contains("&lt;b&gt;not markup&lt;/b&gt;"));
    assert!(flame.contains("kvm_set_memslot (50 samples"));
    // The off-CPU graph: the root, whose time, the two waits, the worker and its two hops,
    // the vCPU thread that held the CPU; widths in time.
    let off = after(&dom, "id=\"flame-off-cpu\"");
    let off = &off[..off.find("</svg>").expect("the off-CPU graph ends")];
    assert_eq!(off.matches("class=\"fr\"").count(), 8, "{off}");
    assert!(off.contains("asleep in flush_workqueue (3.000 ms"), "{off}");
    assert!(off.contains("woken by kworker/0:1/7 (2.500 ms"), "{off}");
    assert!(off.contains("itself woken by irqfd1/9 (2.500 ms"), "{off}");
    assert!(off.contains("vcpu0/11 held the CPU (1.000 ms"), "{off}");
    let diff = after(&dom, "id=\"flame-diff\"");
    assert!(diff.contains("kvm_mmu_zap_all_fast (640 samples"), "{diff}");
    // The timeline: two CPU lanes' runs, five states, one wait and one hold.
    let timeline = after(&dom, "class=\"timeline\"");
    assert_eq!(timeline.matches("class=\"run\"").count(), 2);
    assert_eq!(timeline.matches("class=\"state\"").count(), 6);
    assert_eq!(timeline.matches("class=\"wait\"").count(), 1);
    assert_eq!(timeline.matches("class=\"hold\"").count(), 1);
    assert!(timeline.contains("holder 43: holds kvm-&gt;slots_lock for 1.7 ms"));
    assert!(
        dom.contains("latency by sweep value"),
        "scaling chart title"
    );
    assert!(dom.contains("kvm-&gt;slots_lock"), "contention table");
    assert!(dom.contains("pause-all n=8"), "IPI table");
    // The verdict comes first, right under the title, every detail of each finding in
    // rank order, its tag and lock names escaped.
    let body = after(&dom, "<body>");
    let first_heading = body.find("<h2").expect("a section heading");
    assert!(
        body[first_heading..].starts_with("<h2 id=\"verdict\">Verdict</h2>"),
        "the first section is not the verdict: {}",
        &body[first_heading..first_heading + 80]
    );
    let verdict = &body[first_heading..];
    let verdict = &verdict[..verdict.find("</ol>").expect("the findings list ends")];
    let findings: Vec<&str> = verdict.split("<li><strong>").skip(1).collect();
    assert_eq!(findings.len(), 2, "{verdict}");
    assert!(findings[0].starts_with("lock-wait</strong>: pause-all grows linearly"));
    assert!(findings[0].contains("waiting for kvm-&gt;slots_lock"));
    assert!(findings[0].contains("holder: vmscale/43 held it in 400 holds"));
    assert!(findings[0].contains("the fourth evidence line"));
    assert!(findings[1].starts_with("cpu-starvation</strong>: 21% of its time"));
    // The series named like a script stays text: the only script element is the flame
    // graphs' own.
    assert_eq!(
        dom.matches("<script").count(),
        1,
        "a script element was injected"
    );
    assert!(after(&dom, "<script>")
        .trim_start()
        .starts_with("(function () {"));
    assert!(dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(
        console_errors(&stderr).is_empty(),
        "console errors: {:?}",
        console_errors(&stderr)
    );
}

/// The flame graph in a real browser: clicking a frame zooms to it (it spans the graph,
/// frames outside it hide, its callers stay below), searching highlights and measures,
/// and clicking the root zooms back out.
fn the_flame_graph_zooms_on_click_and_searches() {
    let dir = out_dir();
    let page = dir.join("flame.html");
    let html = render_html(&record());
    // Click kvm_vm_ioctl as a person would, then search, and write down what the page
    // shows in attributes that --dump-dom prints.
    let probe = r#"<script>
(function () {
  var svg = document.getElementById('flame-on-cpu');
  function frame(name) { return svg.querySelector('g.fr[data-n="' + name + '"]'); }
  function width(name) { return +frame(name).querySelector('rect').getAttribute('width'); }
  var before = width('kvm_vm_ioctl');
  frame('kvm_vm_ioctl').querySelector('rect').dispatchEvent(new MouseEvent('click', {bubbles: true}));
  var out = document.body;
  out.setAttribute('data-before', before.toFixed(1));
  out.setAttribute('data-zoomed', svg.getAttribute('data-zoomed'));
  out.setAttribute('data-after', width('kvm_vm_ioctl').toFixed(1));
  out.setAttribute('data-callee', width('kvm_set_memslot').toFixed(1));
  out.setAttribute('data-guest', frame('[guest]').style.display);
  out.setAttribute('data-caller', frame('ioctl').style.opacity);
  out.setAttribute('data-label', frame('kvm_vm_ioctl').querySelector('text').textContent);
  svg.flameSearch('kvm_mmu');
  out.setAttribute('data-matched', svg.getAttribute('data-matched'));
  frame('all').querySelector('rect').dispatchEvent(new MouseEvent('click', {bubbles: true}));
  out.setAttribute('data-reset', width('kvm_vm_ioctl').toFixed(1) + ' ' + frame('[guest]').style.display + ' ' + svg.getAttribute('data-zoomed'));
  frame('kvm_vm_ioctl').querySelector('rect').dispatchEvent(new MouseEvent('click', {bubbles: true}));
})();
</script>"#;
    let html = html.replace("</body>", &format!("{probe}</body>"));
    std::fs::write(&page, &html).expect("write flame.html");
    let dump = run_chromium(&page, &["--dump-dom".to_string()]);
    let dom = String::from_utf8_lossy(&dump.stdout);
    let stderr = String::from_utf8_lossy(&dump.stderr);
    assert!(
        dump.status.success(),
        "chromium --dump-dom failed: {stderr}"
    );
    assert!(
        console_errors(&stderr).is_empty(),
        "console errors: {:?}",
        console_errors(&stderr)
    );
    let attr = |name: &str| -> String {
        let marker = format!("{name}=\"");
        after(&dom, &marker)
            .split('"')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let before: f64 = attr("data-before").parse().unwrap();
    let after_zoom: f64 = attr("data-after").parse().unwrap();
    // 50 of 680 samples, then the whole 1,180-unit width.
    assert!(
        (before - 50.0 / 680.0 * 1180.0).abs() < 2.0,
        "before zoom {before}"
    );
    assert!(after_zoom > 1170.0, "after zoom {after_zoom}");
    assert_eq!(attr("data-zoomed"), "true");
    let callee: f64 = attr("data-callee").parse().unwrap();
    assert!(
        (callee - after_zoom).abs() < 1.0,
        "its only callee spans it too: {callee}"
    );
    assert_eq!(
        attr("data-guest"),
        "none",
        "frames outside the zoomed one hide"
    );
    assert_eq!(attr("data-caller"), "0.5", "callers stay, faded");
    assert_eq!(attr("data-label"), "kvm_vm_ioctl");
    // kvm_mmu_zap_all_fast: 40 of 680 samples.
    assert_eq!(attr("data-matched"), "5.9");
    assert!(
        attr("data-reset").ends_with(" false"),
        "{}",
        attr("data-reset")
    );
    // A screenshot of the zoomed graph, for people.
    let flame_only = html.replace(
        "<body>",
        "<body><style>body > *:not(section.flame):not(script) { display: none; }</style>",
    );
    let zoomed_page = dir.join("flame-zoomed.html");
    std::fs::write(&zoomed_page, flame_only).unwrap();
    let screenshot = dir.join("flame.png");
    let _ = std::fs::remove_file(&screenshot);
    let shot = run_chromium(
        &zoomed_page,
        &[format!("--screenshot={}", screenshot.display())],
    );
    assert!(shot.status.success());
    assert!(std::fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0) > 5_000);
}
