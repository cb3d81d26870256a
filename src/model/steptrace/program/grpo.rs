//! A GRPO step as TRL 1.16's `GRPOTrainer` runs it after generation (`stage: grpo`): the
//! scoring of the generated completions (`_generate_and_score_completions`,
//! `trl/trainer/grpo_trainer.py:2440-2936`: the rollout tensors, the old policy's log-probs
//! when `num_iterations` > 1, the reference's when β ≠ 0 with peft's adapters disabled, each a
//! no-grad pass through TRL's fused LM head, the advantages, the buffer shuffled), then
//! `_compute_loss` (`grpo_trainer.py:3020-3292`) over the micro-batch: the policy's log-probs
//! and entropies through the fused head, the clipped importance-ratio loss with the KL term,
//! the loss type's reduction and the logged metrics. Measured with the harness's
//! `method_kind: "grpo"` (`tests/data/steptrace/README.md`, `tests/data/reference/grpo/`).
//!
//! Each small op of the loss and its backward is one allocation of a `[rows, completion]`,
//! `[rows]` or scalar tensor, written in the order TRL's lines run them; which of them autograd
//! saves decides when they die.

use super::super::tape::{Step, G, X};
use super::super::{StepPhase, What};
use super::Prog;
use crate::model::settings::GrpoLoss;

/// The scored micro-batch `_prepare_inputs` hands the step (the shuffled buffer, one
/// `steps_per_generation` slice of it): ids and masks (int64), the advantages, the generation
/// batch's token count, and the old policy's and reference's log-probs where they were scored.
#[derive(Clone)]
pub(super) struct Rollout {
    /// In the buffer's dict order: prompt ids and mask, completion ids and mask, advantages.
    tensors: Vec<X>,
    /// `num_items_in_batch`, a 0-dim int64 (shuffling leaves it as it is).
    items: X,
    old: Option<X>,
    /// vLLM's importance-sampling ratios (`[rows, 1]`) and its sampling log-probs.
    is: Option<[X; 2]>,
    reference: Option<X>,
}

impl Rollout {
    /// The buffer's tensors in its dict order.
    fn in_order(&self) -> Vec<X> {
        let mut v = self.tensors.clone();
        v.push(self.items);
        v.extend(self.old);
        v.extend(self.is.into_iter().flatten());
        v.extend(self.reference);
        v
    }
}

/// Sizes of the loss's tensors.
#[derive(Clone, Copy)]
struct Sz {
    /// `[rows, completion]` fp32.
    tok4: u64,
    /// `[rows, completion]` bool.
    tok1: u64,
    /// `[rows]` fp32.
    row4: u64,
    /// `[rows]` int64.
    row8: u64,
    /// `[rows, 1]` bool.
    row1: u64,
}

impl<'c, 'a> Prog<'c, 'a> {
    fn grpo_sz(&self) -> Sz {
        let s = self.ctx.s;
        let (b, c) = (s.batch, s.completion_tokens());
        Sz {
            tok4: b * c * 4,
            tok1: b * c,
            row4: b * 4,
            row8: b * 8,
            row1: b,
        }
    }

    /// A loss tensor of `bytes`.
    fn lt(&mut self, bytes: u64) -> X {
        self.t(bytes, 1, What::Loss)
    }

    /// The scoring of step `step`'s completions (`_generate_and_score_completions` after
    /// generation); the last step's buffer lives on until the caller replaces it.
    pub(super) fn grpo_score(&mut self, step: u8) -> Rollout {
        let s = self.ctx.s;
        let (l, c) = (s.seq, s.completion_tokens());
        let p = l - c;
        // The generation batch on this GPU: per_device_train_batch_size × steps_per_generation
        // (gradient_accumulation_steps by default, `grpo_config.py:1098-1100`).
        let b = s.generation_rows();
        self.phase(step, StepPhase::Score);
        // The ids and masks padded and moved to the GPU (`grpo_trainer.py:2440-2460`).
        let mut tensors = vec![];
        for n in [p, p, c, c] {
            tensors.push(self.t(b * n, 8, What::Input));
        }
        // vLLM's log-probs of its sampled tokens, padded and moved to the GPU
        // (`grpo_trainer.py:2463-2476`), for its importance-sampling correction.
        let vllm_is = s.vllm_importance_sampling();
        let sampling = vllm_is.then(|| self.t(b * c, 4, What::Input));
        // num_items_in_batch = gather(completion_mask.sum()).sum()
        let sum = self.t(1, 8, What::Input);
        let items = self.t(1, 8, What::Input);
        self.drop(sum);
        // prompt_completion_ids and attention_mask
        let ids = self.t(b * l, 8, What::Input);
        let mask = self.t(b * l, 8, What::Input);
        let old = s.grpo_old_logps().then(|| self.grpo_logps_no_grad(false));
        let ratio = vllm_is.then(|| self.grpo_is_ratio(b, c));
        let reference = s.reference_pass().then(|| self.grpo_logps_no_grad(true));
        self.drop(ids);
        self.drop(mask);
        // The advantages: one fp32 per sequence.
        tensors.push(self.t(b, 4, What::Input));
        let is = ratio.zip(sampling).map(|((ratio, mut locals), sampling)| {
            locals.extend(self.grpo_is_metrics(b, c));
            // `_generate_and_score_completions` returns: its locals go.
            for x in locals {
                self.drop(x);
            }
            [ratio, sampling]
        });
        let before = Rollout {
            tensors,
            items,
            old,
            is,
            reference,
        };
        // shuffle_sequence_dict: each tensor indexed by a permutation (the 0-dim count kept).
        let mut shuffled = before.clone();
        for x in shuffled
            .tensors
            .iter_mut()
            .chain(shuffled.old.iter_mut())
            .chain(shuffled.is.iter_mut().flatten())
            .chain(shuffled.reference.iter_mut())
        {
            *x = self.t(x.n, x.es, What::Input);
        }
        // The unshuffled dict dies with the function's frame: the ids and masks, the
        // log-probs, then the advantages' local.
        let adv = before.tensors[4];
        for x in before.tensors[..4]
            .iter()
            .chain(&before.old)
            .chain(before.is.iter().flatten())
            .chain(&before.reference)
        {
            self.drop(*x);
        }
        self.drop(adv);
        shuffled
    }

    /// vLLM's importance-sampling ratios (`grpo_trainer.py:2660-2705`, TRL's default
    /// `sequence_mask` mode with no lower bound and an upper one of 3): `(old − sampling) × mask`,
    /// `nan_to_num`, the per-sequence sum, `exp`, the two bounds' masks and their `|`, and
    /// `masked_fill`. Returns the `[rows, 1]` ratios and the locals that live until the
    /// function returns (the difference, its sum, the invalid mask).
    fn grpo_is_ratio(&mut self, rows: u64, c: u64) -> (X, Vec<X>) {
        let sub = self.lt(rows * c * 4);
        let diff = self.lt(rows * c * 4);
        self.drop(sub);
        let finite = self.lt(rows * c * 4);
        self.drop(diff);
        let sum = self.lt(rows * 4);
        let exp = self.lt(rows * 4);
        let below = self.lt(rows);
        let above = self.lt(rows);
        let invalid = self.lt(rows);
        self.drop(below);
        self.drop(above);
        let ratio = self.lt(rows * 4);
        self.drop(exp);
        (ratio, vec![finite, sum, invalid])
    }

    /// vLLM's sampling metrics (`grpo_trainer.py:2860-2895`): `|old − sampling|` over the
    /// completion tokens (a boolean index of `mask & ~isnan`), its mean and max, the ratios'
    /// min, mean and max, each gathered and read (`nanmin`, `nanmean`, `nanmax`). Returns the
    /// locals that live until the function returns.
    fn grpo_is_metrics(&mut self, rows: u64, c: u64) -> Vec<X> {
        let tok = rows * c;
        let sub = self.lt(tok * 4);
        let abs = self.lt(tok * 4);
        self.drop(sub);
        let mask = self.lt(tok);
        let nan = self.lt(tok);
        let not = self.lt(tok);
        self.drop(nan);
        let and = self.lt(tok);
        self.drop(not);
        // nonzero's [n, 2] int64 indices, then the n selected values
        let nz = self.lt(tok * 2 * 8);
        let delta = self.lt(tok * 4);
        self.drop(nz);
        self.drop(and);
        self.drop(abs);
        let mean_delta = self.lt(4);
        let max_delta = self.lt(4);
        for _ in 0..2 {
            // gather(x).mean() / .max(), read by .item()
            let v = self.lt(4);
            self.drop(v);
        }
        let ratios: Vec<X> = (0..3).map(|_| self.lt(4)).collect();
        self.grpo_nan_extremum(None);
        // gather(mean).nanmean(): isnan's count and nansum, divided
        let nan = self.lt(1);
        let count = self.lt(8);
        self.drop(nan);
        let sum = self.lt(4);
        let mean = self.lt(4);
        self.drop(sum);
        self.drop(count);
        self.drop(mean);
        self.grpo_nan_extremum(None);
        let mut locals = vec![delta, mask, mean_delta, max_delta];
        locals.extend(ratios);
        locals
    }

    /// TRL's `nanmin` / `nanmax` (`trl/trainer/utils.py:1124-1160`) of an fp32 tensor of
    /// `rows` values (`None`: 0-dim): `isnan(x).all()`, then `x[~isnan(x)]`'s extremum, read by
    /// `.item()`. The boolean index keeps every value (none is NaN on a GPU): `nonzero`'s int64
    /// indices, then the values; a 0-dim index has no index columns, and its one value has no
    /// storage on the emulated device.
    fn grpo_nan_extremum(&mut self, rows: Option<u64>) {
        let n = rows.unwrap_or(1);
        let nan = self.lt(n);
        let all = self.lt(1);
        self.drop(nan);
        self.drop(all);
        let nan = self.lt(n);
        let not = self.lt(n);
        self.drop(nan);
        let nz = self.lt(rows.map_or(0, |r| r * 8));
        let kept = self.lt(match rows {
            Some(r) => r * 4,
            None if self.tp.emulated => 0,
            None => 4,
        });
        self.drop(nz);
        self.drop(not);
        let v = self.lt(4);
        self.drop(kept);
        self.drop(v);
    }

    /// The buffer dies (replaced by the next one), its tensors in dict order.
    pub(super) fn grpo_release(&mut self, r: Rollout) {
        for x in r.in_order() {
            self.drop(x);
        }
    }

    /// `_get_per_token_logps_and_entropies` under `torch.no_grad()` with checkpointing off:
    /// the policy's log-probs (the old policy's), or the reference's with peft's adapters
    /// disabled (`use_adapter(model, None)`). Returns the `[rows, completion]` fp32 log-probs.
    fn grpo_logps_no_grad(&mut self, reference: bool) -> X {
        let s = self.ctx.s;
        let chunks = s.generation_rows() / s.batch.max(1);
        if chunks <= 1 {
            return self.under_no_grad(reference, |p| p.grpo_logps(false).0);
        }
        // In chunks of per_device_train_batch_size rows (`grpo_trainer.py:1440-1503`): each
        // chunk's labels and outputs live until the next chunk's are bound to the same names
        // (the labels once the next labels exist, the outputs once the next model call
        // returns), its log-probs (a view) until the `cat` of all of them. Measured with the
        // harness's `grpo_steps_per_generation` (`tests/data/steptrace/grpo_spg*`).
        let tok = s.batch * s.completion_tokens();
        self.under_no_grad(reference, |p| {
            let mut kept = vec![];
            let mut last: Option<(X, super::preference::Head)> = None;
            for _ in 0..chunks {
                let labels = p.pref_labels();
                let old_head = last.take().map(|(l, h)| {
                    p.drop(l);
                    h
                });
                let head = p.pref_model();
                if let Some(h) = old_head {
                    p.release_head(h, false);
                }
                p.clear_autocast_cache();
                kept.push(head.logp);
                last = Some((labels, head));
            }
            let all = p.t(tok * chunks, 4, What::Logits);
            if let Some((l, h)) = last.take() {
                p.drop(l);
                p.release_head(h, false);
            }
            for x in kept {
                p.drop(x);
            }
            all
        })
    }

    /// One chunk of `_get_per_token_logps_and_entropies` (`grpo_trainer.py:1419-1508`): the
    /// labels masked to the completion, the model call with `fused_lm_head=True` under
    /// autocast, the completion's log-probs (and entropies) `cat`ed out of the outputs. The
    /// third value is the head's `[rows, seq − 1]` log-probs, where the loss's gradient goes.
    fn grpo_logps(&mut self, entropy: bool) -> (X, Option<X>, X) {
        let tok = self.ctx.s.batch * self.ctx.s.completion_tokens();
        let labels = self.pref_labels();
        let head = self.pref_model();
        // The model call's autocast region ends: its cached casts go.
        self.clear_autocast_cache();
        let logp = self.t(tok, 4, What::Logits);
        let ent = entropy.then(|| self.t(tok, 4, What::Logits));
        self.drop(labels);
        let out = head.logp;
        self.release_head(head, true);
        (logp, ent, out)
    }

    /// `GRPOTrainer._compute_loss` on the micro-batch; returns the loss's node and the loss.
    pub(super) fn grpo_forward(&mut self, r: &Rollout) -> (G, X) {
        let s = self.ctx.s;
        let z = self.grpo_sz();
        let beta = s.beta_run() != 0.0;
        let (b, l) = (s.batch, s.seq);
        let ids = self.t(b * l, 8, What::Input);
        let mask = self.t(b * l, 8, What::Input);
        self.embed_ids = Some(ids.t);
        let (logp, ent, head_logp) = self.grpo_logps(true);
        self.embed_ids = None;
        let ent = ent.expect("the step's entropies");
        // log_ratio = per_token_logps - old_per_token_logps; coef_1 = exp(log_ratio), saved by
        // its backward
        let log_ratio = self.lt(z.tok4);
        let coef_1 = self.lt(z.tok4);
        // per_token_kl = (exp(ref - logps) - (ref - logps) - 1) * coef_1
        let kl = beta.then(|| {
            let d = self.lt(z.tok4);
            let e = self.lt(z.tok4);
            self.drop(d);
            let d2 = self.lt(z.tok4);
            let diff = self.lt(z.tok4);
            self.drop(d2);
            let pre = self.lt(z.tok4);
            self.drop(diff);
            let kl = self.lt(z.tok4);
            (e, pre, kl)
        });
        // coef_2 = clamp(coef_1, 1 - ε, 1 + ε); -min(coef_1 · A, coef_2 · A)
        let coef_2 = self.lt(z.tok4);
        let l1 = self.lt(z.tok4);
        let l2 = self.lt(z.tok4);
        let min = self.lt(z.tok4);
        let neg = self.lt(z.tok4);
        self.drop(min);
        // × vLLM's importance-sampling ratios (`grpo_trainer.py:3146-3147`); the product's
        // backward keeps the ratios, which the buffer holds.
        let neg = if s.vllm_importance_sampling() {
            let m = self.lt(z.tok4);
            self.drop(neg);
            m
        } else {
            neg
        };
        // + β · per_token_kl
        let loss_tok = if beta {
            let m = self.lt(z.tok4);
            let add = self.lt(z.tok4);
            self.drop(m);
            self.drop(neg);
            add
        } else {
            neg
        };
        // The loss type's reduction (`grpo_trainer.py:3153-3174`): what its division saves,
        // the loss, and `policy_loss` (a local until the frame ends, unless it is the loss).
        let (saved, loss, policy) = self.grpo_reduce(z);
        // The metrics: the KL's and the entropy's masked means, the clip ratios.
        if kl.is_some() {
            self.grpo_masked_mean(z, None);
        }
        self.grpo_masked_mean(z, None);
        let mut clipped = vec![];
        for _ in 0..2 {
            let a = self.lt(z.tok1);
            let b = self.lt(z.row1);
            let and = self.lt(z.tok1);
            self.drop(a);
            self.drop(b);
            clipped.push(and);
        }
        clipped.push(self.lt(z.tok1));
        for _ in 0..3 {
            let f = self.lt(z.tok4);
            self.grpo_masked_mean(z, Some(f));
        }
        let mut gathered = vec![];
        for _ in 0..2 {
            // masked_seq_mean(is_*_clipped.float()), then nanmin / nanmax of it
            let f = self.lt(z.tok4);
            let m = self.lt(z.tok4);
            let sum = self.lt(z.row4);
            self.drop(m);
            let count = self.lt(z.row8);
            let mean = self.lt(z.row4);
            self.drop(sum);
            self.drop(count);
            self.drop(f);
            self.grpo_nan_extremum(Some(z.row1));
            gathered.push(mean);
        }
        // The frame ends: its locals in the order Python lists them.
        self.drop(ids);
        self.drop(mask);
        if r.old.is_some() {
            self.drop(logp);
            self.drop(ent);
        } else {
            // old_per_token_logps = per_token_logps.detach() holds the log-probs longer.
            self.drop(ent);
            self.drop(logp);
        }
        self.drop(log_ratio);
        if let Some((_, _, kl)) = kl {
            self.drop(kl);
        }
        self.drop(loss_tok);
        self.drop(coef_2);
        if let Some(p) = policy {
            self.drop(p);
        }
        for x in clipped.into_iter().chain(gathered) {
            self.drop(x);
        }
        // The backward of the loss down to the log-probs' gradient.
        let script = self.grpo_backward_script(z, saved, (l1, l2), coef_1, kl);
        let g = self.tp.script_node(script, 1, 4, Self::edge(&head_logp));
        (g, loss)
    }

    /// The loss type's reduction; returns what its backward keeps, the loss and the
    /// `policy_loss` local that is not the loss.
    fn grpo_reduce(&mut self, z: Sz) -> (Vec<X>, X, Option<X>) {
        let s = self.ctx.s;
        match s.grpo_loss {
            GrpoLoss::Dapo => {
                // num_items_in_batch.clamp(min=1.0) / num_processes × GA / steps_per_generation
                let cl = self.lt(4);
                let dv = self.lt(4);
                self.drop(cl);
                let mu = self.lt(4);
                let norm = self.lt(4);
                self.drop(mu);
                self.drop(dv);
                let m = self.lt(z.tok4);
                let sum = self.lt(4);
                self.drop(m);
                let loss = self.lt(4);
                self.drop(sum);
                (vec![norm], loss, None)
            }
            GrpoLoss::Grpo => {
                // ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / GA
                let m = self.lt(z.tok4);
                let sum = self.lt(z.row4);
                self.drop(m);
                let count = self.lt(z.row8);
                let cl = self.lt(z.row4);
                self.drop(count);
                let dv = self.lt(z.row4);
                self.drop(sum);
                let mean = self.lt(4);
                self.drop(dv);
                let loss = self.lt(4);
                (vec![cl], loss, Some(mean))
            }
            GrpoLoss::Bnpo => {
                // (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0) / GA
                let m = self.lt(z.tok4);
                let sum = self.lt(4);
                self.drop(m);
                let count = self.lt(8);
                let cl = self.lt(4);
                self.drop(count);
                let dv = self.lt(4);
                self.drop(sum);
                let loss = self.lt(4);
                (vec![cl], loss, Some(dv))
            }
            GrpoLoss::DrGrpo => {
                // (per_token_loss * mask).sum() / (rows × max_completion_length) / GA
                let m = self.lt(z.tok4);
                let sum = self.lt(4);
                self.drop(m);
                let dv = self.lt(4);
                self.drop(sum);
                let loss = self.lt(4);
                (vec![], loss, Some(dv))
            }
        }
    }

    /// `global_masked_mean(x)` (`grpo_trainer.py:3259-3266`): `(x * mask).sum()`,
    /// `mask.sum().float()`, their stack and the `.item()` of the ratio; `arg` is a temporary
    /// argument (`is_*_clipped.float()`), which the callee's frame releases first.
    fn grpo_masked_mean(&mut self, z: Sz, arg: Option<X>) {
        let m = self.lt(z.tok4);
        let sum = self.lt(4);
        self.drop(m);
        let count = self.lt(8);
        let count_f = self.lt(4);
        self.drop(count);
        let totals = self.lt(8);
        let cl = self.lt(4);
        let dv = self.lt(4);
        self.drop(cl);
        self.drop(dv);
        if let Some(a) = arg {
            self.drop(a);
        }
        self.drop(sum);
        self.drop(count_f);
        self.drop(totals);
    }

    /// The backward of `_compute_loss` from the loss to the gradient of the log-probs'
    /// `[rows, seq − 1]` output: the reduction's, `-min(…)`'s (`minimum`'s two masked halves),
    /// the ratio's products and clamp, the KL term's, `exp`'s, and `slice_backward` of
    /// `log_probs[:, -completion:]`.
    fn grpo_backward_script(
        &mut self,
        z: Sz,
        saved: Vec<X>,
        (l1, l2): (X, X),
        coef_1: X,
        kl: Option<(X, X, X)>,
    ) -> Vec<Step> {
        let s = self.ctx.s;
        let mut v: Vec<Step> = vec![];
        let mut n: u16 = 0;
        let mut a = |v: &mut Vec<Step>, bytes: u64| {
            v.push(Step::Alloc(bytes));
            n += 1;
            n - 1
        };
        let f = |v: &mut Vec<Step>, k: u16| v.push(Step::Free(k));
        let rel = |v: &mut Vec<Step>, x: X| v.push(Step::Release(x.t));
        // The reduction's backward, to the gradient of per_token_loss.
        let g = match s.grpo_loss {
            GrpoLoss::Dapo => {
                let d = a(&mut v, 4);
                rel(&mut v, saved[0]);
                let m = a(&mut v, z.tok4);
                f(&mut v, d);
                m
            }
            GrpoLoss::Grpo => {
                let d = a(&mut v, 4);
                let mean = a(&mut v, z.row4);
                f(&mut v, d);
                let dv = a(&mut v, z.row4);
                f(&mut v, mean);
                rel(&mut v, saved[0]);
                let m = a(&mut v, z.tok4);
                f(&mut v, dv);
                m
            }
            GrpoLoss::Bnpo | GrpoLoss::DrGrpo => {
                let d = a(&mut v, 4);
                let d2 = a(&mut v, 4);
                f(&mut v, d);
                if let Some(x) = saved.first() {
                    rel(&mut v, *x);
                }
                let m = a(&mut v, z.tok4);
                f(&mut v, d2);
                m
            }
        };
        // + β · kl: the KL's share first
        let kb = kl.map(|_| a(&mut v, z.tok4));
        // × the importance-sampling ratios: the gradient times the ratios
        let g = if s.vllm_importance_sampling() {
            let m = a(&mut v, z.tok4);
            f(&mut v, g);
            m
        } else {
            g
        };
        let neg = a(&mut v, z.tok4);
        f(&mut v, g);
        // minimum's backward: each input's gradient where it was the smaller
        let mut halves = vec![];
        for _ in 0..2 {
            let cmp = a(&mut v, z.tok1);
            let dv = a(&mut v, z.tok4);
            let eq = a(&mut v, z.tok1);
            let wh = a(&mut v, z.tok4);
            let mf = a(&mut v, z.tok4);
            for k in [wh, eq, dv, cmp] {
                f(&mut v, k);
            }
            halves.push(mf);
        }
        f(&mut v, neg);
        rel(&mut v, l2);
        rel(&mut v, l1);
        // coef_1 · A and coef_2 · A
        let c1 = a(&mut v, z.tok4);
        f(&mut v, halves[0]);
        let c2 = a(&mut v, z.tok4);
        f(&mut v, halves[1]);
        // clamp's backward
        let sc = a(&mut v, 4);
        let gt = a(&mut v, z.tok1);
        let lt = a(&mut v, z.tok1);
        let wh = a(&mut v, z.tok4);
        for k in [lt, gt, sc, c1] {
            f(&mut v, k);
        }
        let mut acc = a(&mut v, z.tok4);
        f(&mut v, c2);
        f(&mut v, wh);
        if let (Some((e, pre, _)), Some(kb)) = (kl, kb) {
            // kl_pre · coef_1's two gradients
            let to_coef = a(&mut v, z.tok4);
            let to_pre = a(&mut v, z.tok4);
            f(&mut v, kb);
            rel(&mut v, pre);
            let sum = a(&mut v, z.tok4);
            f(&mut v, acc);
            f(&mut v, to_coef);
            acc = sum;
            // exp(ref - logps) - (ref - logps) - 1: the subtractions' negations, exp's
            let n1 = a(&mut v, z.tok4);
            let n2 = a(&mut v, z.tok4);
            f(&mut v, n1);
            let ex = a(&mut v, z.tok4);
            f(&mut v, to_pre);
            rel(&mut v, e);
            let n3 = a(&mut v, z.tok4);
            f(&mut v, ex);
            let kl_grad = a(&mut v, z.tok4);
            f(&mut v, n2);
            f(&mut v, n3);
            // exp(log_ratio)'s backward, then the two contributions to the log-probs
            let ex = a(&mut v, z.tok4);
            f(&mut v, acc);
            rel(&mut v, coef_1);
            let total = a(&mut v, z.tok4);
            f(&mut v, kl_grad);
            f(&mut v, ex);
            acc = total;
        } else {
            let ex = a(&mut v, z.tok4);
            f(&mut v, acc);
            rel(&mut v, coef_1);
            acc = ex;
        }
        // slice_backward of log_probs[:, -completion:]
        let rows = s.batch * (s.seq - 1) * 4;
        a(&mut v, rows);
        f(&mut v, acc);
        v
    }
}
