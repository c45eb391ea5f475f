//! Facts about the host, recorded in every run so two runs can be compared honestly.

use serde::{Deserialize, Serialize};
pub use vmscale_sys::host::{host_memory, HostMemory, KvmFacts};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub kernel_release: String,
    pub kernel_version: String,
    pub cpu_model: String,
    pub online_cpus: usize,
    pub memory_bytes: u64,
    /// None when /dev/kvm could not be opened (e.g. a run that only re-renders).
    pub kvm: Option<KvmFacts>,
}

impl HostFacts {
    pub fn probe(kvm: Option<KvmFacts>) -> HostFacts {
        let uname = uname();
        HostFacts {
            hostname: uname.0,
            kernel_release: uname.1,
            kernel_version: uname.2,
            cpu_model: cpu_model().unwrap_or_else(|| "unknown".into()),
            online_cpus: online_cpus(),
            memory_bytes: host_memory().map(|m| m.total_bytes).unwrap_or(0),
            kvm,
        }
    }

    /// How the two hosts differ in ways that change results, one phrase per difference.
    pub fn differences(&self, other: &HostFacts) -> Vec<String> {
        let mut out = Vec::new();
        let mut compare = |what: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{what}: {a} vs {b}"));
            }
        };
        compare(
            "kernel",
            self.kernel_release.clone(),
            other.kernel_release.clone(),
        );
        compare("CPU", self.cpu_model.clone(), other.cpu_model.clone());
        compare(
            "online CPUs",
            self.online_cpus.to_string(),
            other.online_cpus.to_string(),
        );
        compare(
            "KVM backend",
            self.kvm
                .as_ref()
                .map(|k| k.backend.clone())
                .unwrap_or_default(),
            other
                .kvm
                .as_ref()
                .map(|k| k.backend.clone())
                .unwrap_or_default(),
        );
        out
    }
}

fn field(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn uname() -> (String, String, String) {
    // SAFETY: utsname is plain old data; zeroed is a valid value for it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct we own and cannot fail with a valid pointer.
    unsafe { libc::uname(&mut u) };
    (field(&u.nodename), field(&u.release), field(&u.version))
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

/// CPUs the kernel has online (not the affinity mask: overcommit is about the host).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_reads_this_host() {
        let h = HostFacts::probe(None);
        assert!(!h.kernel_release.is_empty());
        assert!(h.online_cpus >= 1);
        assert!(h.memory_bytes > 0);
        assert_ne!(h.cpu_model, "unknown");
    }

    #[test]
    fn differences_name_what_changed() {
        let a = HostFacts::probe(None);
        let mut b = a.clone();
        assert!(a.differences(&b).is_empty());
        b.kernel_release = "0.0.0-other".into();
        b.online_cpus += 1;
        let d = a.differences(&b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("kernel:"));
    }
}
