//! The recorder against the real kernel's tracefs. Needs root; fails (never skips) without.

use std::path::{Path, PathBuf};

use vmscale_trace::record::recorder::{RecordConfig, Recording};
use vmscale_trace::record::tracefs::{self, Instance};

fn mount() -> PathBuf {
    tracefs::mount_point().unwrap_or_else(|e| panic!("these tests need tracefs as root: {e}"))
}

fn instances(mount: &Path) -> Vec<String> {
    std::fs::read_dir(mount.join("instances"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn mine(mount: &Path) -> Vec<String> {
    let prefix = format!("vmscale-{}-", std::process::id());
    instances(mount)
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmscale-trace-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Forks short processes: scheduler events, wakeups and (usually) lock contention.
fn busy_work() {
    let children: Vec<_> = (0..40)
        .map(|_| std::process::Command::new("true").spawn().unwrap())
        .collect();
    for mut c in children {
        c.wait().unwrap();
    }
}

// One test function: the checks share the process's instance namespace, and running them
// in parallel would make "no instance of mine is left" racy.
#[test]
fn recording_writes_the_trace_directory_and_leaves_nothing_behind() {
    let mount = mount();

    // 1. A full recording.
    let dir = scratch("full");
    let mut rec = Recording::prepare(&mount, &dir, RecordConfig::default()).unwrap();
    assert_eq!(
        mine(&mount).len(),
        1,
        "exactly one private instance while recording"
    );
    rec.set_on(true).unwrap();
    rec.mark("vmscale-test marker").unwrap();
    busy_work();
    rec.set_on(false).unwrap();
    let meta = rec.finish().unwrap();
    assert!(
        mine(&mount).is_empty(),
        "instance left after finish: {:?}",
        mine(&mount)
    );
    assert_eq!(meta.clock, "mono");
    assert_eq!(meta.windows.len(), 1);
    assert!(meta.windows[0].1 > meta.windows[0].0);
    let total_pages: u64 = meta.pages.values().sum();
    assert!(total_pages > 0, "no pages recorded");
    for cpu in &meta.cpus {
        let raw = std::fs::metadata(dir.join(format!("cpu{cpu}.raw")))
            .unwrap()
            .len();
        assert_eq!(
            raw % meta.page_size as u64,
            0,
            "cpu{cpu}.raw is not whole pages"
        );
        assert_eq!(raw / meta.page_size as u64, meta.pages[&cpu.to_string()]);
    }
    for file in [
        "meta.json",
        "header_page",
        "header_event",
        "kallsyms",
        "formats/lock/contention_begin",
        "formats/ftrace/kernel_stack",
        "formats/ftrace/print",
    ] {
        assert!(dir.join(file).exists(), "{file} missing");
    }
    let header_page = std::fs::read_to_string(dir.join("header_page")).unwrap();
    assert!(
        header_page.contains("field: char data;"),
        "header_page truncated: {header_page}"
    );
    let format = std::fs::read_to_string(dir.join("formats/lock/contention_begin")).unwrap();
    assert!(format.contains("print fmt:"), "format truncated: {format}");
    std::fs::remove_dir_all(&dir).unwrap();

    // 2. Dropped without finish (an error path): the instance still goes.
    let dir = scratch("dropped");
    let mut rec = Recording::prepare(&mount, &dir, RecordConfig::default()).unwrap();
    rec.set_on(true).unwrap();
    drop(rec);
    assert!(mine(&mount).is_empty(), "instance left after drop");
    std::fs::remove_dir_all(&dir).unwrap();

    // 3. An event this kernel lacks: a clear error, and no instance left.
    let dir = scratch("bad-event");
    let config = RecordConfig {
        events: vec!["lock:no_such_event".into()],
        ..RecordConfig::default()
    };
    let e = Recording::prepare(&mount, &dir, config)
        .err()
        .expect("must fail");
    assert!(
        e.to_string().contains("lock:no_such_event does not exist"),
        "{e}"
    );
    assert!(mine(&mount).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();

    // 4. Instances of a dead vmscale (SIGKILLed) are removed by remove_stale_instances,
    //    including one whose pid now belongs to a live process (ours, started at another
    //    time); instances of live vmscale processes are not. Creating an instance removes
    //    nothing by itself: the caller removes and says so.
    let me = vmscale_sys::ProcessStamp::current();
    let reused = mount.join(format!(
        "instances/vmscale-{}-{}-0",
        me.pid,
        me.start_ticks + 1
    ));
    let legacy_dead = mount.join("instances/vmscale-4194300-0");
    std::fs::create_dir(&reused).unwrap();
    std::fs::create_dir(&legacy_dead).unwrap();
    let live = Instance::create(&mount).unwrap();
    assert!(
        reused.exists() && legacy_dead.exists(),
        "create removed something"
    );
    let removed = vmscale_trace::record::tracefs::remove_stale_instances(&mount).unwrap();
    assert!(!reused.exists(), "stale instance of a reused pid survived");
    assert!(
        !legacy_dead.exists(),
        "stale instance of a dead pid survived"
    );
    for gone in [&reused, &legacy_dead] {
        let name = gone.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            removed.contains(&name),
            "{name} not reported in {removed:?}"
        );
    }
    let other = Instance::create(&mount).unwrap();
    assert!(live.path().exists() && other.path().exists());
    drop((live, other));
    assert!(mine(&mount).is_empty());
}
