#!/usr/bin/env python
"""Measures the job cases of cases.jsonl with the harness's measure_job.py (run from the harness
folder: `python run_cases.py > cases.jsonl`) and writes each result line with the settings it ran
with: measure.py's resolved configuration (`settings`, the schema of the other reference files)
and the phase's own keys (`job`)."""
import json
import subprocess
import sys

from measure import resolve_config
from measure_job import JOB_DEFAULTS

CASES = [
    ("llama3-8b_bf16_s1024_b2_eval_b4x3_loss", {"model": "llama3-8b", "seq": 1024, "batch": 2, "phase": "eval", "eval_batch": 4, "eval_batches": 3, "prediction_loss_only": True}),
    ("llama3-8b_bf16_s1024_b2_eval_b4x3_logits", {"model": "llama3-8b", "seq": 1024, "batch": 2, "phase": "eval", "eval_batch": 4, "eval_batches": 3, "prediction_loss_only": False}),
    ("llama2-7b_bf16_s2048_b1_gc_eval_b8x2_loss", {"model": "llama2-7b", "seq": 2048, "batch": 1, "grad_ckpt": True, "phase": "eval", "eval_batch": 8, "eval_batches": 2, "prediction_loss_only": True}),
    ("qwen2-7b_nf4_bf16ac_s1024_b1_gc_eval_b2x4_logits", {"model": "qwen2-7b", "quant": "nf4", "autocast": "bf16", "grad_ckpt": True, "seq": 1024, "batch": 1, "phase": "eval", "eval_batch": 2, "eval_batches": 4, "prediction_loss_only": False}),
    ("mistral-7b_bf16_s512_b4_eval_b16x1_logits", {"model": "mistral-7b", "seq": 512, "batch": 4, "phase": "eval", "eval_batch": 16, "eval_batches": 1, "prediction_loss_only": False}),
    ("llama3-8b_bf16_s1024_b1_merge", {"model": "llama3-8b", "seq": 1024, "batch": 1, "phase": "merge"}),
    ("llama2-7b_bf16_s1024_b1_merge_qv", {"model": "llama2-7b", "seq": 1024, "batch": 1, "target_modules": ["q_proj", "v_proj"], "phase": "merge"}),
    ("llama3-8b_nf4_bf16ac_s1024_b1_gc_merge", {"model": "llama3-8b", "quant": "nf4", "autocast": "bf16", "grad_ckpt": True, "seq": 1024, "batch": 1, "phase": "merge"}),
    ("qwen2-7b_nf4_bf16ac_s1024_b1_gc_merge", {"model": "qwen2-7b", "quant": "nf4", "autocast": "bf16", "grad_ckpt": True, "seq": 1024, "batch": 1, "phase": "merge"}),
    # predict_with_generate (added 2026-12-05): LLaMA-Factory's evaluation, generate over each batch's prompts
    ("llama3-8b_bf16_s1024_b2_eval_b4x2_generate16", {"model": "llama3-8b", "seq": 1024, "batch": 2, "phase": "eval", "eval_batch": 4, "eval_batches": 2, "prediction_loss_only": False, "predict_with_generate": True, "max_new_tokens": 16}),
    ("qwen2-7b_nf4_bf16ac_s1024_b1_gc_eval_b2x3_generate24", {"model": "qwen2-7b", "quant": "nf4", "autocast": "bf16", "grad_ckpt": True, "seq": 1024, "batch": 1, "phase": "eval", "eval_batch": 2, "eval_batches": 3, "prediction_loss_only": False, "predict_with_generate": True, "max_new_tokens": 24}),
    ("mistral-7b_bf16_s256_b4_eval_b8x1_generate_to_seq", {"model": "mistral-7b", "seq": 256, "batch": 4, "phase": "eval", "eval_batch": 8, "eval_batches": 1, "prediction_loss_only": False, "predict_with_generate": True}),
]

only = set(sys.argv[1:])
for cid, cfg in CASES:
    if only and cid not in only:
        continue
    out = f"/tmp/job_{cid}.json"
    subprocess.run([sys.executable, "measure_job.py", "--json", json.dumps(cfg), "--out", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res = json.load(open(out))
    base = dict(cfg)
    job = {k: base.pop(k, v) for k, v in JOB_DEFAULTS.items()}
    base["steps"] = 1
    c = resolve_config(base)
    settings = {k: v for k, v in c.items() if k not in ("arch", "model", "arch_override")}
    res["id"] = cid
    res["settings"] = settings
    res["job"] = job
    print(json.dumps(res), flush=True)
