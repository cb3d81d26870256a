"""Measures cases.jsonl: LoRA steps of GLM-4.5-Air at full depth (46 layers: one dense, 45 with 128
routed experts and a shared expert, sigmoid group routing), with the harness (../../harness,
transformers 5.24 + peft 0.21.2 + PyTorch 2.15, emulated sm_90 device), each also replayed through
PyTorch's caching allocator. LoRA on q, k, v, o: a list that names an MLP projection makes peft
0.21 adapt the fused expert parameters as well (see README.md).
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

BASE = {"model": "glm4.5-air", "dtype": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32,
        "target_modules": "qkvo"}
CASES = {
    "glm4.5-air_bf16_s1024_b1_qkvo_do0.05_nogc": dict(BASE, seq=1024, batch=1, lora_dropout=0.05, grad_ckpt=False),
    "glm4.5-air_bf16_s2048_b1_qkvo_do0.05_gc": dict(BASE, seq=2048, batch=1, lora_dropout=0.05, grad_ckpt=True),
    "glm4.5-air_bf16_s4096_b2_qkvo_do0_gc": dict(BASE, seq=4096, batch=2, lora_dropout=0.0, grad_ckpt=True),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
