#!/usr/bin/env python
"""Records the allocation sequence of two-layer job runs (measure_job.py with TRUTH_EVENTS), keeping the
phase after the training step (the harness's step 2) as `["a", id, nbytes]` / `["f", id]`, gzipped to
ID.events.json.gz beside this script, and prints each case's line (`settings` in measure.py's resolved
schema, `job` its phase keys) for two_layer.jsonl. Run from the harness folder:
`python record_two_layer.py > two_layer.jsonl`."""
import gzip
import json
import os
import subprocess
import sys

from measure import resolve_config
from measure_job import JOB_DEFAULTS

HERE = os.path.dirname(os.path.abspath(__file__))
TWO = {"num_hidden_layers": 2}
CASES = [
    ("pwg_llama2", {"model": "llama2-7b", "arch_override": TWO, "seq": 256, "batch": 1, "phase": "eval", "eval_batch": 2, "eval_batches": 2, "prediction_loss_only": False, "predict_with_generate": True, "max_new_tokens": 6}),
    ("pwg_qwen2_nf4acgc", {"model": "qwen2-7b", "arch_override": TWO, "quant": "nf4", "autocast": "bf16", "grad_ckpt": True, "seq": 16, "batch": 1, "phase": "eval", "eval_batch": 2, "eval_batches": 2, "prediction_loss_only": False, "predict_with_generate": True}),
    ("eval_logits_llama2", {"model": "llama2-7b", "arch_override": TWO, "seq": 256, "batch": 1, "phase": "eval", "eval_batch": 2, "eval_batches": 2, "prediction_loss_only": False}),
    ("eval_loss_qwen2_nf4acgc", {"model": "qwen2-7b", "arch_override": TWO, "quant": "nf4", "autocast": "bf16", "grad_ckpt": True, "seq": 128, "batch": 1, "phase": "eval", "eval_batch": 3, "eval_batches": 2, "prediction_loss_only": True}),
    ("noconcat_llama2", {"model": "llama2-7b", "arch_override": TWO, "seq": 256, "batch": 1, "phase": "eval", "eval_batch": 2, "eval_batches": 2, "prediction_loss_only": False, "eval_do_concat_batches": False}),
    ("noconcat_pwg_llama2", {"model": "llama2-7b", "arch_override": TWO, "seq": 64, "batch": 1, "phase": "eval", "eval_batch": 2, "eval_batches": 2, "prediction_loss_only": False, "predict_with_generate": True, "max_new_tokens": 4, "eval_do_concat_batches": False}),
    ("pwg_qwen25_05b", {"model": "qwen2.5-0.5b", "arch_override": TWO, "seq": 128, "batch": 2, "phase": "eval", "eval_batch": 3, "eval_batches": 1, "prediction_loss_only": False, "predict_with_generate": True, "eval_prompt": 100, "max_new_tokens": 5}),
]

only = set(sys.argv[1:])
for cid, cfg in CASES:
    if only and cid not in only:
        continue
    out, ev = f"/tmp/jobrec_{cid}.json", f"/tmp/jobrec_{cid}.events.json"
    subprocess.run([sys.executable, "measure_job.py", "--json", json.dumps(cfg), "--out", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TRUTH_EVENTS": ev})
    events, phase_ids = json.load(open(ev)), set()
    kept = []
    for e in events:
        if e[0] == "a" and e[4] == 2:
            phase_ids.add(e[1])
            kept.append(["a", e[1], e[2]])
        elif e[0] == "f" and e[1] in phase_ids:
            kept.append(["f", e[1]])
    with gzip.open(os.path.join(HERE, f"{cid}.events.json.gz"), "wt") as f:
        json.dump(kept, f)
    res = json.load(open(out))
    base = dict(cfg)
    job = {k: base.pop(k, v) for k, v in JOB_DEFAULTS.items()}
    base["steps"] = 1
    c = resolve_config(base)
    res["id"] = cid
    res["settings"] = {k: v for k, v in c.items() if k not in ("arch", "model", "arch_override")}
    res["job"] = job
    print(json.dumps(res), flush=True)
