//! The native command line: `lorafit plan | estimate | models | gpus`.
//! Argument parsing is hand-written and returns errors as one clear line; it never panics.

use std::io::{BufRead, Write};

use serde_json::json;

use crate::catalog::{self, GpuEntry};
use crate::model::settings::parse_target_names;
use crate::model::{plan, verdict, AttnImpl, Dtype, Optimizer, Quant, SavedModule, Settings};
use crate::report;

const USAGE: &str = "lorafit — LoRA/QLoRA fine-tuning GPU-memory planner

USAGE:
  lorafit plan --model NAME [options]      breakdown, totals and verdict for one config
  lorafit estimate --jsonl FILE|-          one JSON result per input line (reference schema)
  lorafit models                           list the model catalog
  lorafit gpus                             list the GPU catalog

PLAN OPTIONS:
  --model NAME | --config FILE   catalog model or a config.json-style numbers file
  --gpu ID | --gpu-mem-gib N     GPU to check against (default a100-80)
  --batch N  --seq N  --grad-accum N
  --rank N  --alpha X  --dropout P
  --targets q,k,v,o,gate,up,down|all-linear   --modules-to-save lm_head,embed_tokens
  --dtype fp32|bf16|fp16   --quant nf4|fp4   --no-double-quant
  --autocast bf16|fp16|none   --attn eager|sdpa|flash_attention_2   --padded-mask
  --gc   --optimizer adamw_torch_fused|adamw_torch_foreach|adamw_torch|adamw_8bit|paged_adamw_8bit|paged_adamw_32bit|adafactor|sgd|sgd_momentum
  --json                          print the full result as JSON
";

/// Runs the CLI; returns the process exit code.
pub fn run(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = match args.first().map(String::as_str) {
        None | Some("-h") | Some("--help") | Some("help") => {
            let _ = write!(out, "{USAGE}");
            return 0;
        }
        Some("plan") => cmd_plan(&args[1..], out),
        Some("estimate") => return cmd_estimate(&args[1..], out, err),
        Some("models") => cmd_models(out),
        Some("gpus") => cmd_gpus(out),
        Some(other) => Err(format!(
            "unknown command {other:?}; expected plan, estimate, models or gpus (see --help)"
        )),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            2
        }
    }
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value"))
}

fn number<T: std::str::FromStr>(s: &str, flag: &str) -> Result<T, String> {
    s.trim()
        .parse::<T>()
        .map_err(|_| format!("{flag}: {s:?} is not a valid number"))
}

/// Parsed `plan` arguments.
struct PlanArgs {
    arch: crate::model::Architecture,
    title: String,
    settings: Settings,
    gpu: GpuChoice,
    json: bool,
}

enum GpuChoice {
    Catalog(&'static GpuEntry),
    Custom(f64),
}

fn parse_plan(args: &[String]) -> Result<PlanArgs, String> {
    let mut s = Settings::default();
    let mut model: Option<crate::model::Architecture> = None;
    let mut title = String::new();
    let mut gpu = GpuChoice::Catalog(catalog::find_gpu("a100-80")?);
    let mut json = false;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        match flag {
            "--model" => {
                let e = catalog::find_model(value(args, &mut i, flag)?)?;
                title = format!("{} ({})", e.arch.name, e.hf_id);
                model = Some(e.arch.clone());
            }
            "--config" => {
                let path = value(args, &mut i, flag)?;
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {path}: {e}"))?;
                let v: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| format!("{path} is not valid JSON: {e}"))?;
                let mut v = v;
                if v.get("family").is_none() {
                    if let Some(mt) = v.get("model_type").cloned() {
                        v["family"] = mt;
                    }
                }
                model = Some(catalog::resolve_model(&v)?);
                title = path.to_string();
            }
            "--gpu" => gpu = GpuChoice::Catalog(catalog::find_gpu(value(args, &mut i, flag)?)?),
            "--gpu-mem-gib" => {
                let g: f64 = number(value(args, &mut i, flag)?, flag)?;
                if !(g.is_finite() && g > 0.0 && g < 1e6) {
                    return Err(format!(
                        "--gpu-mem-gib must be a positive number of GiB, got {g}"
                    ));
                }
                gpu = GpuChoice::Custom(g);
            }
            "--batch" => s.batch = number(value(args, &mut i, flag)?, flag)?,
            "--seq" => s.seq = number(value(args, &mut i, flag)?, flag)?,
            "--grad-accum" => s.grad_accum = number(value(args, &mut i, flag)?, flag)?,
            "--rank" | "-r" => s.lora_r = number(value(args, &mut i, flag)?, flag)?,
            "--alpha" => s.lora_alpha = number(value(args, &mut i, flag)?, flag)?,
            "--dropout" => s.lora_dropout = number(value(args, &mut i, flag)?, flag)?,
            "--targets" => {
                s.targets = parse_target_names(value(args, &mut i, flag)?.split(','))
                    .map_err(|e| e.to_string())?
            }
            "--modules-to-save" => {
                s.modules_to_save = value(args, &mut i, flag)?
                    .split(',')
                    .filter(|m| !m.trim().is_empty())
                    .map(|m| match m.trim() {
                        "lm_head" => Ok(SavedModule::LmHead),
                        "embed_tokens" => Ok(SavedModule::EmbedTokens),
                        o => Err(format!(
                            "--modules-to-save: unknown module {o:?} (lm_head, embed_tokens)"
                        )),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--dtype" => {
                let v = value(args, &mut i, flag)?;
                s.dtype = Dtype::parse(v)
                    .ok_or_else(|| format!("--dtype: unknown dtype {v:?} (fp32, bf16, fp16)"))?
            }
            "--quant" => {
                let v = value(args, &mut i, flag)?;
                s.quant = match v {
                    "none" => None,
                    _ => Some(
                        Quant::parse(v)
                            .ok_or_else(|| format!("--quant: unknown {v:?} (nf4, fp4, none)"))?,
                    ),
                }
            }
            "--no-double-quant" => s.double_quant = false,
            "--autocast" => {
                let v = value(args, &mut i, flag)?;
                s.autocast = match v {
                    "none" | "no" => None,
                    _ => match Dtype::parse(v) {
                        Some(Dtype::Fp32) | None => {
                            return Err(format!("--autocast: {v:?} is not bf16, fp16 or none"))
                        }
                        d => d,
                    },
                }
            }
            "--attn" => {
                let v = value(args, &mut i, flag)?;
                s.attn_impl = AttnImpl::parse(v).ok_or_else(|| {
                    format!("--attn: unknown {v:?} (eager, sdpa, flash_attention_2)")
                })?
            }
            "--padded-mask" => s.padded_mask = true,
            "--gc" | "--gradient-checkpointing" => s.grad_ckpt = true,
            "--optimizer" | "--optim" => {
                let v = value(args, &mut i, flag)?;
                s.optimizer = Optimizer::parse(v).ok_or_else(|| {
                    let names: Vec<&str> = Optimizer::ALL.iter().map(|o| o.name()).collect();
                    format!(
                        "--optimizer: unknown {v:?}; did you mean {}?",
                        catalog::suggest(v, names.into_iter()).join(", ")
                    )
                })?
            }
            "--json" => json = true,
            other => return Err(format!("unknown option {other:?} (see lorafit --help)")),
        }
        i += 1;
    }
    let arch = model.ok_or("plan needs --model NAME or --config FILE")?;
    Ok(PlanArgs {
        arch,
        title,
        settings: s,
        gpu,
        json,
    })
}

fn cmd_plan(args: &[String], out: &mut dyn Write) -> Result<(), String> {
    let a = parse_plan(args)?;
    let p = plan(&a.arch, &a.settings).map_err(|e| e.to_string())?;
    let (gpu_name, capacity) = match &a.gpu {
        GpuChoice::Catalog(g) => (g.name.clone(), g.capacity_bytes()),
        GpuChoice::Custom(gib) => (format!("custom {gib} GiB GPU"), (gib * report::GIB) as u128),
    };
    let v = verdict(&p, capacity);
    if a.json {
        let doc = json!({"model": a.arch, "settings": a.settings, "gpu": gpu_name, "verdict": v, "plan": p});
        writeln!(out, "{doc}").map_err(|e| e.to_string())?;
    } else {
        write!(out, "{}", report::text(&p, &a.title, Some((&gpu_name, &v))))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn cmd_estimate(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let path = match args {
        [flag, p] if flag == "--jsonl" => p.clone(),
        [p] if !p.starts_with('-') || p == "-" => p.clone(),
        _ => {
            let _ = writeln!(
                err,
                "error: usage: lorafit estimate --jsonl FILE (or - for stdin)"
            );
            return 2;
        }
    };
    let reader: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        match std::fs::File::open(&path) {
            Ok(f) => Box::new(std::io::BufReader::new(f)),
            Err(e) => {
                let _ = writeln!(err, "error: cannot open {path}: {e}");
                return 2;
            }
        }
    };
    let mut failed = 0usize;
    for (n, line) in reader.lines().enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                let _ = writeln!(err, "error: line {}: cannot read: {e}", n + 1);
                failed += 1;
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let (ok, text) = crate::estimate::output_line(&line);
        if !ok {
            failed += 1;
        }
        if writeln!(out, "{text}").is_err() {
            return 1;
        }
    }
    if failed > 0 {
        let _ = writeln!(err, "{failed} line(s) could not be planned");
        1
    } else {
        0
    }
}

fn cmd_models(out: &mut dyn Write) -> Result<(), String> {
    let mut s = format!(
        "{:<16} {:<8} {:>9} {:>7} {:>7} {:>6} {:>4} {:>8}  {}\n",
        "name", "family", "params", "hidden", "inter", "layers", "kv", "vocab", "hf_id"
    );
    for m in catalog::models() {
        let a = &m.arch;
        s.push_str(&format!(
            "{:<16} {:<8} {:>8.2}B {:>7} {:>7} {:>6} {:>4} {:>8}  {}\n",
            a.name,
            a.family.name(),
            a.total_params() as f64 / 1e9,
            a.hidden_size,
            a.intermediate_size,
            a.num_hidden_layers,
            a.kv_heads(),
            a.vocab_size,
            m.hf_id
        ));
    }
    out.write_all(s.as_bytes()).map_err(|e| e.to_string())
}

fn cmd_gpus(out: &mut dyn Write) -> Result<(), String> {
    let opt = |x: Option<f64>| x.map(|v| format!("{v}")).unwrap_or_else(|| "—".into());
    let mut s = format!(
        "{:<12} {:>8} {:>5} {:>10} {:>10} {:>8} {:>8}  {}\n",
        "id", "GiB", "bf16", "bf16 TF/s", "fp16 TF/s", "fp32", "GB/s", "name"
    );
    for g in catalog::gpus() {
        s.push_str(&format!(
            "{:<12} {:>8} {:>5} {:>10} {:>10} {:>8} {:>8}  {}{}\n",
            g.id,
            opt(g.memory_gib),
            match g.bf16 {
                Some(true) => "yes",
                Some(false) => "no",
                None => "?",
            },
            opt(g.bf16_tflops_dense),
            opt(g.fp16_tflops_dense),
            opt(g.fp32_tflops),
            opt(g.mem_bandwidth_gbs),
            g.name,
            if g.unified_memory {
                " (unified memory, 75 % usable)"
            } else {
                ""
            }
        ));
    }
    s.push_str("custom: --gpu-mem-gib N\n");
    out.write_all(s.as_bytes()).map_err(|e| e.to_string())
}
