#!/usr/bin/env python3
"""One-off importer: copies published config.json numbers from shared/catalog (and the exact
configs of shared/reference/cases.jsonl) into data/models.json and data/gpus.json, keeping each
entry's source. Re-run when the shared catalog changes:  python3 scripts/import_catalog.py ../shared
Entries without a vocab size, and MoE families lorafit does not plan (qwen2_moe), are skipped.
Mixture-of-experts entries keep their config.json MoE keys; MoE models not in the shared catalog
(OLMoE, DeepSeek-V2-Lite, gpt-oss, Qwen3-235B-A22B) come from scripts/models_extra.json, each with
the public copy of its config.json it was read from."""
import json, sys, os

shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
NAMES = {
    "meta-llama/Llama-2-7b-hf": "llama2-7b", "meta-llama/Llama-2-13b-hf": "llama2-13b",
    "meta-llama/Llama-2-70b-hf": "llama2-70b", "meta-llama/Meta-Llama-3-8B": "llama3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama3-70b", "meta-llama/Llama-3.1-8B": "llama3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama3.1-70b", "meta-llama/Llama-3.1-405B": "llama3.1-405b",
    "meta-llama/Llama-3.2-1B": "llama3.2-1b", "meta-llama/Llama-3.2-3B": "llama3.2-3b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1", "mistralai/Mistral-7B-v0.3": "mistral-7b-v0.3",
    "Qwen/Qwen2-0.5B": "qwen2-0.5b", "Qwen/Qwen2-1.5B-Instruct": "qwen2-1.5b", "Qwen/Qwen2-7B-Instruct": "qwen2-7b",
    "Qwen/Qwen2.5-3B": "qwen2.5-3b", "Qwen/Qwen2.5-7B": "qwen2.5-7b", "Qwen/Qwen2.5-14B": "qwen2.5-14b",
    "Qwen/Qwen2.5-32B": "qwen2.5-32b", "Qwen/Qwen2.5-72B": "qwen2.5-72b",
    "Qwen/Qwen3-0.6B": "qwen3-0.6b", "Qwen/Qwen3-1.7B": "qwen3-1.7b", "Qwen/Qwen3-4B": "qwen3-4b",
    "Qwen/Qwen3-8B": "qwen3-8b", "Qwen/Qwen3-14B": "qwen3-14b", "Qwen/Qwen3-32B": "qwen3-32b",
    "google/gemma-2-2b-it": "gemma2-2b", "google/gemma-2-9b": "gemma2-9b", "google/gemma-2-27b": "gemma2-27b",
    "google/gemma-3-1b-it": "gemma3-1b", "microsoft/Phi-3-mini-4k-instruct": "phi3-mini-4k",
    "microsoft/Phi-3.5-mini-instruct": "phi3.5-mini", "codellama/CodeLlama-7b-hf": "codellama-7b",
    "codellama/CodeLlama-34b-hf": "codellama-34b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b", "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
}
MOE_FAMILIES = {"mixtral", "qwen3_moe"}
MOE_KEYS = ("num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "attention_bias")
FAMILY_TIE_DEFAULT = {"gemma2": True, "gemma3": True, "llama": False}
out = []
moe = []
for m in json.load(open(os.path.join(shared, "catalog/models.json"))):
    name = NAMES.get(m["hf_id"])
    if not name or m.get("vocab_size") is None:
        continue
    fam = m["family"].split()[0].replace("gemma3_text", "gemma3")
    if fam in MOE_FAMILIES:
        e = {k: m[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")}
        e.update(name=name, hf_id=m["hf_id"], family=fam, tie_word_embeddings=m["tie_word_embeddings"])
        e.update({k: m[k] for k in MOE_KEYS if k in m})
        e["source"] = m["source"]
        moe.append(e)
        continue
    tie = m.get("tie_word_embeddings")
    note = m.get("note") or m.get("conflict") or ""
    if tie is None:
        tie = FAMILY_TIE_DEFAULT[fam]
        note = (note + "; " if note else "") + f"tie_word_embeddings not in the source: transformers' {fam} config default ({tie})"
    e = {k: m[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")}
    e.update(name=name, hf_id=m["hf_id"], family=fam, tie_word_embeddings=tie, source=m["source"])
    for k in ("attn_logit_softcapping", "final_logit_softcapping"):
        if m.get(k) is not None:
            e[k] = m[k]
    if note:
        e["note"] = note
    out.append(e)
seen = {e["name"] for e in out}
for l in open(os.path.join(shared, "reference/cases.jsonl")):
    c = json.loads(l)["model"]
    name = c.get("name", "")
    if name.startswith(("qwen2.5-0.5b", "qwen2.5-1.5b")) and name not in seen:
        seen.add(name)
        e = {k: c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings")}
        e.update(name=name, hf_id=c["hf_name"], family=c["family"], source="shared/reference/cases.jsonl: the config the reference measurements were built from")
        out.append(e)
out += moe + json.load(open("scripts/models_extra.json"))
json.dump(out, open("data/models.json", "w"), indent=1)
print(len(out), "models")

# GPUs: the shared datasheet figures plus entries researched with their sources (RTX 5090, A10G,
# M2 Max, RTX 3090 Ti), kept in scripts/gpus_extra.json.
GPU_IDS = {
    "NVIDIA A100 40GB SXM4": "a100-40", "NVIDIA A100 80GB SXM4": "a100-80", "NVIDIA H100 SXM5 80GB": "h100-80",
    "NVIDIA H100 PCIe 80GB": "h100-pcie", "NVIDIA H200 SXM 141GB": "h200", "AMD Instinct MI300X": "mi300x",
    "NVIDIA L40S": "l40s", "NVIDIA L4": "l4", "NVIDIA A10": "a10", "NVIDIA T4": "t4",
    "NVIDIA V100 SXM2 16GB": "v100-16", "NVIDIA V100 SXM2 32GB": "v100-32", "NVIDIA GeForce RTX 3090": "rtx3090",
    "NVIDIA RTX A6000": "rtx-a6000", "NVIDIA RTX 6000 Ada Generation": "rtx6000-ada", "NVIDIA GeForce RTX 4090": "rtx4090",
    "Apple M4 Max (40-core GPU)": "m4-max", "Apple M3 Max (40-core GPU)": "m3-max",
    "NVIDIA GeForce RTX 5090": "rtx5090", "NVIDIA A10G (AWS EC2 G5)": "a10g", "Apple M2 Max (38-core GPU)": "m2-max",
    "NVIDIA GeForce RTX 3090 Ti": "rtx3090ti",
}
gpus = json.load(open(os.path.join(shared, "catalog/gpus.json"))) + json.load(open("scripts/gpus_extra.json"))
gout = []
for g in gpus:
    e = {"id": GPU_IDS[g["name"]], "name": g["name"], "memory_gib": g["memory_gib"], "bf16": g["bf16"],
         "bf16_tflops_dense": g.get("bf16_tflops_dense"), "fp16_tflops_dense": g.get("fp16_tflops_dense"),
         "fp32_tflops": g.get("fp32_tflops"), "mem_bandwidth_gbs": g.get("mem_bandwidth_gbs", g.get("mem_bandwidth_gbps")),
         "unified_memory": g["name"].startswith("Apple"), "source": g["source"]}
    gout.append(e)
json.dump(gout, open("data/gpus.json", "w"), indent=1)
print(len(gout), "gpus")
