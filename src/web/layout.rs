//! Which settings the page shows where, by their names in the settings table
//! ([`crate::formats::fields`]), and the page's own rules between them. Pure, so a native test
//! checks that every name exists.

use crate::model::{Settings, Strategy};

/// The first screen, after the model and GPU pickers: the settings changed most often.
pub const ESSENTIAL: &[&str] = &[
    "base_weights",
    "finetuning_type",
    "stage",
    "batch",
    "seq",
    "lora_r",
    "grad_ckpt",
];

/// The embed's sliders (inside the frame at every supported size).
pub const EMBED: &[&str] = &["batch", "seq", "lora_r"];

/// "More training settings", below the first screen.
pub const TRAINING: &[&str] = &[
    "grad_accum",
    "optimizer",
    "autocast",
    "attn_impl",
    "liger_kernel",
    "lora_dropout",
    "use_dora",
    "prepare_kbit",
    "freeze_trainable_layers",
    "pref_loss",
    "completion_only_loss",
    "max_prompt_length",
    "precompute_ref_log_probs",
    "generation",
    "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode",
    "vllm_importance_sampling_correction",
    "num_generations",
    "max_completion_length",
    "num_iterations",
    "steps_per_generation",
    "generation_batch_size",
    "beta",
    "grpo_loss",
    "disable_dropout",
    "logits",
    "padded_mask",
    "packing",
    "neat_packing",
];

/// The "Several GPUs" section.
pub const GPUS: &[&str] = &[
    "gpus_per_node",
    "nodes",
    "strategy",
    "fsdp_version",
    "ddp_find_unused_parameters",
    "ddp_bucket_cap_mb",
    "ddp_broadcast_buffers",
    "offload",
];

/// "The whole job": the phases around the training step.
pub const JOB: &[&str] = &[
    "eval_strategy",
    "eval_batch",
    "eval_samples",
    "prediction_loss_only",
    "eval_accumulation_steps",
    "eval_do_concat_batches",
    "predict_with_generate",
    "max_new_tokens",
    "save_strategy",
    "save_only_model",
    "resume_from_checkpoint",
    "fsdp_state_dict_type",
    "merge",
    "export_device",
    "export_size",
];

/// A job phase's title on the page (`train`, `eval`, `save`, `merge`, as the JSON names them).
pub fn phase_title(name: &str) -> &'static str {
    match name {
        "train" => "Training step",
        "eval" => "Evaluation",
        "save" => "Checkpoint save",
        "merge" => "Merge of the adapters",
        "generate" => "Generation (vLLM)",
        _ => "",
    }
}

/// The hero's words for the phase that decides the verdict.
pub fn decided_by(name: &str) -> &'static str {
    match name {
        "eval" => "decided by the evaluation",
        "save" => "decided by the checkpoint save",
        "merge" => "decided by the merge of the adapters",
        "generate" => "decided by vLLM's generation",
        _ => "decided by the training step",
    }
}

/// A vision-language model's images, in the first screen once such a model is picked.
pub const IMAGES: &[&str] = &["images_per_sample", "image_width", "image_height"];

/// The images' resize limits and the tower's training, in the sections (vision-language
/// models).
pub const IMAGES_MORE: &[&str] = &[
    "image_max_pixels",
    "image_min_pixels",
    "freeze_vision_tower",
    "freeze_multi_modal_projector",
];

/// The "Mixture of experts" group, shown for MoE models.
pub const MOE: &[&str] = &[
    "target_parameters",
    "output_router_logits",
    "experts_implementation",
    "experts_layout",
];

/// Whether a setting's control means something for these settings (irrelevant ones are hidden):
/// a strategy and offloading only with more than one GPU, the adapter's settings only for LoRA.
pub fn relevant(name: &str, s: &Settings) -> bool {
    match name {
        "strategy" | "offload" => s.parallel.world() > 1,
        // Only a quantized base is prepared.
        "prepare_kbit" => s.quant.is_some(),
        // Full fine-tuning has no adapters.
        "lora_r" | "lora_dropout" | "use_dora" => !s.base_trained(),
        "freeze_trainable_layers" => s.finetuning_type == crate::model::FinetuningType::Freeze,
        // A preference method's own settings; the reference's only where there is one.
        "pref_loss" => s.stage == crate::model::Stage::Dpo,
        "max_prompt_length" => s.preference() || s.sft_fused_head() && s.completion_only_loss,
        "completion_only_loss" => s.sft_fused_head(),
        // Padding-free packing is planned for SFT steps; its row has no padding.
        "packing" | "neat_packing" => s.stage == crate::model::Stage::Sft,
        "padded_mask" => !s.packing && !s.neat_packing,
        "disable_dropout" => s.preference() || s.grpo(),
        "precompute_ref_log_probs" => s.uses_reference() && !s.grpo(),
        // GRPO's own settings (β changes memory only there: its reference pass).
        "generation"
        | "num_generations"
        | "max_completion_length"
        | "num_iterations"
        | "steps_per_generation"
        | "generation_batch_size"
        | "beta"
        | "grpo_loss" => s.grpo(),
        // vLLM's own settings where it generates.
        "vllm_gpu_memory_utilization" | "vllm_enable_sleep_mode" => {
            s.grpo() && s.generation == crate::model::Generation::VllmColocate
        }
        "vllm_importance_sampling_correction" => {
            s.grpo() && s.generation != crate::model::Generation::Hf
        }
        // GRPO runs through TRL's fused head only.
        "logits" => !s.grpo(),
        // transformers 4's per-expert layout had only the loop over the experts, and no fused
        // expert parameters for target_parameters.
        "experts_implementation" | "target_parameters" => {
            s.experts_layout == crate::model::ExpertsLayout::Fused
        }
        // The evaluation's own settings once the job evaluates; what it keeps only with the
        // logits kept; where the merge runs only with a merge.
        "eval_samples" | "prediction_loss_only" => s.job.evaluates(),
        "eval_accumulation_steps" | "eval_do_concat_batches" | "predict_with_generate" => {
            s.job.evaluates() && !s.job.prediction_loss_only
        }
        "max_new_tokens" => s.job.evaluates() && s.job.generates_in_eval(),
        "save_only_model" => s.job.saves(),
        "fsdp_state_dict_type" => s.job.saves() && s.parallel.strategy.is_fsdp(),
        "fsdp_version" => s.parallel.strategy.is_fsdp(),
        "ddp_find_unused_parameters" | "ddp_bucket_cap_mb" | "ddp_broadcast_buffers" => {
            s.parallel.ddp_ranks()
        }
        // An image's size and resize limits once a sample has images.
        "image_width" | "image_height" | "image_max_pixels" | "image_min_pixels" => {
            s.images.images_per_sample > 0
        }
        "export_device" => s.job.merge,
        "export_size" => s.job.merge && s.job.export_device == crate::model::job::ExportDevice::Cpu,
        _ => true,
    }
}

/// After the model changes: a model without a vision tower plans no images (its samples are
/// text; the image settings are hidden with the tower).
pub fn after_model(st: &mut crate::web::state::UiState) {
    if crate::web::state::arch_of(st).map_or(true, |a| a.vision.is_none()) {
        st.settings.images.images_per_sample = 0;
    }
}

/// After a first-screen setting changes: a GRPO step needs a generation batch (batch ×
/// gradient accumulation × GPUs) that is a multiple of num_generations, as TRL checks; when it
/// is not, the completions of one prompt are the whole generation batch (num_generations set
/// to it), or with a single row, gradient accumulation gathers num_generations of them.
pub fn after_essential(s: &mut Settings) {
    if !s.grpo() {
        return;
    }
    let rows = u128::from(s.batch) * u128::from(s.grad_accum.max(1)) * s.parallel.world();
    if rows % u128::from(s.num_generations.max(1)) == 0 {
        return;
    }
    if rows >= 2 {
        s.num_generations = u64::try_from(rows).unwrap_or(u64::MAX);
    } else {
        s.grad_accum = s.num_generations;
    }
}

/// After the GPU count changes: several GPUs need a strategy (FSDP full shard unless one is
/// chosen); one GPU runs without one and cannot offload parameters or optimizer states.
pub fn after_gpu_count(s: &mut Settings) {
    let p = &mut s.parallel;
    if p.world() > 1 && p.strategy == Strategy::Single {
        p.strategy = Strategy::FsdpFullShard;
    }
    if p.world() == 1 {
        p.strategy = Strategy::Single;
        p.offload_params = false;
        p.offload_optimizer = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::fields;

    #[test]
    fn every_name_is_a_setting_of_the_table() {
        for name in ESSENTIAL
            .iter()
            .chain(EMBED)
            .chain(TRAINING)
            .chain(GPUS)
            .chain(MOE)
            .chain(IMAGES)
            .chain(IMAGES_MORE)
            .chain(JOB)
            .chain(&["target_modules", "modules_to_save"])
        {
            assert!(
                fields::by_name(name).is_some(),
                "{name} is not in the table"
            );
        }
    }

    #[test]
    fn a_model_without_a_tower_plans_no_images() {
        let mut st = crate::web::state::UiState {
            model: "qwen3.5-4b".into(),
            ..Default::default()
        };
        st.settings.images.images_per_sample = 2;
        after_model(&mut st);
        assert_eq!(st.settings.images.images_per_sample, 2);
        st.model = "llama2-7b".into();
        after_model(&mut st);
        assert_eq!(st.settings.images.images_per_sample, 0);
    }

    #[test]
    fn a_grpo_step_gets_a_generation_batch_trl_accepts() {
        let mut s = Settings {
            stage: crate::model::Stage::Grpo,
            batch: 4,
            ..Settings::default()
        };
        assert!(s.validate().is_err(), "4 rows, 8 generations");
        after_essential(&mut s);
        assert_eq!((s.num_generations, s.grad_accum), (4, 1));
        assert!(s.validate().is_ok());
        s.batch = 1;
        s.num_generations = 8;
        after_essential(&mut s);
        assert_eq!((s.num_generations, s.grad_accum), (8, 8));
        assert!(s.validate().is_ok());
        // Valid settings stay as they are.
        s.batch = 2;
        s.grad_accum = 4;
        after_essential(&mut s);
        assert_eq!((s.batch, s.num_generations, s.grad_accum), (2, 8, 4));
    }

    #[test]
    fn the_gpu_count_keeps_the_layout_valid() {
        let mut s = Settings::default();
        s.parallel.gpus_per_node = 4;
        after_gpu_count(&mut s);
        assert_eq!(s.parallel.strategy, Strategy::FsdpFullShard);
        assert!(s.parallel.validate(s.grad_ckpt).is_ok());
        s.parallel.offload_params = true;
        s.parallel.gpus_per_node = 1;
        after_gpu_count(&mut s);
        assert_eq!(s.parallel.strategy, Strategy::Single);
        assert!(s.parallel.validate(s.grad_ckpt).is_ok());
    }

    #[test]
    fn every_setting_of_the_old_main_column_is_still_on_the_page() {
        for name in [
            "batch",
            "seq",
            "lora_r",
            "lora_dropout",
            "grad_accum",
            "base_weights",
            "autocast",
            "attn_impl",
            "optimizer",
            "grad_ckpt",
            "padded_mask",
        ] {
            assert!(
                ESSENTIAL.contains(&name) || TRAINING.contains(&name),
                "{name}"
            );
        }
        let mut s = Settings::default();
        assert!(!relevant("strategy", &s) && relevant("batch", &s));
        assert!(relevant("lora_r", &s) && relevant("use_dora", &s));
        s.finetuning_type = crate::model::FinetuningType::Full;
        assert!(!relevant("lora_r", &s) && !relevant("use_dora", &s));
        s.finetuning_type = crate::model::FinetuningType::Lora;
        assert!(!relevant("precompute_ref_log_probs", &s) && !relevant("max_prompt_length", &s));
        s.stage = crate::model::Stage::Dpo;
        assert!(relevant("precompute_ref_log_probs", &s) && relevant("pref_loss", &s));
        s.stage = crate::model::Stage::Orpo;
        assert!(!relevant("precompute_ref_log_probs", &s) && relevant("max_prompt_length", &s));
        s.stage = crate::model::Stage::Sft;
        s.parallel.gpus_per_node = 2;
        assert!(relevant("offload", &s));
        assert!(relevant("experts_implementation", &s) && relevant("target_parameters", &s));
        s.experts_layout = crate::model::ExpertsLayout::PerExpert;
        assert!(!relevant("experts_implementation", &s) && !relevant("target_parameters", &s));
    }
}
