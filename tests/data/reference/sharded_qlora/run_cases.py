"""Measures cases.jsonl: rank 0 of FSDP1 and FSDP2 runs over a 4-bit base whose packed weights are
stored in bf16 (bitsandbytes' `bnb_4bit_quant_storage=torch.bfloat16`), as TRL's SFTTrainer trains
such a model ("sharded QLoRA": no prepare_model_for_kbit_training, LoRA in the model's bf16,
`autocast_adapter_dtype=False`), under torch.distributed's fake process group, with the harness
(../../harness, transformers 5.24 + peft 0.21.2 + accelerate 1.15 + bitsandbytes + PyTorch 2.15,
emulated sm_90 device), each also replayed through PyTorch's caching allocator with every
allocation on its CUDA stream.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

# Trainer's bf16 flag: bf16 autocast and FSDP's mixed precision in bf16; the 4-bit weights stored in
# bf16, the LoRA matrices in bf16.
QLORA = {"dtype": "bf16", "autocast": "bf16", "attn_impl": "sdpa", "optimizer": "adamw_torch",
         "quant": "nf4", "double_quant": True, "quant_storage": "bf16", "prepare_kbit": False,
         "autocast_adapter_dtype": False}


def fsdp(version, world):
    return {"version": version, "world": world, "param_dtype": "bf16", "reduce_dtype": "bf16",
            "auto_wrap": "peft_trainer"}


CASES = {
    # The recipe of the published two-GPU QLoRA run (fms-acceleration's A100 benchmarks, row 57 of
    # ../published_gpu.jsonl): r 16 on q/k/v/o, dropout 0.1, checkpointing, 2 × 4096 tokens; SDPA
    # instead of flash-attention.
    "mistral-7b_fsdp1x2_qlora_gc_b2_s4096": dict(QLORA, model="mistral-7b", seq=4096, batch=2, grad_ckpt=True,
                                                 lora_r=16, lora_alpha=16, lora_dropout=0.1,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                                 fsdp=fsdp(1, 2)),
    # All-linear LoRA over 4 GPUs with checkpointing.
    "llama3-8b_fsdp1x4_qlora_gc_s2048": dict(QLORA, model="llama3-8b", seq=2048, batch=1, grad_ckpt=True,
                                             lora_r=16, lora_alpha=32, lora_dropout=0.05,
                                             target_modules="all-linear", fsdp=fsdp(1, 4)),
    # FSDP2 as Trainer wraps a peft model (the decoder layers in the root's unit), 2 GPUs.
    "llama2-7b_fsdp2x2_qlora_gc_s2048": dict(QLORA, model="llama2-7b", seq=2048, batch=1, grad_ckpt=True,
                                             lora_r=16, lora_alpha=32, lora_dropout=0.05,
                                             target_modules="all-linear", fsdp=fsdp(2, 2)),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
