use std::time::{Duration, Instant};
use vmscale_kvm::{GuestProgram, KvmSystem, Vm, VmConfig};

fn main() {
    let sys = KvmSystem::open().unwrap();
    println!("{:?}", sys.facts());
    for program in [GuestProgram::Spin, GuestProgram::Halt] {
        let mut cfg = VmConfig::new(4, program);
        cfg.scratch_slots = 1;
        let t = Instant::now();
        let mut vm = Vm::start(&sys, &cfg).unwrap();
        println!("{program:?} started in {:?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(200));
        for i in 0..4 {
            println!(
                "progress {i} = {} gaps {}",
                vm.progress(i),
                vm.take_gaps(i).gaps.len()
            );
        }
        for _ in 0..3 {
            let t = Instant::now();
            vm.set_scratch(0, true).unwrap();
            let a = t.elapsed();
            let t = Instant::now();
            vm.set_scratch(0, false).unwrap();
            let d = t.elapsed();
            let t = Instant::now();
            vm.pause_all().unwrap();
            let p = t.elapsed();
            let t = Instant::now();
            vm.resume_all().unwrap();
            let r = t.elapsed();
            println!("add {a:?} del {d:?} pause {p:?} resume {r:?}");
        }
        println!("{:?}", vm.stats_snapshot().map(|s| s.0.len()));
    }
}
