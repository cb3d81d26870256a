//! The training configs users paste: a LLaMA-Factory or axolotl YAML, an ms-swift command line,
//! a TrainingArguments / LoraConfig JSON (or a saved `adapter_config.json`), a DeepSpeed JSON.
//! Each is read into [`Settings`] through the settings table ([`super::fields`]), by a table of
//! the framework's keys ([`Rule`]), so that the answer ([`Reading`]) names every key it used and
//! the setting it became, every key it ignored, and every key that changes memory but is not
//! modelled; a value it cannot use is an error naming the key. Settings the config does not give
//! take the framework's own default, listed as assumed.
//!
//! One module per framework holds its table; this one holds the reader they share and the
//! detection of the format.

mod accelerate;
mod axolotl;
mod deepspeed;
mod hf;
mod llama_factory;
mod python;
mod swift;

use super::fields;
use crate::model::Settings;
use serde::Serialize;
use serde_json::{Map, Value};

/// Where a config comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A LLaMA-Factory YAML (`llamafactory-cli train FILE`).
    LlamaFactory,
    /// An axolotl YAML.
    Axolotl,
    /// An ms-swift command line (`swift sft …`, `swift rlhf …`).
    Swift,
    /// A JSON of TrainingArguments (or TRL's configs) and peft's LoraConfig keys.
    TrainingArguments,
    /// A peft `adapter_config.json`.
    AdapterConfig,
    /// A DeepSpeed JSON.
    DeepSpeed,
    /// A Python script (peft + Trainer, or TRL's trainers).
    Python,
    /// accelerate's launch config (YAML or JSON).
    Accelerate,
}

impl Source {
    /// The name users know it by.
    pub fn name(self) -> &'static str {
        match self {
            Source::LlamaFactory => "LLaMA-Factory YAML",
            Source::Axolotl => "axolotl YAML",
            Source::Swift => "ms-swift command line",
            Source::TrainingArguments => "TrainingArguments / LoraConfig JSON",
            Source::AdapterConfig => "peft adapter_config.json",
            Source::DeepSpeed => "DeepSpeed JSON",
            Source::Python => "Python training script",
            Source::Accelerate => "accelerate config",
        }
    }
}

/// A key of the config and the setting it became.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Used {
    /// The config's key (dotted under a section: `fsdp_config.fsdp_offload_params`).
    pub key: String,
    /// The setting (the settings table's name).
    pub setting: &'static str,
    /// The setting's value as text.
    pub value: String,
}

impl Used {
    /// As a key used: `key → setting = value`.
    pub fn as_used(&self) -> String {
        format!("{} → {} = {}", self.key, self.setting, self.value)
    }

    /// As a default assumed (`key` is whose default): `setting = value (whose)`.
    pub fn as_assumed(&self) -> String {
        format!("{} = {} ({})", self.setting, self.value, self.key)
    }
}

/// A key that changes memory in the framework but is not modelled, and what the plan does
/// instead.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NotModeled {
    /// The config's key.
    pub key: String,
    /// What it does and how the plan stands to it.
    pub why: String,
}

/// What a config said, read into settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// The format.
    pub source: Source,
    /// The model the config names (a Hub id or a path), if it names one.
    pub model: Option<String>,
    /// The settings to plan.
    pub settings: Settings,
    /// Keys used, with the setting each became.
    pub used: Vec<Used>,
    /// Settings the config does not give, taken at the framework's default (`key` says whose).
    pub assumed: Vec<Used>,
    /// Keys given but not used: no effect on GPU memory, or not a key this reader knows.
    pub ignored: Vec<String>,
    /// Keys that change memory but are not modelled.
    pub not_modeled: Vec<NotModeled>,
    /// A launch file the config refers to by path — a DeepSpeed JSON, or ms-swift's FSDP JSON
    /// (`--fsdp path.json`) — read by the caller when it can, with [`apply_launch`]; until then
    /// the strategy is taken from its name (ZeRO's stage) or the framework's default.
    pub launch_path: Option<String>,
    /// What else the reader (or its caller) has to say: how the model was found, a DeepSpeed
    /// file that could not be read.
    pub notes: Vec<String>,
    /// `target_modules` was given as `all` / `all-linear` (peft's own resolution of it where
    /// the config is peft's or Trainer's, or axolotl's, which passes the string to peft), not as
    /// a list of names.
    pub(crate) all_linear_literal: bool,
    /// axolotl's `lora_target_linear`: the names of every module that is an `nn.Linear`
    /// (`find_all_linear_names`), routers that subclass it included.
    pub(crate) axolotl_linear_names: bool,
}

/// How one key of a framework enters the settings.
pub(crate) enum Rule {
    /// Its value is the setting's text.
    To(&'static str),
    /// Read by a function (several settings, a conversion, or a dependence on other keys).
    Read(fn(&mut Reader, &Value) -> Result<(), String>),
    /// The model's name.
    Model,
    /// Changes memory; not modelled (what the plan does instead).
    NotModeled(&'static str),
    /// Known to have no effect on GPU memory: listed as ignored.
    NoEffect,
}

/// A framework's keys, in the order they are applied (a key that depends on another comes
/// after it).
pub(crate) type Table = &'static [(&'static str, Rule)];

/// A framework's default for a setting its config leaves out: (setting, value, whose default).
pub(crate) type Default = (&'static str, &'static str, &'static str);

/// The reading under way: the answer, the config's object and the key being read.
pub(crate) struct Reader<'a> {
    pub(crate) r: Reading,
    pub(crate) obj: &'a Map<String, Value>,
    key: String,
}

impl Reader<'_> {
    /// Sets `setting` from `text` through the settings table, as the current key.
    pub(crate) fn set(&mut self, setting: &'static str, text: &str) -> Result<(), String> {
        let f = fields::by_name(setting)
            .ok_or_else(|| format!("internal: no setting named {setting}"))?;
        (f.set)(&mut self.r.settings, text).map_err(|e| format!("{}: {e}", self.key))?;
        let value = (f.get)(&self.r.settings);
        self.r
            .used
            .retain(|u| !(u.key == self.key && u.setting == setting));
        self.r.used.push(Used {
            key: self.key.clone(),
            setting,
            value,
        });
        Ok(())
    }

    /// Plans `setting` as `text` in place of what the current key asked for, which lorafit does
    /// not model: the key is listed as not modelled, with `why`, not as used.
    pub(crate) fn plan_instead(
        &mut self,
        setting: &'static str,
        text: &str,
        why: impl Into<String>,
    ) -> Result<(), String> {
        self.set(setting, text)?;
        self.r.used.pop();
        self.not_modeled(why);
        Ok(())
    }

    /// Records the current key as changing memory without being modelled.
    pub(crate) fn not_modeled(&mut self, why: impl Into<String>) {
        self.r.not_modeled.push(NotModeled {
            key: self.key.clone(),
            why: why.into(),
        });
    }

    /// Records the current key as used without changing a setting (it says what the defaults
    /// already are), naming the setting it confirms.
    pub(crate) fn confirms(&mut self, setting: &'static str) {
        if let Some(f) = fields::by_name(setting) {
            let value = (f.get)(&self.r.settings);
            self.r.used.push(Used {
                key: self.key.clone(),
                setting,
                value,
            });
        }
    }

    /// Another key of the config (not null).
    pub(crate) fn other(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    /// The current key's name.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Reads a nested section (`fsdp_config`) with `tables`, its keys named `section.key`.
    pub(crate) fn section(&mut self, value: &Value, tables: &[Table]) -> Result<(), String> {
        let Some(obj) = value.as_object() else {
            return Err(format!("{}: expected a mapping", self.key));
        };
        let prefix = self.key.clone();
        let source = self.r.source;
        let mut inner = Reader {
            r: std::mem::replace(&mut self.r, Reading::new(source)),
            obj,
            key: String::new(),
        };
        inner.run(tables, &prefix)?;
        self.r = inner.r;
        self.key = prefix;
        Ok(())
    }

    /// Applies `tables` to the object's keys, a key by the first table that has it (a
    /// framework's own table, then Trainer's keys it passes on); the rest is ignored.
    fn run(&mut self, tables: &[Table], prefix: &str) -> Result<(), String> {
        let mut handled: Vec<&str> = vec![];
        for (key, rule) in tables.iter().flat_map(|t| t.iter()) {
            if handled.contains(key) {
                continue;
            }
            let Some(v) = self.obj.get(*key) else {
                continue;
            };
            handled.push(key);
            if v.is_null() {
                continue;
            }
            self.key = super::unused::path(prefix, key);
            match rule {
                Rule::To(setting) => {
                    let text = fields::json_text(v).map_err(|e| format!("{}: {e}", self.key))?;
                    self.set(setting, &text)?;
                }
                Rule::Read(f) => f(self, v)?,
                Rule::Model => match v {
                    Value::String(m) if !m.trim().is_empty() => {
                        self.r.model = Some(m.trim().to_string())
                    }
                    _ => return Err(format!("{}: expected a model name or path", self.key)),
                },
                Rule::NotModeled(why) => self.not_modeled(*why),
                Rule::NoEffect => self.r.ignored.push(self.key.clone()),
            }
        }
        for (k, v) in self.obj {
            if !handled.contains(&k.as_str()) && !v.is_null() {
                self.r.ignored.push(super::unused::path(prefix, k));
            }
        }
        Ok(())
    }
}

impl NotModeled {
    /// `key: why`.
    pub fn line(&self) -> String {
        format!("{}: {}", self.key, self.why)
    }
}

/// What peft's `target_modules="all-linear"` does beyond the plan on a family whose MLP names it
/// maps onto the fused experts.
const ALL_LINEAR_ROUTER: &str = "peft's target_modules=\"all-linear\" on this model also adapts each layer's router weight (it maps gate onto gate.weight with the MLP names, transformers' qwen2_moe pattern): a LoRA pair on an [experts × hidden] weight per layer, a few MiB that the plan leaves out; list the Linear names to leave the routers out";

impl Reading {
    /// The catalog model the config names (by Hub id, or a published variant of it, which a note
    /// then says), None when it names none.
    pub fn catalog_model(&mut self) -> Result<Option<&'static super::catalog::ModelEntry>, String> {
        let Some(id) = self.model.clone() else {
            return Ok(None);
        };
        let (e, note) = super::catalog::find_model_by_id(&id)?;
        self.notes.extend(note);
        let liger_loss = self.settings.fused_ce == crate::model::settings::FusedCe::Liger;
        let layout = e.arch.family.layout();
        if (self.settings.liger.any() || liger_loss) && layout.liger.is_none() {
            // Liger's switch installs nothing for this family — it has no kernels for it, or
            // its function fails to import (the run stops before training) —: neither its
            // decoder kernels nor its fused loss.
            let why = if layout.liger_unimportable {
                crate::model::family::liger_import_failure(e.arch.family)
            } else if let Some(function) = layout.liger_unplanned {
                format!("liger-kernel 0.8.5's {function} is not planned yet, nor measured: the plan is transformers' modules and loss, not the run's Liger kernels")
            } else {
                format!("liger-kernel 0.8.5 has no kernels for {0} (no apply_liger_kernel_to_{0}; it has them for {1}): the switch leaves transformers' modules and loss, as planned", e.arch.family.name(), crate::model::Family::with_liger())
            };
            // (A fused loss asked for alone, not by the switch, stays unless the family's Liger
            // function fails to import.)
            let loss_too = liger_loss
                && (self.settings.liger.any()
                    || layout.liger_unimportable
                    || layout.liger_unplanned.is_some());
            self.settings.liger = crate::model::Liger::NONE;
            let mut keys = self.unuse("liger_kernel");
            if loss_too {
                self.settings.fused_ce = crate::model::settings::FusedCe::Off;
                keys.extend(self.unuse("fused_ce"));
            }
            keys.dedup();
            for key in keys {
                self.not_modeled.push(NotModeled {
                    key,
                    why: why.clone(),
                });
            }
        }
        let trainer_switch = self
            .used
            .iter()
            .any(|u| u.setting == "liger_kernel" && u.key.ends_with("use_liger_kernel"));
        if self.settings.liger.swiglu
            && trainer_switch
            && e.arch.family == crate::model::Family::Qwen35Moe
        {
            // Trainer patches the built model (`_apply_liger_kernel_to_instance`), which swaps the
            // shared expert's MLP too; the plan is the class-level patch (LLaMA-Factory's).
            self.notes.push("Trainer's use_liger_kernel patches the built Qwen3.5-MoE model, which also makes each layer's shared expert Liger's SwiGLU (apply_liger_kernel_to_qwen3_5_moe, monkey_patch.py:3419); planned with transformers' shared expert, as LLaMA-Factory's enable_liger_kernel leaves it (its activations a little above Liger's)".into());
        }
        if self.settings.liger.swiglu && layout.liger.is_some_and(|l| !l.swiglu()) {
            // Liger has no SwiGLU kernel for this family: its switch installs the others.
            self.settings.liger.swiglu = false;
            self.notes.push(format!("Liger-Kernel has no SwiGLU kernel for {}: its switch installs Liger's RMSNorm and RoPE there (apply_liger_kernel_to_{} patches no MLP)", e.arch.family.name(), e.arch.family.name()));
        }
        if let Some(l) = layout
            .liger
            .filter(|l| self.settings.liger.rope && !l.rope_planned())
        {
            // Liger's RoPE is off by default for this family: its switch installs the others.
            self.settings.liger.rope = false;
            let f = e.arch.family.name();
            self.notes.push(if l.rope == crate::model::family::LigerRope::Unplanned {
                format!("apply_liger_kernel_to_{f} leaves Liger's RoPE off by default: its switch installs Liger's RMSNorm and SwiGLU there")
            } else {
                format!("Liger-Kernel has no RoPE kernel for {f}: its switch installs Liger's RMSNorm and SwiGLU there (apply_liger_kernel_to_{f}'s defaults)")
            });
        }
        let peft_all_linear = self.all_linear_literal
            && matches!(
                self.source,
                Source::Python
                    | Source::TrainingArguments
                    | Source::AdapterConfig
                    | Source::Axolotl
            );
        let breaks_router =
            crate::model::peft_targets::all_linear_breaks_router(&e.arch, &self.settings);
        if self.axolotl_linear_names && breaks_router {
            return Err(format!("axolotl's lora_target_linear lists every module that is an nn.Linear (find_all_linear_names, src/axolotl/loaders/adapter.py), which on {0} includes each layer's router (Llama4Router, an nn.Linear subclass returning scores and logits): its LoRA layer's forward then fails (AttributeError: 'tuple' object has no attribute 'dtype') and the run stops at its first step; set lora_target_linear: false and list lora_target_modules (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)", e.arch.family.name()));
        }
        if peft_all_linear && breaks_router {
            return Err(format!("peft's target_modules=\"all-linear\" on {0} also wraps each layer's router (Llama4Router, an nn.Linear subclass returning scores and logits) in a LoRA layer, whose forward then fails (AttributeError: 'tuple' object has no attribute 'dtype'): the run stops at its first step; list the Linear names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj), as LLaMA-Factory's lora_target all does", e.arch.family.name()));
        }
        if peft_all_linear
            && crate::model::peft_targets::all_linear_reaches_routers(&e.arch, &self.settings)
        {
            // peft's own all-linear, not a framework's list of Linear names.
            self.notes.push(ALL_LINEAR_ROUTER.into());
        }
        Ok(Some(e))
    }

    /// Takes `setting` out of the used list (the plan leaves it out after all): the keys that
    /// had set it, which the caller names as not modelled.
    pub(crate) fn unuse(&mut self, setting: &str) -> Vec<String> {
        let keys = self
            .used
            .iter()
            .filter(|u| u.setting == setting)
            .map(|u| u.key.clone())
            .collect();
        self.used.retain(|u| u.setting != setting);
        keys
    }

    fn new(source: Source) -> Self {
        Reading {
            source,
            model: None,
            settings: Settings::default(),
            used: vec![],
            assumed: vec![],
            ignored: vec![],
            not_modeled: vec![],
            launch_path: None,
            notes: vec![],
            all_linear_literal: false,
            axolotl_linear_names: false,
        }
    }

    /// A setting's value as text, by the settings table's name.
    pub fn setting(&self, name: &str) -> Option<String> {
        fields::by_name(name).map(|f| (f.get)(&self.settings))
    }

    /// The reading as JSON: the format, the model named, the settings by the table's names, the
    /// keys used (with their settings), assumed, ignored and not modelled.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "format": self.source,
            "model": self.model,
            "settings": fields::settings_json(&self.settings),
            "used": self.used,
            "assumed": self.assumed,
            "ignored": self.ignored,
            "not_modeled": self.not_modeled,
            "notes": self.notes,
        })
    }

    /// The reading in words, one line per key.
    pub fn text(&self) -> String {
        let mut out = format!("Read as a {}", self.source.name());
        if let Some(m) = &self.model {
            out.push_str(&format!(" (model {m})"));
        }
        out.push('\n');
        for u in &self.used {
            out.push_str(&format!("  used     {}\n", u.as_used()));
        }
        for a in &self.assumed {
            out.push_str(&format!("  assumed  {}\n", a.as_assumed()));
        }
        for n in &self.not_modeled {
            out.push_str(&format!("  NOT MODELLED {}\n", n.line()));
        }
        if !self.ignored.is_empty() {
            out.push_str(&format!(
                "  ignored (no effect on GPU memory, or not a key this reader knows): {}\n",
                self.ignored.join(", ")
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
        out
    }
}

/// Reads `obj` with a framework's tables: its defaults first, then its keys, then `finish`
/// (defaults that depend on what was read); the settings are validated.
pub(crate) fn read_with(
    source: Source,
    obj: &Map<String, Value>,
    defaults: &[Default],
    tables: &[Table],
    finish: fn(&mut Reader) -> Result<(), String>,
) -> Result<Reading, String> {
    let mut rd = Reader {
        r: Reading::new(source),
        obj,
        key: String::new(),
    };
    for (setting, text, whose) in defaults {
        rd.key = (*whose).to_string();
        rd.set(setting, text)?;
    }
    rd.r.assumed = std::mem::take(&mut rd.r.used);
    rd.run(tables, "")?;
    rd.key.clear();
    finish(&mut rd)?;
    let mut r = rd.r;
    for u in r.used.iter_mut().filter(|u| u.value.is_empty()) {
        u.value = fields::by_name(u.setting)
            .map(|f| (f.get)(&r.settings))
            .unwrap_or_default();
    }
    let used: Vec<&str> = r.used.iter().map(|u| u.setting).collect();
    r.assumed.retain(|a| !used.contains(&a.setting));
    // How a framework prepares a 4-bit base says nothing about a 16-bit one.
    if r.settings.quant.is_none() {
        r.assumed.retain(|a| a.setting != "prepare_kbit");
    }
    if r.settings.preference() {
        // A preference trainer's evaluation is not planned: the plan leaves it out and says so.
        for name in ["eval_batch", "eval_strategy"] {
            let Some(f) = fields::by_name(name) else {
                continue;
            };
            if f.differs(&r.settings) {
                let text = (f.get)(&Settings::default());
                (f.set)(&mut r.settings, &text)?;
                for u in r.used.iter().filter(|u| u.setting == name) {
                    r.not_modeled.push(NotModeled {
                        key: u.key.clone(),
                        why: "a preference trainer's evaluation (its chosen and rejected sequences, the reference pass): not planned yet; the job is planned without it".into(),
                    });
                }
                r.used.retain(|u| u.setting != name);
            }
        }
    }
    if r.settings.liger.rms_norm && r.settings.base_trained() {
        // Liger's RMSNorm with trained norm weights is not planned: transformers' RMSNorm is,
        // with Liger's other kernels.
        r.settings.liger.rms_norm = false;
        for u in r.used.iter().filter(|u| u.setting == "liger_kernel") {
            r.not_modeled.push(NotModeled {
                key: u.key.clone(),
                why: "Liger's RMSNorm with trained norm weights (full or freeze tuning): not planned; planned with transformers' RMSNorm (Liger's other kernels kept)".into(),
            });
        }
    }
    r.settings.validate().map_err(|e| e.to_string())?;
    Ok(r)
}

/// Records a default that depends on what was read (LLaMA-Factory's `lora_alpha` = 2 × rank)
/// as assumed.
pub(crate) fn assume(
    rd: &mut Reader,
    setting: &'static str,
    text: &str,
    whose: &str,
) -> Result<(), String> {
    let key = std::mem::replace(&mut rd.key, whose.to_string());
    let before = rd.r.used.len();
    rd.set(setting, text)?;
    let u = rd.r.used.remove(before);
    rd.r.assumed.retain(|a| a.setting != setting);
    rd.r.assumed.push(u);
    rd.key = key;
    Ok(())
}

/// Which format `text` is: JSON by its keys, a command line by `swift`, YAML by its keys.
pub fn detect(text: &str) -> Result<Source, String> {
    let t = text.trim_start();
    if t.starts_with('{') {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        return Ok(json_source(&v));
    }
    if swift::is_command(text) {
        return Ok(Source::Swift);
    }
    if python::is_script(text) {
        return Ok(Source::Python);
    }
    let v = super::yaml::parse(text)?;
    let o = v
        .as_object()
        .ok_or("a config is a mapping of keys to values")?;
    if ["peft_config", "dist_config", "model_class"]
        .iter()
        .any(|k| o.contains_key(*k))
    {
        return Err("a LLaMA-Factory v1 config (model, peft_config, dist_config): its v1 trainer is not planned yet; LLaMA-Factory's YAML for llamafactory-cli train (model_name_or_path, finetuning_type, …) is".into());
    }
    if is_launch(o) {
        Ok(Source::Accelerate)
    } else if o.contains_key("base_model")
        || o.contains_key("micro_batch_size")
        || o.contains_key("sequence_len")
    {
        Ok(Source::Axolotl)
    } else if o.contains_key("model_name_or_path")
        || o.contains_key("finetuning_type")
        || o.contains_key("cutoff_len")
        || o.contains_key("stage")
    {
        Ok(Source::LlamaFactory)
    } else {
        Err("not a config this reader knows: a LLaMA-Factory YAML names model_name_or_path, an axolotl YAML base_model, an ms-swift command starts with `swift sft` or `swift rlhf`, a Python script imports what it calls".into())
    }
}

/// Whether a mapping is a launch config: accelerate's, or ms-swift's FSDP JSON (`fsdp` and
/// `fsdp_config`, with `_`-prefixed comments).
fn is_launch(o: &Map<String, Value>) -> bool {
    o.contains_key("distributed_type")
        || o.contains_key("compute_environment")
        || (o.contains_key("fsdp_config")
            && o.keys()
                .all(|k| k == "fsdp" || k == "fsdp_config" || k.starts_with('_')))
}

fn json_source(v: &Value) -> Source {
    if v.as_object().is_some_and(is_launch) {
        Source::Accelerate
    } else if v.get("zero_optimization").is_some()
        || v.get("train_micro_batch_size_per_gpu").is_some()
    {
        Source::DeepSpeed
    } else if v.get("peft_type").is_some() && v.get("per_device_train_batch_size").is_none() {
        Source::AdapterConfig
    } else {
        Source::TrainingArguments
    }
}

/// Reads a pasted config of any format [`detect`] knows.
pub fn read(text: &str) -> Result<Reading, String> {
    match detect(text)? {
        Source::Accelerate => Err(LAUNCH_ALONE.into()),
        Source::Swift => swift::read(text),
        Source::Python => python::read(text),
        Source::DeepSpeed | Source::AdapterConfig | Source::TrainingArguments => {
            let v: Value =
                serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
            let o = v.as_object().ok_or("expected a JSON object")?;
            match json_source(&v) {
                Source::DeepSpeed => deepspeed::read(o),
                _ => hf::read(o),
            }
        }
        source => {
            let v = super::yaml::parse(text)?;
            let o = v
                .as_object()
                .ok_or("a config is a mapping of keys to values")?;
            if source == Source::Axolotl {
                axolotl::read(o)
            } else {
                llama_factory::read(o)
            }
        }
    }
}

/// The launch file at `path` has been applied: it is no longer pending, and the notes that said
/// what stood in for it go. A launch file it named in turn (accelerate's `deepspeed_config_file`)
/// stays pending.
pub fn launch_applied(r: &mut Reading, path: &str) {
    r.notes.retain(|n| !n.contains(path));
    if r.launch_path.as_deref() == Some(path) {
        r.launch_path = None;
    }
}

/// Why an accelerate config is not read alone.
const LAUNCH_ALONE: &str = "an accelerate config says how a run is launched (GPUs, DDP / FSDP / DeepSpeed, mixed precision), not what it trains: give it after the training config (lorafit plan --from train.yaml --from accelerate.yaml, or paste it after the config)";

/// Applies a launch config given after a training config: accelerate's (YAML or JSON; its
/// keys join the reading as `accelerate.KEY`, over what the training config said) or a
/// DeepSpeed JSON ([`apply_deepspeed`]).
pub fn apply_launch(r: &mut Reading, text: &str) -> Result<(), String> {
    let source = detect(text)?;
    match source {
        Source::DeepSpeed => return apply_deepspeed(r, text),
        Source::Accelerate => {}
        other => {
            return Err(format!(
                "a {} after the training config: only a launch config (accelerate's, or a DeepSpeed JSON) completes it",
                other.name()
            ))
        }
    }
    let v: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?
    } else {
        super::yaml::parse(text)?
    };
    let o = v
        .as_object()
        .ok_or("a config is a mapping of keys to values")?;
    let mut rd = Reader {
        r: std::mem::replace(r, Reading::new(Source::Accelerate)),
        obj: o,
        key: String::new(),
    };
    rd.run(&[accelerate::TABLE], "accelerate")?;
    *r = rd.r;
    let used: Vec<&str> = r.used.iter().map(|u| u.setting).collect();
    r.assumed.retain(|a| !used.contains(&a.setting));
    r.settings.validate().map_err(|e| e.to_string())
}

/// Applies the DeepSpeed JSON a config refers to (`text`, read from its path): its ZeRO stage,
/// offload and the numbers it fixes replace what the name said; its keys join the reading as
/// `deepspeed.KEY`.
pub fn apply_deepspeed(r: &mut Reading, text: &str) -> Result<(), String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("deepspeed: not valid JSON: {e}"))?;
    let o = v.as_object().ok_or("deepspeed: expected a JSON object")?;
    let mut rd = Reader {
        r: std::mem::replace(r, Reading::new(Source::DeepSpeed)),
        obj: o,
        key: String::new(),
    };
    rd.run(&[deepspeed::TABLE], "deepspeed")?;
    assume_gpus(
        &mut rd,
        "several GPUs (the DeepSpeed JSON does not say how many)",
    )?;
    *r = rd.r;
    r.settings.validate().map_err(|e| e.to_string())
}

/// A whole-number text from a JSON value (a YAML or JSON number, or its text).
pub(crate) fn int_text(key: &str, v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(n) if n.as_u64().is_some() => Ok(n.as_u64().unwrap_or(0)),
        Value::String(s) if s.trim().parse::<u64>().is_ok() => Ok(s.trim().parse().unwrap_or(0)),
        other => Err(format!("{key}: expected a whole number, got {other}")),
    }
}

/// A boolean key that turns `setting` on (`true`), or confirms it as it stands (`false`).
pub(crate) fn on_or_confirm(
    rd: &mut Reader,
    v: &Value,
    setting: &'static str,
) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.set(setting, "true")
    } else {
        rd.confirms(setting);
        Ok(())
    }
}

/// A boolean from a JSON value (`true`, or its text as the CLI reads it).
pub(crate) fn flag(key: &str, v: &Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) => fields::boolean(s).map_err(|e| format!("{key}: {e}")),
        Value::Number(n) if n.as_u64() == Some(0) || n.as_u64() == Some(1) => {
            Ok(n.as_u64() == Some(1))
        }
        other => Err(format!("{key}: expected true or false, got {other}")),
    }
}

/// The ZeRO stage and offload a DeepSpeed file's name says, in LLaMA-Factory's
/// (`ds_z3_offload_config.json`), axolotl's (`zero3_bf16_cpuoffload_all.json`) and ms-swift's
/// (`zero2_offload`) spellings.
pub(crate) fn deepspeed_by_name(rd: &mut Reader, name: &str) -> Result<(), String> {
    let base = name
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(name)
        .to_ascii_lowercase();
    let stage = base
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find_map(|w| match w {
            "z0" | "zero0" => Some(0),
            "z1" | "zero1" => Some(1),
            "z2" | "zero2" => Some(2),
            "z3" | "zero3" => Some(3usize),
            _ => None,
        });
    let Some(stage) = stage else {
        return Err(format!(
            "{}: {name:?} names no ZeRO stage (z0 … z3): give the DeepSpeed JSON itself",
            rd.key()
        ));
    };
    let strategy = ["ddp", "zero1", "zero2", "zero3"][stage];
    rd.set("strategy", strategy)?;
    if base.contains("offload") {
        let what: &[&str] = if stage == 3 {
            &["optimizer", "params"]
        } else {
            &["optimizer"]
        };
        add_offload(rd, what)?;
    }
    if base.ends_with(".json") {
        rd.r.launch_path = Some(name.to_string());
    }
    Ok(())
}

/// Adds `what` (`optimizer`, `params`, `activations`) to what is offloaded already, through the
/// settings table's own text of the offload.
pub(crate) fn add_offload(rd: &mut Reader, what: &[&str]) -> Result<(), String> {
    let mut text = rd.r.setting("offload").unwrap_or_default();
    for w in what {
        text = format!("{text},{w}");
    }
    rd.set("offload", &text)
}

/// A 4-bit bitsandbytes base of the type another key names (`nf4` unless it says `fp4`), an
/// 8-bit one (LLM.int8, `load_in_8bit`), or a base of other bits named as not modelled.
pub(crate) fn quant_bits(rd: &mut Reader, bits: u64, type_key: &str) -> Result<(), String> {
    if bits == 4 {
        let kind = rd
            .other(type_key)
            .and_then(Value::as_str)
            .unwrap_or("nf4")
            .to_string();
        return rd.set("quant", &kind);
    }
    if bits == 8 {
        return rd.set("quant", "int8");
    }
    rd.not_modeled(format!(
        "a {bits}-bit base: not modelled yet; planned with a 16-bit base (an upper bound)"
    ));
    Ok(())
}

/// A quantization method: one of `bnb` (bitsandbytes, as the framework spells it) confirms the
/// 4-bit base; another is named as not modelled.
pub(crate) fn quant_method(rd: &mut Reader, v: &Value, bnb: &[&str]) -> Result<(), String> {
    match v.as_str() {
        Some(m) if bnb.contains(&m) => {
            rd.confirms("quant");
            Ok(())
        }
        Some(m) => {
            rd.not_modeled(format!(
                "{m} quantization: only bitsandbytes 4-bit and 8-bit are modelled"
            ));
            Ok(())
        }
        None => Err(format!("{}: expected a method name", rd.key())),
    }
}

/// peft's `target_modules` as one regular expression (`re.fullmatch` against each module's full
/// name, peft `tuners/tuners_utils.py` `check_target_module_exists`): the targets are the Linear
/// kinds it matches in a decoder layer, under the paths transformers gives text and
/// vision-language models (`model.layers.N.self_attn.q_proj`,
/// `model.language_model.layers.N.mlp.up_proj`, with or without FSDP's checkpoint wrapper). A
/// pattern that matches some layers only, or the vision tower too, is named as not modelled;
/// one that matches no decoder Linear is an error.
fn regex_targets(rd: &mut Reader, pattern: &str) -> Result<(), String> {
    use crate::model::Target;
    let re = super::regex::Regex::new(pattern).map_err(|e| {
        format!("{}: {pattern:?} uses {e}, which lorafit's reading of peft's regular expressions does not take: list the module names instead", rd.key())
    })?;
    const PREFIXES: [&str; 5] = [
        "model.layers",
        "model.language_model.layers",
        "language_model.model.layers",
        "model.text_model.layers",
        "model.language_model.model.layers",
    ];
    const PARENTS: [&str; 7] = [
        "self_attn",
        "mlp",
        "cross_attn",
        "linear_attn",
        "attn",
        "feed_forward",
        "mlp.shared_expert",
    ];
    const LAYERS: usize = 8;
    let mut hit: Vec<Target> = vec![];
    // A target matched in some of the first layers but not all: adapters on some layers.
    let mut partial = false;
    for &t in Target::ALL {
        let layers = (0..LAYERS)
            .filter(|layer| {
                PREFIXES.iter().any(|prefix| {
                    PARENTS.iter().any(|parent| {
                        ["", "_checkpoint_wrapped_module."].iter().any(|w| {
                            re.full_match(&format!(
                                "{prefix}.{layer}.{w}{parent}.{}",
                                t.module_name()
                            ))
                        })
                    })
                })
            })
            .count();
        if layers > 0 {
            hit.push(t);
            partial |= layers < LAYERS;
        }
    }
    if hit.is_empty() {
        return Err(format!(
            "{}: {pattern:?} matches no Linear of a decoder layer (model.layers.N.self_attn.q_proj, model.language_model.layers.N.mlp.up_proj, …)",
            rd.key()
        ));
    }
    let names: Vec<&str> = hit.iter().map(|t| t.module_name()).collect();
    rd.set("target_modules", &names.join(","))?;
    if partial {
        rd.not_modeled("adapters on some decoder layers only: planned on every layer");
    }
    let tower = [
        "model.visual.blocks.0.attn.qkv",
        "model.visual.blocks.0.mlp.up_proj",
        "model.visual.blocks.0.mlp.linear_fc1",
        "model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj",
        "model.vision_tower.vision_model.encoder.layers.0.mlp.fc1",
        "model.multi_modal_projector.linear_1",
        "model.visual.merger.mlp.0",
    ];
    if tower.iter().any(|p| re.full_match(p)) {
        rd.not_modeled(
            "LoRA on the vision tower or projector: not planned (the tower is planned frozen)",
        );
    }
    Ok(())
}

/// Trainer's optimizers (and axolotl's, ms-swift's) that change memory but are not modelled:
/// each is planned as `adamw_torch` (two fp32 states per trained parameter; these keep as
/// many or fewer, so the plan is an upper bound).
const UNMODELLED_OPTIMIZERS: &[(&str, &str)] = &[
    ("adamw_torch_4bit", "torchao's 4-bit AdamW"),
    ("adamw_torch_8bit", "torchao's 8-bit AdamW"),
    ("muon", "Muon"),
    ("adafactor", "Adafactor"),
    ("sgd", "SGD"),
    ("adagrad", "Adagrad"),
    ("rmsprop", "RMSprop"),
    ("lion_32bit", "Lion"),
    ("lion_8bit", "8-bit Lion"),
    ("paged_lion_32bit", "paged Lion"),
    ("paged_lion_8bit", "paged 8-bit Lion"),
    ("ademamix", "AdEMAMix"),
    ("ademamix_8bit", "8-bit AdEMAMix"),
    ("schedule_free_adamw", "schedule-free AdamW"),
    ("schedule_free_sgd", "schedule-free SGD"),
    ("galore_adamw", "GaLore AdamW"),
    ("galore_adamw_8bit", "8-bit GaLore AdamW"),
    ("apollo_adamw", "APOLLO AdamW"),
    ("lomo", "LOMO"),
    ("adalomo", "AdaLomo"),
    ("grokadamw", "GrokAdamW"),
    ("stable_adamw", "StableAdamW"),
    ("adamw_apex_fused", "apex's fused AdamW"),
    ("adamw_anyprecision", "AnyPrecision AdamW"),
];

/// The optimizer by Trainer's `optim` name; one lorafit does not model is named as such and
/// planned as `adamw_torch`; an unknown name is an error.
pub(crate) fn optimizer(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let name = v.as_str().unwrap_or_default().trim().to_ascii_lowercase();
    if let Some((_, what)) = UNMODELLED_OPTIMIZERS.iter().find(|(n, _)| *n == name) {
        return rd.plan_instead("optimizer", "adamw_torch", format!("{what}: not modelled; planned as adamw_torch (two fp32 states per trained parameter: an upper bound)"));
    }
    let text = fields::json_text(v).map_err(|e| format!("{}: {e}", rd.key()))?;
    rd.set("optimizer", &text)
}

/// An attention implementation by transformers' name: FlashAttention 3 and the Hub's flash
/// kernels are planned as FlashAttention 2 (no S×S scores either), flex attention and xformers
/// as sdpa, each named as not modelled; an unknown name is an error.
pub(crate) fn attention(rd: &mut Reader, name: &str) -> Result<(), String> {
    let n = name.trim().to_ascii_lowercase();
    if crate::model::AttnImpl::parse(&n).is_some() {
        return rd.set("attn_impl", &n);
    }
    let (plan, what) = if n.contains("flash") {
        (
            "flash_attention_2",
            "a FlashAttention kernel other than transformers' flash_attention_2",
        )
    } else if n == "flex_attention" || n == "xformers" || n == "sdpa_paged" {
        ("sdpa", "flex attention / xformers")
    } else {
        return Err(format!(
            "{}: unknown attention {name:?} (eager, sdpa, flash_attention_2, flash_attention_3, flex_attention, xformers)",
            rd.key()
        ));
    };
    rd.plan_instead(
        "attn_impl",
        plan,
        format!("{what} ({name}): planned as {plan}"),
    )
}

/// Several GPUs: the config does not say how many (a launch option), so 2 are assumed unless
/// set already.
pub(crate) fn assume_gpus(rd: &mut Reader, whose: &str) -> Result<(), String> {
    let p = &rd.r.settings.parallel;
    if p.strategy != crate::model::Strategy::Single && p.world() == 1 {
        assume(rd, "gpus_per_node", "2", whose)?;
    }
    Ok(())
}

/// `target_modules` from a list or a comma-separated text (`all` / `all-linear` for every
/// Linear), or one regular expression as peft takes a single string ([`regex_targets`]).
pub(crate) fn targets(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if let Value::String(p) = v {
        if super::regex::looks_like_regex(p) {
            return regex_targets(rd, p);
        }
    }
    let text = fields::json_text(v).map_err(|e| format!("{}: {e}", rd.key()))?;
    let text = match text.trim() {
        "all" | "all-linear" | "all_linear" => {
            rd.r.all_linear_literal = true;
            "all-linear".to_string()
        }
        t => t.to_string(),
    };
    rd.set("target_modules", &text)
}
