//! Packing. Padding-free ([`crate::model::Settings::packing`]): the micro-batch flattened into
//! one row whose position ids restart at every packed document, with no attention mask
//! (transformers' `DataCollatorWithFlattening`, TRL's padding-free collator). The step runs on
//! that row (`Settings::as_run`); what differs from an unpacked row is the mask attention is
//! given.
//! With no 2-D mask and no cache, `masking_utils._preprocess_mask_arguments`
//! (`masking_utils.py:862-870`) looks for packed documents in the position ids
//! (`find_packed_sequence_indices`, `:735-764`) and, finding them, `create_causal_mask`
//! (`:991-1002`) builds the block-causal boolean mask of the row, `tokens × tokens` bytes,
//! shared by every layer; sdpa then turns it into each layer's additive bias and runs the
//! memory-efficient kernel, as for a padded batch; eager attention makes it additive
//! (`eager_mask`). LLaMA-Factory's neat packing ([`crate::model::Settings::neat_packing`]) keeps
//! a row per sample and brings each row's additive 4-D mask with the batch, which attention takes
//! as it is. Measured with the harness's `attention_mask: "packed"` and `"neat"`
//! (`tests/data/steptrace/README.md`).

use super::super::tape::X;
use super::super::What;
use super::Prog;

impl<'c, 'a> Prog<'c, 'a> {
    /// `find_packed_sequence_indices(position_ids)` then `sdpa_mask` with the causal function
    /// remapped to the documents' positions and the same-document function (`and_masks`); the
    /// mask over the one packed row, and the documents' indices (which the caller frees).
    pub(super) fn packed_mask(&mut self) -> (X, X) {
        let t = self.ctx.s.seq;
        // position_ids[:, :1] - 1; torch.diff(…, prepend=…): the cat, then the difference
        let first = self.t(1, 8, What::Input);
        let cat = self.t(t + 1, 8, What::Input);
        let diff = self.t(t, 8, What::Input);
        self.drop(cat);
        // (position_diff != 1).cumsum(-1)
        let ne = self.t(t, 1, What::Input);
        let docs = self.t(t, 8, What::Input);
        self.drop(ne);
        self.drop(first);
        self.drop(diff);
        // `(packed_sequence_mask[:, -1] == 0).all()`: the eager test finds documents
        let eq = self.t(1, 1, What::Input);
        let all = self.t(1, 1, What::Input);
        self.drop(eq);
        self.drop(all);
        let indices = self.mask_indices(1, t);
        // and_masks: `result = q_idx.new_ones((), dtype=bool)`, then for each function
        // `result = result & f(…)`: the causal function on the documents' positions
        // (position_ids[b, q] <= position_ids[b, kv]), then the same-document function
        // (docs[b, q] == docs[b, kv]), each indexing its two operands first.
        let mut mask = self.t(1, 1, What::Input);
        for _ in 0..2 {
            let q = self.t(t, 8, What::Input);
            let kv = self.t(t, 8, What::Input);
            let test = self.t(t * t, 1, What::Mask);
            self.drop(q);
            self.drop(kv);
            let and = self.t(t * t, 1, What::Mask);
            self.drop(test);
            self.drop(mask);
            mask = and;
        }
        for x in indices {
            self.drop(x);
        }
        (mask, docs)
    }

    /// Eager attention's mask: padding-free packing's boolean mask made additive
    /// (`eager_mask`: `torch.where(mask, 0, min)` in the attention dtype, the boolean one freed
    /// after), or neat packing's, which the batch brings additive already (a 4-D mask is taken
    /// as it is).
    pub(super) fn packed_eager_mask(&mut self) -> Option<X> {
        if self.ctx.s.neat_packing {
            return self.neat_mask.inspect(|m| self.tp.keep_local(m.t));
        }
        let es = self.ctx.attn.bytes() as u64;
        let t = self.ctx.s.seq;
        let (mask, docs) = self.packed_mask();
        let zero = self.t(1, es, What::Input);
        let min = self.t(1, es, What::Input);
        let additive = self.t(t * t, es, What::Mask);
        self.drop(min);
        self.drop(zero);
        self.drop(mask);
        self.drop(docs);
        Some(additive)
    }

    /// LLaMA-Factory's neat_packing batch (`SFTDataCollatorWith4DAttentionMask`,
    /// `data/collator.py`): input ids, the block-diagonal causal 4-D mask
    /// `prepare_4d_attention_mask` builds on the host in the compute dtype (in place of the
    /// documents' indices), the position ids, then the labels `DataCollatorForSeq2Seq` appends;
    /// each moved to the GPU by `Trainer._prepare_inputs`.
    pub(super) fn neat_inputs(&mut self) {
        let s = self.ctx.s;
        let n = self.tokens();
        let es = s.neat_mask_dtype().bytes() as u64;
        self.t(n, 8, What::Input);
        self.neat_mask = Some(self.t(n.saturating_mul(s.seq), es, What::Mask));
        self.packed_pos = Some(self.t(n, 8, What::Input));
        self.t(n, 8, What::Input);
    }
}
