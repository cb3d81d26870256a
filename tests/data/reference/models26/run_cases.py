#!/usr/bin/env python
"""Measures the Qwen3.5, Qwen3.5-MoE, Qwen3-Next and Llama 4 cases of cases.jsonl with the harness's measure_vl.py and
replays each step's allocation sequence through PyTorch's caching allocator (replay.py). Run from the
harness folder (`../../harness`, a copy of `shared/truth`, with its .venv):

    python ../reference/models26/run_cases.py [--only ID_PREFIX] > raw.jsonl
    python ../reference/models26/run_cases.py --commit raw.jsonl > ../reference/models26/cases.jsonl
"""
import json
import os
import subprocess
import sys

# Qwen3-Next's Linear layers by name: every one, and all but the MLP names peft maps onto the experts.
QN_NO_MLP = ["in_proj_qkvz", "in_proj_ba", "q_proj", "k_proj", "v_proj", "o_proj", "out_proj",
             "shared_expert_gate"]
QN_ALL = QN_NO_MLP + ["gate_proj", "up_proj", "down_proj"]
# Llama 4's Linear layers by name (the shared expert's MLP among them): its routers are nn.Linear
# subclasses that peft's own "all-linear" would wrap and break, so the names are listed.
L4_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

CASES = [
    ("qwen3.5-4b_bf16_s512_b1_qkvo_nogc", {"seq": 512, "batch": 1, "target_modules": "qkvo"}),
    ("qwen3.5-4b_bf16_s1024_b1_all_nogc", {"seq": 1024, "batch": 1}),
    ("qwen3.5-4b_bf16_s2048_b1_all_gc", {"seq": 2048, "batch": 1, "grad_ckpt": True}),
    ("qwen3.5-4b_bf16_s1000_b2_qkvo_do0_nogc", {"seq": 1000, "batch": 2, "target_modules": "qkvo", "lora_dropout": 0.0}),
    ("qwen3.5-4b_bf16_s4096_b1_all_gc", {"seq": 4096, "batch": 1, "grad_ckpt": True}),
    ("qwen3.5-4b_bf16_s1024_b2_qkvo_gc", {"seq": 1024, "batch": 2, "target_modules": "qkvo", "grad_ckpt": True}),
    # Qwen3.5-35B-A3B's text model (measured 2026-12-06): each of its 40 layers a mixture of experts
    ("qwen3.5-35b-a3b_bf16_s1024_b1_all_nogc", {"model": "qwen3.5-35b-a3b-text", "seq": 1024, "batch": 1}),
    ("qwen3.5-35b-a3b_bf16_s2048_b1_all_gc", {"model": "qwen3.5-35b-a3b-text", "seq": 2048, "batch": 1,
                                              "grad_ckpt": True}),
    ("qwen3.5-35b-a3b_bf16_s512_b2_qkvo_nogc", {"model": "qwen3.5-35b-a3b-text", "seq": 512, "batch": 2,
                                               "target_modules": "qkvo"}),
    ("qwen3.5-35b-a3b_bf16_s4096_b1_all_do0_gc", {"model": "qwen3.5-35b-a3b-text", "seq": 4096, "batch": 1,
                                                 "lora_dropout": 0.0, "grad_ckpt": True}),
    # Liger-Kernel's RMSNorm and SwiGLU as apply_liger_kernel_to_qwen3_5 installs them (liger-kernel 0.8.5,
    # measured 2026-12-07; its Triton kernels stubbed), beside the same steps above without them
    ("qwen3.5-4b_bf16_s1024_b1_all_nogc_liger", {"seq": 1024, "batch": 1, "liger_kernel": ["rms_norm", "swiglu"]}),
    ("qwen3.5-4b_bf16_s2048_b1_all_gc_liger", {"seq": 2048, "batch": 1, "grad_ckpt": True,
                                               "liger_kernel": ["rms_norm", "swiglu"]}),
    # ... and on Qwen3.5-35B-A3B (apply_liger_kernel_to_qwen3_5_moe before the model is built:
    # LigerExperts for the fused experts; the shared expert stays transformers')
    ("qwen3.5-35b-a3b_bf16_s1024_b1_all_nogc_liger", {"model": "qwen3.5-35b-a3b-text", "seq": 1024, "batch": 1,
                                                     "liger_kernel": ["rms_norm", "swiglu"]}),
    ("qwen3.5-35b-a3b_bf16_s2048_b1_all_gc_liger", {"model": "qwen3.5-35b-a3b-text", "seq": 2048, "batch": 1,
                                                   "grad_ckpt": True, "liger_kernel": ["rms_norm", "swiglu"]}),
    # Qwen3-Next-80B-A3B (measured 2026-12-07): Qwen3.5-MoE's hybrid layers with fused Gated DeltaNet
    # projections (in_proj_qkvz, in_proj_ba), 512 experts of width 512 (top-10) and a shared expert.
    # Every Linear by name, as LLaMA-Factory's `lora_target: all` lists them: peft maps gate_proj /
    # up_proj / down_proj onto the fused experts (qwen2_moe pattern), whose ParamWrapper refuses
    # dropout, so those lines have none.
    ("qwen3-next-80b-a3b_bf16_s1024_b1_all_do0_nogc", {"model": "qwen3-next-80b-a3b", "seq": 1024, "batch": 1,
                                                      "lora_dropout": 0.0, "target_modules": QN_ALL}),
    ("qwen3-next-80b-a3b_bf16_s2048_b1_all_do0_gc", {"model": "qwen3-next-80b-a3b", "seq": 2048, "batch": 1,
                                                    "lora_dropout": 0.0, "grad_ckpt": True,
                                                    "target_modules": QN_ALL}),
    ("qwen3-next-80b-a3b_bf16_s512_b2_qkvo_nogc", {"model": "qwen3-next-80b-a3b", "seq": 512, "batch": 2,
                                                  "target_modules": "qkvo"}),
    ("qwen3-next-80b-a3b_bf16_s4096_b1_nomlp_gc", {"model": "qwen3-next-80b-a3b", "seq": 4096, "batch": 1,
                                                  "grad_ckpt": True, "target_modules": QN_NO_MLP}),
    # ... and with Liger-Kernel's RMSNorm and fused experts (apply_liger_kernel_to_qwen3_next before the
    # model is built; LoRA off the experts, which Liger's SwiGLU replaces)
    ("qwen3-next-80b-a3b_bf16_s4096_b1_nomlp_gc_liger", {"model": "qwen3-next-80b-a3b", "seq": 4096, "batch": 1,
                                                        "grad_ckpt": True, "target_modules": QN_NO_MLP,
                                                        "liger_kernel": ["rms_norm", "swiglu"]}),
    # Llama-4-Scout-17B-16E's text model (measured 2026-12-07): every layer's 16 experts run on every
    # token beside a shared expert; three layers of four rotate (complex rotary, q/k L2 norms), the
    # fourth scales its queries by position; the first five are shorter than one 8192-token attention
    # chunk (from 8192 tokens on, the chunked mask is built: masking_utils' `kv_length < local_size`).
    ("llama4-scout_bf16_s1024_b1_all_nogc", {"model": "llama4-scout-text", "seq": 1024, "batch": 1,
                                            "target_modules": L4_ALL}),
    ("llama4-scout_bf16_s2048_b1_all_gc", {"model": "llama4-scout-text", "seq": 2048, "batch": 1,
                                          "grad_ckpt": True, "target_modules": L4_ALL}),
    ("llama4-scout_bf16_s512_b2_qkvo_nogc", {"model": "llama4-scout-text", "seq": 512, "batch": 2,
                                            "target_modules": "qkvo"}),
    ("llama4-scout_bf16_s8000_b1_qkvo_gc", {"model": "llama4-scout-text", "seq": 8000, "batch": 1,
                                           "grad_ckpt": True, "target_modules": "qkvo"}),
    ("llama4-scout_bf16_s4096_b1_all_do0_gc", {"model": "llama4-scout-text", "seq": 4096, "batch": 1,
                                              "lora_dropout": 0.0, "grad_ckpt": True, "target_modules": L4_ALL}),
    # ... past the chunk: the rotary layers attend through the chunked mask, k and v repeated per head
    ("llama4-scout_bf16_s16384_b1_qkvo_gc", {"model": "llama4-scout-text", "seq": 16384, "batch": 1,
                                            "grad_ckpt": True, "target_modules": "qkvo"}),
    ("llama4-scout_bf16_s12000_b1_all_gc", {"model": "llama4-scout-text", "seq": 12000, "batch": 1,
                                           "grad_ckpt": True, "target_modules": L4_ALL}),
    # ... loaded in 4 bits on the fly (measured 2026-12-08): bitsandbytes quantizes the Linear layers
    # (attention, shared expert); the routers (an nn.Linear subclass) and the fused experts (3-D
    # parameters) stay 16-bit, or fp32 after prepare_model_for_kbit_training
    ("llama4-scout_nf4_s2048_b1_all_gc", {"model": "llama4-scout-text", "seq": 2048, "batch": 1,
                                         "grad_ckpt": True, "target_modules": L4_ALL, "quant": "nf4"}),
    ("llama4-scout_nf4_s1024_b2_qkvo_nogc", {"model": "llama4-scout-text", "seq": 1024, "batch": 2,
                                            "target_modules": "qkvo", "quant": "nf4"}),
    ("llama4-scout_fp4_s4096_b1_qkvo_gc_prep", {"model": "llama4-scout-text", "seq": 4096, "batch": 1,
                                               "grad_ckpt": True, "target_modules": "qkvo", "quant": "fp4",
                                               "double_quant": False, "prepare_kbit": True}),
    # ... loaded from a checkpoint saved in 4 bits (measured 2026-12-08): transformers rebuilds the
    # experts as SequentialLlama4TextExperts (16 Llama4TextMLPs of quantized Linear layers, each run on
    # every token); peft's gate/up/down names reach every expert's Linear layers; the router stays bf16
    ("llama4-scout_nf4seq_s2048_b1_all_gc", {"model": "llama4-scout-text", "seq": 2048, "batch": 1,
                                            "grad_ckpt": True, "target_modules": L4_ALL, "quant": "nf4",
                                            "sequential_experts": True}),
    ("llama4-scout_nf4seq_s1024_b1_qkvo_nogc", {"model": "llama4-scout-text", "seq": 1024, "batch": 1,
                                               "target_modules": "qkvo", "quant": "nf4",
                                               "sequential_experts": True}),
    ("llama4-scout_nf4seq_s4096_b1_qkvo_gc_prep", {"model": "llama4-scout-text", "seq": 4096, "batch": 1,
                                                  "grad_ckpt": True, "target_modules": "qkvo", "quant": "nf4",
                                                  "sequential_experts": True, "prepare_kbit": True}),
    # Llama-4-Maverick-17B-128E's text model (measured 2026-12-08): every second layer a mixture of 128
    # experts (all run on every token) beside a shared expert, the others a dense MLP of 16384; no q/k norm
    ("llama4-maverick_bf16_s1024_b1_all_gc", {"model": "llama4-maverick-text", "seq": 1024, "batch": 1,
                                             "grad_ckpt": True, "target_modules": L4_ALL}),
    ("llama4-maverick_bf16_s512_b1_qkvo_nogc", {"model": "llama4-maverick-text", "seq": 512, "batch": 1,
                                               "target_modules": "qkvo"}),
    ("llama4-maverick_nf4seq_s2048_b1_qkvo_gc", {"model": "llama4-maverick-text", "seq": 2048, "batch": 1,
                                                "grad_ckpt": True, "target_modules": "qkvo", "quant": "nf4",
                                                "sequential_experts": True}),
]
# measure_vl.py's resolved settings that lorafit's settings table reads; target_modules becomes the
# list of module names peft adapted (`target_modules_list`).
KEEP = ["dtype", "batch", "seq", "lora_r", "lora_alpha", "lora_dropout", "grad_ckpt", "attn_impl",
        "optimizer", "steps", "autocast", "modules_to_save", "attention_mask", "autocast_adapter_dtype",
        "quant", "double_quant", "prepare_kbit"]


def measure(only=""):
    for cid, cfg in CASES:
        if not cid.startswith(only):
            continue
        cfg = dict({"model": "qwen3.5-4b-text"}, **cfg)
        ev, out = f"/tmp/{cid}.events.json", f"/tmp/{cid}.json"
        env = dict(os.environ, TRUTH_EVENTS=ev)
        subprocess.run([sys.executable, "measure_vl.py", "--json", json.dumps(cfg), "--out", out], check=True,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rep = subprocess.run([sys.executable, "replay.py", ev], check=True, capture_output=True, text=True).stdout
        res = json.load(open(out))
        res["id"] = cid
        res["replay"] = json.loads(rep.strip().splitlines()[-1])
        res["measured_with"] = cfg
        print(json.dumps(res), flush=True)


def commit(raw):
    for line in open(raw):
        r = json.loads(line)
        st = {k: r["settings"][k] for k in KEEP}
        st["target_modules"] = r["target_modules_list"]
        if isinstance(r["measured_with"].get("target_modules"), list):
            # the names given, as a user lists them (peft maps some onto the fused experts, which
            # then appear under other names in what it adapted)
            st["target_modules"] = sorted(r["measured_with"]["target_modules"])
        if r["measured_with"].get("sequential_experts"):
            # the experts as a checkpoint saved in 4 bits loads them: one Linear MLP per expert
            st["experts_layout"] = "per_expert"
        if r["measured_with"].get("liger_kernel"):
            st["liger_kernel"] = r["measured_with"]["liger_kernel"]
        res = r["result"]
        slim = {k: res[k] for k in ["peak_bytes", "peak_step", "peak_phase", "peak_op", "at_peak", "per_step",
                                    "baseline_live_bytes"]}
        print(json.dumps(dict(id=r["id"], method=r["method"], device=r["device"], model=r["hf_config"],
                              hf_name=r["hf_name"], settings=st, measured_with=r["measured_with"],
                              params=r["params"], result=slim, replay=r["replay"], kernel_path=r["kernel_path"],
                              versions=r["versions"], fake_gpu=r["fake_gpu"])))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--commit":
        commit(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--only":
        measure(sys.argv[2])
    else:
        measure()
