"""Measures cases.jsonl: training steps on an LLM.int8 base (transformers' load_in_8bit: bitsandbytes
Linear8bitLt), and the same steps on a 4-bit base for the fix between them, with the harness
(../../harness, transformers 5.24 + peft 0.21.2 + bitsandbytes 0.50.2 + PyTorch 2.15, emulated sm_90
device), each also replayed through PyTorch's caching allocator.
Run from the harness folder: .venv/bin/python PATH/run_cases.py [ID ...] > cases.jsonl"""
import json
import os
import subprocess
import sys
import tempfile

BASE = {"dtype": "bf16", "attn_impl": "sdpa", "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
        "target_modules": "all-linear", "double_quant": True}
CASES = {
    # LLaMA-Factory's quantization_bit 8 in bf16: no preparation, no checkpointing.
    "llama2-7b_int8_s1024": dict(BASE, model="llama2-7b", seq=1024, batch=1, quant="int8", prepare_kbit=False,
                                 autocast=None, grad_ckpt=False),
    # axolotl's load_in_8bit with bf16 and checkpointing: each 8-bit Linear's input stays alive
    # through the whole step (ctx.tensors), checkpointing or not.
    "llama2-7b_int8_acgc_s2048": dict(BASE, model="llama2-7b", seq=2048, batch=1, quant="int8", prepare_kbit=False,
                                      autocast="bf16", grad_ckpt=True),
    # The same step on a 4-bit base: the fix "4-bit instead of 8-bit".
    "llama2-7b_nf4_acgc_s2048": dict(BASE, model="llama2-7b", seq=2048, batch=1, quant="nf4", prepare_kbit=False,
                                     autocast="bf16", grad_ckpt=True),
    # peft's recipe: prepare_model_for_kbit_training (an fp32 residual stream: fp32 weight copies
    # in backward), attention projections only.
    "llama3-8b_int8_prep_qkvo_s1024": dict(BASE, model="llama3-8b", seq=1024, batch=2, quant="int8", prepare_kbit=True,
                                           autocast=None, grad_ckpt=True, target_modules="qkvo"),
}
only = sys.argv[1:]
for cid, c in CASES.items():
    if only and cid not in only:
        continue
    with tempfile.TemporaryDirectory() as tmp:
        ev = os.path.join(tmp, "ev.json")
        out = subprocess.run([sys.executable, "measure.py", "--json", json.dumps(c)], capture_output=True,
                             text=True, env=dict(os.environ, TRUTH_EVENTS=ev), check=True)
        d = json.loads(out.stdout)
        rep = subprocess.run([sys.executable, "replay.py", ev], capture_output=True, text=True, check=True)
        r = json.loads(rep.stdout)
    d["id"] = cid
    d["replay"] = {k: r[k] for k in ("max_allocated", "max_reserved")}
    print(json.dumps(d), flush=True)
