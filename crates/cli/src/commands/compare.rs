//! `vmscale compare RUN_A RUN_B`: loads the runs, prints how B differs from A (judged in
//! `vmscale_report::compare`), and with --fail-above exits non-zero on a real regression, so
//! a CI job can gate on it.

use std::path::Path;

use vmscale_report::compare::{self, Gate};

use crate::failure::Failure;

/// Exit code when --fail-above finds a significant regression (1 and 2 mean errors).
pub const EXIT_REGRESSION: i32 = 3;
/// Exit code when --fail-above cannot decide: a regression a busy host or different
/// tracing may have caused, a change beyond the limit that the replicates' spread leaves
/// unproven, or too few samples to judge.
pub const EXIT_UNDECIDABLE: i32 = 4;

pub fn compare(
    a_path: &Path,
    b_path: &Path,
    noise_pct: f64,
    fail_above_pct: Option<f64>,
    format: vmscale_report::Format,
    html: Option<&Path>,
) -> Result<(), Failure> {
    // A path that cannot take the page is refused before the work.
    if let Some(path) = html {
        vmscale_run::output::check_target(path).map_err(crate::commands::export::output_failure)?;
    }
    let a = vmscale_run::load_run(a_path)?;
    let b = vmscale_run::load_run(b_path)?;
    if let Some(why) = compare::incomparable(&a, &b) {
        return Err(Failure::usage(why));
    }
    let comparison = compare::compare(
        &a,
        &b,
        a_path.display().to_string(),
        b_path.display().to_string(),
        noise_pct / 100.0,
    );
    crate::console::out!("{}", comparison.render(format))?;
    if let Some(path) = html {
        let page = vmscale_report::html::render_compare_html(&a, &b, &comparison);
        vmscale_run::output::write_file(path, page.as_bytes())
            .map_err(crate::commands::export::output_failure)?;
        crate::console::note!("comparison page: {}", path.display());
    }
    match fail_above_pct.map(|limit| comparison.gate(limit / 100.0)) {
        None | Some(Gate::Pass) => Ok(()),
        Some(Gate::Regression(message)) => Err(Failure {
            message,
            exit_code: EXIT_REGRESSION,
        }),
        Some(Gate::Undecidable(message)) => Err(Failure {
            message,
            exit_code: EXIT_UNDECIDABLE,
        }),
    }
}
