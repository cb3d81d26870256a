"""Measures cases.jsonl: SFT steps with padding-free packing and with LLaMA-Factory's neat_packing (rows of
packed documents with a block-diagonal 4D mask the collator builds), (transformers' DataCollatorWithFlattening,
TRL's padding-free collator under SFTTrainer's packing=True: the micro-batch as one row, position ids restarting at every packed
document, no attention mask) and one unpacked step to compare, with the harness (../../harness,
`attention_mask: "packed"`; transformers 5.24 + peft 0.21.2 + bitsandbytes 0.50.2 + PyTorch 2.15,
emulated sm_90 device), each also replayed through PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

BASE = {"dtype": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
        "target_modules": "all-linear", "autocast": None, "grad_ckpt": False}
CASES = {
    # Four samples of 1024 tokens in one row of 4096: sdpa is given the row's 4096² block-causal
    # mask, and every layer turns it into a bf16 bias that it keeps for backward.
    "llama3-8b_packed_b4_s1024": dict(BASE, model="llama3-8b", seq=1024, batch=4, attention_mask="packed"),
    # The same samples unpacked (four rows, no padding, no mask): what packing costs under sdpa.
    "llama3-8b_unpacked_b4_s1024": dict(BASE, model="llama3-8b", seq=1024, batch=4),
    # With checkpointing: one layer's bias at a time.
    "llama3-8b_packed_gc_b4_s1024": dict(BASE, model="llama3-8b", seq=1024, batch=4, attention_mask="packed",
                                         grad_ckpt=True),
    # QLoRA as peft's recipe runs it (fp32 residual stream, bf16 autocast), checkpointing: the
    # masked sdpa repeats k and v in fp32 before autocast casts them.
    "qwen3-8b_packed_nf4_acgc_b2_s2048": dict(BASE, model="qwen3-8b", seq=2048, batch=2, attention_mask="packed",
                                              quant="nf4", double_quant=True, prepare_kbit=True,
                                              autocast="bf16", grad_ckpt=True),
    # Eight short samples, checkpointing, Qwen2.5's biased q, k, v.
    "qwen2.5-7b_packed_gc_b8_s512": dict(BASE, model="qwen2.5-7b", seq=512, batch=8, attention_mask="packed",
                                         grad_ckpt=True, packed_docs=4),
    # TRL 1.16's SFTTrainer with packing=True (its default bfd strategy: padding-free): its
    # collator adds the documents' boundaries and seq_idx, its fused LM head scores every
    # document's tokens after the first; one document per packed sample.
    "qwen3-8b_trl_packed_gc_b4_s1024": dict(BASE, model="qwen3-8b", seq=1024, batch=4, attention_mask="packed",
                                            method_kind="trl_sft", packed_docs=1, grad_ckpt=True),
    # LLaMA-Factory's neat_packing under sdpa: four rows of 1024 tokens, each of four documents,
    # with the block-diagonal 4D mask its collator builds in bf16: one mask for every layer.
    "llama3-8b_neat_b4_s1024": dict(BASE, model="llama3-8b", seq=1024, batch=4, attention_mask="neat",
                                    packed_docs=4),
    # LLaMA-Factory's QLoRA with neat_packing, bf16 autocast, checkpointing.
    "qwen3-8b_neat_nf4_acgc_b2_s2048": dict(BASE, model="qwen3-8b", seq=2048, batch=2, attention_mask="neat",
                                            packed_docs=8, quant="nf4", double_quant=True, prepare_kbit=False,
                                            autocast="bf16", grad_ckpt=True),
    # Eager attention: the packed row's boolean mask made additive in bf16 (eager_mask), and each
    # layer's scores over the whole row.
    "llama3.2-1b_packed_eager_b2_s1024": dict(BASE, model="llama3.2-1b", seq=1024, batch=2, attention_mask="packed",
                                              attn_impl="eager"),
}
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

run(CASES)
