//! The page's state as a URL query string, so links and embeds reproduce a plan.
//! Decoding treats the URL as untrusted input: unknown or malformed parameters are skipped with
//! a notice for the page to show, and everything valid still applies.

use crate::formats::{catalog, fields};
use crate::model::{Architecture, Family, Settings};
use crate::planning::evaluate::Axis;
use crate::web::i18n::Lang;
use crate::web::state::UiState;

/// The optional numbers of an imported architecture, each under its one-letter prefix in the
/// link: how [`encode_arch`] reads it and how [`decode_arch`] sets it back (flags as 0 / 1,
/// `R` the rotary factor in thousandths). One table for both directions.
type Number = (
    &'static str,
    fn(&Architecture) -> Option<u64>,
    fn(&mut Architecture, u64),
);

const NUMBERS: &[Number] = &[
    (
        "e",
        |a| a.moe.num_experts,
        |a, x| a.moe.num_experts = Some(x),
    ),
    (
        "k",
        |a| a.moe.num_experts_per_tok,
        |a, x| a.moe.num_experts_per_tok = Some(x),
    ),
    (
        "m",
        |a| a.moe.moe_intermediate_size,
        |a, x| a.moe.moe_intermediate_size = Some(x),
    ),
    (
        "s",
        |a| a.moe.n_shared_experts,
        |a, x| a.moe.n_shared_experts = Some(x),
    ),
    (
        "S",
        |a| a.moe.shared_expert_intermediate_size,
        |a, x| a.moe.shared_expert_intermediate_size = Some(x),
    ),
    (
        "f",
        |a| a.moe.first_k_dense_replace,
        |a, x| a.moe.first_k_dense_replace = Some(x),
    ),
    (
        "d",
        |a| a.moe.decoder_sparse_step,
        |a, x| a.moe.decoder_sparse_step = Some(x),
    ),
    (
        "n",
        |a| a.moe.norm_topk_prob.map(u64::from),
        |a, x| a.moe.norm_topk_prob = Some(x == 1),
    ),
    ("g", |a| a.moe.n_group, |a, x| a.moe.n_group = Some(x)),
    ("t", |a| a.moe.topk_group, |a, x| a.moe.topk_group = Some(x)),
    (
        "Q",
        |a| a.use_qk_norm.map(u64::from),
        |a, x| a.use_qk_norm = Some(x == 1),
    ),
    (
        "B",
        |a| a.qkv_bias.map(u64::from),
        |a, x| a.qkv_bias = Some(x == 1),
    ),
    (
        "c",
        |a| a.mla.kv_lora_rank,
        |a, x| a.mla.kv_lora_rank = Some(x),
    ),
    (
        "p",
        |a| a.mla.qk_nope_head_dim,
        |a, x| a.mla.qk_nope_head_dim = Some(x),
    ),
    (
        "r",
        |a| a.mla.qk_rope_head_dim,
        |a, x| a.mla.qk_rope_head_dim = Some(x),
    ),
    ("v", |a| a.mla.v_head_dim, |a, x| a.mla.v_head_dim = Some(x)),
    (
        "H",
        |a| a.linear.linear_num_key_heads,
        |a, x| a.linear.linear_num_key_heads = Some(x),
    ),
    (
        "V",
        |a| a.linear.linear_num_value_heads,
        |a, x| a.linear.linear_num_value_heads = Some(x),
    ),
    (
        "D",
        |a| a.linear.linear_key_head_dim,
        |a, x| a.linear.linear_key_head_dim = Some(x),
    ),
    (
        "W",
        |a| a.linear.linear_value_head_dim,
        |a, x| a.linear.linear_value_head_dim = Some(x),
    ),
    (
        "C",
        |a| a.linear.linear_conv_kernel_dim,
        |a, x| a.linear.linear_conv_kernel_dim = Some(x),
    ),
    (
        "I",
        |a| a.linear.full_attention_interval,
        |a, x| a.linear.full_attention_interval = Some(x),
    ),
    (
        "G",
        |a| a.linear.attn_output_gate.map(u64::from),
        |a, x| a.linear.attn_output_gate = Some(x == 1),
    ),
    (
        "R",
        |a| a.partial_rotary_factor.map(|f| (f * 1000.0).round() as u64),
        |a, x| a.partial_rotary_factor = Some(x as f64 / 1000.0),
    ),
    (
        "N",
        |a| a.nope.no_rope_layer_interval,
        |a, x| a.nope.no_rope_layer_interval = Some(x),
    ),
    (
        "U",
        |a| a.nope.attn_temperature_tuning.map(u64::from),
        |a, x| a.nope.attn_temperature_tuning = Some(x == 1),
    ),
    (
        "K",
        |a| a.nope.attention_chunk_size,
        |a, x| a.nope.attention_chunk_size = Some(x),
    ),
    (
        "M",
        |a| a.moe.intermediate_size_mlp,
        |a, x| a.moe.intermediate_size_mlp = Some(x),
    ),
];

/// `family.hidden.intermediate.layers.heads.kv_heads.head_dim.vocab.tied` of an imported model,
/// then, for a mixture-of-experts model, its MoE and MLA numbers as prefixed parts (`e64`,
/// `k8`, `m1408`, `s2`, `f1`, `d1`, `n0`, `o1-3` (mlp_only_layers), `q1536` (q_lora_rank, 0 =
/// none), `c512`, `p128`, `r64`, `v128`, `M16384` (Llama 4's dense MLP width)); for a hybrid model its linear-attention numbers
/// (`H16` key heads, `V32` value heads, `D128` key width, `W128` value width, `C4` kernel, `I4`
/// full-attention interval, `G1` output gate, `R250` rotary factor in thousandths, `Tllf…` the
/// layer types, one letter per layer).
pub fn encode_arch(a: &Architecture) -> String {
    let mut s = format!(
        "{}.{}.{}.{}.{}.{}.{}.{}.{}",
        a.family.name(),
        a.hidden_size,
        a.intermediate_size,
        a.num_hidden_layers,
        a.num_attention_heads,
        a.kv_heads(),
        a.head_dim(),
        a.vocab_size,
        u8::from(a.tie_word_embeddings)
    );
    let m = &a.moe;
    for (p, get, _) in NUMBERS {
        if let Some(v) = get(a) {
            s.push_str(&format!(".{p}{v}"));
        }
    }
    if let Some(t) = &a.linear.layer_types {
        let l: String = t
            .iter()
            .map(|t| match t {
                crate::model::arch::LayerType::Linear => 'l',
                crate::model::arch::LayerType::Full => 'f',
            })
            .collect();
        s.push_str(&format!(".T{l}"));
    }
    if let Some(l) = &a.nope.no_rope_layers {
        // Llama 4's rotary flags, one digit per layer.
        let l: String = l.iter().map(|f| if *f == 0 { '0' } else { '1' }).collect();
        s.push_str(&format!(".P{l}"));
    }
    if let Some(only) = &m.mlp_only_layers {
        if !only.is_empty() {
            let l: Vec<String> = only.iter().map(|x| x.to_string()).collect();
            s.push_str(&format!(".o{}", l.join("-")));
        }
    }
    if a.mla().is_some() {
        s.push_str(&format!(".q{}", a.mla.q_lora_rank.unwrap_or(0)));
    }
    if let Some(t) = &a.vision {
        // The vision tower's config.json numbers, in `VisionTower`'s field order.
        s.push_str(&format!(
            ".Y{}-{}-{}-{}-{}-{}-{}-{}-{}-{}",
            t.depth,
            t.hidden_size,
            t.intermediate_size,
            t.num_heads,
            t.patch_size,
            t.spatial_merge_size,
            t.temporal_patch_size,
            t.in_channels,
            t.out_hidden_size,
            t.num_position_embeddings
        ));
        if !t.deepstack_visual_indexes.is_empty() {
            let l: Vec<String> = t
                .deepstack_visual_indexes
                .iter()
                .map(u64::to_string)
                .collect();
            s.push_str(&format!(".Z{}", l.join("-")));
        }
        if t.window_size != 0 {
            // Qwen2.5-VL's window, then its full-attention blocks.
            let mut l = vec![t.window_size.to_string()];
            l.extend(t.fullatt_block_indexes.iter().map(u64::to_string));
            s.push_str(&format!(".X{}", l.join("-")));
        }
    }
    s
}

/// Parses [`encode_arch`]'s form; None when malformed or invalid.
pub fn decode_arch(v: &str) -> Option<Architecture> {
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() < 9 || parts.len() > 9 + 29 {
        return None;
    }
    let n = |i: usize| parts[i].parse::<u64>().ok();
    let mut a = Architecture {
        name: "imported config".into(),
        family: Family::parse(parts[0])?,
        hidden_size: n(1)?,
        intermediate_size: n(2)?,
        num_hidden_layers: n(3)?,
        num_attention_heads: n(4)?,
        num_key_value_heads: Some(n(5)?),
        head_dim: Some(n(6)?),
        vocab_size: n(7)?,
        tie_word_embeddings: bool01(parts[8])?,
        qkv_bias: None,
        attn_logit_softcapping: None,
        final_logit_softcapping: None,
        partial_rotary_factor: None,
        use_qk_norm: None,
        moe: Default::default(),
        mla: Default::default(),
        linear: Default::default(),
        nope: Default::default(),
        vision: None,
    };
    for part in &parts[9..] {
        let (p, rest) = part.split_at(part.char_indices().nth(1).map_or(part.len(), |(i, _)| i));
        if p == "o" {
            let layers: Option<Vec<u64>> = rest.split('-').map(|x| x.parse().ok()).collect();
            a.moe.mlp_only_layers = Some(layers?);
            continue;
        }
        if p == "Y" {
            let n: Option<Vec<u64>> = rest.split('-').map(|x| x.parse().ok()).collect();
            let n = n?;
            if n.len() != 10 {
                return None;
            }
            a.vision = Some(crate::model::vision::VisionTower {
                depth: n[0],
                hidden_size: n[1],
                intermediate_size: n[2],
                num_heads: n[3],
                patch_size: n[4],
                spatial_merge_size: n[5],
                temporal_patch_size: n[6],
                in_channels: n[7],
                out_hidden_size: n[8],
                num_position_embeddings: n[9],
                deepstack_visual_indexes: vec![],
                window_size: 0,
                fullatt_block_indexes: vec![],
            });
            continue;
        }
        if p == "X" {
            // Qwen2.5-VL's window and full-attention blocks, after the tower's numbers.
            let n: Option<Vec<u64>> = rest.split('-').map(|x| x.parse().ok()).collect();
            let (window, blocks) = n?.split_first().map(|(w, b)| (*w, b.to_vec()))?;
            let t = a.vision.as_mut()?;
            t.window_size = window;
            t.fullatt_block_indexes = blocks;
            continue;
        }
        if p == "Z" {
            // Qwen3-VL's deepstack blocks, after the tower's numbers.
            let n: Option<Vec<u64>> = rest.split('-').map(|x| x.parse().ok()).collect();
            a.vision.as_mut()?.deepstack_visual_indexes = n?;
            continue;
        }
        if p == "P" {
            let flags: Option<Vec<u64>> =
                rest.chars().map(|c| c.to_digit(2).map(u64::from)).collect();
            a.nope.no_rope_layers = Some(flags?);
            continue;
        }
        if p == "T" {
            use crate::model::arch::LayerType;
            let types: Option<Vec<LayerType>> = rest
                .chars()
                .map(|c| match c {
                    'l' => Some(LayerType::Linear),
                    'f' => Some(LayerType::Full),
                    _ => None,
                })
                .collect();
            a.linear.layer_types = Some(types?);
            continue;
        }
        let x: u64 = rest.parse().ok()?;
        if p == "q" {
            a.mla.q_lora_rank = (x > 0).then_some(x);
            continue;
        }
        let (_, _, set) = NUMBERS.iter().find(|(name, ..)| *name == p)?;
        set(&mut a, x);
    }
    if a.mla().is_some() {
        // head_dim is derived (qk_rope_head_dim) for latent attention.
        a.head_dim = None;
    }
    a.validate().ok()?;
    Some(a)
}

/// Longest query string looked at; anything beyond is ignored with a notice.
pub const MAX_QUERY_LEN: usize = 4096;
/// At most this many notices are reported.
const MAX_NOTICES: usize = 8;

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Shortens a value for display in a notice (and keeps it plain text).
fn shown(v: &str) -> String {
    let mut s: String = v.chars().filter(|c| !c.is_control()).take(40).collect();
    if v.chars().count() > 40 {
        s.push('…');
    }
    s
}

fn bool01(v: &str) -> Option<bool> {
    fields::boolean(v).ok()
}

/// Parses a query string (with or without the leading `?`). Returns the state and notices about
/// what was ignored.
pub fn decode(query: &str) -> (UiState, Vec<String>) {
    let mut st = UiState::default();
    let mut notices = vec![];
    let mut q = query.strip_prefix('?').unwrap_or(query);
    if q.len() > MAX_QUERY_LEN {
        notices.push(format!(
            "the link is longer than {MAX_QUERY_LEN} characters; the rest was ignored"
        ));
        let mut cut = MAX_QUERY_LEN;
        while !q.is_char_boundary(cut) {
            cut -= 1;
        }
        q = &q[..cut];
    }
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        let ok = match k.as_str() {
            "model" => catalog::find_model(&v)
                .map(|m| st.model = m.arch.name.clone())
                .is_ok(),
            "gpu" => catalog::find_gpu(&v).map(|g| st.gpu = g.id.clone()).is_ok(),
            "embed" => bool01(&v).map(|x| st.embed = x).is_some(),
            "lang" => match v.as_str() {
                "zh" | "en" => {
                    st.lang = Lang::parse(&v);
                    true
                }
                _ => false,
            },
            "arch" => decode_arch(&v).map(|a| st.custom = Some(a)).is_some(),
            "hub" => {
                // Only a same-origin relative path: a link can never point the page elsewhere.
                let ok =
                    v.starts_with("./") && !v.contains("..") && !v.contains("//") && v.len() < 100;
                if ok {
                    st.hub = Some(v.trim_end_matches('/').to_string());
                }
                ok
            }
            "axis" => match v.as_str() {
                "seq" => {
                    st.axis = Axis::Seq;
                    true
                }
                "batch" => {
                    st.axis = Axis::Batch;
                    true
                }
                _ => false,
            },
            key => match fields::by_url(key) {
                Some(field) => (field.set)(&mut st.settings, &v).is_ok(),
                None => {
                    if notices.len() < MAX_NOTICES {
                        notices.push(format!("ignored unknown parameter “{}”", shown(&k)));
                    }
                    continue;
                }
            },
        };
        if !ok && notices.len() < MAX_NOTICES {
            notices.push(format!(
                "ignored “{}={}”: not a valid value",
                shown(&k),
                shown(&v)
            ));
        }
    }
    // An empty target list is valid only next to something else to train (modules_to_save,
    // LoRA on the experts): otherwise keep the default targets, and say so.
    if st.settings.targets.is_empty()
        && st.settings.modules_to_save.is_empty()
        && st.settings.target_parameters.is_empty()
    {
        st.settings.targets = Settings::default().targets;
        if notices.len() < MAX_NOTICES {
            notices.push("no module left to train: kept the default target modules".into());
        }
    }
    // Fields that are valid one by one can still clash (4 GPUs without a strategy, parameter
    // offload under DDP): keep the one-GPU layout then, and say so.
    if let Err(e) = st.settings.parallel.validate(st.settings.grad_ckpt) {
        st.settings.parallel.offload_activations &= st.settings.grad_ckpt;
        if st.settings.parallel.world() > 1
            && st.settings.parallel.strategy == crate::model::Strategy::Single
        {
            st.settings.parallel.strategy = crate::model::Strategy::FsdpFullShard;
        }
        if st
            .settings
            .parallel
            .validate(st.settings.grad_ckpt)
            .is_err()
        {
            st.settings.parallel = Default::default();
        }
        if notices.len() < MAX_NOTICES {
            notices.push(format!("adjusted the GPU layout: {e}"));
        }
    }
    (st, notices)
}

/// Encodes the state as a query string (no leading `?`), listing only what differs from the defaults.
pub fn encode(st: &UiState) -> String {
    let d = UiState::default();
    let mut p: Vec<(&str, String)> = vec![("model", st.model.clone()), ("gpu", st.gpu.clone())];
    for f in fields::FIELDS {
        if let Some(key) = f.url {
            if f.differs(&st.settings) {
                p.push((key, (f.get)(&st.settings)));
            }
        }
    }
    let mut add = |k: &'static str, differs: bool, v: String| {
        if differs {
            p.push((k, v));
        }
    };
    add("embed", st.embed, "1".into());
    add("axis", st.axis != d.axis, "batch".into());
    if let Some(l) = st.lang {
        p.push(("lang", l.code().into()));
    }
    if let Some(a) = &st.custom {
        p.push(("arch", encode_arch(a)));
    }
    p.iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The state of `query` as the other half of the page sends it (the page and its sections
/// bundle, [`crate::web::bridge`]): what a link carries, with what a link never carries — the
/// Hub path, the embed flag — kept from `local`.
pub fn decode_shared(query: &str, local: &UiState) -> UiState {
    let (mut st, _) = decode(query);
    st.hub = local.hub.clone();
    st.embed = local.embed;
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttnImpl, Dtype, Optimizer, SavedModule, Target};

    /// What the page and its sections send each other settles at once: a state that went
    /// through the link comes back equal (so neither side sends it again), and the Hub path,
    /// which no link carries, stays on each side.
    #[test]
    fn shared_states_settle_and_keep_the_hub() {
        let (mut st, _) = decode("?model=qwen2-7b&gpu=rtx4090&b=3&s=3000&gc=1&dt=nf4&r=32&lang=zh&arch=mistral.4096.14336.32.32.8.128.32000.0");
        assert!(st.custom.is_some());
        st.hub = Some("./hub".into());
        let there = decode_shared(&encode(&st), &UiState::default());
        assert_eq!(there.hub, None);
        let back = decode_shared(&encode(&there), &st);
        assert_eq!(back, st);
        assert_eq!(encode(&back), encode(&st));
    }

    #[test]
    fn round_trip_keeps_every_setting() {
        let mut st = UiState {
            model: "qwen2-7b".into(),
            gpu: "rtx4090".into(),
            embed: true,
            axis: Axis::Batch,
            ..UiState::default()
        };
        let s = &mut st.settings;
        s.batch = 7;
        s.seq = 3000;
        s.lora_r = 48;
        s.lora_alpha = 12.5;
        s.lora_dropout = 0.0;
        s.grad_accum = 16;
        s.quant = Some(crate::model::Quant::Nf4);
        s.double_quant = false;
        s.quant_storage = crate::model::QuantStorage::Bf16;
        s.autocast = Some(Dtype::Bf16);
        s.attn_impl = AttnImpl::Eager;
        s.grad_ckpt = true;
        s.padded_mask = true;
        s.fused_ce = crate::model::FusedCe::Cce;
        s.parallel = crate::model::Parallel {
            gpus_per_node: 4,
            nodes: 2,
            strategy: crate::model::Strategy::FsdpHybridShard,
            offload_optimizer: true,
            offload_params: true,
            offload_activations: true,
            fsdp_version: crate::model::FsdpVersion::V2,
        };
        s.optimizer = Optimizer::PagedAdamw8bit;
        s.targets = vec![Target::Q, Target::V, Target::Down];
        s.modules_to_save = vec![SavedModule::LmHead];
        st.custom = crate::formats::config_json::parse_config(r#"{"model_type":"qwen2","hidden_size":896,"intermediate_size":4864,"num_attention_heads":14,"num_hidden_layers":24,"num_key_value_heads":2,"vocab_size":151936}"#).ok().map(|r| r.value).map(|mut a| {
            a.name = "imported config".into();
            a.num_key_value_heads = Some(a.kv_heads());
            a.head_dim = Some(a.head_dim());
            a
        });
        assert!(st.custom.is_some());
        let (back, notices) = decode(&encode(&st));
        assert!(notices.is_empty(), "{notices:?}");
        assert_eq!(back, st);
        assert_eq!(decode(&encode(&UiState::default())).0, UiState::default());
    }

    #[test]
    fn imported_moe_architectures_and_moe_settings_round_trip() {
        // Every MoE catalog model, as an imported config: the link keeps its MoE / MLA numbers.
        for m in crate::formats::catalog::models()
            .iter()
            .filter(|m| m.arch.is_moe())
        {
            let a = decode_arch(&encode_arch(&m.arch)).expect("decodes");
            assert_eq!(a.total_params(), m.arch.total_params(), "{}", m.arch.name);
            assert_eq!(a.moe_layers(), m.arch.moe_layers(), "{}", m.arch.name);
        }
        let mut a = crate::formats::catalog::find_model("qwen3-30b-a3b")
            .unwrap()
            .arch
            .clone();
        a.moe.decoder_sparse_step = Some(2);
        a.moe.mlp_only_layers = Some(vec![1, 3]);
        let back = decode_arch(&encode_arch(&a)).unwrap();
        assert_eq!(back.moe_layers(), a.moe_layers());
        // Qwen3.5-MoE's gated shared expert keeps a width other than the class default.
        let mut q = crate::formats::catalog::find_model("qwen3.5-35b-a3b")
            .unwrap()
            .arch
            .clone();
        q.moe.shared_expert_intermediate_size = Some(768);
        let back = decode_arch(&encode_arch(&q)).unwrap();
        assert_eq!(back.shared_width(), 768);
        assert_eq!(back.total_params(), q.total_params());
        // Llama 4's rotary layers, temperature tuning and chunk, as an imported config gives them.
        let mut l = crate::formats::catalog::find_model("llama-4-scout-17b-16e")
            .unwrap()
            .arch
            .clone();
        l.nope.no_rope_layers = Some((0..48).map(|i| u64::from(i % 2 == 0)).collect());
        l.nope.attn_temperature_tuning = Some(false);
        l.nope.attention_chunk_size = Some(4096);
        let back = decode_arch(&encode_arch(&l)).unwrap();
        assert_eq!(back.nope, l.nope);
        assert!((0..48).all(|i| back.rotates(i) == (i % 2 == 0)));
        let mut st = UiState {
            model: "qwen3-30b-a3b".into(),
            ..UiState::default()
        };
        st.settings.lora_dropout = 0.0;
        st.settings.target_parameters = vec![crate::model::ExpertParam::Down];
        st.settings.output_router_logits = true;
        st.settings.experts_impl = crate::model::ExpertsImpl::Eager;
        let (back, notices) = decode(&encode(&st));
        assert!(notices.is_empty(), "{notices:?}");
        assert_eq!(back.settings, st.settings);
        assert!(decode_arch("mixtral.4096.14336.32.32.8.128.32000.0.e8.x5").is_none());
    }

    #[test]
    fn an_imported_vision_language_model_and_its_images_round_trip() {
        // Qwen3.5-4B's config.json numbers (the text part and the vision_config).
        let cfg = r#"{"model_type":"qwen3_5","text_config":{"model_type":"qwen3_5_text","hidden_size":2560,
            "intermediate_size":9216,"num_hidden_layers":32,"num_attention_heads":16,"num_key_value_heads":4,
            "head_dim":256,"vocab_size":248320,"tie_word_embeddings":true,"linear_num_value_heads":32},
            "vision_config":{"depth":24,"hidden_size":1024,"intermediate_size":4096,"num_heads":16,
            "patch_size":16,"spatial_merge_size":2,"temporal_patch_size":2,"out_hidden_size":2560,
            "num_position_embeddings":2304}}"#;
        let a = crate::formats::config_json::parse_config(cfg)
            .unwrap()
            .value;
        assert_eq!(a.vision.as_ref().map(|t| t.depth), Some(24));
        let back = decode_arch(&encode_arch(&a)).expect("decodes");
        assert_eq!(back.vision, a.vision);
        assert_eq!(back.total_params(), a.total_params());
        let mut st = UiState::default();
        st.settings.images.images_per_sample = 3;
        st.settings.images.image_width = 1280;
        st.settings.images.image_height = 720;
        st.settings.images.image_max_pixels = 1024 * 1024;
        let (back, notices) = decode(&encode(&st));
        assert!(notices.is_empty(), "{notices:?}");
        assert_eq!(back.settings.images, st.settings.images);
        assert!(decode_arch(&format!("{}.Y1-2-3", encode_arch(&a))).is_none());
        // Qwen3-VL's deepstack blocks travel after the tower's numbers.
        let q3 = cfg
            .replace("\"model_type\":\"qwen3_5\"", "\"model_type\":\"qwen3_vl\"")
            .replace("qwen3_5_text", "qwen3_vl_text")
            .replace(
                "\"num_position_embeddings\":2304",
                "\"num_position_embeddings\":2304,\"deepstack_visual_indexes\":[5,11,17]",
            );
        let a = crate::formats::config_json::parse_config(&q3)
            .unwrap()
            .value;
        let back = decode_arch(&encode_arch(&a)).expect("decodes");
        assert_eq!(
            back.vision
                .as_ref()
                .map(|t| t.deepstack_visual_indexes.clone()),
            Some(vec![5, 11, 17])
        );
        assert_eq!(back.total_params(), a.total_params());
        // Qwen2.5-VL's window and full-attention blocks travel too (a flat config.json).
        let q25 = r#"{"model_type":"qwen2_5_vl","hidden_size":2048,"intermediate_size":11008,
            "num_hidden_layers":36,"num_attention_heads":16,"num_key_value_heads":2,"vocab_size":151936,
            "tie_word_embeddings":true,"vision_config":{"depth":32,"hidden_size":1280,"intermediate_size":3420,
            "num_heads":16,"out_hidden_size":2048,"patch_size":14,"spatial_merge_size":2,"window_size":112,
            "fullatt_block_indexes":[7,15,23,31],"temporal_patch_size":2}}"#;
        let a = crate::formats::config_json::parse_config(q25)
            .unwrap()
            .value;
        let back = decode_arch(&encode_arch(&a)).expect("decodes");
        assert_eq!(back.vision, a.vision);
        assert_eq!(back.total_params(), a.total_params());
        assert!(encode_arch(&a).ends_with(".X112-7-15-23-31"));
    }

    #[test]
    fn malformed_parameters_are_skipped_with_notices() {
        let (st, notices) =
            decode("?b=abc&s=2048&zzz=1&model=nope&r=0&do=2&t=q,bogus&gpu=h100-80&%ZZ=%");
        assert_eq!(st.settings.seq, 2048);
        assert_eq!(st.gpu, "h100-80");
        assert_eq!(st.settings.batch, 1);
        assert_eq!(st.model, "qwen3-8b");
        assert_eq!(notices.len(), 7, "{notices:?}");
        assert!(notices.iter().any(|n| n.contains("zzz")));
    }

    #[test]
    fn clashing_gpu_parameters_are_adjusted_with_a_notice() {
        let (st, n) = decode("g=4");
        assert_eq!(
            st.settings.parallel.strategy,
            crate::model::Strategy::FsdpFullShard
        );
        assert!(n.iter().any(|x| x.contains("GPU layout")), "{n:?}");
        let (st, n) = decode("g=2&st=ddp&off=params");
        assert!(st.settings.validate().is_ok());
        assert_eq!(st.settings.parallel, crate::model::Parallel::default());
        assert_eq!(n.len(), 1);
    }

    #[test]
    fn hostile_input_is_bounded_and_never_panics() {
        let long = "b=".to_string() + &"9".repeat(10_000);
        let (_, n) = decode(&long);
        assert!(!n.is_empty());
        for q in [
            "%",
            "%%",
            "%e2%82",
            "=&=&&",
            "model=%3Cscript%3E",
            "é=ü&ß",
            "b=18446744073709551616",
            "a=NaN",
            "a=inf",
        ] {
            let (st, _) = decode(q);
            assert!(st.settings.validate().is_ok(), "{q}");
        }
        let (_, n) = decode(&"x=1&".repeat(100));
        assert!(n.len() <= MAX_NOTICES);
    }
}
