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

/// The stacked bar with the three totals drawn as bands above the live-tensor stack.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Component segments (live tensors at the peak).
    pub segments: Vec<Segment>,
    /// (key, label, start, size) of the reserved and nvidia-smi bands.
    pub bands: Vec<(&'static str, &'static str, f64, f64)>,
    /// Position of the GPU capacity line.
    pub capacity_at: f64,
}

/// Bar geometry for a plan on a GPU, on a scale of max(nvidia-smi, capacity).
pub fn bar(plan: &crate::model::Plan, capacity_bytes: u128) -> Bar {
    let scale = plan.nvidia_smi_bytes.max(capacity_bytes).max(1);
    let (segments, _) = stack(&plan.breakdown, scale);
    let s = scale as f64;
    let a = plan.peak_allocated_bytes as f64 / s;
    let r = plan.peak_reserved_bytes as f64 / s;
    let n = plan.nvidia_smi_bytes as f64 / s;
    Bar {
        segments,
        bands: vec![
            ("reserved", "allocator reserve (estimate)", a, r - a),
            ("smi", "CUDA context (nvidia-smi)", r, n - r),
        ],
        capacity_at: capacity_bytes as f64 / s,
    }
}

/// One filled area of the stacked curve chart, as an SVG path in a `width × height` box.
#[derive(Clone, Debug, PartialEq)]
pub struct Area {
    /// Component key.
    pub key: &'static str,
    /// Label.
    pub label: &'static str,
    /// SVG path data.
    pub d: String,
}

/// Stacked-area geometry: x on a log2 scale across the points, y linear from 0 to
/// max(largest total, capacity). Returns areas, the y of the capacity line and the x of each point.
pub fn areas(
    points: &[crate::planning::evaluate::CurvePoint],
    capacity_bytes: u128,
    width: f64,
    height: f64,
) -> (Vec<Area>, f64, Vec<f64>) {
    if points.is_empty() {
        return (vec![], height, vec![]);
    }
    // The y range ends at twice the GPU (or at the largest point if smaller): the capacity line
    // and the region around it stay readable even when long sequences reach terabytes.
    let largest = points.iter().map(|p| p.allocated_bytes).max().unwrap_or(0);
    let top = largest
        .min(capacity_bytes.saturating_mul(2))
        .max(capacity_bytes)
        .max(1) as f64;
    let (lo, hi) = (
        (points[0].x.max(1) as f64).log2(),
        (points[points.len() - 1].x.max(1) as f64).log2(),
    );
    let span = (hi - lo).max(1e-9);
    let xs: Vec<f64> = points
        .iter()
        .map(|p| ((p.x.max(1) as f64).log2() - lo) / span * width)
        .collect();
    let y = |b: u128| height - (b as f64 / top) * height;
    let keys: Vec<(&'static str, &'static str)> = points[0]
        .components
        .iter()
        .map(|c| (c.key, c.label))
        .collect();
    let mut below = vec![0u128; points.len()];
    let mut out = vec![];
    for (k, (key, label)) in keys.into_iter().enumerate() {
        let above: Vec<u128> = points
            .iter()
            .zip(&below)
            .map(|(p, b)| b + p.components.get(k).map(|c| c.bytes).unwrap_or(0))
            .collect();
        if above.iter().zip(&below).all(|(a, b)| a == b) {
            continue;
        }
        let mut d = String::new();
        for (i, x) in xs.iter().enumerate() {
            d.push_str(&format!(
                "{}{:.1},{:.1} ",
                if i == 0 { "M" } else { "L" },
                x,
                y(above[i])
            ));
        }
        for (i, x) in xs.iter().enumerate().rev() {
            d.push_str(&format!("L{:.1},{:.1} ", x, y(below[i])));
        }
        d.push('Z');
        out.push(Area { key, label, d });
        below = above;
    }
    (out, y(capacity_bytes), xs)
}

/// x position (same scale as [`areas`]) of a value between the first and last point.
pub fn x_of(
    points: &[crate::planning::evaluate::CurvePoint],
    value: u64,
    width: f64,
) -> Option<f64> {
    let (first, last) = (
        points.first()?.x.max(1) as f64,
        points.last()?.x.max(1) as f64,
    );
    let (lo, hi) = (first.log2(), last.log2());
    let v = (value.max(1) as f64).log2().clamp(lo, hi);
    Some((v - lo) / (hi - lo).max(1e-9) * width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::plan::ComponentBytes;

    fn comps(a: u128, b: u128) -> Vec<ComponentBytes> {
        vec![
            ComponentBytes {
                key: "x",
                label: "X",
                bytes: a,
            },
            ComponentBytes {
                key: "zero",
                label: "Z",
                bytes: 0,
            },
            ComponentBytes {
                key: "y",
                label: "Y",
                bytes: b,
            },
        ]
    }

    #[test]
    fn stack_is_contiguous_and_scaled_to_the_larger_of_total_and_capacity() {
        let (segs, cap) = stack(&comps(30, 10), 80);
        assert_eq!(segs.len(), 2, "zero components are not drawn");
        assert_eq!(segs[0].start, 0.0);
        assert!((segs[1].start - segs[0].size).abs() < 1e-12);
        assert!((segs[1].start + segs[1].size - 0.5).abs() < 1e-12);
        assert_eq!(cap, 1.0);
        let (segs, cap) = stack(&comps(30, 10), 20);
        assert!((segs[1].start + segs[1].size - 1.0).abs() < 1e-12);
        assert!((cap - 0.5).abs() < 1e-12);
    }

    #[test]
    fn curve_areas_stack_and_use_log_x() {
        let pts: Vec<crate::planning::evaluate::CurvePoint> =
            [(128u64, 10u128), (256, 20), (512, 40)]
                .iter()
                .map(|&(x, a)| crate::planning::evaluate::CurvePoint {
                    x,
                    components: comps(a, a),
                    allocated_bytes: 2 * a,
                    smi_bytes: 2 * a,
                })
                .collect();
        let (areas, cap_y, xs) = areas(&pts, 40, 100.0, 50.0);
        assert_eq!(areas.len(), 2);
        assert_eq!(xs, vec![0.0, 50.0, 100.0]);
        assert!(
            (cap_y - 25.0).abs() < 1e-9,
            "capacity 40 of top 80 sits half way"
        );
        assert!(areas[1].d.starts_with("M0.0,"));
        assert_eq!(x_of(&pts, 362, 100.0).map(|x| x.round()), Some(75.0));
    }
}
