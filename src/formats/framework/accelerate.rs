//! accelerate's launch config (`accelerate config`'s YAML, or the same keys as JSON, as
//! ms-swift's examples pass it to `accelerate launch --config_file`), and ms-swift's own FSDP
//! JSON (`--fsdp file.json`: Trainer's `fsdp` options and `fsdp_config`): how many processes on how
//! many machines, DDP, FSDP (`fsdp_config`) or DeepSpeed (`deepspeed_config`, or its JSON by
//! path) with their offload, and mixed precision. It says how a run is launched, not what it
//! trains, so it completes a training config ([`super::apply_launch`]) and is refused alone.
//!
//! accelerate's `mixed_precision` reaches Trainer through `ACCELERATE_MIXED_PRECISION` when the
//! training arguments set neither `bf16` nor `fp16` (accelerate `commands/launch.py`,
//! `Accelerator(mixed_precision=None)` reads it): `bf16` / `fp16` turn autocast on; `no`
//! leaves the training config's choice.

use super::{add_offload, deepspeed_by_name, flag, int_text, Reader, Rule, Table};
use serde_json::Value;

/// The launch config's keys.
pub(super) const TABLE: Table = &[
    (
        "num_machines",
        Rule::Read(|rd, v| {
            let n = int_text(rd.key(), v)?.max(1);
            rd.set("nodes", &n.to_string())
        }),
    ),
    ("num_processes", Rule::Read(processes)),
    ("distributed_type", Rule::Read(distributed)),
    ("mixed_precision", Rule::Read(mixed_precision)),
    // ms-swift's FSDP JSON carries Trainer's `fsdp` options beside `fsdp_config`.
    ("fsdp", Rule::Read(super::hf::fsdp)),
    (
        "fsdp_config",
        Rule::Read(|rd, v| rd.section(v, &[super::axolotl::FSDP_CONFIG])),
    ),
    (
        "deepspeed_config",
        Rule::Read(|rd, v| rd.section(v, &[DEEPSPEED])),
    ),
    (
        "use_cpu",
        Rule::Read(|rd, v| {
            if flag(rd.key(), v)? {
                Err(format!("{}: training on the CPU is not planned", rd.key()))
            } else {
                rd.r.ignored.push(rd.key().to_string());
                Ok(())
            }
        }),
    ),
    (
        "dynamo_config",
        Rule::NotModeled("torch.compile's fused kernels and their saved tensors: planned eager"),
    ),
    ("compute_environment", Rule::NoEffect),
    ("debug", Rule::NoEffect),
    ("machine_rank", Rule::NoEffect),
    ("main_training_function", Rule::NoEffect),
    ("main_process_ip", Rule::NoEffect),
    ("main_process_port", Rule::NoEffect),
    ("rdzv_backend", Rule::NoEffect),
    ("same_network", Rule::NoEffect),
    ("gpu_ids", Rule::NoEffect),
    ("downcast_bf16", Rule::NoEffect),
    ("enable_cpu_affinity", Rule::NoEffect),
    ("tpu_env", Rule::NoEffect),
    ("tpu_use_cluster", Rule::NoEffect),
    ("tpu_use_sudo", Rule::NoEffect),
];

/// `deepspeed_config`: accelerate's own spelling of a ZeRO config, or the JSON's path.
const DEEPSPEED: Table = &[
    (
        "deepspeed_config_file",
        Rule::Read(|rd, v| match v.as_str() {
            Some(p) => deepspeed_by_name(rd, p),
            None => Err(format!(
                "{}: expected the path of a DeepSpeed JSON",
                rd.key()
            )),
        }),
    ),
    ("zero_stage", Rule::Read(super::deepspeed::stage)),
    (
        "offload_optimizer_device",
        Rule::Read(|rd, v| device(rd, v, "optimizer")),
    ),
    (
        "offload_param_device",
        Rule::Read(|rd, v| device(rd, v, "params")),
    ),
    ("gradient_accumulation_steps", Rule::To("grad_accum")),
    (
        "zero3_save_16bit_model",
        Rule::Read(|rd, v| {
            if flag(rd.key(), v)? {
                rd.confirms("strategy");
            } else {
                rd.r.ignored.push(rd.key().to_string());
            }
            Ok(())
        }),
    ),
    ("zero3_init_flag", Rule::NoEffect),
    ("gradient_clipping", Rule::NoEffect),
];

/// `num_processes`: every process of the job, one GPU each, split over `num_machines`.
fn processes(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let n = int_text(rd.key(), v)?.max(1);
    let machines = rd
        .other("num_machines")
        .map(|m| int_text("num_machines", m))
        .transpose()?
        .unwrap_or(1)
        .max(1);
    if n % machines != 0 {
        return Err(format!(
            "{}: {n} processes do not split evenly over {machines} machines",
            rd.key()
        ));
    }
    rd.set("gpus_per_node", &(n / machines).to_string())
}

/// `distributed_type`: `NO` (one process), `MULTI_GPU` (DDP), `FSDP`, `DEEPSPEED`.
fn distributed(rd: &mut Reader, v: &Value) -> Result<(), String> {
    // YAML 1.1 reads an unquoted NO as false.
    let t = match v {
        Value::Bool(false) => "NO".to_string(),
        Value::String(s) => s.to_ascii_uppercase(),
        _ => {
            return Err(format!(
                "{}: expected NO, MULTI_GPU, FSDP or DEEPSPEED",
                rd.key()
            ))
        }
    };
    match t.as_str() {
        "NO" => rd.set("strategy", "single"),
        "MULTI_GPU" => rd.set("strategy", "ddp"),
        // FULL_SHARD unless fsdp_config says otherwise (read after this key).
        "FSDP" => rd.set("strategy", "fsdp"),
        // The stage comes from deepspeed_config (read after this key).
        "DEEPSPEED" => {
            if rd.other("deepspeed_config").is_none() {
                return Err(format!(
                    "{}: DEEPSPEED without a deepspeed_config says no ZeRO stage",
                    rd.key()
                ));
            }
            Ok(())
        }
        other => Err(format!(
            "{}: {other} is not planned (NO, MULTI_GPU, FSDP and DEEPSPEED are)",
            rd.key()
        )),
    }
}

fn mixed_precision(rd: &mut Reader, v: &Value) -> Result<(), String> {
    // YAML 1.1 reads an unquoted no as false.
    let t = match v {
        Value::Bool(false) => "no".to_string(),
        Value::String(s) => s.to_ascii_lowercase(),
        _ => {
            return Err(format!(
                "{}: expected no, bf16, fp16 or fp8, got {v}",
                rd.key()
            ))
        }
    };
    match t.as_str() {
        "bf16" => rd.set("autocast", "bf16"),
        "fp16" => rd.set("autocast", "fp16"),
        "no" => {
            rd.confirms("autocast");
            Ok(())
        }
        "fp8" => {
            rd.not_modeled(
                "FP8 training: not modelled; planned with the training config's precision",
            );
            Ok(())
        }
        _ => Err(format!(
            "{}: expected no, bf16, fp16 or fp8, got {v}",
            rd.key()
        )),
    }
}

/// `offload_*_device`: `cpu` or `nvme` moves it off the GPU; `none` keeps it.
fn device(rd: &mut Reader, v: &Value, what: &str) -> Result<(), String> {
    match v.as_str() {
        Some("cpu") => add_offload(rd, &[what]),
        Some("nvme") => {
            add_offload(rd, &[what])?;
            rd.not_modeled(
                "offload to NVMe: planned as offload to host memory (the GPU side is the same)",
            );
            Ok(())
        }
        Some("none") | None => {
            rd.confirms("offload");
            Ok(())
        }
        Some(o) => Err(format!("{}: expected cpu, nvme or none, got {o}", rd.key())),
    }
}
