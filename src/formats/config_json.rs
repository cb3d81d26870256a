//! Hugging Face `config.json` → [`Architecture`]. The text is untrusted (pasted or uploaded):
//! every problem becomes one specific message, never a panic.

use serde_json::Value;

use super::unused::Parsed;
use crate::model::arch::{LayerType, LinearAttnConfig, MlaConfig, MoeConfig, NopeConfig};
use crate::model::vision::VisionTower;
use crate::model::{Architecture, Family};

/// Largest config accepted (real ones are a few KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Mixture-of-experts model types lorafit does not plan (yet).
const UNSUPPORTED_MOE: &[&str] = &[
    "qwen2_moe",
    "deepseek_v3",
    "dbrx",
    "jamba",
    "granitemoe",
    "phimoe",
];

fn family_from_architectures(v: &Value) -> Option<String> {
    let a = v.get("architectures")?.as_array()?.first()?.as_str()?;
    let a = a.to_ascii_lowercase();
    [
        ("llama4", "llama4_text"),
        ("llama", "llama"),
        ("mixtral", "mixtral"),
        ("mistral", "mistral"),
        ("qwen3moe", "qwen3_moe"),
        ("qwen3_5moe", "qwen3_5_moe"),
        ("qwen3next", "qwen3_next"),
        ("qwen3_5", "qwen3_5"),
        ("qwen3vlmoe", "qwen3_vl_moe"),
        ("qwen3vl", "qwen3_vl"),
        ("qwen3", "qwen3"),
        ("qwen2_5_vl", "qwen2_5_vl"),
        ("qwen2", "qwen2"),
        ("gemma3", "gemma3"),
        ("gemma2", "gemma2"),
        ("phi3", "phi3"),
        ("olmoe", "olmoe"),
        ("deepseekv2", "deepseek_v2"),
        ("gptoss", "gpt_oss"),
        ("glm4moe", "glm4_moe"),
    ]
    .iter()
    .find(|(k, _)| a.starts_with(k))
    .map(|(_, f)| f.to_string())
}

fn positive(v: &Value, key: &str) -> Result<u64, String> {
    match v.get(key) {
        None | Some(Value::Null) => Err(format!("config.json has no \"{key}\"")),
        Some(x) => x
            .as_u64()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("\"{key}\" must be a positive integer, got {}", short(x))),
    }
}

fn optional_positive(v: &Value, key: &str) -> Result<Option<u64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| format!("\"{key}\" must be a positive integer, got {}", short(x))),
    }
}

fn optional_f64(v: &Value, key: &str) -> Result<Option<f64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_f64()
            .filter(|n| n.is_finite())
            .map(Some)
            .ok_or_else(|| format!("\"{key}\" must be a number, got {}", short(x))),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Parses a config.json text: the architecture, and every key (dotted under `text_config`) that
/// did not change it — `rope_theta`, `torch_dtype`, a `vision_config` lorafit does not plan.
pub fn parse_config(text: &str) -> Result<Parsed<Architecture>, String> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "this is {} KiB; a config.json is a few KiB (limit {} KiB) — is it the right file?",
            text.len() / 1024,
            MAX_CONFIG_BYTES / 1024
        ));
    }
    let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let arch = from_config(&root)?;
    Ok(Parsed {
        value: arch,
        ignored: super::unused::probe(&root, &from_config),
    })
}

/// A config.json already parsed as JSON (an estimate line's `model` as the Hub serves it): the
/// architecture and the keys that shaped nothing.
pub fn parse_config_value(root: &Value) -> Result<Parsed<Architecture>, String> {
    let arch = from_config(root)?;
    Ok(Parsed {
        value: arch,
        ignored: super::unused::probe(root, &from_config),
    })
}

/// Whether a JSON object reads as a config.json (it names its `model_type`, its
/// `architectures` or nests a `text_config`) rather than lorafit's own architecture numbers
/// (which name a `family`).
pub fn looks_like_config(v: &Value) -> bool {
    v.get("family").is_none()
        && (v.get("model_type").is_some()
            || v.get("architectures").is_some()
            || v.get("text_config").is_some())
}

/// The architecture of a parsed config.json.
fn from_config(root: &Value) -> Result<Architecture, String> {
    if !root.is_object() {
        return Err("config.json must be a JSON object".into());
    }
    if root.get("is_encoder_decoder").and_then(Value::as_bool) == Some(true) {
        return Err("encoder-decoder models (T5, BART, …) are not supported: lorafit plans decoder-only causal LMs".into());
    }
    // Multimodal wrappers (e.g. Gemma 3 4B+) keep the language model in text_config.
    let (cfg, nested) = match root.get("text_config") {
        Some(t) if t.is_object() => (t, true),
        _ => (root, false),
    };
    // Qwen2.5-VL's config.json keeps the language model's keys at the top, beside
    // `vision_config` (its config class builds `text_config` from them).
    let flat_vision = !nested
        && root.get("vision_config").is_some()
        && root
            .get("model_type")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| family_from_architectures(root))
            .and_then(|t| Family::parse(&t))
            .is_some_and(|f| f.layout().vision.is_some());
    if !nested && !flat_vision && root.get("vision_config").is_some() {
        return Err("vision-language configs without a text_config are not supported".into());
    }
    let model_type = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .or_else(|| root.get("model_type").and_then(Value::as_str))
        .map(str::to_string)
        .or_else(|| family_from_architectures(root))
        .ok_or("config.json has no \"model_type\" (nor a known \"architectures\" entry)")?;
    let mt = model_type.to_ascii_lowercase();
    let family = Family::parse(&mt);
    let moe_keys = cfg.get("num_local_experts").is_some()
        || cfg.get("num_experts").is_some()
        || cfg.get("n_routed_experts").is_some();
    if UNSUPPORTED_MOE.iter().any(|m| mt == *m)
        || (moe_keys && family.is_none_or(|f| f.layout().moe.is_none()))
    {
        return Err(format!(
            "{} is a mixture-of-experts model lorafit does not plan yet (supported MoE families: {})",
            short(&Value::String(model_type.clone())),
            Family::names_where(|l| l.moe.is_some())
        ));
    }
    let family = family.ok_or_else(|| {
        format!(
            "model_type {} is not supported (supported: {})",
            short(&Value::String(model_type.clone())),
            Family::choices()
        )
    })?;
    let mut head_dim = optional_positive(cfg, "head_dim")?;
    if head_dim.is_none() {
        head_dim = family.layout().head_dim_default;
    }
    let tie_default = family.layout().tie_default;
    let tie = match cfg
        .get("tie_word_embeddings")
        .or_else(|| root.get("tie_word_embeddings"))
    {
        None | Some(Value::Null) => tie_default,
        Some(Value::Bool(b)) => *b,
        Some(x) => {
            return Err(format!(
                "\"tie_word_embeddings\" must be true or false, got {}",
                short(x)
            ))
        }
    };
    let qkv_bias = match cfg.get("attention_bias") {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    };
    let name = root
        .get("_name_or_path")
        .and_then(Value::as_str)
        .map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(80)
                .collect::<String>()
        })
        .unwrap_or_default();
    let arch = Architecture {
        name,
        family,
        hidden_size: positive(cfg, "hidden_size")?,
        intermediate_size: intermediate_size(cfg, family)?,
        num_hidden_layers: positive(cfg, "num_hidden_layers")?,
        num_attention_heads: positive(cfg, "num_attention_heads")?,
        num_key_value_heads: optional_positive(cfg, "num_key_value_heads")?,
        head_dim,
        vocab_size: positive(cfg, "vocab_size")?,
        tie_word_embeddings: tie,
        qkv_bias,
        attn_logit_softcapping: optional_f64(cfg, "attn_logit_softcapping")?,
        final_logit_softcapping: optional_f64(cfg, "final_logit_softcapping")?,
        partial_rotary_factor: partial_rotary_factor(cfg, family)?,
        use_qk_norm: if family.layout().qk_norm_by_config.is_some() {
            optional_bool(cfg, "use_qk_norm")?
        } else {
            None
        },
        moe: moe_config(cfg, family)?,
        mla: mla_config(cfg, family)?,
        linear: linear_config(cfg, family)?,
        nope: nope_config(cfg, family)?,
        vision: if nested || flat_vision {
            vision_config(root, family)?
        } else {
            None
        },
    };
    arch.validate().map_err(|e| e.to_string())?;
    Ok(arch)
}

/// `intermediate_size`, the dense MLP's width. A family whose every layer is a mixture of
/// experts has no dense MLP, and its config class no such key (Qwen3.5-MoE:
/// `intermediate_size = AttributeError()`, `configuration_qwen3_5_moe.py`): there it is the
/// routed experts' width, which nothing else reads.
fn intermediate_size(cfg: &Value, family: Family) -> Result<u64, String> {
    let all_moe = family
        .layout()
        .moe
        .filter(|m| m.dense == crate::model::arch::DenseLayers::None && m.moe_width);
    match (optional_positive(cfg, "intermediate_size")?, all_moe) {
        (Some(i), _) => Ok(i),
        (None, Some(m)) => {
            Ok(optional_positive(cfg, "moe_intermediate_size")?.unwrap_or(m.default_moe_width))
        }
        (None, None) => match family.layout().intermediate_default {
            Some(d) => Ok(d),
            None => positive(cfg, "intermediate_size"),
        },
    }
}

/// The linear-attention keys of a hybrid family's config.json (none for other families: Gemma's
/// `layer_types` name sliding windows, which the family's row decides).
/// A vision-language checkpoint's `vision_config`, for a family whose tower lorafit plans: each
/// missing number takes `Qwen3_5VisionConfig`'s default (`configuration_qwen3_5.py:136-146`;
/// `Qwen3VLVisionConfig` has the same, `configuration_qwen3_vl.py:44-55`, and deepstack blocks).
fn vision_config(root: &Value, family: Family) -> Result<Option<VisionTower>, String> {
    let Some(v) = root.get("vision_config").filter(|v| v.is_object()) else {
        return Ok(None);
    };
    let Some(kind) = family.layout().vision else {
        return Ok(None);
    };
    let get = |k: &str, alias: &str, default: u64| -> Result<u64, String> {
        let key = if v.get(k).is_some() { k } else { alias };
        Ok(optional_positive(v, key)
            .map_err(|e| format!("vision_config: {e}"))?
            .unwrap_or(default))
    };
    let block_list = |key: &str, default: &[u64]| -> Result<Vec<u64>, String> {
        Ok(
            u64_list(v, key, &format!("vision_config.{key}"), "block numbers")?
                .unwrap_or_else(|| default.to_vec()),
        )
    };
    // The config class's defaults: `Qwen3_5VisionConfig` (Qwen3-VL's has the same), or
    // `Qwen2_5_VLVisionConfig` (`configuration_qwen2_5_vl.py`: no learned positions; the
    // `in_chans` published configs carry is not a key it reads).
    let windowed = kind.windowed();
    let (depth, hidden, inter, patch) = if windowed {
        (32, 3584, 3420, 14)
    } else {
        (27, 1152, 4304, 16)
    };
    Ok(Some(VisionTower {
        depth: get("depth", "num_hidden_layers", depth)?,
        hidden_size: get("hidden_size", "hidden_size", hidden)?,
        intermediate_size: get("intermediate_size", "intermediate_size", inter)?,
        num_heads: get("num_heads", "num_attention_heads", 16)?,
        patch_size: get("patch_size", "patch_size", patch)?,
        spatial_merge_size: get("spatial_merge_size", "spatial_merge_size", 2)?,
        temporal_patch_size: get("temporal_patch_size", "temporal_patch_size", 2)?,
        in_channels: get(
            "in_channels",
            if windowed { "in_channels" } else { "in_chans" },
            3,
        )?,
        out_hidden_size: get("out_hidden_size", "out_hidden_size", 3584)?,
        num_position_embeddings: if windowed {
            0
        } else {
            get("num_position_embeddings", "num_position_embeddings", 2304)?
        },
        // Qwen3.5's tower reads no deepstack key: it stays among the unused ones.
        deepstack_visual_indexes: match kind.default_deepstack() {
            Some(d) => block_list("deepstack_visual_indexes", d)?,
            None => vec![],
        },
        window_size: if windowed {
            get("window_size", "window_size", 112)?
        } else {
            0
        },
        fullatt_block_indexes: if windowed {
            block_list("fullatt_block_indexes", &[7, 15, 23, 31])?
        } else {
            vec![]
        },
    }))
}

fn linear_config(cfg: &Value, family: Family) -> Result<LinearAttnConfig, String> {
    if family.layout().hybrid.is_none() {
        return Ok(LinearAttnConfig::default());
    }
    let layer_types = match cfg.get("layer_types") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|t| match t.as_str() {
                    Some("linear_attention") => Ok(LayerType::Linear),
                    Some("full_attention") => Ok(LayerType::Full),
                    _ => Err(format!(
                        "\"layer_types\" entries must be \"linear_attention\" or \"full_attention\", got {}",
                        short(t)
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(x) => return Err(format!("\"layer_types\" must be a list, got {}", short(x))),
    };
    Ok(LinearAttnConfig {
        layer_types,
        full_attention_interval: optional_positive(cfg, "full_attention_interval")?,
        linear_num_key_heads: optional_positive(cfg, "linear_num_key_heads")?,
        linear_num_value_heads: optional_positive(cfg, "linear_num_value_heads")?,
        linear_key_head_dim: optional_positive(cfg, "linear_key_head_dim")?,
        linear_value_head_dim: optional_positive(cfg, "linear_value_head_dim")?,
        linear_conv_kernel_dim: optional_positive(cfg, "linear_conv_kernel_dim")?,
        attn_output_gate: optional_bool(cfg, "attn_output_gate")?,
    })
}

/// Which layers rotate, for a family with layers that do not (Llama 4; none for the others).
fn nope_config(cfg: &Value, family: Family) -> Result<NopeConfig, String> {
    if family.layout().nope_interval_default.is_none() {
        return Ok(NopeConfig::default());
    }
    let layers = |key: &str| u64_list(cfg, key, &format!("\"{key}\""), "integers");
    let n = optional_positive(cfg, "num_hidden_layers")?.unwrap_or(0);
    let no_rope_layers = layers("no_rope_layers")?;
    if let Some(l) = &no_rope_layers {
        if l.len() as u64 != n || l.iter().any(|f| *f > 1) {
            return Err(format!(
                "\"no_rope_layers\" must hold one 0 or 1 per layer ({n}), got {} entries",
                l.len()
            ));
        }
    }
    Ok(NopeConfig {
        no_rope_layers,
        no_rope_layer_interval: optional_positive(cfg, "no_rope_layer_interval")?,
        attn_temperature_tuning: optional_bool(cfg, "attn_temperature_tuning")?,
        // (`null`: no chunks, which the architecture writes 0)
        attention_chunk_size: match cfg.get("attention_chunk_size") {
            Some(Value::Null) => Some(0),
            _ => optional_positive(cfg, "attention_chunk_size")?,
        },
    })
}

/// Llama 4's dense layers between its MoE ones (Maverick), as transformers 5.24 decides them
/// (`configuration_llama4.py:175-183`, `modeling_llama4.py:400-404`): the layers `moe_layers`
/// lists are MoE, else every `interleave_moe_layer_step`-th (`range(step - 1, layers, step)`);
/// the others run a `Llama4TextMLP` of `intermediate_size_mlp` (the config class's default
/// 16384). Returned as the sparse step, the dense layers of a list, and the dense width where a
/// layer is dense.
#[allow(clippy::type_complexity)]
fn llama4_dense_layers(
    cfg: &Value,
) -> Result<(Option<u64>, Option<Vec<u64>>, Option<u64>), String> {
    let n = optional_positive(cfg, "num_hidden_layers")?.unwrap_or(0);
    let (step, dense) = match u64_list(cfg, "moe_layers", "\"moe_layers\"", "integers")? {
        // (`n` is untrusted: the list of the others only up to the layers a model may have)
        Some(listed) if n <= crate::model::arch::MAX_LAYERS => {
            let moe: std::collections::BTreeSet<u64> = listed.into_iter().collect();
            (
                None,
                Some((0..n).filter(|i| !moe.contains(i)).collect::<Vec<u64>>()),
            )
        }
        Some(_) => {
            return Err(format!(
                "\"num_hidden_layers\" {n} is more than {} layers",
                crate::model::arch::MAX_LAYERS
            ))
        }
        None => (optional_positive(cfg, "interleave_moe_layer_step")?, None),
    };
    let any_dense = match &dense {
        Some(d) => !d.is_empty(),
        None => step.unwrap_or(1) > 1 && n > 0,
    };
    let width = if any_dense {
        Some(optional_positive(cfg, "intermediate_size_mlp")?.unwrap_or(16384))
    } else {
        None
    };
    Ok((step, dense.filter(|d| !d.is_empty()), width))
}

/// The list of integers under `key` of `v` (`None` when absent or null); an error naming it as
/// `shown` ("must be a list of `what`") when it is anything else.
fn u64_list(v: &Value, key: &str, shown: &str, what: &str) -> Result<Option<Vec<u64>>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_array()
            .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
            .map(Some)
            .ok_or_else(|| format!("{shown} must be a list of {what}, got {}", short(x))),
    }
}

/// `partial_rotary_factor`, for a family with a partial rotary: transformers 5 keeps it in
/// `rope_parameters` (older exports: at the top level).
fn partial_rotary_factor(cfg: &Value, family: Family) -> Result<Option<f64>, String> {
    if family.layout().partial_rotary.is_none() {
        return Ok(None);
    }
    match cfg
        .get("rope_parameters")
        .filter(|r| r.get("partial_rotary_factor").is_some())
    {
        Some(r) => optional_f64(r, "partial_rotary_factor"),
        None => optional_f64(cfg, "partial_rotary_factor"),
    }
}

/// The first of `keys` present (and not null) as a positive integer.
fn first_positive(v: &Value, keys: &[&str]) -> Result<Option<u64>, String> {
    for k in keys {
        if let Some(x) = optional_positive(v, k)? {
            return Ok(Some(x));
        }
    }
    Ok(None)
}

fn optional_count(v: &Value, key: &str) -> Result<Option<u64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("\"{key}\" must be a whole number, got {}", short(x))),
    }
}

fn optional_bool(v: &Value, key: &str) -> Result<Option<bool>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(x) => Err(format!("\"{key}\" must be true or false, got {}", short(x))),
    }
}

/// The MoE keys of an MoE family's config.json (each family's spelling).
fn moe_config(cfg: &Value, family: Family) -> Result<MoeConfig, String> {
    if family.layout().moe.is_none() {
        return Ok(MoeConfig::default());
    }
    let mlp_only_layers = match cfg.get("mlp_only_layers") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) if items.len() <= 4096 => Some(
            items
                .iter()
                .map(|x| {
                    x.as_u64().ok_or_else(|| {
                        format!(
                            "\"mlp_only_layers\" must list layer numbers, got {}",
                            short(x)
                        )
                    })
                })
                .collect::<Result<Vec<u64>, String>>()?,
        ),
        Some(x) => {
            return Err(format!(
                "\"mlp_only_layers\" must be a list of layer numbers, got {}",
                short(x)
            ))
        }
    };
    let per_tok = first_positive(cfg, &["num_experts_per_tok", "experts_per_token"])?;
    // (only the sigmoid routing reads the expert groups; DeepSeek-V2's keys shape nothing)
    let groups = family.layout().moe.is_some_and(|m| m.sigmoid_groups);
    let needs_per_tok = family
        .layout()
        .moe
        .is_some_and(|m| m.default_experts_per_tok.is_none());
    if per_tok.is_none() && needs_per_tok {
        return Err(
            "config.json has no \"num_experts_per_tok\" (DeepSeek's config class has no default)"
                .into(),
        );
    }
    let (decoder_sparse_step, mlp_only_layers, intermediate_size_mlp) =
        if family.layout().moe.is_some_and(|m| m.all_experts) {
            llama4_dense_layers(cfg)?
        } else {
            (
                optional_positive(cfg, "decoder_sparse_step")?,
                mlp_only_layers,
                None,
            )
        };
    Ok(MoeConfig {
        num_experts: first_positive(
            cfg,
            &["num_experts", "num_local_experts", "n_routed_experts"],
        )?,
        num_experts_per_tok: per_tok,
        moe_intermediate_size: optional_positive(cfg, "moe_intermediate_size")?,
        n_shared_experts: optional_count(cfg, "n_shared_experts")?,
        shared_expert_intermediate_size: optional_positive(cfg, "shared_expert_intermediate_size")?,
        first_k_dense_replace: optional_count(cfg, "first_k_dense_replace")?,
        decoder_sparse_step,
        mlp_only_layers,
        intermediate_size_mlp,
        // Read only where the router reads it (Mixtral's and Qwen3-VL-MoE's always renormalise).
        norm_topk_prob: if family
            .layout()
            .moe
            .is_some_and(|m| matches!(m.renorm, crate::model::family::Renorm::Config { .. }))
        {
            optional_bool(cfg, "norm_topk_prob")?
        } else {
            None
        },
        n_group: if groups {
            optional_positive(cfg, "n_group")?
        } else {
            None
        },
        topk_group: if groups {
            optional_positive(cfg, "topk_group")?
        } else {
            None
        },
    })
}

/// DeepSeek's latent-attention keys (`q_lora_rank` absent takes the config class's 1536; `null`
/// means a plain q_proj).
fn mla_config(cfg: &Value, family: Family) -> Result<MlaConfig, String> {
    if family.layout().attention != crate::model::arch::AttentionKind::Latent {
        return Ok(MlaConfig::default());
    }
    let q_lora_rank = match cfg.get("q_lora_rank") {
        None => Some(1536),
        Some(_) => optional_positive(cfg, "q_lora_rank")?,
    };
    Ok(MlaConfig {
        q_lora_rank,
        kv_lora_rank: optional_positive(cfg, "kv_lora_rank")?,
        qk_nope_head_dim: optional_positive(cfg, "qk_nope_head_dim")?,
        qk_rope_head_dim: optional_positive(cfg, "qk_rope_head_dim")?,
        v_head_dim: optional_positive(cfg, "v_head_dim")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_configs_give_exact_parameter_counts() {
        // Llama-2-7B's published config.json (7B = 6,738,415,616 parameters).
        let llama = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":11008,"model_type":"llama",
            "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":32,"tie_word_embeddings":false,"vocab_size":32000,"torch_dtype":"float16"}"#;
        assert_eq!(
            parse_config(llama).unwrap().value.total_params(),
            6_738_415_616
        );
        // Qwen2.5-0.5B: tied, q/k/v biases (494,032,768 parameters).
        let qwen = r#"{"model_type":"qwen2","hidden_size":896,"intermediate_size":4864,"num_attention_heads":14,"num_hidden_layers":24,
            "num_key_value_heads":2,"vocab_size":151936,"tie_word_embeddings":true}"#;
        assert_eq!(
            parse_config(qwen).unwrap().value.total_params(),
            494_032_768
        );
    }

    #[test]
    fn clear_errors_for_bad_configs() {
        let cases = [
            ("{", "not valid JSON"),
            ("[1,2]", "JSON object"),
            (
                r#"{"model_type":"t5","is_encoder_decoder":true}"#,
                "encoder-decoder",
            ),
            (
                r#"{"model_type":"qwen2_moe","hidden_size":1}"#,
                "mixture-of-experts",
            ),
            (
                r#"{"model_type":"llama","num_local_experts":8,"hidden_size":1}"#,
                "mixture-of-experts",
            ),
            (
                r#"{"model_type":"deepseek_v2","hidden_size":64,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":10}"#,
                "num_experts_per_tok",
            ),
            (r#"{"model_type":"llava","vision_config":{}}"#, "vision"),
            (r#"{"model_type":"gpt2","n_embd":768}"#, "not supported"),
            (
                r#"{"model_type":"llama","intermediate_size":2,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":10}"#,
                "no \"hidden_size\"",
            ),
            (
                r#"{"model_type":"llama","hidden_size":"big","intermediate_size":2,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":10}"#,
                "positive integer",
            ),
            (
                r#"{"model_type":"llama","hidden_size":10,"intermediate_size":2,"num_hidden_layers":2,"num_attention_heads":3,"vocab_size":10}"#,
                "do not divide",
            ),
            (r#"{"hidden_size":10}"#, "model_type"),
        ];
        for (text, want) in cases {
            let e = parse_config(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
        assert!(parse_config(&" ".repeat(MAX_CONFIG_BYTES + 1))
            .unwrap_err()
            .contains("limit"));
    }

    #[test]
    fn moe_configs_import_with_exact_parameter_counts() {
        // The published config.json of each MoE family (the catalog's numbers), in its own
        // spelling: total parameters as transformers 5.24 counts them.
        let mixtral = r#"{"architectures":["MixtralForCausalLM"],"model_type":"mixtral","hidden_size":4096,"intermediate_size":14336,
            "num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":32000,"tie_word_embeddings":false,
            "num_local_experts":8,"num_experts_per_tok":2,"sliding_window":null}"#;
        let qwen = r#"{"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","hidden_size":2048,"intermediate_size":6144,
            "num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"vocab_size":151936,
            "tie_word_embeddings":false,"num_experts":128,"num_experts_per_tok":8,"moe_intermediate_size":768,"norm_topk_prob":true,
            "decoder_sparse_step":1,"mlp_only_layers":[]}"#;
        let olmoe = r#"{"model_type":"olmoe","hidden_size":2048,"intermediate_size":1024,"num_hidden_layers":16,"num_attention_heads":16,
            "num_key_value_heads":16,"vocab_size":50304,"tie_word_embeddings":false,"num_experts":64,"num_experts_per_tok":8,"clip_qkv":null}"#;
        let deepseek = r#"{"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2","hidden_size":2048,"intermediate_size":10944,
            "num_hidden_layers":27,"num_attention_heads":16,"num_key_value_heads":16,"vocab_size":102400,"tie_word_embeddings":false,
            "q_lora_rank":null,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":64,
            "n_shared_experts":2,"num_experts_per_tok":6,"moe_intermediate_size":1408,"first_k_dense_replace":1,"moe_layer_freq":1}"#;
        let gpt_oss = r#"{"architectures":["GptOssForCausalLM"],"model_type":"gpt_oss","hidden_size":2880,"intermediate_size":2880,
            "num_hidden_layers":24,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"vocab_size":201088,
            "tie_word_embeddings":false,"num_local_experts":32,"num_experts_per_tok":4,"experts_per_token":4,"attention_bias":true,
            "sliding_window":128,"quantization_config":{"quant_method":"mxfp4"}}"#;
        for (text, family, total) in [
            (mixtral, Family::Mixtral, 46_702_792_704u128),
            (qwen, Family::Qwen3Moe, 30_532_122_624),
            (olmoe, Family::Olmoe, 6_919_161_856),
            (deepseek, Family::DeepseekV2, 15_706_484_224),
            (gpt_oss, Family::GptOss, 20_914_757_184),
        ] {
            let a = parse_config(text)
                .unwrap_or_else(|e| panic!("{family:?}: {e}"))
                .value;
            assert_eq!(a.family, family);
            assert_eq!(a.total_params(), total, "{family:?}");
        }
        // Layers kept dense: DeepSeek's first_k_dense_replace, Qwen3-MoE's mlp_only_layers and
        // decoder_sparse_step.
        assert_eq!(parse_config(deepseek).unwrap().value.moe_layers(), 26);
        let sparse = qwen.replace(
            "\"decoder_sparse_step\":1,\"mlp_only_layers\":[]",
            "\"decoder_sparse_step\":2,\"mlp_only_layers\":[1]",
        );
        assert_eq!(parse_config(&sparse).unwrap().value.moe_layers(), 23);
        // DeepSeek without q_lora_rank takes the config class's default (1536): q_a_proj → q_b_proj.
        let full = deepseek.replace("\"q_lora_rank\":null,", "");
        assert!(parse_config(&full)
            .unwrap()
            .value
            .linears()
            .iter()
            .any(|l| l.name == "q_b_proj"));
    }

    #[test]
    fn llama4_attention_chunk_null_means_no_chunks() {
        let cfg = |chunk: &str| {
            format!(
                r#"{{"model_type":"llama4_text","hidden_size":64,"intermediate_size":128,"num_hidden_layers":4,
                "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100{chunk}}}"#
            )
        };
        let chunk = |text: &str| parse_config(text).unwrap().value.attention_chunk();
        assert_eq!(chunk(&cfg("")), Some(8192));
        assert_eq!(chunk(&cfg(r#","attention_chunk_size":4096"#)), Some(4096));
        // transformers then gives every layer a full_attention layer type: no chunked mask
        assert_eq!(chunk(&cfg(r#","attention_chunk_size":null"#)), None);
        assert!(parse_config(&cfg(r#","attention_chunk_size":0"#)).is_err());
    }

    #[test]
    fn llama4_moe_layers_decide_its_dense_layers() {
        let cfg = |extra: &str, layers: u64| {
            format!(
                r#"{{"model_type":"llama4_text","hidden_size":64,"intermediate_size":128,"num_hidden_layers":{layers},
                "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100{extra}}}"#
            )
        };
        let kinds = |text: &str| {
            let a = parse_config(text).unwrap_or_else(|e| panic!("{e}")).value;
            let moe: Vec<u64> = (0..a.num_hidden_layers)
                .filter(|&li| a.layer_kind(li).is_moe())
                .collect();
            (moe, a.dense_width())
        };
        let unused =
            |text: &str, key: &str| parse_config(text).unwrap().ignored.iter().any(|k| k == key);
        // Every layer, out of order and repeated: Scout's layout; intermediate_size_mlp unused.
        let scout = cfg(
            r#","moe_layers":[3, 1, 0, 2, 2],"intermediate_size_mlp":512"#,
            4,
        );
        assert_eq!(kinds(&scout).0, vec![0, 1, 2, 3]);
        assert!(unused(&scout, "intermediate_size_mlp"));
        // One left out: a dense layer of intermediate_size_mlp (the class's 16384 by default).
        assert_eq!(
            kinds(&cfg(r#","moe_layers":[0, 1, 3]"#, 4)),
            (vec![0, 1, 3], 16384)
        );
        // Maverick's interleave_moe_layer_step 2: range(1, layers, 2).
        assert_eq!(
            kinds(&cfg(
                r#","interleave_moe_layer_step":2,"intermediate_size_mlp":256"#,
                6
            )),
            (vec![1, 3, 5], 256)
        );
        // A list overrides the step, which is then named as not used.
        let both = cfg(
            r#","moe_layers":[0,1,2,3],"interleave_moe_layer_step":2"#,
            4,
        );
        assert_eq!(kinds(&both).0, vec![0, 1, 2, 3]);
        assert!(unused(&both, "interleave_moe_layer_step"));
        // A list against a huge depth is answered, not searched layer by layer.
        let e = parse_config(&cfg(r#","moe_layers":[0, 1]"#, 1 << 40)).unwrap_err();
        assert!(e.contains("num_hidden_layers"), "{e}");
    }

    #[test]
    fn gemma3_multimodal_uses_text_config_and_default_head_dim() {
        let g = r#"{"model_type":"gemma3","vision_config":{"hidden_size":1152},"text_config":{"model_type":"gemma3_text","hidden_size":2560,
            "intermediate_size":10240,"num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"vocab_size":262208}}"#;
        let read = parse_config(g).unwrap();
        let a = &read.value;
        assert_eq!(a.family, Family::Gemma3);
        assert_eq!(a.head_dim(), 256);
        assert!(a.tie_word_embeddings);
        // The vision tower is not planned: the import says so instead of dropping it quietly.
        // Its model_type repeats text_config's, which is the one read.
        assert_eq!(read.ignored, vec!["model_type", "vision_config"]);
    }

    #[test]
    fn qwen2_5_vl_reads_its_flat_config_and_windowed_tower() {
        // Qwen2.5-VL-3B-Instruct's config.json as published (verbatim in the harness's
        // measure_vl.py): the language model's keys at the top, beside vision_config.
        let q = r#"{"architectures":["Qwen2_5_VLForConditionalGeneration"],"attention_dropout":0.0,
            "bos_token_id":151643,"eos_token_id":151645,"vision_start_token_id":151652,"vision_end_token_id":151653,
            "vision_token_id":151654,"image_token_id":151655,"video_token_id":151656,"hidden_act":"silu",
            "hidden_size":2048,"initializer_range":0.02,"intermediate_size":11008,"max_position_embeddings":128000,
            "max_window_layers":70,"model_type":"qwen2_5_vl","num_attention_heads":16,"num_hidden_layers":36,
            "num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,
            "tie_word_embeddings":true,"torch_dtype":"bfloat16","transformers_version":"4.41.2","use_cache":true,
            "use_sliding_window":false,
            "vision_config":{"depth":32,"hidden_act":"silu","hidden_size":1280,"intermediate_size":3420,"num_heads":16,
            "in_chans":3,"out_hidden_size":2048,"patch_size":14,"spatial_merge_size":2,"spatial_patch_size":14,
            "window_size":112,"fullatt_block_indexes":[7,15,23,31],"tokens_per_second":2,"temporal_patch_size":2},
            "rope_scaling":{"type":"mrope","mrope_section":[16,24,24]},"vocab_size":151936}"#;
        let read = parse_config(q).unwrap();
        let a = &read.value;
        assert_eq!(a.family, Family::Qwen25Vl);
        assert!(a.tie_word_embeddings);
        let t = a.vision.as_ref().expect("the tower");
        assert_eq!((t.window_size, t.num_position_embeddings), (112, 0));
        assert_eq!(t.fullatt_block_indexes, vec![7, 15, 23, 31]);
        // 3,754,622,976 parameters in all, 668,684,288 of them the tower's (params of the
        // harness's full-depth Qwen2.5-VL-3B steps, tests/data/reference/models26/vl_cases.jsonl).
        assert_eq!(a.vision_params(), 668_684_288);
        assert_eq!(a.total_params(), 3_754_622_976);
        // transformers' vision config class reads no `in_chans` (its key is `in_channels`): said.
        assert!(read.ignored.iter().any(|k| k == "vision_config.in_chans"));
        assert!(!read
            .ignored
            .iter()
            .any(|k| k == "vision_config.window_size"));
        // The architectures entry alone names the family (not Qwen2's).
        let v: Value = serde_json::from_str(q).unwrap();
        let mut arch_only = v.clone();
        arch_only.as_object_mut().unwrap().remove("model_type");
        assert_eq!(
            parse_config_value(&arch_only).unwrap().value.family,
            Family::Qwen25Vl
        );
        // A full-attention block past the tower's depth is refused by name.
        let mut bad = v.clone();
        bad["vision_config"]["fullatt_block_indexes"] = serde_json::json!([7, 32]);
        let e = parse_config_value(&bad).unwrap_err();
        assert!(e.contains("fullatt_block_indexes"), "{e}");
        // A flat config.json of a family without a planned tower is still refused.
        let gemma = q.replace("\"model_type\":\"qwen2_5_vl\"", "\"model_type\":\"gemma3\"");
        assert!(parse_config(&gemma).is_err());
    }

    #[test]
    fn qwen3_vl_reads_its_tower_and_deepstack_blocks() {
        // Qwen3-VL-8B-Instruct's config.json numbers (data/models.json cites the listings).
        let q = r#"{"architectures":["Qwen3VLForConditionalGeneration"],"model_type":"qwen3_vl","image_token_id":151655,
            "text_config":{"model_type":"qwen3_vl_text","head_dim":128,"hidden_size":4096,"intermediate_size":12288,
            "num_attention_heads":32,"num_hidden_layers":36,"num_key_value_heads":8,"vocab_size":151936,
            "rope_scaling":{"mrope_interleaved":true,"mrope_section":[24,20,20],"rope_type":"default"},"rope_theta":5000000},
            "tie_word_embeddings":false,
            "vision_config":{"deepstack_visual_indexes":[8,16,24],"depth":27,"hidden_size":1152,"intermediate_size":4304,
            "num_heads":16,"num_position_embeddings":2304,"out_hidden_size":4096,"patch_size":16,"spatial_merge_size":2,
            "temporal_patch_size":2}}"#;
        let read = parse_config(q).unwrap();
        let a = &read.value;
        assert_eq!(a.family, Family::Qwen3Vl);
        assert!(!a.tie_word_embeddings);
        let t = a.vision.as_ref().expect("the tower");
        assert_eq!(t.deepstack_visual_indexes, vec![8, 16, 24]);
        assert!(!read.ignored.iter().any(|k| k.starts_with("vision_config")));
        // Without the key, Qwen3VLVisionConfig's default blocks; Qwen3.5's tower has none.
        let v: Value = serde_json::from_str(q).unwrap();
        let mut no_key = v.clone();
        no_key["vision_config"]
            .as_object_mut()
            .unwrap()
            .remove("deepstack_visual_indexes");
        let a2 = parse_config_value(&no_key).unwrap().value;
        assert_eq!(a2.vision.unwrap().deepstack_visual_indexes, vec![8, 16, 24]);
        // A block past the tower's depth, or one named twice, is refused by name.
        for bad in [
            serde_json::json!([8, 27]),
            serde_json::json!([8, 8]),
            serde_json::json!("8"),
        ] {
            let mut b = v.clone();
            b["vision_config"]["deepstack_visual_indexes"] = bad;
            let e = parse_config_value(&b).unwrap_err();
            assert!(e.contains("deepstack_visual_indexes"), "{e}");
        }
        // The architectures entry alone names the family.
        let mut arch_only = v.clone();
        arch_only.as_object_mut().unwrap().remove("model_type");
        arch_only["text_config"]
            .as_object_mut()
            .unwrap()
            .remove("model_type");
        assert_eq!(
            parse_config_value(&arch_only).unwrap().value.family,
            Family::Qwen3Vl
        );
        // Qwen3-VL-30B-A3B's text numbers (data/models.json cites them): its router always
        // renormalises, so `norm_topk_prob` shapes nothing and is named.
        let moe = r#"{"architectures":["Qwen3VLMoeForConditionalGeneration"],"model_type":"qwen3_vl_moe",
            "text_config":{"model_type":"qwen3_vl_moe_text","head_dim":128,"hidden_size":2048,"intermediate_size":6144,
            "num_attention_heads":32,"num_hidden_layers":48,"num_key_value_heads":4,"vocab_size":151936,
            "num_experts":128,"num_experts_per_tok":8,"moe_intermediate_size":768,"norm_topk_prob":true,
            "decoder_sparse_step":1,"mlp_only_layers":[]},"tie_word_embeddings":false,
            "vision_config":{"depth":27,"hidden_size":1152,"intermediate_size":4304,"num_heads":16,"out_hidden_size":2048}}"#;
        let read = parse_config(moe).unwrap();
        assert_eq!(read.value.family, Family::Qwen3VlMoe);
        assert_eq!(read.value.moe.num_experts, Some(128));
        assert!(
            read.ignored
                .iter()
                .any(|k| k == "text_config.norm_topk_prob"),
            "{:?}",
            read.ignored
        );
        assert_eq!(
            read.value.vision.unwrap().deepstack_visual_indexes,
            vec![8, 16, 24]
        );
    }

    #[test]
    fn the_keys_that_shape_nothing_are_named() {
        // Llama-2-7B's config.json as the Hub serves it: the keys the plan reads, and those it does
        // not (token ids, rope_theta, torch_dtype, …) named one by one.
        let llama = r#"{"_name_or_path":"meta-llama/Llama-2-7b-hf","architectures":["LlamaForCausalLM"],"bos_token_id":1,"eos_token_id":2,
            "hidden_act":"silu","hidden_size":4096,"initializer_range":0.02,"intermediate_size":11008,"max_position_embeddings":4096,
            "model_type":"llama","num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":32,"pretraining_tp":1,
            "rms_norm_eps":1e-05,"rope_scaling":null,"tie_word_embeddings":false,"torch_dtype":"float16","transformers_version":"4.31.0.dev0",
            "use_cache":true,"vocab_size":32000}"#;
        let read = parse_config(llama).unwrap();
        assert_eq!(
            read.ignored,
            vec![
                "architectures",
                "bos_token_id",
                "eos_token_id",
                "hidden_act",
                "initializer_range",
                "max_position_embeddings",
                "pretraining_tp",
                "rms_norm_eps",
                "torch_dtype",
                "transformers_version",
                "use_cache"
            ]
        );
        // Every key the architecture is built from counts as used, a default-valued one too.
        for used in [
            "hidden_size",
            "num_key_value_heads",
            "tie_word_embeddings",
            "_name_or_path",
        ] {
            assert!(!read.ignored.iter().any(|k| k == used), "{used}");
        }
    }
}
