//! One module per subcommand.

pub mod doctor;
pub mod list;
pub mod record;
pub mod report;
pub mod run;
