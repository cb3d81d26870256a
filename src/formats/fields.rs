//! One table of the training settings: every setting is declared once here — its name, the
//! JSON keys, URL key and CLI flags that carry it, its label and help on the page, its kind and
//! range, and how its text enters [`Settings`]. The CLI parser, the link codec, the JSONL reader
//! and the page's controls all read this table; adding a setting touches the model and this
//! file, nothing else.

use super::unused::Parsed;
use crate::model::job::{EvalStrategy, ExportDevice, FsdpStateDict, SaveStrategy};
use crate::model::parallel::{FsdpVersion, Parallel, MAX_GPUS_PER_NODE, MAX_NODES};
use crate::model::settings::{
    parse_expert_params, parse_target_names, MAX_BATCH, MAX_RANK, MAX_SEQ,
};
use crate::model::{
    AttnImpl, Dtype, ExpertsImpl, ExpertsLayout, FinetuningType, FusedCe, Generation, GrpoLoss,
    Liger, Logits, LoraInit, LossShift, Optimizer, PrefLoss, Quant, QuantStorage, SavedModule,
    Settings, Stage, Strategy, Target,
};

/// What values a setting takes (decides the page control and the CLI's argument).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// A whole number in `min..=max`.
    Int {
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A decimal number in `min..max` (`max` excluded).
    Float {
        /// Smallest accepted.
        min: f64,
        /// Upper bound (excluded).
        max: f64,
    },
    /// On or off (`1`/`0`, `true`/`false`, `on`/`off`, `yes`/`no`).
    Bool,
    /// One of `choices()`, as (value, label) pairs.
    Choice(fn() -> Vec<(&'static str, &'static str)>),
    /// A comma-separated subset of `items()` ((value, label) pairs); `members` lists the items
    /// a setting holds (the text may abbreviate them, e.g. `all-linear`).
    List {
        /// Every item, as (value, label).
        items: fn() -> Vec<(&'static str, &'static str)>,
        /// The items the settings hold.
        members: fn(&Settings) -> Vec<&'static str>,
    },
    /// A JSON object (only through the JSONL protocol).
    Json,
    /// Free text, validated by the setter.
    Text,
}

/// The page's slider for a number setting.
#[derive(Clone, Copy, Debug)]
pub struct Slider {
    /// Left end.
    pub min: f64,
    /// Right end.
    pub max: f64,
    /// Step of the number box.
    pub step: f64,
    /// Log2 scale with ticks at powers of two.
    pub log: bool,
}

/// A CLI-only text of the table (the usage's help line, the flags): `$cli` natively, `$web` in
/// the browser, whose page shows neither, so its bundles leave them out.
macro_rules! cli {
    ($cli:expr, $web:expr) => {
        if cfg!(target_arch = "wasm32") {
            $web
        } else {
            $cli
        }
    };
}

/// The page label of a setting that the first screen does not show: the planner page's first
/// bundle (built without `extended-ops`) draws only the first screen's controls
/// (`web::layout::ESSENTIAL`, the embed's `EMBED`; the image settings only for a vision model,
/// which it hands to the full planner), so it leaves these labels out; every other build has
/// them (`tests/it/architecture.rs` holds the two lists together).
macro_rules! beyond_first_screen {
    ($label:expr) => {
        if cfg!(feature = "extended-ops") {
            $label
        } else {
            ""
        }
    };
}

/// One setting.
pub struct Field {
    /// Canonical name; also the key in `estimate --jsonl` settings objects.
    pub name: &'static str,
    /// Further JSON keys read for it (the reference schema's spellings), preferred to `name`
    /// when both are given.
    pub json_aliases: &'static [&'static str],
    /// Key in the page's link, if links carry it.
    pub url: Option<&'static str>,
    /// CLI flag, if the CLI takes it (a `Bool` flag takes no value and turns it on); `None` in
    /// the browser's builds.
    pub flag: Option<&'static str>,
    /// Other spellings of the flag (none in the browser's builds).
    pub flag_aliases: &'static [&'static str],
    /// For a `Bool`: the CLI flag that turns it off (`None` in the browser's builds).
    pub no_flag: Option<&'static str>,
    /// Label on the page.
    pub label: &'static str,
    /// One line of help, the CLI's usage (empty in the browser's builds: the page does not show
    /// it).
    pub help: &'static str,
    /// `data-testid` of its page control (for a `List`, the prefix of one toggle per item).
    pub testid: Option<&'static str>,
    /// Kind and range.
    pub kind: Kind,
    /// The page's slider, for numbers shown with one.
    pub slider: Option<Slider>,
    /// The value as text (the form links and the CLI use).
    pub get: fn(&Settings) -> String,
    /// Sets the value from text; the error says why it is not valid (without the field name).
    pub set: fn(&mut Settings, &str) -> Result<(), String>,
}

impl Field {
    /// Whether this setting differs from the defaults.
    pub fn differs(&self, s: &Settings) -> bool {
        (self.get)(s) != (self.get)(&Settings::default())
    }

    /// The value spellings a user may type, for messages and usage (`N`, `a|b|c`).
    pub fn value_hint(&self) -> String {
        match self.kind {
            Kind::Int { .. } => "N".into(),
            Kind::Float { .. } => "X".into(),
            Kind::Bool => String::new(),
            Kind::Choice(c) => c().iter().map(|(v, _)| *v).collect::<Vec<_>>().join("|"),
            Kind::List { items, .. } => items()
                .iter()
                .map(|(v, _)| *v)
                .collect::<Vec<_>>()
                .join(","),
            Kind::Json => "{…}".into(),
            Kind::Text => "TEXT".into(),
        }
    }

    /// Whether `flag` is one of this field's CLI spellings.
    pub fn takes_flag(&self, flag: &str) -> bool {
        self.flag == Some(flag) || self.flag_aliases.contains(&flag) || self.no_flag == Some(flag)
    }
}

/// An optional number as text: empty when unset.
fn opt_text(x: Option<u64>) -> String {
    x.map(|x| x.to_string()).unwrap_or_default()
}

/// Parses an optional whole number in a range: empty or `none` is unset.
fn opt_int(v: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
    match v.trim() {
        "" | "none" | "null" => Ok(None),
        t => int_in(t, min, max).map(Some),
    }
}

/// Parses a whole number in a range.
pub fn int_in(v: &str, min: u64, max: u64) -> Result<u64, String> {
    let x: u64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a whole number"))?;
    if (min..=max).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{x} must be between {min} and {max}"))
    }
}

fn float_in(v: &str, min: f64, max: f64) -> Result<f64, String> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a number"))?;
    if x.is_finite() && x >= min && x < max {
        Ok(x)
    } else {
        Err(format!("{v} must be in [{min}, {max})"))
    }
}

/// Parses an on/off value.
pub fn boolean(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(format!("{v:?} is not on/off (1 or 0)")),
    }
}

/// An environment variable's value as pasted: trimmed, without a leading `NAME=`; `none` for
/// unset.
fn env_value<'a>(v: &'a str, name: &str) -> &'a str {
    let v = v.trim();
    let v = v
        .strip_prefix(name)
        .and_then(|r| r.strip_prefix('='))
        .unwrap_or(v);
    if v == "none" {
        ""
    } else {
        v
    }
}

/// A whole number, or `null` / `none` / empty for 0 (the default).
fn int_or_null(v: &str) -> Result<u64, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "null" | "none" => Ok(0),
        t => t
            .parse()
            .map_err(|_| format!("{v:?} is not a whole number")),
    }
}

fn bool_text(b: bool) -> String {
    u8::from(b).to_string()
}

fn named<T>(parse: fn(&str) -> Option<T>, v: &str, choices: String) -> Result<T, String> {
    parse(v).ok_or_else(|| format!("unknown value {v:?} (expected one of {choices})"))
}

/// `none` (or empty / null) as None, else a 16-bit autocast dtype.
fn autocast_of(v: &str) -> Result<Option<Dtype>, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "none" | "null" | "no" => Ok(None),
        _ => match Dtype::parse(v) {
            Some(Dtype::Fp32) | None => Err(format!(
                "unknown value {v:?} (expected one of bf16, fp16, none)"
            )),
            d => Ok(d),
        },
    }
}

fn items(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|x| !x.is_empty())
}

/// The canonical text of a target list: `all-linear` for every module.
pub fn target_list(t: &[Target]) -> String {
    if t.len() == Target::ALL.len() {
        "all-linear".into()
    } else {
        t.iter().map(|x| x.name()).collect::<Vec<_>>().join(",")
    }
}

/// The names of the switches that are on, in the table's order.
fn names_on<const N: usize>(switches: [(bool, &'static str); N]) -> Vec<&'static str> {
    switches
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| n)
        .collect()
}

/// What is offloaded, as the `offload` list names it.
fn offload_parts(p: &Parallel) -> Vec<&'static str> {
    names_on([
        (p.offload_optimizer, "optimizer"),
        (p.offload_params, "params"),
        (p.offload_activations, "activations"),
    ])
}

fn offload_text(p: &Parallel) -> String {
    offload_parts(p).join(",")
}

fn set_offload(s: &mut Settings, v: &str) -> Result<(), String> {
    let (mut o, mut p, mut a) = (false, false, false);
    for part in items(v) {
        match part.to_ascii_lowercase().as_str() {
            "optimizer" | "opt" => o = true,
            "params" | "param" | "parameters" => p = true,
            "activations" | "act" => a = true,
            "none" => {}
            other => {
                return Err(format!(
                    "unknown {other:?} (optimizer, params, activations)"
                ))
            }
        }
    }
    s.parallel.offload_optimizer = o;
    s.parallel.offload_params = p;
    s.parallel.offload_activations = a;
    Ok(())
}

fn liger_parts(l: Liger) -> Vec<&'static str> {
    names_on([
        (l.rms_norm, "rms_norm"),
        (l.swiglu, "swiglu"),
        (l.rope, "rope"),
    ])
}

/// `true` / `all`: the three kernels; `false` / `none`: none (any on/off word); else a list
/// of them.
fn set_liger(s: &mut Settings, v: &str) -> Result<(), String> {
    let mut l = Liger::NONE;
    for part in items(v) {
        match part.to_ascii_lowercase().as_str() {
            "rms_norm" | "rmsnorm" => l.rms_norm = true,
            "swiglu" | "glu_activation" => l.swiglu = true,
            "rope" => l.rope = true,
            "all" => l = Liger::ALL,
            "none" => {}
            other => match boolean(other) {
                Ok(true) => l = Liger::ALL,
                Ok(false) => {}
                Err(_) => {
                    return Err(format!(
                        "unknown {other:?} (rms_norm, swiglu, rope; true for all three)"
                    ))
                }
            },
        }
    }
    s.liger = l;
    Ok(())
}

fn set_modules_to_save(s: &mut Settings, v: &str) -> Result<(), String> {
    let mut out = vec![];
    for m in items(v) {
        if matches!(m, "none" | "null") {
            continue;
        }
        let m = named(SavedModule::parse, m, SavedModule::choices())?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    s.modules_to_save = out;
    Ok(())
}

fn dtype_choices() -> Vec<(&'static str, &'static str)> {
    Dtype::ALL.iter().map(|d| (d.name(), d.name())).collect()
}

fn names_of<T: Copy>(all: &[T], name: fn(T) -> &'static str) -> Vec<(&'static str, &'static str)> {
    all.iter().map(|&x| (name(x), name(x))).collect()
}

/// Every setting, in the order links list them.
pub static FIELDS: &[Field] = &[
    Field {
        name: "batch",
        json_aliases: &[],
        url: Some("b"),
        flag: cli!(Some("--batch"), None),
        flag_aliases: &[],
        no_flag: None,
        label: "Micro-batch",
        help: cli!("sequences per forward pass on one GPU", ""),
        testid: Some("input-batch"),
        kind: Kind::Int {
            min: 1,
            max: MAX_BATCH,
        },
        slider: Some(Slider {
            min: 1.0,
            max: 512.0,
            step: 1.0,
            log: true,
        }),
        get: |s| s.batch.to_string(),
        set: |s, v| int_in(v, 1, MAX_BATCH).map(|x| s.batch = x),
    },
    Field {
        name: "seq",
        json_aliases: &[],
        url: Some("s"),
        flag: cli!(Some("--seq"), None),
        flag_aliases: &[],
        no_flag: None,
        label: "Sequence length (longest padded batch)",
        help: cli!("tokens per sequence after padding; the longest batch sets the peak", ""),
        testid: Some("input-seq"),
        kind: Kind::Int {
            min: 1,
            max: MAX_SEQ,
        },
        slider: Some(Slider {
            min: 128.0,
            max: 131072.0,
            step: 1.0,
            log: true,
        }),
        get: |s| s.seq.to_string(),
        set: |s, v| int_in(v, 1, MAX_SEQ).map(|x| s.seq = x),
    },
    Field {
        name: "lora_r",
        json_aliases: &[],
        url: Some("r"),
        flag: cli!(Some("--rank"), None),
        flag_aliases: cli!(&["-r", "--lora-r"], &[]),
        no_flag: None,
        label: "LoRA rank",
        help: cli!("r of every adapter (LoraConfig r)", ""),
        testid: Some("input-rank"),
        kind: Kind::Int {
            min: 1,
            max: MAX_RANK,
        },
        slider: Some(Slider {
            min: 1.0,
            max: 512.0,
            step: 1.0,
            log: true,
        }),
        get: |s| s.lora_r.to_string(),
        set: |s, v| int_in(v, 1, MAX_RANK).map(|x| s.lora_r = x),
    },
    Field {
        name: "lora_alpha",
        json_aliases: &[],
        url: Some("a"),
        flag: cli!(Some("--alpha"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("LoRA alpha"),
        help: cli!("a preference loss's scale (no memory effect); GRPO's KL weight: not 0 adds a reference pass (TRL's default: 0.1 for preferences, 0 for GRPO)", ""),
        testid: None,
        kind: Kind::Float {
            min: -1e9,
            max: 1e9,
        },
        slider: None,
        get: |s| s.lora_alpha.to_string(),
        set: |s, v| float_in(v, -1e9, 1e9).map(|x| s.lora_alpha = x),
    },
    Field {
        name: "lora_dropout",
        json_aliases: &[],
        url: Some("do"),
        flag: cli!(Some("--dropout"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("LoRA dropout"),
        help: cli!("with dropout peft keeps the dropout output and a 1-byte mask per adapted module", ""),
        testid: Some("input-dropout"),
        kind: Kind::Float { min: 0.0, max: 1.0 },
        slider: Some(Slider {
            min: 0.0,
            max: 0.5,
            step: 0.01,
            log: false,
        }),
        get: |s| s.lora_dropout.to_string(),
        set: |s, v| float_in(v, 0.0, 1.0).map(|x| s.lora_dropout = x),
    },
    Field {
        name: "grad_accum",
        json_aliases: &[],
        url: Some("ga"),
        flag: cli!(Some("--grad-accum"), None),
        flag_aliases: cli!(&["--gradient-accumulation-steps"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Gradient accumulation steps"),
        help: cli!("micro-batches per optimizer step: a larger effective batch at no memory cost", ""),
        testid: Some("input-grad-accum"),
        kind: Kind::Int {
            min: 1,
            max: 1 << 20,
        },
        slider: Some(Slider {
            min: 1.0,
            max: 1024.0,
            step: 1.0,
            log: true,
        }),
        get: |s| s.grad_accum.to_string(),
        set: |s, v| int_in(v, 1, 1 << 20).map(|x| s.grad_accum = x),
    },
    Field {
        name: "base_weights",
        json_aliases: &[],
        url: Some("dt"),
        flag: None,
        flag_aliases: &[],
        no_flag: None,
        label: "Base weights",
        help: cli!("storage of the frozen weights: 16/32-bit, 4-bit bitsandbytes (QLoRA) or 8-bit (LLM.int8)", ""),
        testid: Some("select-dtype"),
        kind: Kind::Choice(|| {
            vec![
                ("bf16", "bf16"),
                ("fp16", "fp16"),
                ("fp32", "fp32"),
                ("nf4", "4-bit nf4 (QLoRA)"),
                ("fp4", "4-bit fp4"),
                ("int8", "8-bit int8 (LLM.int8)"),
            ]
        }),
        slider: None,
        get: |s| s.base_weights().to_string(),
        set: |s, v| {
            if s.set_base_weights(v) {
                Ok(())
            } else {
                Err(format!(
                    "unknown value {v:?} (expected one of bf16, fp16, fp32, nf4, fp4, int8)"
                ))
            }
        },
    },
    Field {
        name: "double_quant",
        json_aliases: &[],
        url: Some("dq"),
        flag: cli!(Some("--double-quant"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-double-quant"), None),
        label: beyond_first_screen!("Double quantization (4-bit)"),
        help: cli!("bitsandbytes quantizes the absmax constants too", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.double_quant),
        set: |s, v| boolean(v).map(|x| s.double_quant = x),
    },
    Field {
        name: "bnb_4bit_quant_storage",
        json_aliases: &["quant_storage"],
        url: Some("qs"),
        flag: cli!(Some("--quant-storage"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("4-bit storage dtype"),
        help: cli!("bitsandbytes' bnb_4bit_quant_storage: uint8, or the model's 16-bit dtype so that FSDP shards the 4-bit weights", ""),
        testid: None,
        kind: Kind::Choice(|| names_of(QuantStorage::ALL, QuantStorage::name)),
        slider: None,
        get: |s| s.quant_storage.name().to_string(),
        set: |s, v| named(QuantStorage::parse, v, QuantStorage::choices()).map(|x| s.quant_storage = x),
    },
    Field {
        name: "autocast",
        json_aliases: &[],
        url: Some("ac"),
        flag: cli!(Some("--autocast"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Autocast (Trainer bf16=True / fp16=True)"),
        help: cli!("mixed precision: matmuls in 16 bit while the weights keep their dtype", ""),
        testid: Some("select-autocast"),
        kind: Kind::Choice(|| vec![("none", "none"), ("bf16", "bf16"), ("fp16", "fp16")]),
        slider: None,
        get: |s| s.autocast.map_or("none", Dtype::name).to_string(),
        set: |s, v| autocast_of(v).map(|x| s.autocast = x),
    },
    Field {
        name: "attn_impl",
        json_aliases: &[],
        url: Some("attn"),
        flag: cli!(Some("--attn"), None),
        flag_aliases: cli!(&["--attn-implementation"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Attention implementation"),
        help: cli!("attn_implementation: eager keeps the S×S probabilities; sdpa and flash do not", ""),
        testid: Some("select-attn"),
        kind: Kind::Choice(|| names_of(AttnImpl::ALL, AttnImpl::name)),
        slider: None,
        get: |s| s.attn_impl.name().to_string(),
        set: |s, v| named(AttnImpl::parse, v, AttnImpl::choices()).map(|x| s.attn_impl = x),
    },
    Field {
        name: "grad_ckpt",
        json_aliases: &[],
        url: Some("gc"),
        flag: cli!(Some("--gc"), None),
        flag_aliases: cli!(&["--gradient-checkpointing"], &[]),
        no_flag: None,
        label: "Gradient checkpointing",
        help: cli!("keep one hidden state per layer and recompute the layer in backward", ""),
        testid: Some("toggle-gc"),
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.grad_ckpt),
        set: |s, v| {
            // "offload": checkpointing with its checkpoints in host memory (axolotl's spelling).
            if v.trim().eq_ignore_ascii_case("offload") {
                s.grad_ckpt = true;
                s.parallel.offload_activations = true;
                return Ok(());
            }
            boolean(v).map(|x| s.grad_ckpt = x)
        },
    },
    Field {
        name: "padded_mask",
        json_aliases: &["attention_mask"],
        url: Some("mask"),
        flag: cli!(Some("--padded-mask"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Padded batch with explicit attention mask"),
        help: cli!("a 4-D mask is materialised and sdpa falls back to the memory-efficient kernel", ""),
        testid: Some("toggle-mask"),
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.padded_mask),
        set: |s, v| {
            s.padded_mask = match v.trim() {
                "padded" => true,
                "none" | "" => false,
                // (the measuring harness's name for padding-free packing: no mask is given)
                "packed" if crate::model::extended::EXTENDED => {
                    s.packing = true;
                    false
                }
                "neat" if crate::model::extended::EXTENDED => {
                    s.neat_packing = true;
                    false
                }
                other => boolean(other)?,
            };
            Ok(())
        },
    },
    Field {
        name: "packing",
        json_aliases: &["padding_free"],
        url: Some("pf"),
        flag: cli!(Some("--packing"), None),
        flag_aliases: cli!(&["--padding-free"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Padding-free packing (the batch in one row)"),
        help: cli!("the batch's samples flattened into one row of batch × seq tokens, position ids restarting per document (TRL packing, DataCollatorWithFlattening); sdpa then builds a (batch × seq)² block-causal mask", ""),
        testid: Some("toggle-packing"),
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.packing),
        set: |s, v| boolean(v).map(|x| s.packing = x),
    },
    Field {
        name: "neat_packing",
        json_aliases: &[],
        url: Some("np"),
        flag: cli!(Some("--neat-packing"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("LLaMA-Factory's neat_packing (a 4-D mask per row)"),
        help: cli!("rows of packed documents with the block-diagonal causal 4-D mask LLaMA-Factory's collator builds in the compute dtype (batch × seq² elements); under flash_attention_2 one unpadded row, as padding-free packing", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.neat_packing),
        set: |s, v| boolean(v).map(|x| s.neat_packing = x),
    },
    Field {
        name: "fused_ce",
        json_aliases: &[],
        url: Some("ce"),
        flag: cli!(Some("--fused-ce"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Fused linear cross-entropy"),
        help: cli!("the head and the loss without the full tokens × vocab logits: off, liger (Liger-Kernel's, chunked; true) or cce (cut cross-entropy, as axolotl's cut_cross_entropy plugin installs it)", ""),
        testid: None,
        kind: Kind::Choice(|| {
            vec![
                ("off", "off (the full logits)"),
                ("liger", "Liger's fused linear cross-entropy"),
                ("cce", "cut cross-entropy"),
            ]
        }),
        slider: None,
        get: |s| s.fused_ce.name().to_string(),
        set: |s, v| named(FusedCe::parse, v, FusedCe::choices()).map(|x| s.fused_ce = x),
    },
    Field {
        name: "liger_kernel",
        json_aliases: &[],
        url: Some("lk"),
        flag: cli!(Some("--liger-kernel"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Liger kernels"),
        help: cli!("Liger-Kernel's RMSNorm, SwiGLU (GeGLU for Gemma) and RoPE in the decoder layers (true: all three, as enable_liger_kernel / use_liger_kernel install them; its fused cross-entropy is the fused_ce setting)", ""),
        testid: Some("toggle-liger"),
        kind: Kind::List {
            items: || {
                vec![
                    ("rms_norm", "Liger RMSNorm"),
                    ("swiglu", "Liger SwiGLU"),
                    ("rope", "Liger RoPE"),
                ]
            },
            members: |s| liger_parts(s.liger),
        },
        slider: None,
        get: |s| liger_parts(s.liger).join(","),
        set: set_liger,
    },
    Field {
        name: "finetuning_type",
        json_aliases: &[],
        url: Some("ft"),
        flag: cli!(Some("--finetuning-type"), None),
        flag_aliases: &[],
        no_flag: None,
        label: "Fine-tuning type",
        help: cli!("lora: adapters on a frozen base; full: every parameter trained, with a gradient and optimizer states for each; freeze: every parameter of some decoder layers (LLaMA-Factory finetuning_type)", ""),
        testid: Some("select-finetuning"),
        kind: Kind::Choice(|| {
            vec![
                ("lora", "LoRA / QLoRA (adapters)"),
                ("full", "Full (every parameter)"),
                ("freeze", "Freeze (some layers trained)"),
            ]
        }),
        slider: None,
        get: |s| s.finetuning_type.name().to_string(),
        set: |s, v| {
            named(FinetuningType::parse, v, FinetuningType::choices())
                .map(|x| s.finetuning_type = x)
        },
    },
    Field {
        name: "freeze_trainable_layers",
        json_aliases: &[],
        url: Some("ftl"),
        flag: cli!(Some("--freeze-trainable-layers"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Trained layers (freeze tuning)"),
        help: cli!("freeze tuning trains the last N decoder layers, or the first N when negative (LLaMA-Factory freeze_trainable_layers)", ""),
        testid: Some("input-freeze-layers"),
        kind: Kind::Text,
        slider: None,
        get: |s| s.freeze_trainable_layers.to_string(),
        set: |s, v| {
            v.trim()
                .parse::<i64>()
                .map(|n| s.freeze_trainable_layers = n)
                .map_err(|_| format!("{v:?} is not a whole number of layers"))
        },
    },
    Field {
        name: "use_dora",
        json_aliases: &[],
        url: Some("dora"),
        flag: cli!(Some("--use-dora"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("DoRA (peft use_dora)"),
        help: cli!("weight-decomposed LoRA: a magnitude vector per adapted layer, and each forward makes B·A and the weight norm of W + B·A; with dropout it also keeps a copy of every adapted weight in the input's dtype for backward", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.use_dora),
        set: |s, v| boolean(v).map(|x| s.use_dora = x),
    },
    Field {
        name: "use_rslora",
        json_aliases: &["peft_use_rslora"],
        url: Some("rs"),
        flag: cli!(Some("--use-rslora"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("rsLoRA"),
        help: cli!("scaling α/√r instead of α/r: no memory effect", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.use_rslora),
        set: |s, v| boolean(v).map(|x| s.use_rslora = x),
    },
    Field {
        name: "init_lora_weights",
        json_aliases: &["peft_init_lora_weights"],
        url: Some("init"),
        flag: cli!(Some("--init-lora-weights"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Adapter initialisation"),
        help: cli!("pissa and olora decompose each adapted weight before training (a cost at start, none in the step)", ""),
        testid: None,
        kind: Kind::Text,
        slider: None,
        get: |s| s.init_lora_weights.name().to_string(),
        set: |s, v| {
            LoraInit::read(v)
                .map(|x| s.init_lora_weights = x)
                .ok_or_else(|| {
                    format!(
                        "unknown value {v:?} (expected one of {}, pissa_niter_N)",
                        LoraInit::choices()
                    )
                })
        },
    },
    Field {
        name: "loraplus_lr_ratio",
        json_aliases: &[],
        url: Some("lp"),
        flag: cli!(Some("--loraplus-lr-ratio"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("LoRA+ learning-rate ratio"),
        help: cli!("lora_B's learning rate over lora_A's (0: off): no memory effect", ""),
        testid: None,
        kind: Kind::Float { min: 0.0, max: 1e9 },
        slider: None,
        get: |s| s.loraplus_lr_ratio.to_string(),
        set: |s, v| float_in(v, 0.0, 1e9).map(|x| s.loraplus_lr_ratio = x),
    },
    Field {
        name: "lora_fa",
        json_aliases: &["lora_a_frozen"],
        url: Some("fa"),
        flag: cli!(Some("--lora-fa"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("LoRA-FA (lora_A frozen)"),
        help: cli!("only lora_B trains: no gradient or optimizer state for A, and A's input is not saved", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.lora_fa),
        set: |s, v| boolean(v).map(|x| s.lora_fa = x),
    },
    Field {
        name: "stage",
        json_aliases: &["method_kind"],
        url: Some("stage"),
        flag: cli!(Some("--stage"), None),
        flag_aliases: &[],
        no_flag: None,
        label: "Training stage",
        help: cli!("sft, or a preference method: dpo, orpo and simpo see each example as a chosen + rejected pair (2 × batch sequences), kto unpaired examples; dpo and kto also run a reference pass; grpo scores generated completions, then trains on batch of them", ""),
        testid: Some("select-stage"),
        kind: Kind::Choice(|| {
            vec![
                ("sft", "SFT"),
                ("dpo", "DPO (pairs + reference)"),
                ("orpo", "ORPO (pairs, no reference)"),
                ("simpo", "SimPO (pairs, no reference)"),
                ("kto", "KTO (unpaired + reference)"),
                ("grpo", "GRPO (generated completions, scored, trained)"),
            ]
        }),
        slider: None,
        get: |s| s.stage.name().to_string(),
        set: |s, v| named(Stage::parse, v, Stage::choices()).map(|x| s.stage = x),
    },
    Field {
        name: "pref_loss",
        json_aliases: &["loss_type"],
        url: Some("pl"),
        flag: cli!(Some("--pref-loss"), None),
        flag_aliases: cli!(&["--loss-type"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Preference loss"),
        help: cli!("LLaMA-Factory pref_loss / TRL loss_type: orpo and simpo need no reference, the others a few scalars per pair", ""),
        testid: None,
        kind: Kind::Choice(|| {
            vec![
                ("sigmoid", "sigmoid (DPO)"),
                ("hinge", "hinge"),
                ("ipo", "IPO"),
                ("robust", "robust, exo_pair, nca_pair, bco_pair, … (a reference)"),
                ("orpo", "ORPO (no reference)"),
                ("simpo", "SimPO (no reference)"),
            ]
        }),
        slider: None,
        get: |s| s.pref_loss.name().to_string(),
        // TRL's loss_type names GRPO's aggregation too: a GRPO name sets that one.
        set: |s, v| match GrpoLoss::parse(v) {
            Some(g) => {
                s.grpo_loss = g;
                Ok(())
            }
            None => named(PrefLoss::parse, v, format!("{}; GRPO: {}", PrefLoss::choices(), GrpoLoss::choices()))
                .map(|x| s.pref_loss = x),
        },
    },
    Field {
        name: "beta",
        json_aliases: &["grpo_beta", "dpo_beta", "pref_beta"],
        url: Some("beta"),
        flag: cli!(Some("--beta"), None),
        flag_aliases: cli!(&["--pref-beta"], &[]),
        no_flag: None,
        label: beyond_first_screen!("β"),
        help: cli!("a preference loss's scale (no memory effect); GRPO's KL weight: not 0 adds a reference pass (TRL's default: 0.1 for preferences, 0 for GRPO)", ""),
        testid: None,
        kind: Kind::Float {
            min: -1e9,
            max: 1e9,
        },
        slider: None,
        get: |s| s.beta_run().to_string(),
        set: |s, v| float_in(v, -1e9, 1e9).map(|x| s.beta = Some(x)),
    },
    Field {
        name: "precompute_ref_log_probs",
        json_aliases: &[],
        url: Some("pre"),
        flag: cli!(Some("--precompute-ref-log-probs"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Precompute reference log-probs"),
        help: cli!("one no-grad pass before training instead of a reference forward in every step", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.precompute_ref_log_probs),
        set: |s, v| boolean(v).map(|x| s.precompute_ref_log_probs = x),
    },
    Field {
        name: "max_prompt_length",
        json_aliases: &["dpo_prompt_len"],
        url: Some("pp"),
        flag: cli!(Some("--max-prompt-length"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Prompt tokens"),
        help: cli!("prompt tokens of each sequence; the rest of seq is the completion, whose tokens are scored (0: half)", ""),
        testid: None,
        kind: Kind::Int { min: 0, max: MAX_SEQ },
        slider: None,
        get: |s| s.max_prompt_length.to_string(),
        set: |s, v| int_or_null(v).map(|x| s.max_prompt_length = x),
    },
    Field {
        name: "completion_only_loss",
        json_aliases: &[],
        url: Some("col"),
        flag: cli!(Some("--completion-only-loss"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-completion-only-loss"), None),
        label: beyond_first_screen!("Loss on completions only"),
        help: cli!("TRL's SFTTrainer on a prompt-completion dataset: the prompt (max_prompt_length tokens, 0: half) is not scored, so its fused LM head runs over the completion only; no memory effect with Trainer's full logits", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.completion_only_loss),
        set: |s, v| boolean(v).map(|x| s.completion_only_loss = x),
    },
    Field {
        name: "disable_dropout",
        json_aliases: &["dpo_disable_dropout"],
        url: Some("dd"),
        flag: cli!(Some("--disable-dropout"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--keep-dropout"), None),
        label: beyond_first_screen!("Disable dropout"),
        help: cli!("TRL's default for preference training (not GRPO's): every dropout, LoRA's too, at p = 0", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.disable_dropout.unwrap_or(s.preference())),
        set: |s, v| boolean(v).map(|x| s.disable_dropout = Some(x)),
    },
    Field {
        name: "grpo_loss",
        json_aliases: &["grpo_loss_type"],
        url: Some("gl"),
        flag: cli!(Some("--grpo-loss"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("GRPO loss"),
        help: cli!("TRL's loss_type for GRPO: how the per-token loss is reduced (a few [rows × completion] fp32 tensors each)", ""),
        testid: None,
        kind: Kind::Choice(|| {
            vec![
                ("dapo", "dapo (TRL's default)"),
                ("grpo", "grpo"),
                ("dr_grpo", "dr_grpo"),
                ("bnpo", "bnpo"),
            ]
        }),
        slider: None,
        get: |s| s.grpo_loss.name().to_string(),
        set: |s, v| named(GrpoLoss::parse, v, GrpoLoss::choices()).map(|x| s.grpo_loss = x),
    },
    Field {
        name: "num_generations",
        json_aliases: &[],
        url: Some("ng"),
        flag: cli!(Some("--num-generations"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Generations per prompt"),
        help: cli!("GRPO's num_generations: batch × gradient accumulation × GPUs must be a multiple of it", ""),
        testid: None,
        kind: Kind::Int { min: 2, max: MAX_BATCH },
        slider: None,
        get: |s| s.num_generations.to_string(),
        set: |s, v| int_in(v, 2, MAX_BATCH).map(|x| s.num_generations = x),
    },
    Field {
        name: "max_completion_length",
        json_aliases: &["grpo_completion_len"],
        url: Some("mcl"),
        flag: cli!(Some("--max-completion-length"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Completion tokens"),
        help: cli!("GRPO: completion tokens of each sequence, the ones scored; the rest of seq is the prompt (0: half)", ""),
        testid: None,
        kind: Kind::Int { min: 0, max: MAX_SEQ },
        slider: None,
        get: |s| s.max_completion_length.to_string(),
        set: |s, v| int_or_null(v).map(|x| s.max_completion_length = x),
    },
    Field {
        name: "num_iterations",
        json_aliases: &["grpo_num_iterations"],
        url: Some("ni"),
        flag: cli!(Some("--num-iterations"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Updates per generation"),
        help: cli!("GRPO's num_iterations (μ): above 1, each generation's old-policy log-probs are scored before training", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1024 },
        slider: None,
        get: |s| s.num_iterations.to_string(),
        set: |s, v| int_in(v, 1, 1024).map(|x| s.num_iterations = x),
    },
    Field {
        name: "steps_per_generation",
        json_aliases: &["grpo_steps_per_generation"],
        url: Some("spg"),
        flag: cli!(Some("--steps-per-generation"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Micro-steps per generation"),
        help: cli!("GRPO's steps_per_generation: each generation serves this many micro-batches, so batch × it rows are generated and scored at once; unset: the gradient accumulation (TRL's default)", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1 << 20 },
        slider: None,
        get: |s| opt_text(s.steps_per_generation),
        set: |s, v| opt_int(v, 1, 1 << 20).map(|x| s.steps_per_generation = x),
    },
    Field {
        name: "generation_batch_size",
        json_aliases: &["grpo_generation_batch_size"],
        url: Some("gbs"),
        flag: cli!(Some("--generation-batch-size"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Generation batch (all GPUs)"),
        help: cli!("GRPO's generation_batch_size: sequences generated at once over every GPU, a multiple of batch × GPUs (steps_per_generation = it / (batch × GPUs)); exclusive with steps_per_generation", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1 << 30 },
        slider: None,
        get: |s| opt_text(s.generation_batch_size),
        set: |s, v| opt_int(v, 1, 1 << 30).map(|x| s.generation_batch_size = x),
    },
    Field {
        name: "generation",
        json_aliases: &[],
        url: Some("gen"),
        flag: cli!(Some("--generation"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Generation"),
        help: cli!("GRPO: hf runs transformers' generate on the training GPU (TRL's use_vllm=False), its KV cache and sampling buffers a phase of their own; vllm_colocate gives vLLM its share of this GPU; vllm_server generates on other GPUs", ""),
        testid: None,
        kind: Kind::Choice(|| {
            vec![
                ("hf", "transformers' generate on this GPU"),
                ("vllm_colocate", "vLLM on this GPU (colocate mode)"),
                ("vllm_server", "vLLM on other GPUs (server mode)"),
            ]
        }),
        slider: None,
        get: |s| s.generation.name().to_string(),
        set: |s, v| named(Generation::parse, v, Generation::choices()).map(|x| s.generation = x),
    },
    Field {
        name: "vllm_gpu_memory_utilization",
        json_aliases: &[],
        url: Some("vu"),
        flag: cli!(Some("--vllm-gpu-memory-utilization"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("vLLM's share of the GPU"),
        help: cli!("GRPO with vLLM colocated: the fraction of the card's memory vLLM takes for its weights, KV cache and CUDA graphs (TRL's default 0.3)", ""),
        testid: None,
        kind: Kind::Float { min: 0.01, max: 1.0 },
        slider: None,
        get: |s| s.vllm_gpu_memory_utilization.to_string(),
        set: |s, v| {
            let x: f64 = v.trim().parse().map_err(|_| format!("{v:?} is not a number"))?;
            if x > 0.0 && x <= 1.0 {
                s.vllm_gpu_memory_utilization = x;
                Ok(())
            } else {
                Err(format!("{v} must be in (0, 1]: a fraction of the card's memory"))
            }
        },
    },
    Field {
        name: "vllm_enable_sleep_mode",
        json_aliases: &[],
        url: Some("vs"),
        flag: cli!(Some("--vllm-enable-sleep-mode"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("vLLM sleep mode"),
        help: cli!("GRPO with vLLM colocated: vLLM's weights and KV cache are released after each generation and made again before the next, so training does not share the card with them", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.vllm_enable_sleep_mode),
        set: |s, v| boolean(v).map(|x| s.vllm_enable_sleep_mode = x),
    },
    Field {
        name: "vllm_importance_sampling_correction",
        json_aliases: &[],
        url: Some("vis"),
        flag: cli!(Some("--vllm-importance-sampling-correction"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-vllm-importance-sampling-correction"), None),
        label: beyond_first_screen!("vLLM importance-sampling correction"),
        help: cli!("GRPO with vLLM: the old policy's log-probs are scored in every step to correct for vLLM's sampling (TRL's default)", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.vllm_importance_sampling_correction),
        set: |s, v| boolean(v).map(|x| s.vllm_importance_sampling_correction = x),
    },
    Field {
        name: "logits",
        json_aliases: &["pref_logits"],
        url: Some("plg"),
        flag: cli!(Some("--logits"), None),
        flag_aliases: cli!(&["--pref-logits"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Loss from"),
        help: cli!("fused: TRL ≥ 1's fused LM head (SFTTrainer, DPOTrainer, KTOTrainer), no [sequences × seq × vocab] logits; full: the fp32 logits (Trainer, LLaMA-Factory, axolotl, ms-swift, TRL 0.x, TRL's ORPO/CPO)", ""),
        testid: None,
        kind: Kind::Choice(|| {
            vec![
                ("auto", "the trainer's own"),
                ("fused", "fused LM head (TRL ≥ 1)"),
                ("full", "full logits"),
            ]
        }),
        slider: None,
        get: |s| s.logits.map_or("auto", Logits::name).to_string(),
        set: |s, v| {
            if v.trim().eq_ignore_ascii_case("auto") {
                s.logits = None;
                Ok(())
            } else {
                named(Logits::parse, v, Logits::choices()).map(|x| s.logits = Some(x))
            }
        },
    },
    Field {
        name: "gpus_per_node",
        json_aliases: &[],
        url: Some("g"),
        flag: cli!(Some("--gpus"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("GPUs per node"),
        help: cli!("data-parallel ranks on one machine", ""),
        testid: Some("input-gpus"),
        kind: Kind::Int {
            min: 1,
            max: MAX_GPUS_PER_NODE,
        },
        slider: Some(Slider {
            min: 1.0,
            max: 64.0,
            step: 1.0,
            log: false,
        }),
        get: |s| s.parallel.gpus_per_node.to_string(),
        set: |s, v| int_in(v, 1, MAX_GPUS_PER_NODE).map(|x| s.parallel.gpus_per_node = x),
    },
    Field {
        name: "nodes",
        json_aliases: &[],
        url: Some("nodes"),
        flag: cli!(Some("--nodes"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Nodes"),
        help: cli!("machines", ""),
        testid: Some("input-nodes"),
        kind: Kind::Int {
            min: 1,
            max: MAX_NODES,
        },
        slider: Some(Slider {
            min: 1.0,
            max: 64.0,
            step: 1.0,
            log: false,
        }),
        get: |s| s.parallel.nodes.to_string(),
        set: |s, v| int_in(v, 1, MAX_NODES).map(|x| s.parallel.nodes = x),
    },
    Field {
        name: "strategy",
        json_aliases: &[],
        url: Some("st"),
        flag: cli!(Some("--strategy"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Strategy"),
        help: cli!("how the ranks share the model: DDP, FSDP, DeepSpeed ZeRO", ""),
        testid: Some("select-strategy"),
        kind: Kind::Choice(|| names_of(Strategy::ALL, Strategy::name)),
        slider: None,
        get: |s| s.parallel.strategy.name().to_string(),
        set: |s, v| named(Strategy::parse, v, Strategy::choices()).map(|x| s.parallel.strategy = x),
    },
    Field {
        name: "fsdp_version",
        json_aliases: &[],
        url: Some("fv"),
        flag: cli!(Some("--fsdp-version"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("FSDP version"),
        help: cli!("accelerate's fsdp_version: 1 (FullyShardedDataParallel, flat parameters) or 2 (fully_shard: each decoder layer gathered before its forward and backward and freed after, on their own CUDA streams)", ""),
        testid: Some("select-fsdp-version"),
        kind: Kind::Choice(|| names_of(FsdpVersion::ALL, FsdpVersion::name)),
        slider: None,
        get: |s| s.parallel.fsdp_version.name().to_string(),
        set: |s, v| named(FsdpVersion::parse, v, FsdpVersion::choices()).map(|x| s.parallel.fsdp_version = x),
    },
    Field {
        name: "ddp_find_unused_parameters",
        json_aliases: &["find_unused_parameters"],
        url: Some("fu"),
        flag: cli!(Some("--ddp-find-unused-parameters"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-ddp-find-unused-parameters"), None),
        label: beyond_first_screen!("DDP: find unused parameters"),
        help: cli!("DistributedDataParallel's find_unused_parameters; Trainer's default is on for a peft model and, for full tuning, on without gradient checkpointing (LLaMA-Factory turns it off for LoRA). On: buckets of 1 and 25 MiB from the start and the model's outputs cloned after every forward; off: one bucket of every gradient, rebuilt into 25 MiB buckets before the second step", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.ddp_finds_unused()),
        set: |s, v| boolean(v).map(|x| s.ddp_find_unused_parameters = Some(x)),
    },
    Field {
        name: "ddp_bucket_cap_mb",
        json_aliases: &["bucket_cap_mb"],
        url: Some("bc"),
        flag: cli!(Some("--ddp-bucket-cap-mb"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("DDP bucket size, MiB (bucket_cap_mb)"),
        help: cli!("DistributedDataParallel's gradient bucket limit; unset: 25 MiB with a first bucket of 1 MiB", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1 << 20 },
        slider: None,
        get: |s| opt_text(s.ddp_bucket_cap_mb),
        set: |s, v| opt_int(v, 1, 1 << 20).map(|x| s.ddp_bucket_cap_mb = x),
    },
    Field {
        name: "ddp_broadcast_buffers",
        json_aliases: &["broadcast_buffers"],
        url: Some("bb"),
        flag: cli!(Some("--ddp-broadcast-buffers"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-ddp-broadcast-buffers"), None),
        label: beyond_first_screen!("DDP: broadcast buffers before each forward"),
        help: cli!("DistributedDataParallel's broadcast_buffers (on by default): the module's buffers sent from rank 0 before every forward, several of one dtype concatenated first", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.ddp_broadcast_buffers),
        set: |s, v| boolean(v).map(|x| s.ddp_broadcast_buffers = x),
    },
    Field {
        name: "offload",
        json_aliases: &[],
        url: Some("off"),
        flag: cli!(Some("--offload"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Offload to CPU"),
        help: cli!("optimizer states, parameters, checkpointed activations", ""),
        testid: Some("toggle-offload"),
        kind: Kind::List {
            items: || {
                vec![
                    ("optimizer", "offload optimizer to CPU"),
                    ("params", "offload parameters to CPU"),
                    ("activations", "offload checkpoints to CPU"),
                ]
            },
            members: |s| offload_parts(&s.parallel),
        },
        slider: None,
        get: |s| offload_text(&s.parallel),
        set: set_offload,
    },
    Field {
        name: "optimizer",
        json_aliases: &[],
        url: Some("opt"),
        flag: cli!(Some("--optimizer"), None),
        flag_aliases: cli!(&["--optim"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Optimizer"),
        help: cli!("Trainer's optim name", ""),
        testid: Some("select-optimizer"),
        kind: Kind::Choice(|| names_of(Optimizer::ALL, Optimizer::name)),
        slider: None,
        get: |s| s.optimizer.name().to_string(),
        set: |s, v| named(Optimizer::parse, v, Optimizer::choices()).map(|x| s.optimizer = x),
    },
    Field {
        name: "target_modules",
        json_aliases: &["target_modules_list"],
        url: Some("t"),
        flag: cli!(Some("--targets"), None),
        flag_aliases: cli!(&["--target-modules"], &[]),
        no_flag: None,
        label: beyond_first_screen!("LoRA target modules"),
        help: cli!("modules that get adapters (peft target_modules)", ""),
        testid: Some("target"),
        kind: Kind::List {
            items: || {
                vec![
                    ("q", "q_proj"),
                    ("k", "k_proj"),
                    ("v", "v_proj"),
                    ("o", "o_proj"),
                    ("gate", "gate_proj"),
                    ("up", "up_proj"),
                    ("down", "down_proj"),
                ]
            },
            members: |s| s.targets.iter().map(|t| t.name()).collect(),
        },
        slider: None,
        get: |s| target_list(&s.targets),
        set: |s, v| {
            s.targets = parse_target_names(items(v)).map_err(|e| match e {
                crate::model::PlanError::InvalidSetting { why, .. }
                | crate::model::PlanError::InvalidArchitecture { why, .. } => why,
                other => other.to_string(),
            })?;
            Ok(())
        },
    },
    Field {
        name: "target_parameters",
        json_aliases: &[],
        url: Some("tp"),
        flag: cli!(Some("--target-parameters"), None),
        flag_aliases: cli!(&["--expert-lora"], &[]),
        no_flag: None,
        label: beyond_first_screen!("LoRA on the experts (target_parameters)"),
        help: cli!("peft adapts the fused expert weights (MoE models; needs lora_dropout 0)", ""),
        testid: Some("expert-lora"),
        kind: Kind::List {
            items: || {
                vec![
                    ("gate_up_proj", "experts' gate_up_proj"),
                    ("down_proj", "experts' down_proj"),
                ]
            },
            members: |s| s.target_parameters.iter().map(|p| p.name()).collect(),
        },
        slider: None,
        get: |s| {
            s.target_parameters
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(",")
        },
        set: |s, v| {
            s.target_parameters = parse_expert_params(items(v))?;
            Ok(())
        },
    },
    Field {
        name: "output_router_logits",
        json_aliases: &[],
        url: Some("rl"),
        flag: cli!(Some("--router-logits"), None),
        flag_aliases: cli!(&["--output-router-logits"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Router logits and load-balancing loss"),
        help: cli!("output_router_logits: keeps every MoE layer's router logits for the auxiliary loss", ""),
        testid: Some("toggle-router-logits"),
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.output_router_logits),
        set: |s, v| boolean(v).map(|x| s.output_router_logits = x),
    },
    Field {
        name: "experts_implementation",
        json_aliases: &[],
        url: Some("ei"),
        flag: cli!(Some("--experts-implementation"), None),
        flag_aliases: cli!(&["--experts"], &[]),
        no_flag: None,
        label: beyond_first_screen!("Experts implementation"),
        help: cli!("grouped_mm (default) sorts the tokens by expert; eager loops over experts; batched_mm copies each expert's weights per token", ""),
        testid: Some("select-experts"),
        kind: Kind::Choice(|| names_of(ExpertsImpl::ALL, ExpertsImpl::name)),
        slider: None,
        get: |s| s.experts_impl.name().to_string(),
        set: |s, v| named(ExpertsImpl::parse, v, ExpertsImpl::choices()).map(|x| s.experts_impl = x),
    },
    Field {
        name: "experts_layout",
        json_aliases: &[],
        url: Some("el"),
        flag: cli!(Some("--experts-layout"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Experts layout (transformers version)"),
        help: cli!("fused (transformers 5: 3-D expert parameters, never quantized) or per_expert (transformers 4: an nn.Linear per expert projection, quantized by 4-bit loading; Llama 4: the experts of a checkpoint saved in 4 bits, SequentialLlama4TextExperts)", ""),
        testid: Some("select-experts-layout"),
        kind: Kind::Choice(|| names_of(ExpertsLayout::ALL, ExpertsLayout::name)),
        slider: None,
        get: |s| s.experts_layout.name().to_string(),
        set: |s, v| named(ExpertsLayout::parse, v, ExpertsLayout::choices()).map(|x| s.experts_layout = x),
    },
    Field {
        name: "loss_shift",
        json_aliases: &[],
        url: Some("ls"),
        flag: cli!(Some("--loss-shift"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Loss shift (transformers version)"),
        help: cli!("labels (transformers 4.49 and later: the labels are shifted) or logits (before 4.49: the loss copies the fp32 logits without their last position)", ""),
        testid: Some("select-loss-shift"),
        kind: Kind::Choice(|| names_of(LossShift::ALL, LossShift::name)),
        slider: None,
        get: |s| s.loss_shift.name().to_string(),
        set: |s, v| named(LossShift::parse, v, LossShift::choices()).map(|x| s.loss_shift = x),
    },
    Field {
        name: "images_per_sample",
        json_aliases: &[],
        url: Some("img"),
        flag: cli!(Some("--images-per-sample"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Images per sample"),
        help: cli!("images in each sample of a vision-language model (0: text only); each adds its visual tokens and two markers to seq, which counts every token the language model sees (LLaMA-Factory cutoff_len)", ""),
        testid: Some("input-images"),
        kind: Kind::Int {
            min: 0,
            max: crate::model::vision::MAX_IMAGES,
        },
        slider: Some(Slider {
            min: 0.0,
            max: 16.0,
            step: 1.0,
            log: false,
        }),
        get: |s| s.images.images_per_sample.to_string(),
        set: |s, v| int_in(v, 0, crate::model::vision::MAX_IMAGES).map(|x| s.images.images_per_sample = x),
    },
    Field {
        name: "image_width",
        json_aliases: &[],
        url: Some("iw"),
        flag: cli!(Some("--image-width"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Image width (pixels, as stored)"),
        help: cli!("each image's width before any resize; LLaMA-Factory's image_max_pixels / image_min_pixels and the processor's smart_resize decide what the tower sees", ""),
        testid: Some("input-image-width"),
        kind: Kind::Int {
            min: 1,
            max: crate::model::vision::MAX_IMAGE_SIDE,
        },
        slider: Some(Slider {
            min: 32.0,
            max: 4096.0,
            step: 1.0,
            log: true,
        }),
        get: |s| s.images.image_width.to_string(),
        set: |s, v| int_in(v, 1, crate::model::vision::MAX_IMAGE_SIDE).map(|x| s.images.image_width = x),
    },
    Field {
        name: "image_height",
        json_aliases: &[],
        url: Some("ih"),
        flag: cli!(Some("--image-height"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Image height (pixels, as stored)"),
        help: cli!("each image's height before any resize", ""),
        testid: Some("input-image-height"),
        kind: Kind::Int {
            min: 1,
            max: crate::model::vision::MAX_IMAGE_SIDE,
        },
        slider: Some(Slider {
            min: 32.0,
            max: 4096.0,
            step: 1.0,
            log: true,
        }),
        get: |s| s.images.image_height.to_string(),
        set: |s, v| int_in(v, 1, crate::model::vision::MAX_IMAGE_SIDE).map(|x| s.images.image_height = x),
    },
    Field {
        name: "image_max_pixels",
        json_aliases: &[],
        url: Some("imax"),
        flag: cli!(Some("--image-max-pixels"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("image_max_pixels (LLaMA-Factory)"),
        help: cli!("an image with more pixels is scaled down to this many before the processor (LLaMA-Factory image_max_pixels, default 768×768 = 589824); per image, not per sample", ""),
        testid: Some("input-image-max-pixels"),
        kind: Kind::Int {
            min: 1,
            max: 1 << 32,
        },
        slider: None,
        get: |s| s.images.image_max_pixels.to_string(),
        set: |s, v| int_in(v, 1, 1 << 32).map(|x| s.images.image_max_pixels = x),
    },
    Field {
        name: "image_min_pixels",
        json_aliases: &[],
        url: Some("imin"),
        flag: cli!(Some("--image-min-pixels"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("image_min_pixels (LLaMA-Factory)"),
        help: cli!("an image with fewer pixels is scaled up to this many (LLaMA-Factory image_min_pixels, default 32×32)", ""),
        testid: Some("input-image-min-pixels"),
        kind: Kind::Int {
            min: 1,
            max: 1 << 32,
        },
        slider: None,
        get: |s| s.images.image_min_pixels.to_string(),
        set: |s, v| int_in(v, 1, 1 << 32).map(|x| s.images.image_min_pixels = x),
    },
    Field {
        name: "freeze_vision_tower",
        json_aliases: &[],
        url: Some("fvt"),
        flag: cli!(Some("--freeze-vision-tower"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Freeze the vision tower"),
        help: cli!("LLaMA-Factory freeze_vision_tower / ms-swift freeze_vit (default on): no LoRA and no gradient in the tower; lorafit plans the tower frozen", ""),
        testid: Some("check-freeze-vision-tower"),
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.images.freeze_vision_tower),
        set: |s, v| boolean(v).map(|x| s.images.freeze_vision_tower = x),
    },
    Field {
        name: "freeze_multi_modal_projector",
        json_aliases: &[],
        url: Some("fmp"),
        flag: cli!(Some("--freeze-multi-modal-projector"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Freeze the projector"),
        help: cli!("LLaMA-Factory freeze_multi_modal_projector / ms-swift freeze_aligner (default on): the patch merger stays frozen; lorafit plans it frozen", ""),
        testid: Some("check-freeze-projector"),
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.images.freeze_multi_modal_projector),
        set: |s, v| boolean(v).map(|x| s.images.freeze_multi_modal_projector = x),
    },
    Field {
        name: "modules_to_save",
        json_aliases: &[],
        url: Some("mts"),
        flag: cli!(Some("--modules-to-save"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("modules_to_save (trained in full)"),
        help: cli!("modules peft copies and trains in full", ""),
        testid: Some("mts"),
        kind: Kind::List {
            items: || names_of(SavedModule::ALL, SavedModule::name),
            members: |s| s.modules_to_save.iter().map(|m| m.name()).collect(),
        },
        slider: None,
        get: |s| {
            s.modules_to_save
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(",")
        },
        set: set_modules_to_save,
    },
    Field {
        name: "adapter_dtype",
        json_aliases: &[],
        url: Some("ad"),
        flag: cli!(Some("--adapter-dtype"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Adapter dtype"),
        help: cli!("peft keeps LoRA weights in fp32 by default (autocast_adapter_dtype=True)", ""),
        testid: None,
        kind: Kind::Choice(dtype_choices),
        slider: None,
        get: |s| s.adapter_dtype.name().to_string(),
        set: |s, v| named(Dtype::parse, v, Dtype::choices()).map(|x| s.adapter_dtype = x),
    },
    Field {
        name: "dtype",
        json_aliases: &[],
        url: None,
        flag: cli!(Some("--dtype"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Base dtype"),
        help: cli!("dtype the model is loaded in (torch_dtype)", ""),
        testid: None,
        kind: Kind::Choice(dtype_choices),
        slider: None,
        get: |s| s.dtype.name().to_string(),
        set: |s, v| named(Dtype::parse, v, Dtype::choices()).map(|x| s.dtype = x),
    },
    Field {
        name: "quant",
        json_aliases: &[],
        url: None,
        flag: cli!(Some("--quant"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Quantized base"),
        help: cli!("bitsandbytes base: load_in_4bit's quant type (nf4, fp4) or load_in_8bit (int8, LLM.int8)", ""),
        testid: None,
        kind: Kind::Choice(|| {
            vec![
                ("none", "none"),
                ("nf4", "nf4"),
                ("fp4", "fp4"),
                ("int8", "int8"),
            ]
        }),
        slider: None,
        get: |s| s.quant.map_or("none", Quant::name).to_string(),
        set: |s, v| {
            s.quant = match v.trim() {
                "" | "none" | "null" => None,
                _ => Some(named(Quant::parse, v, "nf4, fp4, int8, none".into())?),
            };
            Ok(())
        },
    },
    Field {
        name: "prepare_kbit",
        json_aliases: &[],
        url: Some("pk"),
        flag: cli!(Some("--prepare-kbit"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-prepare-kbit"), None),
        label: beyond_first_screen!("peft's prepare_model_for_kbit_training"),
        help: cli!("peft's own QLoRA recipe and TRL up to 0.21 cast embeddings, norms and lm_head of a 4-bit model to fp32, and the residual stream with them; LLaMA-Factory, axolotl, ms-swift and TRL from 0.22 do not (the default)", ""),
        testid: Some("toggle-prepare-kbit"),
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.prepare_kbit),
        set: |s, v| boolean(v).map(|x| s.prepare_kbit = x),
    },
    Field {
        name: "alloc_conf",
        json_aliases: &[],
        url: Some("alloc"),
        flag: cli!(Some("--alloc-conf"), None),
        flag_aliases: cli!(&["--pytorch-cuda-alloc-conf"], &[]),
        no_flag: None,
        label: beyond_first_screen!("PYTORCH_CUDA_ALLOC_CONF"),
        help: cli!("the caching allocator's options, e.g. expandable_segments:True or max_split_size_mb:128", ""),
        testid: Some("input-alloc-conf"),
        kind: Kind::Text,
        slider: None,
        get: |s| s.alloc_conf.clone(),
        set: |s, v| {
            let v = env_value(v, "PYTORCH_CUDA_ALLOC_CONF");
            crate::model::allocator::AllocConf::parse(v).map_err(|e| e.to_string())?;
            s.alloc_conf = v.to_string();
            Ok(())
        },
    },
    Field {
        name: "cublas_workspace_config",
        json_aliases: &[],
        url: Some("cublas"),
        flag: cli!(Some("--cublas-workspace-config"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("CUBLAS_WORKSPACE_CONFIG"),
        help: cli!("cuBLAS's workspace per thread, as :SIZE_KiB:COUNT pairs (e.g. :4096:8); empty for PyTorch's default (32 MiB on Hopper, 8.125 MiB on other GPUs: lorafit takes 32 MiB)", ""),
        testid: None,
        kind: Kind::Text,
        slider: None,
        get: |s| s.cublas_workspace_config.clone(),
        set: |s, v| {
            let v = env_value(v, "CUBLAS_WORKSPACE_CONFIG");
            crate::model::settings::parse_cublas_workspace_config(v)?;
            s.cublas_workspace_config = v.to_string();
            Ok(())
        },
    },
    Field {
        name: "measured_overhead",
        json_aliases: &["measured_overhead_bytes"],
        url: Some("mo"),
        flag: cli!(Some("--measured-overhead-bytes"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Measured overhead of your run"),
        help: cli!("bytes a real run held beyond the plan (read from its memory snapshot): kept through the whole step as its own segment", ""),
        testid: Some("input-measured-overhead"),
        kind: Kind::Int { min: 0, max: 1 << 40 },
        slider: None,
        get: |s| s.measured_overhead_bytes.to_string(),
        set: |s, v| int_in(v, 0, 1 << 40).map(|x| s.measured_overhead_bytes = x),
    },
    Field {
        name: "parallel",
        json_aliases: &[],
        url: None,
        flag: None,
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Multi-GPU layout"),
        help: cli!("strategy, gpus_per_node, nodes, offload_* as one object", ""),
        testid: None,
        kind: Kind::Json,
        slider: None,
        get: |s| parallel_json(&s.parallel),
        set: |s, v| {
            s.parallel = parallel_of_json(v).map_err(|e| format!("not a valid layout: {e}"))?;
            Ok(())
        },
    },
    Field {
        name: "eval_batch",
        json_aliases: &[],
        url: Some("eb"),
        flag: cli!(Some("--eval-batch"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Eval batch (per_device_eval_batch_size)"),
        help: cli!("plans Trainer's evaluation with this micro-batch (8 when only eval_strategy is given)", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: MAX_BATCH },
        slider: None,
        get: |s| opt_text(s.job.eval_batch),
        set: |s, v| opt_int(v, 1, MAX_BATCH).map(|x| s.job.eval_batch = x),
    },
    Field {
        name: "eval_strategy",
        json_aliases: &[],
        url: Some("evs"),
        flag: cli!(Some("--eval-strategy"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Evaluation strategy"),
        help: cli!("Trainer's eval_strategy: anything but no plans the evaluation phase", ""),
        testid: None,
        kind: Kind::Choice(|| names_of(EvalStrategy::ALL, EvalStrategy::name)),
        slider: None,
        get: |s| s.job.eval_strategy.name().to_string(),
        set: |s, v| named(EvalStrategy::parse, v, EvalStrategy::choices()).map(|x| s.job.eval_strategy = x),
    },
    Field {
        name: "eval_accumulation_steps",
        json_aliases: &[],
        url: Some("eas"),
        flag: cli!(Some("--eval-accumulation-steps"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Eval accumulation steps"),
        help: cli!("every this many eval batches the kept logits move from the GPU to the host", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1 << 20 },
        slider: None,
        get: |s| opt_text(s.job.eval_accumulation_steps),
        set: |s, v| opt_int(v, 1, 1 << 20).map(|x| s.job.eval_accumulation_steps = x),
    },
    Field {
        name: "prediction_loss_only",
        json_aliases: &[],
        url: Some("plo"),
        flag: cli!(Some("--prediction-loss-only"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-prediction-loss-only"), None),
        label: beyond_first_screen!("Evaluation keeps the loss only"),
        help: cli!("off when compute_metrics is given: every eval batch's logits and labels are kept", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.job.prediction_loss_only),
        set: |s, v| boolean(v).map(|x| s.job.prediction_loss_only = x),
    },
    Field {
        name: "eval_samples",
        json_aliases: &[],
        url: Some("en"),
        flag: cli!(Some("--eval-samples"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Evaluation samples"),
        help: cli!("how many samples the evaluation runs (their logits accumulate when kept); unset: one batch", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1 << 40 },
        slider: None,
        get: |s| opt_text(s.job.eval_samples),
        set: |s, v| opt_int(v, 1, 1 << 40).map(|x| s.job.eval_samples = x),
    },
    Field {
        name: "eval_do_concat_batches",
        json_aliases: &[],
        url: Some("edc"),
        flag: cli!(Some("--eval-do-concat-batches"), None),
        flag_aliases: &[],
        no_flag: cli!(Some("--no-eval-do-concat-batches"), None),
        label: beyond_first_screen!("Concatenate eval outputs"),
        help: cli!("Trainer's eval_do_concat_batches: the kept outputs are concatenated batch after batch (each concatenation beside the old one); off, each batch's are kept in a list", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.job.eval_do_concat_batches),
        set: |s, v| boolean(v).map(|x| s.job.eval_do_concat_batches = x),
    },
    Field {
        name: "predict_with_generate",
        json_aliases: &[],
        url: Some("pwg"),
        flag: cli!(Some("--predict-with-generate"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Generate during evaluation"),
        help: cli!("Seq2SeqTrainer's predict_with_generate: with the outputs kept (prediction_loss_only off) each eval batch generates from its prompts (max_prompt_length, else half the sequence) as LLaMA-Factory evaluates, and the generated ids are kept instead of the logits", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.job.predict_with_generate),
        set: |s, v| boolean(v).map(|x| s.job.predict_with_generate = x),
    },
    Field {
        name: "max_new_tokens",
        json_aliases: &[],
        url: Some("mnt"),
        flag: cli!(Some("--max-new-tokens"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("New tokens per eval sample"),
        help: cli!("max_new_tokens of the generation during evaluation (predict_with_generate); unset: up to the sequence length (generation_max_length, which LLaMA-Factory sets to cutoff_len)", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1 << 20 },
        slider: None,
        get: |s| opt_text(s.job.max_new_tokens),
        set: |s, v| opt_int(v, 1, 1 << 20).map(|x| s.job.max_new_tokens = x),
    },
    Field {
        name: "save_strategy",
        json_aliases: &[],
        url: Some("ss"),
        flag: cli!(Some("--save-strategy"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Checkpoint saving"),
        help: cli!("Trainer's save_strategy: anything but no plans the save phase", ""),
        testid: None,
        kind: Kind::Choice(|| names_of(SaveStrategy::ALL, SaveStrategy::name)),
        slider: None,
        get: |s| s.job.save_strategy.name().to_string(),
        set: |s, v| named(SaveStrategy::parse, v, SaveStrategy::choices()).map(|x| s.job.save_strategy = x),
    },
    Field {
        name: "save_only_model",
        json_aliases: &[],
        url: Some("som"),
        flag: cli!(Some("--save-only-model"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Save the model only"),
        help: cli!("checkpoints without the optimizer states", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.job.save_only_model),
        set: |s, v| boolean(v).map(|x| s.job.save_only_model = x),
    },
    Field {
        name: "merge",
        json_aliases: &[],
        url: Some("mg"),
        flag: cli!(Some("--merge"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Merge the adapters after training"),
        help: cli!("plans peft's merge_and_unload after training (on export_device)", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.job.merge),
        set: |s, v| boolean(v).map(|x| s.job.merge = x),
    },
    Field {
        name: "export_device",
        json_aliases: &[],
        url: Some("ed"),
        flag: cli!(Some("--export-device"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Merge on"),
        help: cli!("gpu: merge_and_unload on the training GPU after training; cpu: LLaMA-Factory's export on the host", ""),
        testid: None,
        kind: Kind::Choice(|| names_of(ExportDevice::ALL, ExportDevice::name)),
        slider: None,
        get: |s| s.job.export_device.name().to_string(),
        set: |s, v| named(ExportDevice::parse, v, ExportDevice::choices()).map(|x| s.job.export_device = x),
    },
    Field {
        name: "resume_from_checkpoint",
        json_aliases: &[],
        url: Some("rfc"),
        flag: cli!(Some("--resume-from-checkpoint"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Resume from a checkpoint"),
        help: cli!("Trainer's resume_from_checkpoint: the training starts by loading a checkpoint's optimizer states (into host memory first on one GPU)", ""),
        testid: None,
        kind: Kind::Bool,
        slider: None,
        get: |s| bool_text(s.job.resume_from_checkpoint),
        set: |s, v| boolean(v).map(|x| s.job.resume_from_checkpoint = x),
    },
    Field {
        name: "fsdp_state_dict_type",
        json_aliases: &[],
        url: Some("sdt"),
        flag: cli!(Some("--fsdp-state-dict-type"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("FSDP checkpoint"),
        help: cli!("accelerate's fsdp_state_dict_type: full_state_dict (FSDP1's default) gathers everything on rank 0's host to save it; sharded_state_dict (FSDP2's default) saves each rank's shards from its own host", ""),
        testid: None,
        kind: Kind::Choice(|| names_of(FsdpStateDict::ALL, FsdpStateDict::name)),
        slider: None,
        get: |s| s.job.fsdp_state_dict.name().to_string(),
        set: |s, v| named(FsdpStateDict::parse, v, FsdpStateDict::choices()).map(|x| s.job.fsdp_state_dict = x),
    },
    Field {
        name: "export_size",
        json_aliases: &[],
        url: Some("xs"),
        flag: cli!(Some("--export-size"), None),
        flag_aliases: &[],
        no_flag: None,
        label: beyond_first_screen!("Export shard size (GB)"),
        help: cli!("LLaMA-Factory's export_size: the merged model is written in safetensors shards of up to this many GB", ""),
        testid: None,
        kind: Kind::Int { min: 1, max: 1000 },
        slider: None,
        get: |s| s.job.export_size_gb.to_string(),
        set: |s, v| int_in(v, 1, 1000).map(|x| s.job.export_size_gb = x),
    },
];

/// The multi-GPU layout as JSON, as serde writes `Parallel` (the page carries no serde:
/// [`crate::formats::json`]; a test keeps the two equal).
fn parallel_json(p: &Parallel) -> String {
    let strategy = match p.strategy {
        Strategy::Single => "single",
        Strategy::Ddp => "ddp",
        Strategy::FsdpFullShard => "fsdp_full_shard",
        Strategy::FsdpShardGradOp => "fsdp_shard_grad_op",
        Strategy::FsdpHybridShard => "fsdp_hybrid_shard",
        Strategy::Zero1 => "zero1",
        Strategy::Zero2 => "zero2",
        Strategy::Zero3 => "zero3",
    };
    format!(
        "{{\"gpus_per_node\":{},\"nodes\":{},\"strategy\":\"{strategy}\",\"offload_optimizer\":{},\"offload_params\":{},\"offload_activations\":{},\"fsdp_version\":\"{}\"}}",
        p.gpus_per_node, p.nodes, p.offload_optimizer, p.offload_params, p.offload_activations,
        p.fsdp_version.name()
    )
}

/// Reads the multi-GPU layout: an object with every member of `Parallel` (as serde requires
/// them), the strategy by any of its names; other members are ignored.
fn parallel_of_json(text: &str) -> Result<Parallel, String> {
    let v = crate::formats::json::parse(text)?;
    if !matches!(v, crate::formats::json::Json::Obj(_)) {
        return Err("expected an object".into());
    }
    let member = |k: &str| v.get(k).ok_or_else(|| format!("missing field `{k}`"));
    let count = |k: &str| {
        member(k)?
            .as_u64()
            .ok_or_else(|| format!("`{k}` must be a whole number"))
    };
    let flag = |k: &str| {
        member(k)?
            .as_bool()
            .ok_or_else(|| format!("`{k}` must be true or false"))
    };
    let strategy = member("strategy")?
        .as_str()
        .and_then(Strategy::parse)
        .ok_or_else(|| format!("`strategy` must be one of {}", Strategy::choices()))?;
    Ok(Parallel {
        gpus_per_node: count("gpus_per_node")?,
        nodes: count("nodes")?,
        strategy,
        offload_optimizer: flag("offload_optimizer")?,
        offload_params: flag("offload_params")?,
        offload_activations: flag("offload_activations")?,
        fsdp_version: match v.get("fsdp_version") {
            None => FsdpVersion::V1,
            Some(x) => x
                .as_str()
                .map(String::from)
                .or_else(|| x.as_u64().map(|n| n.to_string()))
                .as_deref()
                .and_then(FsdpVersion::parse)
                .ok_or_else(|| {
                    format!("`fsdp_version` must be one of {}", FsdpVersion::choices())
                })?,
        },
    })
}

impl Field {
    /// For a `List` field: the value text with `item` switched on or off (None for other kinds).
    pub fn with_item(&self, s: &Settings, item: &'static str, on: bool) -> Option<String> {
        let Kind::List { members, .. } = self.kind else {
            return None;
        };
        let mut held: Vec<&str> = members(s).into_iter().filter(|x| *x != item).collect();
        if on {
            held.push(item);
        }
        Some(held.join(","))
    }

    /// For a `List` field: whether the settings hold `item`.
    pub fn holds(&self, s: &Settings, item: &str) -> bool {
        match self.kind {
            Kind::List { members, .. } => members(s).contains(&item),
            _ => false,
        }
    }
}

/// The field a CLI flag sets.
pub fn by_flag(flag: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.takes_flag(flag))
}

/// The field a link key sets.
pub fn by_url(key: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.url == Some(key))
}

/// The field by its canonical name.
pub fn by_name(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

/// The CLI usage lines of every flag-carrying setting, generated from the table.
pub fn usage() -> String {
    let mut out = String::new();
    for f in FIELDS {
        let Some(flag) = f.flag else { continue };
        let mut spelled = vec![flag.to_string()];
        spelled.extend(f.flag_aliases.iter().map(|a| a.to_string()));
        if let Some(no) = f.no_flag {
            spelled.push(no.to_string());
        }
        let hint = f.value_hint();
        let left = if hint.is_empty() {
            spelled.join(" | ")
        } else {
            format!("{} {hint}", spelled.join(" | "))
        };
        out.push_str(&format!("  {left}\n      {}: {}\n", f.label, f.help));
    }
    out
}

/// Settings as JSON by the table's names and kinds: numbers, booleans, lists of the items held,
/// texts (the JSONL names and values `estimate --jsonl` reads back).
pub fn settings_json(s: &Settings) -> serde_json::Value {
    use serde_json::Value;
    let mut out = serde_json::Map::new();
    for f in FIELDS {
        let text = (f.get)(s);
        let v = match f.kind {
            Kind::Int { .. } => text.parse::<u64>().map(Value::from).unwrap_or(Value::Null),
            Kind::Float { .. } => text.parse::<f64>().map(Value::from).unwrap_or(Value::Null),
            Kind::Bool => Value::Bool(text == "1" || text == "true"),
            Kind::List { members, .. } => {
                Value::Array(members(s).into_iter().map(Value::from).collect())
            }
            Kind::Json => serde_json::from_str(&text).unwrap_or(Value::String(text)),
            Kind::Choice(_) | Kind::Text if text.is_empty() => Value::Null,
            Kind::Choice(_) | Kind::Text => Value::String(text),
        };
        out.insert(f.name.to_string(), v);
    }
    Value::Object(out)
}

/// Text form of a JSON value for [`Field::set`]: strings as they are, numbers and booleans
/// printed, null as `none`, lists joined by commas, objects as JSON.
pub fn json_text(v: &serde_json::Value) -> Result<String, String> {
    use serde_json::Value;
    Ok(match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "none".into(),
        Value::Array(items) => {
            let mut parts = vec![];
            for it in items {
                match it {
                    Value::String(s) => parts.push(s.clone()),
                    Value::Number(n) => parts.push(n.to_string()),
                    _ => return Err("list items must be strings".into()),
                }
            }
            parts.join(",")
        }
        Value::Object(_) => v.to_string(),
    })
}

/// Settings from an `estimate --jsonl` settings object (the reference schema): every field's
/// JSON keys (null meaning "not given"), then the legacy `autocast_adapter_dtype` (true = fp32
/// adapters, false = the base dtype). Every key no field reads is returned in `ignored` (as is a
/// field's second spelling when the first one was used); the result is validated.
pub fn settings_from_json(
    v: &serde_json::Value,
) -> Result<Parsed<Settings>, crate::model::PlanError> {
    use crate::model::PlanError;
    let mut s = Settings::default();
    let Some(obj) = v.as_object() else {
        return Err(PlanError::InvalidSetting {
            field: "settings",
            why: "must be a JSON object".into(),
        });
    };
    let bad = |field: &'static str, why: String| PlanError::InvalidSetting { field, why };
    let mut used: Vec<&str> = vec![];
    for f in FIELDS {
        let key = f
            .json_aliases
            .iter()
            .chain(std::iter::once(&f.name))
            .find(|k| obj.contains_key(**k));
        if let Some(k) = key {
            used.push(k);
            if !obj[*k].is_null() {
                let text = json_text(&obj[*k]).map_err(|e| bad(f.name, e))?;
                (f.set)(&mut s, &text).map_err(|e| bad(f.name, e))?;
            }
        }
    }
    if !obj.contains_key("adapter_dtype") {
        if let Some(legacy) = obj.get("autocast_adapter_dtype") {
            used.push("autocast_adapter_dtype");
            match legacy {
                serde_json::Value::Bool(false) => s.adapter_dtype = s.dtype,
                serde_json::Value::Bool(true) | serde_json::Value::Null => {}
                other => {
                    return Err(bad(
                        "autocast_adapter_dtype",
                        format!("must be true or false, got {other}"),
                    ))
                }
            }
        }
    }
    s.validate()?;
    let ignored = obj
        .keys()
        .filter(|k| !used.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(Parsed { value: s, ignored })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keys_and_flags_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for f in FIELDS {
            assert!(seen.insert(format!("name:{}", f.name)), "{}", f.name);
            if let Some(u) = f.url {
                assert!(seen.insert(format!("url:{u}")), "url {u}");
            }
            for flag in f.flag.iter().chain(f.flag_aliases).chain(f.no_flag.iter()) {
                assert!(seen.insert(format!("flag:{flag}")), "flag {flag}");
            }
        }
    }

    /// The layout's JSON is serde's, both ways: what serde writes for every strategy and flag,
    /// what serde reads (and what it refuses: a missing member).
    #[test]
    fn parallel_json_is_serdes() {
        for strategy in Strategy::ALL {
            for bits in 0..8u8 {
                let p = Parallel {
                    gpus_per_node: 8,
                    nodes: 2,
                    strategy: *strategy,
                    offload_optimizer: bits & 1 != 0,
                    offload_params: bits & 2 != 0,
                    offload_activations: bits & 4 != 0,
                    fsdp_version: if bits & 1 != 0 {
                        FsdpVersion::V2
                    } else {
                        FsdpVersion::V1
                    },
                };
                let text = serde_json::to_string(&p).unwrap();
                assert_eq!(parallel_json(&p), text);
                assert_eq!(parallel_of_json(&text), Ok(p.clone()));
                let spaced = serde_json::to_string_pretty(&p).unwrap();
                assert_eq!(parallel_of_json(&spaced), Ok(p));
            }
        }
        for bad in [
            "{}",
            "[]",
            r#"{"gpus_per_node": 2, "nodes": 1, "strategy": "ddp"}"#,
            r#"{"gpus_per_node": -2, "nodes": 1, "strategy": "ddp", "offload_optimizer": false, "offload_params": false, "offload_activations": false}"#,
            r#"{"gpus_per_node": 2, "nodes": 1, "strategy": "ring", "offload_optimizer": false, "offload_params": false, "offload_activations": false}"#,
            "not json",
        ] {
            assert!(parallel_of_json(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Parallel>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_field_reads_back_what_it_writes() {
        // get ∘ set is the identity on the canonical text of every non-default value we can make.
        let mut changed = Settings::default();
        for f in FIELDS {
            let sample = match f.kind {
                Kind::Int { min, max } => (min + 1).min(max).to_string(),
                Kind::Float { min, max } => ((min.max(0.0) + max.min(1.0)) / 2.0).to_string(),
                Kind::Bool => bool_text((f.get)(&changed) != "1"),
                Kind::Choice(c) => c().last().unwrap().0.to_string(),
                Kind::List { items, .. } => items()[0].0.to_string(),
                Kind::Json => continue,
                Kind::Text if f.name == "cublas_workspace_config" => ":4096:8".to_string(),
                Kind::Text if f.name == "freeze_trainable_layers" => "-3".to_string(),
                Kind::Text if f.name == "init_lora_weights" => "pissa_niter_16".to_string(),
                Kind::Text => "expandable_segments:True".to_string(),
            };
            let mut s = changed.clone();
            (f.set)(&mut s, &sample).unwrap_or_else(|e| panic!("{}: {e}", f.name));
            let back = (f.get)(&s);
            let mut again = s.clone();
            (f.set)(&mut again, &back).unwrap();
            assert_eq!(again, s, "{} does not round-trip through {back:?}", f.name);
            changed = s;
        }
    }

    #[test]
    fn list_items_are_switched_on_and_off() {
        let targets = by_name("target_modules").unwrap();
        // "all-linear" holds every module; switching one off lists the other six.
        let mut s = Settings::default();
        assert_eq!((targets.get)(&s), "all-linear");
        assert!(targets.holds(&s, "down"));
        let off = targets.with_item(&s, "down", false).unwrap();
        (targets.set)(&mut s, &off).unwrap();
        assert_eq!(s.targets.len(), Target::ALL.len() - 1);
        assert!(!targets.holds(&s, "down") && targets.holds(&s, "q"));
        let on = targets.with_item(&s, "down", true).unwrap();
        (targets.set)(&mut s, &on).unwrap();
        assert_eq!((targets.get)(&s), "all-linear");
        let offload = by_name("offload").unwrap();
        let on = offload.with_item(&s, "params", true).unwrap();
        (offload.set)(&mut s, &on).unwrap();
        assert!(s.parallel.offload_params && !s.parallel.offload_optimizer);
        assert_eq!(by_name("batch").unwrap().with_item(&s, "x", true), None);
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        for f in FIELDS {
            let bad = match f.kind {
                Kind::Int { .. } | Kind::Float { .. } => "seven",
                Kind::Bool => "maybe",
                Kind::Choice(_) | Kind::List { .. } => "no-such-thing",
                Kind::Json => "{",
                Kind::Text => "no_such_option:1",
            };
            let mut s = Settings::default();
            let err = (f.set)(&mut s, bad).expect_err(f.name);
            assert!(!err.is_empty());
            assert_eq!(s, Settings::default(), "{} changed on a bad value", f.name);
        }
    }
}
