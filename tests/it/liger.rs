//! Steps with Liger-Kernel's RMSNorm, SwiGLU and RoPE (`liger_kernel`), measured with the harness
//! beside the same steps without them (`tests/data/reference/liger/`): each planned to the byte
//! (the quick and the settled plan against the measured peak, reserved against PyTorch's
//! caching allocator replayed over the measured step), and the fix "Liger kernels" saving what
//! the two measured steps differ by.

use lorafit::planning::fixes::{suggest, FixId};
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/liger/cases.jsonl")
}

fn peak(v: &Value) -> u64 {
    v["result"]["peak_bytes"].as_u64().expect("peak")
}

#[test]
fn liger_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        assert!(q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        n += 1;
    }
    assert_eq!(n, 15);
}

/// Each measured pair (`ID` without, `ID_liger` with the three kernels): the fix the planner
/// offers for `ID` is the three kernels, and it saves exactly what the measurements differ by.
#[test]
fn the_liger_fix_saves_what_the_measured_steps_differ_by() {
    let all = cases();
    let mut pairs = 0;
    for with in all
        .iter()
        .filter(|v| v["id"].as_str().unwrap().ends_with("_liger"))
    {
        let id = with["id"].as_str().unwrap();
        let base_id = id.trim_end_matches("_liger");
        let without = all
            .iter()
            .find(|v| v["id"] == base_id)
            .unwrap_or_else(|| panic!("{base_id} measured"));
        let m = crate::plan_measured_line(without);
        let fixes = suggest(&m.arch, &m.settings, 1u128 << 50, true);
        let fix = fixes
            .iter()
            .find(|f| f.id == FixId::Liger)
            .unwrap_or_else(|| {
                panic!(
                    "{base_id}: no Liger fix among {:?}",
                    fixes.iter().map(|f| f.id).collect::<Vec<_>>()
                )
            });
        assert_eq!(fix.settings.liger, lorafit::model::Liger::ALL, "{base_id}");
        let measured = i128::from(peak(without)) - i128::from(peak(with));
        assert!(
            measured > 0,
            "{id}: Liger saves memory in the measured steps"
        );
        assert_eq!(fix.saved_bytes, measured, "{id}: the fix's saving");
        pairs += 1;
    }
    assert_eq!(pairs, 6);
}
