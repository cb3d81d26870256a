//! The Chinese page translates every text the planner writes: term labels, components, phases,
//! peak moments, reserve explanations, notes, fixes, myths, the settings table, link notices and
//! the findings of a measured run, over every catalog model and every value of every setting.
//! A missing text fails here, and its key (numbers written `#`) is written to
//! `target/i18n-missing.txt` for the translator.

use std::collections::BTreeMap;

use lorafit::formats::{catalog, fields};
use lorafit::model::{plan, plan_simulated, Component, Settings};
use lorafit::planning::{fixes, inspect, lengths};
use lorafit::web::i18n;

/// Texts by where they come from (kept sorted, so the missing list reads by topic).
#[derive(Default)]
struct Texts(BTreeMap<String, &'static str>);

impl Texts {
    fn add(&mut self, from: &'static str, s: &str) {
        if !s.trim().is_empty() {
            self.0.entry(s.to_string()).or_insert(from);
        }
    }

    /// What a fix shows: its title, summary and cost.
    fn add_fix(&mut self, f: &fixes::Fix) {
        self.add("fix", &f.title);
        self.add("fix", &f.summary);
        self.add("fix cost", &f.cost);
    }
}

/// One settings value per choice, both states of every switch and both ends of every slider.
fn variants() -> Vec<Settings> {
    let mut out = vec![Settings::default()];
    for f in fields::FIELDS {
        let values: Vec<String> = match f.kind {
            fields::Kind::Choice(choices) => choices().iter().map(|(v, _)| v.to_string()).collect(),
            fields::Kind::Bool => vec!["1".into(), "0".into()],
            _ => f
                .slider
                .map(|sl| vec![sl.min.to_string(), sl.max.to_string()])
                .unwrap_or_default(),
        };
        for v in values {
            let mut s = Settings::default();
            if (f.set)(&mut s, &v).is_ok() && s.validate().is_ok() {
                out.push(s);
            }
        }
    }
    // Several GPUs under each strategy, with offload; checkpointing with QLoRA; a kept overhead.
    for q in [
        "gpus=4&st=fsdp",
        "gpus=4&st=ddp",
        "gpus=8&nodes=2&st=hybrid",
        "gpus=4&st=zero3&off=opt,params",
        "gpus=2&st=zero2&off=opt",
        "gc=1&dt=nf4&b=4&s=4096",
        "attn=eager&do=0.1&dt=fp32",
        "mo=1073741824",
        "stage=grpo&b=8&ng=8&s=64&mcl=8",
        "stage=grpo&b=4&ng=4&beta=0.04&ni=2&do=0.05&s=64&mcl=8",
        "stage=grpo&b=4&ng=2&beta=0.04&ft=full&s=64&mcl=8",
        "stage=grpo&b=8&ng=8&gen=vllm_colocate&vu=0.9&s=64&mcl=8",
        "stage=grpo&b=8&ng=8&gen=vllm_colocate&vs=1&s=64&mcl=8",
        "stage=grpo&b=8&ng=8&gen=vllm_server&s=64&mcl=8",
    ] {
        let (st, _) = lorafit::web::link::decode(q);
        out.push(st.settings);
    }
    out
}

fn collect() -> Texts {
    let mut t = Texts::default();
    // Written only for a step past the program's bound (no variant below reaches it).
    for c in Component::ALL.iter().chain(&Component::ABOVE_ALLOCATED) {
        t.add("component", c.label());
    }
    for f in fields::FIELDS {
        t.add("setting label", f.label);
        t.add("setting help", f.help);
        if let fields::Kind::Choice(choices) = f.kind {
            // A label that is its value (`sdpa`, `ddp`) is what users type: it stays.
            for (value, label) in choices() {
                if label != value {
                    t.add("setting choice", label);
                }
            }
        }
    }
    // Every name the breakdown read off the step's sequence can give a term, and the moments
    // built from them.
    for l in lorafit::model::steptrace::anatomy::every_label_text() {
        t.add("term", &l);
        t.add("peak moment", &format!("allocating the {l}"));
        t.add("peak moment", &format!("allocating the {l} of layer 7"));
    }
    let vars = variants();
    let mut plans = 0;
    for m in catalog::models() {
        for (i, s) in vars.iter().enumerate() {
            let Ok(p) = plan(&m.arch, s) else { continue };
            plans += 1;
            t.add("phase", p.peak_phase.name());
            t.add("peak moment", &p.peak_moment);
            t.add("reserve", &p.reserve_explanation);
            for n in &p.notes {
                t.add("note", n);
            }
            for term in p.terms.iter().chain(&p.outside_terms).chain(&p.cpu_terms) {
                t.add("term", &term.label);
            }
            for ph in &p.phases {
                t.add("phase", ph.phase.name());
                t.add("peak moment", &ph.moment);
            }
            // The heavier features on a sample: the simulated reserve, fixes, myths.
            if i % 9 == 0 {
                for conf in ["", "expandable_segments:True"] {
                    let s = Settings {
                        alloc_conf: conf.into(),
                        ..s.clone()
                    };
                    if let Ok(p) = plan_simulated(&m.arch, &s) {
                        t.add("reserve", &p.reserve_explanation);
                        for n in &p.notes {
                            t.add("note", n);
                        }
                        // The allocated figures read off the step's sequence: its terms and
                        // moments.
                        t.add("peak moment", &p.peak_moment);
                        for term in &p.terms {
                            t.add("term", &term.label);
                        }
                        for ph in &p.phases {
                            t.add("peak moment", &ph.moment);
                            for term in &ph.terms {
                                t.add("term", &term.label);
                            }
                        }
                    }
                }
                // The job's own phases and fixes are collected below, on fewer settings: each
                // change judged by a run of the whole job is too slow for every model.
                let fixes = if s.job.runs_on_gpu_after_training() {
                    vec![]
                } else {
                    fixes::suggest(&m.arch, s, 24 << 30, true)
                };
                for f in fixes {
                    t.add_fix(&f);
                }
                for my in fixes::myths(&m.arch, s) {
                    t.add("myth", my.claim);
                    t.add("myth", &my.why);
                }
            }
        }
    }
    assert!(plans > 1000, "only {plans} plans");
    // The sample above reaches a variant's fixes and myths on a few models only: every variant's
    // on one dense and one MoE model too (quick fixes: where their texts come from), so a
    // setting added to the table cannot shift the sample off a text nobody translated.
    for name in ["qwen2-0.5b", "olmoe-1b-7b"] {
        let a = &catalog::find_model(name).unwrap().arch;
        for s in &vars {
            if plan(a, s).is_err() || s.job.runs_on_gpu_after_training() {
                continue;
            }
            for f in fixes::suggest(a, s, 24 << 30, true) {
                t.add_fix(&f);
            }
            for my in fixes::myths(a, s) {
                t.add("myth", my.claim);
                t.add("myth", &my.why);
            }
        }
    }
    // The job's phases after training (evaluation with the loss or the logits kept, checkpoint
    // saving under each strategy, the merge on either device) on a GPU with room to spare and
    // on a full one, their titles on the page, and the changes aimed at them.
    for name in ["train", "eval", "save", "merge"] {
        t.add("job phase", lorafit::web::layout::phase_title(name));
        if name != "train" {
            t.add("job phase", lorafit::web::layout::decided_by(name));
        }
    }
    type Variant = (&'static str, fn(&mut Settings));
    let job_variants: Vec<Variant> = vec![
        ("eval, loss only", |s| {
            s.job.eval_strategy = lorafit::model::job::EvalStrategy::Steps
        }),
        ("eval, logits kept", |s| {
            s.batch = 1;
            s.seq = 512;
            s.job.eval_batch = Some(16);
            s.job.eval_samples = Some(128);
            s.job.prediction_loss_only = false;
        }),
        ("eval, logits moved", |s| {
            s.job.eval_batch = Some(16);
            s.job.eval_samples = Some(256);
            s.job.prediction_loss_only = false;
            s.job.eval_accumulation_steps = Some(2);
        }),
        ("eval past a full GPU", |s| {
            s.batch = 1;
            s.seq = 512;
            s.job.eval_batch = Some(1);
            s.job.eval_samples = Some(128);
            s.job.prediction_loss_only = false;
        }),
        ("merge on the GPU", |s| {
            s.job.merge = true;
            s.job.export_device = lorafit::model::job::ExportDevice::Gpu;
        }),
        ("4-bit merge on the GPU", |s| {
            s.quant = Some(lorafit::model::Quant::Nf4);
            s.job.merge = true;
            s.job.export_device = lorafit::model::job::ExportDevice::Gpu;
        }),
        ("merge on the host", |s| s.job.merge = true),
        ("fsdp save", |s| {
            s.parallel.gpus_per_node = 4;
            s.parallel.strategy = lorafit::model::Strategy::FsdpFullShard;
        }),
        ("zero-3 save", |s| {
            s.parallel.gpus_per_node = 4;
            s.parallel.strategy = lorafit::model::Strategy::Zero3;
        }),
        ("full fine-tuning, model only", |s| {
            s.finetuning_type = lorafit::model::FinetuningType::Full;
            s.job.save_only_model = true;
        }),
    ];
    let a = &catalog::find_model("llama2-7b").unwrap().arch;
    for (what, set) in job_variants {
        let mut s = Settings::default();
        set(&mut s);
        let p = plan_simulated(a, &s).unwrap_or_else(|e| panic!("{what}: {e}"));
        for cap in [None, Some(24u128 << 30)] {
            let job = match cap {
                Some(c) => lorafit::model::job::plan_job_within(a, &s, &p, c),
                None => lorafit::model::job::plan_job(a, &s, &p),
            }
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            for ph in &job.phases {
                t.add("job moment", &ph.moment);
                for term in ph.terms.iter().chain(&ph.host_terms) {
                    t.add("job term", &term.label);
                }
                for n in &ph.notes {
                    t.add("job note", n);
                }
            }
        }
        for f in fixes::suggest(a, &s, 24 << 30, true) {
            t.add_fix(&f);
        }
    }
    // What fits first, the length distribution (mid-training OOM) and its errors.
    let long_tail: Vec<u64> = (0..2000u64)
        .map(|i| 200 + (i * 37) % 900 + if i % 97 == 0 { 6000 } else { 0 })
        .collect();
    for (model, q) in [
        ("llama2-7b", "b=8&s=4096"),
        ("qwen2-7b", "b=4&s=2048"),
        ("llama2-70b", ""),
        ("mixtral-8x7b", "dt=nf4"),
        ("llama2-7b", "b=1&s=512"),
        ("qwen2-7b", "b=64&s=512&gc=1&dt=nf4"),
    ] {
        let a = &catalog::find_model(model).unwrap().arch;
        let s = lorafit::web::link::decode(q).0.settings;
        for cap in [24u128 << 30, 80 << 30, 8 << 30] {
            let best = fixes::best_combination(a, &s, cap, true);
            for f in best.iter().chain(&fixes::suggest(a, &s, cap, false)) {
                t.add_fix(f);
            }
            for lens in [long_tail.clone(), vec![100, 200, 300], vec![50_000; 10]] {
                match lengths::analyze(a, &s, cap, &lens) {
                    Ok(r) => {
                        for x in &r.advice {
                            t.add("lengths", x);
                        }
                        if let Some(step) = r.expected_oom_step {
                            t.add("lengths", &lengths::oom_words(&r, step));
                        }
                    }
                    Err(e) => t.add("lengths error", &e),
                }
            }
        }
    }
    for bad in ["", "abc", "p50=x", "-5\n7", "{\"text\": 5}"] {
        if let Err(e) = lengths::parse_lengths(bad, 4.0) {
            t.add("lengths error", &e);
        }
    }
    for bad in [
        "",
        "{",
        "[]",
        "{\"model_type\": \"bert\"}",
        "{\"model_type\": \"llama\"}",
        "{\"model_type\": \"llama\", \"hidden_size\": -1}",
    ] {
        if let Err(e) = lorafit::formats::config_json::parse_config(bad) {
            t.add("config error", &e);
        }
    }
    // The GPU page's time estimate, for dense and MoE models, with and without checkpointing.
    for (model, q) in [
        ("llama2-7b", ""),
        ("llama2-7b", "gc=1&dt=nf4"),
        ("mixtral-8x7b", "gc=1"),
        ("qwen3-30b-a3b", "do=0"),
    ] {
        let a = &catalog::find_model(model).unwrap().arch;
        let s = lorafit::web::link::decode(q).0.settings;
        for gpu in ["a100-80", "rtx4090", "t4"] {
            let g = catalog::find_gpu(gpu).unwrap();
            let p = lorafit::model::plan(a, &s).unwrap();
            for given in [None, Some(0.4)] {
                if let Some(e) = lorafit::planning::time::estimate(a, &s, &p, g, given, 1e8) {
                    t.add("time", &e.explanation);
                }
            }
        }
    }
    for ex in lorafit::web::examples::EXAMPLES {
        t.add("example", ex.title);
        for (label, _) in ex.rows {
            t.add("example", label);
        }
    }
    for q in ["zzz=1&b=x", "gpus=4&off=params", "t=", &"x".repeat(5000)] {
        for n in lorafit::web::link::decode(q).1 {
            t.add("link notice", &n);
        }
    }
    for (name, bytes) in [(
        "summary",
        include_bytes!("../data/unplanned/logits-fp32.pickle.gz").as_slice(),
    )] {
        let a = &catalog::find_model("llama2-7b").unwrap().arch;
        if let Ok(ins) = inspect::inspect(bytes, Some((a, &Settings::default()))) {
            for f in &ins.findings {
                t.add("measured finding", f);
            }
        }
        let _ = name;
    }
    t
}

/// Whether a text is a name or an identifier users type, which stays as it is.
fn untranslatable(s: &str) -> bool {
    !s.contains(' ')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.,/()=:".contains(c))
        && s.chars().any(|c| c.is_ascii_digit() || "_.=/:".contains(c))
}

#[test]
fn every_text_the_planner_writes_has_a_chinese_translation() {
    let texts = collect();
    let mut missing: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (s, from) in &texts.0 {
        if !untranslatable(s) && !i18n::has(s) {
            missing.entry(from).or_default().push(s.clone());
        }
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/i18n-missing.txt");
    if missing.is_empty() {
        let _ = std::fs::remove_file(path);
    } else {
        let mut out = String::new();
        for (from, list) in &missing {
            let mut keys: Vec<String> = list.iter().map(|s| i18n::key_of(s)).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                out.push_str(&format!("{from}\t{k}\n"));
            }
        }
        let _ = std::fs::write(path, &out);
        let n: usize = missing.values().map(Vec::len).sum();
        panic!(
            "{n} texts have no Chinese translation (keys in {path}):\n{}",
            &out[..out.len().min(3000)]
        );
    }
}

/// The labels the views write (`t("…")` in `src/web`, `tl("…")` in the GPU page) are in the
/// table too.
#[test]
fn every_label_of_the_views_has_a_chinese_translation() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut missing = vec![];
    let files = std::fs::read_dir(format!("{root}/src/web"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .chain([std::path::PathBuf::from(format!("{root}/src/gpu/page.rs"))]);
    for path in files {
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        let calls = src
            .match_indices("t(\"")
            .chain(src.match_indices("tl(\""))
            .map(|(i, m)| (i, m.len()));
        for (i, len) in calls {
            if i > 0
                && (src.as_bytes()[i - 1].is_ascii_alphanumeric() || src.as_bytes()[i - 1] == b'_')
            {
                continue;
            }
            let rest = &src[i + len..];
            let Some(end) = rest.find('"') else { continue };
            let label = rest[..end].replace("\\\"", "\"");
            if !i18n::has(&label) {
                missing.push(format!(
                    "{}: {label}",
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "labels without a translation:\n{}",
        missing.join("\n")
    );
}
