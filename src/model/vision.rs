//! A vision-language model's vision tower and the images it sees: the tower's config.json
//! numbers (`vision_config`), its parameters, and how an image of a given size becomes patches
//! and visual tokens — LLaMA-Factory's resize (`image_max_pixels` / `image_min_pixels`), then
//! the Qwen2-VL image processor's `smart_resize` to whole merged patches — and, for a windowed
//! tower, the windows its attention runs in.

use serde::{Deserialize, Serialize};

use super::family::VisionKind;

/// The vision tower of a Qwen3.5, Qwen3-VL or Qwen2.5-VL checkpoint (`Qwen3_5VisionModel`,
/// transformers 5.24 `modeling_qwen3_5.py:941-1200`; `Qwen2_5_VisionTransformerPretrainedModel`,
/// `modeling_qwen2_5_vl.py:386-489`), under its `vision_config` keys. A missing number takes the
/// config class's default (`Qwen3_5VisionConfig`, `Qwen2_5_VLVisionConfig`). How the blocks are
/// built is the family's [`VisionKind`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisionTower {
    /// ViT blocks.
    pub depth: u64,
    /// Width of the ViT.
    pub hidden_size: u64,
    /// Width of each block's MLP.
    pub intermediate_size: u64,
    /// Attention heads of each block.
    pub num_heads: u64,
    /// Side of a square patch, in pixels.
    pub patch_size: u64,
    /// Patches merged per side into one visual token.
    pub spatial_merge_size: u64,
    /// Frames per temporal patch (a still image is repeated this many times).
    pub temporal_patch_size: u64,
    /// Colour channels.
    #[serde(default = "three")]
    pub in_channels: u64,
    /// Width of a visual token (the language model's hidden size).
    pub out_hidden_size: u64,
    /// Learned position embeddings (a square grid, resampled to each image); 0 for a tower
    /// without them (Qwen2.5-VL's).
    #[serde(default)]
    pub num_position_embeddings: u64,
    /// Qwen3-VL's deepstack: the blocks (0-based) whose output also goes through a merger of its
    /// own; the i-th feature is added to the visual tokens' hidden states after decoder layer i
    /// (`Qwen3VLTextModel._deepstack_process`). Empty for Qwen3.5.
    #[serde(default)]
    pub deepstack_visual_indexes: Vec<u64>,
    /// Qwen2.5-VL's attention window, in pixels (`window_size`, 112: 4 × 4 visual tokens of
    /// 28 pixels); 0 for a tower without windows.
    #[serde(default)]
    pub window_size: u64,
    /// Qwen2.5-VL's blocks (0-based) that attend over each whole image; the others attend
    /// within each window.
    #[serde(default)]
    pub fullatt_block_indexes: Vec<u64>,
}

fn three() -> u64 {
    3
}

/// Largest accepted tower number: far above any published tower, small enough that every
/// product below stays inside u64.
pub const MAX_TOWER_NUMBER: u64 = 1 << 16;

impl VisionTower {
    /// Checks that every number is positive, bounded, and that the widths divide, for a tower
    /// built as `kind` builds it.
    pub fn validate(&self, kind: VisionKind) -> Result<(), String> {
        if kind.windowed() {
            if self.num_position_embeddings != 0 {
                return Err("vision_config.num_position_embeddings: this tower has no learned position embeddings".into());
            }
            let side = self.patch_size.saturating_mul(self.spatial_merge_size);
            if self.window_size < side || self.window_size > MAX_TOWER_NUMBER * 4 {
                return Err(format!(
                    "vision_config.window_size = {} must be between one visual token's side ({side} pixels) and {}",
                    self.window_size,
                    MAX_TOWER_NUMBER * 4
                ));
            }
        } else if self.window_size != 0 || !self.fullatt_block_indexes.is_empty() {
            return Err("vision_config: this tower has no attention windows (window_size and fullatt_block_indexes must be absent)".into());
        }
        for (i, &b) in self.fullatt_block_indexes.iter().enumerate() {
            if b >= self.depth || self.fullatt_block_indexes[..i].contains(&b) {
                return Err(format!(
                    "vision_config.fullatt_block_indexes: block {b} is past the tower's depth {} or named twice",
                    self.depth
                ));
            }
        }
        let positions = if kind.windowed() {
            1
        } else {
            self.num_position_embeddings
        };
        let fields = [
            ("depth", self.depth),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_heads", self.num_heads),
            ("patch_size", self.patch_size),
            ("spatial_merge_size", self.spatial_merge_size),
            ("temporal_patch_size", self.temporal_patch_size),
            ("in_channels", self.in_channels),
            ("out_hidden_size", self.out_hidden_size),
            ("num_position_embeddings", positions),
        ];
        for (k, v) in fields {
            if v == 0 || v > MAX_TOWER_NUMBER * 4 {
                return Err(format!(
                    "vision_config.{k} = {v} must be between 1 and {}",
                    MAX_TOWER_NUMBER * 4
                ));
            }
        }
        for (i, &b) in self.deepstack_visual_indexes.iter().enumerate() {
            if b >= self.depth || self.deepstack_visual_indexes[..i].contains(&b) {
                return Err(format!(
                    "vision_config.deepstack_visual_indexes: block {b} is past the tower's depth {} or named twice",
                    self.depth
                ));
            }
        }
        if self.hidden_size % self.num_heads != 0 || (self.hidden_size / self.num_heads) % 4 != 0 {
            return Err(format!(
                "vision_config.hidden_size {} must split into num_heads {} heads of a width divisible by 4 (the axial rotary)",
                self.hidden_size, self.num_heads
            ));
        }
        Ok(())
    }

    /// Width of a head.
    pub fn head_dim(&self) -> u64 {
        self.hidden_size / self.num_heads
    }

    /// Side of a merged patch in pixels: the image processor resizes to multiples of it.
    pub fn factor(&self) -> u64 {
        self.patch_size * self.spatial_merge_size
    }

    /// Values of one flattened patch (`C × temporal_patch × p × p`), `pixel_values`' width.
    pub fn patch_values(&self) -> u64 {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Width of the merger's input: `spatial_merge_size²` patches side by side.
    pub fn merged_width(&self) -> u64 {
        self.hidden_size * self.spatial_merge_size * self.spatial_merge_size
    }

    /// Parameters of the tower as `kind` builds it, in `named_parameters()` order by module.
    /// Qwen3.5 / Qwen3-VL: the patch embedding (a Conv3d with bias), the position embeddings,
    /// each block (two LayerNorms, qkv and proj with biases, the MLP's fc1 and fc2 with biases),
    /// the merger (LayerNorm, fc1, fc2), then each deepstack merger (its LayerNorm over the
    /// merged width, fc1, fc2). Qwen2.5-VL: the Conv3d without bias, each block (two RMSNorms,
    /// qkv and proj with biases, gate, up and down with biases), the merger (RMSNorm, fc1, fc2).
    pub fn param_shapes(&self, kind: VisionKind) -> Vec<u64> {
        self.params_and_linear(kind)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    /// Which of [`param_shapes`](Self::param_shapes) are `nn.Linear` weights (what 4-bit
    /// loading quantizes): each block's attention and MLP projections, the mergers' fc1 and fc2.
    pub fn linear_weights(&self, kind: VisionKind) -> Vec<bool> {
        self.params_and_linear(kind)
            .into_iter()
            .map(|(_, l)| l)
            .collect()
    }

    /// Each parameter's values and whether it is a Linear weight, in registration order: a
    /// LayerNorm (Qwen3.5's tower) has a bias after its weight, an RMSNorm (Qwen2.5-VL's) none;
    /// Qwen2.5-VL's SwiGLU MLP has a gate before the up and down projections that stand where
    /// fc1 and fc2 stand in Qwen3.5's.
    fn params_and_linear(&self, kind: VisionKind) -> Vec<(u64, bool)> {
        let h = self.hidden_size;
        let i = self.intermediate_size;
        let m = self.merged_width();
        let out = self.out_hidden_size;
        let (w, b, n) = (true, false, false);
        let windowed = kind.windowed();
        let mut v = vec![(h * self.patch_values(), n)];
        let norm = |v: &mut Vec<(u64, bool)>, width: u64| {
            v.push((width, n));
            if !windowed {
                v.push((width, b));
            }
        };
        if !windowed {
            v.extend([(h, b), (self.num_position_embeddings * h, n)]);
        }
        for _ in 0..self.depth {
            norm(&mut v, h);
            norm(&mut v, h);
            v.extend([(3 * h * h, w), (3 * h, b), (h * h, w), (h, b)]);
            if windowed {
                v.extend([(i * h, w), (i, b)]);
            }
            v.extend([(i * h, w), (i, b), (h * i, w), (h, b)]);
        }
        norm(&mut v, h);
        v.extend([(m * m, w), (m, b), (out * m, w), (out, b)]);
        for _ in &self.deepstack_visual_indexes {
            norm(&mut v, m);
            v.extend([(m * m, w), (m, b), (out * m, w), (out, b)]);
        }
        v
    }

    /// Parameters of the tower.
    pub fn params(&self, kind: VisionKind) -> u64 {
        self.params_and_linear(kind).iter().map(|(n, _)| n).sum()
    }

    /// Visual tokens per side of an attention window (`window_size / patch_size /
    /// spatial_merge_size`, `vit_merger_window_size`).
    pub fn window_side(&self) -> u64 {
        (self.window_size / self.factor()).max(1)
    }

    /// An image's visual-token grid (rows, columns).
    pub fn token_grid(&self, g: &ImageGrid) -> (u64, u64) {
        (g.height / self.factor(), g.width / self.factor())
    }

    /// The windows of one image (`get_vision_window_index`, transformers 5.24
    /// `vision_utils.py:130-179`): the visual-token grid cut into squares of
    /// [`window_side`](Self::window_side) tokens from the top left, row by row; returns each
    /// window's patch count (the partial ones at the right and bottom edges included; the
    /// empty ones, which `unique_consecutive` drops, left out).
    pub fn windows(&self, g: &ImageGrid) -> Vec<u64> {
        let m = self.spatial_merge_size;
        let side = self.window_side();
        let (th, tw) = self.token_grid(g);
        let mut out = vec![];
        for r in 0..th.div_ceil(side) {
            let rows = side.min(th - r * side);
            for c in 0..tw.div_ceil(side) {
                out.push(rows * side.min(tw - c * side) * m * m);
            }
        }
        out
    }

    /// The number of windows `get_vision_window_index` lays out for one image, the empty ones
    /// at the padded edges included (`cu_window_seqlens` before `unique_consecutive`).
    pub fn padded_windows(&self, g: &ImageGrid) -> u64 {
        let side = self.window_side();
        let (th, tw) = self.token_grid(g);
        (th / side + 1) * (tw / side + 1)
    }
}

/// The images of each sample, as LLaMA-Factory's settings name them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageSettings {
    /// Images in each sample (0: a text-only step).
    pub images_per_sample: u64,
    /// Each image's width before any resize, in pixels.
    pub image_width: u64,
    /// Each image's height before any resize, in pixels.
    pub image_height: u64,
    /// LLaMA-Factory's `image_max_pixels` (default 768 × 768).
    pub image_max_pixels: u64,
    /// LLaMA-Factory's `image_min_pixels` (default 32 × 32).
    pub image_min_pixels: u64,
    /// LLaMA-Factory's `freeze_vision_tower` (ms-swift `freeze_vit`; default on).
    pub freeze_vision_tower: bool,
    /// LLaMA-Factory's `freeze_multi_modal_projector` (ms-swift `freeze_aligner`; default on).
    pub freeze_multi_modal_projector: bool,
}

impl Default for ImageSettings {
    fn default() -> Self {
        ImageSettings {
            images_per_sample: 0,
            image_width: 1024,
            image_height: 1024,
            image_max_pixels: 768 * 768,
            image_min_pixels: 32 * 32,
            freeze_vision_tower: true,
            freeze_multi_modal_projector: true,
        }
    }
}

/// The visual part of each sample: one image's grid, the images, and the tokens they take in
/// the language model's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Visual {
    /// Each image as the tower sees it.
    pub grid: ImageGrid,
    /// Images per sample.
    pub images: u64,
}

impl Visual {
    /// Visual tokens of one sample.
    pub fn tokens(&self) -> u64 {
        self.images * self.grid.tokens
    }
    /// Tokens the images take in the sequence: their visual tokens and each image's
    /// `<|vision_start|>` and `<|vision_end|>`.
    pub fn sequence_tokens(&self) -> u64 {
        self.images * (self.grid.tokens + 2)
    }
    /// Patches of one sample.
    pub fn patches(&self) -> u64 {
        self.images * self.grid.patches
    }
}

/// The visual part of a sample for these settings, or why it cannot be planned (no tower, a
/// trained tower, more visual tokens than `seq`). `None`: a text-only step.
pub fn visual(
    tower: Option<(&VisionTower, VisionKind)>,
    s: &ImageSettings,
    seq: u64,
) -> Result<Option<Visual>, (&'static str, String)> {
    if s.images_per_sample == 0 {
        return Ok(None);
    }
    let Some((tower, kind)) = tower else {
        return Err((
            "images_per_sample",
            "this model has no vision tower: pick a vision-language model (a config.json with a vision_config) or set 0 images".into(),
        ));
    };
    if s.images_per_sample > MAX_IMAGES {
        return Err((
            "images_per_sample",
            format!("{} must be at most {MAX_IMAGES}", s.images_per_sample),
        ));
    }
    if !s.freeze_vision_tower {
        return Err((
            "freeze_vision_tower",
            "training the vision tower is not planned yet: lorafit plans it frozen (LLaMA-Factory's and ms-swift's default)".into(),
        ));
    }
    if !s.freeze_multi_modal_projector {
        return Err((
            "freeze_multi_modal_projector",
            "training the projector (the patch merger) is not planned yet: lorafit plans it frozen (LLaMA-Factory's and ms-swift's default)".into(),
        ));
    }
    if s.image_max_pixels == 0 || s.image_min_pixels > s.image_max_pixels {
        return Err((
            "image_max_pixels",
            format!(
                "image_max_pixels {} must be at least 1 and at least image_min_pixels {}",
                s.image_max_pixels, s.image_min_pixels
            ),
        ));
    }
    let grid = image_grid(
        tower,
        kind,
        s.image_width,
        s.image_height,
        s.image_max_pixels,
        s.image_min_pixels,
    )
    .map_err(|e| ("image_width", e))?;
    let v = Visual {
        grid,
        images: s.images_per_sample,
    };
    if v.sequence_tokens() >= seq {
        return Err((
            "seq",
            format!(
                "{} images of {} visual tokens each (+2 markers) take {} tokens, leaving no text in a sequence of {seq}: seq counts every token the language model sees, as LLaMA-Factory's cutoff_len does",
                v.images,
                grid.tokens,
                v.sequence_tokens()
            ),
        ));
    }
    Ok(Some(v))
}

/// Largest accepted image side, in pixels.
pub const MAX_IMAGE_SIDE: u64 = 1 << 16;
/// Most images in one sample.
pub const MAX_IMAGES: u64 = 1024;

/// One image as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageGrid {
    /// The image after LLaMA-Factory's resize (`image_max_pixels` / `image_min_pixels`).
    pub loaded_width: u64,
    /// See `loaded_width`.
    pub loaded_height: u64,
    /// The image after the processor's `smart_resize`.
    pub width: u64,
    /// See `width`.
    pub height: u64,
    /// Patches (`grid_t × grid_h × grid_w`, one temporal patch for a still image).
    pub patches: u64,
    /// Visual tokens: patches / `spatial_merge_size²`.
    pub tokens: u64,
}

/// LLaMA-Factory's resize of a dataset image before the processor: above `max_pixels` both
/// sides are scaled by `sqrt(max_pixels / (w·h))` and truncated, below `min_pixels` by
/// `sqrt(min_pixels / (w·h))` (`data/mm_plugin.py:218-235`, `MMPluginMixin._preprocess_image`);
/// then the Qwen2-VL / Qwen3-VL plugins widen a side under 28 pixels to 28 and cut an aspect
/// ratio above 200 to 180 (`mm_plugin.py:2260-2275`).
pub fn llamafactory_resize(
    width: u64,
    height: u64,
    max_pixels: u64,
    min_pixels: u64,
) -> (u64, u64) {
    let (mut w, mut h) = (width, height);
    let scale = |w: u64, h: u64, target: u64| {
        let f = (target as f64 / (w as f64 * h as f64)).sqrt();
        (
            ((w as f64 * f) as u64).max(1),
            ((h as f64 * f) as u64).max(1),
        )
    };
    if w * h > max_pixels {
        (w, h) = scale(w, h, max_pixels);
    }
    if w * h < min_pixels {
        (w, h) = scale(w, h, min_pixels);
    }
    if w.min(h) < 28 {
        (w, h) = (w.max(28), h.max(28));
    }
    if w > 200 * h {
        w = h * 180;
    } else if h > 200 * w {
        h = w * 180;
    }
    (w, h)
}

/// The Qwen2-VL image processor's `smart_resize` (transformers 5.24
/// `models/qwen2_vl/image_processing_qwen2_vl.py:63-89`): each side rounded to a multiple of
/// `factor`, scaled down (floor) above `max_pixels` or up (ceil) below `min_pixels`. Returns
/// (height, width).
pub fn smart_resize(
    height: u64,
    width: u64,
    factor: u64,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(u64, u64), String> {
    let (hf, wf, ff) = (height as f64, width as f64, factor as f64);
    if hf.max(wf) / hf.min(wf) > 200.0 {
        return Err(format!(
            "an image of {width}×{height} has an aspect ratio above 200, which the image processor refuses"
        ));
    }
    // Python's round() rounds halves to even.
    let round_even = |x: f64| {
        let r = x.round();
        if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
            r - x.signum()
        } else {
            r
        }
    };
    let mut h_bar = round_even(hf / ff) as u64 * factor;
    let mut w_bar = round_even(wf / ff) as u64 * factor;
    if h_bar * w_bar > max_pixels {
        let beta = (hf * wf / max_pixels as f64).sqrt();
        h_bar = factor.max((hf / beta / ff).floor() as u64 * factor);
        w_bar = factor.max((wf / beta / ff).floor() as u64 * factor);
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels as f64 / (hf * wf)).sqrt();
        h_bar = (hf * beta / ff).ceil() as u64 * factor;
        w_bar = (wf * beta / ff).ceil() as u64 * factor;
    }
    Ok((h_bar, w_bar))
}

/// An image of `width × height` through LLaMA-Factory's resize and the processor, as the tower
/// sees it.
pub fn image_grid(
    tower: &VisionTower,
    kind: VisionKind,
    width: u64,
    height: u64,
    max_pixels: u64,
    min_pixels: u64,
) -> Result<ImageGrid, String> {
    if width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
        return Err(format!(
            "an image of {width}×{height}: each side must be between 1 and {MAX_IMAGE_SIDE} pixels"
        ));
    }
    let (lw, lh) = llamafactory_resize(width, height, max_pixels, min_pixels);
    let (min_pixels, max_pixels) = kind.processor_pixels();
    let (rh, rw) = smart_resize(lh, lw, tower.factor(), min_pixels, max_pixels)?;
    let patches = (rh / tower.patch_size) * (rw / tower.patch_size);
    Ok(ImageGrid {
        loaded_width: lw,
        loaded_height: lh,
        width: rw,
        height: rh,
        patches,
        tokens: patches / (tower.spatial_merge_size * tower.spatial_merge_size),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen3.5-4B's `vision_config` (the published config.json, as `measure_vl.py` types it).
    fn q35_4b() -> VisionTower {
        VisionTower {
            depth: 24,
            hidden_size: 1024,
            intermediate_size: 4096,
            num_heads: 16,
            patch_size: 16,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            in_channels: 3,
            out_hidden_size: 2560,
            num_position_embeddings: 2304,
            deepstack_visual_indexes: vec![],
            window_size: 0,
            fullatt_block_indexes: vec![],
        }
    }

    #[test]
    fn smart_resize_matches_the_processors_python() {
        // Values printed by transformers 5.24's smart_resize (its source run by python3).
        assert_eq!(
            smart_resize(448, 448, 32, 56 * 56, 28 * 28 * 1280),
            Ok((448, 448))
        );
        assert_eq!(
            smart_resize(1000, 750, 28, 56 * 56, 28 * 28 * 1280),
            Ok((1008, 756))
        );
        // 16 / 32 = 0.5 rounds to 0 (half to even), then min_pixels scales it up.
        assert_eq!(smart_resize(16, 16, 32, 32 * 32, 16_777_216), Ok((32, 32)));
        assert_eq!(
            smart_resize(4000, 3000, 32, 65_536, 1_048_576),
            Ok((1152, 864))
        );
        assert!(smart_resize(10, 3000, 32, 65_536, 16_777_216).is_err());
    }

    #[test]
    fn llamafactory_caps_the_pixels_before_the_processor() {
        // 1024×1024 > 768×768: scaled by 0.75 exactly.
        assert_eq!(
            llamafactory_resize(1024, 1024, 768 * 768, 32 * 32),
            (768, 768)
        );
        assert_eq!(
            llamafactory_resize(448, 448, 768 * 768, 32 * 32),
            (448, 448)
        );
        let g = image_grid(
            &q35_4b(),
            VisionKind::Qwen35,
            1024,
            1024,
            768 * 768,
            32 * 32,
        )
        .unwrap();
        assert_eq!(
            (g.width, g.height, g.patches, g.tokens),
            (768, 768, 2304, 576)
        );
        // A 12-megapixel photo and a 1080p frame at LLaMA-Factory's defaults (its resize and the
        // processor's smart_resize run in python3: 886×665 → 896×672, 1024×576 → 1024×576).
        let g = image_grid(
            &q35_4b(),
            VisionKind::Qwen35,
            4032,
            3024,
            768 * 768,
            32 * 32,
        )
        .unwrap();
        assert_eq!((g.loaded_width, g.loaded_height), (886, 665));
        assert_eq!(
            (g.width, g.height, g.patches, g.tokens),
            (896, 672, 2352, 588)
        );
        let g = image_grid(
            &q35_4b(),
            VisionKind::Qwen35,
            1920,
            1080,
            768 * 768,
            32 * 32,
        )
        .unwrap();
        assert_eq!((g.width, g.height, g.tokens), (1024, 576, 576));
    }

    #[test]
    fn the_4b_tower_has_its_published_parameter_count() {
        // 2-block tower measured by the harness: 56,397,312 parameters (vision_params in
        // tests/data/steptrace/models26.jsonl's VL recording).
        let mut t = q35_4b();
        t.depth = 2;
        assert_eq!(t.params(VisionKind::Qwen35), 56_397_312);
        assert!(t.validate(VisionKind::Qwen35).is_ok());
    }

    /// Qwen2.5-VL-3B's `vision_config` (the published config.json, as `measure_vl.py` types it).
    fn q25_3b() -> VisionTower {
        VisionTower {
            depth: 32,
            hidden_size: 1280,
            intermediate_size: 3420,
            num_heads: 16,
            patch_size: 14,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            in_channels: 3,
            out_hidden_size: 2048,
            num_position_embeddings: 0,
            deepstack_visual_indexes: vec![],
            window_size: 112,
            fullatt_block_indexes: vec![7, 15, 23, 31],
        }
    }

    #[test]
    fn the_windowed_tower_has_the_harness_parameter_count() {
        // vision_params of the `q25vl` and `q25vlqkvo` recordings (tests/data/steptrace/
        // models26_vl.jsonl): the tower cut to 4 and 5 blocks.
        let mut t = q25_3b();
        t.depth = 4;
        t.fullatt_block_indexes = vec![1, 3];
        assert_eq!(t.params(VisionKind::Qwen25Vl), 117_022_688);
        assert!(t.validate(VisionKind::Qwen25Vl).is_ok());
        t.depth = 5;
        t.fullatt_block_indexes = vec![2];
        assert_eq!(t.params(VisionKind::Qwen25Vl), 136_724_888);
        // A windowed tower's numbers on a tower without windows, and the reverse, are refused.
        assert!(t.validate(VisionKind::Qwen35).is_err());
        assert!(q35_4b().validate(VisionKind::Qwen25Vl).is_err());
        t.fullatt_block_indexes = vec![5];
        assert!(t
            .validate(VisionKind::Qwen25Vl)
            .unwrap_err()
            .contains("fullatt_block_indexes"));
    }

    #[test]
    fn windows_follow_get_vision_window_index() {
        // Counted by transformers 5.24's get_vision_window_index (vision_utils.py) run in
        // python3 on these grids: a 448×448 image (32×32 patches) has 16 windows of 64 patches;
        // 644×476 (34×46 patches, 17×23 visual tokens) 30 windows, the last row 1 token high and
        // the last column 3 tokens wide, and no empty window to drop; the 448×448 image's
        // padding adds 9 empty ones, which `unique_consecutive` drops.
        let t = q25_3b();
        let square = image_grid(&t, VisionKind::Qwen25Vl, 448, 448, 768 * 768, 32 * 32).unwrap();
        assert_eq!(t.windows(&square), vec![64; 16]);
        assert_eq!(t.padded_windows(&square), 25);
        let wide = image_grid(&t, VisionKind::Qwen25Vl, 640, 480, 768 * 768, 32 * 32).unwrap();
        assert_eq!((wide.width, wide.height), (644, 476));
        let w = t.windows(&wide);
        assert_eq!(w.len(), 30);
        assert_eq!(w.iter().sum::<u64>(), 34 * 46);
        assert_eq!(&w[..6], &[64, 64, 64, 64, 64, 48]);
        assert_eq!(&w[24..], &[16, 16, 16, 16, 16, 12]);
        assert_eq!(t.padded_windows(&wide), 30);
        // The processor's own limits: Qwen2.5-VL's smallest image is 4 visual tokens.
        let g = image_grid(&t, VisionKind::Qwen25Vl, 20, 20, 768 * 768, 32 * 32).unwrap();
        assert_eq!((g.width, g.height, g.tokens), (56, 56, 4));
    }

    #[test]
    fn deepstack_mergers_add_their_parameters() {
        // Qwen3-VL-4B's tower cut to 4 blocks with deepstack after blocks 0, 1, 2, as the harness
        // built it: 163,423,232 parameters (vision_params of the `q3vl` recording in
        // tests/data/steptrace/models26_vl.jsonl).
        let mut t = q35_4b();
        t.depth = 4;
        t.deepstack_visual_indexes = vec![0, 1, 2];
        assert_eq!(t.params(VisionKind::Qwen3Vl), 163_423_232);
        assert!(t.validate(VisionKind::Qwen3Vl).is_ok());
        t.deepstack_visual_indexes = vec![0, 4];
        assert!(t
            .validate(VisionKind::Qwen3Vl)
            .unwrap_err()
            .contains("deepstack"));
    }
}
