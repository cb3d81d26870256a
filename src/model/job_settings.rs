//! The settings of the phases around the training step: Trainer's evaluation, checkpoint
//! saving, and the merge of the adapters after training.

use serde::{Deserialize, Serialize};

use crate::model::names::names;

/// Trainer's `eval_strategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalStrategy {
    /// No evaluation during training (Trainer's default).
    No,
    /// Every `eval_steps` optimizer steps.
    Steps,
    /// At the end of every epoch.
    Epoch,
}

names!(EvalStrategy {
    No => "no" | "none",
    Steps => "steps",
    Epoch => "epoch",
});

/// Trainer's `save_strategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaveStrategy {
    /// No checkpoint is saved during training.
    No,
    /// Every `save_steps` optimizer steps (Trainer's default, 500).
    Steps,
    /// At the end of every epoch.
    Epoch,
    /// When the evaluation metric improves.
    Best,
}

names!(SaveStrategy {
    No => "no" | "none",
    Steps => "steps",
    Epoch => "epoch",
    Best => "best",
});

/// Where the adapters are merged into the base after training.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportDevice {
    /// On the GPU the model trained on, in the training process (`trainer.model.merge_and_unload()`
    /// after `trainer.train()`: the optimizer states are still held).
    Gpu,
    /// On the host (LLaMA-Factory's `export_device: cpu`, its default): a separate export run
    /// loads the 16-bit base and the adapters in host memory.
    Cpu,
}

names!(ExportDevice {
    Gpu => "gpu" | "cuda" | "auto",
    Cpu => "cpu",
});

/// How FSDP saves a checkpoint (accelerate's `fsdp_state_dict_type`; its default is
/// `FULL_STATE_DICT` for FSDP1, which the plan models, `accelerate/utils/dataclasses.py:2047-2050`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsdpStateDict {
    /// Rank 0 gathers the whole state dict to its host (`FullStateDictConfig(offload_to_cpu,
    /// rank0_only)`), the optimizer's too.
    Full,
    /// Each rank writes its own shard from its host (`ShardedStateDictConfig(offload_to_cpu)`).
    Sharded,
}

names!(FsdpStateDict {
    Full => "full_state_dict" | "full",
    Sharded => "sharded_state_dict" | "sharded",
});

/// Trainer's `per_device_eval_batch_size` default.
pub const DEFAULT_EVAL_BATCH: u64 = 8;

/// The job around the training step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSettings {
    /// `per_device_eval_batch_size`; given, it asks for the evaluation phase.
    pub eval_batch: Option<u64>,
    /// `eval_strategy`: anything but `no` asks for the evaluation phase.
    pub eval_strategy: EvalStrategy,
    /// `eval_accumulation_steps`: every this many batches the kept outputs move to host memory.
    pub eval_accumulation_steps: Option<u64>,
    /// `prediction_loss_only`: only the loss is kept (Trainer's choice when no `compute_metrics`
    /// is given); off, every batch's logits and labels are kept for `compute_metrics`.
    pub prediction_loss_only: bool,
    /// How many evaluation samples are run (their logits are accumulated when kept); `None`:
    /// one batch.
    pub eval_samples: Option<u64>,
    /// `eval_do_concat_batches`: the kept outputs are concatenated batch after batch on the GPU
    /// (Trainer's default: each concatenation a new tensor beside the old); off, each batch's
    /// are kept in a list.
    pub eval_do_concat_batches: bool,
    /// `predict_with_generate`: with the logits kept (`prediction_loss_only` off), each eval
    /// batch generates from its prompts (LLaMA-Factory's evaluation: the prompt's tokens, the
    /// responses as labels) and the generated ids are kept instead of the logits.
    pub predict_with_generate: bool,
    /// `max_new_tokens` of that generation; `None`: up to the sequence length (the
    /// `generation_max_length` LLaMA-Factory sets to `cutoff_len`, which an evaluation during
    /// training generates to).
    pub max_new_tokens: Option<u64>,
    /// `save_strategy`.
    pub save_strategy: SaveStrategy,
    /// `save_only_model`: checkpoints hold the model (adapters) only, no optimizer states.
    pub save_only_model: bool,
    /// Plan the merge of the adapters after training.
    pub merge: bool,
    /// Where the merge runs.
    pub export_device: ExportDevice,
    /// How FSDP saves checkpoints.
    pub fsdp_state_dict: FsdpStateDict,
    /// Trainer's `resume_from_checkpoint`: the training starts by loading a checkpoint's
    /// optimizer states.
    pub resume_from_checkpoint: bool,
    /// LLaMA-Factory's `export_size`: the merged model is written in safetensors shards of up
    /// to this many GB (10^9 bytes; `max_shard_size` of `save_pretrained`).
    pub export_size_gb: u64,
}

/// LLaMA-Factory's `export_size` default (GB).
pub const DEFAULT_EXPORT_SIZE_GB: u64 = 5;

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            eval_batch: None,
            eval_strategy: EvalStrategy::No,
            eval_accumulation_steps: None,
            prediction_loss_only: true,
            eval_samples: None,
            eval_do_concat_batches: true,
            predict_with_generate: false,
            max_new_tokens: None,
            save_strategy: SaveStrategy::Steps,
            save_only_model: false,
            merge: false,
            export_device: ExportDevice::Cpu,
            fsdp_state_dict: FsdpStateDict::Full,
            resume_from_checkpoint: false,
            export_size_gb: DEFAULT_EXPORT_SIZE_GB,
        }
    }
}

impl JobSettings {
    /// Whether the job evaluates: an eval batch or an eval strategy is given.
    pub fn evaluates(&self) -> bool {
        self.eval_batch.is_some() || self.eval_strategy != EvalStrategy::No
    }

    /// The eval micro-batch.
    pub fn eval_batch(&self) -> u64 {
        self.eval_batch.unwrap_or(DEFAULT_EVAL_BATCH)
    }

    /// Evaluation batches in all (one when `eval_samples` is not given).
    pub fn eval_batches(&self) -> u64 {
        self.eval_samples
            .map_or(1, |n| n.div_ceil(self.eval_batch()).max(1))
    }

    /// Batches whose outputs are on the GPU together: every batch's logits and labels until
    /// `eval_accumulation_steps` moves them to the host; with the loss only, the batch being
    /// evaluated and the previous one's (two batches show every allocation of the loop).
    pub fn eval_batches_on_gpu(&self) -> u64 {
        let n = self.eval_batches();
        if self.prediction_loss_only {
            n.min(2)
        } else {
            n.min(self.eval_accumulation_steps.unwrap_or(n).max(1))
        }
    }

    /// Whether each eval batch generates: `predict_with_generate` with the outputs kept
    /// (with `prediction_loss_only`, Seq2SeqTrainer computes the loss alone,
    /// `trainer_seq2seq.py:290-293`).
    pub fn generates_in_eval(&self) -> bool {
        self.predict_with_generate && !self.prediction_loss_only
    }

    /// New tokens each row of an eval batch generates, for settings `s` (its prompt and
    /// sequence): `max_new_tokens`, or up to the sequence length.
    pub fn eval_new_tokens(&self, s: &crate::model::Settings) -> u64 {
        self.max_new_tokens
            .unwrap_or_else(|| s.seq.saturating_sub(s.prompt_tokens()))
    }

    /// Whether checkpoints are saved.
    pub fn saves(&self) -> bool {
        self.save_strategy != SaveStrategy::No
    }

    /// Whether a phase after training runs on the GPU (evaluation, a merge on the GPU): its
    /// figures are a run of the step program continued by the phase, replayed through the
    /// allocator (milliseconds); the other phases are formulas over the training plan.
    pub fn runs_on_gpu_after_training(&self) -> bool {
        self.evaluates() || (self.merge && self.export_device == ExportDevice::Gpu)
    }
}
