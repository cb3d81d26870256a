//! A fused linear cross-entropy in place of lm_head and the loss: Liger-Kernel's
//! `LigerForCausalLMLoss` (`liger_kernel/transformers/model/loss_utils.py`) over
//! `LigerFusedLinearCrossEntropyFunction` (`liger_kernel/ops/fused_linear_cross_entropy.py`,
//! `fused_linear_cross_entropy_forward`). The logits never exist whole: the forward runs the
//! rows in chunks, computes each chunk's logits, turns them into their gradient in place and
//! multiplies it into the hidden states' gradient, which it keeps for backward; backward hands
//! that gradient on (scaled in place).

use super::super::tape::Op;
use super::{bytes, Prog, What, X};
use crate::model::steptrace::tape::G;

impl Prog<'_, '_> {
    /// Rows per chunk: the next power of two of `rows / ⌈vocab / hidden⌉`
    /// (`chunk_size = triton.next_power_of_2(triton.cdiv(BT, inc_factor))`).
    pub(super) fn fused_ce_chunk_rows(&self, rows: u64) -> u64 {
        let a = self.ctx.arch;
        let inc = a.vocab_size.div_ceil(a.hidden_size.max(1)).max(1);
        rows.div_ceil(inc).max(1).next_power_of_two()
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
        // labels = pad(labels, (0, 1), ignore_index); shift_labels = labels[..., 1:].contiguous()
        let pad = self.t(s.sequences() * (s.seq + 1), 8, What::Loss);
        let shift = self.t(rows, 8, What::Loss);
        // fused_linear_cross_entropy_forward: the gradients it fills, the per-row loss, the
        // mask of scored rows (its sum read with .item()).
        let grad_input = self.t(rows * h, fin.es, What::Logits);
        let grad_weight = head.grad().then(|| self.t(head.n, head.es, What::Logits));
        let loss_rows = self.t(rows, 4, What::Loss);
        let mask = self.t(rows, 1, What::Loss);
        let count = self.t(1, 8, What::Loss);
        self.drop(count);
        // Each chunk: `_input_chunk @ weight.t()` (under autocast a cast of the chunk and of the
        // weight, which needs no gradient and is not cached), the kernel writes the logits'
        // gradient over them, then `grad_input[start:end] = grad_logits_chunk @ weight`.
        let ce = s.autocast.map_or(fin.es, bytes);
        let chunk = self.fused_ce_chunk_rows(rows);
        let mut logits: Option<X> = None;
        let mut start = 0;
        while start < rows {
            let n = chunk.min(rows - start);
            let x_cast = (fin.es != ce).then(|| self.t(n * h, ce, What::WeightCopy));
            let w_cast = (head.es != ce).then(|| self.t(v * h, ce, What::WeightCopy));
            let l = self.t(n * v, ce, What::Logits);
            self.tp.gemm(false);
            if let Some(w) = w_cast {
                self.drop(w);
            }
            if let Some(x) = x_cast {
                self.drop(x);
            }
            if let Some(old) = logits.replace(l) {
                self.drop(old);
            }
            let w_cast = (head.es != ce).then(|| self.t(v * h, ce, What::WeightCopy));
            let gi = self.t(n * h, ce, What::Grad);
            self.tp.gemm(false);
            if let Some(w) = w_cast {
                self.drop(w);
            }
            self.drop(gi);
            if grad_weight.is_some() {
                // torch.addmm(grad_weight, grad_logits_chunk.t().to(dtype), _input_chunk)
                let t = (ce != head.es).then(|| self.t(n * v, fin.es, What::Grad));
                self.tp.gemm(false);
                if let Some(t) = t {
                    self.drop(t);
                }
            }
            start += n;
        }
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
        if let Some(l) = logits {
            self.drop(l);
        }
        self.drop(mask);
        self.drop(loss_rows);
        self.drop(grad_input);
        if let Some(g) = grad_weight {
            self.drop(g);
        }
        self.drop(shift);
        self.drop(pad);
        // loss / num_items_in_batch (the Trainer's token count: reduction "sum")
        let scaled = self.mul_const(loss, What::Loss);
        self.drop(loss);
        (scaled.g, scaled)
    }
}
