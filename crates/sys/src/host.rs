//! What the host's memory and KVM are: facts a run records, and a preflight checks.

use serde::{Deserialize, Serialize};

/// What a run records about the KVM it ran on, since the same scenario behaves differently
/// on another backend (shadow paging under PVM versus the TDP MMU on VMX/SVM hosts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvmFacts {
    pub api_version: i32,
    pub max_vcpus: usize,
    pub recommended_vcpus: usize,
    /// `kvm_intel` (vmx), `kvm_amd` (svm), `kvm_pvm` (pvm), or `unknown`.
    pub backend: String,
    /// `/sys/module/kvm/parameters/tdp_mmu`, when the kernel has it.
    pub tdp_mmu: Option<bool>,
    pub halt_poll_ns: Option<u64>,
}

/// Host memory as /proc/meminfo reports it.
#[derive(Debug, Clone, Copy)]
pub struct HostMemory {
    pub total_bytes: u64,
    pub available_bytes: u64,
}

pub fn host_memory() -> Option<HostMemory> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some(HostMemory {
        total_bytes: field("MemTotal:")?,
        available_bytes: field("MemAvailable:")?,
    })
}
