"""Measures cases.jsonl: GRPO steps as TRL 1.16's GRPOTrainer runs them after generation (the
harness's method_kind "grpo": each step's completions scored by TRL's own
_get_per_token_logps_and_entropies under no_grad (the old policy's log-probs when num_iterations > 1,
the reference's with peft's adapters disabled when beta != 0), the buffer shuffled as _prepare_inputs
does, then TRL's own _compute_loss through the fused LM head GRPOTrainer adds; its Triton kernels
stubbed: on the emulated device only the Python wrapper's allocations run), with the harness
(../../harness, transformers 5.24 + peft 0.21.2 + bitsandbytes 0.50.2 + trl 1.16.0 + PyTorch 2.15,
emulated sm_90 device), each also replayed through PyTorch's caching allocator. Each case's rows are
one prompt's num_generations completions (batch = num_generations, gradient accumulation 1).
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

# vLLM generates elsewhere (server mode): before each step's scoring the trainer's GPU runs TRL's
# weight sync (peft's merge_adapter, the merged weights read, unmerge_adapter).
LORA = {"quant": None, "dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "lora_r": 16,
        "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear", "method_kind": "grpo",
        "grpo_vllm_sync": True}
CASES = {
    # TRL 1.16's defaults: beta 0 (no reference pass), loss_type dapo, one iteration (no old-policy
    # pass), checkpointing on.
    "llama3-8b_lora_b8_c1024": dict(LORA, model="llama3-8b", seq=1536, batch=8, grad_ckpt=True,
                                    grpo_completion_len=1024),
    # The grpo loss type without checkpointing.
    "qwen3-4b_lora_b4_c512_grpo": dict(LORA, model="qwen3-4b", seq=1024, batch=4, grad_ckpt=False,
                                       grpo_completion_len=512, grpo_loss_type="grpo", grpo_beta=0.04),
    # Full fine-tuning: the tied head trained (its gradient accumulated in fp32 by the fused head).
    "llama3.2-1b_full_b8_c512": dict(model="llama3.2-1b", dtype="bf16", seq=1024, batch=8, full_ft=True,
                                     grad_ckpt=True, method_kind="grpo", grpo_completion_len=512),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES, {"PYTHONHASHSEED": "1"})
