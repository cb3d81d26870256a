#!/usr/bin/env python
"""Measures the vision-language cases of vl_cases.jsonl with the harness's measure_vl.py
(Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration,
Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration and
Qwen2_5_VLForConditionalGeneration, full depth, images built in the processor's shapes) and replays
each step's allocation sequence through PyTorch's caching allocator (replay.py). Run from the
harness folder (`../../harness`, a copy of `shared/truth`, with its .venv):

    python ../reference/models26/run_vl_cases.py > raw_vl.jsonl
    python ../reference/models26/run_vl_cases.py --commit raw_vl.jsonl > ../reference/models26/vl_cases.jsonl

Each image is given at the size LLaMA-Factory hands the processor (its `image_max_pixels`
resize already applied; the case says the size before it), and the processor's pixel limits are
Qwen3.5's published `preprocessor_config.json` ones (shortest_edge 65536, longest_edge 16777216).
"""
import json
import os
import subprocess
import sys

Q35 = dict(min_pixels=65536, max_pixels=16777216)
Q25 = dict(min_pixels=3136, max_pixels=12845056)
CASES = [
    # 448×448: 196 visual tokens; 512 text tokens.
    ("qwen3.5-4b-vl_bf16_img448_t512_b1_all_nogc",
     {"seq": 512, "batch": 1, "image": dict(width=448, height=448, **Q35)}),
    # 640×480 (under image_max_pixels): 300 visual tokens; checkpointing.
    ("qwen3.5-4b-vl_bf16_img640x480_t1024_b1_all_gc",
     {"seq": 1024, "batch": 1, "grad_ckpt": True, "image": dict(width=640, height=480, **Q35)}),
    # Two 448×448 images per sample, batch 2, q/k/v/o, checkpointing.
    ("qwen3.5-4b-vl_bf16_2img448_t256_b2_qkvo_gc",
     {"seq": 256, "batch": 2, "grad_ckpt": True, "target_modules": "qkvo",
      "image": dict(width=448, height=448, count=2, **Q35)}),
    # A 1280×720 photo, which LLaMA-Factory scales to 1024×576 (image_max_pixels 768²): 576 tokens.
    ("qwen3.5-4b-vl_bf16_img1280x720_t1536_b1_all_gc",
     {"seq": 1536, "batch": 1, "grad_ckpt": True, "image": dict(width=1024, height=576, **Q35),
      "image_before_llamafactory": [1280, 720]}),
    # Qwen3.5-35B-A3B whole (measured 2026-12-06): a 640×480 image, checkpointing, every layer MoE.
    ("qwen3.5-35b-a3b-vl_bf16_img640x480_t1024_b1_all_gc",
     {"model": "qwen3.5-35b-a3b", "seq": 1024, "batch": 1, "grad_ckpt": True,
      "image": dict(width=640, height=480, **Q35)}),
    # Qwen3-VL-4B (measured 2026-12-06): Qwen3 text layers, Qwen3.5's tower with deepstack mergers
    # after blocks 5, 11, 17, their features added after text layers 0-2; the processor's limits
    # are Qwen3.5's (Qwen3-VL's preprocessor_config.json has the same).
    ("qwen3-vl-4b_bf16_img448_t512_b1_all_nogc",
     {"model": "qwen3-vl-4b", "seq": 512, "batch": 1, "image": dict(width=448, height=448, **Q35)}),
    ("qwen3-vl-4b_bf16_img640x480_t1024_b1_all_gc",
     {"model": "qwen3-vl-4b", "seq": 1024, "batch": 1, "grad_ckpt": True,
      "image": dict(width=640, height=480, **Q35)}),
    ("qwen3-vl-4b_bf16_2img448_t256_b2_qkvo_gc",
     {"model": "qwen3-vl-4b", "seq": 256, "batch": 2, "grad_ckpt": True, "target_modules": "qkvo",
      "image": dict(width=448, height=448, count=2, **Q35)}),
    # Qwen3-VL-30B-A3B (measured 2026-12-06): Qwen3-VL with 128 experts in every text layer.
    ("qwen3-vl-30b-a3b_bf16_img640x480_t1024_b1_all_gc",
     {"model": "qwen3-vl-30b-a3b", "seq": 1024, "batch": 1, "grad_ckpt": True,
      "image": dict(width=640, height=480, **Q35)}),
    ("qwen3-vl-30b-a3b_bf16_img448_t512_b1_qkvo_nogc",
     {"model": "qwen3-vl-30b-a3b", "seq": 512, "batch": 1, "target_modules": "qkvo",
      "image": dict(width=448, height=448, **Q35)}),
    # Qwen2.5-VL-3B-Instruct (measured 2026-12-07): Qwen2 text layers, the windowed tower (full
    # attention in blocks 7, 15, 23, 31); the processor's limits are Qwen2.5-VL's published
    # preprocessor_config.json ones (min_pixels 3136, max_pixels 12845056). With checkpointing,
    # enable_input_require_grads hooks visual.patch_embed: the tower builds a graph (its blocks
    # checkpointed) and backward runs through it.
    ("qwen2.5-vl-3b_bf16_img448_t512_b1_all_nogc",
     {"model": "qwen2.5-vl-3b", "seq": 512, "batch": 1, "image": dict(width=448, height=448, **Q25)}),
    ("qwen2.5-vl-3b_bf16_img640x480_t1024_b1_qkvo_nogc",
     {"model": "qwen2.5-vl-3b", "seq": 1024, "batch": 1, "target_modules": "qkvo",
      "image": dict(width=640, height=480, **Q25)}),
    ("qwen2.5-vl-3b_bf16_2img448_t256_b2_all_nogc",
     {"model": "qwen2.5-vl-3b", "seq": 256, "batch": 2,
      "image": dict(width=448, height=448, count=2, **Q25)}),
    ("qwen2.5-vl-3b_bf16_img640x480_t1024_b1_all_gc",
     {"model": "qwen2.5-vl-3b", "seq": 1024, "batch": 1, "grad_ckpt": True,
      "image": dict(width=640, height=480, **Q25)}),
    ("qwen2.5-vl-3b_bf16_2img448_t256_b2_qkvo_gc",
     {"model": "qwen2.5-vl-3b", "seq": 256, "batch": 2, "grad_ckpt": True, "target_modules": "qkvo",
      "image": dict(width=448, height=448, count=2, **Q25)}),
    # A 1280×720 photo, which LLaMA-Factory scales to 1024×576 (image_max_pixels 768²): the
    # processor rounds it to 1036×588, 777 visual tokens.
    ("qwen2.5-vl-3b_bf16_img1280x720_t2048_b1_all_gc",
     {"model": "qwen2.5-vl-3b", "seq": 2048, "batch": 1, "grad_ckpt": True,
      "image": dict(width=1024, height=576, **Q25), "image_before_llamafactory": [1280, 720]}),
]


def measure():
    only = set(sys.argv[1:])
    for cid, cfg in CASES:
        if only and cid not in only:
            continue
        before = cfg.pop("image_before_llamafactory", None)
        cfg = dict({"model": "qwen3.5-4b"}, **cfg)
        ev, out = f"/tmp/{cid}.events.json", f"/tmp/{cid}.json"
        env = dict(os.environ, TRUTH_EVENTS=ev)
        subprocess.run([sys.executable, "measure_vl.py", "--json", json.dumps(cfg), "--out", out], check=True,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rep = subprocess.run([sys.executable, "replay.py", ev], check=True, capture_output=True, text=True).stdout
        res = json.load(open(out))
        res["id"] = cid
        res["replay"] = json.loads(rep.strip().splitlines()[-1])
        res["measured_with"] = cfg
        if before:
            res["settings"]["image"]["before_llamafactory"] = before
        print(json.dumps(res), flush=True)


KEEP = ["dtype", "batch", "lora_r", "lora_alpha", "lora_dropout", "grad_ckpt", "attn_impl",
        "optimizer", "steps", "autocast", "modules_to_save", "attention_mask", "autocast_adapter_dtype",
        "quant", "double_quant", "prepare_kbit"]


def commit(raw):
    """One line per case in lorafit's settings-table names: `seq` is every token the language
    model sees (text, visual tokens and each image's start / end markers), the image is given at
    its size before LLaMA-Factory's resize, with LLaMA-Factory's default pixel limits."""
    for line in open(raw):
        r = json.loads(line)
        st = {k: r["settings"][k] for k in KEEP}
        img = r["settings"]["image"]
        before = img.get("before_llamafactory", [img["width"], img["height"]])
        st.update(seq=r["settings"]["seq_total"], target_modules=r["target_modules_list"],
                  images_per_sample=img["count"], image_width=before[0], image_height=before[1])
        res = r["result"]
        slim = {k: res[k] for k in ["peak_bytes", "peak_step", "peak_phase", "peak_op", "at_peak", "per_step",
                                    "baseline_live_bytes"]}
        print(json.dumps(dict(id=r["id"], method=r["method"], device=r["device"], model=r["hf_config"],
                              hf_name=r["hf_name"], settings=st, image=img, measured_with=r["measured_with"],
                              params=r["params"], result=slim, replay=r["replay"], kernel_path=r["kernel_path"],
                              versions=r["versions"], fake_gpu=r["fake_gpu"])))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--commit":
        commit(sys.argv[2])
    else:
        measure()
