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
}
