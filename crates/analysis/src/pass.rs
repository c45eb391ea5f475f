//! What every streaming analysis is to the loop that feeds it: which events it reads and
//! how it takes each one. [`crate::passes`] lists the passes of an analysis; adding a pass
//! is its file, its `impl Pass` and one line there.

use vmscale_trace::{Event, EventKind, ViewTag};

use crate::ViewTags;

/// How a pass takes the events of one type, decided once per type: reading an event's
/// typed view costs more than decoding it, so a view is read only when some pass will look
/// at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reads {
    /// [`Pass::observe_other`]: no view (the event may still show its task running).
    Nothing,
    /// [`Pass::observe_syscall`]: a system call whose view the pass reads only for the
    /// few tasks it follows.
    Syscall,
    /// [`Pass::observe`] with the event's view.
    View,
}

/// One streaming analysis: it sees every event of a trace in time order, with memory
/// bounded by locks and tasks, never by events.
pub(crate) trait Pass {
    /// How the pass takes events whose view is `tag`, in a trace whose formats can hold
    /// the views `trace` holds.
    fn reads(&self, tag: ViewTag, trace: ViewTags) -> Reads;

    /// An event with its view.
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>);

    /// An event whose view it does not read. Most passes learn nothing from it.
    #[inline(always)]
    fn observe_other(&mut self, _event: &Event<'_>) {}

    /// A system call it reads only for some tasks ([`Reads::Syscall`]).
    #[inline(always)]
    fn observe_syscall(&mut self, event: &Event<'_>) {
        self.observe_other(event)
    }

    /// Whether the pass runs at all (an optional pass that the run did not ask for reads
    /// nothing, even when every event is handed to every pass).
    fn present(&self) -> bool {
        true
    }
}

/// A pass that a run may not have: absent, it reads nothing.
impl<P: Pass> Pass for Option<P> {
    fn reads(&self, tag: ViewTag, trace: ViewTags) -> Reads {
        self.as_ref()
            .map_or(Reads::Nothing, |p| p.reads(tag, trace))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        if let Some(p) = self {
            p.observe(event, kind)
        }
    }

    #[inline(always)]
    fn observe_other(&mut self, event: &Event<'_>) {
        if let Some(p) = self {
            p.observe_other(event)
        }
    }

    #[inline(always)]
    fn observe_syscall(&mut self, event: &Event<'_>) {
        if let Some(p) = self {
            p.observe_syscall(event)
        }
    }

    fn present(&self) -> bool {
        self.is_some()
    }
}

/// [`Reads::View`] where `reads`, else [`Reads::Nothing`].
pub(crate) fn view_if(reads: bool) -> Reads {
    if reads {
        Reads::View
    } else {
        Reads::Nothing
    }
}
