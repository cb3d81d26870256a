"""Measures cases.jsonl: training steps with cut cross-entropy as axolotl's CutCrossEntropyPlugin installs
it (`cut_cross_entropy: true`: `cce_patch(model_type)` from axolotl-ai-cloud/ml-cross-entropy, commit 5f0c7a7,
version 25.5.2, its defaults; its Triton kernels stubbed: on the emulated device only its Python wrappers'
allocations run) beside the same steps without it, with the harness (../../harness, transformers 5.24 +
peft 0.21.2 + bitsandbytes 0.50.2 + PyTorch 2.15, emulated sm_90 device), each also replayed through
PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

LORA = {"quant": None, "dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "lora_r": 16,
        "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear"}
# QLoRA as LLaMA-Factory and axolotl with cut_cross_entropy run it: a 4-bit base whose head stays in the
# compute dtype (no prepare_model_for_kbit_training), bf16 autocast, checkpointing.
QLORA = dict(LORA, quant="nf4", double_quant=True, prepare_kbit=False, autocast="bf16", grad_ckpt=True)
CASES = {}
for cid, c in {
    "llama2-7b_lora_s2048": dict(LORA, model="llama2-7b", seq=2048, batch=1, grad_ckpt=False),
    # Llama 3's 128256-token vocabulary, checkpointed: the head's logits are the step's peak
    "llama3-8b_lora_gc_b2_s4096": dict(LORA, model="llama3-8b", seq=4096, batch=2, grad_ckpt=True),
    "qwen2.5-7b_qlora_s4096": dict(QLORA, model="qwen2.5-7b", seq=4096, batch=1),
    "qwen3-8b_lora_gc_b2_s2048": dict(LORA, model="qwen3-8b", seq=2048, batch=2, grad_ckpt=True),
    # Gemma 2's 256000-token vocabulary and its final-logit softcap
    "gemma2-2b_lora_eager_s2048": dict(LORA, model="gemma2-2b", seq=2048, batch=1, grad_ckpt=False,
                                       attn_impl="eager"),
    # full fine-tuning: the tied head's gradient from the kernel
    "qwen2.5-0.5b_full_gc_b4_s2048": dict(model="qwen2.5-0.5b", dtype="bf16", autocast=None, full_ft=True,
                                          seq=2048, batch=4, grad_ckpt=True, attn_impl="sdpa"),
}.items():
    CASES[cid] = dict(c, cce=False)
    CASES[cid + "_cce"] = dict(c, cce=True)
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
