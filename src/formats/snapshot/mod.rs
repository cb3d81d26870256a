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
mod idmap;
mod pickle;
mod stats;
mod summary;
mod timeline;

use std::io::Write;

pub use dump::{
    Action, AllocatorSettings, Block, BlockState, Frame, Segment, Snapshot, StackId, TraceEvent,
};
pub use idmap::{IdHasher, IdMap, IdSet};
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
        return parse_plain(&data, limits);
    }
    parse_plain(bytes, limits)
}

/// Decompresses one gzip member, stopping once more than `limit` bytes come out.
/// The size declared in the gzip trailer is not trusted.
pub fn gunzip(bytes: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let mut g = Gunzip::new(limit);
    g.feed(bytes)?;
    g.finish()
}

/// Whether `bytes` start like gzip data.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Gzip decompression fed a slice at a time (the page shows progress between slices). Output
/// is checked against the limit after every 64 KiB of input, so a bomb stops within about
/// 64 MiB of the limit.
pub struct Gunzip {
    decoder: flate2::write::GzDecoder<Vec<u8>>,
    limit: usize,
}

impl Gunzip {
    /// A decompressor whose output may not exceed `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            decoder: flate2::write::GzDecoder::new(Vec::new()),
            limit,
        }
    }

    /// Decompresses the next piece of input.
    pub fn feed(&mut self, input: &[u8]) -> Result<(), String> {
        for piece in input.chunks(64 << 10) {
            self.decoder.write_all(piece).map_err(invalid_gzip)?;
            self.check()?;
        }
        Ok(())
    }

    /// Bytes decompressed so far.
    pub fn output_len(&self) -> usize {
        self.decoder.get_ref().len()
    }

    fn check(&self) -> Result<(), String> {
        if self.output_len() > self.limit {
            return Err(format!(
                "gzip data decompresses to more than the {} MiB limit",
                self.limit >> 20
            ));
        }
        Ok(())
    }

    /// The decompressed data, once all input was fed. (Gzip inside gzip is refused by
    /// [`Reader::new`], which every parse goes through.)
    pub fn finish(mut self) -> Result<Vec<u8>, String> {
        self.decoder.try_finish().map_err(invalid_gzip)?;
        self.check()?;
        self.decoder.finish().map_err(invalid_gzip)
    }
}

fn invalid_gzip(e: std::io::Error) -> String {
    format!("invalid gzip data: {e}")
}

/// Parsing uncompressed input a slice at a time: [`Reader::step`] runs a bounded amount of
/// work, so a page can show progress and stay responsive on a 200 MB snapshot. [`parse`] is
/// the same run to the end.
pub struct Reader<'a> {
    bytes: &'a [u8],
    limits: &'a Limits,
    unpickler: Option<pickle::Unpickler<'a, 'a>>,
    /// The unpickled values, mapped onto a [`Snapshot`] by the next step.
    arena: Option<pickle::Arena<'a>>,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes` (already decompressed: see [`Gunzip`]).
    pub fn new(bytes: &'a [u8], limits: &'a Limits) -> Result<Self, String> {
        check_size(bytes.len(), limits)?;
        if is_gzip(bytes) {
            return Err("gzip inside gzip is not supported".into());
        }
        let unpickler = is_pickle(bytes).then(|| pickle::Unpickler::new(bytes, limits));
        Ok(Self {
            bytes,
            limits,
            unpickler,
            arena: None,
        })
    }

    /// Runs at most `ops` pickle opcodes, or maps the unpickled values onto a [`Snapshot`]
    /// (text and JSON are read at once); the report once the input is read.
    pub fn step(&mut self, ops: usize) -> Result<Option<Report>, String> {
        if let Some(arena) = self.arena.take() {
            return dump::from_arena(&arena, self.limits)
                .map(Report::Snapshot)
                .map(Some);
        }
        let Some(unpickler) = &mut self.unpickler else {
            return parse_text(self.bytes).map(Some);
        };
        self.arena = unpickler.run(ops)?;
        Ok(None)
    }

    /// Share of the input read so far (0 to 1).
    pub fn fraction_read(&self) -> f64 {
        let pos = self.unpickler.as_ref().map_or(0, |u| u.position());
        pos as f64 / self.bytes.len().max(1) as f64
    }
}

fn is_pickle(bytes: &[u8]) -> bool {
    matches!(bytes, [0x80, proto, ..] if *proto <= 5)
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
    let mut reader = Reader::new(bytes, limits)?;
    loop {
        if let Some(report) = reader.step(usize::MAX)? {
            return Ok(report);
        }
    }
}

/// Parses `memory_stats()` JSON or `memory_summary()` text.
fn parse_text(bytes: &[u8]) -> Result<Report, String> {
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
