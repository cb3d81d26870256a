//! A fused linear cross-entropy in place of lm_head and the loss: Liger-Kernel 0.8.5's
//! `LigerForCausalLMLoss` (`liger_kernel/transformers/model/loss_utils.py:55-100`) over
//! `LigerFusedLinearCrossEntropyFunction` (`liger_kernel/ops/fused_linear_cross_entropy.py`,
//! `fused_linear_cross_entropy_forward`, :51-415, and its backward, :418-470). The logits never
//! exist whole: the forward runs the rows in chunks, computes each chunk's logits, turns them
//! into their gradient in place and multiplies it into the hidden states' gradient (and the
//! head's, when it is trained), which it keeps for backward; backward compares its incoming
//! gradient with a new `tensor(1.0)` and hands the kept gradients on. Measured with the harness
//! (two-layer recordings `ligerce*` and `ligerall4gc` in `tests/data/steptrace`).

use super::super::tape::Op;
use super::{bytes, Prog, What, X};
use crate::model::steptrace::tape::G;

impl Prog<'_, '_> {
    /// Rows per chunk: the next power of two of `rows / ⌈vocab / (c × hidden)⌉`, at most `rows`
    /// (`chunk_size = min(next_power_of_2(cdiv(BT, inc_factor)), BT)`, `inc_factor =
    /// cdiv(V, chunk_mem_const × H)`; `chunk_mem_const` is the family's, 1 but for gpt-oss).
    pub(super) fn fused_ce_chunk_rows(&self, rows: u64) -> u64 {
        let a = self.ctx.arch;
        let c = a.family.layout().flce_chunk_mem_const.max(1);
        let inc = a
            .vocab_size
            .div_ceil(a.hidden_size.saturating_mul(c).max(1))
            .max(1);
        rows.div_ceil(inc)
            .max(1)
            .next_power_of_two()
            .min(rows.max(1))
    }

    /// The fused head and loss over the final hidden states `fin`; returns the loss's node and
    /// the loss.
    pub(super) fn fused_ce(&mut self, fin: X) -> (G, X) {
        let ctx = self.ctx;
        let s = ctx.s;
        let a = ctx.arch;
        let (h, v) = (a.hidden_size, a.vocab_size);
        let rows = self.tokens();
        let head = self.lm_head.map(|p| p.x).unwrap_or(self.params[0].x);
        // labels = pad(labels, (0, 1), ignore_index); shift_labels = labels[..., 1:].contiguous():
        // a copy unless there is one sequence (a [1, seq] slice is contiguous).
        let pad = self.t(s.sequences() * (s.seq + 1), 8, What::Loss);
        let shift = (s.sequences() > 1).then(|| self.t(rows, 8, What::Loss));
        // The gradients it fills (zeros_like: the input's and the weight's dtypes), the per-row
        // loss, the mask of scored rows (its sum read with .item()).
        let grad_input = self.t(rows * h, fin.es, What::Logits);
        let grad_weight = head.grad().then(|| self.t(head.n, head.es, What::Logits));
        let loss_rows = self.t(rows, 4, What::Loss);
        let mask = self.t(rows, 1, What::Loss);
        let count = self.t(1, 8, What::Loss);
        self.drop(count);
        // `_can_use_mm_out` (:32-48): input and weight of one dtype, which autocast (if on) keeps:
        // the chunks' logits go into one buffer and `grad_input`'s rows are written in place
        // (`torch.mm(..., out=)`). Otherwise each chunk is `_input_chunk @ weight.t()` under
        // autocast (the weight cast first, then the chunk: neither is cached), and
        // `grad_logits_chunk @ weight` a temporary copied into `grad_input`'s rows.
        let ce = s.autocast.map_or(fin.es, bytes);
        let mm_out = fin.es == head.es && ce == fin.es;
        let chunk = self.fused_ce_chunk_rows(rows);
        let storage = mm_out.then(|| self.t(chunk * v, fin.es, What::Logits));
        let mut start = 0;
        while start < rows {
            let n = chunk.min(rows - start);
            let logits = if mm_out {
                self.tp.gemm(false);
                self.tp.gemm(false);
                None
            } else {
                let w_cast = (head.es != ce).then(|| self.t(v * h, ce, What::WeightCopy));
                let x_cast = (fin.es != ce).then(|| self.t(n * h, ce, What::WeightCopy));
                let l = self.t(n * v, ce, What::Logits);
                self.tp.gemm(false);
                for c in [x_cast, w_cast].into_iter().flatten() {
                    self.drop(c);
                }
                let w_cast = (head.es != ce).then(|| self.t(v * h, ce, What::WeightCopy));
                let gi = self.t(n * h, ce, What::Grad);
                self.tp.gemm(false);
                if let Some(w) = w_cast {
                    self.drop(w);
                }
                self.drop(gi);
                Some(l)
            };
            if grad_weight.is_some() {
                // The head's gradient, accumulated per chunk (:317-372): `addmm(out=grad_weight)`
                // from the chunk cast to the logits' dtype when a 16-bit logits meets an fp32 or
                // same-dtype accumulator (compute capability 8 or more); an fp32 product
                // `torch.mm(grad_logits.t(), chunk)` added in otherwise.
                let le = if mm_out { fin.es } else { ce };
                let t = if le == 4 {
                    Some(self.t(v * h, 4, What::Grad))
                } else if fin.es != le {
                    Some(self.t(n * h, le, What::Grad))
                } else {
                    None
                };
                self.tp.gemm(false);
                if let Some(t) = t {
                    self.drop(t);
                }
            }
            if let Some(l) = logits {
                self.drop(l);
            }
            start += n;
        }
        if let Some(st) = storage {
            self.drop(st);
        }
        // loss = torch.sum(loss_1d) (the kernel scaled each row by the scored count)
        let mut loss = self.t(1, 4, What::Loss);
        let mut saved = vec![grad_input.t];
        saved.extend(grad_weight.map(|g| g.t));
        loss.g = self.tp.node(
            Op::Handed,
            1,
            4,
            &[Self::edge(&fin), Self::edge(&head)],
            &saved,
        );
        self.drop(mask);
        self.drop(loss_rows);
        self.drop(grad_input);
        if let Some(g) = grad_weight {
            self.drop(g);
        }
        if let Some(sh) = shift {
            self.drop(sh);
        }
        self.drop(pad);
        (loss.g, loss)
    }
}
