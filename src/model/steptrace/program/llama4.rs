//! Llama 4's layer parts, op by op as transformers 5.24 runs them (`modeling_llama4.py`): the
//! attention that rotates q and k as complex numbers and L2-normalises them on three layers of
//! four and scales the queries by position on the fourth (`Llama4TextAttention`), and the
//! mixture of experts in which every expert runs on every token (`Llama4TextMoe`,
//! `Llama4TextExperts`, `Llama4Router`).

use super::{Experts, Lin, MoeParams, Prog};
use crate::model::arch::QkNorm;
use crate::model::steptrace::tape::{Op, Step, X};
use crate::model::steptrace::What;

const W: What = What::Experts;

impl<'c, 'a> Prog<'c, 'a> {
    /// `Llama4TextAttention.forward` (:335-391) of layer `li`, over sdpa: causal without a mask
    /// on the layers without rotary, and on the rotary ones while the sequence is shorter than
    /// the attention chunk; through the chunked `mask` from there on.
    pub(super) fn rotary_or_nope_attention(
        &mut self,
        x: X,
        lins: &[Lin],
        freqs: X,
        mask: Option<X>,
        li: usize,
    ) -> (X, Option<X>) {
        let a = self.ctx.arch;
        let Some([ql, kl, vl, ol]) = super::qkvo(lins) else {
            return (x, None);
        };
        let t = self.tokens();
        let hd = a.head_dim();
        // q_proj(x).view(...), k_proj(x).view(...), v_proj(x).view(...).transpose(1, 2).
        let rotates = a.rotates(li as u64);
        // Through the chunked mask, k's and v's gradients come back from repeat_kv's reduction,
        // contiguous in (batch, heads, seq, dim): v's view copies its gradient, and k's complex
        // product copies its own before viewing it as complex (one kv head: no copy either).
        let masked = mask.is_some() && a.kv_heads() > 1;
        let q = self.lora_linear(x, &ql);
        let k = self.lora_linear(x, &kl);
        let v = self.lora_linear(x, &vl);
        let v = if masked {
            let t = self.view_clone(v);
            self.drop(v);
            t
        } else {
            v
        };
        let mut locals = vec![];
        let (qn, kn) = if rotates {
            // apply_rotary_emb (:239-248): fp32 copies viewed as complex, times the table, back
            // to the dtype; its locals die when it returns.
            let fq = self.cast(q, 4, What::Rope);
            let fk = self.cast(k, 4, What::Rope);
            let cq = self.complex_mul_by(fq, freqs, false);
            let ck = self.complex_mul_by(fk, freqs, masked);
            let qr = self.cast(cq, q.es, What::Rope);
            let kr = self.cast(ck, k.es, What::Rope);
            for y in [fq, fk, cq, ck, q, k] {
                self.drop(y);
            }
            if a.qk_norm() == QkNorm::L2AfterRotary {
                let qn = self.l2_norm(qr, hd);
                self.drop(qr);
                let kn = self.l2_norm(kr, hd);
                self.drop(kr);
                (qn, kn)
            } else {
                (qr, kr)
            }
        } else if a.temperature_tuned() {
            // `positions` and `attn_scales` are the forward's locals until it returns.
            let (qs, kept) = self.temperature_scaled(q);
            locals.extend(kept);
            self.drop(q);
            (qs, k)
        } else {
            (q, k)
        };
        // From the attention chunk on, the rotary layers attend through the chunked mask.
        let out = match mask {
            None => self.fused_attention(qn, kn, v, None, t * a.q_dim() as u64),
            Some(m) => self.masked_attention(qn, kn, v, m),
        };
        let o = self.lora_linear(out, &ol);
        self.drop(out);
        for y in [qn, kn, v] {
            self.drop(y);
        }
        for y in locals {
            self.drop(y);
        }
        (o, None)
    }

    /// sdpa over the chunked mask (`sdpa_attention_forward`): k and v repeated for every query
    /// head first (transformers uses sdpa's own grouped-query attention only without a mask),
    /// the boolean mask made an additive bias in the compute dtype, and cuDNN's kernel, whose
    /// log-sum-exp has one row per position; the kernel saves its inputs, the bias and its
    /// outputs. The repeated k and v are `sdpa_attention_forward`'s locals until it returns.
    fn masked_attention(&mut self, q: X, k: X, v: X, mask: X) -> X {
        let s = self.ctx.s;
        let a = self.ctx.arch;
        let heads = a.num_attention_heads;
        let rep = heads / a.kv_heads().max(1);
        let es = q.es;
        let kr = self.repeat_kv(k, rep);
        let vr = self.repeat_kv(v, rep);
        let s1 = self.t(1, es, What::Attention);
        let s2 = self.t(1, es, What::Attention);
        let bias = self.t(mask.n, es, What::Mask);
        self.drop(s2);
        self.drop(s1);
        let mut o = self.t(self.tokens() * a.q_dim() as u64, es, What::Attention);
        let lse = self.t(s.sequences() * heads * s.seq, 4, What::Attention);
        let seed = self.t(1, 8, What::Attention);
        let off = self.t(1, 8, What::Attention);
        o.g = self.tp.node(
            Op::Attention,
            o.n,
            es,
            &[Self::edge(&q), Self::edge(&kr), Self::edge(&vr)],
            &[bias.t, kr.t, q.t, vr.t, lse.t, o.t, off.t, seed.t],
        );
        for x in [lse, seed, off, bias, kr, vr] {
            self.drop(x);
        }
        o
    }

    /// `create_chunked_causal_mask` (`masking_utils.py:1380-1460`) for chunks of `chunk`
    /// tokens: each sequence's left padding (without an attention mask, `torch.zeros(batch)`),
    /// then — once the keys reach the chunk, below which sdpa runs causal without a mask
    /// (`_ignore_causal_mask_sdpa`: `kv_length < local_size`) — the boolean `[batch, 1, seq,
    /// seq]` mask: the index tensors, each side's chunk number (`(idx − left) // chunk`), their
    /// equality and the causal order. Returns the mask, held until the model's forward returns.
    pub(super) fn chunked_mask(&mut self, chunk: u64) -> Option<X> {
        let s = self.ctx.s;
        let (b, sq) = (s.sequences(), s.seq);
        let left = self.t(b, 8, What::Input);
        if sq < chunk {
            self.drop(left);
            return None;
        }
        let [bi, hi, q, kv] = self.mask_indices(b, sq);
        let one = self.t(1, 1, What::Input);
        let chunk_of = |p: &mut Self| {
            let idx = p.t(b, 8, What::Input);
            let sub = p.t(b * sq, 8, What::Input);
            p.drop(idx);
            let fl = p.t(b * sq, 8, What::Input);
            p.drop(sub);
            fl
        };
        let kv_chunk = chunk_of(self);
        let q_chunk = chunk_of(self);
        let eq = self.t(b * sq * sq, 1, What::Mask);
        self.drop(kv_chunk);
        self.drop(q_chunk);
        let and1 = self.t(b * sq * sq, 1, What::Mask);
        self.drop(eq);
        self.drop(one);
        let le = self.t(sq * sq, 1, What::Mask);
        let and2 = self.t(b * sq * sq, 1, What::Mask);
        self.drop(le);
        self.drop(and1);
        for x in [bi, hi, q, kv, left] {
            self.drop(x);
        }
        Some(and2)
    }

    /// `Llama4TextL2Norm` (:106-118) over rows of `width`: `x.float()`, `x * rsqrt(mean(x²) +
    /// eps)` in one expression, `.type_as(x)`; the product saves the fp32 copy and the rsqrt.
    pub(super) fn l2_norm(&mut self, x: X, width: u64) -> X {
        let rows = x.n / width;
        let hs = self.cast(x, 4, What::Norm);
        let mut p = self.t(hs.n, 4, What::Norm);
        p.g = self
            .tp
            .node(Op::PowLike, hs.n, 4, &[Self::edge(&hs)], &[hs.t]);
        let mut var = self.t(rows, 4, What::Norm);
        var.g = self.tp.node(Op::Mean, rows, 4, &[Self::edge(&p)], &[]);
        self.drop(p);
        let mut eps = self.t(rows, 4, What::Norm);
        eps.g = self.tp.node(Op::Pass, rows, 4, &[Self::edge(&var)], &[]);
        self.drop(var);
        let mut rs = self.t(rows, 4, What::Norm);
        rs.g = self
            .tp
            .node(Op::PowLike, rows, 4, &[Self::edge(&eps)], &[rs.t]);
        self.drop(eps);
        let normed = self.mul(hs, rs, hs.n, 4, What::Norm);
        self.drop(rs);
        self.drop(hs);
        let out = self.cast(normed, x.es, What::Hidden);
        self.drop(normed);
        out
    }

    /// Temperature tuning (:366-373): the positions (an arange plus the cache offset), their
    /// scales `log1p(floor((pos + 1) / floor_scale)) × attn_scale + 1` in fp32, one op at a
    /// time, and the queries times the scales (fp32, saving the scales) cast back. Returns the
    /// scaled queries and the two locals (positions, scales).
    fn temperature_scaled(&mut self, q: X) -> (X, [X; 2]) {
        let sq = self.ctx.s.seq;
        let ar = self.t(sq, 8, What::Attention);
        let pos = self.t(sq, 8, What::Attention);
        self.drop(ar);
        let mut prev = self.t(sq, 4, What::Attention);
        // + 1.0, / floor_scale, floor, log1p, × attn_scale, + 1.0
        for _ in 0..6 {
            let next = self.t(sq, 4, What::Attention);
            self.drop(prev);
            prev = next;
        }
        let scales = prev;
        let mut y = self.t(q.n, 4, What::Attention);
        y.g = self
            .tp
            .node(Op::MulConst, q.n, 4, &[Self::edge(&q)], &[scales.t]);
        let out = self.cast(y, q.es, What::Attention);
        self.drop(y);
        (out, [pos, scales])
    }

    /// `Llama4TextMoe.forward` (:166-175) with its router (:147-153) and experts (:66-85):
    /// returns the block's output and the router logits (the decoder layer's `_` until it
    /// returns).
    pub(super) fn all_experts_block(&mut self, x: X, m: &MoeParams, lins: &[Lin]) -> (X, X) {
        let (t, e, k, i, h) = self.expert_sizes();
        let es = x.es;
        // The router: logits, top-k, the values scattered into a row of −∞ (whose backward
        // gathers the values' gradient), the sigmoid of that in fp32, cast back.
        self.tp.push_frame();
        let logits = self.matmul(x, m.router.x, t * e, W);
        let (vals, idx) = self.topk(logits, k);
        let mut full = self.t(t * e, es, W);
        full.g = self.tp.script_node_of(
            vec![Step::Alloc(t * k * es)],
            t * e,
            es,
            &[Self::edge(&vals)],
            &[idx.t],
        );
        let f32 = self.cast(full, 4, W);
        let sig = self.unary(f32, 4, W, false, true);
        self.drop(f32);
        let scores = self.cast(sig, es, W);
        self.drop(sig);
        self.drop(full);
        self.drop(vals);
        self.drop(idx);
        self.tp.pop_frame();
        // routed_in = x.repeat(E, 1) * scores.transpose(0, 1).reshape(-1, 1)
        let mut rep = self.t(e * t * h, es, W);
        rep.g = self.tp.script_node_of(
            vec![Step::Alloc(t * h * es)],
            e * t * h,
            es,
            &[Self::edge(&x)],
            &[],
        );
        let col = self.copy_of(scores, W);
        let routed_in = self.mul(rep, col, e * t * h, es, W);
        self.drop(rep);
        self.drop(col);
        self.tp.push_frame();
        let routed_out = match &m.experts {
            // The experts: bmm with gate_up_proj, chunk, up * silu(gate), bmm with down_proj.
            Experts::Fused(f) => {
                let gu = self.linear(routed_in, f.gate_up.x, e * t * 2 * i, es, W);
                let (gate, up) = self.split2(gu, e * t * i, e * t * i);
                let act = self.unary(gate, es, What::Mlp, true, false);
                let prod = self.mul(up, act, e * t * i, es, What::Mlp);
                self.drop(act);
                let routed_out = self.linear(prod, f.down.x, e * t * h, es, W);
                self.drop(prod);
                for y in [gu, gate, up] {
                    self.drop(y);
                }
                routed_out
            }
            Experts::PerExpert(pe) => self.sequential_experts(routed_in, pe),
        };
        self.tp.pop_frame();
        // out = shared_expert(x); out.add_(routed_out.reshape(E, T, H).sum(dim=0))
        let out = self.mlp(x, lins);
        // The sum's gradient is the incoming one expanded over the experts (a stride-0 view).
        // The fused experts' output is `[E·T, H]`, and the reshape's backward copies the view
        // into a tensor of that size; the sequential experts' is `[E, T, H]` already.
        let mut sum = self.t(t * h, es, W);
        sum.g = match m.experts {
            Experts::Fused(_) => self.tp.script_node_of(
                vec![Step::Alloc(e * t * h * es)],
                t * h,
                es,
                &[Self::edge(&routed_out)],
                &[],
            ),
            Experts::PerExpert(_) => {
                self.tp
                    .node(Op::Pass, t * h, es, &[Self::edge(&routed_out)], &[])
            }
        };
        let g = self.tp.node(
            Op::Add,
            t * h,
            es,
            &[Self::edge(&out), Self::edge(&sum)],
            &[],
        );
        self.drop(sum);
        let out = X { g, ..out };
        for y in [scores, routed_in, routed_out] {
            self.drop(y);
        }
        (out, logits)
    }

    /// `SequentialLlama4TextExperts.forward` (transformers' `quantizers/base.py:394-403`, the
    /// experts of a checkpoint saved quantized): the scaled input viewed `[E, T, H]`, a
    /// `zeros_like` output, and for each expert in turn its `Llama4TextMLP` on its slice of the
    /// input, written into its slice of the output (`routed_out[e] = ...`). Backward: each
    /// write's `CopySlices` copies the incoming gradient whole, clones the slice for the MLP
    /// and (where the previous writes need a gradient) zeroes it with a `zeros_like`; each
    /// slice's input gradient becomes a whole `select_backward` tensor, summed into the input's.
    fn sequential_experts(&mut self, routed_in: X, pe: &super::PerExpert) -> X {
        let (t, e, _, _, h) = self.expert_sizes();
        let es = routed_in.es;
        let mut out = self.t(e * t * h, es, W);
        for lins in &pe.experts {
            self.tp.keep_local(routed_in.t);
            let slice = X {
                n: t * h,
                g: self.tp.script_node_of(
                    vec![Step::Alloc(e * t * h * es)],
                    t * h,
                    es,
                    &[Self::edge(&routed_in)],
                    &[],
                ),
                ..routed_in
            };
            let y = self.mlp(slice, lins);
            let zeroes = out.grad();
            let mut steps = vec![Step::Alloc(e * t * h * es), Step::Alloc(t * h * es)];
            if zeroes {
                steps.extend([Step::Alloc(t * h * es), Step::Free(2)]);
            }
            steps.extend([
                Step::FreeIncoming,
                Step::GradOf { input: 0, local: 0 },
                Step::GradOf { input: 1, local: 1 },
            ]);
            out.g = self.tp.script_node_of(
                steps,
                e * t * h,
                es,
                &[Self::edge(&out), Self::edge(&y)],
                &[],
            );
            self.drop(y);
            self.drop(slice);
        }
        out
    }
}
