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
    /// Samples longer than what fits.
    pub too_long: u64,
    /// Mean micro-batch (1-based) of the first OOM in a shuffled epoch, if any sample is too long:
    /// the epoch meets every sample, so the first OOM comes within the first epoch for certain.
    pub expected_oom_step: Option<f64>,
    /// (micro-batches, chance that the first OOM has come by then) at a few milestones.
    pub oom_chance_by_step: Vec<(u64, f64)>,
    /// Micro-batches per epoch.
    pub steps_per_epoch: u64,
    /// Advice in words.
    pub advice: Vec<String>,
}

/// When the first too-long sample arrives in a shuffled epoch of `n` samples, `k` of them too
/// long, drawn `b` at a time without replacement.
struct FirstTooLong {
    /// `survive[j]` = P(none of the first j samples is too long) = C(n−j, k) / C(n, k).
    survive: Vec<f64>,
    batch: u64,
}

impl FirstTooLong {
    fn new(n: u64, k: u64, batch: u64) -> Self {
        let mut survive = Vec::with_capacity(n as usize + 1);
        let mut p = 1.0f64;
        survive.push(p);
        for j in 0..n {
            // C(n−j−1, k) / C(n−j, k) = (n−j−k) / (n−j).
            p *= (n - j).saturating_sub(k) as f64 / (n - j) as f64;
            survive.push(p);
        }
        FirstTooLong { survive, batch }
    }

    fn none_in_first(&self, samples: u64) -> f64 {
        let i = (samples as usize).min(self.survive.len() - 1);
        self.survive[i]
    }

    /// Mean 1-based micro-batch of the first too-long sample: Σ_m P(first batch index > m).
    fn expected_batch(&self) -> f64 {
        let n = (self.survive.len() - 1) as u64;
        (0..n.div_ceil(self.batch))
            .map(|m| self.none_in_first(m * self.batch))
            .sum()
    }

    /// Chance that one of the first `batches` micro-batches holds a too-long sample.
    fn chance_by_batch(&self, batches: u64) -> f64 {
        1.0 - self.none_in_first(batches.saturating_mul(self.batch))
    }
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
    let max_fit = fit::max_seq(arch, s, capacity, st.max.max(1), fit::Fidelity::Quick);
    let limit = max_fit.unwrap_or(0);
    let too_long = lengths.iter().filter(|&&l| l > limit).count();
    let q = too_long as f64 / lengths.len() as f64;
    let first = FirstTooLong::new(lengths.len() as u64, too_long as u64, s.batch.max(1));
    let expected = (too_long > 0).then(|| first.expected_batch());
    let steps_per_epoch = (lengths.len() as u64).div_ceil(s.batch.max(1));
    let mut milestones: Vec<u64> = [10, 100, 1000, steps_per_epoch / 2]
        .into_iter()
        .filter(|&m| m >= 1 && m <= steps_per_epoch)
        .collect();
    milestones.sort_unstable();
    milestones.dedup();
    let chances = if too_long > 0 {
        milestones
            .into_iter()
            .map(|m| (m, first.chance_by_batch(m)))
            .collect()
    } else {
        vec![]
    };
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
    advice.push("fragmentation: varying lengths leave reserved-but-unused blocks; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow in place, which helps when sizes change from step to step (on fixed-length steps it reserved as much or more on an H200: see the single changes for this plan)".into());
    Ok(LengthReport {
        stats: st,
        typical_peak_bytes: typical.peak_allocated_bytes,
        longest_peak_bytes: longest.peak_allocated_bytes,
        longest_smi_bytes: longest.nvidia_smi_bytes,
        max_fitting_seq: max_fit,
        share_too_long: q,
        too_long: too_long as u64,
        expected_oom_step: expected,
        oom_chance_by_step: chances,
        steps_per_epoch,
        advice,
    })
}

/// The expectation in words: "1 of 2000 samples (0.05 %) is longer than fits: in a shuffled
/// epoch the first OOM comes at micro-batch 251 of 500 on average (20 % chance within the first
/// 100), and certainly within the first epoch".
pub fn oom_words(r: &LengthReport, expected_step: f64) -> String {
    let chances: Vec<String> = r
        .oom_chance_by_step
        .iter()
        .filter(|(m, _)| *m < r.steps_per_epoch)
        .map(|(m, p)| format!("{:.0} % within the first {m}", p * 100.0))
        .collect();
    let chances = if chances.is_empty() {
        String::new()
    } else {
        format!(" ({})", chances.join(", "))
    };
    format!(
        "{} of {} samples ({:.2} %) {} longer than fits: in a shuffled epoch the first OOM comes at micro-batch {:.0} of {} on average{chances}, and certainly within the first epoch",
        r.too_long,
        r.stats.n,
        r.share_too_long * 100.0,
        if r.too_long == 1 { "is" } else { "are" },
        expected_step,
        r.steps_per_epoch
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_long_sample_in_a_shuffled_epoch_arrives_half_way_on_average() {
        // 2,000 samples, one too long, micro-batch 4: 500 micro-batches per epoch; the long
        // sample's position is uniform, so its batch is uniform on 1..=500: mean 250.5.
        let f = FirstTooLong::new(2000, 1, 4);
        assert!((f.expected_batch() - 250.5).abs() < 1e-9);
        assert!((f.chance_by_batch(100) - 0.2).abs() < 1e-12);
        assert!((f.chance_by_batch(500) - 1.0).abs() < 1e-12);
        // Every sample too long: the very first batch.
        assert!((FirstTooLong::new(10, 10, 2).expected_batch() - 1.0).abs() < 1e-12);
        // Brute force over all positions of 2 long samples among 7, batch 3.
        let (n, b) = (7u64, 3u64);
        let mut sum = 0.0;
        let mut count = 0.0;
        for i in 0..n {
            for _j in i + 1..n {
                sum += (i / b + 1) as f64;
                count += 1.0;
            }
        }
        let f = FirstTooLong::new(n, 2, b);
        assert!((f.expected_batch() - sum / count).abs() < 1e-12);
    }

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
        // The first of 10 long samples among 1,000, batches of 4: E[ceil(min position / 4)]
        // from the distribution of the minimum, P(min = p) = C(1000 − p, 9) / C(1000, 10)
        // (computed independently in Python: 23.128139).
        assert!((r.expected_oom_step.unwrap() - 23.128139087581268).abs() < 1e-6);
        assert_eq!(r.steps_per_epoch, 250);
        assert_eq!(r.too_long, 10);
        let by_10 = r
            .oom_chance_by_step
            .iter()
            .find(|(m, _)| *m == 10)
            .unwrap()
            .1;
        assert!((by_10 - 0.3364208603080331).abs() < 1e-9, "{by_10}");
        let words = oom_words(&r, r.expected_oom_step.unwrap());
        assert!(
            words.contains("micro-batch 23 of 250 on average"),
            "{words}"
        );
    }
}
