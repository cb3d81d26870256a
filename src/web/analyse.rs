//! What the "Read a real run" panel's Web Worker does (`src/bin/lorafit-analyse.rs` wraps it for
//! the browser): a file's bytes and the page's link in, the [`Inspection`] out, saying how far it
//! got through `progress` (English texts with numbers, which the page translates). Pure and
//! native, so a test runs exactly what the worker runs.
//!
//! The snapshot reader, the inflater, the allocator replay and the comparison with the plan live
//! in that worker's own wasm, loaded when a file is dropped: the planner's wasm does not carry
//! them, and a 200 MB snapshot never blocks the page.

use crate::formats::snapshot::{self, Gunzip, Limits, Reader, Report};
use crate::planning::inspect::{self, Inspection};
use crate::web::link;
use crate::web::state::arch_of;

/// Pickle opcodes read between two progress texts.
const OPS_PER_SLICE: usize = 1 << 20;
/// Gzip input inflated between two progress texts.
const GZIP_BYTES_PER_SLICE: usize = 4 << 20;

fn mib(n: usize) -> f64 {
    n as f64 / 1048576.0
}

/// Decompresses (when gzip) and parses `bytes`, a progress text per slice.
fn parse(bytes: Vec<u8>, progress: &mut dyn FnMut(String)) -> Result<Report, String> {
    let limits = Limits::default();
    let data = if snapshot::is_gzip(&bytes) {
        let mut g = Gunzip::new(limits.max_input_bytes);
        let mut done = 0;
        for piece in bytes.chunks(GZIP_BYTES_PER_SLICE) {
            g.feed(piece)?;
            done += piece.len();
            progress(format!(
                "decompressing {:.1} MiB… {:.0} %",
                mib(bytes.len()),
                done as f64 / bytes.len() as f64 * 100.0
            ));
        }
        drop(bytes);
        g.finish()?
    } else {
        bytes
    };
    let mut reader = Reader::new(&data, &limits)?;
    loop {
        if let Some(report) = reader.step(OPS_PER_SLICE)? {
            return Ok(report);
        }
        progress(format!(
            "parsing {:.1} MiB… {:.0} %",
            mib(data.len()),
            reader.fraction_read() * 100.0
        ));
    }
}

/// Reads `bytes` (a snapshot, `memory_summary()` text or `memory_stats()` JSON) and compares it
/// with the plan of the configuration in `query` (the page's link, read as the page reads it).
pub fn run(
    bytes: Vec<u8>,
    query: &str,
    progress: &mut dyn FnMut(String),
) -> Result<Inspection, String> {
    let report = parse(bytes, progress)?;
    progress("replaying the run through the allocator…".into());
    let mut ins = inspect::measure(&report);
    let (st, _) = link::decode(query);
    if let Ok(arch) = arch_of(&st) {
        progress("comparing with the plan…".into());
        inspect::compare(&mut ins, &report, &arch, &st.settings)?;
    }
    Ok(inspect::conclude(ins))
}
