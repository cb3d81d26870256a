"""Measures gen_cases.jsonl: GRPO steps with their generation (the harness's method_kind "grpo" with
grpo_generate: transformers' generate on the training GPU as GRPOTrainer calls it without vLLM, then the
scoring and _compute_loss), at full depth with completions short enough for the emulated device (every
decode step runs every layer), each also replayed through PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_gen_cases.py [ID ...] > gen_cases.jsonl"""
import os
import sys

LORA = {"quant": None, "dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "lora_r": 16,
        "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear", "method_kind": "grpo",
        "grpo_generate": True}
CASES = {
    # TRL's defaults: dropout on while generating, checkpointing off for generate.
    "llama3-8b_lora_b8_p512_c96": dict(LORA, model="llama3-8b", seq=608, batch=8, grad_ckpt=True,
                                       grpo_completion_len=96),
    # A peft model generates without autocast (fp32 LoRA over the 4-bit base), the reference pass.
    "qwen2.5-7b_qlora_b8_p512_c96_beta": dict(LORA, model="qwen2.5-7b", seq=608, batch=8, quant="nf4",
                                              double_quant=True, prepare_kbit=True, autocast="bf16",
                                              grad_ckpt=True, grpo_completion_len=96, grpo_beta=0.04),
    # ... and two iterations per generation: the old policy's pass too (a 4-bit base cannot generate
    # with vLLM through TRL, so its step always generates on the training GPU).
    "qwen2.5-7b_qlora_b8_p512_c96_beta_mu2": dict(LORA, model="qwen2.5-7b", seq=608, batch=8, quant="nf4",
                                                  double_quant=True, prepare_kbit=True, autocast="bf16",
                                                  grad_ckpt=True, grpo_completion_len=96, grpo_beta=0.04,
                                                  grpo_num_iterations=2),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES, {"PYTHONHASHSEED": "1"})
