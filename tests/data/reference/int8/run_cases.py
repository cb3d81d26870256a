"""Measures cases.jsonl: training steps on an LLM.int8 base (transformers' load_in_8bit: bitsandbytes
Linear8bitLt), and the same steps on a 4-bit base for the fix between them, with the harness
(../../harness, transformers 5.24 + peft 0.21.2 + bitsandbytes 0.50.2 + PyTorch 2.15, emulated sm_90
device), each also replayed through PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

BASE = {"dtype": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
        "target_modules": "all-linear", "double_quant": True}
CASES = {
    # LLaMA-Factory's quantization_bit 8 in bf16: no preparation, no checkpointing.
    "llama2-7b_int8_s1024": dict(BASE, model="llama2-7b", seq=1024, batch=1, quant="int8", prepare_kbit=False,
                                 autocast=None, grad_ckpt=False),
    # axolotl's load_in_8bit with bf16 and checkpointing: each 8-bit Linear's input stays alive
    # through the whole step (ctx.tensors), checkpointing or not.
    "llama2-7b_int8_acgc_s2048": dict(BASE, model="llama2-7b", seq=2048, batch=1, quant="int8", prepare_kbit=False,
                                      autocast="bf16", grad_ckpt=True),
    # The same step on a 4-bit base: the fix "4-bit instead of 8-bit".
    "llama2-7b_nf4_acgc_s2048": dict(BASE, model="llama2-7b", seq=2048, batch=1, quant="nf4", prepare_kbit=False,
                                     autocast="bf16", grad_ckpt=True),
    # peft's recipe: prepare_model_for_kbit_training (an fp32 residual stream: fp32 weight copies
    # in backward), attention projections only.
    "llama3-8b_int8_prep_qkvo_s1024": dict(BASE, model="llama3-8b", seq=1024, batch=2, quant="int8", prepare_kbit=True,
                                           autocast=None, grad_ckpt=True, target_modules="qkvo"),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
