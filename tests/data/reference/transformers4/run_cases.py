"""Measures the cases of cases.jsonl: a small Mistral-shaped model stepped on the CPU with real
tensors under transformers 4.48.1 (../../harness/requirements-transformers4.txt), once with its
own ForCausalLMLoss (the fp32 logits shifted by a contiguous copy) and once with the loss of
transformers >= 4.49 swapped in (LOSS_SHIFT=labels: the labels shifted). Run from the harness
folder's environment: python run_cases.py PATH/TO/harness/measure.py > cases.jsonl"""
import json
import os
import subprocess
import sys

MEASURE = sys.argv[1]
BASE = {
    "model": {"family": "mistral", "hidden_size": 256, "intermediate_size": 688,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "vocab_size": 16000, "tie_word_embeddings": False},
    "method": "real", "device": "cpu", "seq": 256, "batch": 2, "dtype": "bf16",
    "lora_r": 16, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "attn_impl": "sdpa", "optimizer": "adamw_torch_forloop",
}
VARIANTS = {
    "b2": {},
    "b1": {"batch": 1},
    "b3gc": {"batch": 3, "grad_ckpt": True},
    "fp32ac": {"dtype": "fp32", "autocast": "bf16"},
    "b2do": {"lora_dropout": 0.1, "seq": 200},
}
for name, change in VARIANTS.items():
    c = dict(BASE, **change)
    for shift in ("logits", "labels"):
        env = dict(os.environ, LOSS_SHIFT=shift)
        out = subprocess.run([sys.executable, MEASURE, "--json", json.dumps(c)],
                             capture_output=True, text=True, env=env, check=True)
        d = json.loads(out.stdout)
        r = d["result"]
        print(json.dumps({"id": f"{name}_{shift}", "loss_shift": shift, "model": d["model"],
                          "settings": d["settings"], "params": d["params"],
                          "result": {k: r[k] for k in ("peak_bytes", "peak_step", "peak_phase",
                                                       "peak_op", "peak_module")}}))
