//! The mixture-of-experts families' layer parts, op by op as transformers 5.24 + peft 0.21 run
//! them (`transformers/integrations/moe.py`, each family's modeling file, peft's
//! `ParamWrapper`): the router, the routed experts (`grouped_mm`, `eager`, `batched_mm`), LoRA on
//! the fused expert parameters, DeepSeek's shared experts and latent attention, gpt-oss's
//! attention with sinks.

use super::{bytes, Experts, FusedExperts, Lin, MoeParams, PerExpert, Prog};
use crate::model::arch::MoeLayout;
use crate::model::settings::{ExpertParam, ExpertsImpl};
use crate::model::steptrace::tape::{Edge, Mode, Op, Step, G, X};
use crate::model::steptrace::What;

const W: What = What::Experts;

/// An activated expert-LoRA wrapper: its parameter, the factor copies its proxy holds, and the
/// `W + B·A` computed on first access (cached until the outermost wrapper exits).
struct Wrapper {
    param: ExpertParam,
    lhs: X,
    rhs: X,
    weight: Option<X>,
}

impl<'c, 'a> Prog<'c, 'a> {
    /// One MoE block: router, experts, shared experts; returns the output and, for gpt-oss,
    /// the router scores the decoder layer holds in `_` until it returns.
    pub(super) fn moe_block(&mut self, x: X, li: usize, lins: &[Lin]) -> (X, Option<X>) {
        let a = self.ctx.arch;
        let Some(m) = self.moe.get(li).cloned().flatten() else {
            return (x, None);
        };
        if a.moe_layout().is_some_and(|l| l.all_experts) {
            let (out, logits) = self.all_experts_block(x, &m, lins);
            if self.ctx.s.output_router_logits && self.tp.mode != Mode::Recompute {
                self.tp.keep_local(logits.t);
                self.router_logits.push(logits);
            }
            return (out, Some(logits));
        }
        self.tp.push_frame();
        // Qwen3.5-MoE runs its shared expert first (`Qwen3NextSparseMoeBlock.forward`).
        let gated = a.gated_shared_expert().then(|| self.mlp(x, lins));
        self.tp.push_frame();
        let (logits, weights, idx) = self.router(x, &m);
        self.tp.pop_frame();
        if self.ctx.s.output_router_logits && self.tp.mode != Mode::Recompute {
            // The output recorder keeps each layer's logits for the load-balancing loss.
            self.tp.keep_local(logits.t);
            self.router_logits.push(logits);
        }
        // DeepSeek's block (shared experts added after the routed ones: DeepSeek-V2, GLM-4.5)
        // views its input into `[tokens, hidden]` after the router: a view node whose backward
        // hands the experts' input gradient on after the nodes made later (the expert LoRA's
        // weights) have run.
        let viewed = matches!(
            a.moe_layout().map(|l| l.shared),
            Some(crate::model::family::SharedExperts::Added { .. })
        ) && x.grad();
        let xe = if viewed {
            self.tp.keep_local(x.t);
            X {
                g: self.tp.node(Op::Pass, x.n, x.es, &[Self::edge(&x)], &[]),
                ..x
            }
        } else {
            x
        };
        self.tp.push_frame();
        let mut out = match (&m.experts, self.ctx.s.experts_run()) {
            (Experts::PerExpert(pe), _) => self.per_expert_experts(xe, weights, pe),
            // Liger's SwiGLU replaces the fused experts' class (`LigerExperts`), whatever
            // `experts_implementation` says.
            (Experts::Fused(f), _) if self.ctx.s.liger.swiglu => extended!(
                self,
                "Liger-Kernel's kernels",
                self.liger_experts(xe, weights, f),
                xe
            ),
            (Experts::Fused(f), ExpertsImpl::GroupedMm) => {
                self.grouped_experts(xe, idx, weights, f)
            }
            (Experts::Fused(f), ExpertsImpl::BatchedMm) => {
                self.batched_experts(xe, idx, weights, f)
            }
            (Experts::Fused(f), ExpertsImpl::Eager) => self.eager_experts(xe, idx, weights, f),
        };
        self.tp.pop_frame();
        if viewed {
            self.drop(xe);
        }
        let mut scaled_shared = None;
        if let Some(sh) = gated {
            // `F.sigmoid(self.shared_expert_gate(x)) * shared_expert_output`, then
            // `expert_output + shared_expert_output`; the product lives on in its local until
            // the block returns.
            let gate = lins
                .iter()
                .find(|l| l.shape.name == "shared_expert_gate")
                .cloned()
                .expect("the shared expert's gate is registered");
            let g = self.lora_linear(x, &gate);
            let sig = self.unary(g, g.es, W, false, true);
            self.drop(g);
            let prod = self.mul(sig, sh, sh.n, sh.es, What::Mlp);
            self.drop(sig);
            self.drop(sh);
            let sum = self.add(out, prod, What::Hidden);
            self.drop(out);
            out = sum;
            scaled_shared = Some(prod);
        } else if a.shared_width() > 0 {
            // `hidden_states = hidden_states + self.shared_experts(residuals)`
            let sh = self.mlp(x, lins);
            let sum = self.add(out, sh, What::Hidden);
            self.drop(sh);
            self.drop(out);
            out = sum;
        }
        // The block's locals: `_` (the logits), the weights, the indices.
        if let Some(p) = scaled_shared {
            self.drop(p);
        }
        self.drop(logits);
        let scores = if a.moe_layout().is_some_and(|l| l.softmax_after_topk) {
            self.drop(idx);
            Some(weights)
        } else {
            self.drop(weights);
            self.drop(idx);
            None
        };
        self.tp.pop_frame();
        (out, scores)
    }

    /// Top-k of `x` (`[tokens, cols]`): values (in x's dtype) and int64 indices; the backward
    /// scatters into a zero tensor of x's size.
    pub(super) fn topk(&mut self, x: X, k: u64) -> (X, X) {
        let n = self.tokens() * k;
        self.topk_n(x, n)
    }

    /// Top-k of `x` giving `n` values (in x's dtype) and `n` int64 indices; TopkBackward
    /// keeps the indices.
    fn topk_n(&mut self, x: X, n: u64) -> (X, X) {
        let mut vals = self.t(n, x.es, W);
        let idx = self.t(n, 8, W);
        vals.g = self
            .tp
            .node(Op::Scatter, n, x.es, &[Self::edge(&x)], &[idx.t]);
        (vals, idx)
    }

    /// Softmax over the last dimension (saves its output).
    fn softmax(&mut self, x: X) -> X {
        let mut y = self.t(x.n, x.es, W);
        y.g = self
            .tp
            .node(Op::Softmax, x.n, x.es, &[Self::edge(&x)], &[y.t]);
        y
    }

    /// The router: logits, probabilities, top-k, renormalisation, as each family computes them.
    /// Returns (logits, routing weights, expert indices).
    fn router(&mut self, x: X, m: &MoeParams) -> (X, X, X) {
        let ctx = self.ctx;
        let a = ctx.arch;
        let (t, e, k) = (
            self.tokens(),
            a.num_experts() as u64,
            a.experts_per_tok() as u64,
        );
        let w = m.router.x;
        let layout = a.moe_layout();
        let has = |flag: fn(&MoeLayout) -> bool| layout.as_ref().is_some_and(flag);
        if has(|l| l.sigmoid_groups) {
            return self.sigmoid_group_router(x, m);
        }
        if has(|l| l.softmax_after_topk) {
            // F.linear(h, W, b); topk of the logits; softmax over the k (logits' dtype).
            let logits = self.matmul(x, w, t * e, W);
            let (vals, idx) = self.topk(logits, k);
            let sc = self.softmax(vals);
            self.drop(vals);
            (logits, sc, idx)
        } else if has(|l| l.fp32_router) {
            // F.linear(h.float(), W.float()); softmax (fp32); topk (unsorted); × scaling.
            let hf = self.cast(x, 4, W);
            let logits = self.matmul(hf, w, t * e, W);
            self.drop(hf);
            let lf = self.cast(logits, 4, W);
            let sm = self.softmax(lf);
            self.drop(lf);
            let (vals, idx) = self.topk(sm, k);
            let scaled = self.mul_const(vals, W);
            self.drop(vals);
            self.drop(sm);
            (logits, scaled, idx)
        } else {
            // F.linear; softmax of the fp32 logits; topk; [renormalise in place]; Qwen3-MoE
            // and OLMoE cast the weights back to the logits' dtype. transformers 4's router is
            // an nn.Linear (a 4-bit one in a 4-bit model).
            let logits = match &m.experts {
                Experts::PerExpert(PerExpert {
                    router: Some(r), ..
                }) => self.plain_linear(x, r, t * e, W),
                Experts::PerExpert(_) | Experts::Fused(_) => self.matmul(x, w, t * e, W),
            };
            let lf = self.cast(logits, 4, W);
            let sm = self.softmax(lf);
            self.drop(lf);
            let (mut vals, idx) = self.topk(sm, k);
            if a.renorm_topk() {
                vals = self.renormalise(vals);
            }
            let weights = if has(|l| l.fp32_routing) {
                vals
            } else {
                let c = self.cast(vals, logits.es, W);
                self.drop(vals);
                c
            };
            self.drop(sm);
            (logits, weights, idx)
        }
    }

    /// GLM-4.5's router (`Glm4MoeTopkRouter.forward`, `modeling_glm4_moe.py:282-308`): fp32
    /// logits, sigmoid scores, the choice scores (plus the correction bias), the best groups by
    /// their two best scores, the other groups' experts masked to −∞, top-k, the chosen scores
    /// gathered, renormalised (`norm_topk_prob`) and scaled. The selection keeps no gradient
    /// path, but its autograd nodes keep their indices and mask until the router returns.
    /// Returns (logits, routing weights, expert indices).
    fn sigmoid_group_router(&mut self, x: X, m: &MoeParams) -> (X, X, X) {
        let a = self.ctx.arch;
        let (t, e, k) = (
            self.tokens(),
            a.num_experts() as u64,
            a.experts_per_tok() as u64,
        );
        let (g, kg) = a.expert_groups().unwrap_or((1, 1));
        let hf = self.cast(x, 4, W);
        let logits = self.matmul(hf, m.router.x, t * e, W);
        self.drop(hf);
        let scores = self.unary(logits, 4, W, false, true);
        // The choice of experts (`scores + e_score_correction_bias`, …) takes no gradient to
        // the loss: its autograd nodes die with their outputs, the locals below, when the
        // router returns; the tensors those nodes keep (the indices of the group top-2, the
        // inverted mask) die with them.
        let choice = self.t(t * e, 4, W);
        // .view(-1, n_group, experts per group).topk(2, dim=-1)[0].sum(dim=-1)
        // (a checkpointed forward, or one without a graph, keeps no saved tensor: those die at
        // once; its recomputation keeps them like a plain forward)
        let keeps = matches!(self.tp.mode, Mode::Grad | Mode::Recompute) && x.grad();
        let gv = self.t(t * g * 2, 4, W);
        let gi = self.t(t * g * 2, 8, W);
        if !keeps {
            self.drop(gi);
        }
        let group_scores = self.t(t * g, 4, W);
        self.drop(gv);
        let tv = self.t(t * kg, 4, W);
        let group_idx = self.t(t * kg, 8, W);
        self.drop(tv);
        // zeros_like, scatter_ (in place), the expanded mask reshaped (a copy unless there is
        // one group: then the expansion is a view), ~mask.bool()
        let group_mask = self.t(t * g, 4, W);
        let score_mask = (g > 1).then(|| self.t(t * e, 4, W));
        let as_bool = self.t(t * e, 1, W);
        let not = self.t(t * e, 1, W);
        self.drop(as_bool);
        let masked = self.t(t * e, 4, W);
        if !keeps {
            self.drop(not);
        }
        self.drop(choice);
        let kv = self.t(t * k, 4, W);
        let idx = self.t(t * k, 8, W);
        self.drop(kv);
        // scores.gather(1, topk_indices)
        let mut weights = self.t(t * k, 4, W);
        weights.g = self
            .tp
            .node(Op::Scatter, t * k, 4, &[Self::edge(&scores)], &[idx.t]);
        let mut denominator = None;
        if a.renorm_topk() {
            let (w, d) = self.renormalise_eps(weights);
            weights = w;
            denominator = Some(d);
        }
        let scaled = self.mul_const(weights, W);
        self.drop(weights);
        if let Some(d) = denominator {
            self.drop(d);
        }
        for x in [scores, masked, group_scores, group_idx, group_mask] {
            self.drop(x);
        }
        if keeps {
            self.drop(gi);
            self.drop(not);
        }
        if let Some(x) = score_mask {
            self.drop(x);
        }
        (logits, scaled, idx)
    }

    /// `denominator = v.sum(dim=-1, keepdim=True) + 1e-20; v /= denominator` (GLM-4.5): the
    /// sum, the shifted sum (saved by the division with autograd's copy of the values, and a
    /// local of the router until it returns: returned beside the result).
    fn renormalise_eps(&mut self, v: X) -> (X, X) {
        let t = self.tokens();
        let mut sum = self.t(t, v.es, W);
        sum.g = self.tp.node(Op::Pass, t, v.es, &[Self::edge(&v)], &[]);
        let mut den = self.t(t, v.es, W);
        den.g = self.tp.node(Op::Pass, t, v.es, &[Self::edge(&sum)], &[]);
        self.drop(sum);
        (self.divide_in_place(v, den), den)
    }

    /// `v /= den` in place on values that take a gradient (`den` one per token): autograd's
    /// copy of the values before the division, which the division saves with `den`.
    fn divide_in_place(&mut self, v: X, den: X) -> X {
        let t = den.n;
        let orig = self.t(v.n, v.es, W);
        let ed = Edge {
            to: den.g,
            n: t,
            es: v.es,
            sum_to: t,
        };
        let g = self
            .tp
            .node(Op::Div, v.n, v.es, &[Self::edge(&v), ed], &[den.t, orig.t]);
        self.drop(orig);
        X { g, ..v }
    }

    /// `v /= v.sum(dim=-1, keepdim=True)` in place: the sum, and autograd's copy of the values
    /// before the division (both saved).
    fn renormalise(&mut self, v: X) -> X {
        let t = self.tokens();
        if !v.grad() {
            // Without a graph (a layer before the first adapted one): the sum alone, divided in
            // place.
            let sum = self.t(t, v.es, W);
            self.drop(sum);
            return v;
        }
        let mut sum = self.t(t, v.es, W);
        sum.g = self.tp.node(Op::Pass, t, v.es, &[Self::edge(&v)], &[]);
        let y = self.divide_in_place(v, sum);
        self.drop(sum);
        y
    }

    /// `src[idx]` along the first dimension: `n` elements; the backward scatters into a zero
    /// tensor of src's size.
    fn gather_rows(&mut self, src: X, idx: X, n: u64) -> X {
        let mut y = self.t(n, src.es, W);
        y.g = self
            .tp
            .node(Op::Scatter, n, src.es, &[Self::edge(&src)], &[idx.t]);
        y
    }

    /// `torch._grouped_mm(x.to(W.dtype), W, offs)`: saves W (for x's gradient), the offsets,
    /// and x (for a W that needs a gradient: expert LoRA's `W + B·A`).
    fn grouped_mm(&mut self, x: X, w: X, offs: X, out_n: u64) -> X {
        let ed = bytes(self.ctx.expert);
        let xc = self.cast(x, ed, W);
        let mut y = self.t(out_n, ed, W);
        let mut saved = vec![];
        if xc.grad() {
            saved.push(w.t);
        }
        saved.push(offs.t);
        if w.grad() {
            saved.push(xc.t);
        }
        let ew = Edge {
            to: w.g,
            n: w.n,
            es: ed,
            sum_to: 0,
        };
        y.g = self.tp.node(
            Op::Mm { w_n: w.n, w_es: ed },
            out_n,
            ed,
            &[Self::edge(&xc), ew],
            &saved,
        );
        self.drop(xc);
        y
    }

    /// peft's ParamWrapper forwards, outermost (the last adapted parameter) first: each builds
    /// its `_LoraFactorsProxy` from copies of the factors in the parameter's dtype and registers
    /// it (the registration evaluates `W + B·A` once to check it and discards it).
    fn activate_expert_lora(&mut self, m: &FusedExperts) -> Vec<Wrapper> {
        let ctx = self.ctx;
        let ed = bytes(ctx.expert);
        let e = ctx.arch.num_experts() as u64;
        let r = ctx.s.lora_r;
        let transposed = ctx.arch.moe_layout().is_some_and(|l| l.transposed_experts);
        let mut out = vec![];
        for &(param, la, lb) in m.lora.iter().rev() {
            let (o, n) = crate::model::ctx::expert_param_shape(ctx, param);
            let (o, n) = (o as u64, n as u64);
            // weight_B.reshape(out, r, E).permute(2, 0, 1): its gradient arrives permuted, and
            // the reshape's backward copies it.
            let b_view = self.view_clone(lb.x);
            let a_view = la.x;
            let (l_src, r_src) = if transposed {
                (a_view, b_view)
            } else {
                (b_view, a_view)
            };
            let lhs = self.cast(l_src, ed, W);
            let rhs = self.cast(r_src, ed, W);
            self.drop(b_view);
            // register_parametrization (unsafe=False): one evaluation, discarded.
            let check = self.baddbmm(lhs, rhs, e * o * n);
            self.drop(check);
            self.tp.forget(check.g);
            let _ = r;
            out.push(Wrapper {
                param,
                lhs,
                rhs,
                weight: None,
            });
        }
        out
    }

    /// `torch.baddbmm(W, lhs, rhs, alpha)` of a frozen W: saves both factors.
    fn baddbmm(&mut self, lhs: X, rhs: X, n: u64) -> X {
        let ed = bytes(self.ctx.expert);
        let mut y = self.t(n, ed, W);
        y.g = self.tp.node(
            Op::Baddbmm,
            n,
            ed,
            &[Self::edge(&lhs), Self::edge(&rhs)],
            &[lhs.t, rhs.t],
        );
        y
    }

    /// The expert weight the experts' forward reads: the parameter, or with LoRA the cached
    /// `W + B·A` (computed on first access).
    fn expert_weight(&mut self, param: ExpertParam, base: X, wrappers: &mut [Wrapper]) -> X {
        let ctx = self.ctx;
        let Some(wr) = wrappers.iter_mut().find(|w| w.param == param) else {
            return base;
        };
        if let Some(w) = wr.weight {
            return w;
        }
        let (o, n) = crate::model::ctx::expert_param_shape(ctx, param);
        let e = ctx.arch.num_experts() as u64;
        let (lhs, rhs) = (wr.lhs, wr.rhs);
        let w = self.baddbmm(lhs, rhs, e * o as u64 * n as u64);
        if let Some(wr) = wrappers.iter_mut().find(|w| w.param == param) {
            wr.weight = Some(w);
        }
        w
    }

    /// The wrappers exit, innermost first: each removes its proxy (its factor copies); the
    /// outermost also clears the parametrization cache (the `W + B·A`, in computation order).
    fn deactivate_expert_lora(&mut self, mut wrappers: Vec<Wrapper>, order: &[ExpertParam]) {
        let cached: Vec<(ExpertParam, X)> = wrappers
            .iter()
            .filter_map(|w| w.weight.map(|x| (w.param, x)))
            .collect();
        while let Some(wr) = wrappers.pop() {
            if wrappers.is_empty() {
                for p in order {
                    if let Some(&(_, w)) = cached.iter().find(|(q, _)| q == p) {
                        self.drop(w);
                    }
                }
            }
            self.drop(wr.lhs);
            self.drop(wr.rhs);
        }
    }

    /// The routed experts' sizes: tokens, experts, experts per token, expert width, hidden.
    pub(super) fn expert_sizes(&self) -> (u64, u64, u64, u64, u64) {
        let a = self.ctx.arch;
        (
            self.tokens(),
            a.num_experts() as u64,
            a.experts_per_tok() as u64,
            a.expert_width() as u64,
            a.hidden_size,
        )
    }

    /// transformers' `grouped_mm_experts_forward`: the token–expert pairs sorted by expert, one
    /// grouped matmul per projection, weighted, unsorted and summed over the k.
    fn grouped_experts(&mut self, h: X, _idx: X, wts: X, m: &FusedExperts) -> X {
        let ctx = self.ctx;
        let a = ctx.arch;
        let (t, e, k, i, hd) = self.expert_sizes();
        let s = t * k;
        let biased = a.moe_layout().is_some_and(|l| l.clamped_glu);
        let mut wrappers = self.activate_expert_lora(m);
        let mut order: Vec<ExpertParam> = vec![];
        let sorted = self.t(s, 8, W);
        let perm = self.t(s, 8, W);
        let fd = self.t(s, 8, W);
        let xs = self.gather_rows(h, fd, s * hd);
        self.drop(fd);
        let ws = self.gather_rows(wts, perm, s);
        let ids = self.t(s, 4, W);
        let hist = self.t(e, 4, W);
        let offs = self.t(e, 4, W);
        if wrappers.iter().any(|w| w.param == ExpertParam::GateUp) {
            order.push(ExpertParam::GateUp);
        }
        let wgu = self.expert_weight(ExpertParam::GateUp, m.gate_up.x, &mut wrappers);
        let bias_gu = biased.then(|| self.t(s * 2 * i, bytes(ctx.expert), W));
        let gm1 = self.grouped_mm(xs, wgu, offs, s * 2 * i);
        let act = self.apply_gate(gm1);
        self.drop(gm1);
        if wrappers.iter().any(|w| w.param == ExpertParam::Down) {
            order.push(ExpertParam::Down);
        }
        let wd = self.expert_weight(ExpertParam::Down, m.down.x, &mut wrappers);
        let down_is_lora = wd.t != m.down.x.t;
        if down_is_lora {
            self.tp.keep_local(wd.t);
        }
        let bias_d = biased.then(|| self.t(s * hd, bytes(ctx.expert), W));
        if let Some(b) = bias_gu {
            self.drop(b);
        }
        let gm2 = self.grouped_mm(act, wd, offs, s * hd);
        self.drop(act);
        let wo_es = gm2.es.max(ws.es);
        let weighted = self.mul(gm2, ws, s * hd, wo_es, W);
        let inv = self.t(s, 8, W);
        let ar = self.t(s, 8, W);
        self.drop(ar);
        let unsorted = self.gather_rows(weighted, inv, s * hd);
        self.drop(weighted);
        // `.view(tokens, k, hidden).sum(dim=1)`: the view's backward copies the expanded gradient.
        let view = self.view_clone(unsorted);
        let mut summed = self.t(t * hd, wo_es, W);
        summed.g = self
            .tp
            .node(Op::Pass, t * hd, wo_es, &[Self::edge(&view)], &[]);
        self.drop(view);
        let out = self.cast(summed, h.es, What::Hidden);
        // The function's locals, in the order Python clears them.
        for x in [sorted, perm, xs, ws, ids, hist, offs] {
            self.drop(x);
        }
        if down_is_lora {
            self.drop(wd);
        }
        if let Some(b) = bias_d {
            self.drop(b);
        }
        for x in [gm2, unsorted, inv, summed] {
            self.drop(x);
        }
        self.deactivate_expert_lora(wrappers, &order);
        out
    }

    /// `x.clamp(max=limit)` or (`two_sided`) `x.clamp(-limit, limit)`, saving its input. Its
    /// backward (`clamp_backward`) is `where(mask, grad, 0)`: a zero scalar tensor, a bool mask
    /// per bound (`x > min`, `x < max`, the second anded into the first), then the `where`.
    fn clamp(&mut self, x: X, two_sided: bool) -> X {
        let mut y = self.t(x.n, x.es, W);
        let mut steps = vec![Step::Alloc(2), Step::Alloc(x.n)];
        if two_sided {
            steps.push(Step::Alloc(x.n));
        }
        let out = steps.len() as u16;
        steps.push(Step::Alloc(x.n * x.es));
        steps.extend((0..out).rev().map(Step::Free));
        steps.push(Step::GradOf {
            input: 0,
            local: out,
        });
        y.g = self
            .tp
            .script_node_of(steps, x.n, x.es, &[Self::edge(&x)], &[x.t]);
        y
    }

    /// `act(gate) * up` over the chunked gate_up output (one split node), or gpt-oss's clamped
    /// SwiGLU over its interleaved halves.
    fn apply_gate(&mut self, gu: X) -> X {
        let n = gu.n / 2;
        if self.ctx.arch.moe_layout().is_some_and(|l| l.clamped_glu) {
            let gate = self.slice_of(gu, n);
            let up = self.slice_of(gu, n);
            // gate.clamp(max=limit), up.clamp(-limit, limit)
            let gc = self.clamp(gate, false);
            self.drop(gate);
            let uc = self.clamp(up, true);
            self.drop(up);
            let ga = self.mul_const(gc, W);
            let sg = self.unary(ga, gu.es, W, false, true);
            self.drop(ga);
            let glu = self.mul(gc, sg, n, gu.es, W);
            self.drop(sg);
            let mut u1 = self.t(n, gu.es, W);
            u1.g = self.tp.node(Op::Pass, n, gu.es, &[Self::edge(&uc)], &[]);
            let out = self.mul(u1, glu, n, gu.es, W);
            self.drop(u1);
            self.drop(gc);
            self.drop(uc);
            self.drop(glu);
            return out;
        }
        // gate, up = gate_up.chunk(2): one SplitBackward node, whose backward concatenates the
        // two gradients into one tensor of the whole.
        let g = self.tp.node(Op::Join, gu.n, gu.es, &[Self::edge(&gu)], &[]);
        self.tp.keep_local(gu.t);
        self.tp.keep_local(gu.t);
        let gate = X { n, g, ..gu };
        let up = X { n, g, ..gu };
        let act = self.unary(gate, gu.es, W, true, false);
        let out = self.mul(act, up, n, gu.es, W);
        self.drop(act);
        self.drop(gate);
        self.drop(up);
        out
    }

    /// `batched_mm_experts_forward`: every token repeated k times, a copy of its experts'
    /// weights per pair, `bmm`.
    fn batched_experts(&mut self, h: X, idx: X, wts: X, m: &FusedExperts) -> X {
        let ctx = self.ctx;
        let a = ctx.arch;
        let (t, k, i, hd) = (
            self.tokens(),
            a.experts_per_tok() as u64,
            a.expert_width() as u64,
            a.hidden_size,
        );
        let s = t * k;
        let ed = bytes(ctx.expert);
        let mut wrappers = self.activate_expert_lora(m);
        let rep = {
            let mut y = self.t(s * hd, h.es, W);
            y.g = self
                .tp
                .node(Op::Slice, s * hd, h.es, &[Self::edge(&h)], &[]);
            y
        };
        let wgu = self.expert_weight(ExpertParam::GateUp, m.gate_up.x, &mut wrappers);
        let sel_gu = self.gather_rows(wgu, idx, s * 2 * i * hd);
        let gm1 = self.bmm_pairs(rep, sel_gu, s * 2 * i);
        let act = self.apply_gate(gm1);
        self.drop(gm1);
        let wd = self.expert_weight(ExpertParam::Down, m.down.x, &mut wrappers);
        let sel_d = self.gather_rows(wd, idx, s * hd * i);
        self.drop(sel_gu);
        let gm2 = self.bmm_pairs(act, sel_d, s * hd);
        self.drop(act);
        let wo_es = gm2.es.max(wts.es);
        let weighted = self.mul(gm2, wts, s * hd, wo_es, W);
        let mut summed = self.t(t * hd, wo_es, W);
        summed.g = self
            .tp
            .node(Op::Pass, t * hd, wo_es, &[Self::edge(&weighted)], &[]);
        let out = self.cast(summed, h.es, What::Hidden);
        for x in [rep, sel_d, gm2, weighted, summed] {
            self.drop(x);
        }
        let order: Vec<ExpertParam> = wrappers.iter().rev().map(|w| w.param).collect();
        self.deactivate_expert_lora(wrappers, &order);
        let _ = ed;
        out
    }

    /// `bmm` of each pair's input with its gathered weight copy (saved for the input's gradient).
    fn bmm_pairs(&mut self, x: X, w: X, out_n: u64) -> X {
        let ed = bytes(self.ctx.expert);
        let mut y = self.t(out_n, ed, W);
        let mut saved = vec![];
        if x.grad() {
            saved.push(w.t);
        }
        if w.grad() {
            saved.push(x.t);
        }
        y.g = self.tp.node(
            Op::Bmm,
            out_n,
            ed,
            &[Self::edge(&x), Self::edge(&w)],
            &saved,
        );
        y
    }

    /// The experts' Python loop (`experts_implementation="eager"`), with the routing balanced
    /// over the experts (the sizes depend on the routing; the saved total does not).
    fn eager_experts(&mut self, h: X, _idx: X, wts: X, m: &FusedExperts) -> X {
        let ctx = self.ctx;
        let (t, e, k, i, hd) = self.expert_sizes();
        let s = t * k;
        let ed = bytes(ctx.expert);
        let mut wrappers = self.activate_expert_lora(m);
        let mut fin = self.t(t * hd, h.es, W);
        let onehot = self.t(s * (e + 1), 8, W);
        let hit = self.t(e, 8, W);
        let wgu = self.expert_weight(ExpertParam::GateUp, m.gate_up.x, &mut wrappers);
        let wd = self.expert_weight(ExpertParam::Down, m.down.x, &mut wrappers);
        for x in 0..e {
            // Balanced: S / E pairs per expert (the remainder to the first ones).
            let ne = s / e + u64::from(x < s % e);
            if ne == 0 {
                continue;
            }
            let nz = self.t(ne * 2, 8, W);
            let cur = self.gather_rows(h, nz, ne * hd);
            let wv = X {
                n: 2 * i * hd,
                ..wgu
            };
            let gu = self.linear(cur, wv, ne * 2 * i, ed, W);
            let act = self.apply_gate(gu);
            self.drop(gu);
            let dv = X { n: hd * i, ..wd };
            let o = self.linear(act, dv, ne * hd, ed, W);
            self.drop(act);
            fin = self.add_expert_output(fin, o, wts, nz, ne);
            self.drop(cur);
            self.drop(nz);
        }
        self.drop(onehot);
        self.drop(hit);
        let order: Vec<ExpertParam> = wrappers.iter().rev().map(|w| w.param).collect();
        self.deactivate_expert_lora(wrappers, &order);
        fin
    }
}

impl<'c, 'a> Prog<'c, 'a> {
    /// The end of one expert's turn in the loop over the experts: its output `o` (`ne` routed
    /// tokens) times their routing weights, cast to the output's dtype and `index_add_`-ed into
    /// `fin` (which saves the indices and the source). Returns the new `fin`.
    fn add_expert_output(&mut self, fin: X, o: X, wts: X, nz: X, ne: u64) -> X {
        let (t, hd) = (self.tokens(), self.ctx.arch.hidden_size);
        let rw = self.gather_rows(wts, nz, ne);
        let wo_es = o.es.max(rw.es);
        let p = self.mul(o, rw, ne * hd, wo_es, W);
        self.drop(o);
        self.drop(rw);
        let src = self.cast(p, fin.es, W);
        self.drop(p);
        let mut out = fin;
        out.g = self.tp.node(
            Op::Add,
            t * hd,
            fin.es,
            &[
                Self::edge(&fin),
                Edge {
                    to: src.g,
                    n: ne * hd,
                    es: src.es,
                    sum_to: 0,
                },
            ],
            &[nz.t, src.t],
        );
        self.drop(src);
        out
    }

    /// transformers 4's loop over the experts hit (`MixtralSparseMoeBlock.forward`): the routed
    /// tokens gathered, the expert's `down(act(gate(x)) * up(x))` through its Linear layers,
    /// times their routing weights, cast back and `index_add_` into the output.
    fn per_expert_experts(&mut self, h: X, wts: X, pe: &PerExpert) -> X {
        let (t, e, k, i, hd) = self.expert_sizes();
        let s = t * k;
        let mut fin = self.t(t * hd, h.es, W);
        let onehot = self.t(s * e, 8, W);
        let hit = self.t(e, 8, W);
        for (x, [gate, up, down]) in pe.experts.iter().enumerate() {
            // Balanced: S / E pairs per expert (the remainder to the first ones).
            let x = x as u64;
            let ne = s / e + u64::from(x < s % e);
            if ne == 0 {
                continue;
            }
            let nz = self.t(ne * 2, 8, W);
            let cur = self.gather_rows(h, nz, ne * hd);
            let g = self.plain_linear(cur, gate, ne * i, W);
            let act = self.unary(g, g.es, W, true, false);
            self.drop(g);
            let u = self.plain_linear(cur, up, ne * i, W);
            let p = self.mul(act, u, ne * i, u.es, W);
            self.drop(act);
            self.drop(u);
            let o = self.plain_linear(p, down, ne * hd, W);
            self.drop(p);
            fin = self.add_expert_output(fin, o, wts, nz, ne);
            self.drop(cur);
            self.drop(nz);
        }
        self.drop(onehot);
        self.drop(hit);
        fin
    }

    /// A fused attention kernel (sdpa, flash) over q, k, v: output, logsumexp, rng state (and
    /// the additive mask when one is given), all saved.
    pub(super) fn fused_attention(&mut self, q: X, k: X, v: X, mask: Option<X>, out_n: u64) -> X {
        let ctx = self.ctx;
        let s = ctx.s;
        let heads = ctx.arch.num_attention_heads;
        let ad = bytes(ctx.attn);
        let efficient = ctx.attn == crate::model::dtype::Dtype::Fp32 || mask.is_some();
        let vc = self.cast(v, ad, What::Attention);
        let kc = self.cast(k, ad, What::Attention);
        let qc = self.cast(q, ad, What::Attention);
        let bias = mask.map(|m| {
            let s1 = self.t(1, ad, What::Attention);
            let s2 = self.t(1, ad, What::Attention);
            let w = self.t(m.n, ad, What::Attention);
            self.drop(s2);
            self.drop(s1);
            w
        });
        let mut o = self.t(out_n, ad, What::Attention);
        let rows = if efficient {
            s.seq.div_ceil(32) * 32
        } else {
            s.seq
        };
        let lse = self.t(s.sequences() * heads * rows, 4, What::Attention);
        let seed = self.t(1, 8, What::Attention);
        let off = self.t(1, 8, What::Attention);
        let mut saved = vec![kc.t, qc.t, vc.t, lse.t, o.t, off.t, seed.t];
        if let Some(b) = bias {
            saved.insert(0, b.t);
        }
        o.g = self.tp.node(
            Op::Attention,
            out_n,
            ad,
            &[Self::edge(&qc), Self::edge(&kc), Self::edge(&vc)],
            &saved,
        );
        for x in [lse, seed, off, kc, vc, qc] {
            self.drop(x);
        }
        if let Some(b) = bias {
            self.drop(b);
        }
        o
    }

    /// Two views of `x` split along its last dimension (`torch.split` / `chunk`): one node whose
    /// backward concatenates both gradients.
    pub(super) fn split2(&mut self, x: X, n0: u64, n1: u64) -> (X, X) {
        let g = self.tp.node(Op::Join, x.n, x.es, &[Self::edge(&x)], &[]);
        self.tp.keep_local(x.t);
        self.tp.keep_local(x.t);
        (X { n: n0, g, ..x }, X { n: n1, g, ..x })
    }

    /// `torch.cat` of two tensors into a new one (its backward: views of the gradient).
    fn cat2(&mut self, a: X, b: X, what: What) -> X {
        let mut y = self.t(a.n + b.n, a.es.max(b.es), what);
        y.g = self
            .tp
            .node(Op::Split, y.n, y.es, &[Self::edge(&a), Self::edge(&b)], &[]);
        y
    }

    /// DeepSeek's multi-head latent attention (`DeepseekV2Attention.forward`): q (or q_a →
    /// q_a_layernorm → q_b), the compressed kv split into its latent and rotary parts, the
    /// latent normed and expanded by kv_b_proj, the rotary parts rotated as complex numbers,
    /// the query concatenated, the key assembled in a new tensor.
    pub(super) fn latent_attention(
        &mut self,
        x: X,
        lins: &[Lin],
        freqs: X,
        mask: Option<X>,
    ) -> (X, Option<X>) {
        let ctx = self.ctx;
        let a = ctx.arch;
        let Some(m) = a.mla() else { return (x, None) };
        let t = self.tokens();
        let heads = a.num_attention_heads;
        let (nope, rope, vd, kvr) = (m.nope as u64, m.rope as u64, m.v as u64, m.kv_rank as u64);
        let named = |n: &str| lins.iter().find(|l| l.shape.name == n).cloned();
        let q = match (named("q_proj"), named("q_a_proj"), named("q_b_proj")) {
            (Some(qp), _, _) => self.lora_linear(x, &qp),
            (None, Some(qa), Some(qb)) => {
                let qa_out = self.lora_linear(x, &qa);
                let n = self.rmsnorm(qa_out, m.q_rank.unwrap_or(1) as u64);
                self.drop(qa_out);
                let q = self.lora_linear(n, &qb);
                self.drop(n);
                q
            }
            _ => return (x, None),
        };
        let qv = self.view_clone(q);
        self.drop(q);
        let (q_nope, q_pe) = self.split2(qv, t * heads * nope, t * heads * rope);
        let Some(kva) = named("kv_a_proj_with_mqa") else {
            return (x, None);
        };
        let ckv = self.lora_linear(x, &kva);
        let (kv_nope, k_pe) = self.split2(ckv, t * kvr, t * rope);
        let k_lat = self.rmsnorm_of_view(kv_nope, kvr);
        // apply_rotary_emb: fp32 copies viewed as complex, times freqs_cis, back to the dtype.
        let fq = self.cast(q_pe, 4, What::Rope);
        let fk = self.cast(k_pe, 4, What::Rope);
        let cq = self.complex_mul_by(fq, freqs, false);
        let q_rot = self.cast(cq, q_pe.es, What::Rope);
        self.drop(cq);
        let ck = self.complex_mul_by(fk, freqs, false);
        let k_rot = self.cast(ck, k_pe.es, What::Rope);
        self.drop(ck);
        self.drop(fq);
        self.drop(fk);
        let query = self.cat2(q_nope, q_rot, What::Attention);
        // expand_kv: kv_b_proj(latent).view().transpose(); split into k_nope and the values;
        // the key is a new tensor filled with k_nope and the rotary part expanded to all heads.
        let Some(kvb) = named("kv_b_proj") else {
            return (x, None);
        };
        let kvo = self.lora_linear(k_lat, &kvb);
        let kvv = self.view_clone(kvo);
        self.drop(kvo);
        let (k_nope, value) = self.split2(kvv, t * heads * nope, t * heads * vd);
        let key = self.assemble_key(k_nope, k_rot, t * heads, nope, rope);
        self.drop(kvv);
        self.drop(k_nope);
        // (Eager attention's probabilities are the decoder layer's `_` until it returns.)
        let mut weights = None;
        let out = if ctx.s.attn_impl == crate::model::settings::AttnImpl::Eager {
            let (o, w) = self.eager_attention(query, key, value, mask);
            weights = Some(w);
            o
        } else {
            let o = self.fused_attention(query, key, value, mask, t * heads * vd);
            let efficient = ctx.attn == crate::model::dtype::Dtype::Fp32 || mask.is_some();
            if efficient {
                o
            } else {
                // The query is a new cat, contiguous in (b, h, s, d): so is cuDNN's output, and
                // `sdpa_attention_forward`'s `transpose(1, 2).contiguous()` copies it (the
                // memory-efficient kernel writes (b, s, h, d) whatever q's layout: no copy).
                let c = self.copy_of(o, What::Attention);
                self.drop(o);
                c
            }
        };
        let Some(op) = named("o_proj") else {
            return (out, weights);
        };
        let o = self.lora_linear(out, &op);
        self.drop(out);
        for v in [
            qv, q_nope, q_pe, ckv, kv_nope, k_pe, k_lat, q_rot, k_rot, query, key, value,
        ] {
            self.drop(v);
        }
        (o, weights)
    }

    /// gpt-oss's rotary: the two halves of the head rotated by cos/sin (half the head width)
    /// and concatenated.
    fn half_rope(&mut self, x: X, cos: X, sin: X) -> X {
        let half = x.n / 2;
        let (first, second) = self.split2(x, half, half);
        // Each half takes two gradients, summed in its own slot of the chunk's node as they
        // arrive: a pass-through node per half keeps the two sums apart.
        let slot = |p: &mut Self, h: X| X {
            g: p.tp.node(Op::Pass, h.n, h.es, &[Self::edge(&h)], &[]),
            ..h
        };
        let first = slot(self, first);
        let second = slot(self, second);
        let t1 = self.mul_by(first, cos);
        let t2 = self.mul_by(second, sin);
        // first_ = first_half * cos - second_half * sin: the subtrahend's gradient is negated.
        let f = self.broadcast(t1, t2, t1.n, Op::Sub, What::Rope);
        self.drop(t1);
        self.drop(t2);
        let t3 = self.mul_by(second, cos);
        let t4 = self.mul_by(first, sin);
        let g = self.add(t3, t4, What::Rope);
        self.drop(t3);
        self.drop(t4);
        let out = self.cat2(f, g, What::Rope);
        for v in [first, second, f, g] {
            self.drop(v);
        }
        out
    }

    /// `x * c` with a constant tensor `c` (saved for x's gradient).
    fn mul_by(&mut self, x: X, c: X) -> X {
        let mut y = self.t(x.n, x.es.max(c.es), What::Rope);
        y.g = self
            .tp
            .node(Op::MulConst, x.n, y.es, &[Self::edge(&x)], &[c.t]);
        y
    }

    /// `expand_kv`'s key (modeling_deepseek_v2.py:359-364): `new_empty`, then
    /// `key[..., :nope].copy_(k_nope)` and `key[..., nope:].copy_(k_rot.expand(heads))`. Each
    /// in-place copy into a slice is a `CopySlices` node (torch/csrc/autograd/functions/
    /// tensor.cpp, `CopySlices::apply_impl`) whose backward copies the incoming gradient into a
    /// new tensor of the whole key (`new_empty_strided`), clones the slice's part contiguously
    /// for the copied source, and, when the key before the copy needs a gradient (the second
    /// copy's), zeroes that part through a `zeros_like` of it; the rotary part's expand sums its
    /// gradient over the heads in a node of its own, which runs after the first copy's.
    fn assemble_key(&mut self, k_nope: X, k_rot: X, rows: u64, nope: u64, rope: u64) -> X {
        let es = k_nope.es;
        let mut key = self.t(rows * (nope + rope), es, What::Attention);
        let expanded = self.tp.node(
            Op::Pass,
            rows * rope,
            k_rot.es,
            &[Edge {
                to: k_rot.g,
                n: rows * rope,
                es: k_rot.es,
                sum_to: k_rot.n,
            }],
            &[],
        );
        let first = self.tp.script_node_of(
            vec![
                Step::Alloc(key.n * es),
                Step::Alloc(rows * nope * es),
                Step::Free(0),
                Step::GradOf { input: 0, local: 1 },
            ],
            key.n,
            es,
            &[Self::edge(&k_nope)],
            &[],
        );
        let zeroed = first != G::No;
        let mut steps = vec![Step::Alloc(key.n * es), Step::Alloc(rows * rope * es)];
        if zeroed {
            steps.extend([Step::Alloc(rows * rope * es), Step::Free(2)]);
        }
        steps.extend([
            Step::GradOf { input: 0, local: 0 },
            Step::GradOf { input: 1, local: 1 },
        ]);
        key.g = self.tp.script_node_of(
            steps,
            key.n,
            es,
            &[
                Edge {
                    to: first,
                    n: key.n,
                    es,
                    sum_to: 0,
                },
                Edge {
                    to: expanded,
                    n: rows * rope,
                    es: k_rot.es,
                    sum_to: 0,
                },
            ],
            &[],
        );
        key
    }

    /// `x * c` of complex64 numbers: `x` is fp32 viewed as complex (pairs of its elements), `c`
    /// the complex table (saved for x's gradient); the product has x's bytes. Its backward,
    /// `grad * c.conj()`, resolves the lazy conjugate into a copy of `c` first; an incoming
    /// gradient that arrives strided (`grad_strided`) is first copied contiguous to be viewed as
    /// complex, and freed.
    pub(super) fn complex_mul_by(&mut self, x: X, c: X, grad_strided: bool) -> X {
        let mut y = self.t(x.n, x.es, What::Rope);
        let mut steps = vec![];
        if grad_strided {
            steps.extend([Step::Alloc(x.n * x.es), Step::FreeIncoming]);
        }
        // (the conjugate's and the product's locals follow the copy's, if any)
        let k = u16::from(grad_strided);
        steps.extend([
            Step::Alloc(c.n * c.es),
            Step::Alloc(x.n * x.es),
            Step::Free(k),
        ]);
        if grad_strided {
            steps.push(Step::Free(0));
        }
        steps.push(Step::GradOf {
            input: 0,
            local: k + 1,
        });
        y.g = self
            .tp
            .script_node_of(steps, x.n, y.es, &[Self::edge(&x)], &[c.t]);
        y
    }

    /// gpt-oss's attention: q, k, v with biases, rotated halves, and eager attention over the
    /// scores concatenated with one sink logit per head (max-subtracted softmax, the sink
    /// column dropped); flash kernels from the Hub instead keep only output and logsumexp.
    pub(super) fn sink_attention(
        &mut self,
        x: X,
        lins: &[Lin],
        cos: X,
        sin: X,
        mask: Option<X>,
    ) -> (X, Option<X>) {
        let ctx = self.ctx;
        let a = ctx.arch;
        let s = ctx.s;
        let (b, sq) = (s.sequences(), s.seq);
        let heads = a.num_attention_heads;
        let kvh = a.kv_heads().max(1);
        let rep = heads / kvh;
        let Some([ql, kl, vl, ol]) = super::qkvo(lins) else {
            return (x, None);
        };
        let eager = s.attn_impl != crate::model::settings::AttnImpl::FlashAttention2;
        let liger_rope = s.liger.rope;
        // Liger's RoPE hands back q's and k's gradients copied contiguous (eager attention's
        // arrive in (batch, heads, seq, dim)): their views' backward then copies nothing.
        let rope_copies = (eager && heads > 1, eager && kvh > 1);
        let view = |p: &mut Self, x: X, copied: bool| {
            if liger_rope && copied {
                x
            } else {
                let t = p.view_clone(x);
                p.drop(x);
                t
            }
        };
        let q = self.lora_linear(x, &ql);
        let qv = view(self, q, rope_copies.0);
        let k = self.lora_linear(x, &kl);
        let kv = view(self, k, rope_copies.1);
        let v = self.lora_linear(x, &vl);
        let vv = self.view_clone(v);
        self.drop(v);
        let (qe, ke) = if liger_rope {
            // `liger_rotary_pos_emb_gpt_oss`: Liger's RoPE over the whole head, in place on the
            // projections' views; eager attention's gradients arrive contiguous in (batch,
            // heads, seq, dim), which its backward copies (k's through repeat_kv's sum).
            extended!(
                self,
                "Liger-Kernel's kernels",
                self.liger_rope((qv, kv), (cos, sin), (false, false), rope_copies),
                (qv, kv)
            )
        } else {
            (self.half_rope(qv, cos, sin), self.half_rope(kv, cos, sin))
        };
        self.drop(qv);
        self.drop(kv);
        let t = self.tokens();
        if s.attn_impl == crate::model::settings::AttnImpl::FlashAttention2 {
            let o = self.fused_attention(qe, ke, vv, None, t * heads * a.head_dim());
            let out = self.lora_linear(o, &ol);
            self.drop(o);
            self.drop(qe);
            self.drop(ke);
            self.drop(vv);
            return (out, None);
        }
        let es = qe.es;
        let (kk, vk) = if rep > 1 {
            (self.repeat_kv(ke, rep), self.repeat_kv(vv, rep))
        } else {
            self.tp.keep_local(ke.t);
            self.tp.keep_local(vv.t);
            (ke, vv)
        };
        let sn = b * heads * sq * sq;
        // After Liger's RoPE q (and k without repeat_kv's copy) are views of their projections,
        // which matmul copies where it cannot view them (saved in their place).
        let (copy_q, copy_k) = if liger_rope {
            ctx.eager_matmul_copies_qk()
        } else {
            (false, false)
        };
        let qb = self.matmul_operand(qe, copy_q);
        let kb = self.matmul_operand(kk, copy_k);
        let mut sc = self.t(sn, es, What::Scores);
        sc.g = self.tp.node(
            Op::Bmm,
            sn,
            es,
            &[Self::edge(&qb), Self::edge(&kb)],
            &[kb.t, qb.t],
        );
        self.drop(qb);
        self.drop(kb);
        let scaled = self.mul_const(sc, What::Scores);
        self.drop(sc);
        let masked = {
            let mut y = self.t(sn, es, What::Scores);
            y.g = self.tp.node(Op::Pass, sn, es, &[Self::edge(&scaled)], &[]);
            y
        };
        self.drop(scaled);
        let _ = mask;
        let cn = b * heads * sq * (sq + 1);
        let mut comb = self.t(cn, es, What::Scores);
        comb.g = self.tp.node(Op::Split, cn, es, &[Self::edge(&masked)], &[]);
        // combined - combined.max(-1, keepdim=True).values
        let mut mx = self.t(b * heads * sq, es, What::Scores);
        let mi = self.t(b * heads * sq, 8, What::Scores);
        mx.g = self
            .tp
            .node(Op::Scatter, mx.n, es, &[Self::edge(&comb)], &[mi.t]);
        // (`.values` of the (values, indices) pair: the indices live on only if saved.)
        self.drop(mi);
        let sub = self.broadcast(comb, mx, cn, Op::Sub, What::Scores);
        self.drop(mx);
        self.drop(comb);
        let probs = {
            let mut y = self.t(cn, es, What::Scores);
            y.g = self
                .tp
                .node(Op::Softmax, cn, es, &[Self::edge(&sub)], &[y.t]);
            y
        };
        // scores = probs[..., :-1] (a view; its backward pads a zero tensor of the full size)
        let g = self.tp.node(Op::Slice, sn, es, &[Self::edge(&probs)], &[]);
        self.tp.keep_local(probs.t);
        let scores = X { n: sn, g, ..probs };
        // (`attn_weights`, the masked scores, is rebound to the dropped-out scores only now.)
        self.drop(masked);
        let on = vk.n;
        let mut o = self.t(on, es, What::Attention);
        o.g = self.tp.node(
            Op::Bmm,
            on,
            es,
            &[Self::edge(&scores), Self::edge(&vk)],
            &[vk.t, scores.t],
        );
        let c = self.eager_output(o);
        self.drop(o);
        self.drop(kk);
        self.drop(vk);
        // (`combined_logits` is the function's local until it returns.)
        self.drop(sub);
        self.drop(probs);
        let out = self.lora_linear(c, &ol);
        self.drop(c);
        self.drop(qe);
        self.drop(ke);
        self.drop(vv);
        (out, Some(scores))
    }
}

impl<'c, 'a> Prog<'c, 'a> {
    /// `load_balancing_loss_func` over the recorded router logits: per layer a softmax (saved),
    /// top-k, the experts' histogram and the probabilities' sum in fp32; then the scalar loss.
    pub(super) fn load_balancing(&mut self, logits: &[X]) -> Option<X> {
        if logits.is_empty() {
            return None;
        }
        let a = self.ctx.arch;
        let (t, e, k) = (
            self.tokens(),
            a.num_experts() as u64,
            a.experts_per_tok() as u64,
        );
        let mut tpe = self.t(e, 4, W);
        let mut rps = self.t(e, 4, W);
        for &lg in logits {
            // Each layer's share of the loss belongs to that layer.
            self.tp.on_behalf_of(lg.t);
            let sm = self.softmax(lg);
            let (vals, idx) = self.topk(sm, k);
            self.drop(vals);
            let ids = self.t(t * k, 4, W);
            let h = self.t(e, 4, W);
            self.drop(ids);
            let n = self.t(e, 4, W);
            self.drop(h);
            self.drop(tpe);
            tpe = n;
            let f = self.cast(sm, 4, W);
            let mut sum = self.t(e, 4, W);
            sum.g = self.tp.node(Op::Pass, e, 4, &[Self::edge(&f)], &[]);
            self.drop(f);
            let n = self.add(rps, sum, W);
            self.drop(sum);
            self.drop(rps);
            rps = n;
            self.drop(idx);
            self.drop(sm);
        }
        self.tp.exec = crate::model::steptrace::tape::NO_LAYER;
        let per_expert = self.t(e, 4, W);
        self.drop(tpe);
        let probs = self.mul_const(rps, W);
        self.drop(rps);
        let prod = self.mul(per_expert, probs, e, 4, W);
        self.drop(per_expert);
        self.drop(probs);
        let mut total = self.t(1, 4, W);
        total.g = self.tp.node(Op::Pass, 1, 4, &[Self::edge(&prod)], &[]);
        self.drop(prod);
        let out = self.mul_const(total, W);
        self.drop(total);
        Some(out)
    }
}
