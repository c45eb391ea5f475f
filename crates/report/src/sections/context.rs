//! The context above the numbers: what ran, where, how busy the host was, and the run's
//! warnings. An untitled section: every format sets it under the page's title.

use vmscale_run::{HostFacts, RunRecord};

use crate::document::{self, Block, Section, Text};
use crate::units;

/// The facts, then the warnings if there are any.
pub(crate) fn section(record: &RunRecord) -> Section {
    let mut section = Section::new("context", "");
    section.blocks.push(Block::Facts(
        facts(record)
            .into_iter()
            .map(|fact| document::Fact {
                label: fact.label,
                // The command line is code, so that quotes and `*` survive Markdown.
                value: if fact.label == "command" {
                    Text::code(fact.value)
                } else {
                    Text::from(fact.value)
                },
            })
            .collect(),
    ));
    if !record.warnings.is_empty() {
        section
            .blocks
            .push(Block::Warnings(record.warnings.clone()));
    }
    section
}

/// One labelled line of the header block.
struct Fact {
    label: &'static str,
    value: String,
}

/// The header block, in reading order.
fn facts(record: &RunRecord) -> Vec<Fact> {
    let mut out = vec![
        Fact {
            label: "scenario",
            value: format!("{} (sweep: {})", record.scenario, record.sweep),
        },
        Fact {
            label: "tool",
            value: format!("{} {}", record.tool.name, record.tool.version),
        },
        Fact {
            label: "command",
            value: shell_words(&record.command_line),
        },
        Fact {
            label: "started",
            value: started(record),
        },
        Fact {
            label: "host",
            value: host(&record.host),
        },
    ];
    if let Some(kvm) = kvm(&record.host) {
        out.push(Fact {
            label: "kvm",
            value: kvm,
        });
    }
    out.push(Fact {
        label: "load",
        value: match &record.background {
            Some(load) => format!(
                "other processes used {}% of the CPUs",
                units::percent(load.other_busy_fraction)
            ),
            // Saying so keeps a missing measurement from reading as an idle machine.
            None => "not measured".into(),
        },
    });
    if let Some(knobs) = knobs(&record.knobs) {
        out.push(Fact {
            label: "knobs",
            value: knobs,
        });
    }
    if let Some(sample) = sample_legend(record) {
        out.push(Fact {
            label: "one sample",
            value: sample,
        });
    }
    out
}

fn started(record: &RunRecord) -> String {
    if record.finished_utc.is_empty() {
        record.started_utc.clone()
    } else {
        format!("{} (finished {})", record.started_utc, record.finished_utc)
    }
}

fn host(host: &HostFacts) -> String {
    let memory = if host.memory_bytes == 0 {
        "unknown memory".to_string()
    } else {
        units::gib(host.memory_bytes)
    };
    format!(
        "{}, kernel {}, {}, {} online CPUs, {}",
        host.hostname, host.kernel_release, host.cpu_model, host.online_cpus, memory
    )
}

fn kvm(host: &HostFacts) -> Option<String> {
    let kvm = host.kvm.as_ref()?;
    let mut parts = vec![kvm.backend.clone()];
    if let Some(tdp_mmu) = kvm.tdp_mmu {
        parts.push(format!("tdp_mmu {}", if tdp_mmu { "on" } else { "off" }));
    }
    parts.push(format!("max {} vCPUs", kvm.max_vcpus));
    Some(parts.join(", "))
}

/// `key=value` pairs of a knobs object, values as compact JSON.
fn knobs(knobs: &serde_json::Value) -> Option<String> {
    let object = knobs.as_object().filter(|o| !o.is_empty())?;
    let pairs: Vec<String> = object
        .iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(s) => format!("{key}={s}"),
            other => format!("{key}={other}"),
        })
        .collect();
    Some(pairs.join(", "))
}

/// What one sample measures, per strategy; said once when every strategy times the same
/// kind of operation.
fn sample_legend(record: &RunRecord) -> Option<String> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for series in record.points.iter().flat_map(|p| &p.series) {
        if !series.sample_is.is_empty() && !seen.iter().any(|(name, _)| *name == series.name) {
            seen.push((&series.name, &series.sample_is));
        }
    }
    let first = seen.first()?.1;
    if seen.iter().all(|(_, what)| *what == first) {
        return Some(first.to_string());
    }
    let described: Vec<String> = seen
        .iter()
        .map(|(name, what)| format!("{name}: {what}"))
        .collect();
    Some(described.join("; "))
}

/// argv as a line a shell would split back into the same words.
pub(crate) fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|word| shell_quote(word))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_quotes_only_words_that_need_it() {
        let argv: Vec<String> = ["vmscale", "run", "--note", "it's busy", "--vcpus=1,2", ""]
            .map(String::from)
            .to_vec();
        assert_eq!(
            shell_words(&argv),
            r"vmscale run --note 'it'\''s busy' --vcpus=1,2 ''"
        );
    }

    #[test]
    fn knobs_read_as_key_value_pairs() {
        let value = serde_json::json!({"iterations": 100, "mode": "spin", "vcpus": [1, 2]});
        assert_eq!(
            knobs(&value).unwrap(),
            "iterations=100, mode=spin, vcpus=[1,2]"
        );
        assert_eq!(knobs(&serde_json::json!({})), None);
    }
}
