//! The corpus's lock cases under `vmscale record --aggregate`: the kernel aggregates lock
//! waits, holders and the command's time in BPF maps instead of streaming every event
//! through tracefs, and the verdict must be the one the streamed trace gives (corpus.rs
//! checks the same labels on it): the same first cause, the same lock, the same holder
//! behaviour. A case without lock contention (the futex one) must blame no lock either.
//!
//! Needs root, BPF on tracepoints (tp_btf, the kernel's BTF) and a C compiler; fails, never
//! skips, without: a host where BPF is refused falls back to tracefs, which these tests
//! call a failure.

mod common;

use common::corpus::*;

/// The case recorded in aggregate mode, which it must really have been.
fn record_aggregated(case: &'static str) -> Recorded {
    let r = record(case, &["--aggregate"]);
    let trace = &r.run["trace"];
    assert!(
        trace["aggregate"].is_object(),
        "{case}: not aggregated (fell back to tracefs?): {}",
        r.run["warnings"]
    );
    let facts = &trace["aggregate"];
    eprintln!(
        "{case}: aggregate maps dropped {} events ({}), {} bytes of maps",
        facts["dropped"], facts["drops"], facts["map_bytes"]
    );
    // Nothing streamed: the trace directory holds the maps, not per-CPU pages.
    assert!(trace["lost_per_cpu"].as_object().unwrap().is_empty());
    r
}

#[test]
fn mutex_held_across_sleep() {
    let r = record_aggregated("mutex-held-across-sleep");
    r.assert_label("lock-wait", Some("pipe->mutex"), Some("sleeps"));
    let lock = r.top_lock();
    let d = r.describe();
    assert_eq!(lock.kind(), "mutex", "{d}");
    assert!(lock.waits_in(&["anon_pipe_write"]), "{d}");
    assert!(lock.wait_ns >= 600_000_000, "{d}");
    let holders = r.holders_of(&lock);
    assert!(
        waited_behind(holders, "repro-holder") >= lock.wait_ns * 8 / 10,
        "the faulting writer is not the holder: {d}"
    );
    assert!(
        activity_ns(holders, "asleep") >= lock.wait_ns * 8 / 10,
        "the holder was not asleep for most of the wait: {d}"
    );
    let sleep = holders["held_across_sleep"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["holder_comm"] == "repro-holder")
        .unwrap_or_else(|| panic!("no held-across-sleep of repro-holder: {d}"));
    assert_eq!(sleep["function"], "handle_userfault", "{sleep}");
    assert!(sleep["holds"].as_u64().unwrap() >= 5, "{sleep}");
}

#[test]
fn mmap_lock_convoy() {
    let r = record_aggregated("mmap-lock-convoy");
    r.assert_label("lock-wait", Some("mmap_lock"), Some("runs"));
    let lock = r.top_lock();
    let d = r.describe();
    assert_eq!(lock.kind(), "rwsem", "{d}");
    assert!(
        lock.mode_waits("write") >= 10 && lock.mode_waits("read") >= 10,
        "{d}"
    );
    assert!(lock.waits_in(&["vm_mmap_pgoff", "__vm_munmap"]), "{d}");
    assert!(lock.waits_in(&["__x64_sys_mincore", "do_mincore"]), "{d}");
    assert!(lock.wait_ns >= r.run_ns() / 10, "{d}");
    let holders = r.holders_of(&lock);
    assert!(activity_ns(holders, "asleep") <= lock.wait_ns / 10, "{d}");
    assert!(activity_ns(holders, "running") >= lock.wait_ns / 20, "{d}");
}

#[test]
fn spinlock_eventfd() {
    let r = record_aggregated("spinlock-eventfd");
    r.assert_label_among_the_first("lock-spin", Some("eventfd_ctx->wqh.lock"));
    let lock = r.top_lock();
    let d = r.describe();
    assert_eq!(lock.kind(), "spinlock", "{d}");
    assert!(lock.waits_in(&["eventfd_write", "eventfd_read"]), "{d}");
    assert!(
        lock.stacks_through(&["eventfd_write", "eventfd_read"]) >= 5_000,
        "{d}"
    );
    assert!(
        r.trace()["spinlocks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["lock_addr"] == lock.lock["lock_addr"]),
        "{d}"
    );
    assert!(
        r.own_lock_wait_ns(Some(SLEEPING_KINDS)) <= r.run_ns() / 100,
        "{d}"
    );
}

#[test]
fn mmap_lock_held_sending_ipis() {
    let r = record_aggregated("mmap-lock-held-sending-ipis");
    r.assert_label("lock-wait", Some("mmap_lock"), Some("sends-ipis"));
    let lock = r.top_lock();
    let d = r.describe();
    assert_eq!(lock.kind(), "rwsem", "{d}");
    assert!(lock.waits_in(&["do_mprotect_pkey"]), "{d}");
    assert!(lock.wait_ns >= r.run_ns() / 10, "{d}");
    let holders = r.holders_of(&lock);
    assert!(
        waited_behind(holders, "repro-mprotect") >= lock.wait_ns / 20,
        "{d}"
    );
    assert!(activity_ns(holders, "asleep") <= lock.wait_ns / 10, "{d}");
    assert!(r.ipis_sent_by("repro-mprotect") >= 1_000, "{d}");
    let sent_holding: u64 = holders["holders"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["comm"] == "repro-mprotect")
        .map(|h| h["ipis_sent"].as_u64().unwrap())
        .sum();
    assert!(sent_holding >= 100, "{d}");
}

#[test]
fn pipe_mutex_short_holds() {
    let r = record_aggregated("pipe-mutex-short-holds");
    r.assert_label("lock-wait", Some("pipe->mutex"), Some("runs"));
    let lock = r.top_lock();
    let d = r.describe();
    assert_eq!(lock.kind(), "mutex", "{d}");
    assert!(lock.waits_in(&["anon_pipe_write", "anon_pipe_read"]), "{d}");
    assert!(lock.waits >= 100, "{d}");
    assert!(lock.wait_ns / lock.waits <= 1_000_000, "{d}");
    let behind_sleepers: u64 = r
        .own_sleeps_holding()
        .iter()
        .map(|s| s["waiter_wait_ns"].as_u64().unwrap())
        .sum();
    assert!(behind_sleepers <= lock.wait_ns / 10, "{d}");
}

#[test]
fn futex_user_mutex() {
    let r = record_aggregated("futex-user-mutex");
    r.assert_label("sleep", None, None);
    r.assert_no_lock_blamed();
    let first = &r.run["verdict"][0];
    assert!(
        first["summary"].as_str().unwrap().contains("futex"),
        "{first:#}\n{}",
        r.describe()
    );
}
