//! `vmscale report RUN_DIR`: render a recorded run again, from its raw samples.

use std::path::Path;

use crate::failure::Failure;

pub fn report(run: &Path, format: vmscale_report::Format) -> Result<(), Failure> {
    let record = vmscale_run::load_run(run)?;
    print!("{}", vmscale_report::render(&record, format));
    Ok(())
}
