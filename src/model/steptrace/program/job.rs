//! What runs on the GPU after the training steps, in the same process: Trainer's evaluation
//! loop and peft's `merge_and_unload`, op by op, as `tests/data/harness/measure_job.py`
//! measures them.
//!
//! Evaluation (transformers 5.24 `Trainer.evaluation_loop`, trainer.py:2904-3111, and
//! `prediction_step`, :3193-3300): `model.eval()` (no dropout, no checkpointing), each batch
//! under `torch.no_grad()`: the batch, `num_items_in_batch` (`labels[..., 1:].ne(-100).sum()`),
//! the forward through the loss; the loss repeated per sample and concatenated
//! (`EvalLoopContainer`, `nested_concat` → `torch.cat`), and unless `prediction_loss_only` the
//! logits and labels too, kept on the GPU until `eval_accumulation_steps` moves them to the
//! host (:3046-3050). A fused linear cross-entropy computes the logits in eval (Liger's
//! `lce_forward` skips them only while training).
//!
//! Merge (peft 0.21 `merge_and_unload` → `_unload_and_optionally_merge`,
//! tuners_utils.py:679-740): per adapted Linear, `get_delta_weight` (lora/layer.py:1044-1071:
//! `B @ A`, then `* scaling`, in the adapters' dtype) added in place into a 16-bit weight
//! (layer.py:1003-1006); a 4-bit weight (lora/bnb.py:355-402, `Linear4bit.merge`) is
//! dequantized, the delta added (promoted to fp32), copied to the host and quantized again
//! on the GPU (bitsandbytes `Params4bit._quantize`: the weight copied back, `quantize_4bit`),
//! and the old packed weight and its state freed. The optimizer still holds the adapters.

use super::{bytes, Prog, X};
use crate::model::ctx::Ctx;
use crate::model::steptrace::tape::Mode;
use crate::model::steptrace::{StepPhase, What};

/// What runs after the two training steps. The program is generated for each as a constant
/// ([`After::code`]), so a run of the training steps alone carries none of the phases' ops:
/// the planner page's first bundle plans only that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// Nothing: the training step alone.
    Nothing,
    /// Trainer's evaluation loop.
    Eval,
    /// peft's `merge_and_unload` on the GPU.
    Merge,
}

impl After {
    /// The constant the program is generated with.
    pub const fn code(self) -> u8 {
        match self {
            After::Nothing => 0,
            After::Eval => 1,
            After::Merge => 2,
        }
    }

    /// The phase of a [`After::code`].
    pub const fn of_code(code: u8) -> After {
        match code {
            1 => After::Eval,
            2 => After::Merge,
            _ => After::Nothing,
        }
    }
}

/// The step after which the job's phases run, as the trace numbers it.
pub const JOB_STEP: u8 = 3;

/// The settings the evaluation forward computes with: the eval micro-batch, no dropout
/// (`model.eval()`), and the logits materialised (a fused loss computes them in eval).
pub fn eval_settings(s: &crate::model::Settings) -> crate::model::Settings {
    crate::model::Settings {
        batch: s.job.eval_batch(),
        lora_dropout: 0.0,
        fused_ce: crate::model::FusedCe::Off,
        ..s.clone()
    }
}

/// A container of `EvalLoopContainer`: the tensors kept so far on the GPU, one concatenation of
/// them (`eval_do_concat_batches`, Trainer's default) or each batch's in a list.
#[derive(Default)]
struct Kept {
    tensors: Vec<X>,
}

impl<'c, 'a> Prog<'c, 'a> {
    /// `container.add(new)`: the first batch's tensor is kept as is; a later one concatenated
    /// (a new storage of both; the old one freed), or appended to the list without
    /// `eval_do_concat_batches`. `new` stays the caller's.
    fn keep(&mut self, c: &mut Kept, new: X, what: What) {
        let concat = self.ctx.s.job.eval_do_concat_batches;
        match c.tensors.pop() {
            Some(old) if concat => {
                let cat = self.t(old.n + new.n, new.es, what);
                self.drop(old);
                c.tensors.push(cat);
            }
            last => {
                c.tensors.extend(last);
                self.tp.keep_local(new.t);
                c.tensors.push(new);
            }
        }
    }

    /// `to_cpu_and_numpy`: the kept tensors go to the host and leave the GPU.
    fn release_kept(&mut self, kept: Vec<Kept>) {
        for x in kept.into_iter().flat_map(|c| c.tensors) {
            self.drop(x);
        }
    }

    /// Trainer's evaluation loop over the batches whose outputs are on the GPU together, with
    /// `eval` the context of the eval batch; the kept outputs move to the host at the end
    /// (`eval_accumulation_steps`, or `get_arrays`). Each batch runs the forward through the
    /// loss ([`Prog::eval_forward_batches`]) or, with `gen` (the prefill's and the decode's
    /// contexts of `predict_with_generate`), generates ([`Prog::eval_generate_loop`]).
    pub(super) fn eval_loop(&mut self, eval: &'c Ctx<'a>, gen: Option<&'c (Ctx<'a>, Ctx<'a>)>) {
        let train = std::mem::replace(&mut self.ctx, eval);
        let mode = std::mem::replace(&mut self.tp.mode, Mode::NoGrad);
        self.phase(JOB_STEP, StepPhase::Eval);
        match gen {
            Some((pre, dec)) => extended!(
                self,
                "generation during evaluation",
                self.eval_generate_loop(pre, dec),
                {
                    let _ = (pre, dec);
                }
            ),
            None => self.eval_forward_batches(),
        }
        self.tp.mode = mode;
        self.ctx = train;
    }

    /// The evaluation's batches through the forward and the loss (Trainer's `prediction_step`),
    /// in the eval batch's context.
    fn eval_forward_batches(&mut self) {
        let eval = self.ctx;
        let js = &eval.s.job;
        let (b, seq) = (eval.s.batch, eval.s.seq);
        let keep = !js.prediction_loss_only;
        let on_gpu = js.eval_batches_on_gpu();
        let (mut losses, mut preds, mut labels) =
            (Kept::default(), Kept::default(), Kept::default());
        for k in 1..=on_gpu {
            let ids = self.t(b * seq, 8, What::Input);
            let lab = self.t(b * seq, 8, What::Input);
            // num_items_in_batch: labels[..., 1:].ne(-100) → .sum() → sum(): 0 + it.
            let ne = self.t(b * seq.saturating_sub(1), 1, What::Loss);
            let s1 = self.t(1, 8, What::Loss);
            self.drop(ne);
            let items = self.t(1, 8, What::Loss);
            self.drop(s1);
            // The first batch and the last on the GPU run the forward; those between leave
            // what it returns (its transients are the same in every batch).
            let (loss, logits) = if k == 1 || k == on_gpu {
                self.keep_logits = true;
                self.loss_over_items = true;
                let (_, loss) = self.forward();
                self.loss_over_items = false;
                self.keep_logits = false;
                let logits = self.kept_logits.take();
                (loss, logits)
            } else {
                let loss = self.t(1, 4, What::Loss);
                let logits = self.t(
                    b * seq * eval.arch.vocab_size,
                    bytes(self.ctx.logits),
                    What::Logits,
                );
                (loss, Some(logits))
            };
            // loss.detach().mean(); `del outputs` frees the model's loss and, with the loss
            // only, its logits.
            let mean = self.t(1, 4, What::Loss);
            self.drop(loss);
            self.drop(items);
            let logits = match logits {
                Some(l) if !keep => {
                    self.drop(l);
                    None
                }
                kept => kept,
            };
            let rep = self.t(b, 4, What::EvalOutputs);
            self.keep(&mut losses, rep, What::EvalOutputs);
            if let Some(l) = logits {
                self.keep(&mut preds, l, What::EvalOutputs);
                self.keep(&mut labels, lab, What::EvalOutputs);
                self.drop(l);
            }
            self.drop(mean);
            self.drop(ids);
            self.drop(lab);
            self.drop(rep);
        }
        self.release_kept(vec![losses, preds, labels]);
    }

    /// The evaluation loop with `predict_with_generate` as LLaMA-Factory runs it
    /// (`CustomSeq2SeqTrainer.prediction_step`, `src/llamafactory/train/sft/trainer.py:164-190`:
    /// the labels popped, so no loss forward; transformers 5.24
    /// `Seq2SeqTrainer.prediction_step`, `trainer_seq2seq.py:259-372`: `generate` on the
    /// prompts; the prompt's columns overwritten with pad in place): each batch's prompts, mask
    /// and labels (the responses), the generated ids and the labels kept and concatenated like
    /// logits. The first and last batch on the GPU generate; those between leave only their ids
    /// (their generation is the same as the first's).
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    fn eval_generate_loop(&mut self, pre: &'c Ctx<'a>, dec: &'c Ctx<'a>) {
        let s = self.ctx.s;
        let js = &s.job;
        let b = s.batch;
        let p = s.prompt_tokens();
        let c = js.eval_new_tokens(s);
        let labels_len = s.seq.saturating_sub(p);
        let on_gpu = js.eval_batches_on_gpu();
        let call = super::generate::GenCall {
            prefill: pre,
            decode: dec,
            rows: b,
            prompt: p,
            new_tokens: c,
            warpers: super::generate::Warpers::LLAMA_FACTORY,
        };
        let (mut preds, mut labels) = (Kept::default(), Kept::default());
        for k in 1..=on_gpu {
            let ids = self.t(b * p, 8, What::Input);
            let mask = self.t(b * p, 8, What::Input);
            let lab = self.t(b * labels_len, 8, What::Input);
            let gen = if k == 1 || k == on_gpu {
                self.generate_ids(&call)
            } else {
                self.t(b * (p + c), 8, What::EvalOutputs)
            };
            self.tp.labels[gen.t as usize].what = What::EvalOutputs;
            self.tp.labels[lab.t as usize].what = What::EvalOutputs;
            self.keep(&mut preds, gen, What::EvalOutputs);
            self.keep(&mut labels, lab, What::EvalOutputs);
            self.drop(gen);
            self.drop(lab);
            self.drop(ids);
            self.drop(mask);
        }
        self.release_kept(vec![preds, labels]);
    }

    /// peft's `merge_and_unload` on the GPU, adapted Linear by adapted Linear.
    pub(super) fn merge(&mut self) {
        self.phase(JOB_STEP, StepPhase::Merge);
        self.each_adapted_linear_merged(false);
    }

    /// TRL's weight sync to vLLM with peft (`trl/generation/vllm_generation.py:436-475`,
    /// before each generation of a new step, `grpo_trainer.py:1766-1772`): `merge_adapter()`,
    /// each merged weight handed to vLLM as it is (`param.data`, copied into vLLM's own
    /// weights, in its share), then `unmerge_adapter()`, which makes each delta again and
    /// subtracts it (`peft/tuners/lora/layer.py` `unmerge`; a 4-bit base is refused before:
    /// vLLM cannot load the packed weights, `Settings::validate`). TRL runs it with grad
    /// mode on; the deltas' graphs save only the adapters' own parameters, so it is planned
    /// under no_grad.
    ///
    /// Under DeepSpeed ZeRO-3 the whole model is gathered first, since peft cannot merge into
    /// shards (`gather_params(list(model.parameters()))`, `vllm_generation.py:440-444`;
    /// DeepSpeed's `GatheredParameters` gives each parameter a full buffer beside its
    /// partition). FSDP gathers one wrapped module at a time while the weights are read
    /// (`summon_full_params(module, recurse=False)`, `:385-405`), like the step's own gathers.
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    pub(super) fn vllm_weight_sync(&mut self, step: u8) {
        self.phase(step, StepPhase::Generate);
        let gathered = self.ctx.s.vllm_sync_gathers_model().then(|| {
            let whole: u64 = self
                .params
                .iter()
                .map(|q| q.x.n.saturating_mul(q.x.es))
                .fold(0, u64::saturating_add);
            self.t(whole, 1, What::GatheredLayer)
        });
        self.each_adapted_linear_merged(false);
        self.each_adapted_linear_merged(true);
        if let Some(g) = gathered {
            self.drop(g);
        }
    }

    /// Each adapted Linear merged (`unmerge`: unmerged) in module order, under no_grad.
    fn each_adapted_linear_merged(&mut self, unmerge: bool) {
        let s = self.ctx.s;
        let mode = std::mem::replace(&mut self.tp.mode, Mode::NoGrad);
        let ad = bytes(s.adapter_dtype);
        for li in 0..self.layers.len() {
            self.tp.exec = li as u32;
            for j in 0..self.layers[li].len() {
                if self.layers[li][j].lora.is_none() {
                    continue;
                }
                let shape = self.layers[li][j].shape;
                let n = (shape.in_features * shape.out_features) as u64;
                if s.quant.is_none() {
                    // get_delta_weight: B @ A, then * scaling; merge: `weight.data += delta` in
                    // place; unmerge: `weight.data -= delta.to(weight.dtype)`, a cast of the
                    // delta when the adapters' dtype is not the weight's.
                    let mm = self.t(n, ad, What::MergeTemp);
                    let delta = self.t(n, ad, What::MergeTemp);
                    self.drop(mm);
                    let cast = (unmerge && s.adapter_dtype != s.dtype)
                        .then(|| self.t(n, bytes(s.dtype), What::MergeTemp));
                    self.drop(delta);
                    if let Some(c) = cast {
                        self.drop(c);
                    }
                } else {
                    self.merge_4bit(li, j, n, ad);
                }
            }
        }
        self.tp.exec = crate::model::steptrace::tape::NO_LAYER;
        self.tp.mode = mode;
    }

    /// peft's `Linear4bit.merge` of Linear `j` of layer `li` (`n` weights).
    fn merge_4bit(&mut self, li: usize, j: usize, n: u64, ad: u64) {
        let s = self.ctx.s;
        let ce = bytes(s.dtype);
        let blocks = n.div_ceil(64);
        // dequantize_4bit: the nested absmax first (double quantization), then the weight.
        let absmax = s.double_quant.then(|| self.t(blocks, 4, What::MergeTemp));
        let output = self.t(n, ce, What::MergeTemp);
        if let Some(a) = absmax {
            self.drop(a);
        }
        let mm = self.t(n, ad, What::MergeTemp);
        let delta = self.t(n, ad, What::MergeTemp);
        self.drop(mm);
        let wes = ce.max(ad);
        let w_data = self.t(n, wes, What::MergeTemp);
        // Params4bit(w_data.to("cpu")).to(device): a host copy, the GPU copy quantized.
        let host = self.tp.new_host_t(n * wes, What::MergeTemp);
        let w = self.t(n, wes, What::MergeTemp);
        let packed = self.t(n.div_ceil(2), 1, What::Weight);
        // quantize_4bit (`bitsandbytes/functional.py`): the fp32 absmax; get_4bit_type's 16-value
        // code made on the device and scaled by its largest magnitude (`data.abs().max()`, two
        // temporaries); with double quantization the mean as offset and `absmax - offset`
        // quantized blockwise (uint8 absmax, its fp32 absmax and 256-value code), the fp32
        // absmax and the centred copy freed with the merge's locals. Read from a recording of
        // peft's 4-bit merge and unmerge on the emulated device (not committed: TRL's weight
        // sync, which it recorded, cannot run with a 4-bit base).
        let absmax = self.t(blocks, 4, What::MergeTemp);
        let code = self.t(16, 4, What::QuantState);
        let abs = self.t(16, 4, What::MergeTemp);
        let max = self.t(1, 4, What::MergeTemp);
        self.drop(abs);
        self.drop(max);
        let (state, temps) = if s.double_quant {
            let offset = self.t(1, 4, What::QuantState);
            let centred = self.t(blocks, 4, What::MergeTemp);
            let q = self.t(blocks, 1, What::QuantState);
            let nested_absmax = self.t(blocks.div_ceil(256), 4, What::QuantState);
            let nested_code = self.t(256, 4, What::QuantState);
            (
                vec![q, code, offset, nested_absmax, nested_code],
                vec![absmax, centred],
            )
        } else {
            self.tp.labels[absmax.t as usize].what = What::QuantState;
            (vec![absmax, code], vec![])
        };
        for x in temps {
            self.drop(x);
        }
        self.drop(w);
        self.tp.drop_t(host);
        // The old packed weight and its state go when merge() returns, with its locals.
        let old = std::mem::replace(&mut self.layers[li][j].w.x, packed);
        self.tp.drop_t(old.t);
        let name = self.layers[li][j].shape.name;
        if let Some(q) = self
            .qstates
            .get_mut(li)
            .and_then(|l| l.iter_mut().find(|(nm, _)| *nm == name).map(|(_, v)| v))
        {
            let old_state = std::mem::replace(q, state);
            for x in old_state {
                self.tp.drop_t(x.t);
            }
        }
        self.drop(output);
        self.drop(delta);
        self.drop(w_data);
    }
}
