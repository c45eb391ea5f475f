//! `vmscale query` and `vmscale fleet` are answered by `vmscale-sql`, built beside
//! `vmscale` from the same package: the SQL engine stays out of every other command's
//! program ([`crate`] says why).

use std::os::unix::process::CommandExt;

use crate::failure::Failure;

/// The program that answers SQL, next to this one.
const PROGRAM: &str = "vmscale-sql";

/// Replaces this process with `vmscale-sql` and the same arguments; returns only when that
/// cannot be done.
pub fn exec() -> Result<(), Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::runtime(format!("cannot find vmscale's own program: {e}")))?;
    let program = exe.with_file_name(PROGRAM);
    if !program.is_file() {
        return Err(Failure::usage(format!(
            "vmscale query and fleet run {}, which is missing (cargo build --release -p vmscale builds it beside vmscale)",
            program.display()
        )));
    }
    let error = std::process::Command::new(&program)
        .arg0("vmscale")
        .args(std::env::args_os().skip(1))
        .exec();
    Err(Failure::runtime(format!(
        "cannot run {}: {error}",
        program.display()
    )))
}
