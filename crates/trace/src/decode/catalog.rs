//! The event types a trace can contain, by the id its records carry in `common_type`.

use std::path::Path;
use vmscale_sys::bounded;

use crate::decode::field::FieldRef;
use crate::decode::format::{EventFormat, FormatError};
use crate::decode::views::{EventKind, ViewLayout, ViewTag};

/// A trace's `formats/` tree that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Format { path: String, source: FormatError },
    #[error("event id {id} is both {first} and {second}")]
    DuplicateId {
        id: u16,
        first: String,
        second: String,
    },
    #[error("{event}: `{field}` is not where the other events have it")]
    CommonFieldMoved { event: String, field: &'static str },
}

/// A format file [`EventCatalog::load_damaged`] left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedFormat {
    pub system: String,
    pub event: String,
    /// Why it could not be used, in a few words.
    pub why: String,
}

/// One event type: its format and its typed view, resolved once.
#[derive(Debug, Clone)]
pub struct EventType {
    pub system: String,
    pub format: EventFormat,
    view: ViewLayout,
    view_min_len: usize,
}

impl EventType {
    pub fn new(system: &str, format: EventFormat) -> EventType {
        let (view, view_min_len) = ViewLayout::resolve(system, &format);
        EventType {
            system: system.to_string(),
            format,
            view,
            view_min_len,
        }
    }

    pub fn name(&self) -> &str {
        &self.format.name
    }

    /// A field of this event, for reading it from many records.
    pub fn field(&self, name: &str) -> Option<FieldRef> {
        self.format.field(name).map(FieldRef::new)
    }

    /// True when records of this type get a typed view (not [`EventKind::Other`]).
    pub fn has_view(&self) -> bool {
        self.view != ViewLayout::Other
    }

    /// Which view records of this type get (unless one is too short for it).
    pub fn view_tag(&self) -> ViewTag {
        self.view.tag()
    }

    /// The typed view of a record of this type ([`EventKind::Other`] when the type has no
    /// view or the record is too short for it).
    #[inline(always)]
    pub fn kind<'a>(&self, record: &'a [u8]) -> EventKind<'a> {
        if record.len() < self.view_min_len {
            return EventKind::Other;
        }
        self.view.view(record)
    }
}

/// Where every record keeps its type id and pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonLayout {
    pub common_type: FieldRef,
    pub common_pid: FieldRef,
    /// Bytes every record has before its own fields.
    pub len: usize,
}

impl CommonLayout {
    /// struct trace_entry: `unsigned short type; unsigned char flags, preempt_count; int pid`.
    const KERNEL: CommonLayout = CommonLayout {
        common_type: FieldRef {
            offset: 0,
            size: 2,
            signed: false,
            layout: crate::decode::format::FieldLayout::Scalar,
        },
        common_pid: FieldRef {
            offset: 4,
            size: 4,
            signed: true,
            layout: crate::decode::format::FieldLayout::Scalar,
        },
        len: 8,
    };
}

/// All event types of a trace, indexed by id.
#[derive(Debug, Clone)]
pub struct EventCatalog {
    types: Vec<EventType>,
    /// id -> index into `types` + 1 (0: no such type).
    by_id: Vec<u32>,
    unknown: EventType,
    common: CommonLayout,
}

impl EventCatalog {
    /// Reads `formats/<system>/<event>` files.
    pub fn load(formats_dir: &Path) -> Result<EventCatalog, CatalogError> {
        // Nothing is left out when nothing is tolerated.
        EventCatalog::read(formats_dir, false).map(|(catalog, _)| catalog)
    }

    /// [`EventCatalog::load`] that leaves out what it cannot read: a format file that does
    /// not read or parse (listed with why, as `system/event`), and every format when
    /// `formats_dir` itself is absent. Their events decode as `unknown`.
    pub fn load_damaged(
        formats_dir: &Path,
    ) -> Result<(EventCatalog, Vec<DamagedFormat>), CatalogError> {
        EventCatalog::read(formats_dir, true)
    }

    fn read(
        formats_dir: &Path,
        tolerate: bool,
    ) -> Result<(EventCatalog, Vec<DamagedFormat>), CatalogError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| CatalogError::Io { path, source }
        };
        let mut types = Vec::new();
        let mut damaged = Vec::new();
        let mut systems: Vec<_> = match std::fs::read_dir(formats_dir) {
            Ok(entries) => entries.collect::<Result<_, _>>().map_err(io(formats_dir))?,
            Err(e) if tolerate && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(formats_dir)(e)),
        };
        systems.sort_by_key(|e| e.file_name());
        for system in systems {
            let system_path = system.path();
            if !system_path.is_dir() {
                continue;
            }
            let system_name = system.file_name().to_string_lossy().into_owned();
            let mut events: Vec<_> = std::fs::read_dir(&system_path)
                .map_err(io(&system_path))?
                .collect::<Result<_, _>>()
                .map_err(io(&system_path))?;
            events.sort_by_key(|e| e.file_name());
            for event in events {
                let path = event.path();
                let parsed = bounded::read_regular_string(&path, bounded::MAX_METADATA_BYTES)
                    .map_err(io(&path))
                    .and_then(|text| {
                        EventFormat::parse(&text).map_err(|source| CatalogError::Format {
                            path: path.display().to_string(),
                            source,
                        })
                    });
                match parsed {
                    Ok(format) => types.push(EventType::new(&system_name, format)),
                    Err(error) if tolerate => damaged.push(DamagedFormat {
                        system: system_name.clone(),
                        event: event.file_name().to_string_lossy().into_owned(),
                        why: match error {
                            CatalogError::Io { source, .. } => source.to_string(),
                            CatalogError::Format { source, .. } => source.to_string(),
                            other => other.to_string(),
                        },
                    }),
                    Err(error) => return Err(error),
                }
            }
        }
        Ok((EventCatalog::new(types)?, damaged))
    }

    /// A catalog of the given types; ids must be distinct and the common fields agree.
    pub fn new(types: Vec<EventType>) -> Result<EventCatalog, CatalogError> {
        let common = match types.first() {
            Some(first) => common_layout(first)?,
            None => CommonLayout::KERNEL,
        };
        let max_id = types
            .iter()
            .map(|t| t.format.id as usize)
            .max()
            .unwrap_or(0);
        let mut by_id = vec![0u32; max_id + 1];
        for (index, event) in types.iter().enumerate() {
            if common_layout(event)? != common {
                return Err(CatalogError::CommonFieldMoved {
                    event: full_name(event),
                    field: "common_type/common_pid",
                });
            }
            let slot = &mut by_id[event.format.id as usize];
            if *slot != 0 {
                return Err(CatalogError::DuplicateId {
                    id: event.format.id,
                    first: full_name(&types[*slot as usize - 1]),
                    second: full_name(event),
                });
            }
            *slot = index as u32 + 1;
        }
        let unknown = EventType::new(
            "",
            EventFormat {
                name: "unknown".into(),
                id: 0,
                fields: Vec::new(),
                print_fmt: None,
            },
        );
        Ok(EventCatalog {
            types,
            by_id,
            unknown,
            common,
        })
    }

    /// The type with this id.
    #[inline]
    pub fn get(&self, id: u16) -> Option<&EventType> {
        match self.by_id.get(id as usize) {
            Some(&slot) if slot != 0 => Some(&self.types[slot as usize - 1]),
            _ => None,
        }
    }

    /// Ids below this may have a type; every id from it on has none.
    pub fn id_bound(&self) -> usize {
        self.by_id.len()
    }

    /// The type with this id, or a stand-in named `unknown` without fields.
    #[inline]
    pub(crate) fn get_or_unknown(&self, id: u16) -> &EventType {
        self.get(id).unwrap_or(&self.unknown)
    }

    /// The stand-in for ids without a format ([`EventCatalog::get_or_unknown`]).
    pub(crate) fn unknown(&self) -> &EventType {
        &self.unknown
    }

    /// Whether `event_type` is the stand-in for ids without a format
    /// ([`EventCatalog::get_or_unknown`]).
    #[inline]
    pub(crate) fn is_unknown(&self, event_type: &EventType) -> bool {
        std::ptr::eq(event_type, &self.unknown)
    }

    /// The type `system:name`.
    pub fn find(&self, system: &str, name: &str) -> Option<&EventType> {
        self.types
            .iter()
            .find(|t| t.system == system && t.format.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &EventType> {
        self.types.iter()
    }

    pub fn common(&self) -> &CommonLayout {
        &self.common
    }
}

fn full_name(event: &EventType) -> String {
    format!("{}:{}", event.system, event.format.name)
}

fn common_layout(event: &EventType) -> Result<CommonLayout, CatalogError> {
    let moved = |field| CatalogError::CommonFieldMoved {
        event: full_name(event),
        field,
    };
    let common_type = event.field("common_type").ok_or(moved("common_type"))?;
    let common_pid = event.field("common_pid").ok_or(moved("common_pid"))?;
    if common_type.size != 2 || common_type.layout != crate::decode::format::FieldLayout::Scalar {
        return Err(moved("common_type"));
    }
    if common_pid.size != 4 || common_pid.layout != crate::decode::format::FieldLayout::Scalar {
        return Err(moved("common_pid"));
    }
    let len = event
        .format
        .fields
        .iter()
        .filter(|f| f.is_common())
        .map(|f| f.offset + f.size)
        .max()
        .unwrap_or(0);
    Ok(CommonLayout {
        common_type,
        common_pid,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(name: &str, id: u16, pid_offset: usize) -> EventType {
        let text = format!(
            "name: {name}\nID: {id}\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:{pid_offset};\tsize:4;\tsigned:1;\n"
        );
        EventType::new("s", EventFormat::parse(&text).unwrap())
    }

    #[test]
    fn types_are_found_by_id_and_name() {
        let catalog = EventCatalog::new(vec![format("a", 7, 4), format("b", 300, 4)]).unwrap();
        assert_eq!(catalog.get(300).unwrap().name(), "b");
        assert!(catalog.get(8).is_none());
        assert!(catalog.get(60000).is_none());
        assert_eq!(catalog.get_or_unknown(8).name(), "unknown");
        assert_eq!(catalog.find("s", "a").unwrap().format.id, 7);
        assert_eq!(catalog.common().len, 8);
    }

    #[test]
    fn duplicate_ids_and_moved_common_fields_are_errors() {
        let error = EventCatalog::new(vec![format("a", 7, 4), format("b", 7, 4)]).unwrap_err();
        assert_eq!(error.to_string(), "event id 7 is both s:a and s:b");
        assert!(EventCatalog::new(vec![format("a", 7, 4), format("b", 8, 8)]).is_err());
    }
}
