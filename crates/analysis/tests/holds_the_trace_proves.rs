//! A hold starts at a proven acquisition and never covers the holder's own wait for the
//! same lock. In an mmap_lock convoy a writer that got the rwsem without being woken
//! (optimistic spinning, or an interrupt's wakeup) used to have its hold reach back to when
//! the queue formed, so its own sleep in rwsem_down_write_slowpath read as "slept while
//! holding it".

#[path = "support/text_trace.rs"]
mod text_trace;

use text_trace::{line, TextTraceDir};

const RWSEM: u64 = 0xffff_8881_0a1b_2c40;
const MUTEX: u64 = 0xffff_8881_0a1b_3d80;
const OTHER: u64 = 0xffff_8881_0a1b_4e00;

/// `task` (comm, pid) goes to sleep on `cpu` at `us`.
fn switch_out(task: (&str, i32), cpu: u32, us: u64) -> String {
    let (comm, pid) = task;
    line(
        comm,
        pid,
        cpu,
        us,
        "sched_switch",
        &format!(
            "prev_comm={comm} prev_pid={pid} prev_prio=120 prev_state=D ==> \
             next_comm=swapper/{cpu} next_pid=0 next_prio=120"
        ),
    )
}

/// `task` runs on `cpu` from `us`, after the idle task.
fn switch_in(task: (&str, i32), cpu: u32, us: u64) -> String {
    let (comm, pid) = task;
    line(
        &format!("swapper/{cpu}"),
        0,
        cpu,
        us,
        "sched_switch",
        &format!(
            "prev_comm=swapper/{cpu} prev_pid=0 prev_prio=120 prev_state=R ==> \
             next_comm={comm} next_pid={pid} next_prio=120"
        ),
    )
}

/// `by` wakes `woken` on `cpu` at `us`.
fn waking(by: (&str, i32), cpu: u32, us: u64, woken: (&str, i32)) -> String {
    line(
        by.0,
        by.1,
        cpu,
        us,
        "sched_waking",
        &format!(
            "comm={} pid={} prio=120 target_cpu=00{cpu}",
            woken.0, woken.1
        ),
    )
}

#[test]
fn the_holders_own_wait_is_never_part_of_its_hold() {
    let lock = format!("{RWSEM:x}");
    let (x, w) = (("writer-x", 201), ("writer-w", 202));
    let v = ("writer-v", 203);
    let text = [
        // X holds the lock (its acquisition is not in the trace); W queues and sleeps.
        line(
            w.0,
            w.1,
            1,
            5,
            "contention_begin",
            &format!("{lock} (flags=WRITE)"),
        ),
        switch_out(w, 1, 6),
        // X releases it by waking W, which takes it.
        waking(x, 0, 20, w),
        switch_in(w, 1, 21),
        line(
            w.0,
            w.1,
            1,
            22,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
        // X wants it again: it waits and sleeps in the slow path while W holds it...
        line(
            x.0,
            x.1,
            0,
            30,
            "contention_begin",
            &format!("{lock} (flags=WRITE)"),
        ),
        switch_out(x, 0, 31),
        // ...and gets it without a task waking it (W's release is not a traced wakeup).
        waking(("swapper/0", 0), 0, 38, x),
        switch_in(x, 0, 39),
        line(
            x.0,
            x.1,
            0,
            41,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
        // V queues behind X; holding the lock, X really sleeps for 30 us.
        line(
            v.0,
            v.1,
            1,
            45,
            "contention_begin",
            &format!("{lock} (flags=WRITE)"),
        ),
        switch_out(v, 1, 46),
        switch_out(x, 0, 60),
        waking(("swapper/0", 0), 0, 90, x),
        switch_in(x, 0, 90),
        // X releases it by waking V.
        waking(x, 0, 100, v),
        switch_in(v, 1, 102),
        line(
            v.0,
            v.1,
            1,
            105,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("holds-proven", &text);
    let analysis = vmscale_analysis::analyse(dir.path()).unwrap();
    let held = analysis
        .holders
        .iter()
        .find(|h| h.lock_addr == RWSEM)
        .unwrap_or_else(|| panic!("the rwsem's holders: {:#?}", analysis.holders));
    assert_eq!(held.holders[0].pid, x.1, "{held:#?}");
    // Two holds of X: the first ended at 20, the second began when its own wait ended.
    assert_eq!(held.holders[0].holds, 2, "{held:#?}");
    let sleep = held
        .held_across_sleep
        .first()
        .unwrap_or_else(|| panic!("X slept while holding: {held:#?}"));
    // The second hold is [41, 100], its acquisition proven by X's own wait: only the 60..90
    // sleep happened while X held the lock, not the 31..38 sleep waiting for it, and the
    // first hold (ended at 20) is not stretched over W's hold.
    assert_eq!(sleep.holder_pid, x.1);
    assert!(!sleep.held_at_least, "{sleep:#?}");
    assert_eq!(sleep.held_ns, 59_000, "{sleep:#?}");
    assert_eq!(sleep.slept_ns, 30_000, "{sleep:#?}");
}

#[test]
fn a_read_hold_is_shared_never_one_exclusive_holder() {
    let lock = format!("{RWSEM:x}");
    let (x, r, w) = (("writer-x", 301), ("reader-r", 302), ("writer-w", 303));
    let text = [
        // R waits for read while X holds the lock, and X's release wakes it.
        line(
            r.0,
            r.1,
            1,
            5,
            "contention_begin",
            &format!("{lock} (flags=READ)"),
        ),
        switch_out(r, 1, 6),
        waking(x, 1, 20, r),
        switch_in(r, 1, 21),
        line(
            r.0,
            r.1,
            1,
            22,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
        // W queues for write behind the readers; R's release wakes it.
        line(
            w.0,
            w.1,
            0,
            30,
            "contention_begin",
            &format!("{lock} (flags=WRITE)"),
        ),
        switch_out(w, 0, 31),
        waking(r, 0, 80, w),
        switch_in(w, 0, 81),
        line(
            w.0,
            w.1,
            0,
            82,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("holds-shared", &text);
    let analysis = vmscale_analysis::analyse(dir.path()).unwrap();
    let held = analysis
        .holders
        .iter()
        .find(|h| h.lock_addr == RWSEM)
        .unwrap_or_else(|| panic!("the rwsem's holders: {:#?}", analysis.holders));
    let reader = held
        .holders
        .iter()
        .find(|h| h.pid == r.1)
        .unwrap_or_else(|| panic!("the reader as a holder: {held:#?}"));
    // R took it for read: its hold is shared, and says so.
    assert_eq!((reader.holds, reader.shared_holds), (1, 1), "{held:#?}");
    // X's acquisition of the rwsem is not in the trace, and an rwsem can be taken without
    // a trace (a reader stealing it, a writer spinning on the owner): X's release proves it
    // held the lock then, not since R queued. R's wait behind it is said to be unknown.
    assert!(held.holders.iter().all(|h| h.pid != x.1), "{held:#?}");
    let unproven: u64 = held
        .activity
        .iter()
        .filter(|a| {
            a.activity == vmscale_run::findings::HolderActivity::Unknown
                && a.detail.contains("acquisition was not traced")
        })
        .map(|a| a.wait_ns)
        .sum();
    assert_eq!(
        unproven, 15_000,
        "R waited 5-20 us behind a hold not proven: {held:#?}"
    );
}

#[test]
fn a_mutex_hold_is_proven_only_from_when_a_waiter_queued_and_a_spin_proves_a_running_owner() {
    let (mutex, other) = (format!("{MUTEX:x}"), format!("{OTHER:x}"));
    let (h, w) = (("holder-h", 401), ("waiter-w", 402));
    let text = [
        // H waits for another lock (a path walk's) from 5 to 50 us, while W spins on the
        // mutex from 10 us: spinning, W is not queued, and the mutex can change hands
        // without a trace (H takes it by its fast path at about 60 us).
        line(
            h.0,
            h.1,
            0,
            5,
            "contention_begin",
            &format!("{other} (flags=WRITE)"),
        ),
        switch_out(h, 0, 6),
        line(
            w.0,
            w.1,
            1,
            10,
            "contention_begin",
            &format!("{mutex} (flags=SPIN|MUTEX)"),
        ),
        waking(("someone", 499), 0, 49, h),
        switch_in(h, 0, 50),
        line(
            h.0,
            h.1,
            0,
            50,
            "contention_end",
            &format!("{other} (ret=0)"),
        ),
        // W queues at 70 us: from then on every acquisition is traced, and the next
        // release wakes W.
        line(
            w.0,
            w.1,
            1,
            70,
            "contention_begin",
            &format!("{mutex} (flags=MUTEX)"),
        ),
        switch_out(w, 1, 71),
        waking(h, 0, 100, w),
        switch_in(w, 1, 101),
        line(
            w.0,
            w.1,
            1,
            102,
            "contention_end",
            &format!("{mutex} (ret=0)"),
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("holds-mutex-queued", &text);
    let analysis = vmscale_analysis::analyse(dir.path()).unwrap();
    let held = analysis
        .holders
        .iter()
        .find(|h| h.lock_addr == MUTEX)
        .unwrap_or_else(|| panic!("the mutex's holders: {:#?}", analysis.holders));
    let holder = held
        .holders
        .iter()
        .find(|x| x.pid == h.1)
        .unwrap_or_else(|| panic!("H held it from 70 us: {held:#?}"));
    // Behind H: 70-100 us, running. Never H's own wait for the other lock (5-50 us), which
    // came before H could have taken the mutex.
    assert_eq!(holder.waited_behind_ns, 30_000, "{held:#?}");
    assert!(
        holder
            .activity
            .iter()
            .all(|a| a.activity != vmscale_run::findings::HolderActivity::NestedWait),
        "{held:#?}"
    );
    // 10-70 us W spun on the owner, which the kernel does only while the owner is on a
    // CPU: that time had a running owner, and no task is named for it.
    let spun: u64 = held
        .activity
        .iter()
        .filter(|a| {
            a.activity == vmscale_run::findings::HolderActivity::Running
                && a.detail == vmscale_analysis::holders::SPUN
        })
        .map(|a| a.wait_ns)
        .sum();
    assert_eq!(
        spun, 60_000,
        "10-70 us: spinning on a running owner: {held:#?}"
    );
    let unknown: u64 = held
        .activity
        .iter()
        .filter(|a| a.activity == vmscale_run::findings::HolderActivity::Unknown)
        .map(|a| a.wait_ns)
        .sum();
    assert_eq!(unknown, 0, "{held:#?}");
}

#[test]
fn a_first_waiter_spinning_again_has_a_running_owner_and_names_no_holder() {
    let mutex = format!("{MUTEX:x}");
    let (h, w) = (("holder-h", 501), ("waiter-w", 502));
    let text = [
        // H runs, holding the mutex; W queues at once (no spin) and sleeps behind it.
        switch_in(h, 0, 1),
        line(
            w.0,
            w.1,
            1,
            10,
            "contention_begin",
            &format!("{mutex} (flags=MUTEX)"),
        ),
        switch_out(w, 1, 11),
        // H releases it by waking W at 30 us; another task takes it first (an optimistic
        // spinner's steal, which the trace does not show), so W, the first waiter, spins on
        // the new owner from 32 to 60 us and takes it.
        waking(h, 0, 30, w),
        switch_in(w, 1, 31),
        line(
            w.0,
            w.1,
            1,
            32,
            "contention_begin",
            &format!("{mutex} (flags=SPIN|MUTEX)"),
        ),
        line(
            w.0,
            w.1,
            1,
            60,
            "contention_end",
            &format!("{mutex} (ret=0)"),
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("holds-first-waiter-spins", &text);
    let analysis = vmscale_analysis::analyse(dir.path()).unwrap();
    let held = analysis
        .holders
        .iter()
        .find(|x| x.lock_addr == MUTEX)
        .unwrap_or_else(|| panic!("the mutex's holders: {:#?}", analysis.holders));
    let of = |activity, detail: Option<&str>| -> u64 {
        held.activity
            .iter()
            .filter(|a| a.activity == activity && detail.is_none_or(|d| a.detail == d))
            .map(|a| a.wait_ns)
            .sum()
    };
    use vmscale_run::findings::HolderActivity::{Running, Unknown};
    // 10-30 us behind H, proven from when W queued; 32-60 us W spun on a running owner.
    let behind_h: u64 = held
        .holders
        .iter()
        .filter(|x| x.pid == h.1)
        .map(|x| x.waited_behind_ns)
        .sum();
    assert_eq!(behind_h, 20_000, "{held:#?}");
    assert_eq!(
        of(Running, Some(vmscale_analysis::holders::SPUN)),
        28_000,
        "{held:#?}"
    );
    // Between H's release and W's spin: a handoff (30-32 us), nothing unknown.
    assert_eq!(of(Unknown, None), 0, "{held:#?}");
    assert!(held.holders.iter().all(|x| x.pid != w.1), "{held:#?}");
}

#[test]
fn every_release_that_woke_a_queued_waiter_is_a_hold_not_only_the_last() {
    let mutex = format!("{MUTEX:x}");
    let (h, s, w) = (("holder-h", 601), ("stealer-s", 602), ("waiter-w", 603));
    let text = [
        switch_in(h, 0, 1),
        // W queues behind H and sleeps.
        line(
            w.0,
            w.1,
            1,
            10,
            "contention_begin",
            &format!("{mutex} (flags=MUTEX)"),
        ),
        switch_out(w, 1, 11),
        // S spins on H from 25 us; H releases at 30 us waking W, and S takes the lock at
        // 31 us before W runs.
        line(
            s.0,
            s.1,
            0,
            25,
            "contention_begin",
            &format!("{mutex} (flags=SPIN|MUTEX)"),
        ),
        waking(h, 0, 30, w),
        line(
            s.0,
            s.1,
            0,
            31,
            "contention_end",
            &format!("{mutex} (ret=0)"),
        ),
        // W runs, finds the lock taken and sleeps again; S's release wakes it at 50 us.
        switch_in(w, 1, 32),
        switch_out(w, 1, 33),
        waking(s, 0, 50, w),
        switch_in(w, 1, 51),
        line(
            w.0,
            w.1,
            1,
            52,
            "contention_end",
            &format!("{mutex} (ret=0)"),
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("holds-two-releases", &text);
    let analysis = vmscale_analysis::analyse(dir.path()).unwrap();
    let held = analysis
        .holders
        .iter()
        .find(|x| x.lock_addr == MUTEX)
        .unwrap_or_else(|| panic!("the mutex's holders: {:#?}", analysis.holders));
    let behind = |pid: i32| -> u64 {
        held.holders
            .iter()
            .filter(|x| x.pid == pid)
            .map(|x| x.waited_behind_ns)
            .sum()
    };
    // H from when W queued to its release: W's 10-30 us and S's spin 25-30 us behind it;
    // S from its traced acquisition to its release, W's 31-50 us.
    assert_eq!(behind(h.1), 25_000, "{held:#?}");
    assert_eq!(behind(s.1), 19_000, "{held:#?}");
    let unknown: u64 = held
        .activity
        .iter()
        .filter(|a| a.activity == vmscale_run::findings::HolderActivity::Unknown)
        .map(|a| a.wait_ns)
        .sum();
    assert_eq!(unknown, 0, "{held:#?}");
}
