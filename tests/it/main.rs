//! One integration-test binary (faster to link than many): the reference comparison, property
//! tests over the input space, CLI behaviour and catalog invariants.

mod allocator;
mod anatomy;
mod architecture;
mod bnb_optim;
mod catalog;
mod cce;
mod cli;
mod crosscheck;
mod ddp;
mod distributed;
mod extended;
mod framework;
mod fsdp1;
mod fsdp2;
mod fuzz;
mod glm4_moe;
#[cfg(feature = "gpu")]
mod gpu;
mod grpo;
mod i18n;
mod inspect;
mod int8;
mod job;
mod liger;
mod methods;
mod models26;
mod moe_layout;
mod packing;
mod periodic;
mod planning;
mod properties;
mod real_gpu;
mod reference;
mod reserved;
mod sharded_qlora;
mod snapshot;
mod step_time;
mod surface;
mod torchao_optim;
mod transformers4;
mod trl_sft;
mod unprepared;
mod validation;
mod weights;

/// The measuring harness's emulated GPU runs no cuBLAS, so the steps it measured (and the
/// allocation sequences it recorded) hold no cuBLAS workspace: they are planned with
/// `CUBLAS_WORKSPACE_CONFIG=:0:0`, which tells the planner the same. Real-GPU rows keep the
/// default.
pub const HARNESS_CUBLAS: &str = ":0:0";

/// A harness case's settings object, with [`HARNESS_CUBLAS`].
pub fn harness_settings(v: &serde_json::Value) -> lorafit::model::Settings {
    // The harness says `full_ft: true` for what the settings table calls finetuning_type full,
    // and with `freeze_trainable_layers` for freeze.
    let mut v = v.clone();
    if v["full_ft"] == serde_json::Value::Bool(true) {
        v["finetuning_type"] = if v["freeze_trainable_layers"].is_i64() {
            "freeze".into()
        } else {
            "full".into()
        };
    }
    // The harness lists Liger's fused loss among its Liger parts; the settings table calls it
    // fused_ce.
    if let Some(parts) = v["liger_kernel"].as_array().cloned() {
        let fused = serde_json::Value::from("fused_linear_cross_entropy");
        if parts.contains(&fused) {
            v["fused_ce"] = true.into();
        }
        v["liger_kernel"] = parts.into_iter().filter(|p| *p != fused).collect();
    }
    // Its TRL SFTTrainer step (`method_kind: "trl_sft"`) is an SFT step through TRL's fused LM
    // head.
    if v["method_kind"] == "trl_sft" {
        v["method_kind"] = "sft".into();
        v["logits"] = "fused".into();
        // Its prompt whose labels are -100 is TRL's completion-only loss over that many prompt
        // tokens.
        if v["trl_sft_prompt_len"].as_u64().is_some_and(|p| p > 0) {
            v["completion_only_loss"] = true.into();
            v["dpo_prompt_len"] = v["trl_sft_prompt_len"].clone();
        }
    }
    // Its GRPO step (`method_kind: "grpo"`) scores one prompt's completions per step: the batch
    // is num_generations. Its preference-only keys are not GRPO's (its β is `grpo_beta`).
    if v["method_kind"] == "grpo" {
        v["num_generations"] = v["batch"].clone();
        // Its steps without `grpo_generate` generate nothing on the GPU, as a trainer's GPU
        // does when vLLM generates on others; with `grpo_vllm_sync` they run TRL's weight sync
        // to vLLM first, which a peft model's step cannot be without, and with `grpo_vllm_is`
        // vLLM's importance-sampling correction (off without it).
        if v["grpo_generate"] == serde_json::Value::Bool(true) {
            v["generation"] = "hf".into();
        } else {
            let full = v["full_ft"] == serde_json::Value::Bool(true);
            assert!(
                full || v["grpo_vllm_sync"] == serde_json::Value::Bool(true),
                "a peft GRPO recording with neither generation nor the weight sync to vLLM is no step TRL runs"
            );
            v["generation"] = "vllm_server".into();
            let is = v["grpo_vllm_is"] == serde_json::Value::Bool(true);
            v["vllm_importance_sampling_correction"] = is.into();
        }
        if let Some(o) = v.as_object_mut() {
            for k in [
                "dpo_beta",
                "dpo_disable_dropout",
                "dpo_prompt_len",
                "dpo_impl",
                "grpo_vllm_sync",
                "grpo_vllm_is",
            ] {
                o.remove(k);
            }
        }
    }
    if v["freeze_trainable_layers"].is_null() {
        if let Some(o) = v.as_object_mut() {
            o.remove("freeze_trainable_layers");
        }
    }
    // Rank 0 of an FSDP2 run (`fsdp: {version: 2, world: N, ...}`), wrapped as accelerate
    // wraps it: full sharding over N GPUs, its mixed precision the training's autocast dtype
    // (what the planner derives; checked here).
    if let Some(f) = v.get("fsdp").filter(|f| f.is_object()).cloned() {
        assert_eq!(f["param_dtype"], v["autocast"], "accelerate's param_dtype");
        assert_eq!(
            f["reduce_dtype"], v["autocast"],
            "accelerate's reduce_dtype"
        );
        // Trainer's wrapping: a peft model's decoder layers in the root's unit, else a unit per
        // layer (`distributed::fsdp2_layer_units`).
        let peft = v["full_ft"] != serde_json::Value::Bool(true);
        let wrap = if peft { "peft_trainer" } else { "transformer" };
        assert_eq!(
            f["auto_wrap"].as_str().unwrap_or("transformer"),
            wrap,
            "auto wrap"
        );
        v["gpus_per_node"] = f["world"].clone();
        v["strategy"] = "fsdp_full_shard".into();
        v["fsdp_version"] = f["version"].to_string().into();
    }
    // Rank 0 of a DistributedDataParallel run (`ddp: {world: N, find_unused_parameters, ...}`).
    if let Some(d) = v.get("ddp").filter(|d| d.is_object()).cloned() {
        v["gpus_per_node"] = d["world"].clone();
        v["strategy"] = "ddp".into();
        for k in [
            "find_unused_parameters",
            "bucket_cap_mb",
            "broadcast_buffers",
        ] {
            if !d[k].is_null() {
                v[format!("ddp_{k}")] = d[k].clone();
            }
        }
    }
    // Its cut cross-entropy (`cce: true`, axolotl's plugin) is fused_ce cce.
    if v["cce"] == serde_json::Value::Bool(true) {
        v["fused_ce"] = "cce".into();
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("fsdp");
        o.remove("ddp");
        o.remove("cce");
    }
    let mut s = lorafit::formats::fields::settings_from_json(&v)
        .expect("valid settings")
        .value;
    s.cublas_workspace_config = HARNESS_CUBLAS.into();
    s
}

/// The index of the generated sequence's first event of the second training step, if it has one
/// (a recording of the first step alone ends there).
pub fn second_step_start(t: &lorafit::model::steptrace::Trace) -> Option<usize> {
    t.phases.iter().find(|p| p.1 == 2).map(|p| p.0)
}

/// The JSON objects of a JSONL file of the repository, one per non-empty line.
pub fn jsonl(path: &str) -> Vec<serde_json::Value> {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A harness case's JSON line for `estimate_line`, with [`HARNESS_CUBLAS`] in its settings.
pub fn harness_line(line: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(line).expect("case line is JSON");
    v["settings"]["cublas_workspace_config"] = HARNESS_CUBLAS.into();
    v.to_string()
}

/// One line of the harness's own output with its allocator replay (`measure.py` + `replay.py`,
/// as the `run_cases.py` of `tests/data/reference/unprepared` and `bnb_optim` write it), planned:
/// the architecture, the settings (the harness's target shorthands written out as the modules it
/// adapted), the quick plan (a CUDA GPU's) and the settled plan on the emulated device, and
/// their errors in percent: quick and settled allocated against the measured peak, settled
/// reserved against the replay. Prints them under the case's id.
pub struct MeasuredLine {
    pub arch: lorafit::model::Architecture,
    pub settings: lorafit::model::Settings,
    pub quick: lorafit::model::Plan,
    pub settled: lorafit::model::Plan,
    pub quick_pct: f64,
    pub settled_pct: f64,
    pub reserved_pct: f64,
}

impl MeasuredLine {
    /// Asserts that allocated (quick and settled) and reserved are the measurement's to the byte
    /// (within 0.001 %).
    pub fn assert_to_the_byte(&self, id: &str) {
        for (what, pct) in [
            ("quick", self.quick_pct),
            ("settled", self.settled_pct),
            ("reserved", self.reserved_pct),
        ] {
            assert!(pct.abs() <= 0.001, "{id}: {what} {pct:+.4} %");
        }
    }

    /// Asserts that one rank's weights in the plan, its 4-bit quantization states (none on a
    /// 16-bit base) and the rotary buffers (`inv_freq` and its original copy, 2 × 64 fp32 values
    /// for a head of 128) are what the harness found live before the first step of case `v`;
    /// returns the weights.
    pub fn assert_rank_weights_are_the_baseline(&self, id: &str, v: &serde_json::Value) -> u128 {
        let weights = self.weight_bytes();
        let measured = v["result"]["baseline_live_bytes"]
            .as_u64()
            .expect("live before the step");
        let rotary = 2 * 64 * 4;
        assert_eq!(
            weights + self.quant_state_bytes() + rotary,
            u128::from(measured),
            "{id}: this rank's shards"
        );
        weights
    }

    /// The settled plan's quantization states.
    pub fn quant_state_bytes(&self) -> u128 {
        use lorafit::model::Component;
        self.settled
            .terms
            .iter()
            .filter(|t| t.component == Component::QuantState)
            .map(|t| t.bytes)
            .sum()
    }

    /// The settled plan's weights (frozen and trainable): one rank's shards on several GPUs.
    pub fn weight_bytes(&self) -> u128 {
        use lorafit::model::Component;
        self.settled
            .terms
            .iter()
            .filter(|t| {
                matches!(
                    t.component,
                    Component::FrozenWeights | Component::TrainableWeights
                )
            })
            .map(|t| t.bytes)
            .sum()
    }
}

/// Each measured pair of `cases` (`ID` without a feature, `ID{suffix}` with it; an `ID{suffix}`
/// without its `ID` is skipped): the planner offers `ID` the fix `id`, `check` accepts the fix's
/// settings, and the fix saves exactly what the two measured peaks differ by; where the feature
/// costs memory in the measured steps, the planner does not offer it. Returns the pairs whose
/// fix saves.
pub fn fix_saves_each_measured_pair(
    cases: &[serde_json::Value],
    suffix: &str,
    id: lorafit::planning::fixes::FixId,
    check: impl Fn(&str, &lorafit::model::Settings),
) -> usize {
    let peak = |v: &serde_json::Value| v["result"]["peak_bytes"].as_u64().expect("peak");
    let mut pairs = 0;
    for with in cases
        .iter()
        .filter(|v| v["id"].as_str().unwrap().ends_with(suffix))
    {
        let with_id = with["id"].as_str().unwrap();
        let base_id = with_id.trim_end_matches(suffix);
        let Some(without) = cases.iter().find(|v| v["id"] == base_id) else {
            continue;
        };
        let m = plan_measured_line(without);
        let fixes = lorafit::planning::fixes::suggest(&m.arch, &m.settings, 1u128 << 50, true);
        if peak(with) >= peak(without) {
            // The change costs memory in the measured steps: the planner does not offer it.
            assert!(
                fixes.iter().all(|f| f.id != id),
                "{with_id}: a change that costs memory is offered"
            );
            continue;
        }
        let fix = fixes.iter().find(|f| f.id == id).unwrap_or_else(|| {
            panic!(
                "{base_id}: no {id:?} fix among {:?}",
                fixes.iter().map(|f| f.id).collect::<Vec<_>>()
            )
        });
        check(base_id, &fix.settings);
        let measured = i128::from(peak(without)) - i128::from(peak(with));
        assert_eq!(fix.saved_bytes, measured, "{with_id}: the fix's saving");
        pairs += 1;
    }
    pairs
}

/// The line of `cases` whose `id` is `id`.
pub fn case_of(cases: Vec<serde_json::Value>, id: &str) -> serde_json::Value {
    cases
        .into_iter()
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("{id} missing"))
}

/// Asserts that every measured line of `cases` is planned to the byte — allocated by the quick
/// and the settled plan, reserved against the allocator's replay of the measured step, each
/// within 0.001 % — and returns how many lines there are.
pub fn assert_planned_to_the_byte(cases: &[serde_json::Value]) -> usize {
    for v in cases {
        let id = v["id"].as_str().expect("id");
        let m = plan_measured_line(v);
        for (what, pct) in [
            ("quick", m.quick_pct),
            ("settled", m.settled_pct),
            ("reserved", m.reserved_pct),
        ] {
            assert!(pct.abs() <= 0.001, "{id}: {what} {pct:+.4} %");
        }
    }
    cases.len()
}

pub fn plan_measured_line(v: &serde_json::Value) -> MeasuredLine {
    use lorafit::model::{plan, plan_simulated_on, steptrace::Device};
    let id = v["id"].as_str().expect("id");
    let arch = lorafit::formats::catalog::resolve_model(&v["model"])
        .expect("model")
        .value;
    let mut settings = v["settings"].clone();
    settings["target_modules"] = v["target_modules_list"].clone();
    let settings = harness_settings(&settings);
    let measured = v["result"]["peak_bytes"].as_u64().expect("peak") as f64;
    let replayed = v["replay"]["max_reserved"].as_u64().expect("replay") as f64;
    let pct = |x: u128, of: f64| (x as f64 - of) / of * 100.0;
    let quick = plan(&arch, &settings).expect("plans");
    let settled = plan_simulated_on(&arch, &settings, Device::Emulated).expect("plans");
    let (quick_pct, settled_pct, reserved_pct) = (
        pct(quick.peak_allocated_bytes, measured),
        pct(settled.peak_allocated_bytes, measured),
        pct(settled.peak_reserved_bytes, replayed),
    );
    println!(
        "{id:<26} allocated: quick {quick_pct:+.3} %, settled {settled_pct:+.3} %; reserved {reserved_pct:+.3} %"
    );
    MeasuredLine {
        arch,
        settings,
        quick,
        settled,
        quick_pct,
        settled_pct,
        reserved_pct,
    }
}
