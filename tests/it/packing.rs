//! Padding-free packing (transformers' `DataCollatorWithFlattening`, TRL's padding-free
//! collator), measured with the harness (`tests/data/reference/packing/`): the quick and the
//! settled plan against each measured peak, reserved against PyTorch's caching allocator
//! replayed over the measured step, what packing costs under sdpa against the difference of two
//! measured steps, the mask's breakdown term, and what is refused.

use lorafit::model::{plan, AttnImpl, PlanError, Stage};
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/packing/cases.jsonl")
}

fn case(id: &str) -> Value {
    crate::case_of(cases(), id)
}

/// A measured step's peak allocated bytes.
fn peak(v: &Value) -> i128 {
    i128::from(v["result"]["peak_bytes"].as_u64().expect("peak"))
}

/// What two measured steps' peaks differ by, asserted to be what their settled plans differ by.
fn planned_difference(with: &Value, without: &Value) -> i128 {
    let planned = |v: &Value| crate::plan_measured_line(v).settled.peak_allocated_bytes as i128;
    let measured = peak(with) - peak(without);
    assert_eq!(planned(with) - planned(without), measured);
    measured
}

#[test]
fn packed_steps_are_planned_to_the_byte() {
    assert_eq!(crate::assert_planned_to_the_byte(&cases()), 9);
}

/// Under sdpa packing costs memory: the same four samples of 1024 tokens take more packed into
/// one row than as four rows, by what the two measured steps differ, and the plans of the two
/// differ by that much.
#[test]
fn packing_under_sdpa_costs_what_the_measured_steps_differ_by() {
    let measured = planned_difference(
        &case("llama3-8b_packed_b4_s1024"),
        &case("llama3-8b_unpacked_b4_s1024"),
    );
    assert!(measured > 1 << 30, "{measured}");
}

/// LLaMA-Factory's neat_packing costs the rows' 4-D mask (one for every layer) and, with
/// grouped-query attention, k and v repeated for every head: what the measured steps with and
/// without it differ by, and the plans differ by as much.
#[test]
fn neat_packing_costs_what_the_measured_steps_differ_by() {
    let (neat, rows) = (
        case("llama3-8b_neat_b4_s1024"),
        case("llama3-8b_unpacked_b4_s1024"),
    );
    let measured = planned_difference(&neat, &rows);
    // Far less than padding-free packing's bias in every layer.
    assert!(measured < peak(&case("llama3-8b_packed_b4_s1024")) - peak(&rows));
    let m = crate::plan_measured_line(&neat);
    assert!(m.settled.notes.iter().any(
        |n| n.contains("4 rows of 1024 tokens") && n.contains("in bf16 (8 MiB for the batch)")
    ));
    assert!(m
        .settled
        .notes
        .iter()
        .any(|n| n.contains("repeated for each of the 32 query heads")
            && n.contains("64 MiB per layer")));
}

/// The bias every layer keeps is its own breakdown term, a square over the packed row, and the
/// note gives the row and the mask's sizes.
#[test]
fn the_packed_mask_is_explained() {
    let m = crate::plan_measured_line(&case("llama3-8b_packed_b4_s1024"));
    let term = m
        .settled
        .terms
        .iter()
        .find(|t| t.label == "attention mask / bias")
        .expect("a mask term");
    // 32 layers × 4096² × 2 B, the bf16 bias each layer's sdpa keeps for backward.
    assert_eq!(term.bytes, 32 * 4096 * 4096 * 2);
    assert!(
        term.formula().contains("packed row × packed row"),
        "{}",
        term.formula()
    );
    assert!(m
        .settled
        .notes
        .iter()
        .any(|n| n.contains("one row of 4096 tokens")
            && n.contains("4096² booleans, 16 MiB")
            && n.contains("32 MiB bias kept for backward")));
}

/// Packing changes nothing for a batch of one row (it is already flat), and the step of a
/// packed batch is the step of one row of all its tokens.
#[test]
fn a_packed_batch_plans_as_one_row_of_all_its_tokens() {
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("llama3-8b"))
        .expect("model")
        .value;
    let mut s = lorafit::model::Settings {
        batch: 4,
        seq: 512,
        packing: true,
        ..Default::default()
    };
    let packed = plan(&arch, &s).expect("plans");
    s.batch = 1;
    s.seq = 2048;
    let row = plan(&arch, &s).expect("plans");
    assert_eq!(packed.peak_allocated_bytes, row.peak_allocated_bytes);
    // flash-attention-2 takes no mask: the packed row plans as an unpacked row of the same
    // tokens but for the collator's position ids, an input alive through the step (2048 int64).
    s.attn_impl = AttnImpl::FlashAttention2;
    let fa2 = plan(&arch, &s).expect("plans");
    s.packing = false;
    let unpacked = plan(&arch, &s).expect("plans");
    assert_eq!(
        fa2.peak_allocated_bytes - unpacked.peak_allocated_bytes,
        2048 * 8
    );
}

/// What padding-free packing is not planned with is refused, naming the setting.
#[test]
fn packing_is_refused_where_it_is_not_planned() {
    let resolve = |name: &str| {
        lorafit::formats::catalog::resolve_model(&serde_json::json!(name))
            .expect("model")
            .value
    };
    let base = lorafit::model::Settings {
        packing: true,
        ..Default::default()
    };
    let refused =
        |arch: &lorafit::model::Architecture, s: &lorafit::model::Settings| match plan(arch, s) {
            Err(PlanError::InvalidSetting { field, why }) => {
                assert_eq!(field, "packing", "{why}");
                why
            }
            other => panic!(
                "expected a refusal, got {:?}",
                other.map(|p| p.peak_allocated_bytes)
            ),
        };
    let llama = resolve("llama3-8b");
    let why = refused(
        &llama,
        &lorafit::model::Settings {
            padded_mask: true,
            ..base.clone()
        },
    );
    assert!(why.contains("no padding"));
    let why = refused(
        &llama,
        &lorafit::model::Settings {
            stage: Stage::Dpo,
            ..base.clone()
        },
    );
    assert!(why.contains("SFT"));
    assert!(refused(&resolve("gemma2-2b"), &base).contains("sliding-window"));
}

/// Packing's notes (sdpa with and without checkpointing, flash-attention-2) and refusals are in
/// the Chinese table: the catalog-wide sweep changes one setting at a time and meets only some.
#[test]
fn packing_texts_have_chinese() {
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("llama3-8b"))
        .expect("model")
        .value;
    let packed = lorafit::model::Settings {
        batch: 2,
        packing: true,
        ..Default::default()
    };
    let mut texts = vec![];
    for s in [
        packed.clone(),
        lorafit::model::Settings {
            grad_ckpt: true,
            ..packed.clone()
        },
        lorafit::model::Settings {
            attn_impl: AttnImpl::FlashAttention2,
            ..packed.clone()
        },
    ] {
        let p = plan(&arch, &s).expect("plans");
        let note = p
            .notes
            .iter()
            .find(|n| n.starts_with("padding-free packing"))
            .expect("a packing note");
        texts.push(note.clone());
    }
    for s in [
        lorafit::model::Settings {
            padded_mask: true,
            ..packed.clone()
        },
        lorafit::model::Settings {
            stage: Stage::Dpo,
            ..packed.clone()
        },
    ] {
        match plan(&arch, &s) {
            Err(PlanError::InvalidSetting { why, .. }) => texts.push(why),
            other => panic!("refused: {:?}", other.map(|p| p.peak_allocated_bytes)),
        }
    }
    let neat = lorafit::model::Settings {
        neat_packing: true,
        ..Default::default()
    };
    texts.extend(
        plan(&arch, &neat)
            .expect("plans")
            .notes
            .into_iter()
            .filter(|n| n.contains("neat_packing") || n.contains("repeated for each")),
    );
    for s in [
        lorafit::model::Settings {
            packing: true,
            ..neat.clone()
        },
        lorafit::model::Settings {
            logits: Some(lorafit::model::Logits::Fused),
            ..neat.clone()
        },
        lorafit::model::Settings {
            attn_impl: AttnImpl::FlashAttention2,
            batch: 2,
            ..neat.clone()
        },
    ] {
        match plan(&arch, &s) {
            Err(PlanError::InvalidSetting { field, why }) => {
                assert_eq!(field, "neat_packing", "{why}");
                texts.push(why)
            }
            other => panic!("refused: {:?}", other.map(|p| p.peak_allocated_bytes)),
        }
    }
    assert_eq!(texts.len(), 10);
    let gemma = lorafit::formats::catalog::resolve_model(&serde_json::json!("gemma2-2b"))
        .expect("model")
        .value;
    match plan(&gemma, &packed) {
        Err(PlanError::InvalidSetting { why, .. }) => texts.push(why),
        other => panic!("refused: {:?}", other.map(|p| p.peak_allocated_bytes)),
    }
    for t in texts {
        assert!(lorafit::web::i18n::has(&t), "no Chinese for: {t}");
    }
}
