//! The event formats of a trace directory made from text: one per event the analyses read,
//! with the fields their views look up (crate::decode::views) at offsets of vmscale's choosing, plus
//! the page and event headers of the ring-buffer encoding [`super::pages`] writes.

/// One field after the common ones.
pub(crate) struct FieldDef {
    pub decl: &'static str,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

/// One event type.
pub(crate) struct EventDef {
    pub system: &'static str,
    pub name: &'static str,
    pub id: u16,
    pub fields: &'static [FieldDef],
}

/// `struct trace_entry`, which every record starts with.
pub(crate) const COMMON_LEN: usize = 8;

const fn f(decl: &'static str, offset: usize, size: usize, signed: bool) -> FieldDef {
    FieldDef {
        decl,
        offset,
        size,
        signed,
    }
}

/// Indexes into [`EVENTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    KernelStack,
    Print,
    ContentionBegin,
    ContentionEnd,
    SchedSwitch,
    SchedWaking,
    SchedWakeup,
    SchedWakeupNew,
    IpiSendCpu,
    IpiSendCpumask,
    CsdQueueCpu,
    CsdFunctionEntry,
    CsdFunctionExit,
    SysEnter,
    SysExit,
    IpiRaise,
    IpiEntry,
    IpiExit,
    RescheduleEntry,
    RescheduleExit,
    CallFunctionEntry,
    CallFunctionExit,
    CallFunctionSingleEntry,
    CallFunctionSingleExit,
}

const WAKEUP: &[FieldDef] = &[
    f("char comm[16]", 8, 16, false),
    f("pid_t pid", 24, 4, true),
    f("int prio", 28, 4, true),
    f("int target_cpu", 32, 4, true),
];
const CSD_FUNCTION: &[FieldDef] = &[f("void * func", 8, 8, false), f("void * csd", 16, 8, false)];
const IPI_HANDLER: &[FieldDef] = &[f("const char * reason", 8, 8, false)];
const VECTOR: &[FieldDef] = &[f("int vector", 8, 4, true)];

const fn vector_event(name: &'static str, id: u16) -> EventDef {
    EventDef {
        system: "irq_vectors",
        name,
        id,
        fields: VECTOR,
    }
}

/// In [`Kind`] order. The ids are vmscale's; kernel_stack and print keep the kernel's.
pub(crate) const EVENTS: &[EventDef] = &[
    EventDef {
        system: "ftrace",
        name: "kernel_stack",
        id: 4,
        fields: &[
            f("int size", 8, 4, true),
            f("unsigned long caller[8]", 16, 64, false),
        ],
    },
    EventDef {
        system: "ftrace",
        name: "print",
        id: 5,
        fields: &[
            f("unsigned long ip", 8, 8, false),
            f("char buf[]", 16, 0, false),
        ],
    },
    EventDef {
        system: "lock",
        name: "contention_begin",
        id: 10,
        fields: &[
            f("void * lock_addr", 8, 8, false),
            f("unsigned int flags", 16, 4, false),
        ],
    },
    EventDef {
        system: "lock",
        name: "contention_end",
        id: 11,
        fields: &[
            f("void * lock_addr", 8, 8, false),
            f("int ret", 16, 4, true),
        ],
    },
    EventDef {
        system: "sched",
        name: "sched_switch",
        id: 12,
        fields: &[
            f("char prev_comm[16]", 8, 16, false),
            f("pid_t prev_pid", 24, 4, true),
            f("int prev_prio", 28, 4, true),
            f("long prev_state", 32, 8, true),
            f("char next_comm[16]", 40, 16, false),
            f("pid_t next_pid", 56, 4, true),
            f("int next_prio", 60, 4, true),
        ],
    },
    EventDef {
        system: "sched",
        name: "sched_waking",
        id: 13,
        fields: WAKEUP,
    },
    EventDef {
        system: "sched",
        name: "sched_wakeup",
        id: 14,
        fields: WAKEUP,
    },
    EventDef {
        system: "sched",
        name: "sched_wakeup_new",
        id: 15,
        fields: WAKEUP,
    },
    EventDef {
        system: "ipi",
        name: "ipi_send_cpu",
        id: 16,
        fields: &[
            f("unsigned int cpu", 8, 4, false),
            f("void * callsite", 16, 8, false),
            f("void * callback", 24, 8, false),
        ],
    },
    EventDef {
        system: "ipi",
        name: "ipi_send_cpumask",
        id: 17,
        fields: &[
            f("__data_loc cpumask_t cpumask", 8, 4, false),
            f("void * callsite", 16, 8, false),
            f("void * callback", 24, 8, false),
        ],
    },
    EventDef {
        system: "csd",
        name: "csd_queue_cpu",
        id: 18,
        fields: &[
            f("unsigned int cpu", 8, 4, false),
            f("void * callsite", 16, 8, false),
            f("void * func", 24, 8, false),
            f("void * csd", 32, 8, false),
        ],
    },
    EventDef {
        system: "csd",
        name: "csd_function_entry",
        id: 19,
        fields: CSD_FUNCTION,
    },
    EventDef {
        system: "csd",
        name: "csd_function_exit",
        id: 20,
        fields: CSD_FUNCTION,
    },
    EventDef {
        system: "raw_syscalls",
        name: "sys_enter",
        id: 21,
        fields: &[
            f("long id", 8, 8, true),
            f("unsigned long args[6]", 16, 48, false),
        ],
    },
    EventDef {
        system: "raw_syscalls",
        name: "sys_exit",
        id: 22,
        fields: &[f("long id", 8, 8, true), f("long ret", 16, 8, true)],
    },
    EventDef {
        system: "ipi",
        name: "ipi_raise",
        id: 23,
        fields: &[
            f("__data_loc unsigned long[] target_cpus", 8, 4, false),
            f("const char * reason", 16, 8, false),
        ],
    },
    EventDef {
        system: "ipi",
        name: "ipi_entry",
        id: 24,
        fields: IPI_HANDLER,
    },
    EventDef {
        system: "ipi",
        name: "ipi_exit",
        id: 25,
        fields: IPI_HANDLER,
    },
    vector_event("reschedule_entry", 26),
    vector_event("reschedule_exit", 27),
    vector_event("call_function_entry", 28),
    vector_event("call_function_exit", 29),
    vector_event("call_function_single_entry", 30),
    vector_event("call_function_single_exit", 31),
];

impl Kind {
    pub(crate) fn def(self) -> &'static EventDef {
        &EVENTS[self as usize]
    }

    /// The kind of an event line, by the name the text prints.
    pub(crate) fn of(name: &str) -> Option<Kind> {
        Some(match name {
            "tracing_mark_write" => Kind::Print,
            "contention_begin" => Kind::ContentionBegin,
            "contention_end" => Kind::ContentionEnd,
            "sched_switch" => Kind::SchedSwitch,
            "sched_waking" => Kind::SchedWaking,
            "sched_wakeup" => Kind::SchedWakeup,
            "sched_wakeup_new" => Kind::SchedWakeupNew,
            "ipi_send_cpu" => Kind::IpiSendCpu,
            "ipi_send_cpumask" => Kind::IpiSendCpumask,
            "csd_queue_cpu" => Kind::CsdQueueCpu,
            "csd_function_entry" => Kind::CsdFunctionEntry,
            "csd_function_exit" => Kind::CsdFunctionExit,
            "sys_enter" => Kind::SysEnter,
            "sys_exit" => Kind::SysExit,
            "ipi_raise" => Kind::IpiRaise,
            "ipi_entry" => Kind::IpiEntry,
            "ipi_exit" => Kind::IpiExit,
            "reschedule_entry" => Kind::RescheduleEntry,
            "reschedule_exit" => Kind::RescheduleExit,
            "call_function_entry" => Kind::CallFunctionEntry,
            "call_function_exit" => Kind::CallFunctionExit,
            "call_function_single_entry" => Kind::CallFunctionSingleEntry,
            "call_function_single_exit" => Kind::CallFunctionSingleExit,
            _ => return None,
        })
    }

    /// The fixed part of a record: common fields plus every field.
    pub(crate) fn fixed_len(self) -> usize {
        self.def()
            .fields
            .iter()
            .map(|field| field.offset + field.size)
            .max()
            .unwrap_or(COMMON_LEN)
    }
}

/// The text of `formats/<system>/<name>` for `def`, laid out as the kernel's are.
pub(crate) fn format_text(def: &EventDef) -> String {
    let mut text = format!(
        "name: {}\nID: {}\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n",
        def.name, def.id
    );
    for field in def.fields {
        text.push_str(&format!(
            "\tfield:{};\toffset:{};\tsize:{};\tsigned:{};\n",
            field.decl,
            field.offset,
            field.size,
            u8::from(field.signed)
        ));
    }
    text.push_str("\nprint fmt: \"imported from ftrace text\"\n");
    text
}

/// `events/header_page` of the pages [`super::pages`] writes (x86-64, 4096-byte pages).
pub(crate) const HEADER_PAGE: &str = "\
\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
";

/// `events/header_event`: the event header encoding the pages use.
pub(crate) const HEADER_EVENT: &str = "\
# compressed entry header
\ttype_len    :    5 bits
\ttime_delta  :   27 bits
\tarray       :   32 bits

\tpadding     : type == 29
\ttime_extend : type == 30
\ttime_stamp : type == 31
\tdata max type_len  == 28
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::format::{EventFormat, HeaderEvent, HeaderPage};
    use crate::EventType;

    #[test]
    fn every_format_parses_and_gets_its_view() {
        for (index, def) in EVENTS.iter().enumerate() {
            let format = EventFormat::parse(&format_text(def)).unwrap();
            assert_eq!((format.name.as_str(), format.id), (def.name, def.id));
            assert!(
                EventType::new(def.system, format).has_view(),
                "{}",
                def.name
            );
            let kind = Kind::of(def.name).unwrap_or(Kind::KernelStack);
            if def.name != "print" {
                assert_eq!(kind as usize, index, "{}", def.name);
            }
        }
        assert_eq!(Kind::of("tracing_mark_write"), Some(Kind::Print));
        HeaderEvent::parse(HEADER_EVENT)
            .unwrap()
            .check_supported()
            .unwrap();
        assert_eq!(HeaderPage::parse(HEADER_PAGE).unwrap().data_offset, 16);
    }
}
