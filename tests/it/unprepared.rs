//! QLoRA steps whose 4-bit model is not passed through peft's `prepare_model_for_kbit_training`
//! (what LLaMA-Factory, axolotl, ms-swift and TRL from 0.22 run, and the planner's default),
//! measured at full size with the harness (`tests/data/reference/unprepared/`): the quick and
//! the settled plan against each measured peak, and the settled plan's reserved against
//! PyTorch's caching allocator replayed over the measured step.

#[test]
fn unprepared_qlora_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in crate::jsonl("tests/data/reference/unprepared/cases.jsonl") {
        let id = v["id"].as_str().expect("id");
        assert_eq!(v["settings"]["prepare_kbit"], false, "{id}");
        let m = crate::plan_measured_line(&v);
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        let settled = m.settled;
        assert!(q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        assert_eq!(
            settled.peak_phase.name(),
            v["result"]["peak_phase"].as_str().expect("phase"),
            "{id}"
        );
        n += 1;
    }
    assert_eq!(n, 10);
}
