//! Opening /dev/kvm and describing the host's KVM.

use std::path::Path;

use kvm_ioctls::Kvm;
use vmscale_sys::host::KvmFacts;

use crate::Error;

pub const KVM_DEVICE: &str = "/dev/kvm";

/// An open /dev/kvm.
pub struct KvmSystem {
    pub(crate) kvm: Kvm,
}

impl KvmSystem {
    pub fn open() -> Result<KvmSystem, Error> {
        Self::open_path(Path::new(KVM_DEVICE))
    }

    pub fn open_path(path: &Path) -> Result<KvmSystem, Error> {
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::Unavailable(format!("{} is not a valid path", path.display())))?;
        let kvm = Kvm::new_with_path(c_path.as_c_str()).map_err(|e| {
            let shown = path.display();
            Error::Unavailable(match e.errno() {
                libc::ENOENT => format!(
                    "{shown} does not exist: this host has no KVM (enable VT-x/AMD-V or nested virtualization and load kvm)"
                ),
                libc::EACCES | libc::EPERM => {
                    format!("cannot open {shown}: permission denied (run as root or join the kvm group)")
                }
                _ => format!("cannot open {shown}: {e}"),
            })
        })?;
        let system = KvmSystem { kvm };
        // A file that opens but is not KVM (or an incompatible API) answers this wrongly.
        match system.kvm.get_api_version() {
            12 => Ok(system),
            v => Err(Error::Unavailable(format!(
                "{} is not a usable KVM device (KVM_GET_API_VERSION returned {v}, expected 12)",
                path.display()
            ))),
        }
    }

    pub fn max_vcpus(&self) -> usize {
        self.kvm.get_max_vcpus()
    }

    pub fn facts(&self) -> KvmFacts {
        KvmFacts {
            api_version: self.kvm.get_api_version(),
            max_vcpus: self.kvm.get_max_vcpus(),
            recommended_vcpus: self.kvm.get_nr_vcpus(),
            backend: detect_backend().to_string(),
            tdp_mmu: read_module_param("kvm", "tdp_mmu").map(|v| v == "Y" || v == "1"),
            halt_poll_ns: read_module_param("kvm", "halt_poll_ns").and_then(|v| v.parse().ok()),
        }
    }

    pub fn has_binary_stats(&self) -> bool {
        // kvm-ioctls has no Cap variant for this capability yet.
        self.kvm
            .check_extension_raw(kvm_bindings::KVM_CAP_BINARY_STATS_FD.into())
            > 0
    }
}

fn read_module_param(module: &str, param: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/module/{module}/parameters/{param}"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Which vendor module drives KVM. Built-in modules appear under /sys/module too when they
/// have parameters, which all three do.
pub fn detect_backend() -> &'static str {
    for (module, name) in [("kvm_pvm", "pvm"), ("kvm_intel", "vmx"), ("kvm_amd", "svm")] {
        if Path::new("/sys/module").join(module).exists() {
            return name;
        }
    }
    "unknown"
}
