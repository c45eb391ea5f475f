//! Sections laid out per format. Each renderer knows its format and nothing of runs, locks
//! or verdicts: what a section says is decided once, in [`crate::sections`].

pub(crate) mod html;
pub(crate) mod markdown;
pub(crate) mod text;
