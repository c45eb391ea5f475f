//! The report's sections built as data ([`crate::document`]) from the run record, each once
//! for every format.
//!
//! - [`verdict`]: what the explained time went to, first in every output.
//! - [`vmm`]: what a VMM the run drove did per sample (its ioctls, its vCPUs' holds).
//! - [`trace`]: the kernel trace: how it was recorded, [`contention`], [`ipis`] and
//!   [`explain`], and the timeline of the worst wait.

pub(crate) mod contention;
pub(crate) mod explain;
pub(crate) mod ipis;
pub(crate) mod trace;
pub(crate) mod verdict;
pub(crate) mod vmm;
