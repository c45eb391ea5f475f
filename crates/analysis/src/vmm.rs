//! What a VMM's threads did in the kernel during the samples it carried out: the ioctls
//! they made (KVM's memslot, irqfd, ioeventfd and dirty-log calls among them), and how
//! long its vCPU threads were held out of the guest.
//!
//! The samples are timed by vmscale and carried out by the VMM (a QMP command's work runs
//! on QEMU's threads), so each series names the VMM's threads as they were before its
//! samples; threads they create later (a migration thread) join from their
//! `sched_process_fork`. An ioctl belongs to the sample during which it was entered.
//!
//! A vCPU thread is out of the guest from a KVM_RUN return to its next KVM_RUN call (an
//! exit the VMM handles in user space), and within the kernel while it waits for a lock or
//! for a CPU. A vCPU that stayed in KVM_RUN throughout (halted or running guest code)
//! shows no event and no hold: that is what the trace proves.
//!
//! The VMM's main thread (its pid) runs the QMP commands; its other system calls entered
//! during a sample are kept too, each cut at the sample's end.
//!
//! Memory grows with threads and samples, never with events.

use std::collections::{BTreeMap, HashMap};

use kvm_bindings::*;
use vmm_sys_util::ioctl::{ioctl_expr, _IOC_NONE, _IOC_READ, _IOC_WRITE};
use vmscale_run::findings::{VmmIoctl, VmmSamples};
use vmscale_stats::StreamingSummary;
use vmscale_trace::{Event, EventKind, ViewTag};

use crate::syscalls::Arch;

/// KVM's ioctl type (`KVMIO`, linux/kvm.h).
const KVMIO: u32 = 0xae;

/// `_IO(KVMIO, nr)`.
const fn io(nr: u32) -> u64 {
    ioctl_expr(_IOC_NONE, KVMIO, nr, 0) as u64
}

/// `_IOR(KVMIO, nr, T)`.
const fn ior<T>(nr: u32) -> u64 {
    ioctl_expr(_IOC_READ, KVMIO, nr, std::mem::size_of::<T>() as u32) as u64
}

/// `_IOW(KVMIO, nr, T)`.
const fn iow<T>(nr: u32) -> u64 {
    ioctl_expr(_IOC_WRITE, KVMIO, nr, std::mem::size_of::<T>() as u32) as u64
}

/// `_IOWR(KVMIO, nr, T)`.
const fn iowr<T>(nr: u32) -> u64 {
    ioctl_expr(
        _IOC_READ | _IOC_WRITE,
        KVMIO,
        nr,
        std::mem::size_of::<T>() as u32,
    ) as u64
}

/// KVM_RUN.
pub const KVM_RUN: u64 = io(0x80);
const KVM_GET_DIRTY_LOG: u64 = iow::<kvm_dirty_log>(0x42);
const KVM_CLEAR_DIRTY_LOG: u64 = iowr::<kvm_clear_dirty_log>(0xc0);
const KVM_RESET_DIRTY_RINGS: u64 = io(0xc7);

/// KVM ioctls by their full number (direction and size included: some share a type and
/// nr, like KVM_SIGNAL_MSI and KVM_SET_XSAVE), computed as linux/kvm.h defines them, with
/// the sizes of kvm-bindings' structures. The direction and size bits are laid out alike on
/// x86-64 and arm64 (asm-generic/ioctl.h), and these structures are the same size on both.
const KVM_IOCTLS: &[(u64, &str)] = &[
    (KVM_RUN, "KVM_RUN"),
    (io(0x03), "KVM_CHECK_EXTENSION"),
    (io(0x41), "KVM_CREATE_VCPU"),
    (KVM_GET_DIRTY_LOG, "KVM_GET_DIRTY_LOG"),
    (KVM_CLEAR_DIRTY_LOG, "KVM_CLEAR_DIRTY_LOG"),
    (KVM_RESET_DIRTY_RINGS, "KVM_RESET_DIRTY_RINGS"),
    (
        iow::<kvm_userspace_memory_region>(0x46),
        "KVM_SET_USER_MEMORY_REGION",
    ),
    (
        iow::<kvm_userspace_memory_region2>(0x49),
        "KVM_SET_USER_MEMORY_REGION2",
    ),
    (iow::<kvm_irq_level>(0x61), "KVM_IRQ_LINE"),
    (iowr::<kvm_irq_level>(0x67), "KVM_IRQ_LINE_STATUS"),
    (iow::<kvm_irq_routing>(0x6a), "KVM_SET_GSI_ROUTING"),
    (iow::<kvm_irqfd>(0x76), "KVM_IRQFD"),
    (iow::<kvm_ioeventfd>(0x79), "KVM_IOEVENTFD"),
    (iow::<kvm_clock_data>(0x7b), "KVM_SET_CLOCK"),
    (ior::<kvm_clock_data>(0x7c), "KVM_GET_CLOCK"),
    (ior::<kvm_mp_state>(0x98), "KVM_GET_MP_STATE"),
    (iow::<kvm_mp_state>(0x99), "KVM_SET_MP_STATE"),
    (iow::<kvm_enable_cap>(0xa3), "KVM_ENABLE_CAP"),
    (iow::<kvm_msi>(0xa5), "KVM_SIGNAL_MSI"),
    (io(0xce), "KVM_GET_STATS_FD"),
];

/// x86's own: structures that exist (at these sizes) only there.
#[cfg(target_arch = "x86_64")]
const KVM_X86_IOCTLS: &[(u64, &str)] = &[
    (iowr::<kvm_irqchip>(0x62), "KVM_GET_IRQCHIP"),
    // The kernel defines KVM_SET_IRQCHIP with _IOR.
    (ior::<kvm_irqchip>(0x63), "KVM_SET_IRQCHIP"),
    (ior::<kvm_regs>(0x81), "KVM_GET_REGS"),
    (iow::<kvm_regs>(0x82), "KVM_SET_REGS"),
    (ior::<kvm_sregs>(0x83), "KVM_GET_SREGS"),
    (iow::<kvm_sregs>(0x84), "KVM_SET_SREGS"),
    (iowr::<kvm_msrs>(0x88), "KVM_GET_MSRS"),
    (iow::<kvm_msrs>(0x89), "KVM_SET_MSRS"),
    (ior::<kvm_fpu>(0x8c), "KVM_GET_FPU"),
    (iow::<kvm_fpu>(0x8d), "KVM_SET_FPU"),
    (ior::<kvm_lapic_state>(0x8e), "KVM_GET_LAPIC"),
    (iow::<kvm_lapic_state>(0x8f), "KVM_SET_LAPIC"),
    (iow::<kvm_cpuid2>(0x90), "KVM_SET_CPUID2"),
    (iowr::<kvm_tpr_access_ctl>(0x92), "KVM_TPR_ACCESS_REPORTING"),
    (ior::<kvm_vcpu_events>(0x9f), "KVM_GET_VCPU_EVENTS"),
    (iow::<kvm_vcpu_events>(0xa0), "KVM_SET_VCPU_EVENTS"),
    (ior::<kvm_pit_state2>(0x9f), "KVM_GET_PIT2"),
    (iow::<kvm_pit_state2>(0xa0), "KVM_SET_PIT2"),
    (ior::<kvm_debugregs>(0xa1), "KVM_GET_DEBUGREGS"),
    (iow::<kvm_debugregs>(0xa2), "KVM_SET_DEBUGREGS"),
    (io(0xa2), "KVM_SET_TSC_KHZ"),
    (io(0xa3), "KVM_GET_TSC_KHZ"),
    (ior::<kvm_xsave>(0xa4), "KVM_GET_XSAVE"),
    (iow::<kvm_xsave>(0xa5), "KVM_SET_XSAVE"),
    (ior::<kvm_xcrs>(0xa6), "KVM_GET_XCRS"),
    (iow::<kvm_xcrs>(0xa7), "KVM_SET_XCRS"),
    (io(0xad), "KVM_KVMCLOCK_CTRL"),
    (iowr::<kvm_nested_state>(0xbe), "KVM_GET_NESTED_STATE"),
    (iow::<kvm_nested_state>(0xbf), "KVM_SET_NESTED_STATE"),
    (ior::<kvm_sregs2>(0xcc), "KVM_GET_SREGS2"),
    (iow::<kvm_sregs2>(0xcd), "KVM_SET_SREGS2"),
    (ior::<kvm_xsave>(0xcf), "KVM_GET_XSAVE2"),
];
#[cfg(not(target_arch = "x86_64"))]
const KVM_X86_IOCTLS: &[(u64, &str)] = &[];

/// An ioctl's name: KVM's by name, others by number.
pub fn ioctl_name(cmd: u64) -> String {
    match KVM_IOCTLS
        .iter()
        .chain(KVM_X86_IOCTLS)
        .find(|&&(number, _)| number == cmd)
    {
        Some((_, name)) => name.to_string(),
        None if (cmd >> 8) & 0xff == KVMIO as u64 => format!("KVM ioctl 0x{cmd:x}"),
        None => format!("ioctl 0x{cmd:x}"),
    }
}

/// The dirty-log ioctls: what a migration pass costs KVM.
pub fn is_dirty_log(cmd: u64) -> bool {
    [
        KVM_GET_DIRTY_LOG,
        KVM_CLEAR_DIRTY_LOG,
        KVM_RESET_DIRTY_RINGS,
    ]
    .contains(&cmd)
}

/// One series the VMM carried out: its threads and its samples' windows.
#[derive(Debug, Clone, Default)]
pub struct VmmSeriesScope {
    pub n: u64,
    pub series: String,
    /// The VMM's pid and threads before the samples.
    pub tids: Vec<u32>,
    /// (start, end) of each sample on the trace clock, in the order taken.
    pub windows: Vec<(u64, u64)>,
}

#[derive(Default)]
struct Task {
    /// The series whose VMM this thread belongs to.
    series: usize,
    vcpu: bool,
    /// An ioctl in progress: (entered at, cmd, sample index).
    ioctl: Option<(u64, u64, Option<usize>)>,
    /// Another system call of the main thread entered during a sample: (entered at,
    /// number, sample index).
    call: Option<(u64, i64, usize)>,
    /// Since a KVM_RUN returned.
    out_since: Option<u64>,
    lock_since: Option<u64>,
    runnable_since: Option<u64>,
    out_ns: u64,
    lock_ns: u64,
    runnable_ns: u64,
    exits: u64,
    /// Outside KVM_RUN per sample index.
    out_per_sample: HashMap<usize, u64>,
}

#[derive(Default)]
struct Calls {
    latency: StreamingSummary,
}

/// The streaming pass.
pub struct VmmPass {
    scopes: Vec<VmmSeriesScope>,
    tasks: HashMap<i32, Task>,
    /// (series, cmd) -> calls.
    calls: BTreeMap<(usize, u64), Calls>,
    /// (series, system call number) -> the main thread's other system calls.
    main_calls: BTreeMap<(usize, i64), Calls>,
    /// The trace's system call numbering (its ioctl's number, its calls' names).
    arch: Arch,
    sys_ioctl: i64,
}

impl VmmPass {
    pub fn new(scopes: Vec<VmmSeriesScope>, arch: Arch) -> VmmPass {
        let mut tasks = HashMap::new();
        for (index, scope) in scopes.iter().enumerate() {
            for &tid in &scope.tids {
                tasks.insert(
                    tid as i32,
                    Task {
                        series: index,
                        ..Task::default()
                    },
                );
            }
        }
        VmmPass {
            scopes,
            tasks,
            calls: BTreeMap::new(),
            main_calls: BTreeMap::new(),
            arch,
            sys_ioctl: arch.ioctl(),
        }
    }

    /// The series whose VMM has `tid` as its main thread (its pid, first of its tids): the
    /// thread that runs QMP commands.
    fn main_thread_of(&self, tid: i32) -> Option<usize> {
        let series = self.tasks.get(&tid)?.series;
        (self.scopes[series].tids.first() == Some(&(tid as u32))).then_some(series)
    }

    /// The sample of `series` whose window holds `ts`.
    fn sample_at(&self, series: usize, ts: u64) -> Option<usize> {
        let windows = &self.scopes[series].windows;
        let after = windows.partition_point(|&(start, _)| start <= ts);
        let index = after.checked_sub(1)?;
        (ts <= windows[index].1).then_some(index)
    }

    /// Adds the overlap of `[from, to]` with each sample window of `series` to `add`.
    fn overlap(windows: &[(u64, u64)], from: u64, to: u64, mut add: impl FnMut(usize, u64)) {
        let first = windows.partition_point(|&(_, end)| end <= from);
        for (index, &(start, end)) in windows.iter().enumerate().skip(first) {
            if start >= to {
                break;
            }
            let ns = end.min(to).saturating_sub(start.max(from));
            if ns > 0 {
                add(index, ns);
            }
        }
    }

    /// The views [`VmmPass::observe`] reads, [`ViewTag::Other`] among them (a fork is
    /// read by its field names); other events change nothing.
    pub fn wants(tag: ViewTag) -> bool {
        use ViewTag::*;
        matches!(
            tag,
            SchedSwitch
                | SchedWakeup
                | SchedWakeupNew
                | ContentionBegin
                | ContentionEnd
                | SysEnter
                | SysExit
                | Other
        )
    }

    pub fn observe(&mut self, event: &Event, kind: &EventKind) {
        let ts = event.ts();
        match kind {
            EventKind::SchedSwitch(switch) => {
                if let Some(task) = self.tasks.get_mut(&switch.prev_pid) {
                    if is_vcpu_name(switch.prev_comm.as_bytes()) {
                        task.vcpu = true;
                    }
                    if switch.prev_state == 0 {
                        task.runnable_since = Some(ts);
                    }
                }
                let next = switch.next_pid;
                if let Some(task) = self.tasks.get_mut(&next) {
                    if is_vcpu_name(switch.next_comm.as_bytes()) {
                        task.vcpu = true;
                    }
                    if let Some(since) = task.runnable_since.take() {
                        let windows = &self.scopes[task.series].windows;
                        Self::overlap(windows, since, ts, |_, ns| task.runnable_ns += ns);
                    }
                }
            }
            EventKind::SchedWakeup(wakeup) | EventKind::SchedWakeupNew(wakeup) => {
                if let Some(task) = self.tasks.get_mut(&wakeup.pid) {
                    task.runnable_since.get_or_insert(ts);
                }
            }
            EventKind::ContentionBegin(_) => {
                if let Some(task) = self.tasks.get_mut(&event.pid()) {
                    task.lock_since = Some(ts);
                }
            }
            EventKind::ContentionEnd(_) => {
                if let Some(task) = self.tasks.get_mut(&event.pid()) {
                    if let Some(since) = task.lock_since.take() {
                        let windows = &self.scopes[task.series].windows;
                        Self::overlap(windows, since, ts, |_, ns| task.lock_ns += ns);
                    }
                }
            }
            EventKind::SysEnter(enter) if enter.id == self.sys_ioctl => {
                let Some(series) = self.tasks.get(&event.pid()).map(|t| t.series) else {
                    return;
                };
                let sample = self.sample_at(series, ts);
                let cmd = enter.args()[1] & 0xffff_ffff;
                let task = self.tasks.get_mut(&event.pid()).expect("looked up above");
                task.ioctl = Some((ts, cmd, sample));
                if cmd == KVM_RUN {
                    task.vcpu = true;
                    if let Some(since) = task.out_since.take() {
                        let windows = &self.scopes[series].windows;
                        Self::overlap(windows, since, ts, |index, ns| {
                            task.out_ns += ns;
                            *task.out_per_sample.entry(index).or_default() += ns;
                        });
                    }
                }
            }
            EventKind::SysEnter(enter) => {
                if let Some(series) = self.main_thread_of(event.pid()) {
                    let sample = self.sample_at(series, ts);
                    let task = self.tasks.get_mut(&event.pid()).expect("a main thread");
                    task.call = sample.map(|sample| (ts, enter.id, sample));
                }
            }
            EventKind::SysExit(exit) if exit.id != self.sys_ioctl => {
                let Some(series) = self.main_thread_of(event.pid()) else {
                    return;
                };
                let task = self.tasks.get_mut(&event.pid()).expect("a main thread");
                let Some((entered, id, sample)) = task.call.take() else {
                    return;
                };
                if id == exit.id {
                    let end = ts.min(self.scopes[series].windows[sample].1);
                    self.main_calls
                        .entry((series, id))
                        .or_default()
                        .latency
                        .record(end.saturating_sub(entered));
                }
            }
            EventKind::SysExit(exit) if exit.id == self.sys_ioctl => {
                let Some(series) = self.tasks.get(&event.pid()).map(|t| t.series) else {
                    return;
                };
                let in_sample = self.sample_at(series, ts).is_some();
                let task = self.tasks.get_mut(&event.pid()).expect("looked up above");
                let Some((entered, cmd, sample)) = task.ioctl.take() else {
                    return;
                };
                if cmd == KVM_RUN {
                    task.out_since = Some(ts);
                    if in_sample {
                        task.exits += 1;
                    }
                } else if sample.is_some() {
                    self.calls
                        .entry((series, cmd))
                        .or_default()
                        .latency
                        .record(ts.saturating_sub(entered));
                }
            }
            EventKind::Other if event.name() == "sched_process_fork" => {
                let (Some(parent), Some(child)) = (event.i64("parent_pid"), event.i64("child_pid"))
                else {
                    return;
                };
                if let Some(series) = self.tasks.get(&(parent as i32)).map(|t| t.series) {
                    self.tasks.entry(child as i32).or_insert(Task {
                        series,
                        ..Task::default()
                    });
                }
            }
            _ => {}
        }
    }

    pub fn finish(self) -> Vec<VmmSamples> {
        let mut out: Vec<VmmSamples> = self
            .scopes
            .iter()
            .map(|scope| VmmSamples {
                n: scope.n,
                series: scope.series.clone(),
                samples: scope.windows.len() as u64,
                ..VmmSamples::default()
            })
            .collect();
        for ((series, cmd), calls) in self.calls {
            out[series].ioctls.push(VmmIoctl {
                name: ioctl_name(cmd),
                cmd,
                calls: calls.latency.count(),
                latency: calls.latency.summary(),
                total_ns: calls.latency.total(),
            });
        }
        for ((series, id), calls) in self.main_calls {
            out[series].main_thread.push(VmmIoctl {
                name: self.arch.name(id),
                cmd: id as u64,
                calls: calls.latency.count(),
                latency: calls.latency.summary(),
                total_ns: calls.latency.total(),
            });
        }
        let mut worst: Vec<HashMap<usize, u64>> = vec![HashMap::new(); out.len()];
        for task in self.tasks.values().filter(|t| t.vcpu) {
            let hold = &mut out[task.series].vcpus;
            hold.threads += 1;
            hold.exits += task.exits;
            hold.out_ns += task.out_ns;
            hold.lock_wait_ns += task.lock_ns;
            hold.runnable_ns += task.runnable_ns;
            for (&index, &ns) in &task.out_per_sample {
                let slot = worst[task.series].entry(index).or_default();
                *slot = (*slot).max(ns);
            }
        }
        for (series, samples) in out.iter_mut().enumerate() {
            for calls in [&mut samples.ioctls, &mut samples.main_thread] {
                calls.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.cmd.cmp(&b.cmd)));
            }
            if samples.vcpus.threads > 0 {
                // Samples in which no vCPU left KVM_RUN held none out: zeros, not gaps.
                let per_sample: Vec<u64> = (0..samples.samples as usize)
                    .map(|index| worst[series].get(&index).copied().unwrap_or(0))
                    .collect();
                samples.vcpus.worst_out_per_sample =
                    vmscale_stats::Summary::from_samples(&per_sample);
            }
        }
        out
    }
}

/// QEMU names its vCPU threads `CPU <n>/KVM`.
fn is_vcpu_name(comm: &[u8]) -> bool {
    comm.starts_with(b"CPU ") && comm.ends_with(b"/KVM")
}

impl crate::pass::Pass for VmmPass {
    fn reads(&self, tag: ViewTag, _: crate::ViewTags) -> crate::pass::Reads {
        crate::pass::view_if(Self::wants(tag))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event, kind: &EventKind) {
        VmmPass::observe(self, event, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers an x86-64 kernel's linux/kvm.h gives (as `strace -e raw=ioctl` shows
    /// them): the computed ones must be these, size bits and all.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn computed_numbers_are_the_kernels() {
        let published: &[(u64, &str)] = &[
            (0xae80, "KVM_RUN"),
            (0x4020ae46, "KVM_SET_USER_MEMORY_REGION"),
            (0x40a0ae49, "KVM_SET_USER_MEMORY_REGION2"),
            (0x4020ae76, "KVM_IRQFD"),
            (0x4040ae79, "KVM_IOEVENTFD"),
            (0x4010ae42, "KVM_GET_DIRTY_LOG"),
            (0xc018aec0, "KVM_CLEAR_DIRTY_LOG"),
            (0xaec7, "KVM_RESET_DIRTY_RINGS"),
            (0xae03, "KVM_CHECK_EXTENSION"),
            (0x4008ae6a, "KVM_SET_GSI_ROUTING"),
            (0xc008ae67, "KVM_IRQ_LINE_STATUS"),
            (0x4008ae61, "KVM_IRQ_LINE"),
            (0x4020aea5, "KVM_SIGNAL_MSI"),
            (0x8030ae7c, "KVM_GET_CLOCK"),
            (0x4030ae7b, "KVM_SET_CLOCK"),
            (0x8090ae81, "KVM_GET_REGS"),
            (0x4090ae82, "KVM_SET_REGS"),
            (0x8138ae83, "KVM_GET_SREGS"),
            (0x8140aecc, "KVM_GET_SREGS2"),
            (0x4140aecd, "KVM_SET_SREGS2"),
            (0xc080aebe, "KVM_GET_NESTED_STATE"),
            (0x4080aebf, "KVM_SET_NESTED_STATE"),
            (0x4138ae84, "KVM_SET_SREGS"),
            (0xc008ae88, "KVM_GET_MSRS"),
            (0x4008ae89, "KVM_SET_MSRS"),
            (0x81a0ae8c, "KVM_GET_FPU"),
            (0x41a0ae8d, "KVM_SET_FPU"),
            (0x8400ae8e, "KVM_GET_LAPIC"),
            (0x4400ae8f, "KVM_SET_LAPIC"),
            (0x8004ae98, "KVM_GET_MP_STATE"),
            (0x4004ae99, "KVM_SET_MP_STATE"),
            (0x8040ae9f, "KVM_GET_VCPU_EVENTS"),
            (0x4040aea0, "KVM_SET_VCPU_EVENTS"),
            (0x8080aea1, "KVM_GET_DEBUGREGS"),
            (0x4080aea2, "KVM_SET_DEBUGREGS"),
            (0x9000aea4, "KVM_GET_XSAVE"),
            (0x5000aea5, "KVM_SET_XSAVE"),
            (0x9000aecf, "KVM_GET_XSAVE2"),
            (0x8188aea6, "KVM_GET_XCRS"),
            (0x4188aea7, "KVM_SET_XCRS"),
            (0xaead, "KVM_KVMCLOCK_CTRL"),
            (0x4068aea3, "KVM_ENABLE_CAP"),
            (0xae41, "KVM_CREATE_VCPU"),
            (0x4008ae90, "KVM_SET_CPUID2"),
            (0xc028ae92, "KVM_TPR_ACCESS_REPORTING"),
            (0xaea2, "KVM_SET_TSC_KHZ"),
            (0xaea3, "KVM_GET_TSC_KHZ"),
            (0x8070ae9f, "KVM_GET_PIT2"),
            (0x4070aea0, "KVM_SET_PIT2"),
            (0xc208ae62, "KVM_GET_IRQCHIP"),
            (0x8208ae63, "KVM_SET_IRQCHIP"),
            (0xaece, "KVM_GET_STATS_FD"),
        ];
        let computed = KVM_IOCTLS.len() + KVM_X86_IOCTLS.len();
        assert_eq!(computed, published.len(), "one name per number");
        for &(number, name) in published {
            assert_eq!(ioctl_name(number), name, "0x{number:x}");
        }
        assert_eq!(KVM_RUN, 0xae80);
    }

    #[test]
    fn kvm_ioctls_are_named_with_their_size_bits() {
        assert_eq!(ioctl_name(0x4020ae46), "KVM_SET_USER_MEMORY_REGION");
        assert_eq!(ioctl_name(0x4020aea5), "KVM_SIGNAL_MSI");
        assert_eq!(ioctl_name(0x5000aea5), "KVM_SET_XSAVE");
        assert_eq!(ioctl_name(0x4008aeff), "KVM ioctl 0x4008aeff");
        assert_eq!(ioctl_name(0x5401), "ioctl 0x5401");
        assert!(is_dirty_log(0xc018aec0) && !is_dirty_log(0xae80));
    }

    #[test]
    fn overlaps_are_cut_to_the_sample_windows() {
        let windows = [(10, 20), (30, 40), (50, 60)];
        let mut seen = Vec::new();
        VmmPass::overlap(&windows, 15, 55, |index, ns| seen.push((index, ns)));
        assert_eq!(seen, vec![(0, 5), (1, 10), (2, 5)]);
        seen.clear();
        VmmPass::overlap(&windows, 20, 30, |index, ns| seen.push((index, ns)));
        assert!(seen.is_empty());
        assert!(is_vcpu_name(b"CPU 3/KVM") && !is_vcpu_name(b"qemu-system-x86"));
    }

    #[test]
    fn a_call_belongs_to_the_sample_it_entered_in() {
        let pass = VmmPass::new(
            vec![VmmSeriesScope {
                tids: vec![7],
                windows: vec![(10, 20), (30, 40)],
                ..VmmSeriesScope::default()
            }],
            Arch::X86_64,
        );
        assert_eq!(pass.sample_at(0, 10), Some(0));
        assert_eq!(pass.sample_at(0, 25), None);
        assert_eq!(pass.sample_at(0, 40), Some(1));
        assert_eq!(pass.sample_at(0, 41), None);
    }
}
