"""Measures cases.jsonl: rank 0 of FSDP2 runs (accelerate 1.15's fully_shard wrapping, bf16 mixed
precision) under torch.distributed's fake process group, with the harness (../../harness,
transformers 5.24 + peft 0.21.2 + PyTorch 2.15, emulated sm_90 device), each also replayed
through PyTorch's caching allocator with every allocation on its CUDA stream.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

BASE = {"dtype": "bf16", "autocast": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32,
        "lora_dropout": 0.05, "target_modules": "all-linear", "optimizer": "adamw_torch"}


def fsdp(world, peft=True):
    # A peft model under transformers' Trainer keeps its decoder layers in the root's unit
    # ("peft_trainer"); full fine-tuning gets a unit per layer ("transformer").
    return {"version": 2, "world": world, "param_dtype": "bf16", "reduce_dtype": "bf16",
            "auto_wrap": "peft_trainer" if peft else "transformer"}


CASES = {
    # LoRA over 2 GPUs without checkpointing: the layers' activations dominate.
    "llama2-7b_fsdp2x2_lora_s1024": dict(BASE, model="llama2-7b", seq=1024, batch=1, grad_ckpt=False,
                                         fsdp=fsdp(2)),
    # LoRA over 8 GPUs with checkpointing and long rows: the frozen base is an eighth per GPU at
    # rest, and whole from the forward's start to the end of backward (Trainer's wrapping).
    "llama2-7b_fsdp2x8_lora_gc_s4096": dict(BASE, model="llama2-7b", seq=4096, batch=1, grad_ckpt=True,
                                            fsdp=fsdp(8)),
    # Full fine-tuning over 8 GPUs: fp32 master shards, their AdamW states an eighth each.
    "llama3-8b_fsdp2x8_full_gc_s2048": dict(BASE, model="llama3-8b", seq=2048, batch=1, grad_ckpt=True,
                                            full_ft=True, fsdp=fsdp(8, peft=False)),
    # Qwen2.5-7B over 4 GPUs, two rows, q/v adapters, checkpointing.
    "qwen2.5-7b_fsdp2x4_lora_qv_gc_b2_s2048": dict(BASE, model="qwen2.5-7b", seq=2048, batch=2, grad_ckpt=True,
                                                   target_modules="qv", fsdp=fsdp(4)),
    # Llama 3.2 3B's tied embedding over 2 GPUs, trained in full: the embedding sits in the
    # [norm, embedding, lm_head] unit, gathered from the first token on.
    "llama3.2-3b_fsdp2x2_full_s1024": dict(BASE, model="llama3.2-3b", seq=1024, batch=1, grad_ckpt=False,
                                           full_ft=True, fsdp=fsdp(2, peft=False)),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
