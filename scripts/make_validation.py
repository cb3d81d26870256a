#!/usr/bin/env python3
"""Writes data/validation.json: the measured cases the page's "How accurate is this?" view and
`lorafit validate` compare the model with, compacted from tests/data/reference (the model's
inputs verbatim, the measured figures, nothing else). Re-run after updating tests/data:
    python3 scripts/make_validation.py
tests/it/validation.rs fails when the committed file differs from what this script writes."""
import json, os, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ref = os.path.join(root, "tests/data/reference")

reserved = {}
for line in open(os.path.join(ref, "allocator/reserved.jsonl")):
    r = json.loads(line)
    reserved[r["id"]] = r["default"]

for line in open(os.path.join(ref, "moe/reserved.jsonl")):
    r = json.loads(line)
    reserved[r["id"]] = r["default"]

cases = []
# The dense reference cases, then the full-size mixture-of-experts cases (the MoE file's small
# CPU rows measure a CPU step, not the GPU step planned).
lines = list(open(os.path.join(ref, "cases.jsonl"))) + [
    l for l in open(os.path.join(ref, "moe/cases.jsonl")) if json.loads(l)["method"] != "real-cpu"]
for line in lines:
    c = json.loads(line)
    m = c["measured"]
    # The harness's emulated GPU runs no cuBLAS: its steps hold no cuBLAS workspace.
    row = {
        "id": c["id"],
        "model": c["model"],
        "settings": dict(c["settings"], cublas_workspace_config=":0:0"),
        "peak_allocated_bytes": m["peak_bytes"],
        "peak_phase": m["peak_phase"],
    }
    if c["id"] in reserved:
        row["replayed_max_allocated_bytes"] = reserved[c["id"]]["max_allocated"]
        row["replayed_max_reserved_bytes"] = reserved[c["id"]]["max_reserved"]
    cases.append(row)

def harness_lines(folder, suffix="", files=("cases.jsonl",)):
    """A data folder of the harness's own output lines (measure.py's or measure_vl.py's, with the
    replay inline): the harness's target shorthands written out as the modules they adapted (where
    its settings do not list them already), its `full_ft` as the settings table's finetuning_type
    full, its TRL SFTTrainer step as an SFT step with logits fused."""
    for line in (l for f in files for l in open(os.path.join(ref, folder, f))):
        c = json.loads(line)
        r = c["result"]
        targets = c.get("target_modules_list", c["settings"]["target_modules"])
        settings = dict(c["settings"], cublas_workspace_config=":0:0", target_modules=targets)
        if settings.pop("full_ft", False):
            settings["finetuning_type"] = "full"
        if settings.get("method_kind") == "trl_sft":
            settings["method_kind"] = "sft"
            settings["logits"] = "fused"
        cases.append({
            "id": c["id"] + suffix,
            "model": c["model"],
            "settings": settings,
            "peak_allocated_bytes": r["peak_bytes"],
            "peak_phase": r["peak_phase"],
            "replayed_max_allocated_bytes": c["replay"]["max_allocated"],
            "replayed_max_reserved_bytes": c["replay"]["max_reserved"],
        })


# QLoRA steps without prepare_model_for_kbit_training; steps with bitsandbytes' AdamW as Trainer
# builds it; steps with Liger-Kernel's RMSNorm, SwiGLU / GeGLU and RoPE beside the same steps
# without them (the harness's `liger_kernel` list is the settings table's).
harness_lines("unprepared", "_no-prepare-kbit")
harness_lines("bnb_optim")
harness_lines("liger")
# SFT steps as TRL's SFTTrainer runs them (its fused LM head: the harness's method_kind
# "trl_sft", the settings table's logits "fused") beside the same steps as Trainer runs them.
harness_lines("trl_sft")
# Steps on an LLM.int8 base (bitsandbytes Linear8bitLt), one beside the same step on nf4.
harness_lines("int8")
# The 2026 families' steps (measure_vl.py's lines: Qwen3.5, Qwen3.5-MoE and Qwen3-Next text steps,
# then the vision-language steps with their images in the settings table's names; full depth, the
# config.json they were built from as the model, the adapted modules by name).
harness_lines("models26", files=("cases.jsonl", "vl_cases.jsonl"))

# Published real-GPU runs (A100-80GB, torch 2.4.1, transformers 4.48.1): their settings as the
# published schema gives them, with the software versions; lorafit reads them as `estimate
# --jsonl` reads such a line (formats/jsonl.rs: num_gpus and FSDP's sharding, lora_param_dtype, and
# what the transformers and TRL versions decide). Every other mapping decision is the row's own
# `assumptions`.
published = []
for line in open(os.path.join(ref, "published_gpu.jsonl")):
    d = json.loads(line)
    meas = d["measured"]
    published.append({
        "id": d["id"],
        "gpu_mem_gib": d["gpu_mem_gib"],
        "model": d["model_config"],
        "settings": d["settings"],
        "max_allocated_bytes": meas["max_allocated_bytes"],
        "nvidia_smi_bytes": meas["nvidia_smi_mib"] * 2**20,
        "oom": meas["oom"],
        "software": "torch {torch}, transformers {transformers}, peft {peft}, bitsandbytes {bitsandbytes}, flash-attn {flash-attn}".format(**d["software"]),
        "versions": d["software"],
    })

# Runs on a real H200 (the harness's gpu_probe.py, torch 2.11): the settings are lorafit's
# already; nvidia-smi is NVML's used memory at the end less the reading before CUDA started
# (NVML counts the driver's own reservation, which nvidia-smi's table leaves out).
for line in open(os.path.join(ref, "gpu_probe_h200.jsonl")):
    d = json.loads(line)
    meas = d["measured"]
    published.append({
        "id": d["id"],
        "gpu_mem_gib": 143771 / 1024,
        "model": d["model"],
        "settings": d["settings"],
        "max_allocated_bytes": meas["max_allocated"],
        "nvidia_smi_bytes": round((meas["nvml_used_mib_end"] - meas["nvml_used_mib_idle"]) * 2**20),
        "oom": False,
        "software": "torch {torch}, transformers {transformers}, peft {peft}".format(**d["versions"]),
    })

out = {
    "source": "tests/data/reference (cases.jsonl, allocator/reserved.jsonl, moe/cases.jsonl, moe/reserved.jsonl, unprepared/cases.jsonl, bnb_optim/cases.jsonl, liger/cases.jsonl, trl_sft/cases.jsonl, int8/cases.jsonl, models26/cases.jsonl, models26/vl_cases.jsonl, published_gpu.jsonl, gpu_probe_h200.jsonl); see tests/data/README.md",
    "cases": cases,
    "published": published,
}
text = json.dumps(out, separators=(",", ":"), sort_keys=True) + "\n"
path = os.path.join(root, "data/validation.json")
if len(sys.argv) > 1 and sys.argv[1] == "--check":
    sys.exit(0 if open(path).read() == text else 1)
open(path, "w").write(text)
print(f"{len(cases)} cases, {len(published)} published runs -> data/validation.json ({len(text)} bytes)")
