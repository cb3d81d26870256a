//! Geometry of the stacked breakdown bar: pure, so it is unit-tested; the page only draws it.

use crate::model::plan::ComponentBytes;

/// One drawn segment of the stacked bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Component key (`frozen_weights`, ...).
    pub key: &'static str,
    /// Label.
    pub label: &'static str,
    /// Bytes.
    pub bytes: u128,
    /// Offset from the bottom, in [0, 1] of the scale.
    pub start: f64,
    /// Height, in [0, 1] of the scale.
    pub size: f64,
}

/// Stacks the non-zero components bottom-up on a scale of `max(total, capacity)` bytes so the
/// capacity line and the bar share one axis. Returns the segments and the capacity line position.
pub fn stack(components: &[ComponentBytes], capacity_bytes: u128) -> (Vec<Segment>, f64) {
    let total: u128 = components.iter().map(|c| c.bytes).sum();
    let scale = total.max(capacity_bytes).max(1) as f64;
    let mut at = 0u128;
    let mut out = vec![];
    for c in components.iter().filter(|c| c.bytes > 0) {
        out.push(Segment {
            key: c.key,
            label: c.label,
            bytes: c.bytes,
            start: at as f64 / scale,
            size: c.bytes as f64 / scale,
        });
        at += c.bytes;
    }
    (out, capacity_bytes as f64 / scale)
}
