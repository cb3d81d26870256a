//! The forum's own questions as one-click examples: each is a link state (and, for the
//! mid-training OOM, a length distribution for the lengths panel). The Qwen2-7B guide's table
//! is planned row by row, so the page answers it the way the guide tabulates it.

use crate::planning::evaluate::Evaluation;
use crate::planning::fit::Fidelity;
use crate::web::link;
use crate::web::state::{evaluate_state_with, UiState};

/// One example: a title (English, translated by the table), the question in the forum's words,
/// and its configurations as links.
#[derive(Clone, Copy, Debug)]
pub struct Example {
    /// Stable id (`data-testid="example-{id}"`).
    pub id: &'static str,
    /// What it answers, in English.
    pub title: &'static str,
    /// The question as the forums ask it.
    pub asked: &'static str,
    /// (label, link query) per configuration; the first is what one click applies.
    pub rows: &'static [(&'static str, &'static str)],
    /// A length distribution for the lengths panel (token counts or p50=… p95=… max=…).
    pub lengths: Option<&'static str>,
}

/// The examples, in the order the page shows them.
pub const EXAMPLES: &[Example] = &[
    Example {
        id: "qwen2-32gb",
        title: "Qwen2-7B on a 32 GB card: which configuration fits?",
        asked: "LoRA 显存精算：32GB GPU 训练 Qwen2-7B 的配置指南",
        rows: &[
            ("FP16 + 8-bit AdamW + checkpointing, batch 4 × 1024", "model=qwen2-7b&gpu=v100-32&r=64&a=128&t=q,v,o&dt=fp16&opt=adamw_8bit&gc=1&b=4&s=1024"),
            ("FP16 + 8-bit AdamW + checkpointing, batch 8 × 1024", "model=qwen2-7b&gpu=v100-32&r=64&a=128&t=q,v,o&dt=fp16&opt=adamw_8bit&gc=1&b=8&s=1024"),
            ("FP16 + 8-bit AdamW + checkpointing, batch 4 × 2048", "model=qwen2-7b&gpu=v100-32&r=64&a=128&t=q,v,o&dt=fp16&opt=adamw_8bit&gc=1&b=4&s=2048"),
            ("BF16 + 8-bit AdamW + checkpointing, batch 4 × 1024", "model=qwen2-7b&gpu=v100-32&r=64&a=128&t=q,v,o&dt=bf16&opt=adamw_8bit&gc=1&b=4&s=1024"),
            ("QLoRA (nf4) + 8-bit AdamW + checkpointing, batch 4 × 1024", "model=qwen2-7b&gpu=v100-32&r=64&a=128&t=q,v,o&dt=nf4&opt=adamw_8bit&gc=1&b=4&s=1024"),
        ],
        lengths: None,
    },
    Example {
        id: "7b-oom",
        title: "7B LoRA out of memory: is it the batch size or the configuration?",
        asked: "LoRA 微调 7B 模型 OOM，是 batch size 太大还是配置问题？",
        rows: &[("Llama-2-7B, RTX 4090, batch 8 × 2048", "model=llama2-7b&gpu=rtx4090&b=8&s=2048")],
        lengths: None,
    },
    Example {
        id: "mid-training",
        title: "Enough memory at first, then out of memory mid-training",
        asked: "显存明明够却在训练中途 OOM",
        rows: &[("Qwen2-7B, RTX 4090, checkpointing, batch 4 × 1024; samples up to 7800 tokens", "model=qwen2-7b&gpu=rtx4090&gc=1&b=4&s=1024&r=16")],
        lengths: Some("p50=420 p95=1900 max=7800"),
    },
];

/// The state of a configuration of an example.
pub fn state_of(query: &str) -> UiState {
    link::decode(query).0
}

/// The Qwen guide's rows planned: (label, state, evaluation or the reason it has none).
pub fn table(example: &Example) -> Vec<(&'static str, UiState, Result<Evaluation, String>)> {
    example
        .rows
        .iter()
        .map(|(label, q)| {
            let st = state_of(q);
            let e = evaluate_state_with(&st, Fidelity::Quick);
            (*label, st, e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::Status;

    #[test]
    fn every_example_link_is_valid_and_plans() {
        for ex in EXAMPLES {
            for (label, q) in ex.rows {
                let (st, notices) = link::decode(q);
                assert!(notices.is_empty(), "{label}: {notices:?}");
                evaluate_state_with(&st, Fidelity::Quick).unwrap();
            }
            if let Some(l) = ex.lengths {
                assert!(crate::planning::lengths::parse_lengths(l, 4.0).is_ok());
            }
        }
    }

    #[test]
    fn the_guide_table_orders_as_physics_says() {
        let rows = table(&EXAMPLES[0]);
        let peak = |i: usize| rows[i].2.as_ref().unwrap().plan.peak_allocated_bytes;
        // Twice the tokens cost more; bf16 and fp16 weights cost the same; QLoRA costs least.
        assert!(peak(1) > peak(0) && peak(2) > peak(0));
        assert_eq!(peak(3), peak(0));
        assert!(peak(4) < peak(0));
        // The 7B question is out of memory as asked, so the page's "what fits" answers it.
        let oom = evaluate_state_with(&state_of(EXAMPLES[1].rows[0].1), Fidelity::Quick).unwrap();
        assert_eq!(oom.verdict.status, Status::Oom);
    }
}
