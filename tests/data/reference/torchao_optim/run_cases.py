"""Measures cases.jsonl: training steps with torchao's low-bit AdamW as HF Trainer builds it for
optim="adamw_torch_4bit" / "adamw_torch_8bit" (AdamW4bit / AdamW8bit, block_size 256), each beside
the same step with torch's AdamW, with the harness (../../harness, transformers 5.24 + peft 0.21.2 +
torchao 0.18 + PyTorch 2.15, emulated sm_90 device), each also replayed through PyTorch's caching
allocator. The compiled update kernels are not run on the emulated device (see the harness's
METHODS-EXTENSION.md): the states are measured, the update is taken to work in place.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

FULL = {"model": "llama3.2-1b", "dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "seq": 1024,
        "batch": 1, "grad_ckpt": True, "full_ft": True}
LORA = {"model": "llama2-7b", "dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "seq": 1024,
        "batch": 1, "grad_ckpt": False, "lora_r": 64, "lora_alpha": 128, "lora_dropout": 0.05,
        "target_modules": "all-linear"}

CASES = {
    # Full fine-tuning of Llama-3.2-1B in bf16 (its tied embedding the largest tensor), checkpointing.
    "llama3.2-1b_full_gc_s1024": dict(FULL, optimizer="adamw_torch"),
    "llama3.2-1b_full_gc_s1024_tao4": dict(FULL, optimizer="adamw_torch_4bit"),
    "llama3.2-1b_full_gc_s1024_tao8": dict(FULL, optimizer="adamw_torch_8bit"),
    # LoRA r64 all-linear on Llama-2-7B: fp32 adapters, all of them quantized states.
    "llama2-7b_lora64_s1024": dict(LORA, optimizer="adamw_torch"),
    "llama2-7b_lora64_s1024_tao4": dict(LORA, optimizer="adamw_torch_4bit"),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
