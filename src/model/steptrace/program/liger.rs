//! Liger-Kernel's decoder kernels (liger-kernel 0.8.5), op by op as their Python wrappers
//! allocate around the Triton kernels, for the families whose modules
//! `apply_liger_kernel_to_<model_type>` replaces with them (`FamilyLayout::liger`):
//! - `LigerRMSNorm` → `LigerRMSNormFunction` (`ops/rms_norm.py:449-523` forward, `:526-626`
//!   backward, `:653-712` the Function): the output and an fp32 inverse RMS per row; saves the
//!   input (a view of it) and the inverse RMS; backward writes the input's gradient into the
//!   incoming one (`in_place=True`, the llama casting mode) and computes no weight gradient for
//!   a frozen weight (`needs_dw` false).
//! - `LigerSwiGLUMLP` → `LigerSiLUMulFunction` (`ops/swiglu.py:159-306`): `silu(gate) * up` into
//!   one new tensor; saves gate and up; backward stores their gradients into them.
//! - `liger_rotary_pos_emb` → `LigerRopeFunction` (`ops/rope.py:135-300`): q and k, whose
//!   `transpose(1, 2)` is the projection's contiguous output, rotated in place; saves cos and
//!   sin; backward rotates the gradients in place (sdpa's are laid out like q and k, so
//!   `contiguous()` copies nothing), and the head view's backward then has a contiguous
//!   gradient to reshape.

use super::Prog;
use crate::model::steptrace::tape::{Op, X};
use crate::model::steptrace::What;

impl<'c, 'a> Prog<'c, 'a> {
    /// `LigerRMSNorm(x)` over rows of `width`.
    pub(super) fn liger_rmsnorm(&mut self, x: X, width: u64) -> X {
        let rows = x.n / width;
        let mut y = self.t(x.n, x.es, What::Hidden);
        let rstd = self.t(rows, 4, What::Norm);
        // save_for_backward(X, W, RSTD): the frozen weight is a parameter, no storage of its own.
        y.g = self
            .tp
            .node(Op::Pass, x.n, x.es, &[Self::edge(&x)], &[x.t, rstd.t]);
        self.drop(rstd);
        y
    }

    /// `LigerSiLUMulFunction.apply(gate, up)`.
    pub(super) fn liger_swiglu(&mut self, gate: X, up: X) -> X {
        let mut c = self.t(gate.n, gate.es, What::Mlp);
        c.g = self.tp.node(
            Op::InPlace,
            gate.n,
            gate.es,
            &[Self::edge(&gate), Self::edge(&up)],
            &[gate.t, up.t],
        );
        c
    }

    /// `liger_rotary_pos_emb(q, k, cos, sin)`: the rotated q and k, the same storages.
    pub(super) fn liger_rope(&mut self, q: X, k: X, cos: X, sin: X) -> (X, X) {
        let g = self.tp.node(
            Op::RopeInPlace,
            q.n,
            q.es,
            &[Self::edge(&q), Self::edge(&k)],
            &[cos.t, sin.t],
        );
        self.tp.keep_local(q.t);
        self.tp.keep_local(k.t);
        (X { g, ..q }, X { g, ..k })
    }
}
