//! A DeepSpeed JSON (as Trainer and accelerate pass it to `deepspeed.initialize`): the ZeRO
//! stage and offload, the mixed precision, and the batch numbers when they are not `"auto"`
//! (Trainer fills those from its own arguments, `transformers/integrations/deepspeed.py`,
//! `HfTrainerDeepSpeedConfig.trainer_config_process`).

use super::{
    add_offload, assume_gpus, flag, int_text, read_with, Reader, Reading, Rule, Source, Table,
};
use serde_json::{Map, Value};

/// The DeepSpeed keys, also read under `deepspeed.` when a config refers to the file.
pub(super) const TABLE: Table = &[
    ("zero_optimization", Rule::Read(|rd, v| rd.section(v, &[ZERO]))),
    ("bf16", Rule::Read(|rd, v| precision(rd, v, "bf16"))),
    ("fp16", Rule::Read(|rd, v| precision(rd, v, "fp16"))),
    ("train_micro_batch_size_per_gpu", Rule::Read(|rd, v| unless_auto(rd, v, "batch"))),
    ("gradient_accumulation_steps", Rule::Read(|rd, v| unless_auto(rd, v, "grad_accum"))),
    ("optimizer", Rule::NotModeled("DeepSpeed's own optimizer (FusedAdam, or DeepSpeedCPUAdam when offloaded): planned as the Trainer's `optim`, with the same states per parameter")),
    ("activation_checkpointing", Rule::NotModeled("DeepSpeed's activation checkpointing (partitioned, CPU): planned with transformers' gradient checkpointing when it is on")),
    ("train_batch_size", Rule::NoEffect),
    ("gradient_clipping", Rule::NoEffect),
    ("steps_per_print", Rule::NoEffect),
    ("wall_clock_breakdown", Rule::NoEffect),
    ("scheduler", Rule::NoEffect),
    ("zero_allow_untested_optimizer", Rule::NoEffect),
    ("flops_profiler", Rule::NoEffect),
    ("tensorboard", Rule::NoEffect),
];

const BUCKETS: &str = "a communication bucket, prefetch or persistence size: the plan takes DeepSpeed's defaults (a reduce bucket of 5e8 elements), `\"auto\"` included";

const ZERO: Table = &[
    ("stage", Rule::Read(stage)),
    ("offload_optimizer", Rule::Read(|rd, v| offload(rd, v, "optimizer"))),
    ("offload_param", Rule::Read(|rd, v| offload(rd, v, "params"))),
    ("reduce_bucket_size", Rule::NotModeled(BUCKETS)),
    ("allgather_bucket_size", Rule::NotModeled(BUCKETS)),
    ("stage3_prefetch_bucket_size", Rule::NotModeled(BUCKETS)),
    ("stage3_param_persistence_threshold", Rule::NotModeled(BUCKETS)),
    ("stage3_max_live_parameters", Rule::NotModeled(BUCKETS)),
    ("stage3_max_reuse_distance", Rule::NotModeled(BUCKETS)),
    ("sub_group_size", Rule::NotModeled(BUCKETS)),
    ("overlap_comm", Rule::NotModeled("overlap_comm keeps the reduce buckets of two steps of communication alive: not modelled")),
    ("stage3_gather_16bit_weights_on_model_save", Rule::Read(gather_on_save)),
    ("contiguous_gradients", Rule::NoEffect),
    ("allgather_partitions", Rule::NoEffect),
    ("reduce_scatter", Rule::NoEffect),
    ("round_robin_gradients", Rule::NoEffect),
];

/// The ZeRO stage (0 is DDP), as DeepSpeed and accelerate's `zero_stage` spell it.
pub(super) fn stage(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let s = int_text(rd.key(), v)?;
    let strategy = match s {
        0 => "ddp",
        1 => "zero1",
        2 => "zero2",
        3 => "zero3",
        _ => return Err(format!("{}: ZeRO stages are 0 to 3, got {s}", rd.key())),
    };
    rd.set("strategy", strategy)
}

/// `offload_optimizer` / `offload_param`: `{"device": "cpu" | "nvme" | "none", …}`.
fn offload(rd: &mut Reader, v: &Value, what: &str) -> Result<(), String> {
    let device = v
        .get("device")
        .and_then(Value::as_str)
        .unwrap_or("none")
        .to_ascii_lowercase();
    match device.as_str() {
        "cpu" => add_offload(rd, &[what]),
        "none" => {
            rd.confirms("offload");
            Ok(())
        }
        "nvme" => {
            rd.not_modeled("offload to NVMe (ZeRO-Infinity): planned without the offload");
            Ok(())
        }
        other => Err(format!(
            "{}: unknown device {other:?} (cpu, nvme or none)",
            rd.key()
        )),
    }
}

/// `bf16` / `fp16`: `{"enabled": true | false | "auto"}`; `"auto"` follows Trainer's flag.
fn precision(rd: &mut Reader, v: &Value, dtype: &str) -> Result<(), String> {
    match v.get("enabled") {
        Some(Value::String(a)) if a == "auto" => {
            rd.r.ignored.push(format!("{}.enabled", rd.key()));
            Ok(())
        }
        Some(e) => {
            if flag(rd.key(), e)? {
                rd.set("dtype", dtype)?;
                rd.set("autocast", dtype)
            } else {
                rd.confirms("autocast");
                Ok(())
            }
        }
        None => {
            rd.r.ignored.push(rd.key().to_string());
            Ok(())
        }
    }
}

/// A number unless `"auto"` (then Trainer's argument decides: ignored here).
fn unless_auto(rd: &mut Reader, v: &Value, setting: &'static str) -> Result<(), String> {
    if v.as_str() == Some("auto") {
        rd.r.ignored.push(rd.key().to_string());
        return Ok(());
    }
    let n = int_text(rd.key(), v)?;
    rd.set(setting, &n.to_string())
}

fn gather_on_save(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.confirms("strategy");
    } else {
        rd.not_modeled("saving ZeRO-3 shards without the 16-bit gather: the save phase is planned with the gather");
    }
    Ok(())
}

/// Reads a DeepSpeed JSON on its own.
pub(super) fn read(o: &Map<String, Value>) -> Result<Reading, String> {
    read_with(Source::DeepSpeed, o, &[], &[TABLE], |rd| {
        assume_gpus(
            rd,
            "several GPUs (the DeepSpeed JSON does not say how many)",
        )
    })
}
