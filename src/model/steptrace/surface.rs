//! The step's live bytes as functions of the micro-batch and the sequence length, for searches
//! that plan one configuration at many batch sizes and lengths (the largest batch or sequence
//! that fits, the cheapest change that fits).
//!
//! Every size the step program allocates is a polynomial in the batch `b` (degree 1) and the
//! sequence `s` (degree 2): weights and optimizer states are constants, activations grow with
//! `b·s`, masks and eager attention scores with `b·s²` or `s²`, rotary tables with `s`. So is
//! the live-bytes sum after each allocation, as long as the step makes the same allocations —
//! which is checked. The live bytes after allocation `i` are interpolated on the tensor-product
//! nodes `b ∈ {2, 3}` × `s ∈ {S, 2S, 3S}`, exactly, in integers:
//! `v_i(b, s) = Σ_{j,k} y_{jk,i} · ℓ_j(b) · L_k(s)`, with `ℓ` and `L` the Lagrange bases. A
//! batch of one makes fewer allocations (its loss), so it has its own nodes `s ∈ {S, 2S, 3S}`.
//!
//! Families with sliding-window layers change allocations where the sequence reaches the
//! window (sdpa then needs the sliding mask materialised): their nodes start at the window and
//! shorter sequences are left to the plan itself. Llama 4's rotary layers build their chunked
//! mask from the attention chunk on (other allocations): the surface answers below it, and
//! longer sequences are left to the plan.
//!
//! One size is not a polynomial: memory-efficient attention pads its log-sum-exp rows to a
//! multiple of 32 (`b·heads·⌈s/32⌉·32·4 B`), so off the multiples of 32 the surface may be
//! short by less than `b·heads·128 B` per such tensor. Everything else is checked: a surface is
//! built only if it predicts, allocation by allocation, a fourth batch and length it was not
//! built from (`s = 5S/2`, and `b = 4` for the batches of two or more).

use super::periodic::live_values;
use super::{Device, What};
use crate::model::arch::Architecture;
use crate::model::settings::Settings;

/// The sequence node spacing `S` (a multiple of 32; sliding-window masks are `s × s` whatever
/// the window).
const S: u64 = 1024;
/// The largest live bytes a node may hold (64 PiB) for the interpolation's products to stay
/// within i128; a step beyond it has no surface.
const NODE_MAX: u64 = 1 << 56;

/// The batch nodes of batches of two or more (a batch of one makes fewer allocations in the
/// loss, so it has its own nodes).
const B: [u64; 2] = [2, 3];

/// The live bytes after each allocation of the step (and once it has run), as polynomials in
/// the sequence for a batch of one, and in the batch and the sequence for two or more.
#[derive(Clone, Debug)]
pub struct Surface {
    /// A batch of one at sequences `from + k·S`, `k = 1, 2, 3`: one value per allocation, the
    /// end value last.
    one: Option<Vec<Vec<u64>>>,
    /// Batches `B[j]` at the same sequences: `many[j * 3 + k]`.
    many: Option<Vec<Vec<u64>>>,
    /// Where the sequence nodes start: 0, or the sliding window (rounded up to a multiple of
    /// 32), where sdpa starts to need the sliding mask; shorter sequences are not answered.
    from: u64,
    /// The shortest sequence answered.
    min_seq: u64,
    /// The longest sequence answered: below Llama 4's attention chunk, from which the step
    /// builds the chunked mask and repeats k and v (allocations the nodes do not make).
    max_seq: u64,
}

fn run(a: &Architecture, s: &Settings, b: u64, seq: u64) -> Option<Vec<(What, u64)>> {
    let at = Settings {
        batch: b,
        seq,
        ..s.clone()
    };
    let (mut v, end) = live_values(a, &at, Device::Cuda).ok()?;
    v.push((What::Buffer, end));
    Some(v)
}

/// Whether two runs make the same allocations.
fn same_steps(x: &[(What, u64)], y: &[(What, u64)]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.0 == q.0)
}

/// A part's value after allocation `i` from its nodes' values.
type Predict<'a> = &'a dyn Fn(&[Vec<u64>], usize) -> Option<u64>;

/// The runs at `batches` × the three sequence nodes (batch by batch), their values if they make
/// the same allocations as each other and as the run at the held-out `check` point, and
/// `predicts(values, i)` gives that run's value after each allocation `i` exactly.
fn nodes(
    a: &Architecture,
    s: &Settings,
    from: u64,
    batches: &[u64],
    check: (u64, u64),
    predicts: Predict,
) -> Option<Vec<Vec<u64>>> {
    let mut runs: Vec<Vec<(What, u64)>> = Vec::with_capacity(3 * batches.len());
    for &b in batches {
        for k in 1..=3 {
            runs.push(run(a, s, b, from + k * S)?);
        }
    }
    let held = run(a, s, check.0, check.1)?;
    if runs.iter().flatten().any(|&(_, v)| v >= NODE_MAX)
        || !runs.iter().all(|r| same_steps(r, &held))
    {
        return None;
    }
    let y: Vec<Vec<u64>> = runs
        .iter()
        .map(|r| r.iter().map(|&(_, v)| v).collect())
        .collect();
    (0..held.len())
        .all(|i| predicts(&y, i) == Some(held[i].1))
        .then_some(y)
}

/// `Σ y_k · L_k(q)` over the three sequence nodes `S, 2S, 3S` (`q` counted from the first
/// node's origin), times `2S²`: the Lagrange weights in integers, with x = q / S,
/// `L₁ = (x−2)(x−3)/2, L₂ = −(x−1)(x−3), L₃ = (x−1)(x−2)/2`.
fn seq_weights(q: i128) -> [i128; 3] {
    let sn = S as i128;
    [
        (q - 2 * sn) * (q - 3 * sn),
        -2 * (q - sn) * (q - 3 * sn),
        (q - sn) * (q - 2 * sn),
    ]
}

/// `Σ ys[k] · ws[k] · wb`. Cannot overflow: node values are below 2^56 ([`NODE_MAX`]), the
/// sequence weights below 2^50 (|q| ≤ 2^24) and the batch weight below 2^17 (batch ≤ 2^16), so
/// six products stay below 2^126.
fn weighted(ys: impl Iterator<Item = (u64, i128)>, wb: i128) -> i128 {
    ys.map(|(y, w)| y as i128 * w * wb).sum()
}

/// A sum of weighted node values back in bytes (`None` past u64): divided by `2S²` = 2^21,
/// rounding down.
fn bytes(sum: i128) -> Option<u64> {
    const { assert!(2 * S * S == 1 << 21) };
    u64::try_from((sum >> 21).max(0)).ok()
}

fn value_one(y: &[Vec<u64>], i: usize, q: i128) -> Option<u64> {
    let ws = seq_weights(q);
    bytes(weighted((0..3).map(|k| (y[k][i], ws[k])), 1))
}

fn value_many(y: &[Vec<u64>], i: usize, b: i128, q: i128) -> Option<u64> {
    // Batch nodes 2 and 3: ℓ₂(b) = 3 − b, ℓ₃(b) = b − 2.
    let ws = seq_weights(q);
    let sum = [3 - b, b - 2]
        .into_iter()
        .enumerate()
        .map(|(j, wb)| weighted((0..3).map(|k| (y[j * 3 + k][i], ws[k])), wb))
        .sum();
    bytes(sum)
}

impl Surface {
    /// Builds the surface of `s`'s step (its batch and sequence are not read), or `None` where
    /// neither part holds: the step's allocations change with the batch or the sequence, or a
    /// node cannot be run.
    pub fn build(a: &Architecture, s: &Settings) -> Option<Surface> {
        let min_seq = a.sliding_window_tokens().unwrap_or(1);
        let from = if min_seq > 1 {
            min_seq.div_ceil(32) * 32
        } else {
            0
        };
        // Held out: lengths and batches the nodes do not contain.
        let hs = from + 5 * S / 2;
        let q = (hs - from) as i128;
        let one = nodes(a, s, from, &[1], (1, hs), &|y, i| value_one(y, i, q));
        let many = nodes(a, s, from, &B, (4, hs), &|y, i| value_many(y, i, 4, q));
        let max_seq = a
            .attention_chunk()
            .filter(|_| (0..a.num_hidden_layers).any(|li| a.rotates(li)))
            .map_or(u64::MAX, |c| c.saturating_sub(1));
        (one.is_some() || many.is_some()).then_some(Surface {
            one,
            many,
            from,
            min_seq,
            max_seq,
        })
    }

    /// The part that answers for a batch of `b` (a batch of one has its own).
    fn part(&self, b: u64) -> Option<&Vec<Vec<u64>>> {
        if b == 1 { &self.one } else { &self.many }.as_ref()
    }

    /// Whether it answers for a batch of `b` sequences of `seq` tokens (not below the sliding
    /// window, nor from Llama 4's attention chunk on).
    pub fn answers(&self, b: u64, seq: u64) -> bool {
        (self.min_seq..=self.max_seq).contains(&seq) && self.part(b).is_some()
    }

    /// The step's peak of live bytes and the bytes left once it has run, at batch `b` and
    /// sequence `seq` (where [`Surface::answers`]); `None` past u64 (a step too large to plan)
    /// or where it does not answer.
    pub fn peak_and_end(&self, b: u64, seq: u64) -> Option<(u64, u64)> {
        if !(self.min_seq..=self.max_seq).contains(&seq) {
            return None;
        }
        let q = seq as i128 - self.from as i128;
        let part = self.part(b)?;
        let value = |i: usize| match b {
            1 => value_one(part, i, q),
            _ => value_many(part, i, b as i128, q),
        };
        let n = part[0].len();
        let mut peak = 0u64;
        for i in 0..n - 1 {
            peak = peak.max(value(i)?);
        }
        Some((peak, value(n - 1)?))
    }
}
