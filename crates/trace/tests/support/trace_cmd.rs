//! Debian's `trace-cmd`, the independent reader of the .dat files vmscale writes.

use std::path::Path;
use std::process::Command;

/// `trace-cmd report -R -t -i dat` (every field raw, times in nanoseconds): its stdout,
/// after asserting that it succeeded. Warnings are allowed: trace-cmd warns about what it
/// does not know in files recorded elsewhere.
#[allow(dead_code)] // not every test that includes this file calls it
pub fn report_raw(dat: &Path) -> String {
    let output = Command::new("trace-cmd")
        .args(["report", "-R", "-t", "-i"])
        .arg(dat)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run trace-cmd report ({e}): these tests compare with Debian's \
                 trace-cmd; install it (apt-get install trace-cmd; scripts/test does)"
            )
        });
    assert!(
        output.status.success(),
        "trace-cmd report -R -t -i {} failed: {}",
        dat.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `trace-cmd ARGS -i dat`: its stdout, after asserting that it succeeded and did not warn
/// about anything in the file.
#[allow(dead_code)] // not every test that includes this file calls it
pub fn trace_cmd(args: &[&str], dat: &Path) -> String {
    let output = Command::new("trace-cmd")
        .args(args)
        .arg("-i")
        .arg(dat)
        .output()
        .unwrap_or_else(|e| panic!("cannot run trace-cmd (is it installed?): {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "trace-cmd {args:?} -i {} failed: {stderr}",
        dat.display()
    );
    // trace-cmd warns on stderr about anything it does not understand in a file.
    assert!(
        !stderr.to_lowercase().contains("warning") && !stderr.contains("unknown"),
        "trace-cmd {args:?} complained about {}: {stderr}",
        dat.display()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
