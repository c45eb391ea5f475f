//! Teardown leaves nothing behind. Alone in its own test binary: it counts the process's
//! threads and fds, which tests running in parallel would change.

use vmscale_kvm::{GuestProgram, KvmSystem, Vm, VmConfig};

fn task_count() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn dropping_a_vm_joins_every_thread_and_closes_every_fd() {
    let system = KvmSystem::open().unwrap_or_else(|e| panic!("this test needs /dev/kvm: {e}"));
    let (tasks, fds) = (task_count(), fd_count());
    for program in [GuestProgram::Spin, GuestProgram::Halt] {
        let mut config = VmConfig::new(8, program);
        config.scratch_slots = 2;
        let mut vm = Vm::start(&system, &config).unwrap();
        vm.set_scratch(1, true).unwrap();
        vm.pause_all().unwrap();
        assert!(task_count() >= tasks + 8);
        // Dropped while paused: the harder case, every thread is parked on the condvar.
        drop(vm);
        assert_eq!(task_count(), tasks, "{program:?}: vCPU threads left behind");
        assert_eq!(fd_count(), fds, "{program:?}: fds left behind");
    }

    // Timed teardown releases the same things, and says where the time went.
    let mut config = VmConfig::new(2, GuestProgram::Halt);
    config.scratch_slots = 1;
    config.scratch_slot_bytes = 64 << 20;
    let mut vm = Vm::start(&system, &config).unwrap();
    vm.set_scratch(0, true).unwrap();
    vm.touch_scratch(0);
    let times = vm.teardown();
    assert!(times.vcpus_ns > 0 && times.kvm_ns > 0, "{times:?}");
    // 64 MiB of touched memory takes real time to give back (16k pages).
    assert!(times.munmap_ns > 100_000, "{times:?}");
    assert_eq!(task_count(), tasks, "teardown: vCPU threads left behind");
    assert_eq!(fd_count(), fds, "teardown: fds left behind");
}
