//! Qwen2.5-VL's vision tower, op by op, as transformers 5.24 runs it
//! (`Qwen2_5_VisionTransformerPretrainedModel.forward`, `modeling_qwen2_5_vl.py:430-489`, and
//! the helpers of `vision_utils.py`): the patches reordered into windows of `window_size`
//! pixels, attention within each window but in the `fullatt_block_indexes` blocks, and the
//! merger's output put back in image order. Without a graph every tensor it makes is a
//! temporary of the forward, apart from the last block's output and the merger's, which the
//! model's output holds.

use super::{bytes, Prog, X};
use crate::model::steptrace::What;
use crate::model::vision::{VisionTower, Visual};

impl Prog<'_, '_> {
    /// The windowed tower over every image of the batch; returns the last block's output and
    /// the merger's output in image order.
    pub(super) fn windowed_tower(&mut self, t: &VisionTower, v: Visual, images: u64) -> (X, X) {
        let es = bytes(self.ctx.aux_weight);
        let p = images * v.grid.patches;
        let hv = t.hidden_size;
        let hd = t.head_dim();
        let tok = images * v.grid.tokens;
        let what = What::Vision;
        let pos_ids = self.vision_position_ids(t, v, images);
        let cu = self.cu_seqlens(images);
        // get_vision_window_index: the window order is built on the host; the boundaries of
        // every window, the empty ones at the padded edges included, go to the device as one
        // int32 tensor, deduplicated by `unique_consecutive` (its two other outputs empty).
        let (gh, gw) = (v.grid.height / t.patch_size, v.grid.width / t.patch_size);
        let windows = t.windows(gh, gw);
        let listed = self.t(1 + images * t.padded_windows(gh, gw), 4, what);
        let cu_windows = self.t(1 + images * windows.len() as u64, 4, what);
        let inverse = self.t(0, 8, what);
        let counts = self.t(0, 8, what);
        self.drop(inverse);
        self.drop(counts);
        self.drop(listed);
        // The patch embedding (a Conv3d), reordered into windows.
        let conv = self.t(p * hv, es, what);
        let mut h = self.t(p * hv, es, what);
        self.drop(conv);
        // The axial rotary: (h, w) positions × inverse frequencies, cos and sin each recomposed
        // into `[patches, head_dim]` fp32 tables (`cat` of the two axes, then with itself), then
        // both reordered into windows.
        let pf = self.t(p * 2, 4, what);
        let freqs = self.t(p * hd / 2, 4, what);
        self.drop(pf);
        let mut scaled = vec![];
        for _ in 0..2 {
            let c = self.t(p * hd / 2, 4, what);
            let cs = self.t(p * hd / 2, 4, what);
            self.drop(c);
            scaled.push(cs);
        }
        let mut tables = vec![];
        for cs in scaled {
            let half = self.t(p * hd / 2, 4, what);
            let full = self.t(p * hd, 4, what);
            self.drop(half);
            self.drop(cs);
            tables.push(full);
        }
        self.drop(freqs);
        let cos = self.t(p * hd, 4, what);
        let sin = self.t(p * hd, 4, what);
        // The tuple of unordered tables is rebound: its items die last first.
        for x in tables.into_iter().rev() {
            self.drop(x);
        }
        let whole = vec![v.grid.patches; images as usize];
        let windowed: Vec<u64> = (0..images).flat_map(|_| windows.iter().copied()).collect();
        for b in 0..t.depth {
            let chunks = if t.fullatt_block_indexes.contains(&b) {
                &whole
            } else {
                &windowed
            };
            h = self.vision_block(h, t, p, chunks);
        }
        // The merger: RMSNorm, 2×2 patches side by side through fc1, GELU, fc2; its output
        // indexed back into image order.
        let ln = self.vision_norm(p, hv, es);
        let fc1 = self.t(tok * t.merged_width(), es, what);
        let act = self.t(tok * t.merged_width(), es, what);
        self.drop(fc1);
        let fc2 = self.t(tok * t.out_hidden_size, es, what);
        self.drop(act);
        self.drop(ln);
        let merged = self.t(tok * t.out_hidden_size, es, what);
        self.drop(fc2);
        // The forward's locals: the position ids, the window boundaries, the reordered tables
        // (a tuple: last first), the images' boundaries.
        self.drop(pos_ids);
        self.drop(cu_windows);
        self.drop(sin);
        self.drop(cos);
        self.drop(cu);
        (h, merged)
    }
}
