//! A progress bar on stderr, hidden when stderr is not a terminal or with --quiet, so
//! piped and machine-read output stays clean.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Bar(ProgressBar);

impl Bar {
    pub fn new(quiet: bool) -> Bar {
        let bar = if quiet || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} samples  {msg}",
                )
                .expect("constant template is valid"),
            );
            bar
        };
        Bar(bar)
    }

    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

impl vmscale_scenario::Progress for Bar {
    fn start(&self, total: u64) {
        self.0.set_length(total);
        self.0.set_position(0);
    }

    fn set_message(&self, message: String) {
        self.0.set_message(message);
    }

    fn advance(&self, samples: u64) {
        self.0.inc(samples);
    }
}
