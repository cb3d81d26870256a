//! The training configs users paste (`lorafit::formats::framework`), read from real examples
//! of LLaMA-Factory, axolotl, ms-swift and peft (`tests/data/configs`, sources in its
//! SOURCES.md): every key accounted for, the settings each file states, round trips through
//! the exports, refusals that name the key, and `plan --from` planning what the flags plan.

use lorafit::formats::export::export;
use lorafit::formats::fields::settings_json;
use lorafit::formats::framework::{self, Reading, Source};
use lorafit::formats::{catalog, yaml};
use lorafit::model::{
    Dtype, FinetuningType, LoraInit, Optimizer, PrefLoss, Quant, QuantStorage, Settings, Stage,
    Strategy,
};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/configs")
}

fn examples() -> Vec<PathBuf> {
    let mut out = vec![];
    for fw in ["llama-factory", "axolotl", "ms-swift", "peft"] {
        for e in std::fs::read_dir(dir().join(fw)).unwrap() {
            out.push(e.unwrap().path());
        }
    }
    out.sort();
    out
}

fn read(rel: &str) -> Reading {
    let text = std::fs::read_to_string(dir().join(rel)).unwrap();
    framework::read(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn has(list: &[String], key: &str) -> bool {
    list.iter()
        .any(|k| k == key || k.starts_with(&format!("{key}.")))
}

/// The top-level keys a file gives (not null), as its own format spells them.
fn keys_of(path: &Path, text: &str) -> Vec<String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    let obj = match ext {
        "yaml" | "yml" => serde_yaml::from_str::<serde_json::Value>(text).unwrap(),
        "json" => serde_json::from_str::<serde_json::Value>(text).unwrap(),
        _ => {
            // A shell script: the flags after `swift` (or ms-swift's `swift/cli/sft.py` that
            // accelerate launches), and upper-case variables before it.
            let at = text
                .find("swift ")
                .or_else(|| text.find("swift/cli/"))
                .unwrap();
            let after = &text[at..];
            let mut k: Vec<String> = after
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("--"))
                .map(str::to_string)
                .collect();
            for w in text[..at].split_whitespace() {
                if let Some((name, _)) = w.split_once('=') {
                    if name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                        k.push(name.to_string());
                    }
                }
            }
            return k;
        }
    };
    obj.as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k.clone())
        .collect()
}

/// Nothing dropped silently: every key of every example is used, ignored, not modelled or the
/// model's name.
#[test]
fn every_key_of_every_example_is_accounted_for() {
    let files = examples();
    assert!(files.len() >= 20, "{} examples", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        // A launch config completes a training config: read over one, its keys `accelerate.KEY`.
        let launch = framework::detect(&text).unwrap() == Source::Accelerate;
        let r = if launch {
            let mut r = framework::read("swift sft --model m\n").unwrap();
            framework::apply_launch(&mut r, &text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            r
        } else {
            framework::read(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let used: Vec<String> = r.used.iter().map(|u| u.key.clone()).collect();
        let not_modeled: Vec<String> = r.not_modeled.iter().map(|n| n.key.clone()).collect();
        for k in keys_of(&path, &text) {
            let k = if launch { format!("accelerate.{k}") } else { k };
            let model = [
                "model_name_or_path",
                "base_model",
                "model",
                "base_model_name_or_path",
            ]
            .contains(&k.as_str())
                && r.model.is_some();
            assert!(
                model || has(&used, &k) || has(&r.ignored, &k) || has(&not_modeled, &k),
                "{}: {k} is neither used, ignored nor listed as not modelled",
                path.display()
            );
        }
    }
}

/// The YAML reader reads the examples as serde_yaml does.
#[test]
fn yaml_reader_agrees_with_serde_yaml_on_the_examples() {
    for path in examples() {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if ext != "yaml" && ext != "yml" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mine = yaml::parse(&text).unwrap();
        let theirs: serde_json::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(mine, theirs, "{}", path.display());
    }
}

/// What each file says, as its text states it (values read off the files).
#[test]
fn examples_are_read_as_their_files_state() {
    // LLaMA-Factory: llama3_lora_sft.yaml (rank 8, all targets, 2048, batch 1, accumulation 8,
    // bf16), with LLaMA-Factory's gradient checkpointing and alpha 2 × rank.
    let r = read("llama-factory/llama3_lora_sft.yaml");
    assert_eq!(r.source, Source::LlamaFactory);
    assert_eq!(
        r.model.as_deref(),
        Some("meta-llama/Meta-Llama-3-8B-Instruct")
    );
    let s = &r.settings;
    assert_eq!(
        (s.lora_r, s.lora_alpha, s.seq, s.batch, s.grad_accum),
        (8, 16.0, 2048, 1, 8)
    );
    assert_eq!(s.autocast, Some(Dtype::Bf16));
    assert!(s.grad_ckpt);
    assert_eq!(s.targets.len(), lorafit::model::Target::ALL.len());
    assert!(r.assumed.iter().any(|a| a.setting == "lora_alpha"));
    assert!(r.ignored.contains(&"learning_rate".to_string()));
    // The 4-bit example: bitsandbytes NF4.
    let r = read("llama-factory/llama3_lora_sft_otfq.yaml");
    assert_eq!(r.settings.quant, Some(Quant::Nf4));
    // LLaMA-Factory, axolotl and ms-swift leave a 4-bit model's embeddings, norms and lm_head in
    // the compute dtype (no prepare_model_for_kbit_training), and say it is assumed.
    for example in [
        "llama-factory/llama3_lora_sft_otfq.yaml",
        "axolotl/qlora.yml",
        "ms-swift/train.sh",
    ] {
        let r = read(example);
        assert!(r.settings.quant.is_some(), "{example}");
        assert!(!r.settings.prepare_kbit, "{example}");
        assert!(
            r.assumed.iter().any(|a| a.setting == "prepare_kbit"),
            "{example}"
        );
    }
    // LLaMA-Factory stores a 4-bit weight in its compute dtype and axolotl in bf16, so FSDP can
    // shard them: assumed and said; ms-swift leaves bitsandbytes' uint8 unless told.
    for (example, storage) in [
        (
            "llama-factory/llama3_lora_sft_otfq.yaml",
            QuantStorage::Bf16,
        ),
        ("axolotl/qlora.yml", QuantStorage::Bf16),
        ("axolotl/qlora-fsdp-70b.yaml", QuantStorage::Bf16),
        ("ms-swift/train.sh", QuantStorage::Uint8),
    ] {
        let r = read(example);
        assert_eq!(r.settings.quant_storage, storage, "{example}");
        let said = r
            .assumed
            .iter()
            .any(|a| a.setting == "bnb_4bit_quant_storage");
        assert_eq!(said, storage != QuantStorage::Uint8, "{example}");
    }
    // A 16-bit base: nothing is said about preparing a 4-bit one.
    let r = read("llama-factory/llama3_lora_sft.yaml");
    assert!(r.settings.quant.is_none());
    assert!(!r.assumed.iter().any(|a| a.setting == "prepare_kbit"));
    assert!(!r
        .assumed
        .iter()
        .any(|a| a.setting == "bnb_4bit_quant_storage"));
    // ms-swift quantizes only with a quant_method: its bits alone are named, not planned.
    let text = std::fs::read_to_string(dir().join("ms-swift/train.sh")).unwrap();
    let r = framework::read(&text.replace("    --quant_method bnb \\\n", "")).unwrap();
    assert_eq!(r.settings.quant, None);
    assert!(r.not_modeled.iter().any(|n| n.key == "quant_bits"));
    // DPO with the sigmoid loss and beta 0.1.
    let r = read("llama-factory/llama3_lora_dpo.yaml");
    assert_eq!(
        (
            r.settings.stage,
            r.settings.pref_loss,
            r.settings.beta_run()
        ),
        (Stage::Dpo, PrefLoss::Sigmoid, 0.1)
    );
    // Full tuning with the ZeRO-3 file it names (its name, then its text).
    let mut r = read("llama-factory/llama3_full_sft.yaml");
    assert_eq!(r.settings.finetuning_type, FinetuningType::Full);
    assert_eq!(r.settings.parallel.strategy, Strategy::Zero3);
    assert_eq!(
        r.launch_path.as_deref(),
        Some("examples/deepspeed/ds_z3_config.json")
    );
    let ds = std::fs::read_to_string(dir().join("llama-factory/ds_z3_config.json")).unwrap();
    framework::apply_deepspeed(&mut r, &ds).unwrap();
    assert_eq!(r.settings.parallel.strategy, Strategy::Zero3);
    assert!(r
        .not_modeled
        .iter()
        .any(|n| n.key == "deepspeed.zero_optimization.stage3_prefetch_bucket_size"));
    // ZeRO-3 with CPU offload of the optimizer and the parameters.
    let r = read("llama-factory/ds_z3_offload_config.json");
    assert_eq!(r.source, Source::DeepSpeed);
    let p = &r.settings.parallel;
    assert!(p.strategy == Strategy::Zero3 && p.offload_optimizer && p.offload_params);
    assert!(r
        .ignored
        .contains(&"train_micro_batch_size_per_gpu".to_string()));

    // axolotl: QLoRA over FSDP with parameter offload, packing not modelled.
    let r = read("axolotl/qlora-fsdp-70b.yaml");
    assert_eq!(r.source, Source::Axolotl);
    let s = &r.settings;
    assert_eq!(
        (s.quant, s.lora_r, s.lora_alpha, s.seq, s.grad_accum),
        (Some(Quant::Nf4), 8, 16.0, 512, 4)
    );
    assert_eq!(s.parallel.strategy, Strategy::FsdpFullShard);
    assert!(s.parallel.offload_params && s.grad_ckpt);
    assert!(r.not_modeled.iter().any(|n| n.key == "sample_packing"));
    assert!(r.assumed.iter().any(|a| a.setting == "gpus_per_node"));
    // axolotl's LoRA example loads the base in 8 bits (LLM.int8).
    let r = read("axolotl/lora.yml");
    assert_eq!(r.settings.quant, Some(Quant::Int8));
    assert!(r.used.iter().any(|u| u.key == "load_in_8bit"));

    // ms-swift: 4-bit NF4 with double quantization, accumulation 16, alpha 32.
    let r = read("ms-swift/train.sh");
    assert_eq!(r.source, Source::Swift);
    let s = &r.settings;
    assert_eq!(
        (s.quant, s.double_quant, s.grad_accum, s.lora_alpha, s.seq),
        (Some(Quant::Nf4), true, 16, 32.0, 2048)
    );
    assert_eq!((s.dtype, s.autocast), (Dtype::Bf16, Some(Dtype::Bf16)));
    // Two processes, ZeRO-3, accumulation `$(expr 16 / $nproc_per_node)` = 8.
    let r = read("ms-swift/train_zero3.sh");
    let p = &r.settings.parallel;
    assert_eq!(
        (p.strategy, p.gpus_per_node, r.settings.grad_accum),
        (Strategy::Zero3, 2, 8)
    );
    // DPO: its evaluation is not planned, and says so.
    let r = read("ms-swift/lora.sh");
    assert_eq!(r.settings.stage, Stage::Dpo);
    assert!(r
        .not_modeled
        .iter()
        .any(|n| n.key == "per_device_eval_batch_size"));

    // peft's saved adapter: r 32, alpha 64, no dropout, peft's default targets.
    let r = read("peft/adapter_config.json");
    assert_eq!(r.source, Source::AdapterConfig);
    let s = &r.settings;
    assert_eq!(
        (s.lora_r, s.lora_alpha, s.lora_dropout, s.init_lora_weights),
        (32, 64.0, 0.0, LoraInit::Default)
    );
    assert!(r.ignored.contains(&"task_type".to_string()));
}

/// No framework export runs prepare_model_for_kbit_training as peft's own recipe does: the
/// config reads back without it, and the export says so in a comment when the plan ran it.
fn reads_back_unprepared(what: &str, s: &Settings, text: &str, back: &serde_json::Value) {
    assert_eq!(back, false, "{what}: prepare_kbit");
    assert_eq!(
        text.contains("# prepare_model_for_kbit_training"),
        s.quant.is_some() && s.prepare_kbit,
        "{what}: the export's note"
    );
}

/// Config → settings → export → config gives the same settings, for LLaMA-Factory, axolotl and
/// the two Python scripts (Trainer, TRL).
#[test]
fn exports_read_back_to_the_same_settings() {
    let arch = catalog::find_model("llama3-8b").unwrap().arch.clone();
    let lora = Settings {
        batch: 2,
        seq: 4096,
        grad_accum: 4,
        lora_r: 32,
        lora_alpha: 64.0,
        lora_dropout: 0.1,
        ..Settings::default()
    };
    let variants = [
        ("lora, bf16 weights", lora.clone()),
        (
            "qlora, autocast, checkpointing, flash",
            Settings {
                quant: Some(Quant::Nf4),
                autocast: Some(Dtype::Bf16),
                grad_ckpt: true,
                attn_impl: lorafit::model::AttnImpl::FlashAttention2,
                optimizer: Optimizer::PagedAdamw8bit,
                ..lora.clone()
            },
        ),
        (
            "qlora prepared as peft's recipe does",
            Settings {
                quant: Some(Quant::Nf4),
                prepare_kbit: true,
                autocast: Some(Dtype::Bf16),
                ..lora.clone()
            },
        ),
        (
            "Liger's SwiGLU and RoPE only",
            Settings {
                liger: lorafit::model::Liger {
                    rms_norm: false,
                    ..lorafit::model::Liger::ALL
                },
                ..lora.clone()
            },
        ),
        (
            "dora, Liger's kernels and fused loss",
            Settings {
                use_dora: true,
                fused_ce: lorafit::model::FusedCe::Liger,
                liger: lorafit::model::Liger::ALL,
                grad_ckpt: true,
                ..lora.clone()
            },
        ),
        (
            "TRL's fused LM head",
            Settings {
                logits: Some(lorafit::model::Logits::Fused),
                grad_ckpt: true,
                ..lora.clone()
            },
        ),
        (
            "offloaded checkpoints",
            Settings {
                grad_ckpt: true,
                parallel: lorafit::model::parallel::Parallel {
                    offload_activations: true,
                    ..Default::default()
                },
                ..lora.clone()
            },
        ),
        (
            "dpo",
            Settings {
                stage: Stage::Dpo,
                beta: Some(0.2),
                grad_ckpt: true,
                autocast: Some(Dtype::Bf16),
                ..lora.clone()
            },
        ),
        (
            "padding-free packing",
            Settings {
                packing: true,
                grad_ckpt: true,
                ..lora.clone()
            },
        ),
        (
            "LLaMA-Factory's neat packing",
            Settings {
                neat_packing: true,
                ..lora.clone()
            },
        ),
        (
            "full, pure bf16",
            Settings {
                finetuning_type: FinetuningType::Full,
                grad_ckpt: true,
                adapter_dtype: Dtype::Bf16,
                ..lora.clone()
            },
        ),
    ];
    for (what, s) in variants {
        for format in ["llama-factory", "axolotl", "python", "trl"] {
            if format == "axolotl" && s.preference() {
                continue; // axolotl's `rl` has no beta of DPO's sigmoid pref_loss apart
            }
            let script = format == "python" || format == "trl";
            if script && s.parallel.offload_activations {
                // Offloaded checkpoints are a framework's switch (axolotl, Unsloth), not a
                // Trainer or TRL argument: a script cannot say it.
                continue;
            }
            let text = export(format, "meta-llama/Meta-Llama-3-8B", &arch, &s).unwrap();
            if format == "llama-factory" && s.liger.any() && !s.fused_ce.any() {
                // One switch installs all four of Liger's kernels: the export says what the
                // plan had instead of reading back as it.
                assert!(
                    text.contains("enable_liger_kernel installs Liger's RMSNorm, SwiGLU, RoPE and fused linear cross-entropy together"),
                    "{what}: {text}"
                );
                continue;
            }
            // The loss's head is the trainer's: TRL's SFTTrainer scores through its fused LM head,
            // Trainer (LLaMA-Factory's, axolotl's) computes the full logits. Where the plan's
            // head is not the trainer's, the export says so and reads back as the trainer's.
            let trl_sft = format == "trl" || (format == "python" && s.sft_fused_head());
            let head_differs = !s.preference() && trl_sft != s.sft_fused_head();
            if head_differs {
                let says = if trl_sft {
                    "plan with logits fused to match it"
                } else {
                    "plan with logits full to match it"
                };
                assert!(text.contains(says), "{what} via {format}: {text}");
            }
            let back = framework::read(&text)
                .unwrap_or_else(|e| panic!("{what} via {format}: {e}\n{text}"));
            assert_eq!(
                back.settings.sft_fused_head(),
                !s.preference() && trl_sft,
                "{what} via {format}: the trainer's head"
            );
            if script {
                assert_eq!(back.source, Source::Python, "{what} via {format}");
                assert_eq!(
                    back.model.as_deref(),
                    Some("meta-llama/Meta-Llama-3-8B"),
                    "{what} via {format}"
                );
            }
            let (a, b) = (settings_json(&s), settings_json(&back.settings));
            for (k, v) in a.as_object().unwrap() {
                // Padding-free packing is TRL's packing=True; Trainer's collator, LLaMA-Factory
                // and axolotl have no key for it: the export says so.
                if k == "packing" && s.packing && format != "trl" {
                    assert!(text.contains("padding-free packing"), "{what} via {format}");
                    continue;
                }
                // neat_packing is LLaMA-Factory's: the others say they have no key for it.
                if k == "neat_packing" && s.neat_packing && format != "llama-factory" {
                    assert!(
                        text.contains("neat_packing (the plan's)"),
                        "{what} via {format}"
                    );
                    continue;
                }
                // Full tuning: the LoRA numbers are not in the export and do not apply.
                if s.base_trained() && k.starts_with("lora_") {
                    continue;
                }
                if k == "prepare_kbit" && !script {
                    reads_back_unprepared(&format!("{what} via {format}"), &s, &text, &b[k]);
                    continue;
                }
                // LLaMA-Factory stores 4-bit weights in its compute dtype, axolotl in bf16: the
                // export says so where the plan's storage differs, and reads back as theirs.
                if k == "bnb_4bit_quant_storage" && !script && s.quant.is_some_and(Quant::is_4bit) {
                    let theirs = if format == "axolotl" {
                        "bf16"
                    } else {
                        s.dtype.name()
                    };
                    assert_eq!(b[k], theirs, "{what} via {format}");
                    assert_eq!(
                        text.contains("plan with bnb_4bit_quant_storage"),
                        v != theirs,
                        "{what} via {format}: {text}"
                    );
                    continue;
                }
                // LLaMA-Factory turns DDP's search for unused parameters off for LoRA: the
                // export says otherwise only for a DDP plan over several GPUs, where it
                // matters, and reads back as LLaMA-Factory's elsewhere.
                if k == "ddp_find_unused_parameters"
                    && format == "llama-factory"
                    && s.finetuning_type == lorafit::model::FinetuningType::Lora
                    && !(s.parallel.strategy == lorafit::model::Strategy::Ddp
                        && s.parallel.world() > 1)
                {
                    assert_eq!(b[k], false, "{what} via {format}");
                    continue;
                }
                // Checked above: the trainer's head, and under TRL's no Liger loss.
                if head_differs && (k == "logits" || k == "fused_ce") {
                    continue;
                }
                // LLaMA-Factory keeps adapters in fp32 unless pure_bf16 (which the export writes
                // only for full tuning).
                assert_eq!(&b[k], v, "{what} via {format}: {k}\n{text}");
            }
        }
    }
}

/// Several GPUs: a Python script, a LLaMA-Factory or an axolotl YAML (ZeRO through their own
/// DeepSpeed files, axolotl's FSDP in the YAML), then accelerate's config of the launch (YAML,
/// or the same keys as JSON as ms-swift's examples write it), read back to the settings both
/// were exported from.
#[test]
fn python_and_accelerate_exports_read_back_for_several_gpus() {
    use lorafit::model::parallel::Parallel;
    let arch = catalog::find_model("llama3-8b").unwrap().arch.clone();
    let base = Settings {
        batch: 2,
        seq: 2048,
        grad_ckpt: true,
        autocast: Some(Dtype::Bf16),
        ..Settings::default()
    };
    let on = |strategy, gpus, offload: bool| Settings {
        parallel: Parallel {
            strategy,
            gpus_per_node: gpus,
            offload_optimizer: offload,
            offload_params: offload,
            ..Default::default()
        },
        ..base.clone()
    };
    for (what, s) in [
        ("ddp ×2", on(Strategy::Ddp, 2, false)),
        ("fsdp ×4, offload", on(Strategy::FsdpFullShard, 4, true)),
        (
            "fsdp shard_grad_op ×2",
            on(Strategy::FsdpShardGradOp, 2, false),
        ),
        ("zero3 ×8", on(Strategy::Zero3, 8, false)),
        ("zero3 ×2, offload", on(Strategy::Zero3, 2, true)),
        ("zero2 ×2", on(Strategy::Zero2, 2, false)),
        ("one GPU", base.clone()),
    ] {
        for format in ["python", "trl", "llama-factory", "axolotl"] {
            let script = export(format, "meta-llama/Meta-Llama-3-8B", &arch, &s).unwrap();
            let launch = export("accelerate", "meta-llama/Meta-Llama-3-8B", &arch, &s).unwrap();
            if format == "llama-factory" || format == "axolotl" {
                assert_eq!(
                    script.contains("# launch on"),
                    s.parallel.world() > 1,
                    "{what} via {format}: the launch comment\n{script}"
                );
            }
            let mut r = framework::read(&script).unwrap();
            framework::apply_launch(&mut r, &launch)
                .unwrap_or_else(|e| panic!("{what}: {e}\n{launch}"));
            let (a, b) = (settings_json(&s), settings_json(&r.settings));
            for k in [
                "strategy",
                "gpus_per_node",
                "nodes",
                "offload",
                "grad_ckpt",
                "autocast",
                "batch",
                "seq",
                "lora_r",
            ] {
                assert_eq!(
                    b[k], a[k],
                    "{what} via {format} + accelerate: {k}\n{launch}"
                );
            }
            assert!(
                !r.assumed.iter().any(|u| u.setting == "gpus_per_node"),
                "{what}: the GPUs are the launch config's, not assumed"
            );
            // The same keys as JSON (ms-swift's `accelerate launch --config_file x.json`).
            let yaml = lorafit::formats::yaml::parse(&launch).unwrap();
            let mut j = framework::read(&script).unwrap();
            framework::apply_launch(&mut j, &yaml.to_string()).unwrap();
            assert_eq!(
                settings_json(&j.settings),
                settings_json(&r.settings),
                "{what}: JSON"
            );
        }
    }
    // Alone, a launch config is refused with what to do; after a config, a training config is
    // not a launch config.
    let launch = export("accelerate", "m", &arch, &on(Strategy::Ddp, 2, false)).unwrap();
    assert!(framework::read(&launch)
        .unwrap_err()
        .contains("give it after the training config"));
    let mut r = framework::read(&export("trl", "m", &arch, &base).unwrap()).unwrap();
    let e = framework::apply_launch(&mut r, "model_name_or_path: m\nstage: sft\n").unwrap_err();
    assert!(e.contains("only a launch config"), "{e}");
}

/// ms-swift's FSDP as its examples write it: the `fsdp2` preset, a JSON file given by path and
/// read after the command (`--from cmd.sh --from fsdp.json`, or pasted after it), and
/// `accelerate launch --config_file C swift/cli/sft.py …` with accelerate's config after it.
#[test]
fn swift_fsdp_presets_files_and_accelerate_launches() {
    let preset = framework::read(
        "NPROC_PER_NODE=2 swift sft --model Qwen/Qwen2.5-7B-Instruct --gradient_checkpointing false --fsdp fsdp2\n",
    )
    .unwrap();
    let p = &preset.settings.parallel;
    assert_eq!((p.strategy, p.gpus_per_node), (Strategy::FsdpFullShard, 2));
    assert!(
        preset.settings.grad_ckpt,
        "the preset's activation_checkpointing"
    );
    // The preset's fsdp_version 2 (also ms-swift's default when a JSON gives none).
    assert_eq!(p.fsdp_version, lorafit::model::FsdpVersion::V2);

    // ms-swift's examples/train/activation_cpu_offload (fsdp2.json, comments included).
    let mut by_path = framework::read(
        "CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift sft --model Qwen/Qwen3-0.6B --fsdp ./fsdp2.json\n",
    )
    .unwrap();
    assert_eq!(by_path.launch_path.as_deref(), Some("./fsdp2.json"));
    assert_eq!(by_path.settings.parallel.strategy, Strategy::FsdpFullShard);
    let file = r#"{"_description": "FSDP2", "fsdp": "shard_grad_op auto_wrap",
        "fsdp_config": {"fsdp_version": 2, "reshard_after_forward": false, "activation_checkpointing": true,
        "activation_cpu_offload": true, "state_dict_type": "SHARDED_STATE_DICT"}}"#;
    framework::apply_launch(&mut by_path, file).unwrap();
    let p = &by_path.settings.parallel;
    assert_eq!(p.strategy, Strategy::FsdpShardGradOp);
    assert_eq!(p.fsdp_version, lorafit::model::FsdpVersion::V2);
    assert!(!p.offload_params && p.offload_activations);
    assert!(
        by_path
            .ignored
            .contains(&"accelerate._description".to_string()),
        "{:?}",
        by_path.ignored
    );

    // ms-swift's examples/train/multi-gpu/fsdp2_lora: accelerate launches swift/cli/sft.py.
    let cmd = "nproc_per_node=2\n\nCUDA_VISIBLE_DEVICES=0,1 \\\naccelerate launch --config_file \"./examples/train/multi-gpu/fsdp2_lora/fsdp2.json\" \\\n    swift/cli/sft.py \\\n    --model Qwen/Qwen2.5-7B-Instruct \\\n    --train_type lora \\\n    --torch_dtype bfloat16 \\\n    --per_device_train_batch_size 1 \\\n    --gradient_checkpointing false \\\n    --max_length 2048\n";
    let mut r = framework::read(cmd).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.source, Source::Swift);
    assert_eq!(
        r.launch_path.as_deref(),
        Some("./examples/train/multi-gpu/fsdp2_lora/fsdp2.json")
    );
    assert!(!r.settings.grad_ckpt);
    let accelerate = r#"{"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "fsdp_config": {
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_cpu_ram_efficient_loading": true,
        "fsdp_offload_params": true, "fsdp_reshard_after_forward": true, "fsdp_state_dict_type": "FULL_STATE_DICT",
        "fsdp_activation_checkpointing": true, "fsdp_version": 2}, "machine_rank": 0, "mixed_precision": "bf16",
        "num_machines": 1, "num_processes": 2, "use_cpu": false}"#;
    framework::apply_launch(&mut r, accelerate).unwrap();
    let s = &r.settings;
    assert_eq!(
        (s.parallel.strategy, s.parallel.gpus_per_node),
        (Strategy::FsdpFullShard, 2)
    );
    assert!(s.parallel.offload_params && s.grad_ckpt);
    assert_eq!(s.parallel.fsdp_version, lorafit::model::FsdpVersion::V2);
    assert_eq!(s.autocast, Some(Dtype::Bf16));
}

/// ms-swift's FSDP QLoRA example as it stands: accelerate launches `swift/cli/sft.py` with its
/// config beside it; `--quant_bits 4` without `--quant_method` quantizes nothing in ms-swift
/// 4.6, so the plan does not either and says so. The `fsdp2` preset file reads as `--fsdp fsdp2`.
#[test]
fn swift_fsdp_examples_are_read_as_they_state() {
    let mut r = read("ms-swift/fsdp_qlora.sh");
    assert_eq!(r.model.as_deref(), Some("Qwen/Qwen2.5-72B-Instruct"));
    assert_eq!(
        r.launch_path.as_deref(),
        Some("./examples/train/multi-gpu/fsdp_qlora/fsdp_offload.json")
    );
    assert_eq!(r.settings.quant, None);
    assert!(r.not_modeled.iter().any(|n| n.key == "quant_bits"));
    assert_eq!(
        (r.settings.grad_accum, r.settings.seq, r.settings.lora_r),
        (8, 2048, 8)
    );
    let launch = std::fs::read_to_string(dir().join("ms-swift/fsdp_offload.json")).unwrap();
    framework::apply_launch(&mut r, &launch).unwrap();
    let p = &r.settings.parallel;
    assert_eq!(
        (p.strategy, p.gpus_per_node, p.nodes),
        (Strategy::FsdpFullShard, 2, 1)
    );
    assert!(p.offload_params && p.offload_optimizer);
    assert!(r.settings.grad_ckpt, "--gradient_checkpointing true");

    let preset = framework::read("NPROC_PER_NODE=2 swift sft --model m --fsdp fsdp2\n").unwrap();
    let mut by_file =
        framework::read("NPROC_PER_NODE=2 swift sft --model m --fsdp x.json\n").unwrap();
    let file = std::fs::read_to_string(dir().join("ms-swift/fsdp2.json")).unwrap();
    framework::apply_launch(&mut by_file, &file).unwrap();
    assert_eq!(
        settings_json(&by_file.settings),
        settings_json(&preset.settings)
    );
}

/// A script written by hand: literals and names assigned once are read, TRL's defaults
/// assumed, the rest named; what cannot be read is an error naming the call and key.
#[test]
fn hand_written_scripts_are_read_or_refused_by_key() {
    let script = r#"
import torch
from datasets import load_dataset
from peft import LoraConfig, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from trl import SFTConfig, SFTTrainer

MODEL = "Qwen/Qwen2.5-7B-Instruct"
RANK = 64
tokenizer = AutoTokenizer.from_pretrained(MODEL)
bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                         bnb_4bit_compute_dtype=torch.bfloat16)
model = AutoModelForCausalLM.from_pretrained(MODEL, quantization_config=bnb,
                                             torch_dtype=torch.bfloat16, device_map="auto")
peft_config = LoraConfig(r=RANK, lora_alpha=RANK * 2, lora_dropout=0.05,
                         target_modules="all-linear", task_type="CAUSAL_LM")
args = SFTConfig(output_dir=f"runs/{RANK}", per_device_train_batch_size=4,
                 gradient_accumulation_steps=4, learning_rate=2e-4, logging_steps=10)
trainer = SFTTrainer(model=model, args=args, train_dataset=load_dataset("x")["train"],
                     peft_config=peft_config, processing_class=tokenizer)
trainer.train()
"#;
    let e = framework::read(script).unwrap_err();
    assert!(e.contains("LoraConfig.lora_alpha = RANK * 2"), "{e}");
    let r = framework::read(&script.replace("RANK * 2", "128")).unwrap();
    assert_eq!(r.source, Source::Python);
    assert_eq!(r.model.as_deref(), Some("Qwen/Qwen2.5-7B-Instruct"));
    let s = &r.settings;
    assert_eq!(
        (s.lora_r, s.lora_alpha, s.batch, s.grad_accum),
        (64, 128.0, 4, 4)
    );
    assert_eq!(s.quant, Some(Quant::Nf4));
    assert_eq!(
        s.quant_storage,
        QuantStorage::Uint8,
        "bitsandbytes' default"
    );
    assert!(!s.prepare_kbit, "imported, never called");
    // bnb_4bit_quant_storage as scripts write it (a torch dtype).
    let stored = script.replace("RANK * 2", "128").replace(
        "bnb_4bit_compute_dtype=torch.bfloat16)",
        "bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.bfloat16)",
    );
    let r2 = framework::read(&stored).unwrap();
    assert_eq!(r2.settings.quant_storage, QuantStorage::Bf16);
    assert!(r2
        .used
        .iter()
        .any(|u| u.key.contains("bnb_4bit_quant_storage")));
    // SFTConfig's defaults (TRL 1.16): checkpointing on, bf16 autocast, 1024 tokens.
    assert!(s.grad_ckpt);
    assert_eq!(s.autocast, Some(Dtype::Bf16));
    assert_eq!(s.seq, 1024);
    for setting in ["grad_ckpt", "autocast", "seq"] {
        assert!(
            r.assumed
                .iter()
                .any(|a| a.setting == setting && a.key.contains("SFTConfig")),
            "{setting}: {:?}",
            r.assumed
        );
    }
    assert!(
        r.ignored.contains(&"SFTConfig.output_dir".to_string()),
        "an f-string has no effect here: {:?}",
        r.ignored
    );
    assert!(r
        .ignored
        .contains(&"from_pretrained.device_map".to_string()));
    // SFTTrainer scores through TRL's fused LM head: planned as such, and listed as assumed.
    assert!(s.sft_fused_head());
    assert!(
        r.assumed
            .iter()
            .any(|a| a.setting == "logits" && a.key.contains("fused LM head")),
        "{:?}",
        r.assumed
    );
    for (text, needle) in [
        ("from trl import RLOOConfig\nargs = RLOOConfig(num_generations=8)\n", "RLOO"),
        ("from trl import CPOConfig\nargs = CPOConfig(loss_type=\"sigmoid\")\n", "CPO is not planned"),
        ("import torch\nargs = TrainingArguments(per_device_train_batch_size=bs)\n", "TrainingArguments.per_device_train_batch_size = bs"),
        ("import torch\nlora = LoraConfig(r=8)\n", "no TrainingArguments"),
        ("import torch\na = TrainingArguments(per_device_train_batch_size=1)\nb = TrainingArguments(per_device_train_batch_size=2)\n", "called twice"),
        ("import torch\nm = AutoModelForCausalLM.from_pretrained(path)\nTrainingArguments()\n", "not a literal name"),
    ] {
        let e = framework::read(text).unwrap_err();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}

/// A value the reader cannot use is an error naming its key; what it does not know is listed.
#[test]
fn refusals_name_the_key_and_unknown_keys_are_listed() {
    for (text, needle) in [
        ("model_name_or_path: m\nlora_rank: abc\n", "lora_rank"),
        ("model_name_or_path: m\nstage: ppo\n", "stage"),
        (
            "model_name_or_path: m\nflash_attn: sometimes\n",
            "flash_attn",
        ),
        ("base_model: m\nadapter: ia3\n", "adapter"),
        ("base_model: m\nrl: ppo\n", "rl"),
        ("swift rlhf --model m --rlhf_type ppo\n", "rlhf_type"),
        ("swift infer --model m\n", "not a training command"),
        ("{\"peft_type\": \"IA3\", \"r\": 8}", "peft_type"),
        (
            "{\"zero_optimization\": {\"stage\": 5}}",
            "zero_optimization.stage",
        ),
        ("nothing: here\n", "not a config this reader knows"),
        ("model_name_or_path: m\n\tcutoff_len: 8\n", "tab"),
    ] {
        let e = framework::read(text).unwrap_err();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
    let r = framework::read(
        "model_name_or_path: m\nfoo_bar: 1\nquantization_bit: 6\nvideo_max_pixels: 100\n",
    )
    .unwrap();
    assert!(r.ignored.contains(&"foo_bar".to_string()));
    let nm: Vec<&str> = r.not_modeled.iter().map(|n| n.key.as_str()).collect();
    assert_eq!(nm, ["quantization_bit", "video_max_pixels"]);
    assert_eq!(r.settings.quant, None);
}

/// `plan --from` plans what the same settings given as flags plan, and its JSON names the
/// settings by the table's names with what it ignored and did not model.
#[test]
fn plan_from_a_config_is_the_plan_of_its_settings() {
    let file = dir().join("llama-factory/llama3_lora_sft.yaml");
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = lorafit::cli::run(&args, &mut out, &mut err);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
        serde_json::from_slice::<serde_json::Value>(&out).unwrap()
    };
    let from = run(&[
        "plan",
        "--from",
        file.to_str().unwrap(),
        "--gpu",
        "rtx4090",
        "--json",
    ]);
    let flags = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--gpu",
        "rtx4090",
        "--json",
        "--rank",
        "8",
        "--alpha",
        "16",
        "--dropout",
        "0",
        "--seq",
        "2048",
        "--batch",
        "1",
        "--grad-accum",
        "8",
        "--autocast",
        "bf16",
        "--gc",
    ]);
    assert_eq!(from["plan"], flags["plan"]);
    assert_eq!(from["verdict"], flags["verdict"]);
    assert_eq!(from["settings"]["lora_r"], 8);
    assert_eq!(from["settings"]["seq"], 2048);
    assert!(from["ignored"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k == "dataset"));
    assert_eq!(from["not_modeled"], serde_json::json!([]));
    assert_eq!(from["config"]["format"], "llama-factory");
}

/// The DeepSpeed JSON and the ms-swift command read back to the settings they were written
/// from (config → plan → export → config).
#[test]
fn deepspeed_and_swift_exports_read_back() {
    use lorafit::model::Parallel;
    let arch = catalog::find_model("qwen2.5-7b").unwrap().arch.clone();
    let zero3 = Settings {
        batch: 4,
        grad_accum: 2,
        autocast: Some(Dtype::Bf16),
        grad_ckpt: true,
        parallel: Parallel {
            strategy: Strategy::Zero3,
            gpus_per_node: 2,
            offload_optimizer: true,
            offload_params: true,
            ..Default::default()
        },
        ..Settings::default()
    };
    let ds = export("deepspeed", "x", &arch, &zero3).unwrap();
    let back = framework::read(&ds).unwrap();
    assert_eq!(back.source, Source::DeepSpeed);
    let (a, b) = (&zero3, &back.settings);
    assert_eq!(
        (
            a.parallel.strategy,
            a.parallel.offload_optimizer,
            a.parallel.offload_params,
            a.batch,
            a.grad_accum,
            a.autocast
        ),
        (
            b.parallel.strategy,
            b.parallel.offload_optimizer,
            b.parallel.offload_params,
            b.batch,
            b.grad_accum,
            b.autocast
        )
    );
    assert!(export("deepspeed", "x", &arch, &Settings::default())
        .unwrap_err()
        .contains("DeepSpeed strategy"));

    let lora = Settings {
        autocast: Some(Dtype::Bf16),
        grad_ckpt: true,
        seq: 4096,
        lora_r: 16,
        ..Settings::default()
    };
    let variants = [
        ("lora", lora.clone()),
        (
            "qlora",
            Settings {
                quant: Some(Quant::Nf4),
                optimizer: Optimizer::PagedAdamw8bit,
                ..lora.clone()
            },
        ),
        (
            "qlora prepared as peft's recipe does",
            Settings {
                quant: Some(Quant::Nf4),
                prepare_kbit: true,
                ..lora.clone()
            },
        ),
        (
            "dora, liger",
            Settings {
                use_dora: true,
                fused_ce: lorafit::model::FusedCe::Liger,
                liger: lorafit::model::Liger::ALL,
                ..lora.clone()
            },
        ),
        (
            "dpo",
            Settings {
                stage: Stage::Dpo,
                beta: Some(0.2),
                ..lora.clone()
            },
        ),
        (
            "full over zero3 with offload",
            Settings {
                finetuning_type: FinetuningType::Full,
                ..zero3.clone()
            },
        ),
        (
            "fsdp ×4 with offload and checkpointing",
            Settings {
                parallel: Parallel {
                    strategy: Strategy::FsdpFullShard,
                    gpus_per_node: 4,
                    offload_optimizer: true,
                    offload_params: true,
                    ..Default::default()
                },
                ..lora.clone()
            },
        ),
        (
            "fsdp shard_grad_op ×2, no checkpointing",
            Settings {
                grad_ckpt: false,
                parallel: Parallel {
                    strategy: Strategy::FsdpShardGradOp,
                    gpus_per_node: 2,
                    ..Default::default()
                },
                ..lora.clone()
            },
        ),
        (
            "fsdp ×2 with offloaded checkpoints",
            Settings {
                parallel: Parallel {
                    strategy: Strategy::FsdpFullShard,
                    gpus_per_node: 2,
                    offload_activations: true,
                    ..Default::default()
                },
                ..lora.clone()
            },
        ),
    ];
    for (what, s) in variants {
        let text = export("ms-swift", "Qwen/Qwen2.5-7B-Instruct", &arch, &s).unwrap();
        let back = framework::read(&text).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
        assert_eq!(back.source, Source::Swift);
        let (a, b) = (settings_json(&s), settings_json(&back.settings));
        for (k, v) in a.as_object().unwrap() {
            if s.base_trained() && k.starts_with("lora_") {
                continue;
            }
            if k == "prepare_kbit" {
                reads_back_unprepared(what, &s, &text, &b[k]);
                continue;
            }
            assert_eq!(&b[k], v, "{what}: {k}\n{text}");
        }
    }
}

#[test]
fn offloading_the_optimizer_keeps_offloaded_checkpoints() {
    // Offloaded checkpoints, then FSDP's (axolotl), Trainer's or a DeepSpeed file's offload of the
    // optimizer and parameters: all three offloaded, whatever the order.
    for text in [
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\ngradient_checkpointing: offload\nfsdp:\n  - full_shard\nfsdp_config:\n  fsdp_offload_params: true\n",
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nfsdp:\n  - full_shard\nfsdp_config:\n  fsdp_offload_params: true\ngradient_checkpointing: offload\n",
        "model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\nfinetuning_type: lora\nuse_unsloth_gc: true\ndeepspeed: examples/deepspeed/ds_z3_offload_config.json\n",
    ] {
        let r = framework::read(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let p = &r.settings.parallel;
        assert!(
            p.offload_activations && p.offload_optimizer && p.offload_params,
            "{text}: {p:?}"
        );
    }
}

/// Liger's switches: LLaMA-Factory's `enable_liger_kernel` is its three decoder kernels and the
/// fused loss; axolotl's LigerPlugin keys each turn on one kernel; for a family whose Liger
/// modules are not planned, the decoder kernels move to "not modelled" once the model is known
/// (OLMoE's; the fused loss stays).
#[test]
fn liger_switches_read_as_the_kernels_they_install() {
    use lorafit::model::Liger;
    let lf = |model: &str| {
        format!("model_name_or_path: {model}\nstage: sft\nfinetuning_type: lora\nenable_liger_kernel: true\n")
    };
    let mut r = framework::read(&lf("meta-llama/Meta-Llama-3-8B")).unwrap();
    assert!(r.catalog_model().unwrap().is_some());
    assert_eq!(
        (r.settings.liger, r.settings.fused_ce),
        (Liger::ALL, lorafit::model::FusedCe::Liger)
    );
    assert!(r.not_modeled.is_empty(), "{:?}", r.not_modeled);

    // Gemma 2's Liger modules (GeGLU, Gemma's norms) are planned too.
    let mut r = framework::read(&lf("google/gemma-2-2b")).unwrap();
    assert!(r.catalog_model().unwrap().is_some());
    assert_eq!(r.settings.liger, Liger::ALL);

    // Phi-3's (LigerPhi3SwiGLUMLP over the fused gate_up projection) too.
    let mut r = framework::read(&lf("microsoft/Phi-3-mini-4k-instruct")).unwrap();
    assert!(r.catalog_model().unwrap().is_some());
    assert_eq!(
        (r.settings.liger, r.settings.fused_ce),
        (Liger::ALL, lorafit::model::FusedCe::Liger)
    );
    assert!(r.not_modeled.is_empty(), "{:?}", r.not_modeled);

    // Mixtral's and Qwen3-MoE's fused experts are Liger's (LigerExperts): planned.
    for model in ["mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen3-30B-A3B"] {
        let mut r = framework::read(&lf(model)).unwrap();
        assert!(r.catalog_model().unwrap().is_some());
        assert_eq!(r.settings.liger, Liger::ALL, "{model}");
        assert!(r.not_modeled.is_empty(), "{model}: {:?}", r.not_modeled);
    }

    // liger-kernel has no function for OLMoE: the switch installs neither kernels nor the fused
    // loss (LLaMA-Factory's apply_liger_kernel returns before calling one).
    let mut r = framework::read(&lf("allenai/OLMoE-1B-7B-0924")).unwrap();
    assert_eq!(r.settings.liger, Liger::ALL);
    assert!(r.catalog_model().unwrap().is_some());
    assert_eq!(
        (r.settings.liger, r.settings.fused_ce),
        (Liger::NONE, lorafit::model::FusedCe::Off)
    );
    assert!(r.not_modeled.iter().any(|n| n.key == "enable_liger_kernel"));
    assert!(!r.used.iter().any(|u| u.setting == "liger_kernel"));

    let ax = "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nplugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_rope: true\nliger_glu_activation: true\nliger_rms_norm: false\n";
    let r = framework::read(ax).unwrap();
    assert_eq!(
        (r.settings.liger, r.settings.fused_ce),
        (
            Liger {
                rms_norm: false,
                ..Liger::ALL
            },
            lorafit::model::FusedCe::Off
        )
    );
}

/// `grad_ckpt: "offload"` (the readers' and JSONL's spelling of axolotl's
/// `gradient_checkpointing: offload`) is checkpointing with the checkpoints offloaded, the same
/// settings as `grad_ckpt: true` with `offload: activations`.
#[test]
fn grad_ckpt_offload_is_checkpointing_with_offloaded_checkpoints() {
    let f = |name: &str| lorafit::formats::fields::by_name(name).unwrap();
    let mut a = Settings::default();
    (f("grad_ckpt").set)(&mut a, "offload").unwrap();
    let mut b = Settings::default();
    (f("grad_ckpt").set)(&mut b, "true").unwrap();
    (f("offload").set)(&mut b, "activations").unwrap();
    assert_eq!(settings_json(&a), settings_json(&b));
    assert!(a.grad_ckpt && a.parallel.offload_activations);
    assert!((f("grad_ckpt").set)(&mut a, "sometimes").is_err());
}

/// What the projects' own example folders write (LLaMA-Factory, axolotl and ms-swift at the
/// commits in SOURCES.md, read by hand): a value lorafit plans another way is planned that way
/// and named; one it cannot plan at all is an error that says what it is.
#[test]
fn example_folder_spellings_are_planned_or_named() {
    let read = |t: &str| framework::read(t).unwrap_or_else(|e| panic!("{t}: {e}"));
    let nm = |r: &Reading, key: &str| r.not_modeled.iter().any(|n| n.key == key);
    // torchao's low-bit AdamW (axolotl's examples): planned as adamw_torch, named.
    let r = read(
        "base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora\noptimizer: adamw_torch_8bit\n",
    );
    assert_eq!(r.settings.optimizer, Optimizer::AdamwTorch);
    assert!(nm(&r, "optimizer"), "{:?}", r.not_modeled);
    assert!(
        framework::read("base_model: m\noptimizer: adamw_nonsense\n")
            .unwrap_err()
            .contains("optimizer")
    );
    // FlashAttention 3 as FlashAttention 2, flex attention / xformers as sdpa; unknown refused.
    for (name, planned) in [
        (
            "flash_attention_3",
            lorafit::model::AttnImpl::FlashAttention2,
        ),
        (
            "kernels-community/vllm-flash-attn3",
            lorafit::model::AttnImpl::FlashAttention2,
        ),
        ("xformers", lorafit::model::AttnImpl::Sdpa),
        ("flex_attention", lorafit::model::AttnImpl::Sdpa),
    ] {
        let r = read(&format!(
            "base_model: m\nadapter: lora\nattn_implementation: {name}\n"
        ));
        assert_eq!(r.settings.attn_impl, planned, "{name}");
        assert!(nm(&r, "attn_implementation"), "{name}");
    }
    assert!(framework::read("base_model: m\nattn_implementation: telepathy\n").is_err());
    // Liger's RMSNorm with trained norms: its other kernels planned, the RMSNorm named.
    let r = read("base_model: m\nliger_rms_norm: true\nliger_glu_activation: true\n");
    assert!(r.settings.base_trained());
    assert!(!r.settings.liger.rms_norm && r.settings.liger.swiglu);
    assert!(r
        .not_modeled
        .iter()
        .any(|n| n.why.contains("Liger's RMSNorm with trained norm weights")));
    // axolotl's newer FSDP: fsdp_config alone, activation offloading with checkpointing.
    let r = read("base_model: m\nadapter: lora\ngradient_checkpointing: true\nactivation_offloading: true\nfsdp_version: 2\nfsdp_config:\n  offload_params: true\n  reshard_after_forward: true\n");
    let p = &r.settings.parallel;
    assert_eq!(p.strategy, Strategy::FsdpFullShard);
    assert!(p.offload_params && p.offload_activations);
    // peft's suffix names and a flow list over several lines (PyYAML joins it).
    let r = read("base_model: m\nadapter: lora\nlora_target_modules: [\n  'self_attn.q_proj',\n  \"self_attn.v_proj\"\n]\n");
    assert_eq!(
        settings_json(&r.settings)["target_modules"],
        serde_json::json!(["q", "v"])
    );
    // LLaMA-Factory's v1 config and Megatron-SWIFT are refused for what they are.
    assert!(
        framework::read("model: Qwen/Qwen3-4B\npeft_config:\n  name: lora\n")
            .unwrap_err()
            .contains("LLaMA-Factory v1")
    );
    assert!(framework::read(
        "NPROC_PER_NODE=4 \\\nmegatron sft \\\n    --model Qwen/Qwen3-30B-A3B-Base\n"
    )
    .unwrap_err()
    .contains("Megatron-SWIFT"));
    // ms-swift: the allocator's environment, expr over several operators, the losses.
    let r = read("PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' \\\nnproc_per_node=4\nnnodes=2\nNPROC_PER_NODE=$nproc_per_node \\\nswift sft --model m --gradient_accumulation_steps $(expr 32 / $nproc_per_node / $nnodes) --loss_type infonce\n");
    assert_eq!(r.settings.grad_accum, 4);
    assert!(r
        .used
        .iter()
        .any(|u| u.key == "PYTORCH_CUDA_ALLOC_CONF" && u.setting == "alloc_conf"));
    assert!(nm(&r, "loss_type"));
    let r = read("swift rlhf --rlhf_type dpo --model m --loss_type sigmoid bco_pair sft\n");
    assert_eq!(r.settings.pref_loss, PrefLoss::Sigmoid);
    assert!(nm(&r, "loss_type"));
}

/// peft's `target_modules` as one regular expression, as axolotl's vision-language and
/// layer-subset examples write it: the decoder Linears it matches become the targets; matching
/// some layers only, or the vision tower, is named; a pattern that matches no decoder Linear or
/// uses what the reader does not take is an error naming the key.
#[test]
fn a_regular_expression_of_target_modules_is_read_as_peft_matches_it() {
    let read = |pattern: &str| {
        framework::read(&format!(
            "base_model: m\nadapter: lora\nlora_target_modules: '{pattern}'\n"
        ))
    };
    let targets = |r: &Reading| settings_json(&r.settings)["target_modules"].clone();
    let r = read(
        r"model.language_model.layers.[\d]+.(mlp|cross_attn|self_attn).(up|down|gate|q|k|v|o)_proj",
    )
    .unwrap();
    assert_eq!(
        targets(&r),
        serde_json::json!(["q", "k", "v", "o", "gate", "up", "down"])
    );
    assert!(r.not_modeled.is_empty(), "{:?}", r.not_modeled);
    let r = read(r"model.layers.[\d]+.self_attn.(q|v)_proj").unwrap();
    assert_eq!(targets(&r), serde_json::json!(["q", "v"]));
    // Layers 3, 7 and 11 only for attention: planned on every layer, and said.
    let r =
        read(r".*\.layers\.(3|7|11|15)\.self_attn\.(q|k|v|o)_proj|.*\.mlp\.(gate|up|down)_proj")
            .unwrap();
    assert_eq!(
        targets(&r),
        serde_json::json!(["q", "k", "v", "o", "gate", "up", "down"])
    );
    assert!(r
        .not_modeled
        .iter()
        .any(|n| n.why.contains("some decoder layers only")));
    let r = read(r"(model\.language_model\.layers\.\d+\.self_attn\.(q|v)_proj|model\.visual\.blocks\.\d+\.attn\.qkv)").unwrap();
    assert_eq!(targets(&r), serde_json::json!(["q", "v"]));
    assert!(r.not_modeled.iter().any(|n| n.why.contains("vision tower")));
    assert!(read(r"model\.visual\.blocks\.\d+\.attn\.qkv")
        .unwrap_err()
        .contains("matches no Linear"));
    assert!(read(r"(?=q)q_proj")
        .unwrap_err()
        .contains("lora_target_modules"));
}

/// `accelerate launch --config_file accelerate.yaml swift/cli/sft.py …` whose accelerate config
/// names its DeepSpeed JSON (`deepspeed_config_file`): `plan --from` reads both files from beside
/// the command, so the JSON's offload counts, and no note is left saying it stood in by its name.
#[test]
fn a_deepspeed_file_named_by_the_accelerate_config_is_read_too() {
    let dir = std::env::temp_dir().join(format!("lorafit-launch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let train = dir.join("train.sh");
    let launch = dir.join("accelerate.yaml");
    std::fs::write(&train, "accelerate launch --config_file accelerate.yaml swift/cli/sft.py --model meta-llama/Meta-Llama-3-8B --tuner_type lora\n").unwrap();
    std::fs::write(&launch, "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds_z3.json\nnum_processes: 4\n").unwrap();
    std::fs::write(
        dir.join("ds_z3.json"),
        r#"{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}"#,
    )
    .unwrap();
    let args: Vec<String> = ["plan", "--from", train.to_str().unwrap(), "--json"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lorafit::cli::run(&args, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["settings"]["strategy"], "zero3");
    assert_eq!(v["settings"]["gpus_per_node"], 4);
    assert_eq!(
        v["settings"]["offload"],
        serde_json::json!(["optimizer"]),
        "read from the JSON, not its name"
    );
    let notes = v["config"]["notes"].to_string();
    assert!(!notes.contains("ds_z3.json"), "{notes}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Under TRL's SFTTrainer, Liger's fused cross-entropy does not run (its fused LM head replaces
/// it: `sft_trainer.py:1126-1139`): a script that asks for it, by `use_liger_kernel` or by
/// Liger's own call, is planned with the fused head, and the key is named as not modelled.
#[test]
fn liger_fused_loss_under_sft_trainer_is_named_not_planned() {
    for (text, key) in [
        (
            "from trl import SFTConfig\nargs = SFTConfig(use_liger_kernel=True, per_device_train_batch_size=2)\n",
            "SFTConfig.use_liger_kernel",
        ),
        (
            "from liger_kernel.transformers import apply_liger_kernel_to_llama\napply_liger_kernel_to_llama()\nfrom trl import SFTConfig\nargs = SFTConfig(per_device_train_batch_size=2)\n",
            "apply_liger_kernel_to_",
        ),
    ] {
        let r = framework::read(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(r.settings.sft_fused_head(), "{text}");
        assert!(!r.settings.fused_ce.any(), "{text}");
        assert!(
            !r.used.iter().any(|u| u.setting == "fused_ce"),
            "{text}: {:?}",
            r.used
        );
        assert!(
            r.not_modeled
                .iter()
                .any(|n| n.key.contains(key) && n.why.contains("fused LM head replaces it")),
            "{text}: {:?}",
            r.not_modeled
        );
        // Liger's layer kernels still run under SFTTrainer.
        assert!(r.settings.liger.any(), "{text}");
    }
}

/// A TRL GRPO script: GRPOConfig's keys and TRL 1.16's defaults (β 0, checkpointing, bf16, a
/// 512-token completion), vLLM's mode and share; the planned step is GRPO's.
#[test]
fn a_grpo_script_is_read_with_trls_defaults_and_vllm_named() {
    let script = r#"
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", torch_dtype=torch.bfloat16)
peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
args = GRPOConfig(output_dir="out", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                  num_generations=8, num_iterations=2, loss_type="dr_grpo",
                  use_vllm=True, vllm_gpu_memory_utilization=0.3)
trainer = GRPOTrainer(model=model, reward_funcs=[len], args=args, train_dataset=ds, peft_config=peft_config)
"#;
    let r = framework::read(script).unwrap();
    let s = &r.settings;
    assert!(s.grpo());
    assert_eq!(
        (s.batch, s.grad_accum, s.num_generations, s.num_iterations),
        (4, 2, 8, 2)
    );
    assert_eq!(s.grpo_loss, lorafit::model::GrpoLoss::DrGrpo);
    assert_eq!(s.beta_run(), 0.0, "TRL 1.x's β");
    assert!(s.grad_ckpt && s.autocast == Some(Dtype::Bf16));
    assert_eq!((s.completion_tokens(), s.seq), (512, 1024));
    assert!(s.grpo_old_logps(), "two iterations score the old policy");
    // vLLM colocated (TRL's default mode) with its share of the card.
    assert_eq!(s.generation, lorafit::model::Generation::VllmColocate);
    assert_eq!(s.vllm_gpu_memory_utilization, 0.3);
    let server =
        framework::read(&script.replace("use_vllm=True,", "use_vllm=True, vllm_mode=\"server\","))
            .unwrap();
    assert_eq!(
        server.settings.generation,
        lorafit::model::Generation::VllmServer
    );
    let off =
        framework::read(&script.replace("use_vllm=True,", "use_vllm=False, vllm_mode=\"server\","))
            .unwrap();
    assert_eq!(off.settings.generation, lorafit::model::Generation::Hf);
    assert!(
        off.ignored.contains(&"GRPOConfig.vllm_mode".to_string()),
        "{:?}",
        off.ignored
    );
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("qwen2.5-7b"))
        .unwrap()
        .value;
    let p = lorafit::model::plan(&arch, s).expect("plans");
    assert!(p.phases.iter().any(|ph| ph.phase.name() == "score"));
}

/// GRPOConfig's generation batch is read in either of TRL's two forms, and both together are
/// refused as TRL refuses them.
#[test]
fn a_grpo_scripts_generation_batch_is_read() {
    let script = r#"
from trl import GRPOConfig
args = GRPOConfig(output_dir="out", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                  num_generations=8, generation_batch_size=32)
"#;
    let r = framework::read(script).unwrap();
    let s = &r.settings;
    assert_eq!(s.generation_batch_size, Some(32));
    assert!(
        !r.not_modeled
            .iter()
            .any(|n| n.key.contains("generation_batch_size")),
        "{:?}",
        r.not_modeled
    );
    // TRL: steps_per_generation = 32 / (4 × 1 process) = 8.
    assert_eq!((s.steps_per_generation_run(), s.generation_rows()), (8, 32));
    let spg =
        framework::read(&script.replace("generation_batch_size=32", "steps_per_generation=4"))
            .unwrap();
    assert_eq!(spg.settings.steps_per_generation, Some(4));
    assert_eq!(spg.settings.generation_rows(), 16);
    let both = framework::read(&script.replace(
        "generation_batch_size=32",
        "generation_batch_size=32, steps_per_generation=4",
    ));
    assert!(both.is_err(), "TRL refuses both");
}

/// GRPO from axolotl (`rl: grpo` with TRL's arguments under `trl:`) and from ms-swift
/// (`swift rlhf --rlhf_type grpo` with TRL's names), as from a TRL script: what each key sets,
/// and the keys that change no memory listed as ignored.
#[test]
fn grpo_is_read_from_axolotl_and_ms_swift() {
    let axolotl = "base_model: Qwen/Qwen2.5-7B-Instruct
adapter: lora
lora_r: 16
lora_alpha: 32
lora_target_linear: true
micro_batch_size: 4
gradient_accumulation_steps: 2
sequence_len: 1024
bf16: true
gradient_checkpointing: true
rl: grpo
trl:
  beta: 0.04
  num_generations: 8
  max_completion_length: 512
  num_iterations: 2
  loss_type: dr_grpo
  use_vllm: true
  vllm_mode: server
  vllm_server_host: 0.0.0.0
  reward_funcs: [rewards.accuracy]
  temperature: 0.9
";
    let r = framework::read(axolotl).unwrap();
    let s = &r.settings;
    assert!(s.grpo());
    assert_eq!(
        (s.batch, s.grad_accum, s.num_generations, s.num_iterations),
        (4, 2, 8, 2)
    );
    assert_eq!((s.beta_run(), s.completion_tokens()), (0.04, 512));
    assert_eq!(s.grpo_loss, lorafit::model::GrpoLoss::DrGrpo);
    assert_eq!(s.generation, lorafit::model::Generation::VllmServer);
    for k in [
        "trl.reward_funcs",
        "trl.temperature",
        "trl.vllm_server_host",
    ] {
        assert!(r.ignored.contains(&k.to_string()), "{k}: {:?}", r.ignored);
    }
    let swift = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct --tuner_type lora \\
  --torch_dtype bfloat16 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 \\
  --max_length 1024 --max_completion_length 512 --num_generations 8 --beta 0.04 \\
  --loss_type bnpo --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.5 \\
  --sleep_level 1 --steps_per_generation 4 --reward_funcs accuracy format
";
    let r = framework::read(swift).unwrap();
    let s = &r.settings;
    assert!(s.grpo());
    assert_eq!(s.grpo_loss, lorafit::model::GrpoLoss::Bnpo);
    assert_eq!(s.generation, lorafit::model::Generation::VllmColocate);
    assert_eq!(s.vllm_gpu_memory_utilization, 0.5);
    assert!(s.vllm_enable_sleep_mode, "sleep_level 1");
    assert_eq!((s.steps_per_generation, s.generation_rows()), (Some(4), 16));
    assert!(
        r.ignored.contains(&"reward_funcs".to_string()),
        "{:?}",
        r.ignored
    );
}

/// A GRPO plan's exports (TRL's GRPOConfig, axolotl's `rl: grpo` with its `trl:` section,
/// ms-swift's `swift rlhf --rlhf_type grpo`) read back to the GRPO settings they were written
/// from.
#[test]
fn grpo_exports_read_back() {
    use lorafit::model::{Generation, GrpoLoss};
    let arch = catalog::find_model("qwen2.5-7b").unwrap().arch.clone();
    let s = Settings {
        stage: Stage::Grpo,
        batch: 4,
        grad_accum: 2,
        seq: 1024,
        max_completion_length: 768,
        num_generations: 8,
        num_iterations: 2,
        beta: Some(0.04),
        grpo_loss: GrpoLoss::Bnpo,
        steps_per_generation: Some(4),
        generation: Generation::VllmColocate,
        vllm_gpu_memory_utilization: 0.5,
        vllm_enable_sleep_mode: true,
        grad_ckpt: true,
        autocast: Some(Dtype::Bf16),
        ..Settings::default()
    };
    for format in ["trl", "axolotl", "ms-swift"] {
        let text = export(format, "Qwen/Qwen2.5-7B", &arch, &s).unwrap();
        let b = framework::read(&text)
            .unwrap_or_else(|e| panic!("{format}: {e}\n{text}"))
            .settings;
        assert!(b.grpo(), "{format}");
        assert_eq!(
            (
                b.num_generations,
                b.completion_tokens(),
                b.num_iterations,
                b.beta_run(),
                b.grpo_loss,
                b.steps_per_generation,
                b.generation,
                b.vllm_gpu_memory_utilization,
                b.vllm_enable_sleep_mode,
            ),
            (
                8,
                768,
                2,
                0.04,
                GrpoLoss::Bnpo,
                Some(4),
                Generation::VllmColocate,
                0.5,
                true
            ),
            "{format}\n{text}"
        );
    }
}

/// Packing as each door spells it: TRL's `packing` is padding-free with its default `bfd`
/// strategy and not with `wrapped`, `padding_free` is padding-free whatever the strategy, and a
/// TRL script plans the packed row through SFTTrainer's fused head; ms-swift's `--packing` and
/// `--padding_free` flatten the batch; an unknown strategy is an error naming the key.
#[test]
fn packing_is_read_as_each_trainer_packs() {
    let trl = |extra: &str| {
        format!("{{\"model_name_or_path\": \"meta-llama/Meta-Llama-3-8B\", \"per_device_train_batch_size\": 4, \"max_length\": 1024{extra}}}")
    };
    assert!(
        framework::read(&trl(", \"packing\": true"))
            .unwrap()
            .settings
            .packing
    );
    assert!(
        !framework::read(&trl(
            ", \"packing\": true, \"packing_strategy\": \"wrapped\""
        ))
        .unwrap()
        .settings
        .packing
    );
    assert!(
        framework::read(&trl(
            ", \"padding_free\": true, \"packing_strategy\": \"wrapped\""
        ))
        .unwrap()
        .settings
        .packing
    );
    assert!(!framework::read(&trl("")).unwrap().settings.packing);
    let err = framework::read(&trl(", \"packing\": true, \"packing_strategy\": \"ffd2\""))
        .map(|r| r.settings.packing)
        .expect_err("an unknown strategy is refused");
    assert!(err.contains("packing_strategy"), "{err}");

    let script = r#"
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("meta-llama/Meta-Llama-3-8B", torch_dtype=torch.bfloat16)
args = SFTConfig(output_dir="out", per_device_train_batch_size=4, max_length=1024, packing=True)
trainer = SFTTrainer(model=model, args=args, peft_config=LoraConfig(r=16, target_modules="all-linear"))
"#;
    let mut r = framework::read(script).unwrap();
    assert!(r.settings.packing && r.settings.sft_fused_head());
    let arch = r
        .catalog_model()
        .unwrap()
        .expect("catalog model")
        .arch
        .clone();
    let p = lorafit::model::plan(&arch, &r.settings).expect("plans the packed row");
    assert!(p.notes.iter().any(|n| n.contains("one row of 4096 tokens")));

    // LLaMA-Factory: neat_packing (which sets packing) is its rows with the 4-D mask; packing
    // alone is rows with one attention over each, planned as rows and said so.
    let lf = "model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\nfinetuning_type: lora\ncutoff_len: 1024\npacking: true\n";
    let r = framework::read(&format!("{lf}neat_packing: true\n")).unwrap();
    assert!(r.settings.neat_packing && !r.settings.packing);
    assert!(r.not_modeled.is_empty(), "{:?}", r.not_modeled);
    let r = framework::read(lf).unwrap();
    assert!(!r.settings.neat_packing && !r.settings.packing);
    assert!(r
        .not_modeled
        .iter()
        .any(|n| n.key == "packing" && n.why.contains("one attention over each whole row")));

    let packed = Settings {
        packing: true,
        ..Settings::default()
    };
    let text = export("ms-swift", "meta-llama/Meta-Llama-3-8B", &arch, &packed).unwrap();
    assert!(framework::read(&text).unwrap().settings.packing, "{text}");
    for flag in ["--packing true", "--padding_free true"] {
        let r = framework::read(&format!(
            "swift sft --model meta-llama/Meta-Llama-3-8B --train_type lora {flag}\n"
        ))
        .unwrap();
        assert!(r.settings.packing, "{flag}");
        assert!(r.not_modeled.is_empty(), "{:?}", r.not_modeled);
    }
}

/// peft's `target_modules="all-linear"` on a family whose MLP names peft maps onto the fused
/// experts also adapts the router's weight (measured: `Qwen3NextForCausalLM` under peft 0.21,
/// `tests/data/harness/MODELS26.md`), which no plan does: the Python exports list the Linear
/// names there, as the frameworks expand theirs, and read back to the same targets; a dense
/// model keeps peft's spelling.
#[test]
fn python_exports_name_the_linears_where_all_linear_would_reach_the_router() {
    use lorafit::formats::catalog::find_model;
    for (name, all_linear) in [
        ("llama2-7b", true),
        ("qwen3-30b-a3b", false),
        ("qwen3-next-80b-a3b", false),
    ] {
        let arch = find_model(name).unwrap().arch.clone();
        let s = Settings {
            lora_dropout: 0.0,
            ..Settings::default()
        };
        for format in ["python", "trl"] {
            let text = export(format, "m", &arch, &s).unwrap();
            assert_eq!(
                text.contains("target_modules=\"all-linear\""),
                all_linear,
                "{name} {format}:\n{text}"
            );
            if format == "trl" {
                continue; // (TRL's trainer is another step: its own plan)
            }
            // (the names list only the model's modules: the same plan)
            let r = framework::read(&text).unwrap();
            let peak = |s: &Settings| lorafit::model::plan(&arch, s).unwrap().peak_allocated_bytes;
            assert_eq!(peak(&r.settings), peak(&s), "{name} {format}");
        }
    }
    // A script of peft's own all-linear on such a model reads with a note of the routers it
    // also adapts; a framework's list of names, or a dense model, without.
    let script = |model: &str, targets: &str| {
        format!("from peft import LoraConfig\nfrom transformers import AutoModelForCausalLM, TrainingArguments\nmodel = AutoModelForCausalLM.from_pretrained(\"{model}\")\nlora = LoraConfig(r=16, lora_dropout=0.0, target_modules={targets})\nargs = TrainingArguments(output_dir=\"out\", per_device_train_batch_size=1, bf16=True)\n")
    };
    for (model, targets, noted) in [
        ("Qwen/Qwen3-30B-A3B", "\"all-linear\"", true),
        ("Qwen/Qwen3-30B-A3B", "[\"q_proj\", \"v_proj\"]", false),
        ("meta-llama/Llama-2-7b-hf", "\"all-linear\"", false),
    ] {
        let mut r = framework::read(&script(model, targets)).unwrap();
        assert!(r.catalog_model().unwrap().is_some(), "{model}");
        assert_eq!(
            r.notes.iter().any(|n| n.contains("router weight")),
            noted,
            "{model} {targets}: {:?}",
            r.notes
        );
    }
}
