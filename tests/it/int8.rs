//! LLM.int8 bases (`load_in_8bit`: bitsandbytes' `Linear8bitLt`), measured with the harness
//! (`tests/data/reference/int8/`): the quick and the settled plan against each measured peak,
//! reserved against PyTorch's caching allocator replayed over the measured step, the fix "4-bit
//! instead of 8-bit" against the difference of two measured steps, and every config door that
//! says "8 bits".

use lorafit::formats::framework;
use lorafit::model::{plan, Quant};
use lorafit::planning::fixes::{suggest, FixId};
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/int8/cases.jsonl")
}

fn case(id: &str) -> Value {
    crate::case_of(cases(), id)
}

#[test]
fn int8_steps_are_planned_to_the_byte() {
    assert_eq!(crate::assert_planned_to_the_byte(&cases()), 4);
}

/// The quantization state the harness counted (SCB: one fp32 scale per output row of every
/// 8-bit Linear) is the plan's, and the weights are a byte per value.
#[test]
fn int8_weights_and_row_scales_are_the_measured_ones() {
    let v = case("llama2-7b_int8_s1024");
    let m = crate::plan_measured_line(&v);
    let state: u128 = m
        .settled
        .terms
        .iter()
        .filter(|t| t.component == lorafit::model::Component::QuantState)
        .map(|t| t.bytes)
        .sum();
    let want = v["params"]["quant_state_bytes"].as_u64().expect("state");
    assert_eq!(state, u128::from(want));
    // Llama-2-7B: 32 layers × (4 × 4096 + 2 × 11008 + 4096) output rows × 4 bytes.
    assert_eq!(want, 32 * (4 * 4096 + 2 * 11008 + 4096) * 4);
}

/// Checkpointing frees little of an 8-bit step: each 8-bit Linear keeps its input to the end of
/// backward. The measured int8 step with checkpointing holds more beyond its weights than the
/// same step on a 4-bit base, and the plans say the same.
#[test]
fn an_8bit_step_keeps_its_inputs_through_checkpointing() {
    let (i8, nf4) = (
        case("llama2-7b_int8_acgc_s2048"),
        case("llama2-7b_nf4_acgc_s2048"),
    );
    let beyond = |v: &Value| {
        v["result"]["peak_bytes"].as_u64().unwrap() - v["params"]["weight_bytes"].as_u64().unwrap()
    };
    assert!(
        beyond(&i8) > beyond(&nf4) + (1 << 30),
        "{} vs {}",
        beyond(&i8),
        beyond(&nf4)
    );
    let p = crate::plan_measured_line(&i8).settled;
    assert!(p
        .notes
        .iter()
        .any(|n| n.contains("lives until backward ends")));
}

/// The fix "QLoRA (4-bit nf4)" from an 8-bit base saves what the two measured steps differ by.
#[test]
fn the_4bit_fix_saves_the_measured_difference() {
    let (i8, nf4) = (
        case("llama2-7b_int8_acgc_s2048"),
        case("llama2-7b_nf4_acgc_s2048"),
    );
    let m = crate::plan_measured_line(&i8);
    let fixes = suggest(&m.arch, &m.settings, 1u128 << 50, true);
    let fix = fixes
        .iter()
        .find(|f| f.id == FixId::Qlora)
        .expect("the 4-bit fix is offered to an 8-bit base");
    assert_eq!(fix.settings.quant, Some(Quant::Nf4));
    let peak = |v: &Value| i128::from(v["result"]["peak_bytes"].as_u64().unwrap());
    assert_eq!(fix.saved_bytes, peak(&i8) - peak(&nf4));
}

/// Every door that says "8 bits" plans an int8 base: LLaMA-Factory's quantization_bit, axolotl's
/// load_in_8bit, ms-swift's quant_bits with bnb, a Python BitsAndBytesConfig; an llm_int8_threshold
/// other than transformers' 6.0 is named as not modelled.
#[test]
fn every_config_door_reads_an_8bit_base() {
    for text in [
        "model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\nfinetuning_type: lora\nquantization_bit: 8\n",
        "base_model: meta-llama/Llama-2-7b-hf\nload_in_8bit: true\nadapter: lora\n",
        "swift sft --model meta-llama/Llama-2-7b-hf --train_type lora --quant_method bnb --quant_bits 8\n",
        "from transformers import BitsAndBytesConfig, AutoModelForCausalLM, TrainingArguments\nbnb = BitsAndBytesConfig(load_in_8bit=True)\nmodel = AutoModelForCausalLM.from_pretrained(\"meta-llama/Llama-2-7b-hf\", quantization_config=bnb)\nargs = TrainingArguments(output_dir=\"out\", per_device_train_batch_size=1, bf16=True)\nlora = LoraConfig(r=16, target_modules=\"all-linear\")\n",
    ] {
        let r = framework::read(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(r.settings.quant, Some(Quant::Int8), "{text}");
        assert!(r.not_modeled.is_empty(), "{text}: {:?}", r.not_modeled);
    }
    let r = framework::read(
        "from transformers import BitsAndBytesConfig, TrainingArguments\nbnb = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)\nargs = TrainingArguments(output_dir=\"out\")\nlora = LoraConfig(r=16)\n",
    )
    .unwrap();
    let nm: Vec<&str> = r.not_modeled.iter().map(|n| n.key.as_str()).collect();
    assert!(
        nm.iter().any(|k| k.ends_with("llm_int8_threshold")),
        "{nm:?}"
    );
}

/// The exports write what each framework reads back as an 8-bit base.
#[test]
fn exports_write_an_8bit_base_that_reads_back() {
    use lorafit::formats::export::export;
    let arch = lorafit::formats::catalog::resolve_model(&Value::from("llama2-7b"))
        .unwrap()
        .value;
    let s = lorafit::model::Settings {
        quant: Some(Quant::Int8),
        ..lorafit::model::Settings::default()
    };
    for f in ["python", "trl", "llama-factory", "axolotl", "swift"] {
        let text = export(f, "meta-llama/Llama-2-7b-hf", &arch, &s).expect("exports");
        let r = framework::read(&text).unwrap_or_else(|e| panic!("{f}: {e}\n{text}"));
        assert_eq!(r.settings.quant, Some(Quant::Int8), "{f}:\n{text}");
    }
}

/// The refusals name `quant` and say what to do instead.
#[test]
fn what_an_8bit_base_is_not_planned_for_is_refused_by_name() {
    let llama = lorafit::formats::catalog::resolve_model(&Value::from("llama2-7b"))
        .unwrap()
        .value;
    let base = lorafit::model::Settings {
        quant: Some(Quant::Int8),
        ..lorafit::model::Settings::default()
    };
    assert!(plan(&llama, &base).is_ok());
    let dora = lorafit::model::Settings {
        use_dora: true,
        ..base.clone()
    };
    let e = plan(&llama, &dora).unwrap_err().to_string();
    assert!(e.contains("quant") && e.contains("DoRA"), "{e}");
    // peft's merge into int8 weights on the GPU is not planned; on the host it is LLaMA-Factory's
    // export of a 16-bit copy, as for any base.
    let mut merge = base.clone();
    merge.job.merge = true;
    merge.job.export_device = lorafit::model::job_settings::ExportDevice::Gpu;
    let e = lorafit::model::job::check(&llama, &merge)
        .unwrap_err()
        .to_string();
    assert!(e.contains("export_device") && e.contains("8-bit"), "{e}");
    merge.job.export_device = lorafit::model::job_settings::ExportDevice::Cpu;
    assert!(lorafit::model::job::check(&llama, &merge).is_ok());
}
