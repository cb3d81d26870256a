//! Fuzz corpus as regression tests: every seed (and every saved crash reproducer) of
//! tests/fuzz-corpus runs through every target, and must neither panic nor break an invariant.

#[test]
fn corpus_and_crash_reproducers_pass_every_target() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    let mut n = 0;
    for dir in std::fs::read_dir(&root).unwrap() {
        for file in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            for target in lorafit::fuzz::TARGETS {
                let r = std::panic::catch_unwind(|| lorafit::fuzz::run(target, &data));
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => panic!("{} on {target}: {e}", path.display()),
                    Err(_) => panic!("{} panics in {target}", path.display()),
                }
                n += 1;
            }
        }
    }
    assert!(n >= 50, "corpus too small: {n}");
}

#[test]
fn every_catalog_model_and_option_combination_is_sane() {
    use lorafit::model::{plan, AttnImpl, Dtype, Optimizer, Quant, Settings};
    let dtypes = [
        (Dtype::Bf16, None),
        (Dtype::Fp16, None),
        (Dtype::Fp32, None),
        (Dtype::Bf16, Some(Quant::Nf4)),
        (Dtype::Bf16, Some(Quant::Fp4)),
    ];
    let mut cases = 0u64;
    let mut beyond_bound = 0u64;
    let mut refused = 0u64;
    for m in lorafit::formats::catalog::models() {
        for (i, &(dtype, quant)) in dtypes.iter().enumerate() {
            for (j, &optimizer) in Optimizer::ALL.iter().enumerate() {
                for attn in [AttnImpl::Eager, AttnImpl::Sdpa, AttnImpl::FlashAttention2] {
                    for gc in [false, true] {
                        // Deterministic spread of batch/seq/rank within and beyond the UI ranges.
                        let k = (cases * 2654435761) % 1000;
                        let s = Settings {
                            dtype,
                            quant,
                            optimizer,
                            attn_impl: attn,
                            grad_ckpt: gc,
                            autocast: [None, Some(Dtype::Bf16), Some(Dtype::Fp16)][(i + j) % 3],
                            batch: 1 + k % 600,
                            // A hybrid model's Gated DeltaNet scans 64-token chunks one by one,
                            // op by op: its sequences stay within 8k here to keep the test short.
                            // Llama 4's below one attention chunk (past it, its chunked masks of
                            // seq² per sequence put most of a spread this wide past the bound).
                            seq: 1
                                + (k * 977)
                                    % if let Some(c) = m.arch.attention_chunk() {
                                        c - 1
                                    } else if m.arch.gdn().is_some() {
                                        8192
                                    } else {
                                        200_000
                                    },
                            lora_r: 1 + k % 700,
                            ..Settings::default()
                        };
                        // (no dropout where peft maps the MLP names onto the fused experts,
                        // whose ParamWrapper refuses it)
                        let maps =
                            lorafit::model::peft_targets::mlp_names_reach_experts(&m.arch, &s);
                        let s = Settings {
                            lora_r: s.lora_r.min(m.arch.hidden_size),
                            lora_dropout: if maps { 0.0 } else { s.lora_dropout },
                            ..s
                        };
                        // A step past what an allocation sequence holds (a generous bound of
                        // its bytes passes 2^60) is refused with the reason, never planned.
                        let p = match plan(&m.arch, &s) {
                            Ok(p) => p,
                            Err(e) if e == lorafit::model::steptrace::too_large() => {
                                beyond_bound += 1;
                                cases += 1;
                                continue;
                            }
                            // Llama 4 is planned under sdpa (as measured); eager and flash
                            // attention are refused by name.
                            Err(lorafit::model::PlanError::InvalidSetting { field, .. })
                                if m.arch.attention_chunk().is_some() && field == "attn_impl" =>
                            {
                                refused += 1;
                                cases += 1;
                                continue;
                            }
                            Err(e) => panic!("{} {s:?}: {e}", m.arch.name),
                        };
                        let sum: u128 = p.breakdown.iter().map(|c| c.bytes).sum();
                        assert_eq!(sum, p.peak_allocated_bytes);
                        assert!(p.peak_allocated_bytes >= p.steady_state_bytes);
                        assert!(
                            p.nvidia_smi_bytes >= p.peak_reserved_bytes
                                && p.peak_reserved_bytes >= p.peak_allocated_bytes
                        );
                        // A larger batch is planned higher, or refused as past the bound.
                        match plan(
                            &m.arch,
                            &Settings {
                                batch: s.batch + 1,
                                ..s.clone()
                            },
                        ) {
                            Ok(bigger) => {
                                assert!(bigger.peak_allocated_bytes >= p.peak_allocated_bytes)
                            }
                            Err(e) => assert_eq!(e, lorafit::model::steptrace::too_large()),
                        }
                        cases += 1;
                    }
                }
            }
        }
    }
    println!("{beyond_bound} of {cases} past the step program's bound (refused)");
    // Llama 4's eager and flash combinations (5 dtypes × 2 attentions × 2): 20 of the 30 per
    // optimizer, for each Llama 4 of the catalog (Scout, Maverick).
    let llama4 = lorafit::formats::catalog::models()
        .iter()
        .filter(|m| m.arch.attention_chunk().is_some())
        .count() as u64;
    assert_eq!(llama4, 2);
    assert_eq!(
        refused,
        20 * llama4 * Optimizer::ALL.len() as u64,
        "refused by name"
    );
    assert!(
        beyond_bound * 4 < cases,
        "{beyond_bound} of {cases} past the program's bound"
    );
    assert_eq!(
        cases,
        lorafit::formats::catalog::models().len() as u64 * 5 * Optimizer::ALL.len() as u64 * 3 * 2
    );
}
