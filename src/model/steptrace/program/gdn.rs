//! A hybrid family's Gated DeltaNet layer (linear attention), op by op as transformers 5.24 runs
//! it without the fla / causal-conv1d kernels (`Qwen3_5GatedDeltaNet.forward`,
//! `models/qwen3_5/modeling_qwen3_5.py:543-656`, and the torch fallbacks `causal_conv1d_fn`
//! (:256-277), `l2norm` (:280-284) and `torch_chunk_gated_delta_rule` (:287-426)):
//! - the four input projections (Qwen3-Next's two fused ones untangled into copies, see
//!   [`Prog::untangle`]), the depthwise causal convolution over q, k, v (its output
//!   `kernel − 1` positions longer, sliced) and its SiLU;
//! - β = sigmoid(b) and the decay `g = −exp(A_log) · softplus(a + dt_bias)` in fp32;
//! - q and k repeated to the value heads, everything copied to fp32 and transposed, q and k
//!   L2-normalised, q scaled, all of them padded to a multiple of the 64-token chunk;
//! - per chunk: the decays, the triangular system `(k·β)kᵀ ∘ decay` solved for the new values
//!   and the decayed keys, the intra-chunk attention, then a sequential scan over the chunks
//!   carrying the `[heads, key, value]` fp32 state (each chunk's state and corrected values are
//!   what backward needs);
//! - the gated RMSNorm (`Qwen3_5RMSNormGated`, :204-220) with SiLU(z) in fp32, and out_proj.
//!
//! Each tensor is created, saved for backward and freed where PyTorch does; the harness's
//! recordings (`tests/data/reference/models26/`) hold the sequence to its measured peaks.

use super::{Lin, Prog};
use crate::model::steptrace::tape::{Edge, Op, Step, G, X};
use crate::model::steptrace::What;

/// The chunk the torch fallback scans the sequence in (`chunk_size=64`).
const CHUNK: u64 = 64;

/// What the input projections hand the rest of the layer: the convolution's input, the output
/// gate z, β's and the decay's inputs, and what else the forward keeps bound.
struct Front {
    qkv: X,
    z: X,
    bb: X,
    aa: X,
    /// q, k and v as the convolution's input was concatenated from (Qwen3-Next).
    parts: Option<[X; 3]>,
    /// The two projections' outputs, bound until the forward returns (Qwen3-Next).
    projections: Option<[X; 2]>,
}

impl<'c, 'a> Prog<'c, 'a> {
    /// A view of `x` (no new storage) of `n` elements whose gradient goes through `g`.
    fn view(&mut self, x: X, n: u64, g: G) -> X {
        self.tp.keep_local(x.t);
        X { n, g, ..x }
    }

    /// `x[..., i]`-like select of `n` elements: a view whose backward fills a zero tensor of
    /// `x`'s size (`select_backward`).
    fn select(&mut self, x: X, n: u64) -> X {
        let g = self.tp.node(Op::Slice, n, x.es, &[Self::edge(&x)], &[]);
        self.view(x, n, g)
    }

    /// A batched matrix product of two activations (`out_n` elements in `a`'s dtype), saving
    /// each operand the other's gradient needs.
    fn bmm(&mut self, a: X, b: X, out_n: u64) -> X {
        let mut y = self.t(out_n, a.es, What::LinearAttn);
        let mut saved = vec![];
        if a.grad() {
            saved.push(b.t);
        }
        if b.grad() {
            saved.push(a.t);
        }
        y.g = self.tp.node(
            Op::Bmm,
            out_n,
            a.es,
            &[Self::edge(&a), Self::edge(&b)],
            &saved,
        );
        y
    }

    /// A copy of `x` into a new storage of `n` elements (padding, `contiguous`), whose backward
    /// makes a gradient of `x`'s size.
    fn copy_to(&mut self, x: X, n: u64) -> X {
        let mut y = self.t(n, x.es, What::LinearAttn);
        y.g = self.tp.node(Op::Unary, n, x.es, &[Self::edge(&x)], &[]);
        y
    }

    /// `a + b` with broadcasting (neither saved).
    fn add_bcast(&mut self, a: X, b: X, n: u64) -> X {
        self.broadcast(a, b, n, Op::Add, What::LinearAttn)
    }

    /// `a − b` with broadcasting (neither saved; backward negates `b`'s gradient).
    fn sub_bcast(&mut self, a: X, b: X, n: u64) -> X {
        self.broadcast(a, b, n, Op::Sub, What::LinearAttn)
    }

    /// `l2norm(x)`: `x * rsqrt(sum(x·x) + eps)` over rows of `width`.
    fn l2norm(&mut self, x: X, width: u64) -> X {
        let rows = x.n / width;
        let sq = self.mul(x, x, x.n, x.es, What::LinearAttn);
        let sum = {
            let mut y = self.t(rows, x.es, What::LinearAttn);
            y.g = self.tp.node(Op::Pass, rows, x.es, &[Self::edge(&sq)], &[]);
            y
        };
        self.drop(sq);
        let eps = {
            let mut y = self.t(rows, x.es, What::LinearAttn);
            y.g = self.tp.node(Op::Pass, rows, x.es, &[Self::edge(&sum)], &[]);
            y
        };
        self.drop(sum);
        let rs = {
            let mut y = self.t(rows, x.es, What::LinearAttn);
            y.g = self
                .tp
                .node(Op::PowLike, rows, x.es, &[Self::edge(&eps)], &[y.t]);
            y
        };
        self.drop(eps);
        let out = self.mul(x, rs, x.n, x.es, What::LinearAttn);
        self.drop(rs);
        out
    }

    /// The Gated DeltaNet token mixer of a linear layer, from the normed hidden states `x`;
    /// `lins` are the layer's in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Qwen3-Next:
    /// in_proj_qkvz, in_proj_ba) and out_proj.
    pub(super) fn gated_delta_net(&mut self, x: X, lins: &[Lin]) -> X {
        let ctx = self.ctx;
        let Some(g) = ctx.arch.gdn() else { return x };
        let s = ctx.s;
        let (b, sq) = (s.sequences(), s.seq);
        let t = b * sq;
        let es = x.es;
        let (hk, hv, dk, dv) = (g.key_heads, g.value_heads, g.key_dim, g.value_dim);
        let (kd, vd, conv) = (g.key_width(), g.value_width(), g.conv_dim());
        let rep = hv / hk.max(1);
        let sp = sq.div_ceil(CHUNK) * CHUNK;
        let nck = sp / CHUNK;
        let named = |n: &str| lins.iter().find(|l| l.shape.name == n).cloned();
        let Some(l_out) = named("out_proj") else {
            return x;
        };
        let front = if g.fused_in_proj {
            let (Some(l_qkvz), Some(l_ba)) = (named("in_proj_qkvz"), named("in_proj_ba")) else {
                return x;
            };
            self.untangle(x, &l_qkvz, &l_ba, [t * kd, t * vd, t * hv])
        } else {
            let (Some(l_qkv), Some(l_z), Some(l_b), Some(l_a)) = (
                named("in_proj_qkv"),
                named("in_proj_z"),
                named("in_proj_b"),
                named("in_proj_a"),
            ) else {
                return x;
            };
            // The convolution reads in_proj_qkv's output transposed, and β is transposed into
            // heads-major fp32: with several sequences their gradients come back strided, and
            // the views of these projections' outputs copy them.
            self.strided_grad = b > 1;
            let qkv = self.lora_linear(x, &l_qkv);
            self.strided_grad = false;
            let z = self.lora_linear(x, &l_z);
            self.strided_grad = b > 1;
            let bb = self.lora_linear(x, &l_b);
            self.strided_grad = false;
            let aa = self.lora_linear(x, &l_a);
            Front {
                qkv,
                z,
                bb,
                aa,
                parts: None,
                projections: None,
            }
        };
        let Front {
            qkv,
            z,
            bb,
            aa,
            parts,
            projections,
        } = front;

        // causal_conv1d_fn: F.conv1d(padding = kernel − 1) saves its input; [:, :, :seq] is a
        // view; SiLU saves that view.
        let conv_n = b * conv * (sq + g.conv_kernel - 1);
        let conv_out = {
            let mut y = self.t(conv_n, es, What::LinearAttn);
            y.g = self
                .tp
                .node(Op::Unary, conv_n, es, &[Self::edge(&qkv)], &[qkv.t]);
            y
        };
        let sliced = self.select(conv_out, t * conv);
        self.drop(conv_out);
        let mixed = self.unary(sliced, es, What::LinearAttn, true, false);
        self.drop(sliced);
        // `mixed_qkv` is rebound to the convolution's output when the function returns;
        // Qwen3-Next's flattened q, k and v when `query, key, value` are rebound to its split.
        self.drop(qkv);
        for x in parts.into_iter().flatten() {
            self.drop(x);
        }
        // split into q, k, v views (one node whose backward concatenates the three gradients),
        // each reshaped into heads: v's gradient arrives transposed, so its view's backward
        // copies (as do q's and k's when no repeat_interleave made theirs contiguous).
        let j = self
            .tp
            .node(Op::Join3, mixed.n, es, &[Self::edge(&mixed)], &[]);
        let heads_view = |p: &mut Self, n: u64, copies: bool| -> X {
            let x = p.view(mixed, n, j);
            if copies {
                let y = p.view_clone(x);
                p.drop(x);
                y
            } else {
                x
            }
        };
        let q = heads_view(self, t * kd, rep <= 1);
        let k = heads_view(self, t * kd, rep <= 1);
        let v = heads_view(self, t * vd, true);

        // β and the decay g.
        let beta = self.unary(bb, es, What::LinearAttn, false, true);
        let a_log = self.t(hv, 4, What::LinearAttn);
        let a_exp = self.t(hv, 4, What::LinearAttn);
        self.drop(a_log);
        let neg_a = self.t(hv, 4, What::LinearAttn);
        self.drop(a_exp);
        let af = self.cast(aa, 4, What::LinearAttn);
        let adt = {
            let mut y = self.t(af.n, 4, What::LinearAttn);
            y.g = self.tp.node(Op::Pass, af.n, 4, &[Self::edge(&af)], &[]);
            y
        };
        self.drop(af);
        let sp_out = self.unary(adt, 4, What::LinearAttn, true, false);
        self.drop(adt);
        let gdec = self.mul(sp_out, neg_a, sp_out.n, 4, What::LinearAttn);
        self.drop(neg_a);
        self.drop(sp_out);

        // torch_chunk_gated_delta_rule: q, k repeated to the value heads.
        let repeat = |p: &mut Self, x: X| -> X {
            if rep <= 1 {
                p.tp.keep_local(x.t);
                return x;
            }
            let mut y = p.t(x.n * rep, x.es, What::LinearAttn);
            let e = Edge {
                to: x.g,
                n: x.n,
                es: x.es,
                sum_to: x.n,
            };
            y.g = p.tp.node(Op::Pass, y.n, x.es, &[e], &[]);
            y
        };
        let qr = repeat(self, q);
        let kr = repeat(self, k);
        // `.transpose(1, 2).to(float32, contiguous_format)`: a copy when the dtype changes
        // (the decay, already fp32, stays a strided view).
        let q32 = self.cast(qr, 4, What::LinearAttn);
        let k32 = self.cast(kr, 4, What::LinearAttn);
        let v32 = self.cast(v, 4, What::LinearAttn);
        let b32 = self.cast(beta, 4, What::LinearAttn);
        self.drop(qr);
        self.drop(kr);
        let qn = self.l2norm(q32, dk);
        self.drop(q32);
        let kn = self.l2norm(k32, dk);
        self.drop(k32);
        let qs = self.mul_const(qn, What::LinearAttn);
        self.drop(qn);
        // F.pad to whole chunks (a copy even with nothing to pad).
        let rows = b * hv * sp;
        let qp = self.copy_to(qs, rows * dk);
        let kp = self.copy_to(kn, rows * dk);
        let vp = self.copy_to(v32, rows * dv);
        self.drop(qs);
        self.drop(kn);
        self.drop(v32);
        let bp = self.copy_to(b32, rows);
        let dp = self.copy_to(gdec, rows);
        self.drop(b32);
        let v_beta0 = self.mul(vp, bp, vp.n, 4, What::LinearAttn);
        let k_beta0 = self.mul(kp, bp, kp.n, 4, What::LinearAttn);
        // The reshapes into chunks are views; the gradients reaching k·β and v·β come from the
        // triangular solves in column-major order, so their views' backward copies.
        let k_beta = self.view_clone(k_beta0);
        self.drop(k_beta0);
        let v_beta = self.view_clone(v_beta0);
        self.drop(v_beta0);
        let ones = self.t(CHUNK * CHUNK, 1, What::LinearAttn);
        let mask = self.t(CHUNK * CHUNK, 1, What::LinearAttn);
        self.drop(ones);
        // cumsum: its backward flips, sums and flips back (`cumsum_backward`).
        let cum = {
            let mut y = self.t(rows, 4, What::LinearAttn);
            let b = rows * 4;
            let steps = vec![
                Step::Alloc(b),
                Step::Alloc(b),
                Step::Alloc(b),
                Step::Free(1),
                Step::Free(0),
            ];
            y.g = self.tp.script_node(steps, rows, 4, Self::edge(&dp));
            y
        };
        let pair_n = rows * CHUNK;
        // cum.unsqueeze(4) − cum.unsqueeze(3): two view nodes, so the second's gradient reaches
        // cum first.
        let u4 = {
            let g = self.tp.node(Op::Pass, cum.n, 4, &[Self::edge(&cum)], &[]);
            self.view(cum, cum.n, g)
        };
        let u3 = {
            let g = self.tp.node(Op::Pass, cum.n, 4, &[Self::edge(&cum)], &[]);
            self.view(cum, cum.n, g)
        };
        let pd = self.sub_bcast(u4, u3, pair_n);
        self.drop(u4);
        self.drop(u3);
        let pm = {
            let mut y = self.t(pair_n, 4, What::LinearAttn);
            y.g = self
                .tp
                .node(Op::MulConst, pair_n, 4, &[Self::edge(&pd)], &[mask.t]);
            y
        };
        self.drop(pd);
        let pe = self.unary(pm, 4, What::LinearAttn, false, true);
        self.drop(pm);
        // `x.transpose(-1, -2)`: a view node of its own.
        let transpose = |p: &mut Self, x: X| -> X {
            let g = p.tp.node(Op::Pass, x.n, x.es, &[Self::edge(&x)], &[]);
            p.view(x, x.n, g)
        };
        let kt = transpose(self, kp);
        let ut0 = self.bmm(k_beta, kt, pair_n);
        self.drop(kt);
        let ut = self.mul(ut0, pe, pair_n, 4, What::LinearAttn);
        self.drop(ut0);
        let kt = transpose(self, kp);
        let ia0 = self.bmm(qp, kt, pair_n);
        self.drop(kt);
        let ia = self.mul(ia0, pe, pair_n, 4, What::LinearAttn);
        self.drop(ia0);
        let ce = self.unary(cum, 4, What::LinearAttn, false, true);
        let dkb = self.mul(k_beta, ce, k_beta.n, 4, What::LinearAttn);
        self.drop(ce);
        // solve_triangular saves the system and its solution.
        let solve = |p: &mut Self, a: X, rhs: X| -> X {
            let mut y = p.t(rhs.n, 4, What::LinearAttn);
            let saved = [a.t, y.t];
            y.g = p.tp.node(
                Op::SolveTriangular,
                rhs.n,
                4,
                &[Self::edge(&a), Self::edge(&rhs)],
                if a.grad() || rhs.grad() { &saved } else { &[] },
            );
            y
        };
        let nv = solve(self, ut, v_beta);
        let kc = solve(self, ut, dkb);
        let state_n = b * hv * dk * dv;
        let mut state = self.t(state_n, 4, What::LinearAttn);
        let core = self.t(nv.n, 4, What::LinearAttn);
        let mut core_g = G::No;
        // query and key are rebound to their decayed versions.
        let ce2 = self.unary(cum, 4, What::LinearAttn, false, true);
        let qd = self.mul(qp, ce2, qp.n, 4, What::LinearAttn);
        self.drop(ce2);
        self.drop(qp);
        let last = self.select(cum, b * hv * nck);
        let sub = self.sub_bcast(last, cum, rows);
        self.drop(last);
        let ke = self.unary(sub, 4, What::LinearAttn, false, true);
        self.drop(sub);
        let kd_ = self.mul(kp, ke, kp.n, 4, What::LinearAttn);
        self.drop(ke);
        self.drop(kp);
        let last = self.select(cum, b * hv * nck);
        let chd = self.unary(last, 4, What::LinearAttn, false, true);
        self.drop(last);

        // The sequential scan over the chunks.
        let (cdk, cdv) = (b * hv * CHUNK * dk, b * hv * CHUNK * dv);
        let mut inter_prev: Option<X> = None;
        let mut vn_prev: Option<X> = None;
        // The last update's nodes (its sum, the decayed state, the new key-value product).
        let mut last_update = (G::No, G::No, G::No);
        for _ in 0..nck {
            // v_new = new_values[:, :, i] − k_cumdecay[:, :, i] @ state
            let nvi = self.select(nv, cdv);
            let kci = self.select(kc, cdk);
            let t1 = self.bmm(kci, state, cdv);
            self.drop(kci);
            let vn = self.sub_bcast(nvi, t1, cdv);
            self.drop(nvi);
            self.drop(t1);
            if let Some(o) = vn_prev.replace(vn) {
                self.drop(o);
            }
            let qdi = self.select(qd, cdk);
            let inter = self.bmm(qdi, state, cdv);
            self.drop(qdi);
            if let Some(o) = inter_prev.replace(inter) {
                self.drop(o);
            }
            let iai = self.select(ia, b * hv * CHUNK * CHUNK);
            let t2 = self.bmm(iai, vn, cdv);
            self.drop(iai);
            let sum = self.add_bcast(inter, t2, cdv);
            // core[:, :, i] = sum: CopySlices, whose backward copies the whole gradient into a
            // new tensor (the base's), clones the slice for `sum`, and makes the zeros that
            // `copy_` gives its overwritten slice.
            let prev = Edge {
                to: core_g,
                n: core.n,
                es: 4,
                sum_to: 0,
            };
            let zeros = Edge {
                to: G::No,
                n: cdv,
                es: 4,
                sum_to: 0,
            };
            // (The first chunk's base, the zeros, needs no gradient: no zeros for it.)
            core_g = if core_g == G::No {
                self.tp
                    .node(Op::Attention, core.n, 4, &[prev, Self::edge(&sum)], &[])
            } else {
                self.tp.node(
                    Op::Attention,
                    core.n,
                    4,
                    &[prev, Self::edge(&sum), zeros],
                    &[],
                )
            };
            self.drop(t2);
            self.drop(sum);
            let chdi = self.select(chd, b * hv);
            let decayed = self.mul(state, chdi, state_n, 4, What::LinearAttn);
            self.drop(chdi);
            let kdi = self.select(kd_, cdk);
            let kdt = transpose(self, kdi);
            self.drop(kdi);
            let t3 = self.bmm(kdt, vn, state_n);
            self.drop(kdt);
            let next = self.add_bcast(decayed, t3, state_n);
            last_update = (next.g, decayed.g, t3.g);
            self.drop(decayed);
            self.drop(t3);
            self.drop(state);
            state = next;
        }
        // output_final_state=False: the last state is dropped, and with it the graph of the
        // last update, which nothing else reaches.
        self.drop(state);
        for g in [last_update.0, last_update.1, last_update.2] {
            self.tp.forget(g);
        }
        // reshape / [:, :, :seq] / transpose(1, 2).to(dtype, contiguous).
        let cloned = {
            let mut y = self.t(core.n, 4, What::LinearAttn);
            let e = Edge {
                to: core_g,
                n: core.n,
                es: 4,
                sum_to: 0,
            };
            y.g = self.tp.node(Op::Pass, core.n, 4, &[e], &[]);
            y
        };
        self.drop(core);
        let head = if sp > sq {
            self.select(cloned, t * vd)
        } else {
            self.view(cloned, t * vd, cloned.g)
        };
        let o = self.cast(head, es, What::LinearAttn);
        self.drop(head);
        self.drop(cloned);
        // The function's locals.
        for x in [
            qd, kd_, vp, bp, dp, v_beta, k_beta, mask, cum, pe, ut, ia, dkb, nv, kc, chd,
        ] {
            self.drop(x);
        }
        for x in [vn_prev, inter_prev].into_iter().flatten() {
            self.drop(x);
        }

        // Qwen3_5RMSNormGated over rows of the value head width, gated by SiLU(z) in fp32.
        let h32 = self.cast(o, 4, What::Norm);
        let p = {
            let mut y = self.t(h32.n, 4, What::Norm);
            y.g = self
                .tp
                .node(Op::PowLike, h32.n, 4, &[Self::edge(&h32)], &[h32.t]);
            y
        };
        let nrows = h32.n / dv;
        let var = {
            let mut y = self.t(nrows, 4, What::Norm);
            y.g = self.tp.node(Op::Mean, nrows, 4, &[Self::edge(&p)], &[]);
            y
        };
        self.drop(p);
        let eps = {
            let mut y = self.t(nrows, 4, What::Norm);
            y.g = self.tp.node(Op::Pass, nrows, 4, &[Self::edge(&var)], &[]);
            y
        };
        let rs = {
            let mut y = self.t(nrows, 4, What::Norm);
            y.g = self
                .tp
                .node(Op::PowLike, nrows, 4, &[Self::edge(&eps)], &[y.t]);
            y
        };
        self.drop(eps);
        let hn = self.mul(h32, rs, h32.n, 4, What::Norm);
        self.drop(rs);
        self.drop(h32);
        let hb = self.cast(hn, es, What::Norm);
        let hw = self.mul_const(hb, What::Norm);
        self.drop(hb);
        self.drop(hn);
        let gf = self.cast(z, 4, What::Norm);
        let sg = self.unary(gf, 4, What::Norm, true, false);
        self.drop(gf);
        // `hidden_states = hidden_states * F.silu(gate.to(float32))`: the SiLU temporary goes
        // first, the rebound name's old tensor after.
        let prod = self.mul(hw, sg, hw.n, 4, What::Norm);
        self.drop(sg);
        self.drop(hw);
        let normed = self.cast(prod, es, What::LinearAttn);
        self.drop(prod);
        self.drop(var);
        self.drop(o);
        let out = self.lora_linear(normed, &l_out);
        // Qwen3_5GatedDeltaNet.forward's locals, in binding order (Qwen3-Next binds its fused
        // projections' outputs first).
        for x in projections
            .into_iter()
            .flatten()
            .chain([z, bb, aa, q, k, v, mixed, beta, gdec, normed])
        {
            self.drop(x);
        }
        out
    }

    /// Qwen3-Next's fused input projections, untangled as `fix_query_key_value_ordering`
    /// (`modeling_qwen3_next.py:620-646`) and its caller (:678-681) do it: `in_proj_qkvz` and
    /// `in_proj_ba` viewed per key head and split (one node each, whose backward concatenates
    /// the pieces' gradients); v, z, b and a reshaped across the key heads' groups — copies —, q
    /// and k flattened — copies too —, and q, k, v concatenated for the convolution. `n` holds
    /// the elements of q (and k), of v (and z), of b (and a).
    fn untangle(&mut self, x: X, l_qkvz: &Lin, l_ba: &Lin, n: [u64; 3]) -> Front {
        let es = x.es;
        let [qk_n, v_n, b_n] = n;
        let qkvz = self.lora_linear(x, l_qkvz);
        let ba = self.lora_linear(x, l_ba);
        let j4 = self
            .tp
            .node(Op::JoinN, qkvz.n, es, &[Self::edge(&qkvz)], &[]);
        let j2 = self.tp.node(Op::Join, ba.n, es, &[Self::edge(&ba)], &[]);
        // A reshape that cannot view: a contiguous copy, whose backward views the gradient.
        let copy = |p: &mut Self, n: u64, g: G| -> X {
            let mut y = p.t(n, es, What::LinearAttn);
            y.g = g;
            y
        };
        let v = copy(self, v_n, j4);
        let z = copy(self, v_n, j4);
        let bb = copy(self, b_n, j2);
        let aa = copy(self, b_n, j2);
        let q = copy(self, qk_n, j4);
        let k = copy(self, qk_n, j4);
        let mut qkv = self.t(2 * qk_n + v_n, es, What::LinearAttn);
        qkv.g = self.tp.node(
            Op::Split,
            qkv.n,
            es,
            &[Self::edge(&q), Self::edge(&k), Self::edge(&v)],
            &[],
        );
        Front {
            qkv,
            z,
            bb,
            aa,
            parts: Some([q, k, v]),
            projections: Some([qkvz, ba]),
        }
    }
}
