"""Measures cases.jsonl: rank 0 of FSDP1 runs (FullyShardedDataParallel as accelerate 1.15
prepares it for fsdp_version 1: FULL_SHARD, BACKWARD_PRE, limit_all_gathers, use_orig_params;
a peft model with peft's fsdp_auto_wrap_policy, as transformers' Trainer sets it) under
torch.distributed's fake process group, with the harness (../../harness, transformers 5.24 +
peft 0.21.2 + PyTorch 2.15, emulated sm_90 device), each also replayed through PyTorch's caching
allocator with every allocation on its CUDA stream.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

# The published FSDP runs' recipe (fms-acceleration's A100 benchmarks): a bf16 model, LoRA in fp32
# on q/k/v/o, r 16, dropout 0.1, checkpointing; no mixed precision policy (Trainer's bf16 flag off).
BASE = {"dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 16,
        "lora_dropout": 0.1, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "optimizer": "adamw_torch"}
# Trainer's bf16 flag: the bf16 model under bf16 autocast, MixedPrecision(bf16) for FSDP, LoRA in
# fp32, all-linear (the FSDP2 cases' recipe).
MIXED = {"dtype": "bf16", "autocast": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32,
         "lora_dropout": 0.05, "target_modules": "all-linear", "optimizer": "adamw_torch"}


def fsdp(world, peft=True, mixed=None):
    return {"version": 1, "world": world, "param_dtype": mixed, "reduce_dtype": mixed,
            "auto_wrap": "peft_trainer" if peft else "transformer"}


CASES = {
    "mistral-7b_fsdp1x2_lora_gc_b2_s4096": dict(BASE, model="mistral-7b", seq=4096, batch=2, grad_ckpt=True,
                                                fsdp=fsdp(2)),
    # LoRA over 2 GPUs without checkpointing, bf16 mixed precision.
    "llama2-7b_fsdp1x2_lora_s1024": dict(MIXED, model="llama2-7b", seq=1024, batch=1, grad_ckpt=False,
                                         fsdp=fsdp(2, mixed="bf16")),
    # LoRA over 8 GPUs with checkpointing and long rows.
    "llama2-7b_fsdp1x8_lora_gc_s4096": dict(MIXED, model="llama2-7b", seq=4096, batch=1, grad_ckpt=True,
                                            fsdp=fsdp(8, mixed="bf16")),
    # Full fine-tuning over 8 GPUs, a unit per decoder layer.
    "llama3-8b_fsdp1x8_full_gc_s2048": dict(MIXED, model="llama3-8b", seq=2048, batch=1, grad_ckpt=True,
                                            full_ft=True, fsdp=fsdp(8, peft=False, mixed="bf16")),
    # Qwen2.5-7B over 4 GPUs, two rows, q/v adapters, checkpointing.
    "qwen2.5-7b_fsdp1x4_lora_qv_gc_b2_s2048": dict(MIXED, model="qwen2.5-7b", seq=2048, batch=2, grad_ckpt=True,
                                                   target_modules="qv", fsdp=fsdp(4, mixed="bf16")),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
