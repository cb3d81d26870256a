//! A vision-language step's vision tower, op by op, as transformers 5.24 runs Qwen3.5's
//! (`Qwen3_5VisionModel.forward`, `modeling_qwen3_5.py:1156-1200`, called from
//! `Qwen3_5Model.forward:1576-1650`): frozen, and without a graph (no input of it needs a
//! gradient), so every tensor it makes is a temporary of the forward, apart from its two outputs,
//! which the model's output holds until it is dropped after the loss. Then the visual tokens
//! replace the image placeholders of the embedding output (`masked_scatter`).

use super::{bytes, Prog, X};
use crate::model::family::VisionKind;
use crate::model::steptrace::tape::{Op, Step, NO_LAYER};
use crate::model::steptrace::What;
use crate::model::vision::VisionTower;

/// What the vision step leaves for later: tensors freed when the model's forward returns, and
/// those the output holds until it is dropped.
#[derive(Default)]
pub(super) struct VisionLocals {
    /// Freed when `Qwen3_5Model.forward` returns: the concatenated image embeddings and the
    /// image and video placeholder masks (the image mask only when no graph saved it).
    pub at_return: Vec<X>,
    /// Held by the model output (`image_outputs`): the last block's output and the merger's,
    /// then the deepstack mergers'.
    pub in_output: Vec<X>,
    /// Qwen3-VL's deepstack features as the language model adds them (`deepstack_visual_embeds`),
    /// freed when the model's forward returns.
    pub deepstack: Vec<X>,
    /// The image placeholders' mask (`visual_pos_masks`), which the deepstack additions save.
    pub image_mask: Option<X>,
}

impl Prog<'_, '_> {
    /// How the family builds its tower.
    pub(super) fn vision_kind(&self) -> VisionKind {
        self.ctx
            .arch
            .family
            .layout()
            .vision
            .unwrap_or(VisionKind::Qwen35)
    }

    /// The tower's parameters, registered before the language model's (`Qwen3_5Model`
    /// creates `visual` first): frozen, in the model's dtype. A 4-bit load quantizes its Linear
    /// layers like the language model's (transformers keeps only the output embedding and the
    /// last module out, `quantizers/base.py:39-63`), and `prepare_model_for_kbit_training`
    /// casts the rest to fp32 (the auxiliary weights' dtype).
    pub(super) fn register_vision(&mut self, t: &VisionTower) {
        let es = bytes(self.ctx.aux_weight);
        let four_bit = self.ctx.s.quant.is_some();
        let kind = self.vision_kind();
        self.tp.exec = NO_LAYER;
        self.tp.block = crate::model::steptrace::Block::Vision;
        for (n, linear) in t.param_shapes(kind).into_iter().zip(t.linear_weights(kind)) {
            let w = if four_bit && linear {
                self.param(n.div_ceil(2), 1, 1, false, What::Weight)
            } else {
                self.param(n, es, 0, false, What::Weight)
            };
            self.vision_weights.push(w.x);
        }
        self.tp.block = Default::default();
    }

    /// The quantization states of the tower's 4-bit Linear weights (before the language
    /// model's).
    pub(super) fn vision_quant_state(&mut self) {
        let Some((t, kind)) = self.ctx.arch.tower() else {
            return;
        };
        self.tp.block = crate::model::steptrace::Block::Vision;
        for (n, linear) in t.param_shapes(kind).into_iter().zip(t.linear_weights(kind)) {
            if linear {
                // 4-bit: the state depends on the value count alone (an 8-bit base with a
                // vision tower is refused by the plan's checks).
                self.new_quant_state(n, 1);
            }
        }
        self.tp.block = Default::default();
    }

    /// The image inputs the collator hands over before `input_ids` (`mm_token_type_ids`
    /// int32, `image_grid_thw` int64).
    pub(super) fn vision_inputs_before(&mut self) {
        if let Some(v) = self.ctx.visual {
            let b = self.ctx.s.sequences();
            self.t(self.tokens(), 4, What::Input);
            self.t(b * v.images * 3, 8, What::Input);
        }
    }

    /// `pixel_values` (float32, `[patches, C·T·p·p]`), after the labels.
    pub(super) fn vision_inputs_after(&mut self) {
        if let (Some(v), Some(t)) = (self.ctx.visual, self.ctx.arch.vision.as_ref()) {
            let b = self.ctx.s.sequences();
            self.tp.block = crate::model::steptrace::Block::Vision;
            self.t(b * v.patches() * t.patch_values(), 4, What::Input);
            self.tp.block = Default::default();
        }
    }

    /// The tower over every image of the batch and the merge of its tokens into the embedding
    /// output `emb`; returns the language model's `inputs_embeds` and what dies later.
    pub(super) fn vision_forward(&mut self, emb: X) -> (X, VisionLocals) {
        let mut locals = VisionLocals::default();
        let (Some(v), Some(t)) = (self.ctx.visual, self.ctx.arch.vision.as_ref()) else {
            return (emb, locals);
        };
        let s = self.ctx.s;
        let es = bytes(self.ctx.aux_weight);
        let images = s.sequences() * v.images;
        let p = images * v.grid.patches;
        let tok = images * v.grid.tokens;
        let what = What::Vision;
        self.tp.block = crate::model::steptrace::Block::Vision;
        // get_image_features: pixel_values.type(visual.dtype).
        let pix = self.t(p * t.patch_values(), es, what);
        let (h, merged, deepstack) = if self.vision_kind().windowed() {
            let (h, merged) = self.windowed_tower(t, v, images);
            (h, merged, vec![])
        } else {
            self.learned_tower(t, v, images)
        };
        // The split sizes (`grid_thw.prod(-1) // merge²`), then get_image_features returns.
        let prod = self.t(images, 8, what);
        let sizes = self.t(images, 8, what);
        self.drop(prod);
        self.drop(sizes);
        self.drop(pix);
        locals.in_output = vec![h, merged];
        locals.in_output.extend(deepstack.iter().copied());
        // Qwen3_5Model.forward: torch.cat of the per-image splits, the placeholder masks and
        // their count check, the scatter into the embedding output.
        // (With a graph through the tower, Qwen2.5-VL's: the concatenation of the per-image
        // views, whose backward concatenates their gradients.)
        let mut cat = self.t(tok * t.out_hidden_size, es, What::Hidden);
        cat.g = self
            .tp
            .node(Op::JoinN, merged.n, es, &[Self::edge(&merged)], &[]);
        self.tp.block = Default::default();
        let tokens = self.tokens();
        let image_mask = self.t(tokens, 1, What::Input);
        let video_mask = self.t(tokens, 1, What::Input);
        let n_img = self.t(1, 8, What::Input);
        let prod = self.t(1, 8, What::Input);
        let eq = self.t(1, 1, What::Input);
        self.drop(prod);
        let all = self.t(1, 1, What::Input);
        self.drop(all);
        self.drop(eq);
        let n_vid = self.t(1, 8, What::Input);
        self.drop(n_img);
        self.drop(n_vid);
        let mut out = self.t(emb.n, emb.es, What::Hidden);
        if emb.grad() {
            // MaskedScatterBackward0 keeps the mask; the embedding output's gradient is the
            // incoming one with the image positions zeroed, then (a tower with a graph) the
            // visual tokens' gathered: one new gradient per input, as a fused attention's.
            out.g = if cat.grad() {
                self.tp.node(
                    Op::Attention,
                    emb.n,
                    emb.es,
                    &[Self::edge(&emb), Self::edge(&cat)],
                    &[image_mask.t],
                )
            } else {
                self.tp.node(
                    Op::MulConst,
                    emb.n,
                    emb.es,
                    &[Self::edge(&emb)],
                    &[image_mask.t],
                )
            };
            locals.at_return = vec![cat, video_mask, image_mask];
        } else {
            locals.at_return = vec![cat, image_mask, video_mask];
        }
        // `inputs_embeds` is rebound: the embedding output lives on only where the graph holds
        // it (the leaf checkpointing's input hook made of it).
        self.drop(emb);
        // Qwen3VLModel.forward: each deepstack feature's per-image splits concatenated (a copy),
        // held for the language model's first layers.
        locals.image_mask = Some(image_mask);
        locals.deepstack = deepstack
            .iter()
            .map(|f| self.t(f.n, f.es, What::Hidden))
            .collect();
        (out, locals)
    }

    /// Qwen3.5's and Qwen3-VL's tower (`Qwen3_5VisionModel.forward`): the position grid
    /// resampled to every patch, the axial rotary tables, the blocks (with Qwen3-VL's deepstack
    /// mergers after the blocks it names) and the merger; returns the last block's output, the
    /// merger's and the deepstack features.
    fn learned_tower(
        &mut self,
        t: &VisionTower,
        v: crate::model::vision::Visual,
        images: u64,
    ) -> (X, X, Vec<X>) {
        let es = bytes(self.ctx.aux_weight);
        let p = images * v.grid.patches;
        let hv = t.hidden_size;
        let hd = t.head_dim();
        let tok = images * v.grid.tokens;
        let what = What::Vision;
        let chunks = vec![v.grid.patches; images as usize];
        let (idx, w4) = self.interpolation_indices(images, p);
        let pos_ids = self.vision_position_ids(t, v, images);
        let cu = self.cu_seqlens(images);
        // Patch embedding (Conv3d) and the resampled position embeddings.
        let conv = self.t(p * hv, es, what);
        let pe = self.t(p * 4 * hv, es, what);
        let pw = self.t(p * 4 * hv, 4, what);
        self.drop(pe);
        let pos_sum = self.t(p * hv, 4, what);
        self.drop(pw);
        let pos_cast = self.t(p * hv, es, what);
        let mut h = self.t(p * hv, es, what);
        self.drop(pos_cast);
        self.drop(conv);
        let tables = self.axial_rotary(p, hd);
        let mut deepstack = vec![];
        for b in 0..t.depth {
            h = self.vision_block(h, t, p, &chunks);
            if t.deepstack_visual_indexes.contains(&b) {
                deepstack.push(self.deepstack_merger(t, tok, es));
            }
        }
        // The merger: LayerNorm, then 2×2 patches side by side through fc1, GELU, fc2.
        let ln = self.vision_layernorm(p, hv, es);
        let fc1 = self.t(p * hv, es, what);
        let act = self.t(p * hv, es, what);
        self.drop(fc1);
        let merged = self.t(tok * t.out_hidden_size, es, what);
        self.drop(act);
        self.drop(ln);
        for x in [idx, w4, pos_ids, cu, pos_sum] {
            self.drop(x);
        }
        for x in tables.into_iter().rev() {
            self.drop(x);
        }
        (h, merged, deepstack)
    }

    /// The towers' axial rotary (`VisionRotaryEmbedding`): the (h, w) positions in fp32 times
    /// the inverse frequencies, cos and sin each scaled and recomposed into a `[patches,
    /// head_dim]` fp32 table (`cat` of the two axes, then with itself); returns [cos, sin].
    pub(super) fn axial_rotary(&mut self, p: u64, hd: u64) -> Vec<X> {
        let what = What::Vision;
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
        tables
    }

    /// `get_vision_interpolation_indices_and_weights` (`modeling_qwen3_5.py`): the bilinear
    /// resampling of the learned position grid to every patch, vectorised over the images;
    /// returns the `[patches, 2, 2]` indices (int64) and weights (fp32) the tower keeps.
    fn interpolation_indices(&mut self, images: u64, p: u64) -> (X, X) {
        let w = What::Vision;
        let m1 = self.t(images, 8, w);
        let per = self.t(images, 8, w);
        self.drop(m1);
        let mut keep = vec![per];
        for _ in 0..2 {
            let r = self.t(p, 8, w);
            let i = self.t(p, 8, w);
            self.drop(r);
            keep.push(i);
        }
        let cs = self.t(images, 8, w);
        let pad = self.t(images, 8, w);
        self.drop(cs);
        let r = self.t(p, 8, w);
        let i3 = self.t(p, 8, w);
        self.drop(r);
        self.drop(pad);
        keep.push(i3);
        let sum = self.t(1, 8, w);
        let ar = self.t(p, 8, w);
        self.drop(sum);
        let sub = self.t(p, 8, w);
        self.drop(ar);
        let m1 = self.t(p, 8, w);
        let rm1 = self.t(p, 8, w);
        self.drop(sub);
        self.drop(m1);
        let fd1 = self.t(p, 8, w);
        let rm2 = self.t(p, 8, w);
        let fd2 = self.t(p, 8, w);
        let rm3 = self.t(p, 8, w);
        self.drop(fd2);
        let fd3 = self.t(p, 8, w);
        let rm4 = self.t(p, 8, w);
        self.drop(fd3);
        let m = self.t(p, 8, w);
        let fd4 = self.t(p, 8, w);
        self.drop(m);
        keep.extend([rm1, fd1, rm2, rm3, rm4, fd4]);
        for _ in 0..2 {
            let m = self.t(p, 8, w);
            let a = self.t(p, 8, w);
            self.drop(m);
            keep.push(a);
        }
        // Each axis: the fractional positions, their floor, the two neighbours' indices
        // (clamped) and weights.
        for _ in 0..2 {
            let tc = self.t(p, 4, w);
            let mu = self.t(p, 4, w);
            let su = self.t(p, 8, w);
            let cl = self.t(p, 8, w);
            self.drop(su);
            let dv = self.t(p, 4, w);
            self.drop(mu);
            self.drop(cl);
            let fl = self.t(p, 4, w);
            let ag = self.t(2, 8, w);
            let tc2 = self.t(p, 8, w);
            let ad = self.t(2 * p, 8, w);
            self.drop(tc2);
            let ci = self.t(2 * p, 8, w);
            let s1 = self.t(p, 4, w);
            let s2 = self.t(2 * p, 4, w);
            self.drop(s1);
            let ab = self.t(2 * p, 4, w);
            self.drop(s2);
            let rs = self.t(2 * p, 4, w);
            let cw = self.t(2 * p, 4, w);
            self.drop(rs);
            for x in [tc, dv, fl, ag, ad, ab] {
                self.drop(x);
            }
            keep.extend([ci, cw]);
        }
        let mi = self.t(2 * p, 8, w);
        let idx = self.t(4 * p, 8, w);
        self.drop(mi);
        let wts = self.t(4 * p, 4, w);
        for x in keep {
            self.drop(x);
        }
        (idx, wts)
    }

    /// `get_vision_position_ids`: each image's (h, w) patch positions in merge order, stacked
    /// and repeated per frame, then concatenated (`[patches, 2]` int64).
    pub(super) fn vision_position_ids(
        &mut self,
        t: &VisionTower,
        v: crate::model::vision::Visual,
        images: u64,
    ) -> X {
        let w = What::Vision;
        let (gh, gw) = (v.grid.height / t.patch_size, v.grid.width / t.patch_size);
        let pi = v.grid.patches;
        let tc = self.t(1, 8, w);
        let mut repeats = vec![];
        let mut clones: Option<(X, X)> = None;
        for _ in 0..images {
            let ah = self.t(gh, 8, w);
            let aw = self.t(gw, 8, w);
            if let Some((a, b)) = clones.take() {
                self.drop(a);
                self.drop(b);
            }
            let ch = self.t(pi, 8, w);
            self.drop(ah);
            let cw = self.t(pi, 8, w);
            self.drop(aw);
            let st = self.t(2 * pi, 8, w);
            let rp = self.t(2 * pi, 8, w);
            self.drop(st);
            repeats.push(rp);
            clones = Some((ch, cw));
        }
        let cat = self.t(2 * images * pi, 8, w);
        self.drop(tc);
        for x in repeats.into_iter().rev() {
            self.drop(x);
        }
        if let Some((a, b)) = clones {
            self.drop(a);
            self.drop(b);
        }
        cat
    }

    /// `get_vision_attention_seqlens`: each image's patch count, cumulated and padded with a 0
    /// (`cu_seqlens`, int32).
    pub(super) fn cu_seqlens(&mut self, images: u64) -> X {
        let w = What::Vision;
        let m = self.t(images, 8, w);
        let r = self.t(images, 8, w);
        let i = self.t(images, 8, w);
        self.drop(r);
        self.drop(m);
        let cs = self.t(images, 4, w);
        let pad = self.t(images + 1, 4, w);
        self.drop(cs);
        self.drop(i);
        pad
    }

    /// `Qwen3_5Model.get_rope_index` over samples laid out as the harness builds them (each
    /// image `<|vision_start|>`, its pads, `<|vision_end|>`, the images first, then the text):
    /// the `[3, batch, seq]` position ids, and the rope deltas the model keeps until the next
    /// step replaces them. The per-sample lists of position blocks die in Python's order (a
    /// list's items last first).
    pub(super) fn rope_index(&mut self) -> X {
        let (Some(v), Some(t)) = (self.ctx.visual, self.ctx.arch.vision.as_ref()) else {
            unreachable!("rope_index without images");
        };
        let w = What::Input;
        let s = self.ctx.s;
        let (lh, lw) = t.token_grid(&v.grid);
        let text_tail = s.seq - v.sequence_tokens() + 1;
        let integer_interval = self.vision_kind().windowed();
        let pos = self.t(3 * self.tokens(), 8, w);
        let mut deltas = vec![];
        let mut current: Option<X> = None;
        let mut list: Vec<X> = vec![];
        let mut vpos: Option<(X, bool)> = None;
        let mut llm_positions: Option<X> = None;
        for _ in 0..s.sequences() {
            if let Some(c) = current.take() {
                self.drop(c);
            }
            // The previous sample's list: its items last first, but for the block a variable
            // still holds.
            for x in std::mem::take(&mut list).into_iter().rev() {
                if vpos.is_some_and(|(vp, _)| vp.t == x.t) {
                    vpos = vpos.map(|(vp, _)| (vp, false));
                } else {
                    self.drop(x);
                }
            }
            // The first text group: `<|vision_start|>`.
            let ar = self.t(1, 8, w);
            let add = self.t(3, 8, w);
            self.drop(ar);
            list.push(add);
            for i in 0..v.images {
                // The temporal positions: `arange × time_interval`, which Qwen3.5 and Qwen3-VL
                // leave at its float default (a float product cast back by `.long()`) and
                // Qwen2.5-VL passes as the integer 1.
                let ar = self.t(1, 8, w);
                let tt = if integer_interval {
                    let tt = self.t(1, 8, w);
                    self.drop(ar);
                    tt
                } else {
                    let mu = self.t(1, 4, w);
                    self.drop(ar);
                    let tt = self.t(1, 8, w);
                    self.drop(mu);
                    tt
                };
                let ah = self.t(lh, 8, w);
                let hh = self.t(lh, 8, w);
                self.drop(ah);
                let aw = self.t(lw, 8, w);
                let ww = self.t(lw, 8, w);
                self.drop(aw);
                let st = self.t(3 * lh * lw, 8, w);
                self.drop(tt);
                self.drop(hh);
                self.drop(ww);
                // Rebinding `vision_position_ids` frees a block no list holds any more.
                if let Some((old, in_list)) = vpos.take() {
                    if !in_list {
                        self.drop(old);
                    }
                }
                vpos = Some((st, true));
                list.push(st);
                let gt = self.t(1, 1, w);
                self.drop(gt);
                let fd = self.t(1, 8, w);
                if current.is_none() {
                    current = Some(self.t(1, 8, w));
                }
                self.drop(fd);
                if i + 1 < v.images {
                    // `<|vision_end|><|vision_start|>` between two images.
                    let ar = self.t(2, 8, w);
                    let add = self.t(6, 8, w);
                    self.drop(ar);
                    list.push(add);
                }
            }
            let ar = self.t(text_tail, 8, w);
            let add = self.t(3 * text_tail, 8, w);
            self.drop(ar);
            list.push(add);
            let cat = self.t(3 * s.seq, 8, w);
            if let Some(old) = llm_positions.replace(cat) {
                self.drop(old);
            }
            let mx = self.t(1, 8, w);
            let ad = self.t(1, 8, w);
            self.drop(mx);
            let d = self.t(1, 8, w);
            self.drop(ad);
            deltas.push(d);
        }
        let new_deltas = self.t(s.sequences(), 8, w);
        for x in deltas.into_iter().rev() {
            self.drop(x);
        }
        // The function's locals: current_pos, the last list, vision_position_ids, llm_positions.
        if let Some(c) = current {
            self.drop(c);
        }
        for x in list.into_iter().rev() {
            if vpos.is_some_and(|(vp, _)| vp.t == x.t) {
                continue;
            }
            self.drop(x);
        }
        if let Some((vp, _)) = vpos {
            self.drop(vp);
        }
        if let Some(l) = llm_positions {
            self.drop(l);
        }
        if let Some(old) = self.rope_deltas.replace(new_deltas) {
            self.drop(old);
        }
        pos
    }

    /// `Qwen3VLTextModel._deepstack_process` after decoder layer `li` (`modeling_qwen3_vl.py:
    /// 841-850`): the hidden states cloned, the visual tokens' rows gathered by the mask, the
    /// layer's deepstack feature added and the sum written back in place; returns the new hidden
    /// states (`h` itself where the layer has no feature).
    pub(super) fn deepstack_process(&mut self, h: X, li: usize) -> X {
        let (Some(f), Some(mask)) = (
            self.vision_locals.deepstack.get(li).copied(),
            self.vision_locals.image_mask,
        ) else {
            return h;
        };
        let mut y = self.t(h.n, h.es, What::Hidden);
        let rows = self.t(f.n, h.es, What::Hidden);
        let sum = self.t(f.n, h.es, What::Hidden);
        if h.grad() {
            // IndexPutBackward0: the incoming gradient with the visual rows zeroed (a zeros
            // `values`, freed) and its visual rows gathered; the incoming gradient dies. Through
            // the add, IndexBackward0 scatters those rows into new zeros (out of place). The two
            // gradients of the clone are summed into a new tensor, the gradient of `h`. (The
            // boolean indexing's `nonzero` is not seen by the emulated device's trace.)
            let (b, v) = (h.n * h.es, f.n * h.es);
            let steps = vec![
                Step::Alloc(v),
                Step::Alloc(b),
                Step::Free(0),
                Step::Alloc(v),
                Step::FreeIncoming,
                Step::Release(mask.t),
                Step::Alloc(b),
                Step::Alloc(b),
                Step::Release(mask.t),
                Step::Free(2),
                Step::Free(3),
                Step::Alloc(b),
                Step::Free(1),
                Step::Free(4),
            ];
            y.g = self.tp.script_node(steps, h.n, h.es, Self::edge(&h));
            // Both backward nodes save the mask, each releasing it when it has run.
            self.tp.keep(mask.t);
            self.tp.keep(mask.t);
        }
        self.drop(rows);
        self.drop(sum);
        y
    }

    /// A deepstack merger (`Qwen3VLVisionPatchMerger(use_postshuffle_norm=True)`,
    /// `modeling_qwen3_vl.py:171-184`) over a block's output: LayerNorm over the merged width,
    /// fc1, GELU, fc2; returns the feature, which the tower's output holds.
    fn deepstack_merger(&mut self, t: &VisionTower, tok: u64, es: u64) -> X {
        let m = t.merged_width();
        let ln = self.vision_layernorm(tok, m, es);
        let fc1 = self.t(tok * m, es, What::Vision);
        let act = self.t(tok * m, es, What::Vision);
        self.drop(fc1);
        let out = self.t(tok * t.out_hidden_size, es, What::Vision);
        self.drop(ln);
        self.drop(act);
        out
    }

    /// `nn.LayerNorm` without a graph: its output, and the mean and rstd it frees at once.
    fn vision_layernorm(&mut self, rows: u64, width: u64, es: u64) -> X {
        let y = self.t(rows * width, es, What::Vision);
        let m = self.t(rows, 4, What::Vision);
        let r = self.t(rows, 4, What::Vision);
        self.drop(m);
        self.drop(r);
        y
    }

    /// The norm of a tower's block without a graph: `nn.LayerNorm` (its output, and the mean
    /// and rstd it frees at once) or, in Qwen2.5-VL's tower, `Qwen2_5_VLRMSNorm` (in fp32, then
    /// the weight times its cast back).
    pub(super) fn vision_norm(&mut self, rows: u64, width: u64, es: u64) -> X {
        if !self.vision_kind().windowed() {
            return self.vision_layernorm(rows, width, es);
        }
        let what = What::Vision;
        let x32 = self.t(rows * width, 4, what);
        let pow = self.t(rows * width, 4, what);
        let var = self.t(rows, 4, what);
        self.drop(pow);
        let add = self.t(rows, 4, what);
        let rs = self.t(rows, 4, what);
        self.drop(add);
        let normed = self.t(rows * width, 4, what);
        self.drop(rs);
        self.drop(x32);
        let cast = self.t(rows * width, es, what);
        let y = self.t(rows * width, es, what);
        self.drop(cast);
        self.drop(normed);
        self.drop(var);
        y
    }

    /// One ViT block (`Qwen3_5VisionBlock`, `Qwen2_5_VLVisionBlock`): the norm, qkv, the rotary
    /// in fp32, attention over each chunk of `chunks` patches on its own (SDPA per `cu_seqlens`
    /// chunk: an image, or a window), proj and the residual; the norm, the MLP (fc1, GELU-tanh,
    /// fc2; or Qwen2.5-VL's gate, SiLU, up, their product, down) and the residual.
    pub(super) fn vision_block(&mut self, x: X, t: &VisionTower, p: u64, chunks: &[u64]) -> X {
        let es = bytes(self.ctx.aux_weight);
        let hv = t.hidden_size;
        let what = What::Vision;
        let n1 = self.vision_norm(p, hv, es);
        let qkv = self.t(p * 3 * hv, es, what);
        self.tp.gemm(false);
        // apply_rotary_pos_emb_vision: q and k in fp32, each `q·cos + rotate_half(q)·sin`.
        let qf = self.t(p * hv, 4, what);
        let kf = self.t(p * hv, 4, what);
        let mut rotated = vec![];
        for _ in 0..2 {
            let a = self.t(p * hv, 4, what);
            let neg = self.t(p * hv / 2, 4, what);
            let cat = self.t(p * hv, 4, what);
            self.drop(neg);
            let b = self.t(p * hv, 4, what);
            self.drop(cat);
            let sum = self.t(p * hv, 4, what);
            self.drop(a);
            self.drop(b);
            rotated.push(sum);
        }
        let q = self.t(p * hv, es, what);
        self.drop(rotated[0]);
        let k = self.t(p * hv, es, what);
        self.drop(rotated[1]);
        self.drop(qf);
        self.drop(kf);
        let lengths = self.t(chunks.len() as u64, 4, what);
        // One SDPA per chunk: its output, and the logsumexp and seeds it frees at once.
        let mut outs = vec![];
        for &n in chunks {
            let o = self.t(n * hv, es, what);
            let lse = self.t(n * t.num_heads, 4, what);
            let s1 = self.t(1, 8, what);
            let s2 = self.t(1, 8, what);
            self.drop(lse);
            self.drop(s1);
            self.drop(s2);
            outs.push(o);
        }
        let cat = self.t(p * hv, es, what);
        let proj = self.t(p * hv, es, what);
        self.drop(cat);
        self.drop(qkv);
        self.drop(k);
        self.drop(q);
        // The list of outputs dies last first.
        for o in outs.into_iter().rev() {
            self.drop(o);
        }
        self.drop(lengths);
        self.drop(n1);
        let h1 = self.t(p * hv, es, what);
        self.drop(proj);
        let n2 = self.vision_norm(p, hv, es);
        let wi = p * t.intermediate_size;
        let down = if self.vision_kind().windowed() {
            let gate = self.t(wi, es, what);
            let act = self.t(wi, es, what);
            self.drop(gate);
            let up = self.t(wi, es, what);
            let prod = self.t(wi, es, what);
            self.drop(act);
            self.drop(up);
            let down = self.t(p * hv, es, what);
            self.drop(prod);
            down
        } else {
            let fc1 = self.t(wi, es, what);
            let act = self.t(wi, es, what);
            self.drop(fc1);
            let fc2 = self.t(p * hv, es, what);
            self.drop(act);
            fc2
        };
        self.drop(n2);
        let out = self.t(p * hv, es, what);
        self.drop(down);
        self.drop(h1);
        self.drop(x);
        out
    }
}
