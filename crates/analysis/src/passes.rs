//! The passes of one analysis, and the route each event type takes through them.

use vmscale_trace::decode::catalog::EventCatalog;
use vmscale_trace::{Event, EventKind, ViewTag};

use crate::pass::{Pass, Reads};
use crate::ViewTags;

/// Declares [`PassSet`] (one field per pass, fed in the order listed) and [`Route`] (how
/// each pass takes one event type). A pass is one line here.
macro_rules! passes {
    ($($(#[$doc:meta])* $name:ident: $ty:ty,)*) => {
        /// Every pass of one analysis.
        pub(crate) struct PassSet {
            $($(#[$doc])* pub(crate) $name: $ty,)*
        }

        /// How each pass takes the events of one type.
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct Route {
            $($name: Reads,)*
            /// A scheduler event: it places tasks, so even an excluded task's is kept.
            pub(crate) sched: bool,
            /// Some pass reads the view.
            pub(crate) view: bool,
        }

        impl PassSet {
            fn route(&self, tag: ViewTag, trace: ViewTags, every_event_to_every_pass: bool) -> Route {
                let reads = |pass: &dyn Pass| match every_event_to_every_pass {
                    true if pass.present() => Reads::View,
                    true => Reads::Nothing,
                    false => pass.reads(tag, trace),
                };
                let mut route = Route {
                    $($name: reads(&self.$name),)*
                    sched: places_tasks(tag),
                    view: false,
                };
                route.view = every_event_to_every_pass
                    || (tag != ViewTag::Other && (false $(|| route.$name == Reads::View)*));
                route
            }

            /// One event, to every pass as its route says.
            #[inline(always)]
            pub(crate) fn observe(&mut self, route: Route, event: &Event<'_>, kind: &EventKind<'_>) {
                $(match route.$name {
                    Reads::View => self.$name.observe(event, kind),
                    Reads::Syscall => self.$name.observe_syscall(event),
                    Reads::Nothing => self.$name.observe_other(event),
                })*
            }
        }
    };
}

passes! {
    contention: crate::ContentionPass,
    ipis: crate::ipi::IpiPass,
    holders: crate::HoldersPass,
    breakdown: crate::BreakdownPass,
    spinlocks: crate::SpinLocksPass,
    /// The recorded command's tasks, or every task of a system-wide recording.
    subject: Option<crate::subject::SubjectPass>,
    /// Released vCPU threads until they are back in KVM_RUN.
    vcpu_resume: Option<crate::subject::SubjectPass>,
    /// Calls timed on several threads.
    timed_calls: Option<crate::subject::SubjectPass>,
    vmm: Option<crate::vmm::VmmPass>,
    /// Which on-CPU samples fell inside their thread's lock wait.
    sampled_waits: Option<crate::sampled_waits::SampledWaits>,
}

/// A scheduler event: it places tasks on and off CPUs.
fn places_tasks(tag: ViewTag) -> bool {
    matches!(
        tag,
        ViewTag::SchedSwitch
            | ViewTag::SchedWaking
            | ViewTag::SchedWakeup
            | ViewTag::SchedWakeupNew
    )
}

/// A [`Route`] per event type id, decided once from the catalog.
pub(crate) struct Routes {
    by_id: Vec<Route>,
    /// For ids without a format.
    unknown: Route,
}

impl Routes {
    /// The routes through `passes` of every type in `catalog`; with
    /// `every_event_to_every_pass`, every pass reads every view (the reference that routing
    /// is tested against).
    pub(crate) fn new(
        catalog: &EventCatalog,
        passes: &PassSet,
        every_event_to_every_pass: bool,
    ) -> Routes {
        let trace = ViewTags::of(catalog);
        let other = passes.route(ViewTag::Other, trace, every_event_to_every_pass);
        let mut by_id = vec![other; catalog.id_bound()];
        for event_type in catalog.iter() {
            by_id[event_type.format.id as usize] =
                passes.route(event_type.view_tag(), trace, every_event_to_every_pass);
        }
        Routes {
            by_id,
            unknown: other,
        }
    }

    #[inline]
    pub(crate) fn of(&self, id: u16) -> Route {
        self.by_id.get(id as usize).copied().unwrap_or(self.unknown)
    }
}
