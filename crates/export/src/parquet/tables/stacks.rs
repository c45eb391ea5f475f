//! `stacks`: the run's stacks with what they weigh, root first, so flame graphs can be
//! drawn across runs: on-CPU samples (the whole trace's, and each swept value's) and the
//! stacks lock waits were entered from. A stack's id is a hash of its frames, the same in
//! every run, so the same stack can be summed across runs without comparing frame lists.

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, SchemaRef};
use serde::Serialize;
use vmscale_run::findings::StackProfile;
use vmscale_run::RunRecord;

use crate::parquet::batch::*;

#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    what: &'static str,
    n: Option<u64>,
    lock: Option<&'a str>,
    lock_addr: Option<String>,
    stack_id: String,
    frames: Vec<&'a str>,
    kernel_from: Option<u32>,
    user_from: Option<u32>,
    count: u64,
    weight_ns: u64,
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        text("what"),
        int_or_null("n"),
        text_or_null("lock"),
        text_or_null("lock_addr"),
        text("stack_id"),
        list("frames", DataType::Utf8),
        int_or_null("kernel_from"),
        int_or_null("user_from"),
        int("count"),
        int("weight_ns"),
    ])
}

/// 64-bit FNV-1a over the frames, each ended by a NUL (no frame name holds one), as hex.
fn stack_id<'a>(frames: impl IntoIterator<Item = &'a str>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for frame in frames {
        for b in frame.bytes().chain([0]) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

fn on_cpu<'a>(
    id: &'a str,
    what: &'static str,
    n: Option<u64>,
    profile: &'a StackProfile,
    rows: &mut Vec<Row<'a>>,
) {
    for stack in &profile.stacks {
        let frames: Vec<&str> = stack
            .frames
            .iter()
            .map(|&i| profile.names.get(i as usize).map_or("?", String::as_str))
            .collect();
        rows.push(Row {
            run_id: id,
            what,
            n,
            lock: None,
            lock_addr: None,
            stack_id: stack_id(frames.iter().copied()),
            frames,
            kernel_from: Some(stack.kernel_from),
            user_from: Some(stack.user_from),
            count: stack.samples,
            weight_ns: stack.samples.saturating_mul(profile.period_ns),
        });
    }
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let mut rows = Vec::new();
    if let Some(trace) = &record.trace {
        if let Some(profile) = &trace.on_cpu {
            on_cpu(id, "on-cpu", None, profile, &mut rows);
        }
        for point in &trace.on_cpu_by_n {
            on_cpu(id, "on-cpu-at-n", Some(point.n), &point.profile, &mut rows);
        }
        for lock in &trace.contention {
            for stack in &lock.stacks {
                // Recorded innermost first; flame graphs read root first.
                let frames: Vec<&str> = stack.frames.iter().rev().map(String::as_str).collect();
                rows.push(Row {
                    run_id: id,
                    what: "lock-wait",
                    n: None,
                    lock: Some(&lock.name),
                    lock_addr: Some(address(lock.lock_addr)),
                    stack_id: stack_id(frames.iter().copied()),
                    frames,
                    kernel_from: None,
                    user_from: None,
                    count: stack.waits,
                    weight_ns: stack.total_wait_ns,
                });
            }
        }
    }
    to_batch(schema(), &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_id_depends_on_the_frames_and_their_boundaries() {
        assert_eq!(stack_id(["a", "b"]), stack_id(["a", "b"]));
        assert_ne!(stack_id(["a", "b"]), stack_id(["b", "a"]));
        assert_ne!(stack_id(["ab"]), stack_id(["a", "b"]));
        assert_eq!(stack_id(["a"]).len(), 16);
    }
}
