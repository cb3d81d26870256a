"""Measures cases.jsonl: SFT steps as TRL 1.16's SFTTrainer runs them (the harness's method_kind
"trl_sft": TRL's own compute_loss through the fused LM head that SFTTrainer adds, on a batch from
TRL's collator; its Triton kernels stubbed: on the emulated device only the Python wrapper's
allocations run) beside the same steps as transformers' Trainer runs them (the full logits and
ForCausalLMLoss), with the harness (../../harness, transformers 5.24 + peft 0.21.2 + bitsandbytes
0.50.2 + trl 1.16.0 + PyTorch 2.15, emulated sm_90 device), each also replayed through PyTorch's
caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

LORA = {"quant": None, "dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "lora_r": 16,
        "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear"}
# A QLoRA step as TRL's own examples run it: a 4-bit base prepared by peft, bf16 autocast,
# checkpointing.
QLORA = dict(LORA, quant="nf4", double_quant=True, prepare_kbit=True, autocast="bf16", grad_ckpt=True)
CASES = {}
for cid, c in {
    "llama3-8b_lora_s2048": dict(LORA, model="llama3-8b", seq=2048, batch=1, grad_ckpt=False),
    "qwen2.5-7b_qlora_s4096": dict(QLORA, model="qwen2.5-7b", seq=4096, batch=1),
    "qwen3-8b_lora_gc_b2_s2048": dict(LORA, model="qwen3-8b", seq=2048, batch=2, grad_ckpt=True),
    # Gemma 2: the final softcap, which the fused head applies per tile.
    "gemma2-2b_lora_eager_s2048": dict(LORA, model="gemma2-2b", seq=2048, batch=1, grad_ckpt=False,
                                       attn_impl="eager"),
}.items():
    # Trainer's step (input ids and labels; the harness's default attention_mask "none": an
    # unpadded batch's mask of ones selects the same kernels on a GPU).
    CASES[cid] = dict(c)
    CASES[cid + "_trl"] = dict(c, method_kind="trl_sft")
# Full fine-tuning: the tied head is trained (its gradient accumulated in fp32 by the fused head).
CASES["llama3.2-1b_full_s2048_trl"] = dict(model="llama3.2-1b", dtype="bf16", seq=2048, batch=1,
                                           full_ft=True, grad_ckpt=True, method_kind="trl_sft")
# A prompt-completion dataset under completion_only_loss (TRL 1.16's default for one): the prompt's
# labels are -100, so the fused head scores only the completion (added 2026-12-06).
CASES["llama3-8b_lora_s2048_trl_col"] = dict(CASES["llama3-8b_lora_s2048_trl"], trl_sft_prompt_len=1536)
CASES["qwen2.5-7b_qlora_s4096_trl_col"] = dict(CASES["qwen2.5-7b_qlora_s4096_trl"], trl_sft_prompt_len=3072)
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES, {"PYTHONHASHSEED": "1"})
