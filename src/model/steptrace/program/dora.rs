//! DoRA's Linear layer, op by op as peft 0.21 runs it in training (`DoraLinearVariant.forward`,
//! `peft/tuners/lora/variants.py:230-257`, and `DoraLinearLayer.forward`,
//! `peft/tuners/lora/dora.py:132-166`): the LoRA weight `B·A` made by multiplying an identity
//! matrix through both adapters, the base weight copied into the input's dtype, the row norm of
//! `W + s·B·A` (detached), the magnitude scale `m / ‖W + s·B·A‖`, and the output
//! `(scale − 1)·base + scale·s·B·A·x`. With dropout the base output is recomputed from the
//! dropped input and the weight copy, which `F.linear` then saves for backward.

use super::{bytes, Lin, Param, Prog};
use crate::model::steptrace::tape::{Op, X};
use crate::model::steptrace::What;

impl<'c, 'a> Prog<'c, 'a> {
    /// The rest of peft's `Linear.forward` for a DoRA adapter, from the base layer's `result`,
    /// the input cast to the adapter dtype (`xc`) and the input after dropout (`d`, which is
    /// `xc` without dropout), with the adapter's A, B and magnitude: the variant's output added
    /// to `result`, cast back as peft does.
    pub(super) fn dora_linear(
        &mut self,
        result: X,
        xc: X,
        d: X,
        lin: &Lin,
        (la, lb, m): (Param, Param, Param),
    ) -> X {
        let s = self.ctx.s;
        let (inf, outf) = (lin.shape.in_features as u64, lin.shape.out_features as u64);
        let tokens = d.n / inf;
        let out_n = tokens * outf;
        let r = s.lora_r;
        let dropout = s.lora_dropout > 0.0;
        // get_lora_weight: lora_B(lora_A(eye(in_features))).T, in lora_A's dtype.
        let eye = self.t(inf * inf, bytes(s.adapter_dtype), What::Dora);
        let ae = self.matmul(eye, la.x, inf * r, What::Dora);
        let lw = self.matmul(ae, lb.x, inf * outf, What::Dora);
        self.drop(ae);
        self.drop(eye);
        // lora_weight.to(x.dtype)
        let lwx = self.cast(lw, d.es, What::Dora);
        // The rebinding frees a copied-from tensor's storage; its graph lives on in the copy's.
        self.drop(lw);
        // weight = dequantize_module_weight(base_layer).to(x.dtype)
        let w = self.dequantized_weight(lin);
        let wx = self.cast(w, d.es, What::WeightCopy);
        self.drop(w);
        // get_weight_norm: ‖W + scaling · lora_weight‖ per row, no graph (lora_weight detached).
        let sc = self.t(outf * inf, lwx.es, What::Dora);
        let sum = self.t(outf * inf, lwx.es.max(wx.es), What::Dora);
        self.drop(sc);
        // linalg.norm runs in fp32 under autocast; `.to(weight.dtype)` casts it back.
        let norm = if s.autocast.is_some() && sum.es != 4 {
            let n32 = self.t(outf, 4, What::Dora);
            let n = self.t(outf, sum.es, What::Dora);
            self.drop(n32);
            n
        } else {
            self.t(outf, sum.es, What::Dora)
        };
        self.drop(sum);
        // mag_norm_scale = (magnitude / weight_norm.detach()).view(1, -1)
        let scale = {
            let es = m.x.es.max(norm.es);
            let mut y = self.t(outf, es, What::Dora);
            let saved = if m.x.grad() { vec![norm.t] } else { vec![] };
            y.g = self.tp.node(
                Op::Div,
                outf,
                es,
                &[Self::edge(&m.x), Self::edge(&norm)],
                &saved,
            );
            y
        };
        // lora_result = lora_B(lora_A(x))
        let a_out = self.matmul(d, la.x, tokens * r, What::Lora);
        let lora = self.matmul(a_out, lb.x, out_n, What::Lora);
        self.drop(a_out);
        // base_result: with dropout, F.linear(x, weight); else the base output (minus its bias).
        let base = if dropout {
            self.matmul(d, wx, out_n, What::Dora)
        } else if lin.shape.bias {
            self.copy_of(result, What::Dora)
        } else {
            self.tp.keep_local(result.t);
            result
        };
        // result_dora = (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling
        let minus1 = {
            let mut y = self.t(outf, scale.es, What::Dora);
            y.g = self
                .tp
                .node(Op::Pass, outf, scale.es, &[Self::edge(&scale)], &[]);
            y
        };
        let es = scale.es.max(base.es);
        let t1 = self.mul(minus1, base, out_n, es, What::Dora);
        self.drop(minus1);
        let t2 = self.mul(scale, lora, out_n, scale.es.max(lora.es), What::Lora);
        let t3 = self.mul_const(t2, What::Lora);
        self.drop(t2);
        let out = self.add(t1, t3, What::Lora);
        self.drop(t1);
        self.drop(t3);
        // The frame's locals die in order: base_result, lora_weight, weight, weight_norm,
        // mag_norm_scale, lora_result (x is the variant's, which returns after the sum).
        self.drop(base);
        self.discard(lwx);
        self.drop(wx);
        self.drop(norm);
        self.drop(scale);
        self.drop(lora);
        self.dora_output(result, xc, dropout.then_some(d), out)
    }

    /// `result = result + result_dora` (the variant, whose dropped input then dies), then peft's
    /// cast back to the base output's dtype (bitsandbytes layers only outside autocast), and the
    /// input cast dies.
    fn dora_output(&mut self, result: X, xc: X, dropped: Option<X>, dora: X) -> X {
        let s = self.ctx.s;
        let mod_es = result.es;
        let sum = self.add(result, dora, What::Lora);
        self.drop(dora);
        if let Some(d) = dropped {
            self.drop(d);
        }
        self.drop(result);
        let out = if s.quant.is_some() && s.autocast.is_some() {
            sum
        } else {
            let c = self.cast(sum, mod_es, What::LinearOut);
            self.drop(sum);
            c
        };
        self.drop(xc);
        out
    }

    /// `dequantize_module_weight(base_layer)`: the weight itself, or bitsandbytes' dequantized
    /// copy of a 4-bit weight (the nested absmax first with double quantization).
    fn dequantized_weight(&mut self, lin: &Lin) -> X {
        let s = self.ctx.s;
        if s.quant.is_none() {
            self.tp.keep_local(lin.w.x.t);
            return lin.w.x;
        }
        let n = (lin.shape.in_features * lin.shape.out_features) as u64;
        let nested = self.nested_absmax(n);
        let absmax = (nested > 0).then(|| self.t(nested, 4, What::Dora));
        let w = self.t(n, bytes(s.dtype), What::WeightCopy);
        if let Some(a) = absmax {
            self.drop(a);
        }
        w
    }

    /// Drops a value nothing downstream uses, with the graph only it reaches: each node's saved
    /// tensors are released as PyTorch frees the node with its last output.
    fn discard(&mut self, x: X) {
        self.tp.forget_chain(x.g);
        self.drop(x);
    }
}
