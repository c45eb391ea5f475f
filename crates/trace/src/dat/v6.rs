//! Version 6 (trace-cmd.dat.v6(5)): after the preamble every block follows the previous
//! one in a fixed order, then the CPU count, the options and the flyrecord table.

use super::buffer;
use super::error::DatError;
use super::metadata::Metadata;
use super::options::{self, Options};
use super::preamble::{Layout, Preamble};
use super::source::{Cursor, Source};
use super::Contents;

const OPTIONS_TAG: &[u8] = b"options  \0";
const LATENCY_TAG: &[u8] = b"latency  \0";
const FLYRECORD_TAG: &[u8] = b"flyrecord\0";

pub fn read(source: &Source, preamble: &Preamble) -> Result<Contents, DatError> {
    let mut cursor = Cursor::new(source, preamble.end, preamble.endian);
    let mut metadata = Metadata::default();
    metadata.read_header_info(&mut cursor)?;
    metadata.read_ftrace_formats(&mut cursor)?;
    metadata.read_event_formats(&mut cursor)?;
    metadata.read_kallsyms(&mut cursor)?;
    metadata.read_printk_formats(&mut cursor)?;
    metadata.read_cmdlines(&mut cursor)?;
    let header_cpus = cursor.u32("cpu count")?;
    options::check_cpu_count(header_cpus as u64)?;

    let mut options = Options::default();
    let mut tag = read_tag(&mut cursor)?;
    if tag == OPTIONS_TAG {
        read_options(&mut cursor, &mut options, preamble)?;
        tag = read_tag(&mut cursor)?;
    }
    expect_flyrecord(&tag, cursor.pos - 10)?;

    // A CPUCOUNT option overrides the header's count, also for the table's length.
    let cpus = options.cpu_count.unwrap_or(header_cpus);
    let mut buffers = vec![buffer::read_v6_table(
        &mut cursor,
        "",
        cpus,
        preamble.page_size,
    )?];
    for option in &options.buffers {
        let mut at = Cursor::new(source, option.offset, preamble.endian);
        let tag = read_tag(&mut at)?;
        expect_flyrecord(&tag, option.offset)?;
        buffers.push(buffer::read_v6_table(
            &mut at,
            &option.name,
            cpus,
            preamble.page_size,
        )?);
    }
    Ok(Contents {
        metadata,
        cpu_count: cpus,
        options,
        buffers,
    })
}

fn read_tag(cursor: &mut Cursor<'_>) -> Result<Vec<u8>, DatError> {
    cursor.bytes("options/flyrecord tag", 10)
}

fn expect_flyrecord(tag: &[u8], offset: u64) -> Result<(), DatError> {
    if tag == LATENCY_TAG {
        return Err(DatError::LatencyTrace);
    }
    if tag != FLYRECORD_TAG {
        return Err(DatError::MissingTag {
            what: "flyrecord",
            offset,
        });
    }
    Ok(())
}

/// `u16 id, u32 size, data` until an id of 0 (version 6 has no size after the last id).
fn read_options(
    cursor: &mut Cursor<'_>,
    options: &mut Options,
    preamble: &Preamble,
) -> Result<(), DatError> {
    loop {
        let id = cursor.u16("option id")?;
        if id == options::DONE {
            return Ok(());
        }
        let size = cursor.u32("option size")?;
        let data = cursor.bytes("option data", size as u64)?;
        options.apply(id, &data, Layout::V6, preamble.endian)?;
    }
}
