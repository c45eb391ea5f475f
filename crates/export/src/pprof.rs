//! A run's on-CPU samples (and any wait stacks an analysis adds) as a pprof profile
//! (`perftools.profiles.Profile`, gzipped protobuf), for `go tool pprof`, speedscope and
//! Pyroscope; and as folded stacks.
//!
//! Sample types: `samples/count` and `cpu/nanoseconds` (the samples' CPU time), plus
//! `wait/nanoseconds` when the profile holds wait stacks ([`Profile::add`], labelled for
//! example with `cause` and `lock`). `cpu` is the default. Each distinct frame name is one
//! function and one location; a sample's locations are leaf first, as pprof wants, so the
//! root is the process's name. Kernel frames' functions have the file name
//! `[kernel.kallsyms]`, so `-focus` and `-hide` can tell them apart.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use prost::Message;
use vmscale_sample::{Filter, FrameKind, Profile, ReadError, Samples};

/// The messages of profile.proto that vmscale writes (field numbers from pprof's
/// profile.proto).
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PprofSummary {
    /// On-CPU samples, and the CPU time they stand for.
    pub samples: u64,
    pub cpu_ns: u64,
    /// Time of the wait stacks, where an analysis added some.
    pub wait_ns: u64,
    /// Distinct stacks (pprof samples) and functions.
    pub stacks: usize,
    pub functions: usize,
    /// Sample records the kernel could not store.
    pub lost: u64,
}

/// The on-CPU samples of `trace_dir` that a run's exports use: those taken while the trace
/// was on, the idle task's apart, less `excluded_tids` (other runs' threads).
pub fn run_profile(trace_dir: &Path, excluded_tids: &[u32]) -> Result<Profile, ReadError> {
    let samples = Samples::open(trace_dir)?;
    let filter = Filter {
        windows: samples.meta().windows.clone(),
        exclude_pids: excluded_tids.iter().copied().collect(),
        ..Filter::default()
    };
    Profile::on_cpu(trace_dir, &filter)
}

/// Adds the run's time off a CPU, by wait chain ([`vmscale_run::wait_chains`]), to
/// `profile` as wait stacks labelled with their cause and lock, so that one pprof file
/// holds the CPU time and the waiting (`-sample_index wait`). Returns the time added.
pub fn add_wait_chains(profile: &mut Profile, trace: &vmscale_run::TraceSection) -> u64 {
    let mut added = 0;
    for chain in vmscale_run::wait_chains::chains(trace) {
        // None of a chain's frames is a function: each is a task or a step of the wait.
        let frames: Vec<(&str, FrameKind)> = chain
            .frames
            .iter()
            .map(|f| (f.as_str(), FrameKind::Task))
            .collect();
        let mut labels = vec![("cause", chain.kind.label())];
        if !chain.lock.is_empty() {
            labels.push(("lock", chain.lock.as_str()));
        }
        profile.add(&frames, chain.ns, &labels);
        added += chain.ns;
    }
    added
}

/// Strings by index, each once; index 0 is "" as pprof requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// `profile` as a pprof `Profile` message (not yet encoded).
pub fn to_pprof(profile: &Profile) -> (proto::Profile, PprofSummary) {
    let mut strings = Strings::new();
    let with_wait = profile.stacks.iter().any(|s| s.wait_ns > 0);
    let mut sample_type = vec![
        proto::ValueType {
            r#type: strings.id("samples"),
            unit: strings.id("count"),
        },
        proto::ValueType {
            r#type: strings.id("cpu"),
            unit: strings.id("nanoseconds"),
        },
    ];
    if with_wait {
        sample_type.push(proto::ValueType {
            r#type: strings.id("wait"),
            unit: strings.id("nanoseconds"),
        });
    }
    let kernel_file = strings.id("[kernel.kallsyms]");
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    let mut by_frame: HashMap<(&str, FrameKind), u64> = HashMap::new();
    let mut samples = Vec::with_capacity(profile.stacks.len());
    for stack in &profile.stacks {
        let location_id = stack
            .frames
            .iter()
            .rev()
            .map(|frame| {
                *by_frame
                    .entry((&frame.name, frame.kind))
                    .or_insert_with(|| {
                        let id = functions.len() as u64 + 1;
                        let name = strings.id(&frame.name);
                        functions.push(proto::Function {
                            id,
                            name,
                            system_name: name,
                            filename: if frame.kind == FrameKind::Kernel {
                                kernel_file
                            } else {
                                0
                            },
                            start_line: 0,
                        });
                        locations.push(proto::Location {
                            id,
                            mapping_id: 0,
                            address: 0,
                            line: vec![proto::Line {
                                function_id: id,
                                line: 0,
                            }],
                        });
                        id
                    })
            })
            .collect();
        let mut value = vec![stack.samples as i64, stack.cpu_ns as i64];
        if with_wait {
            value.push(stack.wait_ns as i64);
        }
        let label = stack
            .labels
            .iter()
            .map(|(k, v)| proto::Label {
                key: strings.id(k),
                str: strings.id(v),
                num: 0,
                num_unit: 0,
            })
            .collect();
        samples.push(proto::Sample {
            location_id,
            value,
            label,
        });
    }
    let summary = PprofSummary {
        samples: profile.stacks.iter().map(|s| s.samples).sum(),
        cpu_ns: profile.cpu_ns(),
        wait_ns: profile.wait_ns(),
        stacks: samples.len(),
        functions: functions.len(),
        lost: profile.read.lost,
    };
    let cpu = strings.id("cpu");
    let period_type = Some(proto::ValueType {
        r#type: cpu,
        unit: strings.id("nanoseconds"),
    });
    let comment = vec![strings.id(&format!(
        "vmscale on-CPU samples: cpu-clock at {} Hz per CPU ({} ns each){}{}",
        profile.hz,
        profile.period_ns,
        if summary.lost > 0 {
            format!("; {} sample records lost", summary.lost)
        } else {
            String::new()
        },
        if with_wait {
            "; wait: time off a CPU by wait chain (whose time, the wait, who ended it, what they did), labelled with its cause and lock"
        } else {
            ""
        }
    ))];
    let message = proto::Profile {
        sample_type,
        sample: samples,
        mapping: Vec::new(),
        location: locations,
        function: functions,
        string_table: strings.table,
        time_nanos: 0,
        duration_nanos: 0,
        period_type,
        period: profile.period_ns as i64,
        comment,
        default_sample_type: cpu,
    };
    (message, summary)
}

/// `profile` as a gzipped pprof profile into `out`.
pub fn write_pprof<W: Write>(profile: &Profile, out: W) -> std::io::Result<PprofSummary> {
    let (message, summary) = to_pprof(profile);
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&message.encode_to_vec())?;
    gz.finish()?.flush()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_sample::StackFrame;

    #[test]
    fn stacks_become_leaf_first_samples_with_shared_functions() {
        let mut profile = Profile::new(1_000_000, 1000);
        let frame = |name: &str, kind| StackFrame {
            name: name.into(),
            kind,
        };
        let a = vec![
            frame("qemu", FrameKind::Task),
            frame("main", FrameKind::User),
            frame("ioctl", FrameKind::User),
            frame("kvm_vm_ioctl", FrameKind::Kernel),
        ];
        profile.add_sample(a.clone(), 1_000_000);
        profile.add_sample(a, 1_000_000);
        profile.add_sample(
            vec![
                frame("qemu", FrameKind::Task),
                frame("main", FrameKind::User),
            ],
            1_000_000,
        );
        profile.add(
            &[
                ("qemu", FrameKind::Task),
                ("kvm_vm_ioctl", FrameKind::Kernel),
            ],
            5_000,
            &[("cause", "lock-wait"), ("lock", "kvm->slots_lock")],
        );
        let (message, summary) = to_pprof(&profile);
        assert_eq!(summary.samples, 3);
        assert_eq!(summary.cpu_ns, 3_000_000);
        assert_eq!(summary.wait_ns, 5_000);
        assert_eq!(message.sample_type.len(), 3);
        assert_eq!(message.function.len(), 4);
        let name = |id: u64| {
            let f = &message.function[id as usize - 1];
            message.string_table[f.name as usize].as_str()
        };
        let first = &message.sample[0];
        assert_eq!(name(first.location_id[0]), "kvm_vm_ioctl");
        assert_eq!(name(*first.location_id.last().unwrap()), "qemu");
        assert_eq!(first.value, vec![2, 2_000_000, 0]);
        let wait = &message.sample[2];
        assert_eq!(wait.value, vec![0, 0, 5_000]);
        assert_eq!(wait.label.len(), 2);
        assert_eq!(message.string_table[0], "");
    }
}
