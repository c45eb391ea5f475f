//! A live kernel recording exported to Perfetto and read back by Perfetto's own Python
//! protos (PyPI's `perfetto` package), an implementation independent of the export's.
//! Needs root, tracefs, python3 and that package: fails (never skips) without them.

use std::io::Write;
use std::process::{Command, Stdio};

use vmscale_export::perfetto::{export_perfetto, write_perfetto};
use vmscale_trace::record::recorder::{RecordConfig, Recording};
use vmscale_trace::record::tracefs;

/// Parses the trace on stdin with `perfetto_trace_pb2` and prints counts; exits non-zero
/// with a reason when a check fails.
const VALIDATE: &str = r#"
import sys
from collections import Counter
try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError:
    from perfetto.trace_processor import perfetto_trace_pb2 as pb
TE = pb.TrackEvent
trace = pb.Trace()
trace.ParseFromString(sys.stdin.buffer.read())
names, depth, kinds, phases = {}, Counter(), Counter(), []
errors = []
for p in trace.packet:
    if p.HasField("track_descriptor"):
        names[p.track_descriptor.uuid] = p.track_descriptor.name
    elif p.HasField("track_event"):
        e = p.track_event
        if p.timestamp_clock_id != 3:
            errors.append("track event not on the MONOTONIC clock")
        if e.track_uuid not in names:
            errors.append("event on an undeclared track %d" % e.track_uuid)
        kinds[e.type] += 1
        if e.type == TE.TYPE_SLICE_BEGIN:
            depth[e.track_uuid] += 1
            if names.get(e.track_uuid) == "vmscale phases":
                phases.append(e.name)
        elif e.type == TE.TYPE_SLICE_END:
            if depth[e.track_uuid] == 0:
                errors.append("SLICE_END without BEGIN on %s" % names.get(e.track_uuid))
            depth[e.track_uuid] -= 1
open_slices = sum(depth.values())
if open_slices:
    errors.append("%d slices never end" % open_slices)
if not trace.packet: errors.append("no packets")
if not names: errors.append("no track descriptors")
for kind in ("TYPE_SLICE_BEGIN", "TYPE_SLICE_END", "TYPE_INSTANT"):
    if not kinds[getattr(TE, kind)]:
        errors.append("no %s events" % kind)
if "test" not in phases:
    errors.append("no phase slice 'test' (phases: %r)" % phases)
if not any(n.startswith("cpu ") and not n.endswith("ipis") for n in names.values()):
    errors.append("no cpu track")
print("packets=%d tracks=%d begins=%d ends=%d instants=%d" % (
    len(trace.packet), len(names), kinds[TE.TYPE_SLICE_BEGIN], kinds[TE.TYPE_SLICE_END],
    kinds[TE.TYPE_INSTANT]))
if errors:
    print("\n".join(errors[:20]), file=sys.stderr)
    sys.exit(1)
"#;

const INSTALL_HINT: &str =
    "python3 with PyPI's perfetto package is needed (.ci/run installs it: pip install perfetto)";

#[test]
fn a_live_recording_exports_to_a_trace_perfetto_reads() {
    let mount =
        tracefs::mount_point().unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"));
    let dir = std::env::temp_dir().join(format!("vmscale-perfetto-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let mut recording = Recording::prepare(&mount, &dir, RecordConfig::default()).unwrap();
    recording.set_on(true).unwrap();
    recording.mark("vmscale: begin test").unwrap();
    // Short processes: switches on every CPU, wakeups, forks' TLB and call-function IPIs.
    let children: Vec<_> = (0..50)
        .map(|_| Command::new("true").spawn().unwrap())
        .collect();
    for mut child in children {
        child.wait().unwrap();
    }
    recording.mark("vmscale: end test").unwrap();
    recording.finish().unwrap();

    let bytes = export_perfetto(&dir, None).unwrap();
    let summary = write_perfetto(&dir, None, std::io::sink()).unwrap();
    assert!(summary.packets > 0 && summary.slices > 0, "{summary:?}");
    assert_eq!(
        summary.decode.corrupt_pages(),
        0,
        "{:?}",
        summary.decode.errors
    );

    let mut python = Command::new("python3")
        .args(["-c", VALIDATE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{INSTALL_HINT}: python3: {e}"));
    python.stdin.take().unwrap().write_all(&bytes).unwrap();
    let output = python.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named"),
        "{INSTALL_HINT}: {stderr}"
    );
    assert!(
        output.status.success(),
        "perfetto_trace_pb2 rejects the export: {stderr}"
    );
    eprintln!(
        "{} ({} bytes; {summary:?})",
        String::from_utf8_lossy(&output.stdout).trim(),
        bytes.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
