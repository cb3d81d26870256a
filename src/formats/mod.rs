//! What comes in and what goes out: the settings table ([`fields`]: every setting's JSON key,
//! link key, CLI flag and page label, declared once), the model and GPU catalog, Hugging Face
//! config.json import,
//! the training configs users paste (LLaMA-Factory, axolotl, ms-swift, TrainingArguments,
//! DeepSpeed: [`framework`], YAML by [`yaml`]), the JSONL protocol of `lorafit estimate`, what each door did not use ([`unused`]), peft / accelerate / LLaMA-Factory / axolotl exports
//! and the text report. Every parser here takes untrusted text and answers with a message,
//! never a panic.
//!
//! May import: [`crate::model`] and [`crate::planning`]. Never the web page, the CLI or the GPU
//! benchmark.

pub mod catalog;
pub mod config_json;
pub mod export;
pub mod fields;
pub mod framework;
pub mod json;
pub mod jsonl;
pub mod pyscript;
pub mod regex;
pub mod report;
pub mod snapshot;
pub mod unused;
pub mod validation;
pub mod yaml;
