#!/usr/bin/env python3
"""Records the caching allocator's alloc/free sequence of two real LoRA steps (gpu_probe.py's
setup) from PyTorch's memory history, as text lines 'a ID BYTES PHASE STEP' / 'f ID'."""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(__file__))
import gpu_probe

def run(c, out):
    import torch, transformers
    from transformers import AutoModelForCausalLM
    from peft import LoraConfig, get_peft_model
    a = dict(gpu_probe.ARCH[c["model"]])
    fam = a.pop("family")
    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "mistral": transformers.MistralConfig}[fam]
    cfg = cls(**a, use_cache=False, attention_dropout=0.0, max_position_embeddings=max(4096, c["seq"]))
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[c.get("dtype", "bf16")]
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=c.get("attn_impl", "sdpa"))
    model.train()
    if c.get("grad_ckpt"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], task_type="CAUSAL_LM"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (c["batch"], c["seq"]), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=2_000_000)
    marks = []
    for step in (1, 2):
        for phase in ("forward", "backward", "optimizer"):
            pass
        marks.append(("forward", step, torch.cuda.memory_allocated()))
        loss = model(input_ids=ids, labels=ids).loss
        torch.cuda.synchronize(); marks.append(("backward", step, torch.cuda.memory_allocated()))
        loss.backward()
        torch.cuda.synchronize(); marks.append(("optimizer", step, torch.cuda.memory_allocated()))
        opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    tr = snap["device_traces"][0]
    ids_of, n, lines = {}, 0, []
    for e in tr:
        act = e.get("action")
        if act == "alloc":
            n += 1; ids_of[e["addr"]] = n
            lines.append(f"a {n} {e['size']}")
        elif act == "free_completed":
            i = ids_of.pop(e["addr"], None)
            if i is not None:
                lines.append(f"f {i}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return dict(config=c, events=len(lines), max_allocated=torch.cuda.max_memory_allocated(),
                max_reserved=torch.cuda.max_memory_reserved(), marks=marks)

if __name__ == "__main__":
    if sys.argv[1] == "--one":
        print(json.dumps(run(json.loads(sys.argv[2]), sys.argv[3]))); sys.exit(0)
    out_dir = sys.argv[1]
    for i, l in enumerate(sys.argv[2:]):
        c = json.loads(l)
        import subprocess
        p = subprocess.run([sys.executable, __file__, "--one", l, os.path.join(out_dir, f"seq{i}.txt")], capture_output=True, text=True)
        print(p.stdout.strip()[-400:] or p.stderr[-800:], flush=True)
    sys.exit(0)
