"""Measures cases.jsonl: training steps with bitsandbytes' AdamW as HF Trainer builds it
(optim adamw_bnb_8bit, paged_adamw_8bit, paged_adamw_32bit), with the harness (../../harness,
transformers 5.24 + peft 0.21.2 + bitsandbytes 0.50.2 + PyTorch 2.15, emulated sm_90 device),
each also replayed through PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

QLORA = {"quant": "nf4", "double_quant": True, "prepare_kbit": False, "dtype": "bf16",
         "autocast": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32,
         "lora_dropout": 0.05, "target_modules": "all-linear", "grad_ckpt": True}
LORA = {"quant": None, "dtype": "bf16", "autocast": "bf16", "attn_impl": "sdpa", "lora_alpha": 32,
        "lora_dropout": 0.0}
CASES = {
    # The QLoRA recipe: 4-bit base, paged 8-bit AdamW. States of a tensor under 1e5 values stay
    # in the caching allocator (optimizer.py get_state_buffer).
    "llama2-7b_qlora_paged8": dict(QLORA, model="llama2-7b", seq=2048, batch=1, optimizer="paged_adamw_8bit"),
    "llama2-7b_qlora_8bit": dict(QLORA, model="llama2-7b", seq=2048, batch=1, optimizer="adamw_8bit"),
    "llama2-7b_qlora_paged32": dict(QLORA, model="llama2-7b", seq=2048, batch=1, optimizer="paged_adamw_32bit"),
    # Rank 4 with 512-wide k/v: their lora_B (2048 values) is under min_8bit_size (4096) and
    # gets 32-bit states.
    "qwen2.5-7b_r4_qkvo_8bit": dict(LORA, model="qwen2.5-7b", seq=1024, batch=1, lora_r=4, target_modules="qkvo",
                                     grad_ckpt=False, optimizer="adamw_8bit"),
    # Full fine-tuning: every nn.Embedding weight (here the tied embedding) gets 32-bit states.
    "llama3.2-1b_full_8bit": dict(LORA, model="llama3.2-1b", seq=1024, batch=1, full_ft=True, grad_ckpt=True,
                                  optimizer="adamw_8bit"),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
