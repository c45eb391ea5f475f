//! The irqfd scenario on the host's real /dev/kvm, in process, so that what it leaves
//! behind (threads, fds) can be counted. Alone in its binary for that reason.

use vmscale_kvm::KvmSystem;
use vmscale_scenario::irqfd::{self, IrqfdKnobs, Release};
use vmscale_scenario::{Cancel, NoPhaseHook, NoProgress};

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn task_count() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn every_release_mode_registers_exactly_the_total_and_leaves_nothing() {
    let system = KvmSystem::open().unwrap_or_else(|e| panic!("needs /dev/kvm: {e}"));
    let (fds, tasks) = (fd_count(), task_count());
    for (release, vms) in [
        (Release::Deassign, 3),
        (Release::Close, 1),
        (Release::VmClose, 2),
    ] {
        let knobs = IrqfdKnobs {
            total: vec![3_001],
            threads: 3,
            vms,
            release,
        };
        let points = irqfd::run(
            &system,
            &knobs,
            &NoProgress,
            &Cancel::never(),
            &mut NoPhaseHook,
        )
        .unwrap();
        let series = &points[0].series;
        let assign = &series[0];
        assert_eq!(assign.name, "assign");
        assert_eq!(
            assign.samples_ns.len(),
            3_001,
            "{release:?}: not every irqfd was registered"
        );
        assert!(assign.samples_ns.iter().all(|&ns| ns > 0));
        // Registered-before counts per VM: spread over `vms` VMs, none saw more than its share.
        let per_vm = 3_001usize.div_ceil(vms) as u64;
        assert!(
            assign.sample_x.iter().all(|&x| x < per_vm + 3),
            "{release:?}: {:?}",
            assign.sample_x.iter().max()
        );
        assert!(
            assign.notes[0].contains("RLIMIT_NOFILE"),
            "{:?}",
            assign.notes
        );
        match release {
            Release::Deassign => {
                assert_eq!(series[1].name, "deassign");
                assert_eq!(series[1].samples_ns.len(), 3_001);
            }
            Release::Close => {
                assert_eq!(series[1].name, "close");
                assert_eq!(series[1].samples_ns.len(), 3_001);
                assert_eq!(series[2].name, "kworker-drain");
                assert!(
                    series[2].notes[0].starts_with("kworkers:"),
                    "{:?}",
                    series[2].notes
                );
            }
            Release::VmClose => {
                assert_eq!(series[1].name, "vm-close");
                assert_eq!(series[1].samples_ns.len(), 1);
            }
        }
        assert_eq!(
            fd_count(),
            fds,
            "{release:?}: fds left in the process's table"
        );
        // A joined thread can linger in /proc/self/task for a moment while the kernel
        // finishes tearing down its private fd table; give it a bounded time to go.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while task_count() > tasks && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            task_count(),
            tasks,
            "{release:?}: holder threads left behind"
        );
    }
}
