//! Frames as names: kernel addresses through the trace's kallsyms, user addresses through
//! the mappings the side band recorded (MMAP2, COMM exec, FORK) and the mapped files'
//! ELF symbol tables and DWARF.
//!
//! A user address is looked up in the mappings its process had at the sample's time; its
//! offset in the mapped file becomes the file's virtual address through the file's
//! PT_LOAD segments; that address is named by the function symbol containing it (`.symtab`,
//! else `.dynsym`: Debian's QEMU exports its functions there), else by the DWARF function
//! containing it (a separate debug file under /usr/lib/debug/.build-id is used when
//! installed), and otherwise reads `[unknown] in <file>+0x<offset>`. A file that is gone
//! or was replaced since the recording (another inode) is not read: its frames read as
//! unknown in it. Results are cached per file and address.

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol};
use vmscale_trace::Kallsyms;

use crate::format::Record;
use crate::read::{ReadError, ReadSummary, Samples};

/// A frame as a reader shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, demangled; None where no symbol or debug information names it.
    pub function: Option<Arc<str>>,
    /// The mapped file (user frames) or kernel module (kernel frames, None for the core
    /// kernel); None for an address outside any known mapping.
    pub object: Option<Arc<str>>,
    /// Offset of the address in `object` (user frames) or in `function` (kernel frames).
    pub offset: u64,
    /// `file:line` from DWARF, where the file has it.
    pub location: Option<Arc<str>>,
    /// The raw address.
    pub address: u64,
}

impl Frame {
    fn unknown(address: u64) -> Frame {
        Frame {
            function: None,
            object: None,
            offset: 0,
            location: None,
            address,
        }
    }

    /// The name a flame graph or a folded stack shows: the function, else
    /// `[unknown] in <file>+0x<offset>`, else (no file mapped there: anonymous or JIT
    /// memory, or the garbage a broken frame-pointer walk reads) `[unknown]`.
    pub fn name(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.function, &self.object) {
            (Some(function), _) => write!(f, "{function}"),
            (None, Some(object)) => write!(f, "[unknown] in {object}+{:#x}", self.offset),
            (None, None) => write!(f, "[unknown]"),
        }
    }
}

/// One file-backed executable mapping of a process, valid over `[from, until)` on the
/// trace clock.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    ino: u64,
    object: Arc<str>,
    from: u64,
    until: u64,
}

/// A file's function symbols and segments, and its DWARF where it has some.
struct ObjectFile {
    /// (file offset, file size, virtual address) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
    /// (address, size, name), sorted by address; only sized function symbols.
    functions: Vec<(u64, u64, Arc<str>)>,
    dwarf: Option<addr2line::Loader>,
}

impl ObjectFile {
    fn load(path: &Path) -> Option<ObjectFile> {
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: the file is mapped read-only and only read while the map lives in this
        // function; a concurrent truncation could fault, which a system binary or library
        // in use by a process (the mapped files we read) does not undergo.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let elf = object::File::parse(&*map).ok()?;
        let segments = elf
            .segments()
            .filter_map(|s| {
                let (offset, size) = s.file_range();
                (size > 0).then_some((offset, size, s.address()))
            })
            .collect();
        let debug = separate_debug_file(&elf);
        let mut functions = functions_of(&elf);
        let dwarf_path = debug.clone().unwrap_or_else(|| path.to_path_buf());
        if functions.is_empty() {
            if let Some(debug) = &debug {
                if let Some(map) = std::fs::File::open(debug)
                    .ok()
                    // SAFETY: as above, read-only and read within this block.
                    .and_then(|f| unsafe { memmap2::Mmap::map(&f) }.ok())
                {
                    if let Ok(debug_elf) = object::File::parse(&*map) {
                        functions = functions_of(&debug_elf);
                    }
                }
            }
        }
        let has_dwarf = debug.is_some() || elf.section_by_name(".debug_info").is_some();
        let dwarf = has_dwarf
            .then(|| addr2line::Loader::new(&dwarf_path).ok())
            .flatten();
        Some(ObjectFile {
            segments,
            functions,
            dwarf,
        })
    }

    /// The virtual address of file offset `offset`.
    fn address_of(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(o, size, _)| (*o..o + size).contains(&offset))
            .map(|(o, _, vaddr)| offset - o + vaddr)
    }

    fn function_at(&self, address: u64) -> Option<Arc<str>> {
        let i = self
            .functions
            .partition_point(|(start, _, _)| *start <= address);
        let (start, size, name) = self.functions.get(i.checked_sub(1)?)?;
        (address < start + size).then(|| Arc::clone(name))
    }

    /// The DWARF function (outermost, not inlined) and location of `address`.
    fn dwarf_at(&self, address: u64) -> (Option<Arc<str>>, Option<Arc<str>>) {
        let Some(dwarf) = &self.dwarf else {
            return (None, None);
        };
        let mut function = None;
        if let Ok(mut frames) = dwarf.find_frames(address) {
            while let Ok(Some(frame)) = frames.next() {
                if let Some(name) = frame.function.as_ref().and_then(|f| f.demangle().ok()) {
                    function = Some(Arc::from(demangle(&name)));
                }
            }
        }
        let location = dwarf.find_location(address).ok().flatten().and_then(|l| {
            Some(Arc::from(format!(
                "{}:{}",
                l.file?.rsplit('/').next().unwrap_or(""),
                l.line?
            )))
        });
        (function, location)
    }
}

/// Sized function symbols of `.symtab`, else `.dynsym`, sorted, demangled.
fn functions_of(elf: &object::File<'_>) -> Vec<(u64, u64, Arc<str>)> {
    let collect = |symbols: &mut dyn Iterator<Item = object::Symbol<'_, '_>>| {
        let mut out: Vec<(u64, u64, Arc<str>)> = Vec::new();
        for s in symbols {
            if s.kind() != object::SymbolKind::Text || s.size() == 0 || !s.is_definition() {
                continue;
            }
            if let Ok(name) = s.name() {
                if !name.is_empty() {
                    out.push((s.address(), s.size(), Arc::from(demangle(name))));
                }
            }
        }
        out
    };
    let mut out = collect(&mut elf.symbols());
    if out.is_empty() {
        out = collect(&mut elf.dynamic_symbols());
    }
    out.sort_by_key(|(a, _, _)| *a);
    out.dedup_by_key(|(a, _, _)| *a);
    out
}

/// Rust names without their hash; others as they are.
fn demangle(name: &str) -> String {
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}

/// /usr/lib/debug/.build-id/xx/yyyy.debug for the file's build id, when installed.
fn separate_debug_file(elf: &object::File<'_>) -> Option<PathBuf> {
    let id = elf.build_id().ok()??;
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let path = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    ));
    path.exists().then_some(path)
}

/// Names for the frames of one trace directory's samples.
pub struct Symbolizer {
    kallsyms: Kallsyms,
    /// Thread group -> its mappings, in the order they appeared.
    maps: HashMap<u32, Vec<Mapping>>,
    /// Thread -> (time, name) changes in time order.
    comms: HashMap<u32, Vec<(u64, Arc<str>)>>,
    /// Thread -> thread group, from every record that says.
    tgids: HashMap<u32, u32>,
    objects: HashMap<Arc<str>, Option<ObjectFile>>,
    /// (object, ino) -> whether the file on disk is still the one that was mapped.
    current: HashMap<(Arc<str>, u64), bool>,
    cache: HashMap<(Arc<str>, u64), Frame>,
    /// What reading the side band found (lost records, damage).
    pub side_band: ReadSummary,
}

impl Symbolizer {
    /// Reads the side band of `samples` and the trace directory's kallsyms (kernel frames
    /// stay addresses without it).
    pub fn load(samples: &Samples, trace_dir: &Path) -> Result<Symbolizer, ReadError> {
        let kallsyms = Kallsyms::load(&trace_dir.join("kallsyms")).unwrap_or_default();
        let mut symbolizer = Symbolizer::new(kallsyms);
        let mut merged = samples.merged()?;
        while let Some((_, record)) = merged.next_record() {
            symbolizer.observe(&record);
        }
        symbolizer.side_band = merged.summary();
        Ok(symbolizer)
    }

    /// An empty symbolizer: feed it records in time order with [`Symbolizer::observe`].
    pub fn new(kallsyms: Kallsyms) -> Symbolizer {
        Symbolizer {
            kallsyms,
            maps: HashMap::new(),
            comms: HashMap::new(),
            tgids: HashMap::new(),
            objects: HashMap::new(),
            current: HashMap::new(),
            cache: HashMap::new(),
            side_band: ReadSummary::default(),
        }
    }

    /// Takes in one side-band record (others are ignored).
    pub fn observe(&mut self, record: &Record<'_>) {
        match record {
            Record::Mmap2(m) => {
                let name = m.filename.strip_suffix(" (deleted)").unwrap_or(m.filename);
                if !name.starts_with('/') || m.len == 0 {
                    return;
                }
                self.tgids.insert(m.tid, m.pid);
                let time = m.id.time;
                let end = m.addr.saturating_add(m.len);
                let maps = self.maps.entry(m.pid).or_default();
                for old in maps.iter_mut().filter(|o| o.until == u64::MAX) {
                    if old.start < end && m.addr < old.end {
                        old.until = time;
                    }
                }
                maps.push(Mapping {
                    start: m.addr,
                    end,
                    pgoff: m.pgoff,
                    ino: m.ino,
                    object: Arc::from(name),
                    from: time,
                    until: u64::MAX,
                });
            }
            Record::Comm {
                pid,
                tid,
                comm,
                exec,
                id,
            } => {
                self.tgids.insert(*tid, *pid);
                if *exec {
                    for old in self.maps.entry(*pid).or_default().iter_mut() {
                        old.until = old.until.min(id.time);
                    }
                }
                self.comms
                    .entry(*tid)
                    .or_default()
                    .push((id.time, Arc::from(*comm)));
            }
            Record::Fork(task) => {
                self.tgids.insert(task.tid, task.pid);
                // A new process shares its parent's mappings until it execs; a new thread
                // is in its parent's group already. It inherits its parent's name too.
                if task.pid != task.ppid {
                    let inherited: Vec<Mapping> = self
                        .maps
                        .get(&task.ppid)
                        .map(|maps| {
                            maps.iter()
                                .filter(|m| m.until == u64::MAX)
                                .map(|m| Mapping {
                                    from: task.time,
                                    ..m.clone()
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    self.maps.entry(task.pid).or_default().extend(inherited);
                }
                if let Some(name) = self.comm_at(task.ptid, task.time) {
                    let name = Arc::from(name);
                    self.comms
                        .entry(task.tid)
                        .or_default()
                        .push((task.time, name));
                }
            }
            _ => {}
        }
    }

    /// The name thread `tid` had at `ts` (its first known name if none was known yet).
    pub fn comm_at(&self, tid: u32, ts: u64) -> Option<&str> {
        let names = self.comms.get(&tid)?;
        let i = names.partition_point(|(t, _)| *t <= ts);
        names
            .get(i.saturating_sub(1))
            .map(|(_, name)| name.as_ref())
    }

    /// The thread group of `tid`, where a record said it.
    pub fn tgid(&self, tid: u32) -> Option<u32> {
        self.tgids.get(&tid).copied()
    }

    /// A kernel address named by kallsyms.
    pub fn kernel(&self, address: u64) -> Frame {
        match self.kallsyms.symbolize(address) {
            Some(s) => Frame {
                function: Some(Arc::from(s.name)),
                object: s.module.map(Arc::from),
                offset: s.offset,
                location: None,
                address,
            },
            None => Frame::unknown(address),
        }
    }

    /// A user address of process `pid` at `ts`, named as the module documentation says.
    pub fn user(&mut self, pid: u32, ts: u64, address: u64) -> Frame {
        let Some(mapping) = self.mapping(pid, ts, address).cloned() else {
            return Frame::unknown(address);
        };
        let offset = address - mapping.start + mapping.pgoff;
        let key = (Arc::clone(&mapping.object), offset);
        if let Some(frame) = self.cache.get(&key) {
            return Frame {
                address,
                ..frame.clone()
            };
        }
        let mut frame = Frame {
            function: None,
            object: Some(Arc::clone(&mapping.object)),
            offset,
            location: None,
            address,
        };
        if self.is_current(&mapping) {
            let object = self
                .objects
                .entry(Arc::clone(&mapping.object))
                .or_insert_with(|| ObjectFile::load(Path::new(&*mapping.object)));
            if let Some(object) = object {
                if let Some(vaddr) = object.address_of(offset) {
                    let (dwarf_function, location) = object.dwarf_at(vaddr);
                    frame.function = object.function_at(vaddr).or(dwarf_function);
                    frame.location = location;
                }
            }
        }
        self.cache.insert(key, frame.clone());
        frame
    }

    /// The mapping of `pid` holding `address` at `ts`; any that ever held it otherwise.
    fn mapping(&self, pid: u32, ts: u64, address: u64) -> Option<&Mapping> {
        let maps = self.maps.get(&pid)?;
        let holds = |m: &&Mapping| (m.start..m.end).contains(&address);
        maps.iter()
            .rev()
            .filter(holds)
            .find(|m| (m.from..m.until).contains(&ts))
            .or_else(|| maps.iter().rev().find(holds))
    }

    /// Whether the file at the mapping's path is the one that was mapped (same inode).
    fn is_current(&mut self, mapping: &Mapping) -> bool {
        *self
            .current
            .entry((Arc::clone(&mapping.object), mapping.ino))
            .or_insert_with(|| {
                std::fs::metadata(&*mapping.object)
                    .map(|m| mapping.ino == 0 || m.ino() == mapping.ino)
                    .unwrap_or(false)
            })
    }
}
