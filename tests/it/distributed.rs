//! Multi-GPU plans: what each rank holds under each strategy, from first principles, and the
//! multi-GPU rows of shared/reference/published.md reproduced within ±15 %.

use lorafit::formats::catalog;
use lorafit::model::{
    plan, plan_simulated, AttnImpl, Dtype, Parallel, Plan, Quant, Settings, Strategy, Target,
};

const GIB: f64 = (1u64 << 30) as f64;

fn bytes(p: &Plan, key: &str) -> u128 {
    p.breakdown
        .iter()
        .filter(|c| c.key == key)
        .map(|c| c.bytes)
        .sum()
}

fn on(gpus: u64, strategy: Strategy) -> Parallel {
    Parallel {
        gpus_per_node: gpus,
        strategy,
        ..Parallel::default()
    }
}

#[test]
fn what_each_rank_holds() {
    let a = catalog::find_model("llama2-13b").unwrap().arch.clone();
    let base = Settings {
        grad_ckpt: true,
        ..Settings::default()
    };
    let single = plan(&a, &base).unwrap();
    let with = |p: Parallel| {
        plan(
            &a,
            &Settings {
                parallel: p,
                ..base.clone()
            },
        )
        .unwrap()
    };
    let frozen = bytes(&single, "frozen_weights");
    let opt = bytes(&single, "optimizer_states");

    // DDP: a full replica plus buckets holding every LoRA gradient once; nothing sharded.
    let ddp = with(on(8, Strategy::Ddp));
    assert_eq!(bytes(&ddp, "frozen_weights"), frozen);
    assert_eq!(bytes(&ddp, "optimizer_states"), opt);
    assert!(bytes(&ddp, "comm_buffers") > 0);
    assert_eq!(ddp.effective_batch, 8);

    // ZeRO-1: only optimizer states sharded.
    // Each tensor's shard is rounded up to a whole byte: within a byte per tensor (a millionth).
    let z1 = with(on(8, Strategy::Zero1));
    assert_eq!(bytes(&z1, "frozen_weights"), frozen);
    assert!(bytes(&z1, "optimizer_states").abs_diff(opt.div_ceil(8)) <= opt / 1_000_000);

    // FSDP full shard: frozen weights sharded too (LoRA-aware: they carry no grads or states),
    // plus two gathered layers and the root unit.
    let fsdp = with(on(8, Strategy::FsdpFullShard));
    assert!(bytes(&fsdp, "frozen_weights").abs_diff(frozen.div_ceil(8)) <= frozen / 1_000_000);
    let layer = (a.linear_weight_params_per_layer() + a.small_params_per_layer()) * 2;
    assert!(bytes(&fsdp, "comm_buffers") >= 2 * layer);
    assert!(fsdp.peak_allocated_bytes < single.peak_allocated_bytes);

    // Hybrid shard over 2 nodes × 4 GPUs shards inside the node only.
    let hybrid = with(Parallel {
        gpus_per_node: 4,
        nodes: 2,
        strategy: Strategy::FsdpHybridShard,
        ..Parallel::default()
    });
    assert!(bytes(&hybrid, "frozen_weights").abs_diff(frozen.div_ceil(4)) <= frozen / 1_000_000);
    assert_eq!(hybrid.effective_batch, 8);

    // ZeRO-3 with optimizer + parameter offload: the GPU keeps gathered units and activations;
    // the CPU holds this rank's shards.
    let off = with(Parallel {
        offload_optimizer: true,
        offload_params: true,
        ..on(8, Strategy::Zero3)
    });
    assert_eq!(bytes(&off, "frozen_weights"), 0);
    assert_eq!(bytes(&off, "optimizer_states"), 0);
    assert!(off.cpu_bytes_per_rank >= frozen.div_ceil(8));
    assert_eq!(off.cpu_bytes_per_node, off.cpu_bytes_per_rank * 8);

    // Activation offloading keeps two checkpoints on the GPU, the rest in CPU RAM.
    let act = with(Parallel {
        offload_activations: true,
        ..on(8, Strategy::FsdpFullShard)
    });
    assert!(bytes(&act, "act_checkpoints") < bytes(&fsdp, "act_checkpoints"));
    assert!(act.cpu_bytes_per_rank > 0);

    // Impossible layouts are typed errors.
    for bad in [
        Parallel {
            gpus_per_node: 4,
            ..Parallel::default()
        },
        Parallel {
            offload_params: true,
            ..on(2, Strategy::Zero2)
        },
        Parallel {
            offload_activations: true,
            ..on(2, Strategy::Zero2)
        },
        Parallel {
            gpus_per_node: 0,
            ..on(2, Strategy::Ddp)
        },
    ] {
        let s = Settings {
            parallel: bad,
            grad_ckpt: false,
            ..Settings::default()
        };
        assert!(plan(&a, &s).is_err(), "{:?}", s.parallel);
    }
}

fn within(label: &str, got: f64, want: f64, tol: f64) {
    let err = (got - want) / want;
    println!(
        "{label:<58} predicted {got:6.2}  published {want:6.2}  {:+.1} %",
        err * 100.0
    );
    assert!(
        err.abs() <= tol,
        "{label}: {got:.2} vs {want:.2} ({:+.1} %)",
        err * 100.0
    );
}

/// Rows 9, 12 and 13 of shared/reference/published.md. Assumptions, where the sources are silent:
/// bf16 autocast (Trainer/accelerate bf16=True); the peft examples load the unquantized model in
/// fp32 and let FSDP/DeepSpeed compute in bf16; "8 × 2048 packed" = micro-batch 8 of 2048 tokens;
/// fsdp_qlora's LoRA dropout 0.1; published GB read as GiB; the 107 GB CPU RAM of row 13 includes
/// loading the full model on the host before sharding, which a step does not need, so only the
/// GPU figure is compared. The figure compared is the settled plan's (the CLI's, and the page's
/// once it settles): this rank's step sequence replayed through the caching allocator.
#[test]
fn published_multi_gpu_rows_within_15_percent() {
    let l7 = catalog::find_model("llama2-7b").unwrap().arch.clone();
    let l70 = catalog::find_model("llama2-70b").unwrap().arch.clone();
    let gib = |p: &Plan, reserved: bool| {
        if reserved {
            p.peak_reserved_bytes as f64 / GIB
        } else {
            p.nvidia_smi_bytes as f64 / GIB
        }
    };
    // Row 9 (fsdp_qlora): 2 GPUs, r64 on q,k,v,gate,up,down, batch 1, GC, sdpa; max reserved.
    // Its train.py loads the model in bf16 and quantizes it itself: peft's
    // prepare_model_for_kbit_training never upcasts the other parameters to fp32.
    let row9 = |quant: Option<Quant>, seq: u64| Settings {
        quant,
        prepare_kbit: false,
        autocast: Some(Dtype::Bf16),
        seq,
        lora_r: 64,
        lora_alpha: 16.0,
        lora_dropout: 0.1,
        targets: vec![
            Target::Q,
            Target::K,
            Target::V,
            Target::Gate,
            Target::Up,
            Target::Down,
        ],
        grad_ckpt: true,
        parallel: on(2, Strategy::FsdpFullShard),
        ..Settings::default()
    };
    within(
        "row 9: 7B QLoRA FSDP ×2, 512 (reserved)",
        gib(
            &plan_simulated(&l7, &row9(Some(Quant::Nf4), 512)).unwrap(),
            true,
        ),
        4.98,
        0.15,
    );
    within(
        "row 9: 7B QLoRA FSDP ×2, 2048 (reserved)",
        gib(
            &plan_simulated(&l7, &row9(Some(Quant::Nf4), 2048)).unwrap(),
            true,
        ),
        5.21,
        0.15,
    );
    within(
        "row 9: 7B LoRA FSDP ×2, 512 (reserved)",
        gib(&plan_simulated(&l7, &row9(None, 512)).unwrap(), true),
        10.24,
        0.15,
    );
    within(
        "row 9: 7B LoRA FSDP ×2, 2048 (reserved)",
        gib(&plan_simulated(&l7, &row9(None, 2048)).unwrap(), true),
        10.22,
        0.15,
    );
    // Row 12 (peft docs): 70B, r8 all-linear, 8 × 2048, GC, flash-attn 2, 8×H100; nvidia-smi.
    let row12 = |strategy| Settings {
        dtype: Dtype::Fp32,
        autocast: Some(Dtype::Bf16),
        batch: 8,
        seq: 2048,
        lora_r: 8,
        lora_alpha: 16.0,
        grad_ckpt: true,
        attn_impl: AttnImpl::FlashAttention2,
        parallel: on(8, strategy),
        ..Settings::default()
    };
    within(
        "row 12: 70B LoRA FSDP ×8 (smi, 72–80)",
        gib(
            &plan_simulated(&l70, &row12(Strategy::FsdpFullShard)).unwrap(),
            false,
        ),
        76.0,
        0.15,
    );
    within(
        "row 12: 70B LoRA ZeRO-3 ×8 (smi)",
        gib(
            &plan_simulated(&l70, &row12(Strategy::Zero3)).unwrap(),
            false,
        ),
        64.0,
        0.15,
    );
    // Row 13: 70B QLoRA r8 all-linear, 2 × 2048, GC, flash-attn 2, 2 GPUs; nvidia-smi. Planned
    // with prepare_model_for_kbit_training, as these rows always were: the docs do not give the
    // TRL version, and TRL up to 0.21 prepares a 4-bit model unless it finds it sharded (on the
    // CPU or the meta device). Without it the ZeRO-3 row plans 29.45 GiB (−19.5 %).
    let row13 = |p: Parallel| Settings {
        quant: Some(Quant::Nf4),
        prepare_kbit: true,
        autocast: Some(Dtype::Bf16),
        batch: 2,
        seq: 2048,
        lora_r: 8,
        lora_alpha: 16.0,
        grad_ckpt: true,
        attn_impl: AttnImpl::FlashAttention2,
        parallel: p,
        ..Settings::default()
    };
    within(
        "row 13: 70B QLoRA ZeRO-3 ×2 (smi)",
        gib(
            &plan_simulated(&l70, &row13(on(2, Strategy::Zero3))).unwrap(),
            false,
        ),
        36.6,
        0.15,
    );
    let off = plan_simulated(
        &l70,
        &row13(Parallel {
            offload_params: true,
            ..on(2, Strategy::FsdpFullShard)
        }),
    )
    .unwrap();
    within(
        "row 13: 70B QLoRA FSDP ×2 + CPU offload (smi)",
        gib(&off, false),
        19.6,
        0.15,
    );
}

#[test]
fn accelerate_configs_for_the_planned_layout() {
    let s = Settings {
        autocast: Some(Dtype::Bf16),
        grad_ckpt: true,
        parallel: Parallel {
            gpus_per_node: 4,
            nodes: 2,
            strategy: Strategy::FsdpHybridShard,
            offload_params: true,
            ..Parallel::default()
        },
        ..Settings::default()
    };
    let y: serde_yaml::Value = serde_yaml::from_str(
        &lorafit::formats::export::export("accelerate", "x", &llama7b(), &s).unwrap(),
    )
    .unwrap();
    assert_eq!(y["distributed_type"], "FSDP");
    assert_eq!(y["fsdp_config"]["fsdp_sharding_strategy"], "HYBRID_SHARD");
    assert_eq!(y["fsdp_config"]["fsdp_offload_params"], true);
    assert_eq!(y["num_processes"], 8);
    assert_eq!(y["num_machines"], 2);
    let z = Settings {
        grad_accum: 4,
        parallel: Parallel {
            gpus_per_node: 8,
            strategy: Strategy::Zero3,
            offload_optimizer: true,
            ..Parallel::default()
        },
        ..Settings::default()
    };
    let y: serde_yaml::Value = serde_yaml::from_str(
        &lorafit::formats::export::export("accelerate", "x", &llama7b(), &z).unwrap(),
    )
    .unwrap();
    assert_eq!(y["distributed_type"], "DEEPSPEED");
    assert_eq!(y["deepspeed_config"]["zero_stage"], 3);
    assert_eq!(y["deepspeed_config"]["offload_optimizer_device"], "cpu");
    assert_eq!(y["deepspeed_config"]["offload_param_device"], "none");
    assert_eq!(y["deepspeed_config"]["gradient_accumulation_steps"], 4);
    let d: serde_yaml::Value = serde_yaml::from_str(
        &lorafit::formats::export::export(
            "accelerate",
            "x",
            &llama7b(),
            &Settings {
                parallel: Parallel {
                    gpus_per_node: 2,
                    strategy: Strategy::Ddp,
                    ..Parallel::default()
                },
                ..Settings::default()
            },
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(d["distributed_type"], "MULTI_GPU");
    assert_eq!(d["num_processes"], 2);
}

#[test]
fn cli_plans_per_gpu() {
    let args: Vec<String> = [
        "plan",
        "--model",
        "llama2-70b",
        "--gpus",
        "8",
        "--strategy",
        "zero3",
        "--offload",
        "optimizer,params",
        "--gc",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        lorafit::cli::run(&args, &mut out, &mut err),
        0,
        "{}",
        String::from_utf8_lossy(&err)
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["plan"]["world_size"], 8);
    assert!(
        v["plan"]["cpu_bytes_per_node"].as_u64().unwrap() > 100 << 30,
        "70B shards on the CPU of one node"
    );
    let bad: Vec<String> = ["plan", "--model", "llama2-7b", "--gpus", "4"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_ne!(lorafit::cli::run(&bad, &mut out, &mut err), 0);
    assert!(String::from_utf8_lossy(&err).contains("need a strategy"));
}

fn llama7b() -> lorafit::model::Architecture {
    lorafit::formats::catalog::find_model("llama2-7b")
        .unwrap()
        .arch
        .clone()
}
