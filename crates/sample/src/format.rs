//! The records stored in `trace/samples/` and how to decode them.
//!
//! Each `cpu<N>` file holds the kernel's own perf records exactly as the CPU's ring buffer
//! held them, back to back, in the order the kernel wrote them (time order for that CPU).
//! `procs` holds records of the same format that vmscale wrote itself at the start, for
//! the processes that already ran (their mappings and names, from /proc). A record is:
//!
//! ```text
//! u32 type   u16 misc   u16 size          perf_event_header; size counts the header
//! body (size - 8 bytes)                   per type, below
//! ```
//!
//! All fields are in the recording machine's byte order (little-endian on x86 and arm64;
//! meta.json's `byte_order` says which). The events are opened with
//! `sample_type = TID | TIME | CPU | PERIOD | CALLCHAIN` ([`SAMPLE_TYPE`]) and
//! `sample_id_all`, so the bodies are:
//!
//! | type | body |
//! |---|---|
//! | `PERF_RECORD_SAMPLE` (9) | `u32 pid, u32 tid, u64 time, u32 cpu, u32 res, u64 period, u64 nr, u64 ips[nr]` |
//! | `PERF_RECORD_MMAP2` (10) | `u32 pid, u32 tid, u64 addr, u64 len, u64 pgoff, u32 maj, u32 min, u64 ino, u64 ino_generation, u32 prot, u32 flags, char filename[]` (NUL-padded to 8 bytes), then the sample id |
//! | `PERF_RECORD_COMM` (3) | `u32 pid, u32 tid, char comm[]` (NUL-padded), then the sample id; misc bit 0x2000 says it came from an exec |
//! | `PERF_RECORD_FORK` (7), `PERF_RECORD_EXIT` (4) | `u32 pid, u32 ppid, u32 tid, u32 ptid, u64 time`, then the sample id |
//! | `PERF_RECORD_LOST` (2) | `u64 id, u64 lost`, then the sample id: `lost` records the kernel could not store |
//! | `PERF_RECORD_THROTTLE` (5), `PERF_RECORD_UNTHROTTLE` (6) | `u64 time, u64 id, u64 stream_id`, then the sample id |
//!
//! The sample id that ends every record other than a sample is
//! `u32 pid, u32 tid, u64 time, u32 cpu, u32 res` (24 bytes). `time` is CLOCK_MONOTONIC
//! nanoseconds (`use_clockid`), the trace's clock. `ips` is the call chain, leaf first, with
//! context markers (values of `PERF_CONTEXT_*`, within 4095 of 2^64) before each part:
//! kernel frames after `PERF_CONTEXT_KERNEL`, user frames after `PERF_CONTEXT_USER`, a
//! guest's after `PERF_CONTEXT_GUEST*`. Other record types are skipped by the reader.
//!
//! Decoding never trusts the data: a record shorter than its type needs, a size below 8
//! or past the end of the file, or a call chain longer than its record is damage, which
//! [`parse`] reports and the reader counts; nothing in a damaged file can make it panic
//! (`tests/damaged_records.rs`).

use perf_event_open_sys::bindings as sys;

/// What every sample carries.
pub const SAMPLE_TYPE: u64 = (sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_CPU
    | sys::PERF_SAMPLE_PERIOD
    | sys::PERF_SAMPLE_CALLCHAIN) as u64;

/// `perf_event_header`: type, misc, size.
pub const HEADER_LEN: usize = 8;
/// The sample id at the end of every record other than a sample (`sample_id_all`).
pub const SAMPLE_ID_LEN: usize = 24;

pub const RECORD_MMAP2: u32 = sys::PERF_RECORD_MMAP2;
pub const RECORD_COMM: u32 = sys::PERF_RECORD_COMM;
pub const RECORD_FORK: u32 = sys::PERF_RECORD_FORK;
pub const RECORD_EXIT: u32 = sys::PERF_RECORD_EXIT;
pub const RECORD_LOST: u32 = sys::PERF_RECORD_LOST;
pub const RECORD_THROTTLE: u32 = sys::PERF_RECORD_THROTTLE;
pub const RECORD_UNTHROTTLE: u32 = sys::PERF_RECORD_UNTHROTTLE;
pub const RECORD_SAMPLE: u32 = sys::PERF_RECORD_SAMPLE;
/// COMM's misc bit: the name changed because the process exec'd.
pub const MISC_COMM_EXEC: u16 = sys::PERF_RECORD_MISC_COMM_EXEC as u16;

/// Call-chain markers are the top 4095 values of a u64.
const CONTEXT_MAX: u64 = sys::PERF_CONTEXT_MAX;
const CONTEXT_KERNEL: u64 = sys::PERF_CONTEXT_KERNEL;
const CONTEXT_USER: u64 = sys::PERF_CONTEXT_USER;
const CONTEXT_GUEST: u64 = sys::PERF_CONTEXT_GUEST;
const CONTEXT_GUEST_KERNEL: u64 = sys::PERF_CONTEXT_GUEST_KERNEL;
const CONTEXT_GUEST_USER: u64 = sys::PERF_CONTEXT_GUEST_USER;

/// A record's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u32,
    pub misc: u16,
    /// Whole record, header included.
    pub size: u16,
}

impl Header {
    /// The header at the start of `bytes` (at least [`HEADER_LEN`] long).
    pub fn parse(bytes: &[u8]) -> Option<Header> {
        let b = bytes.get(..HEADER_LEN)?;
        Some(Header {
            kind: u32::from_ne_bytes(b[0..4].try_into().ok()?),
            misc: u16::from_ne_bytes(b[4..6].try_into().ok()?),
            size: u16::from_ne_bytes(b[6..8].try_into().ok()?),
        })
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&self.kind.to_ne_bytes());
        out[4..6].copy_from_slice(&self.misc.to_ne_bytes());
        out[6..8].copy_from_slice(&self.size.to_ne_bytes());
        out
    }
}

/// Who and when, at the end of every non-sample record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleId {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
}

/// One decoded record; strings and the call chain borrow the record's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    Sample(RawSample<'a>),
    Mmap2(Mmap<'a>),
    Comm {
        pid: u32,
        tid: u32,
        comm: &'a str,
        exec: bool,
        id: SampleId,
    },
    Fork(Task),
    Exit(Task),
    /// Records the kernel could not store in the ring buffer.
    Lost {
        lost: u64,
        id: SampleId,
    },
    /// The kernel throttled (or unthrottled) the event: too many samples per tick.
    Throttle {
        on: bool,
        id: SampleId,
    },
    /// A type this reader does not use.
    Other {
        kind: u32,
    },
}

impl Record<'_> {
    /// The record's time on the trace clock (0 for types without one).
    pub fn time(&self) -> u64 {
        match self {
            Record::Sample(s) => s.time,
            Record::Mmap2(m) => m.id.time,
            Record::Comm { id, .. } | Record::Lost { id, .. } | Record::Throttle { id, .. } => {
                id.time
            }
            Record::Fork(t) | Record::Exit(t) => t.id.time,
            Record::Other { .. } => 0,
        }
    }
}

/// A sample as stored: its call chain still as bytes (not necessarily 8-byte aligned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSample<'a> {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    /// Nanoseconds of CPU time this sample stands for (cpu-clock's period).
    pub period: u64,
    /// `nr` u64s, leaf first, with context markers.
    pub callchain: &'a [u8],
    /// The header's cpumode says the CPU was running a guest (its call chain is then
    /// empty: the kernel does not walk a guest's stack).
    pub guest: bool,
}

/// A file-backed executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap<'a> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub prot: u32,
    pub flags: u32,
    pub filename: &'a str,
    pub id: SampleId,
}

/// A task created (FORK) or ended (EXIT). `pid`/`ppid` are thread groups, `tid`/`ptid`
/// threads: a new thread has `pid == ppid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
    pub id: SampleId,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("record size {0} is below the 8-byte header")]
    TooSmall(u16),
    #[error("record of type {kind} is {len} bytes, too short for its fields")]
    Short { kind: u32, len: usize },
    #[error("call chain of {nr} entries does not fit its {len}-byte record")]
    Chain { nr: u64, len: usize },
}

/// A little cursor over a record body that fails instead of panicking.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_ne_bytes(b.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        let b = self.bytes.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }
}

/// The NUL-terminated string at the start of `bytes`, lossily cut at the first invalid
/// UTF-8 byte.
fn c_str(bytes: &[u8]) -> &str {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let bytes = &bytes[..end];
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}

fn sample_id(body: &[u8]) -> Option<SampleId> {
    let start = body.len().checked_sub(SAMPLE_ID_LEN)?;
    let mut f = Fields {
        bytes: body,
        at: start,
    };
    Some(SampleId {
        pid: f.u32()?,
        tid: f.u32()?,
        time: f.u64()?,
        cpu: f.u32()?,
    })
}

/// Decodes one record's body (the bytes after its header).
pub fn parse(header: Header, body: &[u8]) -> Result<Record<'_>, Damage> {
    let short = Damage::Short {
        kind: header.kind,
        len: body.len(),
    };
    let mut f = Fields { bytes: body, at: 0 };
    let record = match header.kind {
        RECORD_SAMPLE => {
            let (pid, tid, time, cpu) = (f.u32(), f.u32(), f.u64(), f.u32());
            let _res = f.u32();
            let (period, nr) = (f.u64(), f.u64());
            let (Some(pid), Some(tid), Some(time), Some(cpu), Some(period), Some(nr)) =
                (pid, tid, time, cpu, period, nr)
            else {
                return Err(short);
            };
            let chain = &body[f.at..];
            if nr.checked_mul(8) != Some(chain.len() as u64) {
                return Err(Damage::Chain {
                    nr,
                    len: body.len(),
                });
            }
            Record::Sample(RawSample {
                pid,
                tid,
                time,
                cpu,
                period,
                callchain: chain,
                guest: matches!(
                    u32::from(header.misc) & sys::PERF_RECORD_MISC_CPUMODE_MASK,
                    sys::PERF_RECORD_MISC_GUEST_KERNEL | sys::PERF_RECORD_MISC_GUEST_USER
                ),
            })
        }
        RECORD_MMAP2 => {
            let id = sample_id(body).ok_or(short)?;
            let fields = (|| {
                let pid = f.u32()?;
                let tid = f.u32()?;
                let addr = f.u64()?;
                let len = f.u64()?;
                let pgoff = f.u64()?;
                let maj = f.u32()?;
                let min = f.u32()?;
                let ino = f.u64()?;
                let _generation = f.u64()?;
                let prot = f.u32()?;
                let flags = f.u32()?;
                Some((pid, tid, addr, len, pgoff, maj, min, ino, prot, flags))
            })();
            let Some((pid, tid, addr, len, pgoff, maj, min, ino, prot, flags)) = fields else {
                return Err(short);
            };
            let name_end = body.len() - SAMPLE_ID_LEN;
            if f.at > name_end {
                return Err(short);
            }
            Record::Mmap2(Mmap {
                pid,
                tid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                prot,
                flags,
                filename: c_str(&body[f.at..name_end]),
                id,
            })
        }
        RECORD_COMM => {
            let id = sample_id(body).ok_or(short)?;
            let (Some(pid), Some(tid)) = (f.u32(), f.u32()) else {
                return Err(short);
            };
            let name_end = body.len() - SAMPLE_ID_LEN;
            if f.at > name_end {
                return Err(short);
            }
            Record::Comm {
                pid,
                tid,
                comm: c_str(&body[f.at..name_end]),
                exec: header.misc & MISC_COMM_EXEC != 0,
                id,
            }
        }
        RECORD_FORK | RECORD_EXIT => {
            let id = sample_id(body).ok_or(short)?;
            let (Some(pid), Some(ppid), Some(tid), Some(ptid), Some(time)) =
                (f.u32(), f.u32(), f.u32(), f.u32(), f.u64())
            else {
                return Err(short);
            };
            if f.at + SAMPLE_ID_LEN > body.len() {
                return Err(short);
            }
            let task = Task {
                pid,
                ppid,
                tid,
                ptid,
                time,
                id,
            };
            if header.kind == RECORD_FORK {
                Record::Fork(task)
            } else {
                Record::Exit(task)
            }
        }
        RECORD_LOST => {
            let id = sample_id(body).ok_or(short)?;
            let (Some(_), Some(lost)) = (f.u64(), f.u64()) else {
                return Err(short);
            };
            if f.at + SAMPLE_ID_LEN > body.len() {
                return Err(short);
            }
            Record::Lost { lost, id }
        }
        RECORD_THROTTLE | RECORD_UNTHROTTLE => {
            let id = sample_id(body).ok_or(short)?;
            if body.len() < 24 + SAMPLE_ID_LEN {
                return Err(short);
            }
            Record::Throttle {
                on: header.kind == RECORD_THROTTLE,
                id,
            }
        }
        kind => Record::Other { kind },
    };
    Ok(record)
}

/// Where a call chain's frames ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    Kernel,
    User,
    Guest,
    Other,
}

/// A sample's call chain split by where each frame ran, leaf first; context markers
/// dropped, user addresses in the null page (the end of a broken frame-pointer walk)
/// too. `guest` says the chain holds a guest's part (not kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    pub kernel: Vec<u64>,
    pub user: Vec<u64>,
    pub guest: bool,
}

impl Chain {
    /// Fills `self` from the raw call chain bytes, reusing its vectors.
    pub fn fill(&mut self, callchain: &[u8]) {
        self.kernel.clear();
        self.user.clear();
        self.guest = false;
        // A chain without a leading marker is kernel frames (the kernel always writes one).
        let mut context = Context::Kernel;
        for word in callchain.chunks_exact(8) {
            let ip = u64::from_ne_bytes(word.try_into().expect("chunks of 8"));
            if ip >= CONTEXT_MAX {
                context = match ip {
                    CONTEXT_KERNEL => Context::Kernel,
                    CONTEXT_USER => Context::User,
                    CONTEXT_GUEST | CONTEXT_GUEST_KERNEL | CONTEXT_GUEST_USER => {
                        self.guest = true;
                        Context::Guest
                    }
                    _ => Context::Other,
                };
                continue;
            }
            match context {
                Context::Kernel => self.kernel.push(ip),
                // A frame-pointer walk through code built without frame pointers ends in
                // garbage, often 0: an address in the null page is no frame.
                Context::User if ip < 4096 => {}
                Context::User => self.user.push(ip),
                Context::Guest | Context::Other => {}
            }
        }
    }
}

/// Encoding, for the records vmscale writes itself (`procs`) and for tests.
pub mod encode {
    use super::*;

    fn padded_str(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(s.as_bytes());
        out.push(0);
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
    }

    fn finish(kind: u32, misc: u16, mut body: Vec<u8>, id: Option<SampleId>) -> Vec<u8> {
        if let Some(id) = id {
            body.extend_from_slice(&id.pid.to_ne_bytes());
            body.extend_from_slice(&id.tid.to_ne_bytes());
            body.extend_from_slice(&id.time.to_ne_bytes());
            body.extend_from_slice(&id.cpu.to_ne_bytes());
            body.extend_from_slice(&0u32.to_ne_bytes());
        }
        let size = (HEADER_LEN + body.len()).min(u16::MAX as usize) as u16;
        let mut out = Header { kind, misc, size }.encode().to_vec();
        out.extend_from_slice(&body);
        out.truncate(size as usize);
        out
    }

    pub fn mmap2(m: &Mmap<'_>) -> Vec<u8> {
        let mut body = Vec::with_capacity(96 + m.filename.len());
        for v in [m.pid, m.tid] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [m.addr, m.len, m.pgoff] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [m.maj, m.min] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [m.ino, 0] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [m.prot, m.flags] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        padded_str(&mut body, m.filename);
        finish(RECORD_MMAP2, 0, body, Some(m.id))
    }

    pub fn comm(pid: u32, tid: u32, comm: &str, exec: bool, id: SampleId) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&tid.to_ne_bytes());
        padded_str(&mut body, comm);
        let misc = if exec { MISC_COMM_EXEC } else { 0 };
        finish(RECORD_COMM, misc, body, Some(id))
    }

    pub fn task(fork: bool, t: &Task) -> Vec<u8> {
        let mut body = Vec::new();
        for v in [t.pid, t.ppid, t.tid, t.ptid] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(&t.time.to_ne_bytes());
        let kind = if fork { RECORD_FORK } else { RECORD_EXIT };
        finish(kind, 0, body, Some(t.id))
    }

    pub fn lost(lost: u64, id: SampleId) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&0u64.to_ne_bytes());
        body.extend_from_slice(&lost.to_ne_bytes());
        finish(RECORD_LOST, 0, body, Some(id))
    }

    /// A sample whose chain is `kernel` then `user` frames, leaf first, with markers.
    pub fn sample(
        pid: u32,
        tid: u32,
        time: u64,
        cpu: u32,
        period: u64,
        kernel: &[u64],
        user: &[u64],
    ) -> Vec<u8> {
        let mut chain = Vec::new();
        if !kernel.is_empty() {
            chain.push(CONTEXT_KERNEL);
            chain.extend_from_slice(kernel);
        }
        if !user.is_empty() {
            chain.push(CONTEXT_USER);
            chain.extend_from_slice(user);
        }
        let mut body = Vec::new();
        for v in [pid, tid] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(&time.to_ne_bytes());
        body.extend_from_slice(&cpu.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(&period.to_ne_bytes());
        body.extend_from_slice(&(chain.len() as u64).to_ne_bytes());
        for ip in chain {
            body.extend_from_slice(&ip.to_ne_bytes());
        }
        finish(RECORD_SAMPLE, 0, body, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bytes: &[u8]) -> Record<'_> {
        let header = Header::parse(bytes).unwrap();
        assert_eq!(header.size as usize, bytes.len());
        parse(header, &bytes[HEADER_LEN..]).unwrap()
    }

    #[test]
    fn records_round_trip() {
        let id = SampleId {
            pid: 7,
            tid: 8,
            time: 99,
            cpu: 1,
        };
        let bytes = encode::sample(
            7,
            8,
            99,
            1,
            1000,
            &[0xffff_ffff_8100_0000],
            &[0x401000, 0x402000],
        );
        let Record::Sample(s) = round_trip(&bytes) else {
            panic!("not a sample")
        };
        assert_eq!((s.pid, s.tid, s.time, s.cpu, s.period), (7, 8, 99, 1, 1000));
        let mut chain = Chain::default();
        chain.fill(s.callchain);
        assert_eq!(chain.kernel, vec![0xffff_ffff_8100_0000]);
        assert_eq!(chain.user, vec![0x401000, 0x402000]);

        let mmap = Mmap {
            pid: 7,
            tid: 7,
            addr: 0x400000,
            len: 0x1000,
            pgoff: 0,
            maj: 8,
            min: 1,
            ino: 42,
            prot: 5,
            flags: 2,
            filename: "/usr/bin/qemu-system-x86_64",
            id,
        };
        assert_eq!(
            round_trip(&encode::mmap2(&mmap)),
            Record::Mmap2(mmap.clone())
        );
        assert_eq!(
            round_trip(&encode::comm(7, 8, "CPU 0/KVM", true, id)),
            Record::Comm {
                pid: 7,
                tid: 8,
                comm: "CPU 0/KVM",
                exec: true,
                id
            }
        );
        let task = Task {
            pid: 9,
            ppid: 7,
            tid: 9,
            ptid: 8,
            time: 5,
            id,
        };
        assert_eq!(round_trip(&encode::task(true, &task)), Record::Fork(task));
        assert_eq!(
            round_trip(&encode::lost(12, id)),
            Record::Lost { lost: 12, id }
        );
    }

    #[test]
    fn a_chain_longer_than_its_record_is_damage() {
        let mut bytes = encode::sample(1, 1, 1, 0, 1, &[1, 2], &[]);
        // nr is the u64 just before the chain: 8 header + 32 fixed bytes.
        bytes[HEADER_LEN + 32..HEADER_LEN + 40].copy_from_slice(&1000u64.to_ne_bytes());
        let header = Header::parse(&bytes).unwrap();
        assert!(matches!(
            parse(header, &bytes[HEADER_LEN..]),
            Err(Damage::Chain { nr: 1000, .. })
        ));
    }
}
