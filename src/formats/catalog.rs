//! Built-in catalogs: published config.json numbers of popular models and GPU datasheet
//! figures (`data/*.json`, each entry with its source), plus name lookup with suggestions. The
//! binaries carry the numbers without the citations (`build.rs`); the citations are read in
//! `data/`.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::unused::Parsed;
use crate::formats::json::{self, Json};
use crate::model::arch::{Family, LayerType, LinearAttnConfig, MlaConfig, MoeConfig};
use crate::model::Architecture;

/// A catalog model: architecture numbers and where they come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelEntry {
    /// Architecture (its `name` is the catalog id).
    #[serde(flatten)]
    pub arch: Architecture,
    /// Hugging Face repository id.
    pub hf_id: String,
}

/// A catalog GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuEntry {
    /// Short id (`a100-40`).
    pub id: String,
    /// Full name.
    pub name: String,
    /// Other names the card goes by (as nvidia-smi prints it, as published tables write it).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Memory in GiB (unified memory for Apple parts, shared with the CPU).
    pub memory_gib: Option<f64>,
    /// bf16 support (`None` = not published).
    pub bf16: Option<bool>,
    /// Dense bf16 tensor TFLOP/s.
    pub bf16_tflops_dense: Option<f64>,
    /// Dense fp16 tensor TFLOP/s.
    pub fp16_tflops_dense: Option<f64>,
    /// fp32 (non-tensor) TFLOP/s.
    pub fp32_tflops: Option<f64>,
    /// Memory bandwidth GB/s.
    pub mem_bandwidth_gbs: Option<f64>,
    /// Apple-style unified memory.
    #[serde(default)]
    pub unified_memory: bool,
    /// The chip's generation (`ampere`, `hopper`, …): which calibration of the step-time model
    /// applies, and the PCIe generation of its host link.
    #[serde(default)]
    pub generation: Option<Generation>,
    /// A typical rental price per GPU-hour in US dollars, where the catalog cites one (its
    /// `source` says whose and when).
    #[serde(default)]
    pub usd_per_gpu_hour: Option<f64>,
    /// NVLink bandwidth between two GPUs of a node, per direction, GB/s (the SXM / HGX parts;
    /// `None`: GPUs of a node talk over PCIe).
    #[serde(default)]
    pub nvlink_gbs_per_direction: Option<f64>,
}

/// A GPU's chip generation, as the catalog names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Generation {
    /// NVIDIA Volta (V100).
    Volta,
    /// NVIDIA Turing (T4, RTX 20).
    Turing,
    /// NVIDIA Ampere (A100, A10, RTX 30, RTX A6000).
    Ampere,
    /// NVIDIA Ada Lovelace (L4, L40, RTX 40, RTX 6000 Ada).
    Ada,
    /// NVIDIA Hopper (H100, H200, H20, H800).
    Hopper,
    /// NVIDIA Blackwell (B200, B300, RTX 50, RTX PRO 6000).
    Blackwell,
    /// AMD CDNA 3 (Instinct MI300X, MI325X).
    Cdna3,
    /// Apple silicon.
    Apple,
}

impl Generation {
    /// Every generation.
    pub const ALL: [Generation; 8] = [
        Generation::Volta,
        Generation::Turing,
        Generation::Ampere,
        Generation::Ada,
        Generation::Hopper,
        Generation::Blackwell,
        Generation::Cdna3,
        Generation::Apple,
    ];

    /// The catalog's name.
    pub fn name(self) -> &'static str {
        match self {
            Generation::Volta => "volta",
            Generation::Turing => "turing",
            Generation::Ampere => "ampere",
            Generation::Ada => "ada",
            Generation::Hopper => "hopper",
            Generation::Blackwell => "blackwell",
            Generation::Cdna3 => "cdna3",
            Generation::Apple => "apple",
        }
    }

    /// The generation the catalog calls `name`.
    pub fn of_name(name: &str) -> Option<Generation> {
        Generation::ALL.into_iter().find(|g| g.name() == name)
    }
}

impl GpuEntry {
    /// Whether the GPU computes in bf16 (unknown counts as yes: the catalog says `false` for
    /// the cards that do not).
    pub fn bf16_ok(&self) -> bool {
        self.bf16 != Some(false)
    }

    /// Memory in bytes (GiB × 2³⁰), if known.
    pub fn memory_bytes(&self) -> Option<u128> {
        self.memory_gib
            .filter(|g| g.is_finite() && *g > 0.0)
            .map(|g| (g * 1024.0 * 1024.0 * 1024.0) as u128)
    }
}

/// Every catalog model.
pub fn models() -> &'static [ModelEntry] {
    static M: OnceLock<Vec<ModelEntry>> = OnceLock::new();
    M.get_or_init(|| {
        read_entries(
            include_str!(concat!(env!("OUT_DIR"), "/models.json")),
            model_entry,
        )
    })
}

/// Every catalog GPU with a known memory size.
pub fn gpus() -> &'static [GpuEntry] {
    static G: OnceLock<Vec<GpuEntry>> = OnceLock::new();
    G.get_or_init(|| {
        read_entries(
            include_str!(concat!(env!("OUT_DIR"), "/gpus.json")),
            gpu_entry,
        )
        .into_iter()
        .filter(|g| g.memory_bytes().is_some())
        .collect()
    })
}

/// The entries of a catalog file, read with the page's small JSON reader ([`json`]) rather than
/// serde, whose deserializers the page's wasm then does not carry. `tests/it/catalog.rs` checks
/// the result equals serde's reading of `data/*.json`, entry for entry.
fn read_entries<T>(text: &str, entry: fn(&Json) -> Option<T>) -> Vec<T> {
    json::parse(text)
        .ok()
        .and_then(|v| v.as_array().map(|a| a.iter().filter_map(entry).collect()))
        .unwrap_or_default()
}

/// One model of `data/models.json`: its keys are `Architecture`'s serde names (config.json's).
fn model_entry(v: &Json) -> Option<ModelEntry> {
    let u = |k: &str| v.field(k).and_then(Json::as_u64);
    let b = |k: &str| v.field(k).and_then(Json::as_bool);
    let f = |k: &str| v.field(k).and_then(Json::as_f64);
    // A list of integers under `k` (`None` inside when absent; `None` outside when malformed).
    let list = |k: &str| -> Option<Option<Vec<u64>>> {
        match v.field(k) {
            None => Some(None),
            Some(a) => Some(Some(
                a.as_array()?
                    .iter()
                    .map(Json::as_u64)
                    .collect::<Option<_>>()?,
            )),
        }
    };
    let arch = Architecture {
        name: v
            .field("name")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .into(),
        family: Family::parse(v.field("family")?.as_str()?)?,
        hidden_size: u("hidden_size")?,
        intermediate_size: u("intermediate_size")?,
        num_hidden_layers: u("num_hidden_layers")?,
        num_attention_heads: u("num_attention_heads")?,
        num_key_value_heads: u("num_key_value_heads"),
        head_dim: u("head_dim"),
        vocab_size: u("vocab_size")?,
        tie_word_embeddings: b("tie_word_embeddings").unwrap_or(false),
        qkv_bias: b("qkv_bias").or_else(|| b("attention_bias")),
        attn_logit_softcapping: f("attn_logit_softcapping"),
        final_logit_softcapping: f("final_logit_softcapping"),
        partial_rotary_factor: f("partial_rotary_factor"),
        use_qk_norm: b("use_qk_norm"),
        moe: MoeConfig {
            num_experts: u("num_experts")
                .or_else(|| u("num_local_experts"))
                .or_else(|| u("n_routed_experts")),
            num_experts_per_tok: u("num_experts_per_tok"),
            moe_intermediate_size: u("moe_intermediate_size"),
            n_shared_experts: u("n_shared_experts"),
            shared_expert_intermediate_size: u("shared_expert_intermediate_size"),
            first_k_dense_replace: u("first_k_dense_replace"),
            decoder_sparse_step: u("decoder_sparse_step")
                .or_else(|| u("interleave_moe_layer_step")),
            mlp_only_layers: list("mlp_only_layers")?,
            intermediate_size_mlp: u("intermediate_size_mlp"),
            norm_topk_prob: b("norm_topk_prob"),
            n_group: u("n_group"),
            topk_group: u("topk_group"),
        },
        mla: MlaConfig {
            q_lora_rank: u("q_lora_rank"),
            kv_lora_rank: u("kv_lora_rank"),
            qk_nope_head_dim: u("qk_nope_head_dim"),
            qk_rope_head_dim: u("qk_rope_head_dim"),
            v_head_dim: u("v_head_dim"),
        },
        linear: LinearAttnConfig {
            layer_types: match v.field("layer_types") {
                None => None,
                Some(a) => Some(
                    a.as_array()?
                        .iter()
                        .map(|t| match t.as_str()? {
                            "linear_attention" => Some(LayerType::Linear),
                            "full_attention" => Some(LayerType::Full),
                            _ => None,
                        })
                        .collect::<Option<_>>()?,
                ),
            },
            full_attention_interval: u("full_attention_interval"),
            linear_num_key_heads: u("linear_num_key_heads"),
            linear_num_value_heads: u("linear_num_value_heads"),
            linear_key_head_dim: u("linear_key_head_dim"),
            linear_value_head_dim: u("linear_value_head_dim"),
            linear_conv_kernel_dim: u("linear_conv_kernel_dim"),
            attn_output_gate: b("attn_output_gate"),
        },
        nope: crate::model::arch::NopeConfig {
            no_rope_layers: list("no_rope_layers")?,
            no_rope_layer_interval: u("no_rope_layer_interval"),
            attn_temperature_tuning: b("attn_temperature_tuning"),
            attention_chunk_size: u("attention_chunk_size"),
        },
        vision: match v.field("vision_config") {
            None => None,
            Some(t) => {
                let n = |k: &str| t.field(k).and_then(Json::as_u64);
                let blocks = |k: &str| -> Option<Vec<u64>> {
                    match t.field(k) {
                        None => Some(vec![]),
                        Some(l) => l.as_array()?.iter().map(Json::as_u64).collect(),
                    }
                };
                Some(crate::model::vision::VisionTower {
                    depth: n("depth")?,
                    hidden_size: n("hidden_size")?,
                    intermediate_size: n("intermediate_size")?,
                    num_heads: n("num_heads")?,
                    patch_size: n("patch_size")?,
                    spatial_merge_size: n("spatial_merge_size")?,
                    temporal_patch_size: n("temporal_patch_size")?,
                    in_channels: n("in_channels").unwrap_or(3),
                    out_hidden_size: n("out_hidden_size")?,
                    num_position_embeddings: n("num_position_embeddings").unwrap_or(0),
                    deepstack_visual_indexes: blocks("deepstack_visual_indexes")?,
                    // (what only a windowed tower's step reads: the full planner's,
                    // `model::extended`)
                    window_size: if crate::model::extended::EXTENDED {
                        n("window_size").unwrap_or(0)
                    } else {
                        0
                    },
                    fullatt_block_indexes: if crate::model::extended::EXTENDED {
                        blocks("fullatt_block_indexes")?
                    } else {
                        vec![]
                    },
                })
            }
        },
    };
    Some(ModelEntry {
        arch,
        hf_id: v.field("hf_id")?.as_str()?.into(),
    })
}

/// One GPU of `data/gpus.json`.
fn gpu_entry(v: &Json) -> Option<GpuEntry> {
    let f = |k: &str| v.field(k).and_then(Json::as_f64);
    Some(GpuEntry {
        id: v.field("id")?.as_str()?.into(),
        name: v.field("name")?.as_str()?.into(),
        aliases: v
            .field("aliases")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Json::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
        memory_gib: f("memory_gib"),
        bf16: v.field("bf16").and_then(Json::as_bool),
        bf16_tflops_dense: f("bf16_tflops_dense"),
        fp16_tflops_dense: f("fp16_tflops_dense"),
        fp32_tflops: f("fp32_tflops"),
        mem_bandwidth_gbs: f("mem_bandwidth_gbs"),
        unified_memory: v
            .field("unified_memory")
            .and_then(Json::as_bool)
            .unwrap_or(false),
        generation: v
            .field("generation")
            .and_then(Json::as_str)
            .and_then(Generation::of_name),
        nvlink_gbs_per_direction: f("nvlink_gbs_per_direction"),
        usd_per_gpu_hour: f("usd_per_gpu_hour"),
    })
}

fn norm(s: &str) -> String {
    s.trim().to_ascii_lowercase().replace(['_', ' '], "-")
}

/// Levenshtein distance (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest names, best first.
pub fn suggest<'a>(query: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let q = norm(query);
    let mut scored: Vec<(usize, &str)> = names
        .map(|n| {
            let d = distance(&q, &norm(n));
            let bonus = if norm(n).contains(&q) || q.contains(&norm(n)) {
                0
            } else {
                2
            };
            (d + bonus, n)
        })
        .collect();
    crate::model::order::sort(&mut scored);
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

/// Finds a model by catalog id or Hugging Face id.
pub fn find_model(name: &str) -> Result<&'static ModelEntry, String> {
    let q = norm(name);
    models()
        .iter()
        .find(|m| norm(&m.arch.name) == q || norm(&m.hf_id) == q)
        .ok_or_else(|| {
            let s = suggest(name, models().iter().map(|m| m.arch.name.as_str()));
            format!(
                "unknown model {name:?}; did you mean {}? (`lorafit models` lists all)",
                s.join(", ")
            )
        })
}

/// The part of a Hub id that names an architecture: without the organisation, in lower case,
/// without the words of published variants of the same weights' shapes (`Instruct`, `Chat`,
/// `it`, `hf`, `Base`, `2507`, `Thinking`, `fp16`, `bf16`) or the `meta-` of Llama 3's first
/// names, and without separators: `meta-llama/Meta-Llama-3-8B-Instruct`, `NousResearch/Llama-3-8B`
/// and `llama3-8b` all give `llama38b`.
fn architecture_stem(id: &str) -> String {
    let name = id
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or(id)
        .to_ascii_lowercase();
    let name = name.strip_prefix("meta-").unwrap_or(&name).to_string();
    name.split(['-', '_'])
        .filter(|w| {
            !matches!(
                *w,
                "instruct" | "chat" | "it" | "hf" | "base" | "2507" | "thinking" | "fp16" | "bf16"
            )
        })
        .collect()
}

/// Finds a model by a Hub id or path a training config names: the catalog entry itself, or a
/// published variant of it (another organisation's copy, an `-Instruct` or `-2507` release of
/// the same architecture), said in the second member.
pub fn find_model_by_id(id: &str) -> Result<(&'static ModelEntry, Option<String>), String> {
    if let Ok(m) = find_model(id) {
        return Ok((m, None));
    }
    let stem = architecture_stem(id);
    let found = models()
        .iter()
        .find(|m| architecture_stem(&m.hf_id) == stem || architecture_stem(&m.arch.name) == stem);
    match found {
        Some(m) => Ok((
            m,
            Some(format!(
                "{id} is planned as the catalog's {} ({}): the same architecture",
                m.arch.name, m.hf_id
            )),
        )),
        None => Err(format!(
            "{} — give its config.json (--config FILE) or a catalog model (--model NAME)",
            find_model(id).err().unwrap_or_default()
        )),
    }
}

/// Finds a GPU by id or name.
pub fn find_gpu(name: &str) -> Result<&'static GpuEntry, String> {
    let q = norm(name);
    gpus()
        .iter()
        .find(|g| norm(&g.id) == q || norm(&g.name) == q || g.aliases.iter().any(|a| norm(a) == q))
        .ok_or_else(|| {
            let s = suggest(name, gpus().iter().map(|g| g.id.as_str()));
            format!(
                "unknown GPU {name:?}; did you mean {}? (`lorafit gpus` lists all)",
                s.join(", ")
            )
        })
}

/// A model given as a catalog name (string) or as architecture numbers (object), with the members
/// of an object that no architecture field reads (`rope_theta`, `hf_name`, …).
pub fn resolve_model(v: &Value) -> Result<Parsed<Architecture>, String> {
    match v {
        Value::String(name) => Ok(Parsed::all_used(find_model(name)?.arch.clone())),
        Value::Object(_) if super::config_json::looks_like_config(v) => {
            super::config_json::parse_config_value(v)
        }
        Value::Object(_) => {
            let arch = architecture_numbers(v)?;
            let ignored = super::unused::probe(v, &architecture_numbers);
            Ok(Parsed {
                value: arch,
                ignored,
            })
        }
        _ => Err("model must be a catalog name or an object of config numbers".into()),
    }
}

fn architecture_numbers(v: &Value) -> Result<Architecture, String> {
    let mut arch: Architecture =
        serde_json::from_value(v.clone()).map_err(|e| format!("invalid model: {e}"))?;
    if arch.family.layout().hybrid.is_none() {
        // Only hybrid families read the linear-attention keys (Gemma's and gpt-oss's
        // `layer_types` name sliding windows, which the family's row decides).
        arch.linear = Default::default();
    }
    arch.validate().map_err(|e| e.to_string())?;
    Ok(arch)
}

/// Share of Apple unified memory a Metal process can use by default (recommendedMaxWorkingSetSize
/// is about 75 % of RAM on 32 GB+ machines).
pub const UNIFIED_MEMORY_USABLE: f64 = 0.75;

impl GpuEntry {
    /// Capacity available to one training process, in bytes.
    pub fn capacity_bytes(&self) -> u128 {
        let total = self.memory_bytes().unwrap_or(0);
        if self.unified_memory {
            (total as f64 * UNIFIED_MEMORY_USABLE) as u128
        } else {
            total
        }
    }
}
