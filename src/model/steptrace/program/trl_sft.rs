//! An SFT step as TRL 1.16's `SFTTrainer` runs it (`logits: fused`): the collator's batch
//! (`DataCollatorForLanguageModeling`, `trl/trainer/sft_trainer.py:168-226`: input ids, labels
//! and an attention mask of ones), the decoder stack, then the fused LM head that
//! `SFTTrainer.__init__` adds (`add_fused_lm_head(…, outputs=("log_probs", "entropy",
//! "is_top1"))`, `sft_trainer.py:1140-1146`), which scores every next-token position in
//! `[4096 × 32768]` tiles without the `[batch, seq, vocab]` logits ([`Prog::fused_head`]), and
//! `compute_loss`'s NLL over the log-probs with its logged metrics
//! (`sft_trainer.py:1610-1657`). Measured with the harness's `method_kind: "trl_sft"`
//! (`tests/data/steptrace/README.md`, `tests/data/reference/trl_sft/`).

use super::super::tape::{Op, G, X};
use super::super::What;
use super::Prog;

impl<'c, 'a> Prog<'c, 'a> {
    /// `SFTTrainer.compute_loss` on the collator's batch: the model call with
    /// `fused_lm_head=True`, `loss = (-log_probs).sum() / label_mask.sum().clamp(min=1)`, then
    /// the entropy, token-accuracy and token-count metrics; returns the loss's node and the
    /// loss.
    pub(super) fn sft_fused_forward(&mut self) -> (G, X) {
        // The head's outputs are scattered back to every next-token position.
        let s = self.ctx.s;
        let rows = s.sequences() * s.seq.saturating_sub(1);
        let (fin, _, _) = self.body(true);
        let head = self.fused_head(fin);
        // per_token_loss = -outputs.log_probs
        let mut neg = self.t(rows, 4, What::Loss);
        neg.g = self
            .tp
            .node(Op::Unary, rows, 4, &[Self::edge(&head.logp)], &[]);
        // num_tokens = outputs.label_mask.sum()
        let count = self.t(1, 8, What::Loss);
        // per_token_loss.sum(): its backward expands the gradient (a view)
        let mut sum = self.t(1, 4, What::Loss);
        sum.g = self.tp.node(Op::Pass, 1, 4, &[Self::edge(&neg)], &[]);
        // torch.as_tensor(num_tokens).clamp(min=1), which the division saves
        let clamped = self.t(1, 8, What::Loss);
        let mut loss = self.t(1, 4, What::Loss);
        loss.g = self.tp.node(
            Op::Div,
            1,
            4,
            &[Self::edge(&sum), Self::edge(&clamped)],
            &[clamped.t],
        );
        self.drop(sum);
        self.drop(clamped);
        // The metrics (`sft_trainer.py:1640-1657`): the label count, the entropy sum and the
        // top-1 count, each `.sum()`ed again after `gather_for_metrics`; two ratios read with
        // `.item()` behind a `num_valid > 0` test; the attention mask's token count.
        let mut kept = vec![];
        for es in [8, 4, 8] {
            let first = self.t(1, es, What::Loss);
            kept.push(self.t(1, es, What::Loss));
            self.drop(first);
        }
        for _ in 0..2 {
            let test = self.t(1, 1, What::Loss);
            self.drop(test);
            let ratio = self.t(1, 4, What::Loss);
            self.drop(ratio);
        }
        let tokens = self.t(1, 8, What::Loss);
        let gathered = self.t(1, 8, What::Loss);
        self.drop(tokens);
        self.drop(gathered);
        // The frame returns: the model output's fields, then its locals.
        if let Some(c) = head.count {
            self.drop(c);
        }
        self.drop(head.loss);
        self.drop(head.logp);
        self.drop_opt(head.entropy);
        self.drop_opt(head.mean);
        self.drop_opt(head.top1);
        self.drop(head.mask);
        self.drop(neg);
        self.drop(count);
        for x in kept {
            self.drop(x);
        }
        self.clear_autocast_cache();
        (loss.g, loss)
    }
}
