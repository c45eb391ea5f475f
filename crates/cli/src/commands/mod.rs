//! One module per subcommand; `run` holds what every scenario run shares.

pub mod compare;
pub mod doctor;
pub mod export;
pub mod irqfd;
pub mod list;
pub mod memslot;
pub mod mlock;
pub mod qemu;
pub mod record;
pub mod report;
pub mod report_text;
pub mod run;
pub mod teardown;
pub mod tour;
pub mod zap;
