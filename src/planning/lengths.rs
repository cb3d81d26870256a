//! Mid-training OOM: the peak follows the longest padded batch. Parses a length distribution
//! (a list of token counts, or JSONL / CSV samples whose text length is estimated from
//! characters) and reports the peak at the typical and the longest batch, and when a batch
//! longer than what fits is likely to appear.

use serde::Serialize;
use serde_json::Value;

use crate::model::{plan, Architecture, Settings};
use crate::planning::fit;

/// Largest input looked at (a pasted or uploaded file).
pub const MAX_INPUT_BYTES: usize = 64 << 20;
/// Default characters per token for English text with Llama/Qwen-style tokenizers.
pub const DEFAULT_CHARS_PER_TOKEN: f64 = 4.0;

/// Summary of a length distribution, in tokens.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LengthStats {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: u64,
    /// 95th percentile.
    pub p95: u64,
    /// Longest.
    pub max: u64,
}

/// Parses lengths: numbers (one per line or comma-separated), JSONL objects (a `text` field, or
/// `prompt`/`instruction`/`input`/`output`/`response`/`messages` text summed; or a numeric
/// `length`/`num_tokens`/`tokens` field), or CSV with a header naming such a column.
pub fn parse_lengths(text: &str, chars_per_token: f64) -> Result<Vec<u64>, String> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(format!(
            "input is {} MiB; the limit is {} MiB (sample the file first)",
            text.len() >> 20,
            MAX_INPUT_BYTES >> 20
        ));
    }
    if !(chars_per_token.is_finite() && (0.5..=100.0).contains(&chars_per_token)) {
        return Err(format!(
            "characters per token must be between 0.5 and 100, got {chars_per_token}"
        ));
    }
    let tok = |chars: usize| ((chars as f64 / chars_per_token).ceil() as u64).max(1);
    let trimmed = text.trim_start();
    let mut out = vec![];
    if trimmed.starts_with("p50") {
        return from_percentiles(trimmed);
    }
    if trimmed.starts_with('{') {
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line)
                .map_err(|e| format!("line {}: not a JSON object ({e})", i + 1))?;
            out.push(json_length(&v, &tok).ok_or_else(|| format!("line {}: no text or length field (expected text, prompt/response, messages, length or num_tokens)", i + 1))?);
        }
    } else if trimmed.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        for (i, item) in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .enumerate()
        {
            out.push(
                item.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0 && *n <= 1 << 24)
                    .ok_or_else(|| {
                        format!(
                            "item {}: {:?} is not a token count (1 … 16,777,216)",
                            i + 1,
                            item.chars().take(20).collect::<String>()
                        )
                    })?,
            );
        }
    } else {
        out = parse_csv(text, &tok)?;
    }
    if out.is_empty() {
        return Err("no samples found".into());
    }
    Ok(out)
}

/// `p50=300 p95=1200 max=4000`: a distribution interpolated from three percentiles (1000 samples:
/// half spread linearly up to p50 from p50/2, 45 % up to p95, 5 % up to max, the last at max).
fn from_percentiles(text: &str) -> Result<Vec<u64>, String> {
    let mut p = [None; 3];
    for item in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
    {
        let (k, v) = item.split_once('=').ok_or_else(|| {
            format!(
                "{:?}: expected key=value (p50=…, p95=…, max=…)",
                item.chars().take(20).collect::<String>()
            )
        })?;
        let v: u64 = v
            .parse()
            .ok()
            .filter(|n| *n > 0 && *n <= 1 << 24)
            .ok_or_else(|| {
                format!(
                    "{k}: {:?} is not a token count",
                    v.chars().take(20).collect::<String>()
                )
            })?;
        match k {
            "p50" => p[0] = Some(v),
            "p95" => p[1] = Some(v),
            "max" => p[2] = Some(v),
            _ => {
                return Err(format!(
                    "unknown key {:?} (p50, p95, max)",
                    k.chars().take(20).collect::<String>()
                ))
            }
        }
    }
    let (Some(p50), Some(p95), Some(max)) = (p[0], p[1], p[2]) else {
        return Err("give all three: p50=… p95=… max=…".into());
    };
    if !(p50 <= p95 && p95 <= max) {
        return Err("percentiles must grow: p50 ≤ p95 ≤ max".into());
    }
    let lerp = |a: u64, b: u64, i: u64, n: u64| a + (b - a) * i / n.max(1);
    let mut out: Vec<u64> = (0..500)
        .map(|i| lerp((p50 / 2).max(1), p50, i + 1, 500))
        .collect();
    out.extend((0..450).map(|i| lerp(p50, p95, i + 1, 450)));
    out.extend((0..49).map(|i| lerp(p95, max, i, 49)));
    out.push(max);
    Ok(out)
}

fn json_length(v: &Value, tok: &dyn Fn(usize) -> u64) -> Option<u64> {
    for k in ["num_tokens", "length", "tokens", "n_tokens"] {
        if let Some(n) = v.get(k).and_then(Value::as_u64) {
            return Some(n.clamp(1, 1 << 24));
        }
    }
    let mut chars = 0usize;
    let mut found = false;
    for k in [
        "text",
        "prompt",
        "instruction",
        "input",
        "output",
        "response",
        "completion",
    ] {
        if let Some(s) = v.get(k).and_then(Value::as_str) {
            chars += s.chars().count();
            found = true;
        }
    }
    if let Some(msgs) = v.get("messages").and_then(Value::as_array) {
        for m in msgs {
            if let Some(s) = m.get("content").and_then(Value::as_str) {
                chars += s.chars().count();
                found = true;
            }
        }
    }
    found.then(|| tok(chars))
}

fn parse_csv(text: &str, tok: &dyn Fn(usize) -> u64) -> Result<Vec<u64>, String> {
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .map(|h| h.trim().trim_matches('"').to_ascii_lowercase())
        .collect();
    let numeric = header
        .iter()
        .position(|h| ["num_tokens", "length", "tokens", "n_tokens"].contains(&h.as_str()));
    let textual = header
        .iter()
        .position(|h| ["text", "content", "prompt"].contains(&h.as_str()));
    let mut out = vec![];
    match (numeric, textual) {
        (Some(c), _) => {
            for (i, l) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let cell = l.split(',').nth(c).unwrap_or("").trim().trim_matches('"');
                out.push(cell.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!(
                        "row {}: {:?} is not a token count",
                        i + 2,
                        cell.chars().take(20).collect::<String>()
                    )
                })?);
            }
        }
        (None, Some(_)) => {
            // Text may contain commas and quotes: count the characters of the whole row.
            for l in lines.filter(|l| !l.trim().is_empty()) {
                out.push(tok(l.chars().count()));
            }
        }
        _ => {
            return Err(
                "not a list of numbers, JSONL, or CSV with a text / length / num_tokens column"
                    .into(),
            )
        }
    }
    Ok(out)
}

/// Percentile summary.
pub fn stats(lengths: &[u64]) -> LengthStats {
    let mut v = lengths.to_vec();
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    LengthStats {
        n: v.len(),
        p50: at(0.5),
        p95: at(0.95),
        max: *v.last().unwrap_or(&0),
    }
}

/// What the distribution means for this configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LengthReport {
    /// The distribution.
    pub stats: LengthStats,
    /// Peak allocated with a batch padded to the median length.
    pub typical_peak_bytes: u128,
    /// Peak allocated with a batch padded to the longest sample.
    pub longest_peak_bytes: u128,
    /// nvidia-smi estimate of the longest batch.
    pub longest_smi_bytes: u128,
    /// Longest padded length that fits (None: not even one token).
    pub max_fitting_seq: Option<u64>,
    /// Share of samples longer than that.
    pub share_too_long: f64,
    /// Expected optimizer step (micro-batch draws) at which a too-long sample first arrives, if any.
    pub expected_oom_step: Option<f64>,
    /// Micro-batches per epoch.
    pub steps_per_epoch: u64,
    /// Advice in words.
    pub advice: Vec<String>,
}

/// Plans the typical and the longest batch; `capacity` in bytes.
pub fn analyze(
    arch: &Architecture,
    s: &Settings,
    capacity: u128,
    lengths: &[u64],
) -> Result<LengthReport, String> {
    if lengths.is_empty() {
        return Err("no samples".into());
    }
    let st = stats(lengths);
    let at = |seq: u64| {
        plan(
            arch,
            &Settings {
                seq: seq.max(1),
                ..s.clone()
            },
        )
        .map_err(|e| e.to_string())
    };
    let typical = at(st.p50)?;
    let longest = at(st.max)?;
    let max_fit = fit::max_seq(arch, s, capacity, st.max.max(1));
    let limit = max_fit.unwrap_or(0);
    let too_long = lengths.iter().filter(|&&l| l > limit).count();
    let q = too_long as f64 / lengths.len() as f64;
    let b = s.batch.max(1) as f64;
    // Shuffled batches: P(batch holds ≥ 1 too-long sample) = 1 − (1 − q)^b; first hit is geometric.
    let p = 1.0 - (1.0 - q).powf(b);
    let expected = (p > 0.0).then(|| 1.0 / p);
    let mut advice = vec![];
    if too_long > 0 {
        advice.push(format!(
            "truncate: max_length={limit} cuts {too_long} of {} samples ({:.2} %)",
            lengths.len(),
            q * 100.0
        ));
        advice.push("group_by_length=True batches similar lengths together: fewer padded tokens, but the longest batch still has to fit".into());
        advice.push(format!("packing (e.g. TRL packing=True with max_length ≤ {limit}) makes every batch the same, predictable length"));
        advice.push("a smaller micro-batch for long samples (or batching by token count) keeps the tokens per step bounded".into());
    }
    advice.push("fragmentation: varying lengths leave reserved-but-unused blocks; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow in place and usually brings reserved close to allocated".into());
    Ok(LengthReport {
        stats: st,
        typical_peak_bytes: typical.peak_allocated_bytes,
        longest_peak_bytes: longest.peak_allocated_bytes,
        longest_smi_bytes: longest.nvidia_smi_bytes,
        max_fitting_seq: max_fit,
        share_too_long: q,
        expected_oom_step: expected,
        steps_per_epoch: (lengths.len() as u64).div_ceil(s.batch.max(1)),
        advice,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numbers_jsonl_and_csv() {
        assert_eq!(
            parse_lengths("100\n200, 300\n", 4.0).unwrap(),
            vec![100, 200, 300]
        );
        let jsonl = "{\"text\": \"abcdefgh\"}\n{\"prompt\": \"abcd\", \"response\": \"abcd\"}\n{\"num_tokens\": 77}\n{\"messages\": [{\"role\":\"user\",\"content\":\"abcdefghijkl\"}]}\n";
        assert_eq!(parse_lengths(jsonl, 4.0).unwrap(), vec![2, 2, 77, 3]);
        assert_eq!(
            parse_lengths("id,num_tokens\n1,10\n2,20\n", 4.0).unwrap(),
            vec![10, 20]
        );
        assert_eq!(
            parse_lengths("id,text\n1,abcdefgh\n", 2.0).unwrap(),
            vec![5]
        );
    }

    #[test]
    fn bad_input_gets_a_message() {
        for (t, want) in [
            ("12\nabc", "item 2"),
            ("{\"x\": 1}", "no text"),
            ("{bad", "line 1"),
            ("a,b\n1,2", "not a list"),
            ("", "not a list"),
        ] {
            let e = parse_lengths(t, 4.0).unwrap_err();
            assert!(e.contains(want), "{t:?}: {e}");
        }
        assert!(parse_lengths("1", 0.0).is_err());
    }

    #[test]
    fn longest_batch_drives_the_peak_and_the_oom_step() {
        let arch = crate::formats::catalog::find_model("llama2-7b")
            .unwrap()
            .arch
            .clone();
        let s = Settings {
            batch: 4,
            ..Settings::default()
        };
        let mut lengths: Vec<u64> = vec![300; 990];
        lengths.extend([8000; 10]);
        let r = analyze(&arch, &s, 40 << 30, &lengths).unwrap();
        assert!(r.longest_peak_bytes > r.typical_peak_bytes);
        let fit = r.max_fitting_seq.unwrap();
        assert!(fit > 300 && fit < 8000, "{fit}");
        assert!((r.share_too_long - 0.01).abs() < 1e-12);
        let expected = 1.0 / (1.0 - 0.99f64.powi(4));
        assert!((r.expected_oom_step.unwrap() - expected).abs() < 1e-9);
        assert_eq!(r.steps_per_epoch, 250);
    }
}
