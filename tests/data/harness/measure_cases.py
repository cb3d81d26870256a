"""Measures a data folder's cases: each with measure.py (its allocation events recorded), then the
events replayed through PyTorch's caching allocator (replay.py); one JSON line per case on stdout,
the measured result with its `id` and `replay` (`max_allocated`, `max_reserved`).

A data folder's run_cases.py, run from this folder, calls `run(CASES)`; its arguments are the ids
to measure (all when none)."""
import json
import os
import subprocess
import sys
import tempfile


def run(cases, env=None):
    """Measures and replays `cases` ({id: measure.py config}) with `env` added to the
    environment (e.g. PYTHONHASHSEED)."""
    only = sys.argv[1:]
    for cid, c in cases.items():
        if only and cid not in only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            ev = os.path.join(tmp, "ev.json")
            out = subprocess.run([sys.executable, "measure.py", "--json", json.dumps(c)], capture_output=True,
                                 text=True, env=dict(os.environ, TRUTH_EVENTS=ev, **(env or {})), check=True)
            d = json.loads(out.stdout)
            rep = subprocess.run([sys.executable, "replay.py", ev], capture_output=True, text=True, check=True)
            r = json.loads(rep.stdout)
        d["id"] = cid
        d["replay"] = {k: r[k] for k in ("max_allocated", "max_reserved")}
        print(json.dumps(d), flush=True)
