//! The native command line: `lorafit plan | estimate | models | gpus`.
//! Argument parsing is hand-written and returns errors as one clear line; it never panics.

use std::io::{BufRead, Write};

use serde_json::json;

use crate::formats::catalog::{self, GpuEntry};
use crate::formats::fields;
use crate::formats::report;
use crate::model::{plan, plan_simulated, Settings};

const USAGE_HEAD: &str = "lorafit — LoRA/QLoRA fine-tuning GPU-memory planner

USAGE:
  lorafit plan --model NAME [options]      breakdown, totals and verdict for one config
  lorafit plan --from FILE [--gpu ID] [--json]   the same for a training config (fit and
                                           suggest take --from too)
  lorafit fit --model NAME [options]       largest batch / sequence that fit, smallest GPU, curve
  lorafit suggest --model NAME [options]   ranked changes that make it fit, and forum myths checked
  lorafit export --format F --model NAME [options]   python | trl | accelerate | llama-factory | axolotl | deepspeed | ms-swift
  lorafit lengths FILE --model NAME [options]        peak at typical vs longest batch (mid-training OOM)
  lorafit estimate --jsonl FILE|-          one JSON result per input line (reference schema)
  lorafit validate [--json]                the model against every measured case it carries
  lorafit inspect FILE [--model NAME [options]] [--json]
                                           a memory snapshot (.pickle[.gz]), memory_summary() text or
                                           memory_stats() JSON: measured peaks, and what the run holds
                                           that the plan of the stated configuration does not
  lorafit models                           list the model catalog
  lorafit gpus                             list the GPU catalog

PLAN OPTIONS:
  --model NAME | --config FILE   catalog model or a config.json-style numbers file
  --from FILE                     a training config: LLaMA-Factory or axolotl YAML, an ms-swift
                                  script, a Python script (Trainer or TRL), TrainingArguments /
                                  LoraConfig / adapter_config.json or DeepSpeed JSON (plan, fit,
                                  suggest; other flags override it); a second --from FILE is its
                                  launch config (accelerate's YAML / JSON, or a DeepSpeed JSON)
  --gpu ID | --gpu-mem-gib N     GPU to check against (default a100-80)
  --utilization U --dataset-tokens N   time estimate (GEMM share of the tensor peak, default the
                                  card generation's calibrated figure; tokens per epoch)
  --usd-per-gpu-hour R            the rate an epoch is costed at (plan, suggest; default the
                                  catalog's cited rate for the card)
  --json                          print the full result as JSON

TRAINING SETTINGS:
";

/// The commands, for messages.
const COMMANDS: &str =
    "plan, fit, suggest, export, lengths, estimate, validate, inspect, models, gpus";

/// Runs the CLI; returns the process exit code.
pub fn run(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = match args.first().map(String::as_str) {
        None | Some("-h") | Some("--help") | Some("help") => {
            let _ = write!(out, "{USAGE_HEAD}{}", fields::usage());
            return 0;
        }
        Some("plan") => cmd_plan(&args[1..], out, err),
        Some("fit") => cmd_fit(&args[1..], out, err),
        Some("suggest") => cmd_suggest(&args[1..], out, err),
        Some("export") => cmd_export(&args[1..], out, err),
        Some("lengths") => cmd_lengths(&args[1..], out, err),
        Some("estimate") => return cmd_estimate(&args[1..], out, err),
        Some(cmd @ ("models" | "gpus")) if args.len() > 1 => Err(format!(
            "{:?} is not used by `lorafit {cmd}`, which takes no arguments",
            args[1]
        )),
        Some("models") => cmd_models(out),
        Some("gpus") => cmd_gpus(out),
        Some("validate") => cmd_validate(&args[1..], out),
        Some("inspect") => cmd_inspect(&args[1..], out, err),
        Some(other) => Err(format!(
            "unknown command {other:?}; expected one of {COMMANDS} (see --help)"
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

/// A setting's flag, through the settings table: a `Bool` flag takes no value.
fn set_field(s: &mut Settings, args: &[String], i: &mut usize, flag: &str) -> Result<(), String> {
    let field = fields::by_flag(flag)
        .ok_or_else(|| format!("unknown option {flag:?} (see lorafit --help)"))?;
    let text = match field.kind {
        fields::Kind::Bool if field.no_flag == Some(flag) => "0",
        fields::Kind::Bool => "1",
        _ => value(args, i, flag)?,
    };
    (field.set)(s, text).map_err(|e| format!("{flag}: {e}"))
}

/// Parsed `plan` arguments.
struct PlanArgs {
    arch: crate::model::Architecture,
    title: String,
    settings: Settings,
    gpu: GpuChoice,
    json: bool,
    model_id: String,
    format: Option<String>,
    chars_per_token: f64,
    file: Option<String>,
    utilization: Option<f64>,
    dataset_tokens: f64,
    /// `--usd-per-gpu-hour`: the rental rate to cost an epoch at, instead of the catalog's.
    usd_per_gpu_hour: Option<f64>,
    /// The command's own options given (`--gpu`, `FILE`, …), checked against what it uses.
    given: Vec<&'static str>,
    /// Keys of a `--config` file that did not shape the model.
    ignored: Vec<String>,
    /// A training config read with `--from`, and what it said.
    from: Option<crate::formats::framework::Reading>,
}

/// Options beyond the training settings, each used by some commands only.
const OWN_OPTIONS: &[&str] = &[
    "--from",
    "--gpu",
    "--gpu-mem-gib",
    "--json",
    "--format",
    "--chars-per-token",
    "--utilization",
    "--dataset-tokens",
    "--usd-per-gpu-hour",
    "FILE",
];

enum GpuChoice {
    Catalog(&'static GpuEntry),
    Custom(f64),
}

/// Parses a command's arguments and refuses those the command would not use (`--format` given to
/// `plan`, a stray positional argument), naming them; a `--config` file's unused keys are noted
/// on `err`.
fn parse_for(
    command: &str,
    uses: &[&str],
    args: &[String],
    err: &mut dyn Write,
) -> Result<PlanArgs, String> {
    let a = parse_plan(args)?;
    if let Some(unused) = a.given.iter().find(|g| !uses.contains(*g)) {
        let what = if *unused == "FILE" {
            format!(
                "{:?} (a file argument)",
                a.file.as_deref().unwrap_or_default()
            )
        } else {
            unused.to_string()
        };
        return Err(format!(
            "{what} is not used by `lorafit {command}` (see --help)"
        ));
    }
    if !a.ignored.is_empty() {
        let _ = writeln!(
            err,
            "note: keys of {} the plan does not use: {}",
            a.title,
            a.ignored.join(", ")
        );
    }
    Ok(a)
}

/// Reads the training config of `--from PATH`, then each launch config of a later `--from`
/// (accelerate's config, a DeepSpeed JSON) over it; a DeepSpeed JSON one of them names is read
/// from beside it (or from the working directory) when it is there.
fn read_from(paths: &[&String]) -> Result<crate::formats::framework::Reading, String> {
    use crate::formats::framework;
    let read =
        |path: &str| std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"));
    let Some((first, launch)) = paths.split_first() else {
        return Err("--from needs a FILE (a training config)".into());
    };
    let mut r = framework::read(&read(first)?).map_err(|e| format!("{first}: {e}"))?;
    launch_beside(&mut r, first)?;
    for path in launch {
        framework::apply_launch(&mut r, &read(path)?).map_err(|e| format!("{path}: {e}"))?;
        launch_beside(&mut r, path)?;
    }
    Ok(r)
}

/// Reads the launch file (a DeepSpeed JSON, ms-swift's FSDP JSON, accelerate's config) the
/// config at `path` names, when it is found, and the one that file names in turn (accelerate's
/// `deepspeed_config_file`), each once.
fn launch_beside(r: &mut crate::formats::framework::Reading, path: &str) -> Result<(), String> {
    use crate::formats::framework;
    let mut read: Vec<String> = vec![];
    while let Some(ds) = r.launch_path.clone().filter(|d| !read.contains(d)) {
        read.push(ds.clone());
        let beside = std::path::Path::new(path)
            .parent()
            .map(|d| d.join(&ds))
            .filter(|p| p.is_file());
        // As named from the config's folder, from here, or by its file name beside the config
        // (LLaMA-Factory's examples name it from the repository's root).
        let by_name = std::path::Path::new(&ds).file_name().and_then(|n| {
            let p = std::path::Path::new(path).parent()?.join(n);
            p.is_file().then_some(p)
        });
        let file = beside
            .or_else(|| Some(std::path::PathBuf::from(&ds)).filter(|p| p.is_file()))
            .or(by_name);
        match file.map(std::fs::read_to_string) {
            Some(Ok(t)) => {
                framework::apply_launch(r, &t).map_err(|e| format!("{path}: {ds}: {e}"))?;
                framework::launch_applied(r, &ds);
            }
            _ => {
                r.notes.push(format!(
                    "{ds} was not found beside the config or here: its strategy and offload are taken from its name"
                ));
                break;
            }
        }
    }
    Ok(())
}

fn parse_plan(args: &[String]) -> Result<PlanArgs, String> {
    let mut s = Settings::default();
    let mut given: Vec<&'static str> = vec![];
    let mut ignored = vec![];
    let mut model: Option<crate::model::Architecture> = None;
    let mut title = String::new();
    let mut model_id = "path/to/your-model".to_string();
    // `--from FILE` first: the settings it gives, then the other flags over them.
    let mut from = None;
    let from_paths: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| *a == "--from")
        .map(|(at, _)| {
            args.get(at + 1)
                .ok_or("--from needs a FILE (a training config)")
        })
        .collect::<Result<_, _>>()?;
    if let Some(path) = from_paths.first().copied() {
        let mut r = read_from(&from_paths)?;
        title = path.clone();
        // (the catalog model can change what the reading keeps: Liger's kernels where they
        // are not planned for its family)
        let found = r.catalog_model();
        s = r.settings.clone();
        match found {
            Ok(Some(e)) => {
                title = format!("{path}: {} ({})", e.arch.name, e.hf_id);
                model_id = r.model.clone().unwrap_or_default();
                model = Some(e.arch.clone());
            }
            Ok(None) => {}
            Err(e) if !args.iter().any(|a| a == "--model" || a == "--config") => {
                return Err(format!(
                    "{path}: model {:?}: {e}",
                    r.model.as_deref().unwrap_or_default()
                ))
            }
            Err(_) => {}
        }
        from = Some(r);
    }
    let mut gpu = GpuChoice::Catalog(catalog::find_gpu("a100-80")?);
    let mut json = false;
    let mut format = None;
    let mut chars_per_token = crate::planning::lengths::DEFAULT_CHARS_PER_TOKEN;
    let mut file = None;
    let mut utilization = None;
    let mut dataset_tokens: f64 = crate::planning::time::DEFAULT_DATASET_TOKENS;
    let mut usd_per_gpu_hour: Option<f64> = None;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if let Some(own) = OWN_OPTIONS.iter().find(|o| **o == flag) {
            given.push(own);
        }
        match flag {
            "--from" => i += 1,
            "--model" => {
                let e = catalog::find_model(value(args, &mut i, flag)?)?;
                title = format!("{} ({})", e.arch.name, e.hf_id);
                model_id = e.hf_id.clone();
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
                let read = crate::formats::config_json::parse_config(&text)
                    .or_else(|e| catalog::resolve_model(&v).map_err(|_| e))?;
                ignored = read.ignored;
                model = Some(read.value);
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
            "--json" => json = true,
            "--format" => format = Some(value(args, &mut i, flag)?.to_string()),
            "--chars-per-token" => chars_per_token = number(value(args, &mut i, flag)?, flag)?,
            "--utilization" => {
                let u = number(value(args, &mut i, flag)?, flag)?;
                if !(u > 0.0 && u <= 1.0) {
                    return Err(format!("--utilization must be in (0, 1], got {u}"));
                }
                utilization = Some(u);
            }
            "--dataset-tokens" => {
                dataset_tokens = number(value(args, &mut i, flag)?, flag)?;
                if !(dataset_tokens.is_finite() && dataset_tokens >= 0.0) {
                    return Err("--dataset-tokens must be a non-negative number".into());
                }
            }
            "--usd-per-gpu-hour" => {
                let rate: f64 = number(value(args, &mut i, flag)?, flag)?;
                if !(rate.is_finite() && rate >= 0.0) {
                    return Err(format!(
                        "--usd-per-gpu-hour must be a non-negative number of dollars, got {rate}"
                    ));
                }
                usd_per_gpu_hour = Some(rate);
            }
            other if !other.starts_with('-') && file.is_none() => {
                given.push("FILE");
                file = Some(other.to_string())
            }
            other if !other.starts_with('-') => {
                return Err(format!(
                    "{other:?}: one file argument at most (the first was {:?})",
                    file.as_deref().unwrap_or_default()
                ))
            }
            other => set_field(&mut s, args, &mut i, other)?,
        }
        i += 1;
    }
    let arch = model.ok_or(
        "plan needs --model NAME, --config FILE or --from a training config naming its model",
    )?;
    Ok(PlanArgs {
        arch,
        title,
        settings: s,
        gpu,
        json,
        model_id,
        format,
        chars_per_token,
        file,
        utilization,
        dataset_tokens,
        usd_per_gpu_hour,
        given,
        ignored,
        from,
    })
}

impl PlanArgs {
    /// The catalog card chosen, if the GPU is one (not a custom memory size).
    /// The catalog card, at the `--usd-per-gpu-hour` rate when one is given.
    fn card(&self) -> Option<GpuEntry> {
        match self.gpu {
            GpuChoice::Catalog(g) => Some(GpuEntry {
                usd_per_gpu_hour: self.usd_per_gpu_hour.or(g.usd_per_gpu_hour),
                ..g.clone()
            }),
            GpuChoice::Custom(_) => None,
        }
    }

    /// Whose hourly rate an epoch's cost is at.
    fn rate_source(&self) -> &'static str {
        if self.usd_per_gpu_hour.is_some() {
            "--usd-per-gpu-hour"
        } else {
            "the catalog's cited rate"
        }
    }

    fn gpu(&self) -> (String, u128, bool) {
        match &self.gpu {
            GpuChoice::Catalog(g) => (g.name.clone(), g.capacity_bytes(), g.bf16_ok()),
            GpuChoice::Custom(gib) => (
                format!("custom {gib} GiB GPU"),
                (gib * report::GIB) as u128,
                true,
            ),
        }
    }
}

fn emit(out: &mut dyn Write, text: &str) -> Result<(), String> {
    out.write_all(text.as_bytes()).map_err(|e| e.to_string())
}

fn cmd_fit(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> Result<(), String> {
    let a = parse_for(
        "fit",
        &["--from", "--gpu", "--gpu-mem-gib", "--json"],
        args,
        err,
    )?;
    let (gpu_name, capacity, _) = a.gpu();
    let e = crate::planning::evaluate::evaluate_arch(
        &a.arch,
        &gpu_name,
        capacity,
        &a.settings,
        crate::planning::fit::Fidelity::Simulated,
    )?;
    let smallest = crate::planning::evaluate::smallest_gpu(&a.arch, &a.settings);
    let curve = crate::planning::evaluate::curve(
        &a.arch,
        &a.settings,
        crate::planning::evaluate::Axis::Seq,
    );
    if a.json {
        let pts: Vec<_> = curve.iter().map(|p| json!({"seq": p.x, "peak_allocated_bytes": p.allocated_bytes, "nvidia_smi_bytes": p.smi_bytes})).collect();
        let doc = json!({"gpu": gpu_name, "capacity_bytes": capacity, "max_batch": e.max_batch, "max_seq": e.max_seq,
            "smallest_gpu": smallest.map(|g| g.id.clone()), "verdict": e.verdict, "curve_seq": pts});
        return emit(out, &format!("{doc}\n"));
    }
    let show = |x: Option<u64>| {
        x.map(|v| v.to_string())
            .unwrap_or_else(|| "none (not even 1)".into())
    };
    let mut t = format!(
        "{}\n  on {gpu_name} ({} usable): {}\n",
        a.title,
        report::gib(capacity),
        e.verdict.status.name()
    );
    t.push_str(&format!(
        "  largest micro-batch at seq {}: {}\n",
        a.settings.seq,
        show(e.max_batch)
    ));
    t.push_str(&format!(
        "  longest sequence at batch {}: {}\n",
        a.settings.batch,
        show(e.max_seq)
    ));
    t.push_str(&format!(
        "  smallest catalog GPU that fits: {}\n\n  seq      peak allocated   nvidia-smi\n",
        smallest
            .map(|g| format!("{} ({})", g.id, g.name))
            .unwrap_or_else(|| "none".into())
    ));
    for p in &curve {
        t.push_str(&format!(
            "  {:<8} {:>14} {:>12}\n",
            p.x,
            report::gib(p.allocated_bytes),
            report::gib(p.smi_bytes)
        ));
    }
    emit(out, &t)
}

fn cmd_suggest(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> Result<(), String> {
    let a = parse_for(
        "suggest",
        &[
            "--from",
            "--gpu",
            "--gpu-mem-gib",
            "--json",
            "--usd-per-gpu-hour",
        ],
        args,
        err,
    )?;
    let (gpu_name, capacity, bf16_ok) = a.gpu();
    let p = plan_simulated(&a.arch, &a.settings).map_err(|e| e.to_string())?;
    let job = crate::model::job::plan_job_within(&a.arch, &a.settings, &p, capacity)
        .map_err(|e| e.to_string())?;
    let v = crate::planning::job_verdict(&job, capacity);
    let deciding = job.deciding();
    // Judged like the verdict above: the caching allocator simulated.
    let how = crate::planning::fit::Fidelity::Simulated;
    let card = a.card();
    let card = card.as_ref();
    let fixes =
        crate::planning::fixes::suggest_with(&a.arch, &a.settings, capacity, bf16_ok, card, how);
    let best = crate::planning::fixes::best_combination_with(
        &a.arch,
        &a.settings,
        capacity,
        bf16_ok,
        card,
        how,
    );
    let myths = crate::planning::fixes::myths(&a.arch, &a.settings);
    let allocator = crate::planning::fixes::allocator_fix(&a.arch, &a.settings, capacity);
    // The current step's time on the card: each change's time and cost scale from it.
    let time = card.and_then(|g| {
        crate::planning::time::estimate(
            &a.arch,
            &a.settings,
            &p,
            g,
            None,
            crate::planning::time::DEFAULT_DATASET_TOKENS,
        )
    });
    let speed = |f: &crate::planning::fixes::Fix| report::fix_speed(f.time_factor, time.as_ref());
    if a.json {
        return emit(
            out,
            &format!(
                "{}\n",
                json!({"gpu": gpu_name, "verdict": v, "peak_allocated_bytes": deciding.allocated_bytes, "time": time, "best": best, "fixes": fixes, "allocator": allocator, "myths": myths})
            ),
        );
    }
    let mut t = format!(
        "{}: {} on {gpu_name} (nvidia-smi {} of {}{})\n\n",
        a.title,
        v.status.name(),
        report::gib(deciding.gpu_peak_bytes),
        report::gib(capacity),
        if deciding.name == "train" {
            String::new()
        } else {
            format!(", in the job's {} phase", deciding.name)
        }
    );
    if let Some(b) = &best {
        t.push_str(&format!(
            "{}:\n  {}\n  → peak {}, nvidia-smi {}, {} | {} | cost: {}\n\n",
            if b.last_resort {
                "No combination fits at this sequence length; last resort"
            } else {
                "Cheapest combination that fits (same sequence length and effective batch)"
            },
            b.title,
            report::gib(b.peak_allocated_bytes),
            report::gib(b.nvidia_smi_bytes),
            b.status.name(),
            speed(b),
            b.cost
        ));
    }
    if let Some(f) = &allocator {
        t.push_str(&format!(
            "Allocator setting (no tensor changes; simulated): PYTORCH_CUDA_ALLOC_CONF={}\n  → reserved {} instead of {} ({} saved), nvidia-smi {}, {}\n\n",
            f.alloc_conf,
            report::gib(f.reserved_after_bytes),
            report::gib(f.reserved_before_bytes),
            report::gib_signed(f.saved_bytes),
            report::gib(f.nvidia_smi_bytes),
            f.status.name()
        ));
    }
    t.push_str("Single changes, best first (each re-planned):\n");
    let shown = |f: &&crate::planning::fixes::Fix| best.is_none() || f.id != "combined";
    for (n, f) in fixes.iter().filter(shown).enumerate() {
        t.push_str(&format!(
            "  {}. {}\n     saves {} → peak {}, {} | {} | cost: {}\n",
            n + 1,
            f.title,
            report::gib(f.saved_bytes.max(0) as u128),
            report::gib(f.peak_allocated_bytes),
            f.status.name(),
            speed(f),
            f.cost
        ));
    }
    t.push_str("\nForum remedies, checked:\n");
    for m in &myths {
        let d = m
            .delta_bytes
            .map(report::gib_signed)
            .unwrap_or_else(|| "n/a".into());
        t.push_str(&format!("  - {} → {d}\n    {}\n", m.claim, m.why));
    }
    emit(out, &t)
}

fn cmd_export(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> Result<(), String> {
    let a = parse_for("export", &["--from", "--format"], args, err)?;
    let f = a.format.clone().ok_or_else(|| {
        format!(
            "export needs --format {}",
            crate::formats::export::FORMATS.join("|")
        )
    })?;
    plan(&a.arch, &a.settings).map_err(|e| e.to_string())?;
    emit(
        out,
        &crate::formats::export::export(&f, &a.model_id, &a.arch, &a.settings)?,
    )
}

fn cmd_lengths(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> Result<(), String> {
    let a = parse_for(
        "lengths",
        &[
            "--gpu",
            "--gpu-mem-gib",
            "--json",
            "--chars-per-token",
            "FILE",
        ],
        args,
        err,
    )?;
    let path = a
        .file
        .clone()
        .ok_or("lengths needs a FILE (numbers, JSONL or CSV)")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let lengths = crate::planning::lengths::parse_lengths(&text, a.chars_per_token)?;
    let (gpu_name, capacity, _) = a.gpu();
    let r = crate::planning::lengths::analyze(&a.arch, &a.settings, capacity, &lengths)?;
    if a.json {
        return emit(out, &format!("{}\n", json!({"gpu": gpu_name, "report": r})));
    }
    let mut t = format!(
        "{} samples: p50 {} · p95 {} · max {} tokens\n  peak at a typical batch (p50): {}\n  peak at the longest batch:     {} (nvidia-smi {} of {} on {gpu_name})\n",
        r.stats.n, r.stats.p50, r.stats.p95, r.stats.max, report::gib(r.typical_peak_bytes), report::gib(r.longest_peak_bytes), report::gib(r.longest_smi_bytes), report::gib(capacity)
    );
    t.push_str(&format!(
        "  longest length that fits: {}\n",
        r.max_fitting_seq
            .map(|v| v.to_string())
            .unwrap_or_else(|| "none".into())
    ));
    match r.expected_oom_step {
        Some(step) => t.push_str(&format!(
            "  {}\n",
            crate::planning::lengths::oom_words(&r, step)
        )),
        None => t.push_str("  every sample fits\n"),
    }
    for adv in &r.advice {
        t.push_str(&format!("  - {adv}\n"));
    }
    emit(out, &t)
}

fn cmd_plan(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> Result<(), String> {
    let uses = [
        "--from",
        "--gpu",
        "--gpu-mem-gib",
        "--json",
        "--utilization",
        "--dataset-tokens",
        "--usd-per-gpu-hour",
    ];
    let a = parse_for("plan", &uses, args, err)?;
    let p = plan_simulated(&a.arch, &a.settings).map_err(|e| e.to_string())?;
    let (gpu_name, capacity, _) = a.gpu();
    let job = crate::model::job::plan_job_within(&a.arch, &a.settings, &p, capacity)
        .map_err(|e| e.to_string())?;
    let v = crate::planning::job_verdict(&job, capacity);
    let card = a.card();
    let time = card.as_ref().and_then(|g| {
        crate::planning::time::estimate(
            &a.arch,
            &a.settings,
            &p,
            g,
            a.utilization,
            a.dataset_tokens,
        )
    });
    if a.json {
        let doc = match &a.from {
            // A training config: its settings by the table's names, and what it did not use.
            Some(r) => {
                json!({"model": a.arch, "settings": fields::settings_json(&a.settings), "gpu": gpu_name, "verdict": v, "plan": p, "job": job, "time": time,
                "ignored": r.ignored, "not_modeled": r.not_modeled.iter().map(|n| &n.key).collect::<Vec<_>>(), "config": r.to_json()})
            }
            None => {
                json!({"model": a.arch, "settings": a.settings, "gpu": gpu_name, "verdict": v, "plan": p, "job": job, "time": time, "ignored": a.ignored})
            }
        };
        writeln!(out, "{doc}").map_err(|e| e.to_string())?;
    } else {
        if let Some(r) = &a.from {
            writeln!(out, "{}", r.text()).map_err(|e| e.to_string())?;
        }
        write!(out, "{}", report::text(&p, &a.title, Some((&gpu_name, &v))))
            .map_err(|e| e.to_string())?;
        write!(out, "{}", report::job_text(&job, &v)).map_err(|e| e.to_string())?;
        if let Some(t) = time {
            let cost = match (t.usd_per_epoch, t.usd_per_gpu_hour) {
                (Some(c), Some(h)) => format!(
                    ", ≈ ${c:.2} per epoch on {} GPU(s) at ${h}/GPU-hour ({})",
                    a.settings.parallel.world(),
                    a.rate_source()
                ),
                _ => String::new(),
            };
            writeln!(out, "\nTime (estimate)\n  {:.2} s per optimizer step, {:.0} tokens/s, {:.1} h per epoch of {} tokens{cost}\n  {}", t.seconds_per_step, t.tokens_per_second, t.seconds_per_epoch / 3600.0, a.dataset_tokens, t.explanation).map_err(|e| e.to_string())?;
        }
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
        let (ok, text) = crate::formats::jsonl::output_line(&line);
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
        "{:<16} {:<11} {:>9} {:>7} {:>7} {:>6} {:>4} {:>8}  {}\n",
        "name", "family", "params", "hidden", "inter", "layers", "kv", "vocab", "hf_id"
    );
    for m in catalog::models() {
        let a = &m.arch;
        let experts = if a.is_moe() {
            format!(
                "  ({} experts, top-{}, {:.2}B active)",
                a.num_experts(),
                a.experts_per_tok(),
                a.active_params() as f64 / 1e9
            )
        } else {
            String::new()
        };
        s.push_str(&format!(
            "{:<16} {:<11} {:>8.2}B {:>7} {:>7} {:>6} {:>4} {:>8}  {}{experts}\n",
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

fn cmd_validate(args: &[String], out: &mut dyn Write) -> Result<(), String> {
    let json = match args {
        [] => false,
        [flag] if flag == "--json" => true,
        _ => return Err("validate takes only --json".into()),
    };
    let v = crate::formats::validation::validate()?;
    if json {
        return emit(
            out,
            &serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?,
        );
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut t = format!(
        "{:<78} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8}\n",
        "measured training step", "alloc", "planned", "err %", "reserved", "planned", "err %"
    );
    for c in &v.cases {
        t.push_str(&format!(
            "{:<78} {:>9.3} {:>9.3} {:>+8.2} {:>9} {:>9.3} {:>8}\n",
            c.id,
            gib(c.measured_allocated_bytes),
            gib(c.planned_allocated_bytes),
            c.allocated_error_pct,
            c.replayed_reserved_bytes
                .map(|r| format!("{:.3}", gib(r)))
                .unwrap_or_else(|| "—".into()),
            gib(c.planned_reserved_bytes),
            c.reserved_error_pct
                .map(|e| format!("{e:+.2}"))
                .unwrap_or_else(|| "—".into()),
        ));
    }
    let stats = |name: &str, s: &crate::formats::validation::ErrorStats| {
        format!(
            "{name}: {} rows, median |error| {:.2} %, max {:.2} %, worst under {:+.2} %, worst over {:+.2} %\n",
            s.n, s.median_abs_pct, s.max_abs_pct, s.worst_under_pct, s.worst_over_pct
        )
    };
    t.push_str(&stats("allocated (measured peaks)", &v.allocated));
    t.push_str(&stats(
        "reserved (PyTorch's allocator replayed)",
        &v.reserved,
    ));
    t.push_str("\npublished runs on real GPUs (nvidia-smi; allocated where the run recorded it and finished):\n");
    for r in &v.published {
        let planned = match &r.planned {
            Ok(p) => {
                let allocated = match r.measured_allocated_bytes {
                    Some(m) if !r.measured_oom && m > 0 => format!(
                        "; allocated {:.2} GiB planned {:.2} GiB ({:+.1} %)",
                        gib(m),
                        gib(p.allocated_bytes),
                        (p.allocated_bytes as f64 - m as f64) / m as f64 * 100.0
                    ),
                    _ => String::new(),
                };
                format!(
                    "planned {:.2} GiB ({:+.1} %){}{allocated}",
                    gib(p.smi_bytes),
                    p.smi_error_pct,
                    if p.oom { ", out of memory" } else { "" }
                )
            }
            Err(e) => format!("not planned: {e}"),
        };
        t.push_str(&format!(
            "  {:<70} measured {:.2} GiB{}; {planned}\n",
            r.id,
            gib(r.measured_smi_bytes),
            if r.measured_oom {
                " (out of memory)"
            } else {
                ""
            }
        ));
    }
    t.push_str(&stats("nvidia-smi (runs that finished)", &v.smi));
    t.push_str(&format!(
        "out-of-memory runs called out of memory: {} of {}\n",
        v.oom_called.0, v.oom_called.1
    ));
    emit(out, &t)
}

fn cmd_inspect(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> Result<(), String> {
    let Some(path) = args.first().filter(|a| !a.starts_with('-')) else {
        return Err("inspect needs a FILE (a memory snapshot, memory_summary() text or memory_stats() JSON)".into());
    };
    let rest = &args[1..];
    let json = rest.iter().any(|a| a == "--json");
    let has_model = rest.iter().any(|a| a == "--model" || a == "--config");
    let config = if has_model {
        Some(parse_for("inspect", &["--json"], rest, err)?)
    } else {
        if let Some(other) = rest.iter().find(|a| *a != "--json") {
            return Err(format!(
                "{other}: settings need --model NAME or --config FILE to compare with a plan"
            ));
        }
        None
    };
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let ins =
        crate::planning::inspect::inspect(&bytes, config.as_ref().map(|a| (&a.arch, &a.settings)))?;
    if json {
        return emit(
            out,
            &serde_json::to_string_pretty(&ins).map_err(|e| e.to_string())?,
        );
    }
    let g = |b: Option<u64>| {
        b.map(|b| report::gib(b as u128))
            .unwrap_or_else(|| "—".into())
    };
    let bound = if ins.trace_truncated {
        " (lower bound)"
    } else {
        ""
    };
    let mut t = format!(
        "{path}: {}\n  peak allocated   {:>12}{bound}\n  peak reserved    {:>12}{bound}\n  peak requested   {:>12}{bound}\n",
        ins.kind,
        g(ins.peak_allocated_bytes),
        g(ins.peak_reserved_bytes),
        g(ins.peak_requested_bytes)
    );
    if let Some(p) = &ins.planned {
        t.push_str(&format!(
            "  planned          {:>12} allocated, {} reserved\n",
            report::gib(p.peak_allocated_bytes as u128),
            report::gib(p.peak_reserved_bytes as u128)
        ));
        for u in &ins.unplanned {
            t.push_str(&format!(
                "  unplanned        {:>12}   {} × {} allocated in {}\n",
                report::gib(u.bytes as u128),
                u.count,
                report::gib(u.bytes_each as u128),
                u.phase
            ));
        }
    }
    for f in &ins.findings {
        t.push_str(&format!("  - {f}\n"));
    }
    emit(out, &t)
}
