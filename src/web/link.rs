//! The page's state as a URL query string, so links and embeds reproduce a plan.
//! Decoding treats the URL as untrusted input: unknown or malformed parameters are skipped with
//! a notice for the page to show, and everything valid still applies.

use crate::formats::catalog;
use crate::model::settings::{parse_target_names, MAX_BATCH, MAX_RANK, MAX_SEQ};
use crate::model::{Architecture, AttnImpl, Dtype, Family, Optimizer, SavedModule, Target};
use crate::planning::evaluate::Axis;
use crate::web::state::UiState;

/// `family.hidden.intermediate.layers.heads.kv_heads.head_dim.vocab.tied` of an imported model.
pub fn encode_arch(a: &Architecture) -> String {
    format!(
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
    )
}

/// Parses [`encode_arch`]'s form; None when malformed or invalid.
pub fn decode_arch(v: &str) -> Option<Architecture> {
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() != 9 {
        return None;
    }
    let n = |i: usize| parts[i].parse::<u64>().ok();
    let a = Architecture {
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
    };
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

fn int_in(v: &str, lo: u64, hi: u64) -> Option<u64> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|x| (lo..=hi).contains(x))
}

fn bool01(v: &str) -> Option<bool> {
    match v {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
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
        let s = &mut st.settings;
        let ok = match k.as_str() {
            "model" => catalog::find_model(&v)
                .map(|m| st.model = m.arch.name.clone())
                .is_ok(),
            "gpu" => catalog::find_gpu(&v).map(|g| st.gpu = g.id.clone()).is_ok(),
            "b" => int_in(&v, 1, MAX_BATCH).map(|x| s.batch = x).is_some(),
            "s" => int_in(&v, 1, MAX_SEQ).map(|x| s.seq = x).is_some(),
            "r" => int_in(&v, 1, MAX_RANK).map(|x| s.lora_r = x).is_some(),
            "a" => v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && x.abs() < 1e9)
                .map(|x| s.lora_alpha = x)
                .is_some(),
            "do" => v
                .parse::<f64>()
                .ok()
                .filter(|x| (0.0..1.0).contains(x))
                .map(|x| s.lora_dropout = x)
                .is_some(),
            "ga" => int_in(&v, 1, 1 << 20).map(|x| s.grad_accum = x).is_some(),
            "dt" => s.set_base_weights(&v),
            "dq" => bool01(&v).map(|x| s.double_quant = x).is_some(),
            "ac" => match v.as_str() {
                "none" => {
                    s.autocast = None;
                    true
                }
                _ => match Dtype::parse(&v) {
                    Some(Dtype::Fp32) | None => false,
                    d => {
                        s.autocast = d;
                        true
                    }
                },
            },
            "attn" => AttnImpl::parse(&v).map(|x| s.attn_impl = x).is_some(),
            "gc" => bool01(&v).map(|x| s.grad_ckpt = x).is_some(),
            "mask" => bool01(&v).map(|x| s.padded_mask = x).is_some(),
            "ce" => bool01(&v).map(|x| s.fused_ce = x).is_some(),
            "g" => int_in(&v, 1, crate::model::parallel::MAX_GPUS_PER_NODE)
                .map(|x| s.parallel.gpus_per_node = x)
                .is_some(),
            "nodes" => int_in(&v, 1, crate::model::parallel::MAX_NODES)
                .map(|x| s.parallel.nodes = x)
                .is_some(),
            "st" => crate::model::Strategy::parse(&v)
                .map(|x| s.parallel.strategy = x)
                .is_some(),
            "off" => {
                let (mut o, mut p, mut a) = (false, false, false);
                let mut good = true;
                for part in v.split(',').filter(|x| !x.is_empty()) {
                    match part {
                        "optimizer" => o = true,
                        "params" => p = true,
                        "activations" => a = true,
                        _ => good = false,
                    }
                }
                if good {
                    s.parallel.offload_optimizer = o;
                    s.parallel.offload_params = p;
                    s.parallel.offload_activations = a;
                }
                good
            }
            "opt" => Optimizer::parse(&v).map(|x| s.optimizer = x).is_some(),
            "t" => match parse_target_names(v.split(',')) {
                Ok(t) if !t.is_empty() => {
                    s.targets = t;
                    true
                }
                _ => false,
            },
            "mts" => {
                let mut out = vec![];
                let mut good = true;
                for m in v.split(',').filter(|m| !m.is_empty()) {
                    match m {
                        "lm_head" => out.push(SavedModule::LmHead),
                        "embed_tokens" => out.push(SavedModule::EmbedTokens),
                        _ => good = false,
                    }
                }
                if good {
                    out.dedup();
                    s.modules_to_save = out;
                }
                good
            }
            "embed" => bool01(&v).map(|x| st.embed = x).is_some(),
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
            _ => {
                if notices.len() < MAX_NOTICES {
                    notices.push(format!("ignored unknown parameter “{}”", shown(&k)));
                }
                continue;
            }
        };
        if !ok && notices.len() < MAX_NOTICES {
            notices.push(format!(
                "ignored “{}={}”: not a valid value",
                shown(&k),
                shown(&v)
            ));
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

fn target_list(t: &[Target]) -> String {
    if t.len() == Target::ALL.len() {
        "all-linear".into()
    } else {
        t.iter().map(|x| x.name()).collect::<Vec<_>>().join(",")
    }
}

/// Encodes the state as a query string (no leading `?`), listing only what differs from the defaults.
pub fn encode(st: &UiState) -> String {
    let d = UiState::default();
    let (s, ds) = (&st.settings, &d.settings);
    let mut p: Vec<(&str, String)> = vec![("model", st.model.clone()), ("gpu", st.gpu.clone())];
    let mut add = |k: &'static str, differs: bool, v: String| {
        if differs {
            p.push((k, v));
        }
    };
    add("b", s.batch != ds.batch, s.batch.to_string());
    add("s", s.seq != ds.seq, s.seq.to_string());
    add("r", s.lora_r != ds.lora_r, s.lora_r.to_string());
    add("a", s.lora_alpha != ds.lora_alpha, s.lora_alpha.to_string());
    add(
        "do",
        s.lora_dropout != ds.lora_dropout,
        s.lora_dropout.to_string(),
    );
    add(
        "ga",
        s.grad_accum != ds.grad_accum,
        s.grad_accum.to_string(),
    );
    add(
        "dt",
        s.base_weights() != ds.base_weights(),
        s.base_weights().into(),
    );
    add(
        "dq",
        s.double_quant != ds.double_quant,
        u8::from(s.double_quant).to_string(),
    );
    add(
        "ac",
        s.autocast != ds.autocast,
        s.autocast
            .map(|d| d.name().to_string())
            .unwrap_or_else(|| "none".into()),
    );
    add(
        "attn",
        s.attn_impl != ds.attn_impl,
        s.attn_impl.name().into(),
    );
    add(
        "gc",
        s.grad_ckpt != ds.grad_ckpt,
        u8::from(s.grad_ckpt).to_string(),
    );
    add(
        "mask",
        s.padded_mask != ds.padded_mask,
        u8::from(s.padded_mask).to_string(),
    );
    add(
        "ce",
        s.fused_ce != ds.fused_ce,
        u8::from(s.fused_ce).to_string(),
    );
    let (pp, dp) = (&s.parallel, &ds.parallel);
    add(
        "g",
        pp.gpus_per_node != dp.gpus_per_node,
        pp.gpus_per_node.to_string(),
    );
    add("nodes", pp.nodes != dp.nodes, pp.nodes.to_string());
    add(
        "st",
        pp.strategy != dp.strategy,
        pp.strategy.name().to_string(),
    );
    let off: Vec<&str> = [
        (pp.offload_optimizer, "optimizer"),
        (pp.offload_params, "params"),
        (pp.offload_activations, "activations"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    add("off", !off.is_empty(), off.join(","));
    add(
        "opt",
        s.optimizer != ds.optimizer,
        s.optimizer.name().into(),
    );
    add("t", s.targets != ds.targets, target_list(&s.targets));
    let mts = s
        .modules_to_save
        .iter()
        .map(|m| match m {
            SavedModule::LmHead => "lm_head",
            SavedModule::EmbedTokens => "embed_tokens",
        })
        .collect::<Vec<_>>()
        .join(",");
    add("mts", s.modules_to_save != ds.modules_to_save, mts);
    add("embed", st.embed, "1".into());
    add("axis", st.axis != d.axis, "batch".into());
    if let Some(a) = &st.custom {
        p.push(("arch", encode_arch(a)));
    }
    p.iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        s.autocast = Some(Dtype::Bf16);
        s.attn_impl = AttnImpl::Eager;
        s.grad_ckpt = true;
        s.padded_mask = true;
        s.fused_ce = true;
        s.parallel = crate::model::Parallel {
            gpus_per_node: 4,
            nodes: 2,
            strategy: crate::model::Strategy::FsdpHybridShard,
            offload_optimizer: true,
            offload_params: true,
            offload_activations: true,
        };
        s.optimizer = Optimizer::PagedAdamw8bit;
        s.targets = vec![Target::Q, Target::V, Target::Down];
        s.modules_to_save = vec![SavedModule::LmHead];
        st.custom = crate::formats::config_json::parse_config(r#"{"model_type":"qwen2","hidden_size":896,"intermediate_size":4864,"num_attention_heads":14,"num_hidden_layers":24,"num_key_value_heads":2,"vocab_size":151936}"#).ok().map(|mut a| {
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
    fn malformed_parameters_are_skipped_with_notices() {
        let (st, notices) =
            decode("?b=abc&s=2048&zzz=1&model=nope&r=0&do=2&t=q,bogus&gpu=h100-80&%ZZ=%");
        assert_eq!(st.settings.seq, 2048);
        assert_eq!(st.gpu, "h100-80");
        assert_eq!(st.settings.batch, 1);
        assert_eq!(st.model, "llama2-7b");
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
