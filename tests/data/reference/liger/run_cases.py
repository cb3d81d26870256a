"""Measures cases.jsonl: training steps with Liger-Kernel's RMSNorm, SwiGLU and RoPE (liger-kernel
0.8.5, applied as apply_liger_kernel_to_<model_type> does before the model is built, as LLaMA-Factory's
enable_liger_kernel and Trainer's use_liger_kernel do; its Triton kernels stubbed: on the emulated
device only their Python wrappers' allocations run) beside the same steps without them, with the
harness (../../harness, transformers 5.24 + peft 0.21.2 + bitsandbytes 0.50.2 + PyTorch 2.15, emulated
sm_90 device), each also replayed through PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import os
import sys

ALL = ["rms_norm", "swiglu", "rope"]
LORA = {"quant": None, "dtype": "bf16", "autocast": None, "attn_impl": "sdpa", "lora_r": 16,
        "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear"}
# LLaMA-Factory's QLoRA: a 4-bit base without prepare_model_for_kbit_training, bf16 autocast
# (Trainer's bf16), checkpointing.
QLORA = dict(LORA, quant="nf4", double_quant=True, prepare_kbit=False, autocast="bf16", grad_ckpt=True)
CASES = {}
for cid, c in {
    "llama2-7b_lora_s2048": dict(LORA, model="llama2-7b", seq=2048, batch=1, grad_ckpt=False),
    "qwen2.5-7b_qlora_s4096": dict(QLORA, model="qwen2.5-7b", seq=4096, batch=1),
    "qwen3-8b_lora_gc_b2_s2048": dict(LORA, model="qwen3-8b", seq=2048, batch=2, grad_ckpt=True),
    "mistral-7b_lora_s1024_b4": dict(LORA, model="mistral-7b", seq=1024, batch=4, grad_ckpt=False),
    # Gemma: GeGLU, Gemma's norms (a new input gradient, not in place), eager attention for
    # Gemma 2; Gemma 3 norms q and k after their transpose (copies on the way in and out).
    "gemma2-2b_lora_eager_s2048": dict(LORA, model="gemma2-2b", seq=2048, batch=1, grad_ckpt=False,
                                       attn_impl="eager"),
    "gemma3-1b_lora_gc_b2_s1024": dict(LORA, model="gemma3-1b", seq=1024, batch=2, grad_ckpt=True),
    # Phi-3: fused q/k/v and gate/up projections, whose slices Liger's RoPE and SwiGLU copy
    # (LigerPhi3SwiGLUMLP).
    "phi3-mini-4k_lora_s2048": dict(LORA, model="phi3-mini-4k", seq=2048, batch=1, grad_ckpt=False),
    "phi3-mini-4k_lora_gc_b2_s2048": dict(LORA, model="phi3-mini-4k", seq=2048, batch=2, grad_ckpt=True),
    "phi3-mini-4k_qlora_s4096": dict(QLORA, model="phi3-mini-4k", seq=4096, batch=1),
    # Qwen3-MoE (added 2026-12-07): LigerExperts for transformers 5's fused experts, LoRA on the
    # attention projections (Liger's fused kernel reads the expert weights itself)
    "qwen3-30b-a3b_lora_qkvo_s2048": dict(LORA, model="qwen3-30b-a3b", seq=2048, batch=1, grad_ckpt=False,
                                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    "qwen3-30b-a3b_lora_qkvo_gc_b2_s2048": dict(LORA, model="qwen3-30b-a3b", seq=2048, batch=2, grad_ckpt=True,
                                                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    # Mixtral: its fp32 routing weights take the fused backward's bf16 gradient cast
    "mixtral-8x7b_lora_qkvo_gc_s4096": dict(LORA, model="mixtral-8x7b", seq=4096, batch=1, grad_ckpt=True,
                                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
}.items():
    CASES[cid] = dict(c, liger_kernel=[])
    CASES[cid + "_liger"] = dict(c, liger_kernel=ALL)
# DeepSeek-V2-Lite (added 2026-12-07; its config.json as the planner's catalog cites it,
# data/models.json): latent attention, a dense first layer, 64 routed and 2 shared experts.
# apply_liger_kernel_to_deepseek_v2 has no RoPE kernel (rope=True warns and is skipped): its norm,
# LigerQwen3MoeSwiGLUMLP for the dense layer and the shared experts, LigerExperts for the routed.
DSV2_LITE = dict(family="deepseek_v2", hf_name="deepseek-ai/DeepSeek-V2-Lite", hidden_size=2048,
                 intermediate_size=10944, num_hidden_layers=27, num_attention_heads=16,
                 num_key_value_heads=16, vocab_size=102400, tie_word_embeddings=False, q_lora_rank=None,
                 kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                 n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6, moe_intermediate_size=1408,
                 first_k_dense_replace=1, moe_layer_freq=1, topk_method="greedy", n_group=1, topk_group=1,
                 norm_topk_prob=False, routed_scaling_factor=1.0, scoring_func="softmax", rms_norm_eps=1e-6,
                 rope_theta=10000.0)
DSV2_ATTN = ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
for cid, c in {
    "deepseek-v2-lite_lora_attn_s2048": dict(LORA, model=DSV2_LITE, seq=2048, batch=1, grad_ckpt=False,
                                             target_modules=DSV2_ATTN),
    "deepseek-v2-lite_lora_attn_gc_b2_s2048": dict(LORA, model=DSV2_LITE, seq=2048, batch=2, grad_ckpt=True,
                                                   target_modules=DSV2_ATTN),
}.items():
    CASES[cid] = dict(c, liger_kernel=[])
    CASES[cid + "_liger"] = dict(c, liger_kernel=["rms_norm", "swiglu"])
# gpt-oss-20b (added 2026-12-07; its config.json as the planner's catalog cites it, the MXFP4 experts
# dequantized to bf16 for training as the MoE cases do): apply_liger_kernel_to_gpt_oss installs its
# norm and RoPE over the whole head, and no SwiGLU for the clamped experts; eager attention with sinks.
GPT_OSS_20B = dict(family="gpt_oss", hf_name="openai/gpt-oss-20b", hidden_size=2880, intermediate_size=2880,
                   num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                   vocab_size=201088, tie_word_embeddings=False, num_local_experts=32, num_experts_per_tok=4,
                   experts_per_token=4, attention_bias=True, sliding_window=128,
                   layer_types=["sliding_attention", "full_attention"] * 12, max_position_embeddings=131072,
                   initial_context_length=4096, rope_theta=150000.0, rms_norm_eps=1e-5,
                   router_aux_loss_coef=0.9, swiglu_limit=7.0, output_router_logits=False)
GPT_OSS_ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
c = dict(LORA, model=GPT_OSS_20B, seq=2048, batch=1, grad_ckpt=False, attn_impl="eager",
         target_modules=GPT_OSS_ATTN)
CASES["gpt-oss-20b_lora_qkvo_eager_s2048"] = dict(c, liger_kernel=[])
CASES["gpt-oss-20b_lora_qkvo_eager_s2048_liger"] = dict(c, liger_kernel=["rms_norm", "rope"])
# One kernel at a time, at full depth.
CASES["llama2-7b_lora_s2048_swiglu"] = dict(CASES["llama2-7b_lora_s2048"], liger_kernel=["swiglu"])
CASES["llama2-7b_lora_s2048_rms_norm"] = dict(CASES["llama2-7b_lora_s2048"], liger_kernel=["rms_norm"])
CASES["llama2-7b_lora_s2048_rope"] = dict(CASES["llama2-7b_lora_s2048"], liger_kernel=["rope"])
sys.path.insert(0, os.getcwd())  # the harness folder, where this script runs
from measure_cases import run  # noqa: E402

# PYTHONHASHSEED=1: Gemma 3 computes its rotary tables per layer type in the order of
# `set(config.layer_types)` (modeling_gemma3.py:533), a string set whose order follows the
# process's hash seed; with 1 the sliding layers' come first, every run alike.
run(CASES, {"PYTHONHASHSEED": "1"})
