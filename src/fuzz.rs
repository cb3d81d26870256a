//! Fuzz targets shared by the benchmark-style fuzzer (`examples/fuzz.rs`) and the regression
//! tests: each takes arbitrary bytes and must return without panicking. Plans are checked for
//! additivity, order and saturation.

use crate::model::{plan, Architecture, Family, Settings};

/// Target names, in the order the fuzzer runs them.
pub const TARGETS: [&str; 6] = ["url", "config", "estimate", "lengths", "model", "snapshot"];

/// Runs one target on one input. Returns Err with a description when an invariant fails.
pub fn run(target: &str, data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    match target {
        "url" => {
            let (st, notices) = crate::web::link::decode(&text);
            st.settings
                .validate()
                .map_err(|e| format!("decoded settings invalid: {e}"))?;
            if notices.len() > 8 {
                return Err("too many notices".into());
            }
            let again = crate::web::link::decode(&crate::web::link::encode(&st)).0;
            if again.settings != st.settings || again.model != st.model || again.gpu != st.gpu {
                return Err("encode/decode round trip changed the state".into());
            }
            Ok(())
        }
        "config" => {
            if let Ok(a) = crate::formats::config_json::parse_config(&text) {
                totals_in_order(&a.value, &Settings::default())?;
            }
            Ok(())
        }
        "estimate" => {
            let (_, line) = crate::formats::jsonl::output_line(&text);
            serde_json::from_str::<serde_json::Value>(&line)
                .map_err(|e| format!("output is not JSON: {e}"))?;
            Ok(())
        }
        "lengths" => {
            if let Ok(ls) = crate::planning::lengths::parse_lengths(&text, 4.0) {
                if ls.is_empty() || ls.contains(&0) {
                    return Err("empty or zero lengths accepted".into());
                }
                let _ = crate::planning::lengths::stats(&ls);
            }
            Ok(())
        }
        "snapshot" => {
            // A dropped file: snapshot pickle (maybe gzip), memory_summary() text or stats JSON.
            use crate::formats::snapshot::{parse, Limits, Reader, Report};
            let whole = parse(data);
            // Read in small slices, as the page does, it gives the same answer.
            if !crate::formats::snapshot::is_gzip(data) {
                let limits = Limits::default();
                let sliced = Reader::new(data, &limits).and_then(|mut r| loop {
                    if let Some(report) = r.step(7)? {
                        break Ok(report);
                    }
                });
                if sliced != whole {
                    return Err("parsing in slices differs from one pass".into());
                }
            }
            if let Ok(Report::Snapshot(snap)) = whole {
                let t = snap.timeline();
                if t.peak_reserved_bytes < t.start_reserved_bytes {
                    return Err("peak reserved below the start".into());
                }
                let _ = snap.trace_truncated();
                let _ = snap.largest_blocks_at(t.points.len() / 2, 8);
            }
            Ok(())
        }
        "model" => {
            // Arbitrary numbers straight into the model.
            let mut w = [0u64; 12];
            for (i, chunk) in data.chunks(8).take(12).enumerate() {
                let mut b = [0u8; 8];
                b[..chunk.len()].copy_from_slice(chunk);
                w[i] = u64::from_le_bytes(b);
            }
            // One input in eight uses raw values (mostly invalid: typed errors expected); the
            // rest build valid shapes up to 405B-class sizes and extreme batch × seq.
            let raw = w[0] % 8 == 0;
            let pick = |x: u64, lo: u64, hi: u64| if raw { x } else { lo + x % (hi - lo + 1) };
            let heads = if raw { w[4] } else { 1u64 << (w[4] % 8) };
            let hidden = if raw {
                w[1]
            } else {
                heads * 8 * pick(w[1], 1, 128)
            };
            let kv = if raw {
                w[5]
            } else {
                heads >> (w[5] % 3).min(heads.trailing_zeros() as u64)
            };
            // Mixture-of-experts shapes from the high bits (families 7.. of Family::ALL).
            let family = Family::ALL[(w[0] % Family::ALL.len() as u64) as usize];
            let experts = pick(w[2] >> 24, 1, 256);
            let moe = crate::model::arch::MoeConfig {
                num_experts: Some(experts),
                num_experts_per_tok: Some(pick(w[3] >> 24, 1, experts)),
                moe_intermediate_size: Some(pick(w[6] >> 24, 1, 1 << 14)),
                n_shared_experts: Some((w[7] >> 40) % 3),
                shared_expert_intermediate_size: Some(pick(w[8] >> 40, 1, 1 << 14)),
                first_k_dense_replace: Some((w[3] >> 48) % 3),
                decoder_sparse_step: Some(pick(w[9] >> 40, 1, 3)),
                mlp_only_layers: Some(vec![(w[10] >> 40) % 4]),
                intermediate_size_mlp: Some(pick(w[4] >> 40, 1, 1 << 16)),
                norm_topk_prob: Some(w[11] & 512 != 0),
                n_group: Some(1 << ((w[10] >> 52) % 3)),
                topk_group: Some(1),
            };
            let a = Architecture {
                name: String::new(),
                family,
                hidden_size: hidden,
                intermediate_size: pick(w[2], 1, 1 << 16),
                num_hidden_layers: pick(w[3], 1, 200),
                num_attention_heads: heads,
                num_key_value_heads: Some(kv),
                head_dim: (w[6] % 2 == 0).then(|| pick(w[6], 1, 512)),
                vocab_size: pick(w[7], 1, 1 << 18),
                tie_word_embeddings: w[0] & 8 != 0,
                qkv_bias: None,
                attn_logit_softcapping: None,
                final_logit_softcapping: None,
                partial_rotary_factor: None,
                use_qk_norm: Some(w[9] & 1 != 0),
                moe: if family.layout().moe.is_some() {
                    moe
                } else {
                    Default::default()
                },
                mla: Default::default(),
                nope: Default::default(),
                linear: Default::default(),
                vision: None,
            };
            let s = Settings {
                target_parameters: if w[11] & 1024 != 0 {
                    vec![
                        crate::model::ExpertParam::GateUp,
                        crate::model::ExpertParam::Down,
                    ]
                } else {
                    vec![]
                },
                lora_dropout: if w[11] & 1024 != 0 { 0.0 } else { 0.05 },
                output_router_logits: w[11] & 2048 != 0,
                experts_impl: crate::model::ExpertsImpl::ALL[((w[11] >> 12) % 3) as usize],
                experts_layout: crate::model::ExpertsLayout::ALL[((w[11] >> 14) % 2) as usize],
                loss_shift: crate::model::LossShift::ALL[((w[11] >> 15) % 2) as usize],
                batch: pick(w[8], 1, 4096),
                seq: pick(w[9], 1, 1 << 20),
                lora_r: pick(w[10], 1, 512),
                grad_ckpt: w[11] & 1 != 0,
                attn_impl: [
                    crate::model::AttnImpl::Eager,
                    crate::model::AttnImpl::Sdpa,
                    crate::model::AttnImpl::FlashAttention2,
                ][(w[11] >> 1) as usize % 3],
                fused_ce: crate::model::FusedCe::ALL[((w[11] >> 4) % 3) as usize],
                parallel: crate::model::Parallel {
                    gpus_per_node: pick(w[11] >> 8, 1, 16),
                    nodes: pick(w[11] >> 16, 1, 4),
                    strategy: crate::model::Strategy::ALL[(w[11] >> 24) as usize % 8],
                    offload_optimizer: w[11] & 32 != 0,
                    offload_params: w[11] & 64 != 0,
                    offload_activations: w[11] & 128 != 0,
                    fsdp_version: if w[11] & 8 != 0 {
                        crate::model::FsdpVersion::V2
                    } else {
                        crate::model::FsdpVersion::V1
                    },
                },
                ..Settings::default()
            };
            totals_in_order(&a, &s)
        }
        other => Err(format!("unknown target {other}")),
    }
}

fn totals_in_order(a: &Architecture, s: &Settings) -> Result<(), String> {
    if let Ok(p) = plan(a, s) {
        let sum: u128 = p.breakdown.iter().map(|c| c.bytes).sum();
        if sum != p.peak_allocated_bytes {
            return Err("components do not add up to the peak".into());
        }
        if p.nvidia_smi_bytes < p.peak_allocated_bytes || p.nvidia_smi_bytes >= u128::MAX >> 32 {
            return Err("totals out of order or saturated".into());
        }
    }
    Ok(())
}
