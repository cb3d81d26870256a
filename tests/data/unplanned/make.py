#!/usr/bin/env python3
"""Makes the snapshot of a run that deliberately differs from its plan, for the "measured against
planned" tests: the recorded allocation sequence of the reference case
qwen2.5-0.5b_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc (tests/data/reference/allocator) with one
change, an fp32 copy of the logits made right after lm_head in every forward and kept until the
optimizer step — what older transformers versions did (`logits = logits.float()` in forward) —
replayed through PyTorch's own caching allocator with memory history on (the harness's
snapshot.py, torch 2.15 on its emulated device). Run from this folder with the harness's python:
    python make.py ~/lorafit-truth
It writes logits-fp32.pickle.gz, logits-fp32.summary.txt and expected.json."""
import gzip, json, os, subprocess, sys

harness = os.path.expanduser(sys.argv[1] if len(sys.argv) > 1 else "~/lorafit-truth")
here = os.path.dirname(os.path.abspath(__file__))
case = "qwen2.5-0.5b_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc"
ev = json.load(gzip.open(os.path.join(here, "../reference/allocator", case + ".events.json.gz")))
tokens, vocab = 4 * 2048, 151936
logits_bf16 = tokens * vocab * 2
extra = tokens * vocab * 4
new_id = max(e[1] for e in ev if e[0] == "a") + 1
out, pending = [], None
for e in ev:
    if e[0] == "a" and e[3] == "optimizer" and pending is not None:
        out.append(["f", pending])
        pending = None
    out.append(e)
    if e[0] == "a" and e[3] == "forward" and e[2] == logits_bf16 and pending is None:
        out.append(["a", new_id, extra, "forward", e[4]])
        pending = new_id
        new_id += 1
events = os.path.join(here, "logits-fp32.events.json")
json.dump(out, open(events, "w"))
py = os.path.join(harness, ".venv/bin/python")
res = subprocess.run([py, os.path.join(harness, "snapshot.py"), events, os.path.join(here, "logits-fp32.pickle"),
                      "--summary", os.path.join(here, "logits-fp32.summary.txt")], capture_output=True, text=True, check=True)
figures = json.loads(res.stdout.strip().splitlines()[-1])
subprocess.run(["gzip", "-9f", os.path.join(here, "logits-fp32.pickle")], check=True)
os.remove(events)
json.dump({"logits-fp32": dict(figures, case=case, unplanned_bytes=extra, unplanned_phase="forward",
                               what="fp32 copy of the logits kept from forward to the optimizer step")},
          open(os.path.join(here, "expected.json"), "w"), indent=1)
print(figures)
