//! `--pin MAIN[:VCPUS]`: the CPUs the measuring thread and the vCPU threads run on.
//!
//! Left to the scheduler, the measuring thread lands on one CPU or another from run to run,
//! and some operations are woken from a fixed CPU (a memslot update waits for an SRCU grace
//! period whose callbacks run on CPU 0's kworker): a wakeup across CPUs costs an IPI, and
//! in a VM an idle vCPU's IPI costs tens of microseconds more. The same run then lands at
//! one of two medians. Pinning makes the placement part of the configuration, recorded in
//! run.json (docs/repeatability.md).

use serde::{Deserialize, Serialize};

use crate::Error;

/// Where the threads run and how many independent runs make a point.
#[derive(Debug, clap::Args)]
pub struct RepeatabilityArgs {
    /// MAIN[:VCPUS]: run the measuring thread on CPU MAIN and the vCPUs on the CPU list
    /// VCPUS (round robin), e.g. 0, 0:1 or :0-1; recorded in run.json
    #[arg(long, value_name = "MAIN[:VCPUS]")]
    pub pin: Option<String>,
    /// Independent runs of the whole sweep (fresh VMs and threads each), merged per point,
    /// with the run-to-run spread reported beside each run's own distribution
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
}

impl RepeatabilityArgs {
    /// `--pin`, parsed and checked against the CPUs this process may use (unpinned when
    /// absent).
    pub fn pinning(&self) -> Result<Pinning, Error> {
        match &self.pin {
            Some(spec) => Pinning::parse(spec),
            None => Ok(Pinning::default()),
        }
    }
}

/// Where the measuring thread and the vCPUs run; empty fields leave it to the scheduler.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinning {
    /// The measuring thread's CPU.
    pub main: Option<usize>,
    /// vCPU i runs on `vcpus[i % len]`.
    pub vcpus: Vec<usize>,
}

impl Pinning {
    /// Parses `MAIN`, `MAIN:VCPUS` or `:VCPUS`, where VCPUS is a CPU list (`1`, `0-1`,
    /// `0,2-3`), and checks every CPU is one this process may run on.
    pub fn parse(spec: &str) -> Result<Pinning, Error> {
        let usage = |why: String| Error::Usage(format!("--pin {spec}: {why}"));
        let (main, vcpus) = spec.split_once(':').unwrap_or((spec, ""));
        let main = match main.trim() {
            "" => None,
            cpu => Some(parse_cpu(cpu).map_err(usage)?),
        };
        let vcpus = parse_cpu_list(vcpus).map_err(usage)?;
        if main.is_none() && vcpus.is_empty() {
            return Err(usage("expected MAIN[:VCPUS], e.g. 0 or 0:1 or :0-1".into()));
        }
        let allowed = vmscale_kvm::affinity::process_cpus().map_err(|e| {
            Error::Kvm(vmscale_kvm::Error::Setup(format!(
                "cannot read the process's CPU set: {e}"
            )))
        })?;
        if let Some(cpu) = main.iter().chain(&vcpus).find(|c| !allowed.contains(c)) {
            return Err(usage(format!(
                "CPU {cpu} is not one this process may run on ({})",
                format_cpu_list(&allowed)
            )));
        }
        Ok(Pinning { main, vcpus })
    }

    pub fn is_empty(&self) -> bool {
        self.main.is_none() && self.vcpus.is_empty()
    }

    /// Pins the calling (measuring) thread while the guard lives. Enter it after the VM's
    /// vCPU threads exist: they place themselves, but a thread created under the guard by
    /// anyone else would inherit the pin.
    pub fn pin_measuring_thread(&self) -> Result<Option<vmscale_kvm::affinity::PinGuard>, Error> {
        self.main
            .map(|cpu| {
                vmscale_kvm::affinity::PinGuard::enter(&[cpu]).map_err(|e| {
                    Error::Kvm(vmscale_kvm::Error::Setup(format!(
                        "cannot pin the measuring thread to CPU {cpu}: {e}"
                    )))
                })
            })
            .transpose()
    }
}

impl std::fmt::Display for Pinning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.main {
            Some(cpu) => write!(f, "measuring thread on CPU {cpu}")?,
            None => write!(f, "measuring thread unpinned")?,
        }
        match self.vcpus.as_slice() {
            [] => write!(f, ", vCPUs unpinned"),
            cpus => write!(f, ", vCPUs on CPUs {}", format_cpu_list(cpus)),
        }
    }
}

fn parse_cpu(word: &str) -> Result<usize, String> {
    word.trim()
        .parse()
        .map_err(|_| format!("'{word}' is not a CPU number"))
}

fn parse_cpu_list(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((low, high)) => {
                let (low, high) = (parse_cpu(low)?, parse_cpu(high)?);
                if low > high {
                    return Err(format!("'{part}' is an empty range"));
                }
                if high - low >= 4096 {
                    return Err(format!("'{part}' names more CPUs than a host has"));
                }
                cpus.extend(low..=high);
            }
            None => cpus.push(parse_cpu(part)?),
        }
    }
    Ok(cpus)
}

/// `0-3,6` style, as the kernel prints CPU lists.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_parse() {
        assert_eq!(
            Pinning::parse("0").unwrap(),
            Pinning {
                main: Some(0),
                vcpus: vec![]
            }
        );
        assert_eq!(
            Pinning::parse("0:0-1").unwrap(),
            Pinning {
                main: Some(0),
                vcpus: vec![0, 1]
            }
        );
        assert_eq!(
            Pinning::parse(":1").unwrap(),
            Pinning {
                main: None,
                vcpus: vec![1]
            }
        );
    }

    #[test]
    fn nonsense_and_absent_cpus_are_usage_errors() {
        for bad in ["", ":", "x", "0:1-0", "0:a", "99999", "0:5000-99999"] {
            let e = Pinning::parse(bad).unwrap_err();
            assert!(e.is_usage(), "{bad}: {e}");
            assert!(e.to_string().starts_with("--pin "), "{e}");
        }
    }

    #[test]
    fn cpu_lists_print_as_the_kernel_prints_them() {
        assert_eq!(format_cpu_list(&[3, 0, 1, 2, 6]), "0-3,6");
        assert_eq!(format_cpu_list(&[1]), "1");
    }
}
