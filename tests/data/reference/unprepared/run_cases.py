"""Measures cases.jsonl: full-size QLoRA steps whose 4-bit model is NOT passed through peft's
prepare_model_for_kbit_training (what LLaMA-Factory, axolotl, ms-swift and TRL >= 0.22 run), with
the harness (../../harness, transformers 5.24 + peft 0.21.2 + bitsandbytes 0.50.2 + PyTorch 2.15,
emulated sm_90 device), each also replayed through PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py > cases.jsonl"""
import os
import sys

BASE = {"quant": "nf4", "double_quant": True, "prepare_kbit": False, "dtype": "bf16",
        "autocast": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32,
        "lora_dropout": 0.05, "optimizer": "adamw_torch_fused"}
# CodeLlama-34B's published shapes (data/models.json in the repository), two decoder layers.
CODELLAMA_34B_2L = {"family": "llama", "hidden_size": 8192, "intermediate_size": 22016, "num_hidden_layers": 2,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32016,
                    "tie_word_embeddings": False}
CASES = {
    "llama2-7b_gc_s2048": {"model": "llama2-7b", "seq": 2048, "batch": 1, "grad_ckpt": True, "target_modules": "all-linear"},
    "llama2-7b_qv_b2_s1024": {"model": "llama2-7b", "seq": 1024, "batch": 2, "grad_ckpt": False, "target_modules": "qv"},
    "mistral-7b_noac_gc_b2": {"model": "mistral-7b", "seq": 2048, "batch": 2, "grad_ckpt": True, "target_modules": "qkvo", "autocast": None},
    "qwen2.5-7b_gc_s4096": {"model": "qwen2.5-7b", "seq": 4096, "batch": 1, "grad_ckpt": True, "target_modules": "all-linear"},
    "llama3-8b_gc_b2": {"model": "llama3-8b", "seq": 2048, "batch": 2, "grad_ckpt": True, "target_modules": "all-linear"},
    "gemma2-2b_eager_gc_b2": {"model": "gemma2-2b", "seq": 1024, "batch": 2, "grad_ckpt": True, "target_modules": "all-linear", "attn_impl": "eager"},
    "qwen3-4b_nogc": {"model": "qwen3-4b", "seq": 2048, "batch": 1, "grad_ckpt": False, "target_modules": "all-linear"},
    "phi3-mini_gc": {"model": "phi3-mini-4k", "seq": 2048, "batch": 1, "grad_ckpt": True, "target_modules": "all-linear"},
    # Fewer adapted modules, a higher peak: with down_proj unadapted its 4-bit backward runs
    # before the layer is recomputed (tests/it/properties.rs).
    "codellama-34b-2l_vup_gc_b4": {"model": CODELLAMA_34B_2L, "seq": 8192, "batch": 4, "grad_ckpt": True, "target_modules": ["v_proj", "up_proj"], "lora_r": 1, "lora_dropout": 0.0},
    "codellama-34b-2l_all_gc_b4": {"model": CODELLAMA_34B_2L, "seq": 8192, "batch": 4, "grad_ckpt": True, "target_modules": "all-linear", "lora_r": 1, "lora_dropout": 0.0},
}
here = os.getcwd()
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run({cid: dict(BASE, **change) for cid, change in CASES.items()})
