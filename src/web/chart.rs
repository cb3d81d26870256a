//! Geometry of the breakdown bar (the page's hero) and of the memory curve: pure, so it is
//! unit-tested; the page only draws it.

use crate::model::plan::ComponentBytes;
use crate::model::Component;

pub use crate::model::term::Group;

/// The group of a bar segment's key: a component's key, or [`ALLOCATOR_CACHE`] /
/// [`CUDA_CONTEXT`]. Every component names its group itself ([`Component::group`], an exhaustive
/// match), so a new component cannot fall into a group by default; `None` for a key that is no
/// segment.
pub fn group_of(key: &str) -> Option<Group> {
    match key {
        ALLOCATOR_CACHE => Some(Group::AllocatorCache),
        CUDA_CONTEXT => Some(Group::CudaContext),
        _ => Component::from_key(key).map(Component::group),
    }
}

/// Key of the allocator-cache segment (reserved − allocated).
pub const ALLOCATOR_CACHE: &str = "allocator-cache";
/// Key of the CUDA context segment (nvidia-smi − reserved).
pub const CUDA_CONTEXT: &str = "cuda-context";

/// A short in-place label of a bar segment ([`Component::short_label`]; "cache" and "CUDA
/// context" for the two segments above allocated); empty for a key that is no segment.
pub fn short_label(key: &str) -> &'static str {
    match key {
        ALLOCATOR_CACHE => Component::AllocatorCache.short_label(),
        CUDA_CONTEXT => Component::CudaContext.short_label(),
        _ => Component::from_key(key).map_or("", Component::short_label),
    }
}

/// One segment of the hero bar, as fractions of the bar's scale.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// Component key, or [`ALLOCATOR_CACHE`] / [`CUDA_CONTEXT`].
    pub key: &'static str,
    /// Label.
    pub label: &'static str,
    /// Group.
    pub group: Group,
    /// Bytes.
    pub bytes: u128,
    /// Left edge in [0, 1].
    pub start: f64,
    /// Width in [0, 1].
    pub size: f64,
}

/// The hero bar: the peak by group and component against the GPU's capacity, on a scale of
/// max(nvidia-smi, capacity); allocated, reserved and nvidia-smi are three nested levels of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Hero {
    /// Non-empty segments, grouped, left to right.
    pub pieces: Vec<Piece>,
    /// (group, start, size, bytes) of each non-empty group.
    pub groups: Vec<(Group, f64, f64, u128)>,
    /// Right ends of allocated, reserved and nvidia-smi.
    pub levels: [f64; 3],
    /// Position of the capacity marker.
    pub capacity_at: f64,
    /// Free memory (start, size) when the peak is under the capacity.
    pub headroom: Option<(f64, f64)>,
    /// Overflow (start, size) when nvidia-smi is over the capacity.
    pub overflow: Option<(f64, f64)>,
}

/// Lays out the hero bar of a plan on a GPU of `capacity_bytes`.
pub fn hero(plan: &crate::model::Plan, capacity_bytes: u128) -> Hero {
    hero_on(plan, capacity_bytes, 0)
}

/// [`hero`] on a scale of at least `scale` bytes (two bars compared on one axis).
pub fn hero_on(plan: &crate::model::Plan, capacity_bytes: u128, scale: u128) -> Hero {
    let alloc = plan.peak_allocated_bytes;
    let reserved = plan.peak_reserved_bytes.max(alloc);
    let smi = plan.nvidia_smi_bytes.max(reserved);
    let scale = smi.max(capacity_bytes).max(scale).max(1) as f64;
    let mut items: Vec<(&'static str, &'static str, u128)> = plan
        .breakdown
        .iter()
        .map(|c| (c.key, c.label, c.bytes))
        .collect();
    items.push((
        ALLOCATOR_CACHE,
        "Allocator cache (reserved − allocated)",
        reserved - alloc,
    ));
    items.push((
        CUDA_CONTEXT,
        "CUDA context and outside the allocator (nvidia-smi − reserved)",
        smi - reserved,
    ));
    let mut at = 0u128;
    let mut pieces = vec![];
    let mut groups: Vec<(Group, f64, f64, u128)> = vec![];
    // Group by group, keeping the model's stacking order within each.
    let ordered = Group::ALL
        .iter()
        .flat_map(|g| items.iter().filter(move |i| group_of(i.0) == Some(*g)));
    for &(key, label, bytes) in ordered.filter(|i| i.2 > 0) {
        let Some(group) = group_of(key) else { continue };
        let (start, size) = (at as f64 / scale, bytes as f64 / scale);
        match groups.last_mut() {
            Some(g) if g.0 == group => {
                g.2 += size;
                g.3 += bytes;
            }
            _ => groups.push((group, start, size, bytes)),
        }
        pieces.push(Piece {
            key,
            label,
            group,
            bytes,
            start,
            size,
        });
        at += bytes;
    }
    let f = |b: u128| b as f64 / scale;
    let cap = f(capacity_bytes);
    Hero {
        pieces,
        groups,
        levels: [f(alloc), f(reserved), f(smi)],
        capacity_at: cap,
        headroom: (smi < capacity_bytes).then(|| (f(smi), cap - f(smi))),
        overflow: (smi > capacity_bytes).then(|| (cap, f(smi) - cap)),
    }
}

/// Sums components by [`Group`] (keys are the group keys), for the curve.
pub fn by_group(components: &[ComponentBytes]) -> Vec<ComponentBytes> {
    Group::ALLOCATED
        .iter()
        .map(|g| ComponentBytes {
            key: g.key(),
            label: g.label(),
            bytes: components
                .iter()
                .filter(|c| group_of(c.key) == Some(*g))
                .map(|c| c.bytes)
                .sum(),
        })
        .collect()
}

/// An SVG polyline path (`M x,y L x,y …`) through the points.
fn svg_path(points: &mut dyn Iterator<Item = (f64, f64)>) -> String {
    let mut d = String::new();
    for (i, (x, y)) in points.enumerate() {
        d.push_str(&format!("{}{x:.1},{y:.1} ", if i == 0 { "M" } else { "L" }));
    }
    d
}

/// "Nice" axis ticks from 0 to at least `top` bytes, in GiB: (bytes, label).
pub fn gib_ticks(top: u128) -> Vec<(u128, String)> {
    let gib = 1u128 << 30;
    let top_gib = (top as f64 / gib as f64).max(1.0);
    let raw = top_gib / 4.0;
    // The smallest 1, 2, 2.5 or 5 × 10^k at or above a quarter of the range.
    let mut mag = 1.0;
    while mag * 10.0 <= raw {
        mag *= 10.0;
    }
    while mag > raw && mag > 1e-3 {
        mag /= 10.0;
    }
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (0..=4)
        .map(|i| i as f64 * step)
        .take_while(|v| *v <= top_gib + 1e-9)
        .map(|v| ((v * gib as f64) as u128, format!("{v}")))
        .collect()
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

/// The curve chart's geometry in a `width × height` box.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Curve {
    /// Stacked areas by [`Group`] (allocated bytes).
    pub areas: Vec<Area>,
    /// The nvidia-smi estimate as a line (SVG path data).
    pub smi: String,
    /// y of the capacity line.
    pub cap_y: f64,
    /// x of each point.
    pub xs: Vec<f64>,
    /// (y, label in GiB) of the y-axis ticks.
    pub y_ticks: Vec<(f64, String)>,
}

/// Stacked-area geometry by group: x on a log2 scale across the points, y linear from 0 to
/// max(largest nvidia-smi, capacity), cut at twice the capacity so the region around the limit
/// stays readable even when long sequences reach terabytes.
pub fn curve(
    points: &[crate::planning::evaluate::CurvePoint],
    capacity_bytes: u128,
    width: f64,
    height: f64,
) -> Curve {
    if points.is_empty() {
        return Curve {
            cap_y: height,
            ..Curve::default()
        };
    }
    let largest = points.iter().map(|p| p.smi_bytes).max().unwrap_or(0);
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
    // Clamped a little above the box, so a point far over the top stays a steep line.
    let y = |b: u128| (height - (b as f64 / top) * height).max(-4.0);
    let grouped: Vec<Vec<ComponentBytes>> =
        points.iter().map(|p| by_group(&p.components)).collect();
    let mut below = vec![0u128; points.len()];
    let mut areas = vec![];
    for (k, g) in Group::ALLOCATED.iter().enumerate() {
        let above: Vec<u128> = grouped
            .iter()
            .zip(&below)
            .map(|(c, b)| b + c[k].bytes)
            .collect();
        if above.iter().zip(&below).all(|(a, b)| a == b) {
            continue;
        }
        let mut d = svg_path(&mut xs.iter().zip(&above).map(|(x, a)| (*x, y(*a))));
        for (x, b) in xs.iter().zip(&below).rev() {
            d.push_str(&format!("L{x:.1},{:.1} ", y(*b)));
        }
        d.push('Z');
        areas.push(Area {
            key: g.key(),
            label: g.label(),
            d,
        });
        below = above;
    }
    let smi = svg_path(&mut xs.iter().zip(points).map(|(x, p)| (*x, y(p.smi_bytes))));
    let y_ticks = gib_ticks(top as u128)
        .into_iter()
        .map(|(b, l)| (y(b), l))
        .collect();
    Curve {
        areas,
        smi,
        cap_y: y(capacity_bytes),
        xs,
        y_ticks,
    }
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

/// The timeline of a measured run against its plan, in a `width × height` box: SVG paths of
/// measured allocated and reserved and of the planned allocated memory (x: share of the step's
/// allocations), the x of each planned phase start, and GiB ticks.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Measured requested bytes of live tensors.
    pub measured: String,
    /// Measured reserved bytes.
    pub reserved: String,
    /// The plan's live bytes (empty without a configuration).
    pub planned: String,
    /// (x, phase) of each phase start.
    pub marks: Vec<(f64, &'static str)>,
    /// The marks whose label has room (48 units from any other label; forward, backward and
    /// optimizer placed first).
    pub labels: Vec<(f64, &'static str)>,
    /// (y, label) of the GiB ticks.
    pub y_ticks: Vec<(f64, String)>,
}

/// Labels at least 48 units apart, the main phases placed before the short ones.
fn room_for_labels(marks: Vec<(f64, &'static str)>) -> Vec<(f64, &'static str)> {
    let main = |p: &str| matches!(p, "forward" | "backward" | "optimizer");
    let mut order = marks;
    crate::model::order::sort_by_key(&mut order, |m| !main(m.1));
    let mut placed: Vec<(f64, &'static str)> = vec![];
    for m in order {
        if placed.iter().all(|p| (p.0 - m.0).abs() >= 48.0) {
            placed.push(m);
        }
    }
    crate::model::order::sort_by(&mut placed, |a, b| a.0.total_cmp(&b.0));
    placed
}

/// Geometry of [`Timeline`].
pub fn timeline(
    measured: &[crate::planning::inspect::Sample],
    planned: &[crate::planning::inspect::Sample],
    marks: &[crate::planning::inspect::PhaseMark],
    width: f64,
    height: f64,
) -> Timeline {
    let top = measured
        .iter()
        .map(|p| p.allocated_bytes.max(p.reserved_bytes))
        .chain(planned.iter().map(|p| p.allocated_bytes))
        .max()
        .unwrap_or(0)
        .max(1 << 30);
    let ticks = gib_ticks(u128::from(top));
    let top = ticks.last().map(|t| t.0).unwrap_or(1).max(u128::from(top)) as f64;
    let y = |b: u64| height - b as f64 / top * height;
    let x = |at: f64| at.clamp(0.0, 1.0) * width;
    let marks: Vec<(f64, &'static str)> = marks.iter().map(|m| (x(m.at), m.phase)).collect();
    Timeline {
        measured: svg_path(&mut measured.iter().map(|p| (x(p.at), y(p.allocated_bytes)))),
        reserved: svg_path(&mut measured.iter().map(|p| (x(p.at), y(p.reserved_bytes)))),
        planned: svg_path(&mut planned.iter().map(|p| (x(p.at), y(p.allocated_bytes)))),
        labels: room_for_labels(marks.clone()),
        marks,
        y_ticks: ticks
            .into_iter()
            .map(|(b, l)| (height - b as f64 / top * height, l))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::plan::ComponentBytes;
    use crate::model::Component;

    fn comps(a: u128, b: u128) -> Vec<ComponentBytes> {
        vec![
            ComponentBytes {
                key: "act_mlp",
                label: "X",
                bytes: a,
            },
            ComponentBytes {
                key: "act_norms",
                label: "Z",
                bytes: 0,
            },
            ComponentBytes {
                key: "act_attention",
                label: "Y",
                bytes: b,
            },
        ]
    }

    fn plan_of(model: &str, s: crate::model::Settings) -> crate::model::Plan {
        let a = crate::formats::catalog::find_model(model)
            .unwrap()
            .arch
            .clone();
        crate::model::plan(&a, &s).unwrap()
    }

    #[test]
    fn hero_groups_pieces_and_nests_the_three_levels() {
        let p = plan_of("llama2-7b", crate::model::Settings::default());
        let cap = 80u128 << 30;
        let h = hero(&p, cap);
        // Contiguous, grouped in order, every piece non-empty.
        let mut at = 0.0;
        for w in h.pieces.windows(2) {
            assert!(
                w[0].group <= w[1].group,
                "{:?} before {:?}",
                w[0].key,
                w[1].key
            );
        }
        for piece in &h.pieces {
            assert!((piece.start - at).abs() < 1e-9 && piece.bytes > 0);
            at += piece.size;
        }
        assert!(
            (at - h.levels[2]).abs() < 1e-9,
            "the pieces end at nvidia-smi"
        );
        let cache = h.pieces.iter().find(|x| x.key == ALLOCATOR_CACHE).unwrap();
        assert_eq!(cache.bytes, p.peak_reserved_bytes - p.peak_allocated_bytes);
        let ctx = h.pieces.iter().find(|x| x.key == CUDA_CONTEXT).unwrap();
        assert_eq!(ctx.bytes, p.nvidia_smi_bytes - p.peak_reserved_bytes);
        assert!((cache.start - h.levels[0]).abs() < 1e-9);
        assert!((ctx.start - h.levels[1]).abs() < 1e-9);
        assert!(h.levels[0] < h.levels[1] && h.levels[1] < h.levels[2]);
        // Fits: the scale is the capacity, the rest is headroom.
        assert_eq!(h.capacity_at, 1.0);
        let (start, size) = h.headroom.unwrap();
        assert!((start + size - 1.0).abs() < 1e-9 && h.overflow.is_none());
        let total: u128 = h.groups.iter().map(|g| g.3).sum();
        assert_eq!(total, p.nvidia_smi_bytes);
        // Out of memory: the scale is nvidia-smi, the part over the capacity is overflow.
        let h = hero(&p, 8 << 30);
        assert!(h.capacity_at < 1.0 && h.headroom.is_none());
        let (start, size) = h.overflow.unwrap();
        assert!((start - h.capacity_at).abs() < 1e-9 && (start + size - 1.0).abs() < 1e-9);
        // A common scale for two bars: the same fractions of a larger whole.
        let wide = hero_on(&p, 8 << 30, 2 * p.nvidia_smi_bytes);
        assert!((wide.levels[2] - 0.5).abs() < 1e-9);
        assert!((wide.capacity_at - h.capacity_at / 2.0).abs() < 1e-9);
    }

    #[test]
    fn every_segment_key_finds_its_component_group_and_label() {
        // Each component names its group and short label in an exhaustive match (a new one
        // cannot compile without them); what can go wrong is the way back from a segment's key.
        for c in Component::ALL.iter().chain(&Component::ABOVE_ALLOCATED) {
            assert_eq!(Component::from_key(c.key()), Some(*c));
        }
        for c in Component::ALL {
            assert_eq!(group_of(c.key()), Some(c.group()), "{}", c.key());
            assert_eq!(short_label(c.key()), c.short_label());
        }
        assert_eq!(group_of("optimizer_states"), Some(Group::LoraOptimizer));
        assert_eq!(group_of(CUDA_CONTEXT), Some(Group::CudaContext));
        assert_eq!(group_of(ALLOCATOR_CACHE), Some(Group::AllocatorCache));
        assert_eq!(group_of("no-such-segment"), None);
        assert_eq!(short_label("no-such-segment"), "");
        let ticks = gib_ticks(80 << 30);
        assert_eq!(ticks.last().unwrap().1, "80");
        assert_eq!(ticks.len(), 5);
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
        let c = curve(&pts, 40, 100.0, 50.0);
        assert_eq!(c.areas.len(), 1, "both components are activations");
        assert_eq!(c.xs, vec![0.0, 50.0, 100.0]);
        assert!(
            (c.cap_y - 25.0).abs() < 1e-9,
            "capacity 40 of top 80 sits half way"
        );
        assert!(c.areas[0].d.starts_with("M0.0,"));
        assert!(c.smi.starts_with("M0.0,"));
        assert_eq!(x_of(&pts, 362, 100.0).map(|x| x.round()), Some(75.0));
    }

    #[test]
    fn the_timeline_keeps_its_peak_at_the_top_and_its_marks_in_the_box() {
        use crate::planning::inspect::{PhaseMark, Sample};
        let gib = 1u64 << 30;
        let m: Vec<Sample> = (0..10)
            .map(|i| Sample {
                at: i as f64 / 9.0,
                allocated_bytes: i * gib,
                reserved_bytes: (i + 1) * gib,
            })
            .collect();
        let p = [Sample {
            at: 0.5,
            allocated_bytes: 3 * gib,
            reserved_bytes: 0,
        }];
        let marks = [
            PhaseMark {
                at: 0.25,
                phase: "forward",
            },
            PhaseMark {
                at: 0.75,
                phase: "backward",
            },
        ];
        let t = timeline(&m, &p, &marks, 400.0, 100.0);
        assert!(t.measured.starts_with("M0.0,100.0"), "{}", t.measured);
        // The highest point (10 GiB reserved) is at the top of the box: ticks reach 10 GiB.
        assert!(t.reserved.ends_with("L400.0,0.0 "), "{}", t.reserved);
        assert_eq!(t.marks, vec![(100.0, "forward"), (300.0, "backward")]);
        assert_eq!(t.labels, t.marks);
        let close = [
            PhaseMark {
                at: 0.24,
                phase: "inputs",
            },
            PhaseMark {
                at: 0.25,
                phase: "forward",
            },
        ];
        assert_eq!(
            timeline(&m, &p, &close, 400.0, 100.0).labels,
            vec![(100.0, "forward")]
        );
        assert!(t.y_ticks.iter().all(|(y, _)| (0.0..=100.0).contains(y)));
    }
}
