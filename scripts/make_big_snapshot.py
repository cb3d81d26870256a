"""Writes a large PyTorch memory snapshot for the parse benchmark (tests/browser/bench-snapshot.mjs):
the genuine llama2-7b QLoRA snapshot of tests/data repeated until the pickle reaches about the
size asked for (a little over). Each copy of the trace is its own objects (pickle cannot share
them) with its addresses moved to a range of its own, so every copy's allocations and frees still
pair up.

    python3 scripts/make_big_snapshot.py OUT.pickle [MEGABYTES=100]
"""
import copy
import gzip
import os
import pickle
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
src = os.path.join(root, "tests/data/reference/snapshots/llama2-7b_nf4+bf16+autocast_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc.pickle.gz")
out = sys.argv[1]
want = int(sys.argv[2] if len(sys.argv) > 2 else 100) * 1_000_000

with gzip.open(src, "rb") as f:
    raw = f.read()
snap = pickle.loads(raw)
trace = snap["device_traces"][0]


def moved(k):
    """Copy k of the trace: fresh objects, addresses and times of its own."""
    out = []
    for e in trace:
        e = copy.deepcopy(e)
        e["addr"] = e["addr"] + (k << 44)
        e["time_us"] = e["time_us"] + k * 10_000_000
        out.append(e)
    return out


per_copy = len(pickle.dumps(moved(1), protocol=4))
copies = max(1, round(want / per_copy))
big = [e for k in range(copies) for e in moved(k)]
snap["device_traces"] = [big]
with open(out, "wb") as f:
    pickle.dump(snap, f, protocol=4)
print(f"{out}: {os.path.getsize(out) / 1e6:.1f} MB, {len(big)} trace events ({copies} copies)")
