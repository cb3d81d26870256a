#!/usr/bin/env python3
"""(lorafit's copy of the probe of the harness in tests/data/harness: the autocast lookup fixed for runs without
autocast, and PROBE_EMPTY_CACHE=1 to empty the cache after loading.)

Real-GPU probe: the same LoRA / QLoRA training steps as measure.py, run for real on a CUDA GPU,
reading what PyTorch and the driver report. For a machine that has a GPU and torch + transformers +
peft installed (no downloads: models are built from their config numbers with random weights).

    python3 gpu_probe.py OUT.jsonl [CONFIG_JSON ...]      # default: a built-in list of configs

One JSON line per configuration: torch.cuda.max_memory_allocated() / max_memory_reserved() over two
training steps (peak at step 2), memory_stats() peaks, nvidia-smi's used memory for this process's
GPU at the end (NVML), the CUDA context's share (used memory before the first tensor), versions and
the step times. Each configuration runs in a fresh subprocess so every run starts from an empty
allocator and context. Keep the whole list short: about 1 min per 7B run."""
import json, os, subprocess, sys, time

DEFAULT = [
    dict(model="llama2-7b", seq=1024, batch=1),
    dict(model="llama2-7b", seq=2048, batch=4, grad_ckpt=True),
    dict(model="qwen2-7b", seq=2048, batch=1, grad_ckpt=True),
    dict(model="qwen2-7b", seq=2048, batch=4, grad_ckpt=True),
    dict(model="llama3-8b", seq=2048, batch=2, grad_ckpt=True),
    dict(model="qwen2.5-0.5b", seq=2048, batch=4, grad_ckpt=True),
    dict(model="llama2-7b", seq=2048, batch=2, attn_impl="eager", grad_ckpt=True),
    dict(model="llama2-7b", seq=1024, batch=1, dtype="fp32", autocast="bf16", grad_ckpt=True),
]

ARCH = {  # published config.json numbers (same as measure.py's PRESETS)
    "llama2-7b": dict(family="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, head_dim=128, vocab_size=32000,
                      tie_word_embeddings=False, rms_norm_eps=1e-5),
    "qwen2-7b": dict(family="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                     num_attention_heads=28, num_key_value_heads=4, head_dim=128, vocab_size=152064,
                     tie_word_embeddings=False, rms_norm_eps=1e-6),
    "llama3-8b": dict(family="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                      tie_word_embeddings=False, rms_norm_eps=1e-5),
    "qwen2.5-0.5b": dict(family="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, head_dim=64, vocab_size=151936,
                         tie_word_embeddings=True, rms_norm_eps=1e-6),
}


def nvml_used_mib():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        return pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
    except Exception:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout.split()
            return float(out[0])
        except Exception:
            return None


def one(c):
    import torch, transformers, peft
    from transformers import AutoModelForCausalLM
    from peft import LoraConfig, get_peft_model
    idle = nvml_used_mib()
    torch.cuda.init(); torch.empty(1, device="cuda")
    ctx = nvml_used_mib()
    a = dict(ARCH[c["model"]]) if isinstance(c["model"], str) else dict(c["model"])
    fam = a.pop("family")
    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "mistral": transformers.MistralConfig}[fam]
    cfg = cls(**a, use_cache=False, attention_dropout=0.0, max_position_embeddings=max(4096, c.get("seq", 1024)))
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[c.get("dtype", "bf16")]
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=c.get("attn_impl", "sdpa"))
    model.train()
    if c.get("grad_ckpt"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    tm = c.get("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, LoraConfig(r=c.get("lora_r", 16), lora_alpha=c.get("lora_alpha", 32),
                                             lora_dropout=c.get("lora_dropout", 0.05), target_modules=tm,
                                             task_type="CAUSAL_LM"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (c.get("batch", 1), c.get("seq", 1024)), device="cuda")
    ac = c.get("autocast")
    torch.cuda.synchronize()
    loaded = torch.cuda.memory_reserved()
    if os.environ.get("PROBE_EMPTY_CACHE"):  # lorafit: check what loading leaves cached
        torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base_alloc = torch.cuda.memory_allocated()
    times = []
    for step in range(2):
        t0 = time.time()
        with torch.autocast("cuda", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}.get(ac, torch.bfloat16), enabled=bool(ac)):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(); times.append(time.time() - t0)
    st = torch.cuda.memory_stats()
    return dict(config=c, reserved_after_loading=loaded, max_allocated=torch.cuda.max_memory_allocated(), max_reserved=torch.cuda.max_memory_reserved(),
                weights_allocated=base_alloc, peak_requested=st.get("requested_bytes.all.peak"),
                num_alloc_retries=st.get("num_alloc_retries"), nvml_used_mib_end=nvml_used_mib(),
                nvml_used_mib_idle=idle, nvml_used_mib_after_context=ctx, step_s=times,
                gpu=torch.cuda.get_device_name(), versions=dict(torch=torch.__version__,
                transformers=transformers.__version__, peft=peft.__version__))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(one(json.loads(sys.argv[2])))); return
    out = sys.argv[1]
    cfgs = [json.loads(x) for x in sys.argv[2:]] or DEFAULT
    with open(out, "a") as f:
        for c in cfgs:
            p = subprocess.run([sys.executable, __file__, "--one", json.dumps(c)], capture_output=True, text=True)
            line = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else json.dumps(dict(config=c, error=p.stderr[-600:]))
            f.write(line + "\n"); f.flush(); print(line[:300], flush=True)


if __name__ == "__main__":
    main()
