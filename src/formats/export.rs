//! Copy-paste configs that reproduce a planned run: peft + transformers' Trainer and TRL's
//! trainers (Python scripts), accelerate, LLaMA-Factory and axolotl (YAML), a DeepSpeed JSON and
//! an ms-swift command line. Every value comes from the plan's settings; the config readers
//! (`formats::framework`) read each of them back to the same settings (the accelerate config
//! and the DeepSpeed JSON over the training config they launch).

use crate::model::{
    Architecture, AttnImpl, Dtype, ExpertsImpl, ExpertsLayout, FusedCe, Optimizer, Quant,
    SavedModule, Settings, Target,
};

/// Export formats.
pub const FORMATS: [&str; 7] = [
    "python",
    "trl",
    "accelerate",
    "llama-factory",
    "axolotl",
    "deepspeed",
    "ms-swift",
];

/// peft's `target_modules`: the names of the model's Linear modules the targets select (a dense
/// decoder's `q_proj` … `down_proj`, Gated DeltaNet's `in_proj_qkv`, DeepSeek's latent
/// projections, the dense / shared MLPs of an MoE model), so targets the model does not have
/// are not named.
fn module_names(arch: &Architecture, s: &Settings) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for (kind, _) in arch.layer_groups() {
        for l in arch.block_linears(kind) {
            if l.selected_by.iter().any(|t| s.targets.contains(t))
                && !out.iter().any(|x| x == l.name)
            {
                out.push(l.name.to_string());
            }
        }
    }
    // The MLP names peft maps onto the fused experts reach them whether or not a Linear is so
    // named (`model::peft_targets`).
    if crate::model::peft_targets::mlp_names_reach_experts(arch, s) {
        for t in s.targets.iter().filter(|t| t.is_mlp()) {
            if !out.iter().any(|x| x == t.module_name()) {
                out.push(t.module_name().to_string());
            }
        }
    }
    out
}

/// peft's `target_parameters` (LoRA on the fused experts) of an MoE model.
fn expert_params(arch: &Architecture, s: &Settings) -> Vec<String> {
    if !arch.is_moe() {
        return vec![];
    }
    s.target_parameters
        .iter()
        .map(|p| format!("mlp.experts.{}", p.name()))
        .collect()
}

/// The per-expert layout, said where the run is set up: transformers 4's, or (Llama 4) the
/// experts of a checkpoint saved in 4 bits.
fn per_expert_note(arch: &Architecture) -> String {
    // (Llama 4 is the full planner's, `extended::needed`)
    match arch
        .moe_layout()
        .and_then(|m| m.prequantized_experts)
        .filter(|_| crate::model::extended::EXTENDED)
    {
        Some(module) => format!("# planned for a checkpoint saved in 4 bits (bitsandbytes): loading it rebuilds the experts as {module}, one quantized Linear MLP per expert (a 16-bit checkpoint loaded with load_in_4bit keeps its experts 16-bit)\n"),
        None => "# planned for transformers 4 (pip install \"transformers<5\"): an nn.Linear per expert projection, quantized by 4-bit loading\n".to_string(),
    }
}

/// What an MoE run needs that the YAML formats have no key for, as comment lines.
fn moe_comments(arch: &Architecture, s: &Settings) -> String {
    let mut out = String::new();
    if arch.moe_layout().is_some_and(|m| m.mxfp4_checkpoint) {
        out.push_str("# gpt-oss: load with quantization_config=Mxfp4Config(dequantize=True) (MXFP4 experts cannot be trained; dequantized to bf16)\n");
    }
    let tp = expert_params(arch, s);
    if !tp.is_empty() {
        out.push_str(&format!(
            "# LoRA on the experts: peft LoraConfig(target_parameters={}, lora_dropout=0)\n",
            py_list(&tp)
        ));
    }
    if arch.is_moe() && s.output_router_logits {
        out.push_str("# output_router_logits=True (load-balancing loss)\n");
    }
    if per_expert(arch, s) {
        out.push_str(&per_expert_note(arch));
    }
    if let Some(name) = experts_implementation(arch, s) {
        out.push_str(&format!("# experts_implementation={name:?}\n"));
    }
    out
}

/// Whether the run is planned with transformers 4's per-expert layout.
fn per_expert(arch: &Architecture, s: &Settings) -> bool {
    arch.is_moe() && s.experts_layout == ExpertsLayout::PerExpert
}

/// The `experts_implementation` to pass, when not transformers 5's default (transformers 4 has
/// no such argument).
fn experts_implementation(arch: &Architecture, s: &Settings) -> Option<&'static str> {
    (arch.is_moe()
        && s.experts_layout == ExpertsLayout::Fused
        && s.experts_impl != ExpertsImpl::GroupedMm)
        .then(|| s.experts_impl.name())
}

fn torch_dtype(d: Dtype) -> &'static str {
    match d {
        Dtype::Fp32 => "torch.float32",
        Dtype::Bf16 => "torch.bfloat16",
        Dtype::Fp16 => "torch.float16",
    }
}

fn attn_name(a: AttnImpl) -> &'static str {
    a.name()
}

fn mts(s: &Settings) -> Vec<&'static str> {
    s.modules_to_save
        .iter()
        .map(|m| match m {
            SavedModule::LmHead => "lm_head",
            SavedModule::EmbedTokens => "embed_tokens",
        })
        .collect()
}

fn py_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|i| format!("{i:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Renders one format for `arch`; `model_id` is the Hugging Face repository (or a path).
pub fn export(
    format: &str,
    model_id: &str,
    arch: &Architecture,
    s: &Settings,
) -> Result<String, String> {
    match format {
        // A plan with TRL's fused LM head is TRL's SFTTrainer's job; GRPO is TRL's GRPOTrainer.
        "python" => Ok(python(model_id, arch, s, s.sft_fused_head() || s.grpo())),
        "trl" => Ok(python(model_id, arch, s, true)),
        "accelerate" => Ok(accelerate(s)),
        "llama-factory" | "llamafactory" => {
            Ok(llama_factory(model_id, arch, s) + &moe_comments(arch, s))
        }
        "axolotl" => Ok(axolotl(model_id, arch, s) + &moe_comments(arch, s)),
        "deepspeed" => deepspeed(s),
        "ms-swift" | "swift" => Ok(swift(model_id, arch, s) + &moe_comments(arch, s)),
        other => Err(format!(
            "unknown export format {other:?} (expected {})",
            FORMATS.join(", ")
        )),
    }
}

/// A Python script: peft + transformers' Trainer (`trl`: TRL's trainer of the stage, SFTTrainer
/// for SFT).
fn python(model_id: &str, arch: &Architecture, s: &Settings, trl: bool) -> String {
    let gpt_oss = arch.moe_layout().is_some_and(|m| m.mxfp4_checkpoint);
    let mut out = String::from("import torch\nfrom peft import LoraConfig\nfrom transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments\n");
    let (import, config, mut pref_args) = trl_config(s, trl);
    for (k, v) in ddp_keys(s, None) {
        let v = v.parse().map_or(v, |b| py_bool(b).to_string());
        pref_args.push_str(&format!("    {k}={v},\n"));
    }
    if !import.is_empty() {
        out.push_str(import);
        out.push('\n');
    }
    if gpt_oss {
        out.push_str("from transformers import Mxfp4Config\n");
    }
    if s.quant.is_some() && s.prepare_kbit {
        out.push_str("from peft import prepare_model_for_kbit_training\n");
    }
    let liger = s.fused_ce == FusedCe::Liger || s.liger.any();
    if liger {
        out.push_str(&format!(
            "from liger_kernel.transformers import apply_liger_kernel_to_{}\n",
            arch.family.name()
        ));
    }
    if per_expert(arch, s) {
        out.push_str(&per_expert_note(arch));
    }
    out.push('\n');
    if !trl && s.stage == crate::model::Stage::Sft {
        out.push_str(&format!(
            "max_length = {}  # tokenize with truncation=True, max_length=max_length (or pack to it)\n",
            s.seq
        ));
        // (packing is the full planner's, `extended::needed`)
        if crate::model::extended::EXTENDED && s.packing {
            out.push_str("# padding-free packing: Trainer(..., data_collator=transformers.DataCollatorWithFlattening()) puts each batch in one row\n");
        }
    }
    if crate::model::extended::EXTENDED && s.neat_packing {
        out.push_str("# neat_packing (the plan's) is LLaMA-Factory's collator (SFTDataCollatorWith4DAttentionMask): Trainer and TRL have no such argument\n");
    }
    if liger {
        // Before the model is loaded: Liger patches the modelling module's classes.
        let l = s.liger;
        out.push_str(&format!(
            "apply_liger_kernel_to_{f}(rope={}, rms_norm={}, swiglu={}, fused_linear_cross_entropy={})\n",
            py_bool(l.rope),
            py_bool(l.rms_norm),
            py_bool(l.swiglu),
            py_bool(s.fused_ce == FusedCe::Liger),
            f = arch.family.name(),
        ));
    }
    let load_dtype = s.dtype;
    match s.quant {
        Some(crate::model::Quant::Int8) => {
            out.push_str("bnb_config = BitsAndBytesConfig(load_in_8bit=True)\n");
        }
        Some(q) => out.push_str(&format!(
            "bnb_config = BitsAndBytesConfig(\n    load_in_4bit=True,\n    bnb_4bit_quant_type={:?},\n    bnb_4bit_use_double_quant={},\n    bnb_4bit_compute_dtype={},\n{})\n",
            q.name(),
            py_bool(s.double_quant),
            torch_dtype(load_dtype),
            s.quant_storage.dtype().map_or(String::new(), |d| format!(
                "    bnb_4bit_quant_storage={},\n",
                torch_dtype(d)
            ))
        )),
        None => {}
    }
    let mut extra = String::new();
    if s.quant.is_some() {
        extra.push_str("    quantization_config=bnb_config,\n");
    } else if gpt_oss {
        // MXFP4 experts cannot be trained: dequantized to bf16 on load.
        extra.push_str("    quantization_config=Mxfp4Config(dequantize=True),\n");
    }
    if let Some(name) = experts_implementation(arch, s) {
        extra.push_str(&format!("    experts_implementation={name:?},\n"));
    }
    if arch.is_moe() && s.output_router_logits {
        extra.push_str("    output_router_logits=True,\n");
    }
    let attn = if gpt_oss && s.attn_impl == AttnImpl::Sdpa {
        AttnImpl::Eager
    } else {
        s.attn_impl
    };
    out.push_str(&format!(
        "model = AutoModelForCausalLM.from_pretrained(\n    {model_id:?},\n    torch_dtype={},\n    attn_implementation={:?},\n{extra})\n",
        torch_dtype(load_dtype),
        attn_name(attn),
    ));
    if s.fused_ce == FusedCe::Cce {
        out.push_str(CCE_PYTHON);
    }
    if s.quant.is_some() && s.prepare_kbit {
        out.push_str(&format!(
            "model = prepare_model_for_kbit_training(model, use_gradient_checkpointing={})\n",
            py_bool(s.grad_ckpt)
        ));
    } else if s.quant.is_some() {
        out.push_str("# not prepare_model_for_kbit_training (as LLaMA-Factory, axolotl, ms-swift and TRL ≥ 0.22 run QLoRA): embeddings, norms and lm_head stay in the loaded dtype\n");
    }
    let tp = expert_params(arch, s);
    let target_parameters = if tp.is_empty() {
        String::new()
    } else {
        format!("    target_parameters={},\n", py_list(&tp))
    };
    if s.outside_trained() {
        out.push_str("# full fine-tuning: no peft, every parameter of `model` is trained\n");
    } else if s.base_trained() {
        out.push_str(&format!(
            "# freeze tuning: no peft; only these decoder layers keep requires_grad\ntrained = {}\nfor name, p in model.named_parameters():\n    p.requires_grad_(any(f\".{{i}}.\" in name for i in trained))\n",
            py_list(
                &s.trained_layers(arch.num_hidden_layers)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
            )
        ));
    } else {
        out.push_str(&format!(
        "lora_config = LoraConfig(\n    r={},\n    lora_alpha={},\n    lora_dropout={},\n{}    target_modules={},\n{target_parameters}    modules_to_save={},\n    task_type=\"CAUSAL_LM\",\n)\n",
        s.lora_r,
        s.lora_alpha,
        s.lora_dropout,
        lora_config_variants(s),
        if s.targets.len() == Target::ALL.len()
            && !crate::model::peft_targets::all_linear_reaches_routers(arch, s)
            && !crate::model::peft_targets::all_linear_breaks_router(arch, s)
        {
            // peft's own spelling of every Linear but the output layer; where it would also
            // adapt the routers, the names, as the frameworks expand theirs.
            "\"all-linear\"".to_string()
        } else {
            py_list(&module_names(arch, s))
        },
        if s.modules_to_save.is_empty() { "None".to_string() } else { py_list(&mts(s).iter().map(|m| m.to_string()).collect::<Vec<_>>()) },
    ));
    }
    out.push_str(&format!(
        "training_args = {config}(\n    output_dir=\"out\",\n    per_device_train_batch_size={},\n    gradient_accumulation_steps={},\n    gradient_checkpointing={},\n    bf16={},\n    fp16={},\n    optim={:?},\n{pref_args})\n",
        s.batch,
        s.grad_accum,
        py_bool(s.grad_ckpt),
        py_bool(s.autocast == Some(Dtype::Bf16)),
        py_bool(s.autocast == Some(Dtype::Fp16)),
        s.optimizer.name(),
    ));
    out.push_str(&optimizer_comments(s));
    if trl {
        let trainer = config.replace("Config", "Trainer");
        let peft = if s.base_trained() {
            ""
        } else {
            ", peft_config=lora_config"
        };
        let rewards = if s.grpo() {
            ", reward_funcs=reward_funcs"
        } else {
            ""
        };
        if s.grpo() {
            out.push_str("\nreward_funcs = [...]  # your reward functions\n");
        }
        out.push_str(&format!(
            "\ntrain_dataset = ...  # your dataset\ntrainer = {trainer}(model=model{rewards}, args=training_args, train_dataset=train_dataset{peft})\ntrainer.train()\n"
        ));
    }
    out
}

/// Cut cross-entropy in a Python script: axolotl's fork patched onto the loaded model's forward
/// (`cce_patch` takes the model; before peft wraps it).
const CCE_PYTHON: &str = "# cut cross-entropy as axolotl installs it (pip install \"cut-cross-entropy[transformers] @ git+https://github.com/axolotl-ai-cloud/ml-cross-entropy.git\")\nfrom cut_cross_entropy.transformers import cce_patch\nmodel = cce_patch(model)\n";

/// A comment for a framework with no cut cross-entropy switch when the plan has it.
fn cce_note(s: &Settings, whose: &str) -> Option<String> {
    (s.fused_ce == FusedCe::Cce).then(|| {
        format!("# the plan has cut cross-entropy (fused_ce cce), which {whose} has no switch for (axolotl's cut_cross_entropy plugin has): without it the logits are computed whole\n")
    })
}

/// The frameworks' one Liger switch (`enable_liger_kernel`, `use_liger_kernel`): on for any of
/// its kernels, with a comment when the plan had only some of what the switch installs.
fn liger_switch(s: &Settings, key: &str) -> Option<(String, Option<String>)> {
    let liger_ce = s.fused_ce == FusedCe::Liger;
    if !liger_ce && !s.liger.any() {
        return None;
    }
    let all = liger_ce && s.liger == crate::model::Liger::ALL;
    let note = (!all).then(|| {
        format!("# {key} installs Liger's RMSNorm, SwiGLU, RoPE and fused linear cross-entropy together; the plan had only some of them (liger_kernel: {}, fused_ce: {})", crate::formats::fields::by_name("liger_kernel").map(|f| (f.get)(s)).unwrap_or_default(), s.fused_ce.name())
    });
    Some((format!("{key}: true"), note))
}

/// LoraConfig's arguments for the LoRA variants: DoRA, rsLoRA, the initialisation.
fn lora_config_variants(s: &Settings) -> String {
    let mut out = String::new();
    if s.use_dora {
        out.push_str("    use_dora=True,\n");
    }
    if s.use_rslora {
        out.push_str("    use_rslora=True,\n");
    }
    if s.init_lora_weights != crate::model::LoraInit::Default {
        let v = match s.init_lora_weights {
            crate::model::LoraInit::PissaFast => "\"pissa_niter_16\"".to_string(),
            crate::model::LoraInit::Random => "False".to_string(),
            i => format!("{:?}", i.name()),
        };
        out.push_str(&format!("    init_lora_weights={v},\n"));
    }
    out
}

/// Comments for what peft sets outside LoraConfig: LoRA+ and LoRA-FA's optimizers.
fn optimizer_comments(s: &Settings) -> String {
    let mut out = String::new();
    if s.loraplus_lr_ratio > 0.0 {
        out.push_str(&format!("# LoRA+: from peft.optimizers import create_loraplus_optimizer; optimizer = create_loraplus_optimizer(model, optimizer_cls=torch.optim.AdamW, lr=1e-4, loraplus_lr_ratio={})\n", s.loraplus_lr_ratio));
    }
    if s.lora_fa {
        out.push_str("# LoRA-FA: from peft.optimizers import create_lorafa_optimizer; optimizer = create_lorafa_optimizer(model, r=lora_config.r, lora_alpha=lora_config.lora_alpha, lr=1e-4)  # freezes every lora_A\n");
    }
    out
}

/// The TRL import, config class and the arguments that set the preference method of the stage
/// (for SFT: TrainingArguments, nothing to import, or with `trl` TRL's SFTConfig).
fn trl_config(s: &Settings, trl: bool) -> (&'static str, &'static str, String) {
    use crate::model::Stage;
    let (import, class) = match s.stage {
        Stage::Sft if trl => {
            let mut args = format!("    max_length={},\n", s.seq);
            if s.completion_only_loss {
                // SFTConfig has no prompt length: it is the dataset's.
                args.push_str(&format!(
                    "    completion_only_loss=True,  # a prompt-completion dataset; planned with {} prompt tokens per sample\n",
                    s.prompt_tokens()
                ));
            }
            if crate::model::extended::EXTENDED && s.packing {
                // SFTTrainer makes its default bfd packing padding-free (sft_trainer.py:916).
                args.push_str("    packing=True,  # padding-free: each batch in one row\n");
            }
            if !s.sft_fused_head() {
                args.push_str("    # SFTTrainer computes the loss through TRL's fused LM head (trl/trainer/sft_trainer.py:1140-1146), which needs less than this plan's loss: plan with logits fused to match it\n");
            }
            return ("from trl import SFTConfig, SFTTrainer", "SFTConfig", args);
        }
        Stage::Sft => return ("", "TrainingArguments", String::new()),
        Stage::Grpo => {
            // TRL 1.16's GRPOConfig (trl/trainer/grpo_config.py): the plan's generation runs
            // without vLLM, and the prompt is what the completion leaves of seq.
            let mut args = format!(
                "    num_generations={},\n    max_completion_length={},  # + a prompt of up to {} tokens = seq {}\n    beta={},\n    num_iterations={},\n    loss_type={:?},\n    disable_dropout={},\n",
                s.num_generations,
                s.completion_tokens(),
                s.prompt_tokens(),
                s.seq,
                s.beta_run(),
                s.num_iterations,
                s.grpo_loss.name(),
                py_bool(s.dropout_disabled())
            );
            args.push_str(&trl_vllm_args(s));
            return (
                "from trl import GRPOConfig, GRPOTrainer",
                "GRPOConfig",
                args,
            );
        }
        Stage::Dpo => ("from trl import DPOConfig, DPOTrainer", "DPOConfig"),
        Stage::Kto => ("from trl import KTOConfig, KTOTrainer", "KTOConfig"),
        Stage::Orpo => (
            "from trl.experimental.orpo import ORPOConfig, ORPOTrainer",
            "ORPOConfig",
        ),
        Stage::Simpo => (
            "from trl.experimental.cpo import CPOConfig, CPOTrainer",
            "CPOConfig",
        ),
    };
    let mut args = format!("    beta={},\n", s.beta_run());
    match s.stage {
        Stage::Dpo => args.push_str(&format!(
            "    loss_type=[{:?}],\n    precompute_ref_log_probs={},\n",
            s.pref_loss.name(),
            py_bool(s.precompute_ref_log_probs)
        )),
        Stage::Kto => args.push_str(&format!(
            "    precompute_ref_log_probs={},\n",
            py_bool(s.precompute_ref_log_probs)
        )),
        Stage::Simpo => args.push_str("    loss_type=\"simpo\",\n    cpo_alpha=0.0,\n"),
        _ => {}
    }
    args.push_str(&format!(
        "    max_length={},  # prompt {} + completion {} tokens per sequence\n    disable_dropout={},\n",
        s.seq,
        s.prompt_tokens(),
        s.completion_tokens(),
        py_bool(s.dropout_disabled())
    ));
    (import, class, args)
}

/// GRPOConfig's generation keys: the generation batch and the plan's `generation`, as (key, value), booleans spelled
/// `true` / `false` (the caller's language spells them its way).
fn vllm_keys(s: &Settings) -> Vec<(&'static str, String)> {
    use crate::model::Generation;
    let b = |x: bool| x.to_string();
    let mut keys = generation_batch_keys(s);
    keys.extend(match s.generation {
        Generation::Hf => vec![("use_vllm", b(false))],
        Generation::VllmServer => vec![
            ("use_vllm", b(true)),
            ("vllm_mode", "server".into()),
            (
                "vllm_importance_sampling_correction",
                b(s.vllm_importance_sampling_correction),
            ),
        ],
        Generation::VllmColocate => vec![
            ("use_vllm", b(true)),
            ("vllm_mode", "colocate".into()),
            (
                "vllm_gpu_memory_utilization",
                s.vllm_gpu_memory_utilization.to_string(),
            ),
            ("vllm_enable_sleep_mode", b(s.vllm_enable_sleep_mode)),
            (
                "vllm_importance_sampling_correction",
                b(s.vllm_importance_sampling_correction),
            ),
        ],
    });
    keys
}

/// GRPO's generation batch as the settings give it (TRL's `GRPOConfig` keys, which axolotl's
/// `trl:` section and ms-swift take under the same names); nothing when TRL's default applies.
fn generation_batch_keys(s: &Settings) -> Vec<(&'static str, String)> {
    match (s.steps_per_generation, s.generation_batch_size) {
        (Some(n), _) => vec![("steps_per_generation", n.to_string())],
        (None, Some(g)) => vec![("generation_batch_size", g.to_string())],
        (None, None) => vec![],
    }
}

/// [`vllm_keys`] as GRPOConfig's keyword arguments.
fn trl_vllm_args(s: &Settings) -> String {
    vllm_keys(s)
        .into_iter()
        .map(|(k, v)| {
            let v = match v.as_str() {
                "true" => "True".to_string(),
                "false" => "False".to_string(),
                "server" | "colocate" => format!("{v:?}"),
                _ => v,
            };
            format!("    {k}={v},\n")
        })
        .collect()
}

fn mixed(s: &Settings) -> &'static str {
    match s.autocast {
        Some(Dtype::Bf16) => "bf16",
        Some(Dtype::Fp16) => "fp16",
        _ => "'no'",
    }
}

fn accelerate(s: &Settings) -> String {
    use crate::model::Strategy;
    let p = &s.parallel;
    let world = p.world();
    let mut out = String::from("compute_environment: LOCAL_MACHINE\n");
    match p.strategy {
        Strategy::Single => out.push_str("distributed_type: 'NO'\n"),
        Strategy::Ddp => out.push_str("distributed_type: MULTI_GPU\n"),
        Strategy::FsdpFullShard | Strategy::FsdpShardGradOp | Strategy::FsdpHybridShard => {
            let sharding = fsdp_sharding(s).unwrap_or_default().to_ascii_uppercase();
            out.push_str(&format!(
                "distributed_type: FSDP\nfsdp_config:\n{}  fsdp_sharding_strategy: {sharding}\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_offload_params: {}\n  fsdp_use_orig_params: true\n  fsdp_cpu_ram_efficient_loading: true\n  fsdp_sync_module_states: true\n  fsdp_state_dict_type: {}\n  fsdp_activation_checkpointing: {}\n",
                fsdp2_line(p),
                p.offload_params || p.offload_optimizer,
                s.job.fsdp_state_dict.name().to_ascii_uppercase(),
                s.grad_ckpt
            ));
        }
        Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => {
            let stage = match p.strategy {
                Strategy::Zero1 => 1,
                Strategy::Zero2 => 2,
                _ => 3,
            };
            out.push_str(&format!(
                "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: {stage}\n  offload_optimizer_device: {}\n  offload_param_device: {}\n  gradient_accumulation_steps: {}\n  zero3_init_flag: {}\n  zero3_save_16bit_model: {}\n",
                if p.offload_optimizer { "cpu" } else { "none" },
                if p.offload_params { "cpu" } else { "none" },
                s.grad_accum,
                stage == 3,
                stage == 3
            ));
        }
    }
    out.push_str(&format!(
        "mixed_precision: {}\nnum_machines: {}\nnum_processes: {world}\nmachine_rank: 0\ngpu_ids: all\nuse_cpu: false\ndowncast_bf16: 'no'\n",
        mixed(s),
        p.nodes
    ));
    out
}

fn llama_factory(model_id: &str, arch: &Architecture, s: &Settings) -> String {
    let targets = if s.targets.len() == Target::ALL.len() {
        "all".to_string()
    } else {
        module_names(arch, s).join(",")
    };
    let attn = match s.attn_impl {
        AttnImpl::Eager => "disabled",
        AttnImpl::Sdpa => "sdpa",
        AttnImpl::FlashAttention2 => "fa2",
    };
    let mut out = if s.base_trained() {
        // LLaMA-Factory casts every trainable parameter to fp32 unless pure_bf16
        // (model/adapter.py, init_adapter: cast_trainable_params_to_fp32): a bf16 plan says so.
        let pure = if s.dtype == Dtype::Bf16 && s.autocast.is_none() {
            "pure_bf16: true\n"
        } else {
            ""
        };
        let freeze = if s.outside_trained() {
            String::new()
        } else {
            format!(
                "freeze_trainable_layers: {}\nfreeze_trainable_modules: all\n",
                s.freeze_trainable_layers
            )
        };
        format!(
            "model_name_or_path: {model_id}\nstage: sft\ndo_train: true\nfinetuning_type: {}\n{freeze}{pure}",
            s.finetuning_type.name()
        )
    } else {
        format!(
            "model_name_or_path: {model_id}\nstage: sft\ndo_train: true\nfinetuning_type: lora\nlora_rank: {}\nlora_alpha: {}\nlora_dropout: {}\nlora_target: {targets}\n",
            s.lora_r, s.lora_alpha, s.lora_dropout
        )
    };
    if s.use_dora {
        out.push_str("use_dora: true\n");
    }
    if crate::model::extended::EXTENDED && s.packing {
        // LLaMA-Factory's packing keeps one row per packed sample (attention over the whole
        // row, or neat_packing's block-diagonal mask): no key flattens the batch.
        out.push_str("# padding-free packing (the plan's: the batch in one row) has no LLaMA-Factory key; packing: true keeps a row per packed sample\n");
    }
    if crate::model::extended::EXTENDED && s.neat_packing {
        out.push_str("packing: true\nneat_packing: true\n");
    }
    if s.use_rslora {
        out.push_str("use_rslora: true\n");
    }
    match s.init_lora_weights {
        // pissa_iter -1: a full SVD; LLaMA-Factory's default 16 for the randomized one.
        crate::model::LoraInit::Pissa => out.push_str("pissa_init: true\npissa_iter: -1\n"),
        crate::model::LoraInit::PissaFast => out.push_str("pissa_init: true\npissa_iter: 16\n"),
        crate::model::LoraInit::Default => {}
        i => out.push_str(&format!(
            "# init_lora_weights: {} (peft LoraConfig; LLaMA-Factory sets only PiSSA)\n",
            i.name()
        )),
    }
    if s.loraplus_lr_ratio > 0.0 {
        out.push_str(&format!("loraplus_lr_ratio: {}\n", s.loraplus_lr_ratio));
    }
    if s.lora_fa {
        out.push_str("# LoRA-FA (lora_A frozen): peft's create_lorafa_optimizer, not a LLaMA-Factory option\n");
    }
    if s.preference() || s.grpo() {
        out = out.replace("stage: sft\n", &llama_factory_stage(s));
    }
    out.push_str(&full_logits_comment(s, "LLaMA-Factory's"));
    if !s.modules_to_save.is_empty() {
        out.push_str(&format!("additional_target: {}\n", mts(s).join(",")));
    }
    if s.quant == Some(Quant::Int8) {
        out.push_str("quantization_bit: 8\n");
        if s.prepare_kbit {
            out.push_str(&unprepared_note("LLaMA-Factory"));
        }
    } else if let Some(q) = s.quant {
        out.push_str(&format!(
            "quantization_bit: 4\nquantization_type: {}\ndouble_quantization: {}\n",
            q.name(),
            s.double_quant
        ));
        if s.prepare_kbit {
            out.push_str(&unprepared_note("LLaMA-Factory"));
        }
        out.push_str(&storage_comment(s, "LLaMA-Factory", s.dtype.name()));
    }
    out.push_str(&format!(
        "cutoff_len: {}\nper_device_train_batch_size: {}\ngradient_accumulation_steps: {}\ndisable_gradient_checkpointing: {}\nflash_attn: {attn}\nbf16: {}\nfp16: {}\noptim: {}\noutput_dir: out\n",
        s.seq,
        s.batch,
        s.grad_accum,
        !s.grad_ckpt,
        s.autocast == Some(Dtype::Bf16),
        s.autocast == Some(Dtype::Fp16),
        s.optimizer.name(),
    ));
    if let Some((line, note)) = liger_switch(s, "enable_liger_kernel") {
        if let Some(n) = note {
            out.push_str(&n);
            out.push('\n');
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&cce_note(s, "LLaMA-Factory").unwrap_or_default());
    if s.parallel.offload_activations {
        // Unsloth's offloaded checkpointing: the checkpoints' inputs in host memory.
        out.push_str("use_unsloth_gc: true\n");
    }
    // Several GPUs: ZeRO through LLaMA-Factory's own DeepSpeed files (examples/deepspeed);
    // DDP and FSDP through the launcher.
    if let Some(stage) =
        zero_stage(s).filter(|_| s.parallel.strategy != crate::model::Strategy::Ddp)
    {
        let offload = if s.parallel.offload_optimizer || s.parallel.offload_params {
            "_offload"
        } else {
            ""
        };
        out.push_str(&format!(
            "deepspeed: examples/deepspeed/ds_z{stage}{offload}_config.json\n"
        ));
    }
    let lf_unused = (s.finetuning_type == crate::model::FinetuningType::Lora).then_some(false);
    for (k, v) in ddp_keys(s, lf_unused) {
        out.push_str(&format!("{k}: {v}\n"));
    }
    out.push_str(&launch_comment(
        s,
        "llamafactory-cli train this.yaml",
        "src/train.py this.yaml",
    ));
    if arch.vision.is_some() {
        // The images' resize limits and the tower kept frozen (LLaMA-Factory's
        // ProcessorArguments and FinetuningArguments).
        let i = &s.images;
        out.push_str(&format!(
            "image_max_pixels: {}\nimage_min_pixels: {}\nfreeze_vision_tower: {}\nfreeze_multi_modal_projector: {}\n",
            i.image_max_pixels, i.image_min_pixels, i.freeze_vision_tower, i.freeze_multi_modal_projector
        ));
    }
    out
}

/// LLaMA-Factory's keys for a preference stage: `stage: dpo` with `pref_loss` (ORPO and SimPO
/// are DPO losses there), or `stage: kto`; its trainers compute the full logits.
fn llama_factory_stage(s: &Settings) -> String {
    use crate::model::{Logits, Stage};
    if s.grpo() {
        return "# GRPO: LLaMA-Factory has no GRPO stage (its RL stage is ppo): run this plan with TRL's GRPOTrainer (export trl) or ms-swift's swift rlhf --rlhf_type grpo\n".into();
    }
    let (stage, loss) = match s.stage {
        Stage::Kto => ("kto", None),
        Stage::Orpo => ("dpo", Some("orpo")),
        Stage::Simpo => ("dpo", Some("simpo")),
        _ => ("dpo", Some(s.pref_loss.name())),
    };
    let mut out = format!("stage: {stage}\npref_beta: {}\n", s.beta_run());
    if let Some(l) = loss {
        out.push_str(&format!("pref_loss: {l}\n"));
    }
    if s.precompute_ref_log_probs {
        out.push_str("# precompute_ref_log_probs: LLaMA-Factory runs the reference in every step (TRL's DPOConfig has the option)\n");
    }
    if s.logits_run() == Logits::Fused {
        out.push_str("# LLaMA-Factory's DPO and KTO trainers compute the full fp32 logits: plan with logits full to match them\n");
    }
    out
}

/// A YAML comment where the plan's 4-bit storage dtype is not the one `whose` 4-bit loading
/// sets (`theirs`): the framework's own storage is what its run has.
fn storage_comment(s: &Settings, whose: &str, theirs: &str) -> String {
    if s.quant_storage.name() == theirs {
        String::new()
    } else {
        format!("# {whose} stores 4-bit weights in {theirs} (bnb_4bit_quant_storage): plan with bnb_4bit_quant_storage {theirs} to match it\n")
    }
}

/// A YAML comment where the plan has TRL's fused LM head for SFT but `whose` SFT trainer (a
/// transformers `Trainer`) computes the full logits.
fn full_logits_comment(s: &Settings, whose: &str) -> String {
    if s.sft_fused_head() {
        format!("# {whose} SFT trainer computes the full logits, not TRL's fused LM head: plan with logits full to match it\n")
    } else {
        String::new()
    }
}

/// axolotl's `bf16`: `true` for autocast (bf16 weights), `full` for bf16 weights without
/// autocast, else `false` (fp32 weights unless `fp16`).
fn axolotl_bf16(s: &Settings) -> &'static str {
    match (s.autocast, s.dtype) {
        (Some(Dtype::Bf16), _) => "true",
        (None, Dtype::Bf16) => "full",
        _ => "false",
    }
}

fn axolotl(model_id: &str, arch: &Architecture, s: &Settings) -> String {
    let optimizer = match s.optimizer {
        Optimizer::Adamw8bit => "adamw_bnb_8bit",
        o => o.name(),
    };
    // Full fine-tuning: no `adapter` key (axolotl trains every parameter then).
    let mut out = if s.base_trained() {
        let mut head = format!("base_model: {model_id}\nload_in_4bit: false\n");
        if !s.outside_trained() {
            // Freeze tuning: axolotl trains only the parameters these patterns match.
            head.push_str("unfrozen_parameters:\n");
            for i in s.trained_layers(arch.num_hidden_layers) {
                head.push_str(&format!("  - ^model.layers.{i}.*\n"));
            }
        }
        head
    } else {
        format!(
            "base_model: {model_id}\n{}adapter: {}\nlora_r: {}\nlora_alpha: {}\nlora_dropout: {}\n{}",
            if s.quant == Some(Quant::Int8) {
                "load_in_8bit: true\n".to_string()
            } else {
                format!("load_in_4bit: {}\n", s.quant.is_some_and(Quant::is_4bit))
            },
            if s.quant.is_some_and(Quant::is_4bit) { "qlora" } else { "lora" },
            s.lora_r,
            s.lora_alpha,
            s.lora_dropout,
            // Every Linear: axolotl's lora_target_linear (peft's all-linear), except where its
            // list of nn.Linear instances takes a router whose LoRA layer fails (Llama 4): the
            // names.
            if s.targets.len() == Target::ALL.len()
                && !crate::model::peft_targets::all_linear_breaks_router(arch, s)
            {
                "lora_target_linear: true\n".to_string()
            } else {
                "lora_target_modules:\n".to_string()
                    + &module_names(arch, s).iter().map(|m| format!("  - {m}\n")).collect::<String>()
            },
        )
    };
    if s.quant.is_some() && s.prepare_kbit {
        out.push_str(&unprepared_note("axolotl"));
    }
    if s.quant.is_some_and(Quant::is_4bit) {
        out.push_str(&storage_comment(s, "axolotl", "bf16"));
    }
    if s.use_dora {
        out.push_str("peft_use_dora: true\n");
    }
    if crate::model::extended::EXTENDED && s.neat_packing {
        out.push_str("# neat_packing (the plan's) is LLaMA-Factory's: axolotl has no such key\n");
    }
    if crate::model::extended::EXTENDED && s.packing {
        out.push_str("# padding-free packing (the plan's: the batch in one row) is not axolotl's sample_packing, which is not planned\n");
    }
    if s.use_rslora {
        out.push_str("peft_use_rslora: true\n");
    }
    if s.init_lora_weights != crate::model::LoraInit::Default {
        out.push_str(&format!(
            "# init_lora_weights: {} (peft LoraConfig)\n",
            s.init_lora_weights.name()
        ));
    }
    if s.loraplus_lr_ratio > 0.0 {
        out.push_str(&format!("loraplus_lr_ratio: {}\n", s.loraplus_lr_ratio));
    }
    if s.lora_fa {
        out.push_str("# LoRA-FA (lora_A frozen): peft's create_lorafa_optimizer\n");
    }
    out.push_str(&full_logits_comment(s, "axolotl's"));
    if s.grpo() {
        // axolotl's GRPO: `rl: grpo` runs TRL's GRPOTrainer with the `trl:` section's arguments.
        out.push_str(&format!(
            "rl: grpo\ntrl:\n  beta: {}\n  num_generations: {}\n  max_completion_length: {}\n  num_iterations: {}\n  loss_type: {}\n{}  reward_funcs: [...]\n",
            s.beta_run(),
            s.num_generations,
            s.completion_tokens(),
            s.num_iterations,
            s.grpo_loss.name(),
            vllm_keys(s)
                .into_iter()
                .map(|(k, v)| format!("  {k}: {v}\n"))
                .collect::<String>()
        ));
    }
    if s.preference() {
        // axolotl's `rl` runs TRL's trainer of that name.
        out.push_str(&format!(
            "rl: {}\nrl_beta: {}\n",
            s.stage.name(),
            s.beta_run()
        ));
        if s.precompute_ref_log_probs {
            out.push_str("precompute_ref_log_probs: true\n");
        }
    }
    if !s.modules_to_save.is_empty() {
        out.push_str(&format!(
            "lora_modules_to_save:\n{}",
            mts(s)
                .iter()
                .map(|m| format!("  - {m}\n"))
                .collect::<String>()
        ));
    }
    out.push_str(&format!(
        "sequence_len: {}\nmicro_batch_size: {}\ngradient_accumulation_steps: {}\ngradient_checkpointing: {}\nflash_attention: {}\nsdp_attention: {}\nbf16: {}\nfp16: {}\noptimizer: {optimizer}\noutput_dir: ./out\n",
        s.seq,
        s.batch,
        s.grad_accum,
        if s.parallel.offload_activations { "offload".to_string() } else { s.grad_ckpt.to_string() },
        s.attn_impl == AttnImpl::FlashAttention2,
        s.attn_impl == AttnImpl::Sdpa,
        axolotl_bf16(s),
        s.autocast == Some(Dtype::Fp16),
    ));
    if s.attn_impl == AttnImpl::Eager {
        out.push_str("eager_attention: true\n");
    }
    // Several GPUs: axolotl's deepspeed_configs/ files by stage, or FSDP in the YAML itself.
    let p = &s.parallel;
    let offload = p.offload_optimizer || p.offload_params;
    if let Some(stage) = zero_stage(s).filter(|_| p.strategy != crate::model::Strategy::Ddp) {
        let file = match (stage, offload) {
            (3, true) => "zero3_bf16_cpuoffload_all".to_string(),
            (3, false) => "zero3_bf16".to_string(),
            (st, true) => format!("zero{st}_cpuoffload"),
            (st, false) => format!("zero{st}"),
        };
        out.push_str(&format!("deepspeed: deepspeed_configs/{file}.json\n"));
    }
    if let Some(sharding) = fsdp_sharding(s) {
        out.push_str(&format!(
            "fsdp:\n  - {sharding}\n  - auto_wrap\n{}fsdp_config:\n{}  fsdp_offload_params: {offload}\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_state_dict_type: {}\n",
            if offload { "  - offload\n" } else { "" },
            fsdp2_line(&s.parallel),
            s.job.fsdp_state_dict.name().to_ascii_uppercase()
        ));
    }
    for (k, v) in ddp_keys(s, None) {
        out.push_str(&format!("{k}: {v}\n"));
    }
    out.push_str(&launch_comment(
        s,
        "axolotl train this.yml",
        "-m axolotl.cli.train this.yml",
    ));
    let liger = s.fused_ce == FusedCe::Liger || s.liger.any();
    let cce = s.fused_ce == FusedCe::Cce;
    if liger || cce {
        out.push_str("plugins:\n");
        if liger {
            out.push_str("  - axolotl.integrations.liger.LigerPlugin\n");
        }
        if cce {
            out.push_str("  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n");
        }
    }
    // axolotl's LigerPlugin takes each kernel on its own.
    for (on, key) in [
        (s.liger.rope, "liger_rope"),
        (s.liger.rms_norm, "liger_rms_norm"),
        (s.liger.swiglu, "liger_glu_activation"),
        (
            s.fused_ce == FusedCe::Liger,
            "liger_fused_linear_cross_entropy",
        ),
        (cce, "cut_cross_entropy"),
    ] {
        if on {
            out.push_str(&format!("{key}: true\n"));
        }
    }
    out
}

/// How a YAML export of several GPUs is launched (its number of GPUs is the launcher's, not the
/// YAML's), as a comment; nothing on one GPU.
/// DistributedDataParallel's Trainer arguments a DDP plan over several GPUs was made with, as
/// (key, value) pairs: `ddp_find_unused_parameters` when given, or when `framework_default`
/// (LLaMA-Factory's off for LoRA) differs from the plan's; the bucket size when given; the
/// buffers' broadcast when off.
fn ddp_keys(s: &Settings, framework_default: Option<bool>) -> Vec<(&'static str, String)> {
    let mut out = vec![];
    if !s.parallel.ddp_ranks() {
        return out;
    }
    let unused = s.ddp_finds_unused();
    if s.ddp_find_unused_parameters.is_some() || framework_default.is_some_and(|d| d != unused) {
        out.push(("ddp_find_unused_parameters", unused.to_string()));
    }
    if let Some(mb) = s.ddp_bucket_cap_mb {
        out.push(("ddp_bucket_cap_mb", mb.to_string()));
    }
    if !s.ddp_broadcast_buffers {
        out.push(("ddp_broadcast_buffers", "false".into()));
    }
    out
}

fn launch_comment(s: &Settings, cli: &str, script: &str) -> String {
    let world = s.parallel.world();
    if world <= 1 {
        return String::new();
    }
    format!(
        "# launch on {world} GPUs: accelerate launch --config_file accelerate.yaml {script} (lorafit export --format accelerate), or {cli} with {} processes per node\n",
        s.parallel.gpus_per_node
    )
}

/// The ZeRO stage of a DeepSpeed strategy (DDP as stage 0), None for the others.
fn zero_stage(s: &Settings) -> Option<u8> {
    use crate::model::Strategy;
    match s.parallel.strategy {
        Strategy::Ddp => Some(0),
        Strategy::Zero1 => Some(1),
        Strategy::Zero2 => Some(2),
        Strategy::Zero3 => Some(3),
        _ => None,
    }
}

/// A DeepSpeed JSON for Trainer (`deepspeed=` / `--deepspeed`): the ZeRO stage, CPU offload,
/// the mixed precision and the batch numbers of the plan.
fn deepspeed(s: &Settings) -> Result<String, String> {
    let stage = zero_stage(s).ok_or_else(|| {
        format!(
            "a DeepSpeed JSON needs a DeepSpeed strategy (zero1, zero2, zero3 or ddp as stage 0); this plan's is {}",
            s.parallel.strategy.name()
        )
    })?;
    let p = &s.parallel;
    let device = |on: bool| if on { "cpu" } else { "none" };
    let mut zero = serde_json::json!({
        "stage": stage,
        "offload_optimizer": {"device": device(p.offload_optimizer), "pin_memory": true},
    });
    if stage == 3 {
        zero["offload_param"] =
            serde_json::json!({"device": device(p.offload_params), "pin_memory": true});
    }
    let doc = serde_json::json!({
        "train_micro_batch_size_per_gpu": s.batch,
        "gradient_accumulation_steps": s.grad_accum,
        "bf16": {"enabled": s.autocast == Some(Dtype::Bf16)},
        "fp16": {"enabled": s.autocast == Some(Dtype::Fp16)},
        "zero_optimization": zero,
    });
    serde_json::to_string_pretty(&doc)
        .map(|t| t + "\n")
        .map_err(|e| e.to_string())
}

/// An ms-swift command line (`swift sft`, or `swift rlhf --rlhf_type …`), with the processes per
/// node before it.
fn swift(model_id: &str, arch: &Architecture, s: &Settings) -> String {
    let p = &s.parallel;
    let mut out = full_logits_comment(s, "ms-swift's");
    if p.world() > 1 {
        out.push_str(&format!("NPROC_PER_NODE={} \\\n", p.gpus_per_node));
        if p.nodes > 1 {
            out.push_str(&format!("NNODES={} \\\n", p.nodes));
        }
    }
    let mut args: Vec<(String, String)> = vec![];
    let mut arg = |k: &str, v: String| args.push((k.to_string(), v));
    if s.grpo() {
        // ms-swift's GRPO arguments (its GRPOArguments, TRL's names); its generation is not in
        // this plan (use_vllm false: HF generate on the training GPU).
        out.push_str("swift rlhf \\\n");
        arg("rlhf_type", "grpo".to_string());
        arg("beta", s.beta_run().to_string());
        arg("num_generations", s.num_generations.to_string());
        arg("max_completion_length", s.completion_tokens().to_string());
        arg("num_iterations", s.num_iterations.to_string());
        arg("loss_type", s.grpo_loss.name().to_string());
        for (k, v) in generation_batch_keys(s) {
            arg(k, v);
        }
        match s.generation {
            crate::model::Generation::Hf => arg("use_vllm", "false".to_string()),
            crate::model::Generation::VllmServer => {
                arg("use_vllm", "true".to_string());
                arg("vllm_mode", "server".to_string());
            }
            crate::model::Generation::VllmColocate => {
                arg("use_vllm", "true".to_string());
                arg("vllm_mode", "colocate".to_string());
                arg(
                    "vllm_gpu_memory_utilization",
                    s.vllm_gpu_memory_utilization.to_string(),
                );
                if s.vllm_enable_sleep_mode {
                    arg("sleep_level", "1".to_string());
                }
            }
        }
        arg("reward_funcs", "...".to_string());
    } else if s.preference() {
        out.push_str("swift rlhf \\\n");
        arg("rlhf_type", s.stage.name().to_string());
        arg("beta", s.beta_run().to_string());
    } else {
        out.push_str("swift sft \\\n");
    }
    arg("model", model_id.to_string());
    arg(
        "tuner_type",
        if s.base_trained() { "full" } else { "lora" }.to_string(),
    );
    let dtype = match s.dtype {
        Dtype::Bf16 => "bfloat16",
        Dtype::Fp16 => "float16",
        Dtype::Fp32 => "float32",
    };
    arg("torch_dtype", dtype.to_string());
    arg("per_device_train_batch_size", s.batch.to_string());
    arg("gradient_accumulation_steps", s.grad_accum.to_string());
    arg("max_length", s.seq.to_string());
    if !s.base_trained() {
        arg("lora_rank", s.lora_r.to_string());
        arg("lora_alpha", s.lora_alpha.to_string());
        arg("lora_dropout", s.lora_dropout.to_string());
        let targets = if s.targets.len() == Target::ALL.len() {
            "all-linear".to_string()
        } else {
            module_names(arch, s).join(" ")
        };
        arg("target_modules", targets);
        if s.use_dora {
            arg("use_dora", "true".into());
        }
        if crate::model::extended::EXTENDED && s.packing {
            // ms-swift's collator puts a padding-free batch in one row (swift/template/base.py)
            arg("padding_free", "true".into());
        }
        if s.use_rslora {
            arg("use_rslora", "true".into());
        }
    }
    if let Some(q) = s.quant {
        arg("quant_method", "bnb".into());
        arg("quant_bits", q.bits().to_string());
        if q.is_4bit() {
            arg("bnb_4bit_quant_type", q.name().into());
            arg("bnb_4bit_use_double_quant", s.double_quant.to_string());
            if s.quant_storage != crate::model::QuantStorage::Uint8 {
                arg("bnb_4bit_quant_storage", s.quant_storage.name().into());
            }
        }
    }
    let fsdp = swift_fsdp(s);
    // Under FSDP, checkpointing is FSDP's own (ms-swift turns Trainer's off beside it).
    arg(
        "gradient_checkpointing",
        (s.grad_ckpt && fsdp.is_none()).to_string(),
    );
    let attn = match s.attn_impl {
        AttnImpl::Eager => "eager",
        AttnImpl::Sdpa => "sdpa",
        AttnImpl::FlashAttention2 => "flash_attn",
    };
    arg("attn_impl", attn.into());
    arg("optim", s.optimizer.name().into());
    let liger_note = liger_switch(s, "use_liger_kernel").and_then(|(_, note)| {
        arg("use_liger_kernel", "true".into());
        note
    });
    if let Some(stage) = zero_stage(s).filter(|_| p.strategy != crate::model::Strategy::Ddp) {
        let offload = if p.offload_optimizer || p.offload_params {
            "_offload"
        } else {
            ""
        };
        arg("deepspeed", format!("zero{stage}{offload}"));
    }
    if let Some(j) = fsdp {
        arg("fsdp", format!("'{j}'"));
    }
    for (k, v) in ddp_keys(s, None) {
        arg(k, v);
    }
    let lines: Vec<String> = args.iter().map(|(k, v)| format!("    --{k} {v}")).collect();
    out.push_str(&lines.join(" \\\n"));
    out.push('\n');
    if s.autocast.is_none() && s.dtype != Dtype::Fp32 {
        out.push_str(
            "# planned without autocast; ms-swift trains a 16-bit torch_dtype in mixed precision\n",
        );
    }
    if s.quant.is_some() && s.prepare_kbit {
        out.push_str(&unprepared_note("ms-swift"));
    }
    if let Some(n) = liger_note {
        out.push_str(&n.replace("use_liger_kernel", "--use_liger_kernel"));
        out.push('\n');
    }
    out.push_str(&cce_note(s, "ms-swift").unwrap_or_default());
    out
}

/// FSDP's sharding strategy as Trainer's `fsdp` options name it (`full_shard`,
/// `shard_grad_op`, `hybrid_shard`; accelerate's config writes the same in capitals), None for
/// a plan without FSDP.
fn fsdp_sharding(s: &Settings) -> Option<&'static str> {
    use crate::model::Strategy;
    match s.parallel.strategy {
        Strategy::FsdpFullShard => Some("full_shard"),
        Strategy::FsdpShardGradOp => Some("shard_grad_op"),
        Strategy::FsdpHybridShard => Some("hybrid_shard"),
        _ => None,
    }
}

/// accelerate's and axolotl's `fsdp_version: 2` line of an `fsdp_config` (none for FSDP1, their
/// default).
fn fsdp2_line(p: &crate::model::Parallel) -> &'static str {
    if p.fsdp_version == crate::model::FsdpVersion::V2 {
        "  fsdp_version: 2\n"
    } else {
        ""
    }
}

/// ms-swift's `--fsdp` JSON (Trainer's `fsdp` options and `fsdp_config`, FSDP2 as ms-swift runs
/// it, or the version the plan names) for an FSDP plan.
fn swift_fsdp(s: &Settings) -> Option<String> {
    use crate::model::Strategy;
    let p = &s.parallel;
    let sharding = fsdp_sharding(s)?;
    let offload = if p.offload_params || p.offload_optimizer {
        " offload"
    } else {
        ""
    };
    let j = serde_json::json!({
        "fsdp": format!("{sharding} auto_wrap{offload}"),
        "fsdp_config": {
            "fsdp_version": if p.fsdp_version == crate::model::FsdpVersion::V2 { 2 } else { 1 },
            "reshard_after_forward": p.strategy != Strategy::FsdpShardGradOp,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "cpu_ram_efficient_loading": true,
            "state_dict_type": s.job.fsdp_state_dict.name().to_ascii_uppercase(),
            "activation_checkpointing": s.grad_ckpt,
            "activation_cpu_offload": s.grad_ckpt && p.offload_activations,
        }
    });
    Some(j.to_string())
}

/// The comment of a framework export whose plan ran peft's `prepare_model_for_kbit_training` on
/// a 4-bit base, which the framework does not (its embeddings, norms and lm_head stay in the
/// compute dtype).
fn unprepared_note(framework: &str) -> String {
    format!("# prepare_model_for_kbit_training: {framework} does not run it (embeddings, norms and lm_head stay in the compute dtype): plan with --no-prepare-kbit to match\n")
}
