//! Qwen2.5-VL's vision tower, op by op, as transformers 5.24 runs it
//! (`Qwen2_5_VisionTransformerPretrainedModel.forward`, `modeling_qwen2_5_vl.py:430-489`, and
//! the helpers of `vision_utils.py`): the patches reordered into windows of `window_size`
//! pixels, attention within each window but in the `fullatt_block_indexes` blocks, and the
//! merger's output put back in image order.
//!
//! The tower is a PreTrainedModel whose input embedding is `patch_embed`, so with gradient
//! checkpointing `enable_input_require_grads` hooks it: the patch embedding's output becomes a
//! leaf needing a gradient, every block is checkpointed (`Qwen2_5_VLVisionBlock` is a
//! `GradientCheckpointingLayer`), the merger keeps what its backward needs, and backward runs
//! through the whole tower down to that leaf. Without checkpointing nothing needs a gradient:
//! every tensor the tower makes is a temporary of the forward, apart from the last block's
//! output and the merger's, which the model's output holds.

use super::{bytes, Prog, X};
use crate::model::steptrace::tape::{Edge, Mode, Op, G, TOWER_BLOCKS, VISION_LEAF};
use crate::model::steptrace::What;
use crate::model::vision::{VisionTower, Visual};

/// Parameters of one block in [`VisionTower::param_shapes`]' order: norm1, norm2, qkv (weight,
/// bias), proj, gate, up, down (weight, bias each).
const BLOCK_PARAMS: usize = 12;

impl Prog<'_, '_> {
    /// Whether the tower runs with a graph: checkpointing on, in a pass with gradients.
    fn tower_graph(&self) -> bool {
        self.ctx.s.grad_ckpt && self.tp.mode == Mode::Grad && self.vision_kind().input_hooked()
    }

    /// The attention chunks of block `b`: each image whole in the full-attention blocks, else
    /// each window of each image.
    fn tower_chunks(&self, t: &VisionTower, v: Visual, images: u64, b: u64) -> Vec<u64> {
        if t.fullatt_block_indexes.contains(&b) {
            return vec![v.grid.patches; images as usize];
        }
        let w = t.windows(&v.grid);
        (0..images).flat_map(|_| w.iter().copied()).collect()
    }

    /// The windowed tower over every image of the batch; returns the last block's output and
    /// the merger's output in image order.
    pub(super) fn windowed_tower(&mut self, t: &VisionTower, v: Visual, images: u64) -> (X, X) {
        let es = bytes(self.ctx.aux_weight);
        let p = images * v.grid.patches;
        let hv = t.hidden_size;
        let hd = t.head_dim();
        let tok = images * v.grid.tokens;
        let what = What::Vision;
        let graph = self.tower_graph();
        let pos_ids = self.vision_position_ids(t, v, images);
        let cu = self.cu_seqlens(images);
        // get_vision_window_index: the window order is built on the host; the boundaries of
        // every window, the empty ones at the padded edges included, go to the device as one
        // int32 tensor, deduplicated by `unique_consecutive` (its two other outputs empty).
        let windows = t.windows(&v.grid).len() as u64;
        let listed = self.t(1 + images * t.padded_windows(&v.grid), 4, what);
        let cu_windows = self.t(1 + images * windows, 4, what);
        let inverse = self.t(0, 8, what);
        let counts = self.t(0, 8, what);
        self.drop(inverse);
        self.drop(counts);
        self.drop(listed);
        // The patch embedding (a Conv3d) — the hooked leaf with a graph — reordered into
        // windows (an index: its backward scatters into zeros).
        let mut conv = self.t(p * hv, es, what);
        if graph {
            conv.g = G::Param(VISION_LEAF);
            self.tp.keep_local(conv.t);
            self.vision_leaf = Some(conv);
        }
        let mut h = self.t(p * hv, es, what);
        h.g = self
            .tp
            .node(Op::Scatter, p * hv, es, &[Self::edge(&conv)], &[]);
        self.drop(conv);
        // The axial rotary tables, then both reordered into windows.
        let tables = self.axial_rotary(p, hd);
        let cos = self.t(p * hd, 4, what);
        let sin = self.t(p * hd, 4, what);
        // The tuple of unordered tables is rebound: its items die last first.
        for x in tables.into_iter().rev() {
            self.drop(x);
        }
        self.vision_ckpt.clear();
        for b in 0..t.depth {
            let cu_now = if t.fullatt_block_indexes.contains(&b) {
                cu
            } else {
                cu_windows
            };
            let id = TOWER_BLOCKS + b as u32;
            if graph {
                // The checkpoint keeps the block's tensor arguments, released as the layers'
                // are: the boundaries, the position embeddings (last first), the hidden states.
                self.tp.mode = Mode::Discard;
                self.tp.layer = Some(id);
                self.tp.begin_checkpoint(id, &[h.t, cos.t, sin.t, cu_now.t]);
                self.vision_ckpt.push(Some((h, cu_now, cos, sin)));
            }
            let chunks = self.tower_chunks(t, v, images, b);
            let out = self.windowed_block(h, t, p, &chunks, b as usize, cos, sin);
            if graph {
                self.tp.mode = Mode::Grad;
                self.tp.layer = None;
            }
            h = out;
        }
        // The merger: RMSNorm, 2×2 patches side by side through fc1, GELU, fc2; its output
        // indexed back into image order.
        let w0 = 1 + BLOCK_PARAMS * t.depth as usize;
        let ln = self.rmsnorm(h, hv);
        let fc1 = {
            let w = self.vision_weights[w0 + 1];
            self.linear(ln, w, tok * t.merged_width(), es, what)
        };
        let act = self.unary(fc1, es, what, true, false);
        self.drop(fc1);
        let fc2 = {
            let w = self.vision_weights[w0 + 3];
            self.linear(act, w, tok * t.out_hidden_size, es, what)
        };
        self.drop(act);
        self.drop(ln);
        let mut merged = self.t(tok * t.out_hidden_size, es, what);
        merged.g = self
            .tp
            .node(Op::Scatter, merged.n, es, &[Self::edge(&fc2)], &[]);
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

    /// Recomputes checkpointed tower block `layer` (its id from [`TOWER_BLOCKS`]) from its
    /// saved input until its last saved tensor exists.
    pub(super) fn recompute_tower_block(&mut self, layer: u32) {
        let b = (layer - TOWER_BLOCKS) as usize;
        let (Some(Some((h, _, cos, sin))), Some(v), Some(t)) = (
            self.vision_ckpt.get(b).copied(),
            self.ctx.visual,
            self.ctx.arch.vision.as_ref(),
        ) else {
            return;
        };
        let images = self.ctx.s.sequences() * v.images;
        let p = images * v.grid.patches;
        let chunks = self.tower_chunks(t, v, images, b as u64);
        self.tp.begin_recompute(layer);
        self.tp.layer = Some(layer);
        self.tp.block = crate::model::steptrace::Block::Vision;
        let out = self.windowed_block(h, t, p, &chunks, b, cos, sin);
        self.drop(out);
        self.tp.block = Default::default();
        self.tp.layer = None;
        self.tp.end_recompute();
    }

    /// One block (`Qwen2_5_VLVisionBlock`): RMSNorm, qkv (its output viewed into q, k, v by
    /// `reshape(…).permute(…).unbind(0)`: backward stacks their gradients and copies the
    /// permuted stack), the rotary in fp32, each chunk of `chunks` patches attended on its own
    /// (SDPA per `cu_seqlens` chunk: q, k, v split into views), the outputs concatenated, proj
    /// and the residual; RMSNorm, the SwiGLU MLP with biases (gate, SiLU, up, their product,
    /// down) and the residual. The frozen weights' biases take no gradient.
    #[allow(clippy::too_many_arguments)]
    fn windowed_block(
        &mut self,
        x: X,
        t: &VisionTower,
        p: u64,
        chunks: &[u64],
        b: usize,
        cos: X,
        sin: X,
    ) -> X {
        let es = bytes(self.ctx.aux_weight);
        let hv = t.hidden_size;
        let what = What::Vision;
        let w = |s: &Self, k: usize| s.vision_weights[1 + BLOCK_PARAMS * b + k];
        let n1 = self.rmsnorm(x, hv);
        let qkv = {
            let wq = w(self, 2);
            self.linear(n1, wq, p * 3 * hv, es, what)
        };
        let stacked = {
            let g = self
                .tp
                .node(Op::ViewClone, qkv.n, es, &[Self::edge(&qkv)], &[]);
            let e = Edge {
                to: g,
                n: qkv.n,
                es,
                sum_to: 0,
            };
            self.tp.node(Op::JoinN, qkv.n, es, &[e], &[])
        };
        let mut views = vec![];
        for _ in 0..3 {
            self.tp.keep_local(qkv.t);
            views.push(X {
                n: p * hv,
                g: stacked,
                ..qkv
            });
        }
        self.drop(qkv);
        let (qv, kv, vv) = (views[0], views[1], views[2]);
        // apply_rotary_pos_emb_vision: q and k in fp32, each `q·cos + rotate_half(q)·sin`,
        // cast back.
        let qf = self.cast(qv, 4, what);
        let kf = self.cast(kv, 4, what);
        let qr = self.rotate(qf, cos, sin);
        let kr = self.rotate(kf, cos, sin);
        let q = self.cast(qr, es, what);
        self.drop(qr);
        let k = self.cast(kr, es, what);
        self.drop(kr);
        self.drop(qf);
        self.drop(kf);
        self.drop(qv);
        self.drop(kv);
        let lengths = self.t(chunks.len() as u64, 4, what);
        // torch.split of q, k and v into the chunks (views; backward concatenates them).
        let mut split = vec![];
        for x in [q, k, vv] {
            let g = self.tp.node(Op::JoinN, x.n, es, &[Self::edge(&x)], &[]);
            let parts: Vec<X> = chunks
                .iter()
                .map(|&n| {
                    self.tp.keep_local(x.t);
                    X { n: n * hv, g, ..x }
                })
                .collect();
            split.push(parts);
        }
        // One SDPA per chunk: its output, and the logsumexp and seeds it saves.
        let mut outs = vec![];
        for (i, &n) in chunks.iter().enumerate() {
            let (qi, ki, vi) = (split[0][i], split[1][i], split[2][i]);
            let mut o = self.t(n * hv, es, what);
            let lse = self.t(n * t.num_heads, 4, what);
            let seed = self.t(1, 8, what);
            let off = self.t(1, 8, what);
            o.g = self.tp.node(
                Op::Attention,
                o.n,
                es,
                &[Self::edge(&qi), Self::edge(&ki), Self::edge(&vi)],
                &[ki.t, qi.t, vi.t, lse.t, o.t, off.t, seed.t],
            );
            self.drop(lse);
            self.drop(seed);
            self.drop(off);
            outs.push(o);
        }
        // torch.cat of the outputs: its backward hands each a view of the gradient (a chain of
        // cat nodes of at most three inputs, none allocating).
        let mut cat = self.t(p * hv, es, what);
        cat.g = self.fan_in(&outs, p * hv, es);
        let proj = {
            let wp = w(self, 4);
            self.linear(cat, wp, p * hv, es, what)
        };
        self.drop(cat);
        self.drop(vv);
        self.drop(k);
        self.drop(q);
        // The split views die with the list of them (v's, k's, then q's), then the outputs
        // (last first) and the lengths.
        for parts in split.into_iter().rev() {
            for x in parts {
                self.drop(x);
            }
        }
        for o in outs.into_iter().rev() {
            self.drop(o);
        }
        self.drop(lengths);
        self.drop(n1);
        let h1 = self.add(x, proj, What::Hidden);
        self.drop(proj);
        let n2 = self.rmsnorm(h1, hv);
        let wi = p * t.intermediate_size;
        let gate = {
            let wg = w(self, 6);
            self.linear(n2, wg, wi, es, what)
        };
        let act = self.unary(gate, es, what, true, false);
        self.drop(gate);
        let up = {
            let wu = w(self, 8);
            self.linear(n2, wu, wi, es, what)
        };
        let prod = self.mul(act, up, wi, es, what);
        self.drop(act);
        self.drop(up);
        let down = {
            let wd = w(self, 10);
            self.linear(prod, wd, p * hv, es, what)
        };
        self.drop(prod);
        self.drop(n2);
        let out = self.add(h1, down, What::Hidden);
        self.drop(down);
        self.drop(h1);
        self.drop(x);
        out
    }

    /// A `torch.cat` of `parts` whose backward hands each part a view of the incoming gradient:
    /// nodes of at most three inputs chained (the last part's first), none allocating.
    fn fan_in(&mut self, parts: &[X], n: u64, es: u64) -> G {
        let mut next: Option<G> = None;
        let mut rest = parts;
        while !rest.is_empty() {
            let take = if next.is_some() { 2 } else { 3 }.min(rest.len());
            let (head, tail) = rest.split_at(rest.len() - take);
            let mut ins: Vec<Edge> = tail.iter().map(Self::edge).collect();
            if let Some(g) = next {
                ins.push(Edge {
                    to: g,
                    n,
                    es,
                    sum_to: 0,
                });
            }
            next = Some(self.tp.node(Op::Split, n, es, &ins, &[]));
            rest = head;
        }
        next.unwrap_or(G::No)
    }
}
