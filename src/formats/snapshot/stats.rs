//! `torch.cuda.memory_stats()` saved as JSON.
//!
//! The flat form (`{"allocated_bytes.all.peak": 123, …}`) is read as is; the
//! nested form of `memory_stats_as_nested_dict()` is flattened with dots.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// Key prefixes of which at least one must occur.
const KNOWN_PREFIXES: &[&str] = &[
    "allocated_bytes.",
    "reserved_bytes.",
    "active_bytes.",
    "requested_bytes.",
    "inactive_split_bytes.",
    "allocation.",
    "segment.",
    "num_alloc_retries",
    "num_ooms",
];

/// Parsed `memory_stats()`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Every numeric statistic by its dotted key (floats truncated).
    pub values: BTreeMap<String, i64>,
}

impl Stats {
    /// The statistic `key`, if present and not negative.
    pub fn get(&self, key: &str) -> Option<u64> {
        u64::try_from(*self.values.get(key)?).ok()
    }

    /// `allocated_bytes.all.peak`, i.e. `max_memory_allocated()`.
    pub fn peak_allocated(&self) -> Option<u64> {
        self.get("allocated_bytes.all.peak")
    }

    /// `reserved_bytes.all.peak`, i.e. `max_memory_reserved()`.
    pub fn peak_reserved(&self) -> Option<u64> {
        self.get("reserved_bytes.all.peak")
    }

    /// `requested_bytes.all.peak`.
    pub fn peak_requested(&self) -> Option<u64> {
        self.get("requested_bytes.all.peak")
    }

    /// `num_alloc_retries` (cudaMalloc retries after freeing the cache).
    pub fn num_alloc_retries(&self) -> Option<u64> {
        self.get("num_alloc_retries")
    }

    /// `num_ooms`.
    pub fn num_ooms(&self) -> Option<u64> {
        self.get("num_ooms")
    }
}

/// Parses `bytes` as memory_stats JSON.
pub(crate) fn parse_stats(bytes: &[u8]) -> Result<Stats, String> {
    // serde_json limits nesting to 128 levels, so the recursion below is bounded.
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("invalid memory_stats JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("memory_stats JSON must be an object".into());
    };
    let mut stats = Stats::default();
    for (key, value) in &map {
        flatten(key, value, &mut stats.values);
    }
    let known = stats
        .values
        .keys()
        .any(|k| KNOWN_PREFIXES.iter().any(|p| k.starts_with(p)));
    if !known {
        return Err("JSON object does not look like torch.cuda.memory_stats() output".into());
    }
    Ok(stats)
}

fn flatten(key: &str, value: &Value, out: &mut BTreeMap<String, i64>) {
    match value {
        Value::Number(n) => {
            let v = n.as_i64().or_else(|| {
                let u = n.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX));
                u.or_else(|| n.as_f64().map(|f| f as i64))
            });
            if let Some(v) = v {
                out.insert(key.to_string(), v);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                flatten(&format!("{key}.{k}"), v, out);
            }
        }
        _ => {}
    }
}
