//! Liger-Kernel's decoder kernels (liger-kernel 0.8.5), op by op as their Python wrappers
//! allocate around the Triton kernels, for the families whose modules
//! `apply_liger_kernel_to_<model_type>` replaces with them (`FamilyLayout::liger`):
//! - `LigerRMSNorm` → `LigerRMSNormFunction` (`ops/rms_norm.py:449-523` forward, `:526-626`
//!   backward, `:653-712` the Function): the output and an fp32 inverse RMS per row; saves the
//!   input (a view of it) and the inverse RMS; backward writes the input's gradient into the
//!   incoming one (`in_place=True`, the llama casting mode) or a new tensor (`in_place=False`,
//!   Gemma's casting and offset: `LigerRMSNormForGemma2/3`) and computes no weight gradient for
//!   a frozen weight (`needs_dw` false).
//! - `LigerSwiGLUMLP` → `LigerSiLUMulFunction` (`ops/swiglu.py:159-306`), Gemma's
//!   `LigerGEGLUMLP` → `LigerGELUMulFunction` (`ops/geglu.py:87-146`): `act(gate) * up` into one
//!   new tensor; saves gate and up; backward stores their gradients into them. Phi-3's
//!   `LigerPhi3SwiGLUMLP` (`transformers/swiglu.py:118-137`) hands it the two chunks of
//!   gate_up_proj's output, which `ensure_contiguous` copies first.
//! - `liger_rotary_pos_emb` → `LigerRopeFunction` (`ops/rope.py:135-300`): q and k, whose
//!   `transpose(1, 2)` is the projection's contiguous output, rotated in place; saves cos and
//!   sin; backward rotates the gradients in place (sdpa's are laid out like q and k, so
//!   `contiguous()` copies nothing; eager attention's and repeat_kv's are copied first), and the
//!   head view's backward then has a contiguous gradient to reshape.
//! - `LigerExperts` → `LigerFusedMoEFunction` (`ops/fused_moe.py:174-434`) for transformers 5's
//!   fused experts (Qwen3-MoE): see [`Prog::liger_experts`].

use super::Prog;
use crate::model::steptrace::tape::{Op, X};
use crate::model::steptrace::What;

impl<'c, 'a> Prog<'c, 'a> {
    /// `LigerRMSNorm(x)` over rows of `width`.
    pub(super) fn liger_rmsnorm(&mut self, x: X, width: u64) -> X {
        self.liger_rmsnorm_strided(x, width, false, false)
    }

    /// `LigerRMSNorm(x)` with `ensure_contiguous`'s copies: of the input when it is a
    /// non-contiguous view (`copy_in`: Gemma 3's q and k after their transpose), and of the
    /// incoming gradient (`copy_grad`: laid out like Liger's RoPE hands it back).
    pub(super) fn liger_rmsnorm_strided(
        &mut self,
        x: X,
        width: u64,
        copy_in: bool,
        copy_grad: bool,
    ) -> X {
        let rows = x.n / width;
        let xc = copy_in.then(|| self.t(x.n, x.es, What::Hidden));
        let mut y = self.t(x.n, x.es, What::Hidden);
        let rstd = self.t(rows, 4, What::Norm);
        // save_for_backward(X, W, RSTD): the frozen weight is a parameter, no storage of its own.
        // Backward: dX is dY itself (in place), or `zeros_like(dY)` (Gemma's norms).
        let in_place = self
            .ctx
            .arch
            .family
            .layout()
            .liger
            .is_some_and(|l| l.norm_in_place);
        let op = Op::LigerNorm {
            in_place,
            copy_grad,
        };
        let saved = xc.unwrap_or(x);
        y.g = self
            .tp
            .node(op, x.n, x.es, &[Self::edge(&x)], &[saved.t, rstd.t]);
        self.drop(rstd);
        if let Some(c) = xc {
            self.drop(c);
        }
        y
    }

    /// `LigerSiLUMulFunction.apply(gate, up)`. `strided`: gate and up are chunks of one
    /// output (Phi-3's gate_up_proj), which the Function's `ensure_contiguous` copies before
    /// the kernel (`ops/swiglu.py:234-236`, `ops/utils.py` `ensure_contiguous`); it saves the
    /// copies, and its backward writes the two gradients into them.
    pub(super) fn liger_swiglu(&mut self, gate: X, up: X, strided: bool) -> X {
        let copies = strided.then(|| {
            (
                self.t(gate.n, gate.es, What::Mlp),
                self.t(up.n, up.es, What::Mlp),
            )
        });
        let (a, b) = copies.unwrap_or((gate, up));
        let mut c = self.t(gate.n, gate.es, What::Mlp);
        c.g = self.tp.node(
            Op::InPlace,
            gate.n,
            gate.es,
            &[Self::edge(&gate), Self::edge(&up)],
            &[a.t, b.t],
        );
        if let Some((a, b)) = copies {
            self.drop(a);
            self.drop(b);
        }
        c
    }

    /// `liger_rotary_pos_emb(q, k, cos, sin)`: the rotated q and k, the same storages unless
    /// `copy_in` says `q.transpose(1, 2).contiguous()` copies one (contiguous in (batch, heads,
    /// seq, dim), as Liger's norm leaves Gemma 3's); `copy_grad`: whether backward's
    /// `contiguous()` copies q's and k's gradients (see [`Op::RopeInPlace`]).
    pub(super) fn liger_rope(
        &mut self,
        (q, k): (X, X),
        (cos, sin): (X, X),
        copy_in: (bool, bool),
        copy_grad: (bool, bool),
    ) -> (X, X) {
        let qr = if copy_in.0 {
            self.t(q.n, q.es, What::Rope)
        } else {
            self.tp.keep_local(q.t);
            q
        };
        let kr = if copy_in.1 {
            self.t(k.n, k.es, What::Rope)
        } else {
            self.tp.keep_local(k.t);
            k
        };
        let g = self.tp.node(
            Op::RopeInPlace {
                copy_q: copy_grad.0,
                copy_k: copy_grad.1,
            },
            q.n,
            q.es,
            &[Self::edge(&q), Self::edge(&k)],
            &[cos.t, sin.t],
        );
        (X { g, ..qr }, X { g, ..kr })
    }

    /// `LigerExperts` (transformers 5's fused experts as `apply_liger_kernel_to_qwen3_moe` /
    /// `_mixtral` replace them, liger-kernel 0.8.5 `transformers/swiglu.py:75-115`) over the
    /// experts' input `h` with the routing weights `wts`: the indices copied to int32, then
    /// `LigerFusedMoEFunction` (`ops/fused_moe.py:174-434`). Its forward computes the routing
    /// metadata (`compute_routing_metadata`: a per-tile histogram, each expert's count, start
    /// and tile offset, the sorted rows' tiles — one `.item()` sizes them, here a balanced
    /// routing's Σ ⌈rows / 64⌉ — and three int32 permutations), the gate/up product before the
    /// activation and after it, the down product and the weighted sum; it saves the input, the
    /// pre-activation and the routing tensors. Its backward makes the pre-activation's and the
    /// weighted activation's gradients, the routing weights' gradient, the input's (expanded,
    /// then summed), and the two expert weights' gradients — `zeros_like` each, whole, whether
    /// the weights are trained or not (a frozen one's is dropped as the function returns).
    pub(super) fn liger_experts(&mut self, h: X, wts: X, m: &super::FusedExperts) -> X {
        use crate::model::steptrace::tape::Step;
        let (t, e, k, i, hd) = self.expert_sizes();
        let tk = t * k;
        let es = h.es;
        let idx32 = self.t(tk, 4, What::Mlp);
        // compute_routing_metadata (`TOKENS_PER_BLOCK = max(1, 1024 / next_pow2(k))`).
        let per_tile = (1024 / k.max(1).next_power_of_two()).max(1);
        let counts = self.t(e * t.div_ceil(per_tile), 4, What::Mlp);
        let token_count = self.t(e, 4, What::Mlp);
        let start = self.t(e + 1, 4, What::Mlp);
        let tile_offset = self.t(e + 1, 4, What::Mlp);
        let tiles = balanced_tiles(tk, e, 64);
        let tile_row_start = self.t(tiles, 4, What::Mlp);
        let tile_expert = self.t(tiles, 4, What::Mlp);
        let scatter = self.t(tk, 4, What::Mlp);
        let reverse = self.t(tk, 4, What::Mlp);
        let gather = self.t(tk, 4, What::Mlp);
        self.drop(counts);
        self.drop(tile_offset);
        let pre_act = self.t(tk * 2 * i, es, What::Mlp);
        let post_act = self.t(tk * i, es, What::Mlp);
        let y = self.t(tk * hd, es, What::Mlp);
        let mut out = self.t(t * hd, es, What::Mlp);
        // Backward: d_pre_act, weighted_act, dS (zeros), the down weight's gradient, the
        // expanded input gradient, dx (zeros), the gate/up weight's gradient; the kernel's
        // locals go as it returns, with the saved tensors and the two weight gradients (frozen:
        // nobody takes them).
        let (gu, down) = (m.gate_up.x, m.down.x);
        let mut steps = vec![
            Step::Alloc(tk * 2 * i * es),
            Step::Alloc(tk * i * es),
            Step::Alloc(tk * es),
            Step::Alloc(down.n * down.es),
            Step::Alloc(tk * hd * es),
            Step::Alloc(t * hd * es),
            Step::Alloc(gu.n * gu.es),
            Step::Free(0),
            Step::Free(1),
            Step::Free(4),
        ];
        steps.push(Step::GradOf { input: 0, local: 5 });
        if wts.es == es {
            steps.push(Step::GradOf { input: 1, local: 2 });
        } else {
            // dS is made in the incoming gradient's dtype; autograd casts it to the routing
            // weights' (Mixtral's and DeepSeek's fp32) once the function returned
            // (`validate_outputs`), before the unused weight gradients go.
            steps.extend([
                Step::Returns,
                Step::Alloc(tk * wts.es),
                Step::Free(2),
                Step::GradOf { input: 1, local: 7 },
            ]);
        }
        steps.extend([Step::Free(6), Step::Free(3)]);
        // save_for_backward(x, gate_up_proj, down_proj, pre_act, topk_weights_flat, the routing
        // tensors): the weights are parameters, the rest storages the program drops after.
        let routing = [start, gather, scatter, reverse, tile_row_start, tile_expert];
        let saved: Vec<_> = [h, pre_act, wts]
            .iter()
            .chain(&routing)
            .map(|x| x.t)
            .collect();
        out.g = self.tp.script_node_of(
            steps,
            out.n,
            es,
            &[Self::edge(&h), Self::edge(&wts)],
            &saved,
        );
        for x in routing.into_iter().chain([pre_act]) {
            self.drop(x);
        }
        // The forward's locals (`_`, post_act, Y), then LigerExperts' int32 indices.
        self.drop(token_count);
        self.drop(post_act);
        self.drop(y);
        self.drop(idx32);
        out
    }
}

/// The 64-row tiles of a balanced routing of `rows` token–expert pairs over `experts`: each
/// expert ⌊rows / experts⌋ or ⌈rows / experts⌉ rows, its tiles ⌈its rows / 64⌉.
fn balanced_tiles(rows: u64, experts: u64, tile: u64) -> u64 {
    let experts = experts.max(1);
    let (q, r) = (rows / experts, rows % experts);
    r * (q + 1).div_ceil(tile) + (experts - r) * q.div_ceil(tile)
}
