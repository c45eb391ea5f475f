//! Building and driving one VM.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{VcpuFd, VmFd};

use crate::guest::{
    self, entry_regs, long_mode_sregs, GuestProgram, VcpuArea, GAP_RING_ENTRIES,
    IDENTITY_MAPPED_BYTES, VCPU_AREAS_GPA, VCPU_AREA_STRIDE,
};
use crate::memory::HostMapping;
use crate::preflight::check_vm_request;
use crate::stats_fd::{cumulative_delta, StatsReader, StatsSnapshot};
use crate::system::KvmSystem;
use crate::vcpu::VcpuSet;
use crate::Error;

/// Scratch memslots live above 4 GiB, far from the guest's identity-mapped first GiB, so
/// adding and deleting them never touches memory the guest uses.
const SCRATCH_BASE_GPA: u64 = 4 << 30;
const TWO_MIB: u64 = 2 << 20;

/// What to build.
#[derive(Debug, Clone)]
pub struct VmConfig {
    pub vcpus: usize,
    pub program: GuestProgram,
    /// Extra memslots the caller may add and delete while the VM runs.
    pub scratch_slots: usize,
    pub scratch_slot_bytes: u64,
    /// Consecutive guest TSC reads further apart than this are logged as a stall.
    pub gap_threshold_ns: u64,
    /// Open KVM binary statistics fds for the VM and every vCPU.
    pub stats: bool,
    /// CPUs the vCPU threads run on, vCPU i on `vcpu_cpus[i % len]`; empty: wherever the
    /// scheduler puts them.
    pub vcpu_cpus: Vec<usize>,
    /// Set by a signal: building the VM (one vCPU at a time), waiting for its vCPUs to
    /// start, and a pause or resume waiting for slow vCPUs stop within milliseconds with
    /// [`Error::Interrupted`], and what was built is torn down.
    pub interrupt: Option<Arc<AtomicBool>>,
}

impl VmConfig {
    pub fn new(vcpus: usize, program: GuestProgram) -> VmConfig {
        VmConfig {
            vcpus,
            program,
            scratch_slots: 0,
            scratch_slot_bytes: TWO_MIB,
            gap_threshold_ns: 5_000,
            stats: true,
            vcpu_cpus: Vec::new(),
            interrupt: None,
        }
    }

    /// [`Error::Interrupted`] once the interrupt flag is set.
    fn check_interrupt(&self) -> Result<(), Error> {
        match &self.interrupt {
            Some(flag) if flag.load(Ordering::Relaxed) => Err(Error::Interrupted),
            _ => Ok(()),
        }
    }

    /// Guest memory the VM maps: the boot image plus every vCPU's data area.
    pub fn main_memory_bytes(&self) -> u64 {
        let end = VCPU_AREAS_GPA + self.vcpus as u64 * VCPU_AREA_STRIDE;
        end.div_ceil(TWO_MIB) * TWO_MIB
    }

    /// Everything the VM may map at once, for the preflight memory check.
    pub fn total_memory_bytes(&self) -> u64 {
        self.main_memory_bytes()
            .saturating_add(self.scratch_slots as u64 * self.scratch_slot_bytes)
    }
}

/// A stall the guest logged: two consecutive TSC reads `before` and `after` (host TSC ticks
/// under PVM; see [`Vm::tsc_khz`] for the conversion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub tsc_before: u64,
    pub tsc_after: u64,
}

/// Gaps read from one vCPU since the previous read.
#[derive(Debug, Clone, Default)]
pub struct GapLog {
    pub gaps: Vec<Gap>,
    /// Gaps overwritten in the guest's ring before the host read them.
    pub lost: u64,
}

struct ScratchSlot {
    memory: HostMapping,
    present: bool,
}

/// A running VM. Dropping it stops and joins every vCPU thread, then closes every fd and
/// unmaps guest memory, in that order, on success and error paths alike.
pub struct Vm {
    vcpus: Option<VcpuSet>,
    vcpu_stats: Vec<StatsReader>,
    vm_stats: Option<StatsReader>,
    gap_cursors: Vec<u64>,
    tsc_khz: u64,
    program: GuestProgram,
    // Options only so that [`Vm::teardown`] can release them one at a time, timed; they
    // are Some from start() until then.
    vm_fd: Option<VmFd>,
    scratch: Vec<ScratchSlot>,
    memory: Option<HostMapping>,
}

/// How long each part of releasing one VM took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TeardownTimes {
    /// Stopping and joining the vCPU threads, closing their fds.
    pub vcpus_ns: u64,
    /// Closing the VM's fds: KVM destroys the VM when the last one goes.
    pub kvm_ns: u64,
    /// Unmapping guest memory: returning its pages to the host.
    pub munmap_ns: u64,
}

impl Vm {
    /// Builds the VM and starts its vCPUs; returns once every vCPU has entered KVM_RUN.
    pub fn start(system: &KvmSystem, config: &VmConfig) -> Result<Vm, Error> {
        check_vm_request(
            config.vcpus,
            config.total_memory_bytes(),
            system.max_vcpus(),
        )?;
        let main_bytes = config.main_memory_bytes();
        if main_bytes > IDENTITY_MAPPED_BYTES {
            return Err(Error::Impossible(format!(
                "{} vCPUs do not fit the guest's 1 GiB identity map",
                config.vcpus
            )));
        }
        let vm_fd = system
            .kvm
            .create_vm()
            .map_err(Error::kvm("KVM_CREATE_VM"))?;
        if config.program == GuestProgram::Halt {
            // HLT then blocks in the kernel instead of exiting to us on every kick.
            vm_fd
                .create_irq_chip()
                .map_err(Error::kvm("KVM_CREATE_IRQCHIP"))?;
        }

        let mut memory = HostMapping::new(main_bytes as usize).map_err(|e| {
            Error::Setup(format!(
                "cannot map {main_bytes} bytes of guest memory: {e}"
            ))
        })?;
        guest::write_boot_image(|gpa, bytes| memory.write(gpa, bytes));
        let tsc_khz = host_tsc_khz();
        let threshold_ticks = config.gap_threshold_ns.saturating_mul(tsc_khz) / 1_000_000;
        for i in 0..config.vcpus {
            let area = VcpuArea::gpa(i);
            memory.store_u64(area + VcpuArea::THRESHOLD, threshold_ticks.max(1));
            memory.store_u64(area + VcpuArea::RING_MASK, GAP_RING_ENTRIES - 1);
        }

        let mut vm = Vm {
            vcpus: None,
            vcpu_stats: Vec::new(),
            vm_stats: None,
            gap_cursors: vec![0; config.vcpus],
            tsc_khz,
            program: config.program,
            vm_fd: Some(vm_fd),
            scratch: Vec::new(),
            memory: Some(memory),
        };
        vm.set_region(0, 0, vm.memory().host_address(), main_bytes)
            .map_err(Error::kvm("KVM_SET_USER_MEMORY_REGION (guest memory)"))?;
        for _ in 0..config.scratch_slots {
            config.check_interrupt()?;
            let memory = HostMapping::new(config.scratch_slot_bytes as usize)
                .map_err(|e| Error::Setup(format!("cannot map a scratch memslot: {e}")))?;
            vm.scratch.push(ScratchSlot {
                memory,
                present: false,
            });
        }
        if config.stats {
            vm.vm_stats = Some(
                StatsReader::open(vm.vm_fd())
                    .map_err(|e| Error::Setup(format!("KVM_GET_STATS_FD (VM): {e}")))?,
            );
        }

        let cpuid = system
            .kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(Error::kvm("KVM_GET_SUPPORTED_CPUID"))?;
        let mut vcpu_fds = Vec::with_capacity(config.vcpus);
        for i in 0..config.vcpus {
            config.check_interrupt()?;
            let vcpu = vm
                .vm_fd()
                .create_vcpu(i as u64)
                .map_err(Error::kvm(format!("KVM_CREATE_VCPU {i}")))?;
            configure_vcpu(&vcpu, &cpuid, config.program, i)?;
            if config.stats {
                // Before the first KVM_RUN: afterwards this ioctl waits for the running vCPU.
                vm.vcpu_stats.push(
                    StatsReader::open(&vcpu)
                        .map_err(|e| Error::Setup(format!("KVM_GET_STATS_FD (vCPU {i}): {e}")))?,
                );
            }
            vcpu_fds.push(vcpu);
        }
        let vcpus = VcpuSet::start(
            vcpu_fds,
            &config.vcpu_cpus,
            config.interrupt.clone(),
            Duration::from_secs(30),
        )?;
        vm.vcpus = Some(vcpus);
        Ok(vm)
    }

    pub fn vcpu_count(&self) -> usize {
        self.gap_cursors.len()
    }

    pub fn program(&self) -> GuestProgram {
        self.program
    }

    fn vcpu_set(&self) -> &VcpuSet {
        self.vcpus
            .as_ref()
            .expect("vCPUs run from start() until drop")
    }

    /// Kicks every vCPU out of KVM_RUN; returns once the slowest one is out.
    pub fn pause_all(&self) -> Result<(), Error> {
        self.vcpu_set().pause()
    }

    /// Sends paused vCPUs back into KVM_RUN; returns once all have left the pause.
    pub fn resume_all(&self) -> Result<(), Error> {
        self.vcpu_set().resume()
    }

    /// Lets paused vCPUs go and returns at once, as QEMU's resume does (it broadcasts and
    /// does not wait): the cost a VMM sees. Call [`Vm::wait_released`] before the next pause.
    pub fn release_all(&self) {
        self.vcpu_set().release()
    }

    /// Returns once every vCPU let go by [`Vm::release_all`] has left the pause.
    pub fn wait_released(&self) -> Result<(), Error> {
        self.vcpu_set().wait_released()
    }

    /// Host TSC when vCPU `index`'s thread last entered KVM_RUN after a pause (0: never):
    /// the end of its scheduling delay and the start of KVM's way back into the guest.
    pub fn entered_tsc(&self, index: usize) -> u64 {
        self.vcpu_set().entered_tsc(index)
    }

    /// Kernel task ids of the vCPU threads, in vCPU order (0 for one not yet running).
    pub fn vcpu_tids(&self) -> Vec<i32> {
        self.vcpu_set().tids()
    }

    pub fn scratch_slot_count(&self) -> usize {
        self.scratch.len()
    }

    pub fn scratch_present(&self, index: usize) -> bool {
        self.scratch[index].present
    }

    /// Adds (`present`) or deletes scratch memslot `index` with one
    /// KVM_SET_USER_MEMORY_REGION: the operation the memslot scenario times.
    pub fn set_scratch(&mut self, index: usize, present: bool) -> Result<(), Error> {
        let slot = &self.scratch[index];
        let size = if present { slot.memory.len() as u64 } else { 0 };
        let gpa = SCRATCH_BASE_GPA + index as u64 * slot.memory.len() as u64;
        self.set_region(1 + index as u32, gpa, slot.memory.host_address(), size)
            .map_err(Error::kvm(format!(
                "KVM_SET_USER_MEMORY_REGION ({} scratch slot {index})",
                if present { "add" } else { "delete" }
            )))?;
        self.scratch[index].present = present;
        Ok(())
    }

    fn set_region(
        &self,
        slot: u32,
        gpa: u64,
        host: u64,
        size: u64,
    ) -> Result<(), kvm_ioctls::Error> {
        let region = kvm_userspace_memory_region {
            slot,
            flags: 0,
            guest_phys_addr: gpa,
            memory_size: size,
            userspace_addr: host,
        };
        // SAFETY: `host` is the start of a mapping of at least `size` bytes owned by this Vm
        // (guest memory or a scratch slot). Field order in Vm drops the VM fd, and with it
        // every slot, before those mappings are unmapped.
        unsafe { self.vm_fd().set_user_memory_region(region) }
    }

    /// The guest's loop counter for vCPU `index` (spinning guests only; 0 when halted).
    pub fn progress(&self, index: usize) -> u64 {
        self.memory()
            .read_u64(VcpuArea::gpa(index) + VcpuArea::PROGRESS)
    }

    /// Returns once every spinning vCPU has executed guest code since the call, or after
    /// `timeout` (false then). Sleeps between polls instead of yielding, so a SCHED_FIFO
    /// caller cannot starve the vCPUs it waits for. Halted guests never run: true at once.
    /// Ends with [`Error::Interrupted`] once the interrupt flag ([`VmConfig::interrupt`])
    /// is set: under overcommit this wait runs into its timeout between every two samples.
    pub fn wait_until_every_vcpu_ran(&self, timeout: Duration) -> Result<bool, Error> {
        if self.program != GuestProgram::Spin {
            return Ok(true);
        }
        let start: Vec<u64> = (0..self.vcpu_count()).map(|i| self.progress(i)).collect();
        let deadline = Instant::now() + timeout;
        let mut waiting: Vec<usize> = (0..self.vcpu_count()).collect();
        loop {
            waiting.retain(|&i| self.progress(i) == start[i]);
            if waiting.is_empty() {
                return Ok(true);
            }
            if self.vcpu_set().interrupted() {
                return Err(Error::Interrupted);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Gaps vCPU `index` logged since the previous call.
    pub fn take_gaps(&mut self, index: usize) -> GapLog {
        let area = VcpuArea::gpa(index);
        let count = self.memory().read_u64(area + VcpuArea::GAP_COUNT);
        let cursor = self.gap_cursors[index];
        let available = count.saturating_sub(cursor);
        // The guest may overwrite the oldest slots while we read; one ring's worth minus a
        // margin is safe to read, the rest is reported as lost rather than read torn.
        let readable = available.min(GAP_RING_ENTRIES - 64);
        let mut log = GapLog {
            gaps: Vec::with_capacity(readable as usize),
            lost: available - readable,
        };
        for seq in count - readable..count {
            let entry =
                area + VcpuArea::RING + (seq & (GAP_RING_ENTRIES - 1)) * VcpuArea::RING_ENTRY_BYTES;
            log.gaps.push(Gap {
                tsc_before: self.memory().read_u64(entry),
                tsc_after: self.memory().read_u64(entry + 8),
            });
        }
        self.gap_cursors[index] = count;
        log
    }

    /// TSC frequency used to convert guest TSC values to nanoseconds.
    pub fn tsc_khz(&self) -> u64 {
        self.tsc_khz
    }

    /// Snapshot of the VM's statistics and the sum of every vCPU's.
    pub fn stats_snapshot(&self) -> Option<(StatsSnapshot, StatsSnapshot)> {
        let vm = self.vm_stats.as_ref()?.snapshot().ok()?;
        let mut vcpu_sum = StatsSnapshot::new();
        for reader in &self.vcpu_stats {
            for (name, value) in reader.snapshot().ok()? {
                *vcpu_sum.entry(name).or_default() += value;
            }
        }
        Some((vm, vcpu_sum))
    }

    /// Cumulative statistics that changed between two snapshots: (VM, summed vCPUs).
    pub fn stats_delta(
        &self,
        before: &(StatsSnapshot, StatsSnapshot),
        after: &(StatsSnapshot, StatsSnapshot),
    ) -> (
        std::collections::BTreeMap<String, u64>,
        std::collections::BTreeMap<String, u64>,
    ) {
        let vm = self
            .vm_stats
            .as_ref()
            .map(|r| cumulative_delta(r.cumulative_names(), &before.0, &after.0))
            .unwrap_or_default();
        let vcpu = self
            .vcpu_stats
            .first()
            .map(|r| cumulative_delta(r.cumulative_names(), &before.1, &after.1))
            .unwrap_or_default();
        (vm, vcpu)
    }
}

impl Vm {
    fn vm_fd(&self) -> &VmFd {
        self.vm_fd.as_ref().expect("the VM fd lives until teardown")
    }

    fn memory(&self) -> &HostMapping {
        self.memory
            .as_ref()
            .expect("guest memory lives until teardown")
    }

    /// Writes every page of scratch slot `index`, so the host really backs it with memory
    /// (what a long-running guest's RAM looks like when the VM is torn down).
    pub fn touch_scratch(&mut self, index: usize) {
        let slot = &mut self.scratch[index].memory;
        let page = 4096u64;
        for offset in (0..slot.len() as u64).step_by(page as usize) {
            slot.write(offset, &[1]);
        }
    }

    /// Releases the VM in the order Drop does, timing each part.
    pub fn teardown(mut self) -> TeardownTimes {
        let clock = std::time::Instant::now;
        let start = clock();
        self.vcpus.take();
        self.vcpu_stats.clear();
        let vcpus_done = clock();
        self.vm_stats.take();
        self.vm_fd.take();
        let kvm_done = clock();
        self.scratch.clear();
        self.memory.take();
        let munmap_done = clock();
        TeardownTimes {
            vcpus_ns: (vcpus_done - start).as_nanos() as u64,
            kvm_ns: (kvm_done - vcpus_done).as_nanos() as u64,
            munmap_ns: (munmap_done - kvm_done).as_nanos() as u64,
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // Join the vCPU threads (closing their fds) before the VM fd and memory go.
        self.vcpus.take();
    }
}

fn configure_vcpu(
    vcpu: &VcpuFd,
    cpuid: &kvm_bindings::CpuId,
    program: GuestProgram,
    index: usize,
) -> Result<(), Error> {
    // Long mode needs the LM CPUID bit, so the guest gets what the host supports.
    vcpu.set_cpuid2(cpuid)
        .map_err(Error::kvm("KVM_SET_CPUID2"))?;
    let sregs = vcpu.get_sregs().map_err(Error::kvm("KVM_GET_SREGS"))?;
    vcpu.set_sregs(&long_mode_sregs(sregs, program))
        .map_err(Error::kvm("KVM_SET_SREGS"))?;
    vcpu.set_regs(&entry_regs(program, index))
        .map_err(Error::kvm("KVM_SET_REGS"))?;
    Ok(())
}

/// The host TSC frequency in kHz, calibrated against CLOCK_MONOTONIC over 20 ms.
/// Under PVM the guest reads the host's TSC unchanged, so this converts guest gaps too.
pub fn host_tsc_khz() -> u64 {
    static KHZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *KHZ.get_or_init(|| {
        let start = Instant::now();
        let tsc_start = crate::rdtsc();
        while start.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let tsc_end = crate::rdtsc();
        let elapsed_ns = start.elapsed().as_nanos() as u64;
        (tsc_end - tsc_start) * 1_000_000 / elapsed_ns.max(1)
    })
}
