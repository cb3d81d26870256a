//! `PYTORCH_CUDA_ALLOC_CONF` parsing: a port of `c10/core/AllocatorConfig.cpp`
//! (`AcceleratorAllocatorConfig::parseArgs`) and of the CUDA-specific keys of
//! `c10/cuda/CUDAAllocatorConfig.cpp`.
//!
//! The syntax is a comma separated list of `key:value` pairs, where a value may
//! be a bracketed list (`roundup_power2_divisions:[256:1,512:2,>:4]`). The
//! tokenizer (PyTorch's `ConfigTokenizer`) splits on `,` `:` `[` `]` and drops
//! whitespace.
//!
//! Differences from PyTorch, all on the side of rejecting input PyTorch would
//! accept or crash on:
//! - numbers must be plain decimal integers (PyTorch's `std::stoull` would also
//!   accept `"128abc"` as 128);
//! - `backend:cudaMallocAsync` is rejected, because this port only models the
//!   native allocator;
//! - options of the pinned host allocator and `release_lock_on_cudamalloc` are
//!   validated and then ignored (they do not change device memory accounting).

use super::constants::{K_LARGE_BUFFER, K_MB, K_MIN_LARGE_ALLOC};
use std::fmt;

/// Number of power-of-two size intervals used by `roundup_power2_divisions`
/// (PyTorch's `kRoundUpPowerOfTwoIntervals`): the intervals start at 1 MiB
/// (`kRoundUpPowerOfTwoStart`) and the last one covers everything from 32 GiB
/// up (`kRoundUpPowerOfTwoEnd` = 64 GiB).
pub const ROUNDUP_POWER2_INTERVALS: usize = 16;

/// log2 of `kRoundUpPowerOfTwoStart` (1 MiB).
const ROUNDUP_POWER2_START_LOG2: u32 = 20;

/// The allocator settings PyTorch reads from `PYTORCH_CUDA_ALLOC_CONF`.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocConf {
    /// `max_split_size_mb`, in bytes. `None` is PyTorch's default
    /// (`std::numeric_limits<size_t>::max()`): every block may be split.
    /// Blocks of at least this size are never split, and a request below it
    /// never takes such a block from the cache.
    pub max_split_size_bytes: Option<u64>,
    /// `max_non_split_rounding_mb`, in bytes: a request of at least
    /// `max_split_size` takes an oversize cached block only if
    /// `block size < request + max_non_split_rounding`. Defaults to
    /// `large_segment_size` (kLargeBuffer, 20 MiB).
    pub max_non_split_rounding_bytes: u64,
    /// `large_segment_size_mb`, in bytes: the segment size for large-pool
    /// requests below kMinLargeAlloc, and the page size of large-pool
    /// expandable segments. Defaults to kLargeBuffer (20 MiB).
    pub large_segment_size_bytes: u64,
    /// `roundup_power2_divisions`, one entry per power-of-two size interval
    /// starting at 1 MiB (index 0: sizes below 2 MiB, index 1: [2, 4) MiB, ...,
    /// index 15: 32 GiB and up). 0 or 1 means "round to kMinBlockSize only".
    pub roundup_power2_divisions: [u64; ROUNDUP_POWER2_INTERVALS],
    /// `garbage_collection_threshold`, in (0, 1). Only acts once a memory
    /// fraction is set (PyTorch's `set_fraction` / `allowed_memory_maximum`).
    pub garbage_collection_threshold: Option<f64>,
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
}

impl Default for AllocConf {
    fn default() -> Self {
        AllocConf {
            max_split_size_bytes: None,
            max_non_split_rounding_bytes: K_LARGE_BUFFER,
            large_segment_size_bytes: K_LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_POWER2_INTERVALS],
            garbage_collection_threshold: None,
            expandable_segments: false,
        }
    }
}

/// An error in an allocator configuration string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfError(pub String);

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid PYTORCH_CUDA_ALLOC_CONF: {}", self.0)
    }
}

impl std::error::Error for ConfError {}

impl From<ConfError> for String {
    fn from(e: ConfError) -> String {
        e.to_string()
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, ConfError> {
    Err(ConfError(msg.into()))
}

impl AllocConf {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string, e.g.
    /// `"expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4"`.
    /// The empty string gives the defaults. Never panics.
    pub fn parse(s: &str) -> Result<AllocConf, ConfError> {
        // (the planner page's first bundle, built without `extended-ops`, reads only what
        // `first_bundle` reads: the extended ops' check gives it no other)
        if !cfg!(feature = "extended-ops") {
            return Self::first_bundle(s)
                .ok_or_else(|| ConfError("read by the full planner".into()));
        }
        let tokens = Tokenizer::new(s);
        let mut conf = AllocConf::default();
        // large_segment_size_mb is read first: the minimum of max_split_size_mb
        // and the default of max_non_split_rounding_mb depend on it.
        let mut i = 0;
        while i < tokens.len() {
            if tokens.get(i) == Some("large_segment_size_mb") {
                let v = tokens.mb_value(i, "large_segment_size_mb")?;
                let min_mb = K_MIN_LARGE_ALLOC / K_MB;
                if v <= min_mb {
                    return err(format!(
                        "large_segment_size_mb must be > {min_mb} MB, got {v}"
                    ));
                }
                conf.large_segment_size_bytes = v.min(u64::MAX / K_MB) * K_MB;
            }
            i += 1;
        }
        conf.max_non_split_rounding_bytes = conf.large_segment_size_bytes;

        let mut i = 0;
        while i < tokens.len() {
            i = conf.parse_key(&tokens, i)?;
            if i + 1 < tokens.len() {
                i += 1;
                tokens.expect(i, ",")?;
            }
            i += 1;
        }
        Ok(conf)
    }

    /// The configurations the planner page's first bundle reads itself: none, and expandable
    /// segments alone (what the fixes offer from none); any other is the full planner's
    /// (the extended ops' check refuses them there), which keeps the first visit small.
    pub fn first_bundle(s: &str) -> Option<AllocConf> {
        let expandable = match s.split_whitespace().collect::<String>().as_str() {
            "" | "expandable_segments:False" => false,
            "expandable_segments:True" => true,
            _ => return None,
        };
        Some(AllocConf {
            expandable_segments: expandable,
            ..AllocConf::default()
        })
    }

    /// Parses the key at token `i` and its value; returns the index of the
    /// value's last token.
    fn parse_key(&mut self, t: &Tokenizer, i: usize) -> Result<usize, ConfError> {
        let key = t.get(i).unwrap_or_default();
        let min_split_mb = self.large_segment_size_bytes / K_MB;
        match key {
            "large_segment_size_mb" => Ok(i + 2), // handled in the first pass
            "max_split_size_mb" => {
                let v = t.mb_value(i, key)?;
                if v < min_split_mb {
                    return err(format!(
                        "max_split_size_mb too small, must be >= {min_split_mb}, got {v}"
                    ));
                }
                self.max_split_size_bytes = Some(v.min(u64::MAX / K_MB) * K_MB);
                Ok(i + 2)
            }
            "max_non_split_rounding_mb" => {
                let v = t.mb_value(i, key)?;
                if v < min_split_mb {
                    return err(format!(
                        "max_non_split_rounding_mb too small, must be >= {min_split_mb}, got {v}"
                    ));
                }
                self.max_non_split_rounding_bytes = v.min(u64::MAX / K_MB) * K_MB;
                Ok(i + 2)
            }
            "garbage_collection_threshold" => {
                t.expect(i + 1, ":")?;
                let raw = t.value(i + 2, key)?;
                let v: f64 = raw.parse().map_err(|_| {
                    ConfError(format!(
                        "garbage_collection_threshold: '{raw}' is not a number"
                    ))
                })?;
                if !(v > 0.0 && v < 1.0) {
                    return err(format!(
                        "garbage_collection_threshold is invalid, set it in (0.0, 1.0), got {raw}"
                    ));
                }
                self.garbage_collection_threshold = Some(v);
                Ok(i + 2)
            }
            "roundup_power2_divisions" => self.parse_roundup_power2_divisions(t, i),
            "expandable_segments" => {
                self.expandable_segments = t.bool_value(i, key)?;
                Ok(i + 2)
            }
            "backend" => {
                t.expect(i + 1, ":")?;
                match t.value(i + 2, key)? {
                    "native" => Ok(i + 2),
                    "cudaMallocAsync" => {
                        err("backend:cudaMallocAsync is not modelled; only the native allocator is")
                    }
                    other => err(format!(
                        "Unknown allocator backend '{other}', options are native and cudaMallocAsync"
                    )),
                }
            }
            "release_lock_on_cudamalloc"
            | "release_lock_on_hipmalloc"
            | "pinned_use_cuda_host_register"
            | "pinned_use_hip_host_register"
            | "pinned_use_background_threads"
            | "graph_capture_record_stream_reuse" => {
                t.bool_value(i, key)?;
                Ok(i + 2)
            }
            "pinned_num_register_threads" | "pinned_reserve_segment_size_mb" => {
                t.mb_value(i, key)?;
                Ok(i + 2)
            }
            "" => err("empty key"),
            other => err(format!(
                "Unrecognized key '{other}' in CUDA allocator config."
            )),
        }
    }

    /// `parseRoundUpPower2Divisions`: either one value for every interval, or
    /// a list `[boundary_mb:divisions, ..., >:divisions]`.
    fn parse_roundup_power2_divisions(
        &mut self,
        t: &Tokenizer,
        i: usize,
    ) -> Result<usize, ConfError> {
        const KEY: &str = "roundup_power2_divisions";
        t.expect(i + 1, ":")?;
        let mut i = i + 2;
        if t.value(i, KEY)? != "[" {
            let v = parse_u64(t.value(i, KEY)?, KEY)?;
            if !v.is_power_of_two() {
                return err("For roundups, the divisions has to be power of 2");
            }
            self.roundup_power2_divisions = [v; ROUNDUP_POWER2_INTERVALS];
            return Ok(i);
        }
        let mut first_value = true;
        let mut last_index = 0usize;
        loop {
            i += 1;
            let boundary = t.value(i, KEY)?;
            if boundary == "]" {
                return Ok(i);
            }
            t.expect(i + 1, ":")?;
            i += 2;
            let value = parse_u64(t.value(i, KEY)?, KEY)?;
            if value != 0 && !value.is_power_of_two() {
                return err(
                    "For roundups, the divisions has to be power of 2 or 0 to disable roundup",
                );
            }
            let divs = &mut self.roundup_power2_divisions;
            if boundary == ">" {
                for d in divs.iter_mut().skip(last_index + 1) {
                    *d = value;
                }
            } else {
                let b = parse_u64(boundary, KEY)?;
                if !b.is_power_of_two() {
                    return err(format!(
                        "For roundups, the intervals have to be power of 2, got {b}"
                    ));
                }
                let index = (b.ilog2() as usize).min(ROUNDUP_POWER2_INTERVALS - 1);
                if first_value {
                    divs[..index].fill(value);
                    first_value = false;
                }
                divs[index] = value;
                last_index = index;
            }
            if t.get(i + 1) != Some("]") {
                i += 1;
                t.expect(i, ",")?;
            }
        }
    }

    /// `roundup_power2_divisions(size)`: the number of divisions configured for
    /// the power-of-two interval that holds `size`.
    pub fn roundup_power2_divisions_for(&self, size: u64) -> u64 {
        let log_size = size.max(1).ilog2();
        let index = log_size.saturating_sub(ROUNDUP_POWER2_START_LOG2) as usize;
        self.roundup_power2_divisions[index.min(ROUNDUP_POWER2_INTERVALS - 1)]
    }

    /// `max_split_size()`, with "unlimited" as `u64::MAX`.
    pub fn max_split_size(&self) -> u64 {
        self.max_split_size_bytes.unwrap_or(u64::MAX)
    }
}

fn parse_u64(s: &str, key: &str) -> Result<u64, ConfError> {
    s.parse::<u64>()
        .map_err(|_| ConfError(format!("{key}: '{s}' is not a non-negative integer")))
}

/// PyTorch's `ConfigTokenizer`.
struct Tokenizer {
    tokens: Vec<String>,
}

impl Tokenizer {
    fn new(s: &str) -> Self {
        let mut tokens = Vec::new();
        let mut buf = String::new();
        for ch in s.chars() {
            if matches!(ch, ',' | ':' | '[' | ']') {
                if !buf.is_empty() {
                    tokens.push(std::mem::take(&mut buf));
                }
                tokens.push(ch.to_string());
            } else if !ch.is_whitespace() {
                buf.push(ch);
            }
        }
        if !buf.is_empty() {
            tokens.push(buf);
        }
        Tokenizer { tokens }
    }

    fn len(&self) -> usize {
        self.tokens.len()
    }

    fn get(&self, i: usize) -> Option<&str> {
        self.tokens.get(i).map(String::as_str)
    }

    fn expect(&self, i: usize, tok: &str) -> Result<(), ConfError> {
        match self.get(i) {
            Some(t) if t == tok => Ok(()),
            Some(t) => err(format!("expected '{tok}' but found '{t}'")),
            None => err(format!("expected '{tok}' but the string ended")),
        }
    }

    fn value(&self, i: usize, key: &str) -> Result<&str, ConfError> {
        self.get(i)
            .ok_or_else(|| ConfError(format!("expecting a value for {key}")))
    }

    /// `key : <integer>` starting at the key's index `i`.
    fn mb_value(&self, i: usize, key: &str) -> Result<u64, ConfError> {
        self.expect(i + 1, ":")?;
        parse_u64(self.value(i + 2, key)?, key)
    }

    /// `key : True|False` starting at the key's index `i`.
    fn bool_value(&self, i: usize, key: &str) -> Result<bool, ConfError> {
        self.expect(i + 1, ":")?;
        match self.value(i + 2, key)? {
            "True" => Ok(true),
            "False" => Ok(false),
            other => err(format!(
                "Expected a single True/False argument for {key}, got '{other}'"
            )),
        }
    }
}
