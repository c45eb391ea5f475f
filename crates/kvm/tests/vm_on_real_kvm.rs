//! The KVM engine on the host's real /dev/kvm. These tests need KVM and fail (never skip)
//! when it is missing: a green run must mean the vCPUs really ran.

use std::time::{Duration, Instant};

use vmscale_kvm::{GuestProgram, KvmSystem, Vm, VmConfig};

fn kvm() -> KvmSystem {
    KvmSystem::open().unwrap_or_else(|e| panic!("these tests need /dev/kvm: {e}"))
}

fn progress(vm: &Vm) -> Vec<u64> {
    (0..vm.vcpu_count()).map(|i| vm.progress(i)).collect()
}

/// Polls until every vCPU's counter moves past `baseline`, or fails after 10 s.
fn wait_all_advance(vm: &Vm, baseline: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = progress(vm);
        if now.iter().zip(baseline).all(|(n, b)| n > b) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "vCPUs did not all advance: {baseline:?} -> {now:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn spinning_vcpus_run_natively_and_pause_completely() {
    let system = kvm();
    let vm = Vm::start(&system, &VmConfig::new(3, GuestProgram::Spin)).unwrap();
    wait_all_advance(&vm, &[0, 0, 0]);

    vm.pause_all().unwrap();
    // While paused no vCPU is in KVM_RUN, so no counter can move at all.
    let frozen = progress(&vm);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(progress(&vm), frozen, "a paused vCPU kept running");

    vm.resume_all().unwrap();
    wait_all_advance(&vm, &frozen);
}

#[test]
fn spinning_guest_counts_fast_enough_to_be_native() {
    // Emulated guest code manages ~0.5 M instructions/s; the CPL3 loop is ~10 instructions,
    // so an emulated loop would make well under 100 k iterations/s.
    let system = kvm();
    let vm = Vm::start(&system, &VmConfig::new(1, GuestProgram::Spin)).unwrap();
    let before = vm.progress(0);
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    let rate = (vm.progress(0) - before) as f64 / start.elapsed().as_secs_f64();
    assert!(
        rate > 1e6,
        "guest loop ran {rate:.0} iterations/s: not native"
    );
}

#[test]
fn guest_logs_the_stall_of_a_pause_on_the_host_timeline() {
    let system = kvm();
    let mut config = VmConfig::new(1, GuestProgram::Spin);
    config.gap_threshold_ns = 1_000_000; // only stalls over 1 ms
    let mut vm = Vm::start(&system, &config).unwrap();
    wait_all_advance(&vm, &[0]);
    vm.take_gaps(0);

    vm.pause_all().unwrap();
    // SAFETY: RDTSC has no memory effects.
    let paused_tsc = unsafe { core::arch::x86_64::_rdtsc() };
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: as above.
    let resuming_tsc = unsafe { core::arch::x86_64::_rdtsc() };
    vm.resume_all().unwrap();
    let baseline = progress(&vm);
    wait_all_advance(&vm, &baseline);

    // The guest cannot run between those two host reads, so one logged gap must span them:
    // guest and host share the TSC, which is what lines guest stalls up with host events.
    let log = vm.take_gaps(0);
    assert!(
        log.gaps
            .iter()
            .any(|g| g.tsc_before <= paused_tsc && g.tsc_after >= resuming_tsc),
        "no logged gap spans the pause [{paused_tsc}, {resuming_tsc}]: {:?}",
        log.gaps
    );
}

#[test]
fn halted_vcpus_wake_on_kick_and_stay_halted() {
    let system = kvm();
    let vm = Vm::start(&system, &VmConfig::new(4, GuestProgram::Halt)).unwrap();
    for _ in 0..20 {
        vm.pause_all().unwrap();
        vm.resume_all().unwrap();
    }
    assert_eq!(
        progress(&vm),
        vec![0; 4],
        "halted guests never run the counting loop"
    );
}

#[test]
fn memslot_updates_apply_while_vcpus_run() {
    let system = kvm();
    let mut config = VmConfig::new(2, GuestProgram::Spin);
    config.scratch_slots = 3;
    let mut vm = Vm::start(&system, &config).unwrap();
    for slot in 0..3 {
        vm.set_scratch(slot, true).unwrap();
        assert!(vm.scratch_present(slot));
    }
    let before = vm.stats_snapshot().expect("binary stats");
    for slot in 0..3 {
        vm.set_scratch(slot, false).unwrap();
        vm.set_scratch(slot, true).unwrap();
    }
    let after = vm.stats_snapshot().unwrap();
    let (vm_delta, _) = vm.stats_delta(&before, &after);
    // Deleting a slot flushes the guest's TLBs remotely: KVM counts it.
    assert!(
        vm_delta.keys().any(|k| k.contains("flush")),
        "no flush counted by KVM for 3 slot deletes: {vm_delta:?}"
    );
    let baseline = progress(&vm);
    wait_all_advance(&vm, &baseline);
}

#[test]
fn impossible_requests_fail_before_kvm_is_touched() {
    let system = kvm();
    let too_many = system.max_vcpus() + 1;
    let e = Vm::start(&system, &VmConfig::new(too_many, GuestProgram::Halt))
        .err()
        .unwrap();
    assert!(matches!(e, vmscale_kvm::Error::Impossible(_)), "{e}");
    let e = Vm::start(&system, &VmConfig::new(0, GuestProgram::Halt))
        .err()
        .unwrap();
    assert!(matches!(e, vmscale_kvm::Error::Impossible(_)), "{e}");
}
