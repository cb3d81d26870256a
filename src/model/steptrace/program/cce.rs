//! Cut cross-entropy in place of lm_head and the loss, as axolotl's plugin installs it
//! (`cut_cross_entropy: true`: `cce_patch(model_type)` from axolotl-ai-cloud/ml-cross-entropy,
//! commit 5f0c7a7, version 25.5.2, with its defaults: impl `cce`, `filter_eps="auto"`, no fp32
//! accumulation). Each family's patched forward (e.g. `transformers/llama.py` `cce_forward`)
//! hands the final hidden states, `lm_head.weight` and the labels to `apply_lce`
//! (`transformers/utils.py`), which calls `linear_cross_entropy(..., shift=True)`:
//! - `_build_flat_valids` (`utils.py`): the scored positions of `labels[..., 1:]` as flat int64
//!   indices (a bool mask, its `nonzero`, an int32 copy, a sum over the two columns), kept by the
//!   autograd context until the graph is freed;
//! - the forward (`cce.py` `LinearCrossEntropyFunction.forward`): the log-sum-exp of every
//!   scored row in fp32 with its locks (`cce_lse_forward.py`), the vocabulary's average logit in
//!   fp32 (`logit_avg`, for the backward's ordering), each row's target logit
//!   (`indexed_dot.py`; Gemma 2's final-logit softcap of it is one fused output), their sum and
//!   its mean. No logits are stored: the hidden states, the weight, the log-sum-exps and the
//!   average logits are saved;
//! - the backward (`cce_backward.py` `cce_backward_kernel`): the vocabulary's order by average
//!   logit (`sort_logit_avg`, argsort to int32), zeroed gradients of the hidden states and (when
//!   trained) of the weight in their dtypes, int32 locks for each, one kernel.
//!
//! Its backward asserts 16-bit hidden states and weight (`cce_backward.py`): the plan refuses
//! an fp32 head (`check_method`). Measured with the harness, its Triton kernels stubbed (the
//! two-layer recordings `cce*` in `tests/data/steptrace`).

use super::super::tape::Step;
use super::{Prog, What, X};
use crate::model::steptrace::tape::G;

impl Prog<'_, '_> {
    /// Cut cross-entropy over the final hidden states `fin`; returns the loss's node and the
    /// loss.
    pub(super) fn cce(&mut self, fin: X) -> (G, X) {
        let ctx = self.ctx;
        let s = ctx.s;
        let a = ctx.arch;
        let (h, v) = (a.hidden_size, a.vocab_size);
        let head = self.lm_head.map(|p| p.x).unwrap_or(self.params[0].x);
        let seqs = s.sequences();
        // `targets[..., 1:] != ignore_index`, its `nonzero()` ([n, 2] int64), `.to(int32)`, and
        // the flat indices `valids.sum(1)` (int64), each freeing the one before.
        let scored = seqs * s.scored_tokens();
        let mask = self.t(seqs * s.seq.saturating_sub(1), 1, What::Loss);
        let nz = self.t(scored * 2, 8, What::Loss);
        self.drop(mask);
        let nz32 = self.t(scored * 2, 4, What::Loss);
        self.drop(nz);
        let valids = self.t(scored, 8, What::Loss);
        self.drop(nz32);
        // The forward: lse and its locks (freed as the kernel's wrapper returns), the average
        // logits when a gradient is wanted, the target logits (softcapped by a fused kernel into
        // a new tensor), summed into in place, and their mean.
        let grad = self.tp.mode != super::super::tape::Mode::NoGrad;
        let lse = self.t(scored, 4, What::Loss);
        let locks = self.t(scored.div_ceil(128), 4, What::Loss);
        let logit_avg = grad.then(|| self.t(v, 4, What::Loss));
        self.drop(locks);
        let mut neg_dot = self.t(scored, 4, What::Loss);
        if a.final_softcap() {
            let capped = self.t(scored, 4, What::Loss);
            self.drop(neg_dot);
            neg_dot = capped;
        }
        let mut loss = self.t(1, 4, What::Loss);
        self.drop(neg_dot);
        if !grad {
            // No graph (no_grad): nothing is kept past the forward.
            self.drop(lse);
            self.drop(valids);
            return (G::No, loss);
        }
        // The backward's steps: the vocabulary's order (sort's values and int64 indices, an
        // int32 copy), the gradients (zeros_like: the hidden states' rows, the weight when
        // trained), their locks `[⌈rows / 128⌉, ⌈hidden / 64⌉]` int32, freed as the kernel's
        // wrapper returns, then the order; the saved tensors go after the steps.
        let lock_cols = h.div_ceil(64);
        let rows = fin.n / h.max(1);
        let mut steps = vec![
            Step::Alloc(v * 4),
            Step::Alloc(v * 8),
            Step::Free(0),
            Step::Alloc(v * 4),
            Step::Free(1),
            Step::Alloc(rows * h * fin.es),
        ];
        let weight_grad = head.grad();
        if weight_grad {
            steps.push(Step::Alloc(head.n * head.es));
        }
        steps.push(Step::Alloc(scored.div_ceil(128) * lock_cols * 4));
        if weight_grad {
            steps.push(Step::Alloc(v.div_ceil(128) * lock_cols * 4));
            steps.extend([Step::Free(5), Step::Free(6)]);
        } else {
            steps.push(Step::Free(4));
        }
        steps.push(Step::Free(2));
        steps.push(Step::GradOf { input: 0, local: 3 });
        if weight_grad {
            steps.push(Step::GradOf { input: 1, local: 4 });
        }
        // save_for_backward(e, c, bias, lse, targets, valids, logit_avg): the hidden states, the
        // log-sum-exps and the average logits (the weight is a parameter, the labels the
        // batch's, the flat indices below).
        let saved: Vec<_> = [fin, lse]
            .into_iter()
            .chain(logit_avg)
            .map(|x| x.t)
            .collect();
        loss.g =
            self.tp
                .script_node_of(steps, 1, 4, &[Self::edge(&fin), Self::edge(&head)], &saved);
        self.drop(lse);
        if let Some(l) = logit_avg {
            self.drop(l);
        }
        // The autograd context's parameters keep the flat indices until the graph is freed.
        self.graph_held.push(valids);
        (loss.g, loss)
    }
}
