//! Hugging Face `config.json` → [`Architecture`]. The text is untrusted (pasted or uploaded):
//! every problem becomes one specific message, never a panic.

use serde_json::Value;

use crate::model::{Architecture, Family};

/// Largest config accepted (real ones are a few KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

const MOE: &[&str] = &[
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "dbrx",
    "jamba",
    "olmoe",
    "granitemoe",
    "phimoe",
];

fn family_from_architectures(v: &Value) -> Option<String> {
    let a = v.get("architectures")?.as_array()?.first()?.as_str()?;
    let a = a.to_ascii_lowercase();
    [
        ("llama", "llama"),
        ("mistral", "mistral"),
        ("qwen3", "qwen3"),
        ("qwen2", "qwen2"),
        ("gemma3", "gemma3"),
        ("gemma2", "gemma2"),
        ("phi3", "phi3"),
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

/// Parses a config.json text.
pub fn parse_config(text: &str) -> Result<Architecture, String> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "this is {} KiB; a config.json is a few KiB (limit {} KiB) — is it the right file?",
            text.len() / 1024,
            MAX_CONFIG_BYTES / 1024
        ));
    }
    let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    if !root.is_object() {
        return Err("config.json must be a JSON object".into());
    }
    if root.get("is_encoder_decoder").and_then(Value::as_bool) == Some(true) {
        return Err("encoder-decoder models (T5, BART, …) are not supported: lorafit plans decoder-only causal LMs".into());
    }
    // Multimodal wrappers (e.g. Gemma 3 4B+) keep the language model in text_config.
    let (cfg, nested) = match root.get("text_config") {
        Some(t) if t.is_object() => (t, true),
        _ => (&root, false),
    };
    if !nested && root.get("vision_config").is_some() {
        return Err("vision-language configs without a text_config are not supported".into());
    }
    let model_type = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .or_else(|| root.get("model_type").and_then(Value::as_str))
        .map(str::to_string)
        .or_else(|| family_from_architectures(&root))
        .ok_or("config.json has no \"model_type\" (nor a known \"architectures\" entry)")?;
    let mt = model_type.to_ascii_lowercase();
    if MOE.iter().any(|m| mt == *m)
        || cfg.get("num_local_experts").is_some()
        || cfg.get("num_experts").is_some()
    {
        return Err(format!(
            "{} is a mixture-of-experts model, not supported yet",
            short(&Value::String(model_type.clone()))
        ));
    }
    let family = Family::parse(&mt).ok_or_else(|| {
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
        intermediate_size: positive(cfg, "intermediate_size")?,
        num_hidden_layers: positive(cfg, "num_hidden_layers")?,
        num_attention_heads: positive(cfg, "num_attention_heads")?,
        num_key_value_heads: optional_positive(cfg, "num_key_value_heads")?,
        head_dim,
        vocab_size: positive(cfg, "vocab_size")?,
        tie_word_embeddings: tie,
        qkv_bias,
        attn_logit_softcapping: optional_f64(cfg, "attn_logit_softcapping")?,
        final_logit_softcapping: optional_f64(cfg, "final_logit_softcapping")?,
        moe: Default::default(),
        mla: Default::default(),
    };
    arch.validate().map_err(|e| e.to_string())?;
    Ok(arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_configs_give_exact_parameter_counts() {
        // Llama-2-7B's published config.json (7B = 6,738,415,616 parameters).
        let llama = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":11008,"model_type":"llama",
            "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":32,"tie_word_embeddings":false,"vocab_size":32000,"torch_dtype":"float16"}"#;
        assert_eq!(parse_config(llama).unwrap().total_params(), 6_738_415_616);
        // Qwen2.5-0.5B: tied, q/k/v biases (494,032,768 parameters).
        let qwen = r#"{"model_type":"qwen2","hidden_size":896,"intermediate_size":4864,"num_attention_heads":14,"num_hidden_layers":24,
            "num_key_value_heads":2,"vocab_size":151936,"tie_word_embeddings":true}"#;
        assert_eq!(parse_config(qwen).unwrap().total_params(), 494_032_768);
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
                r#"{"model_type":"mixtral","hidden_size":1}"#,
                "mixture-of-experts",
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
    fn gemma3_multimodal_uses_text_config_and_default_head_dim() {
        let g = r#"{"model_type":"gemma3","vision_config":{"hidden_size":1152},"text_config":{"model_type":"gemma3_text","hidden_size":2560,
            "intermediate_size":10240,"num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"vocab_size":262208}}"#;
        let a = parse_config(g).unwrap();
        assert_eq!(a.family, Family::Gemma3);
        assert_eq!(a.head_dim(), 256);
        assert!(a.tie_word_embeddings);
    }
}
