//! Parsers for PyTorch CUDA memory reports, safe on untrusted input (a user drops a file on the
//! page or passes it to `lorafit inspect`).
//!
//! [`parse`] recognises three inputs by their content:
//!
//! * the pickle written by `torch.cuda.memory._dump_snapshot()`, optionally
//!   gzip-compressed → [`Report::Snapshot`];
//! * the text of `torch.cuda.memory_summary()` → [`Report::Summary`];
//! * `torch.cuda.memory_stats()` saved as JSON → [`Report::Stats`].
//!
//! The parser takes a byte slice, uses no threads and no files, never panics,
//! does not recurse on input structure and bounds sizes, nesting and work by
//! [`Limits`]; problems come back as an `Err` with a readable message.
//!
//! ```no_run
//! let bytes = std::fs::read("snapshot.pickle").unwrap();
//! if let Ok(lorafit::formats::snapshot::Report::Snapshot(s)) =
//!     lorafit::formats::snapshot::parse(&bytes)
//! {
//!     let t = s.timeline();
//!     println!("peak reserved {} B", t.peak_reserved_bytes);
//! }
//! ```

mod dump;
mod pickle;
mod stats;
mod summary;
mod timeline;

use std::io::Read;

pub use dump::{
    Action, AllocatorSettings, Block, BlockState, Frame, Segment, Snapshot, StackId, TraceEvent,
};
pub use stats::Stats;
pub use summary::{Amount, Pool, Summary, SummaryRow, Unit};
pub use timeline::{LiveBlock, Timeline, TimelinePoint};

/// A parsed memory report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Report {
    /// `torch.cuda.memory._dump_snapshot()` pickle.
    Snapshot(Snapshot),
    /// `torch.cuda.memory_summary()` text.
    Summary(Summary),
    /// `torch.cuda.memory_stats()` JSON.
    Stats(Stats),
}

/// Bounds on the input and on the work spent on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest input, and largest gzip output (decompression stops beyond it).
    pub max_input_bytes: usize,
    /// Deepest container nesting in a pickle.
    pub max_depth: usize,
    /// Most values on the pickle stack at once.
    pub max_stack: usize,
    /// Most open `MARK`s at once.
    pub max_marks: usize,
    /// Most values (and memo entries) a pickle may create.
    pub max_nodes: usize,
    /// Most container items a pickle may hold in total.
    pub max_items: usize,
    /// Most values visited while mapping a pickle onto a [`Snapshot`].
    pub max_work: u64,
    /// Most string bytes copied into a [`Snapshot`].
    pub max_text_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_input_bytes: 512 << 20,
            max_depth: 32,
            max_stack: 1 << 20,
            max_marks: 256,
            max_nodes: 1 << 26,
            max_items: 1 << 27,
            max_work: 1 << 28,
            max_text_bytes: 256 << 20,
        }
    }
}

/// Parses a snapshot pickle (plain or gzip), summary text or stats JSON.
pub fn parse(bytes: &[u8]) -> Result<Report, String> {
    parse_with_limits(bytes, &Limits::default())
}

/// [`parse`] with explicit [`Limits`].
pub fn parse_with_limits(bytes: &[u8], limits: &Limits) -> Result<Report, String> {
    check_size(bytes.len(), limits)?;
    if is_gzip(bytes) {
        let data = gunzip(bytes, limits.max_input_bytes)?;
        if is_gzip(&data) {
            return Err("gzip inside gzip is not supported".into());
        }
        return parse_plain(&data, limits);
    }
    parse_plain(bytes, limits)
}

/// Decompresses one gzip member, stopping once more than `limit` bytes come out.
/// The size declared in the gzip trailer is not trusted.
pub fn gunzip(bytes: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let decoder = flate2::bufread::GzDecoder::new(bytes);
    decoder
        .take((limit as u64).saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("invalid gzip data: {e}"))?;
    if out.len() > limit {
        return Err(format!(
            "gzip data decompresses to more than the {} MiB limit",
            limit >> 20
        ));
    }
    Ok(out)
}

fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

fn check_size(len: usize, limits: &Limits) -> Result<(), String> {
    if len > limits.max_input_bytes {
        return Err(format!(
            "input of {len} bytes exceeds the {} MiB limit",
            limits.max_input_bytes >> 20
        ));
    }
    Ok(())
}

/// Parses uncompressed input.
fn parse_plain(bytes: &[u8], limits: &Limits) -> Result<Report, String> {
    if matches!(bytes, [0x80, proto, ..] if *proto <= 5) {
        let arena = pickle::load(bytes, limits)?;
        return dump::from_arena(&arena, limits).map(Report::Snapshot);
    }
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        return stats::parse_stats(text).map(Report::Stats);
    }
    let text = String::from_utf8_lossy(text);
    if summary::looks_like_summary(&text) {
        return summary::parse_summary(&text).map(Report::Summary);
    }
    Err(
        "unrecognised input: expected a torch.cuda.memory._dump_snapshot() pickle \
         (optionally gzip-compressed), memory_summary() text or memory_stats() JSON"
            .into(),
    )
}
