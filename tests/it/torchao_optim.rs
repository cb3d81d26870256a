//! torchao's low-bit AdamW as HF Trainer builds it (`adamw_torch_4bit`, `adamw_torch_8bit`),
//! measured with the harness beside torch's AdamW (`tests/data/reference/torchao_optim/`): each
//! step planned to the byte, allocated and reserved; the states each tensor gets; and the ranked
//! fix to the 4-bit optimizer saving what the measured pair differs by.

use lorafit::model::steptrace::Device;
use lorafit::model::{plan_simulated_on, Optimizer, Settings};
use lorafit::planning::fixes::FixId;
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/torchao_optim/cases.jsonl")
}

/// Each step is planned to the byte: the quick and the settled plan against the measured peak,
/// reserved against the replay. Where the peak is the tied embedding's gradient accumulating into
/// lm_head's (Llama-3.2-1B's full fine-tuning with the low-bit optimizers), the harness's fake
/// tensors add the two out of place while a GPU adds in place (`tape.rs`, AccumulateGrad): the
/// settled plan is made for the harness's device and is the measurement to the byte; the quick
/// plan is made for a GPU, the settled plan on a GPU is it to the byte, and it lies below the
/// measurement by less than the one embedding-sized sum a GPU does not make.
#[test]
fn torchao_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        if id.starts_with("llama3.2-1b_full_gc_s1024_tao") {
            assert!(
                m.settled_pct.abs() <= 0.001 && m.reserved_pct.abs() <= 0.001,
                "{id}"
            );
            let on_gpu = plan_simulated_on(&m.arch, &m.settings, Device::Cuda).expect("plans");
            assert_eq!(
                on_gpu.peak_allocated_bytes, m.quick.peak_allocated_bytes,
                "{id}"
            );
            let sum = u128::from(m.arch.vocab_size) * u128::from(m.arch.hidden_size) * 2;
            let below = m.settled.peak_allocated_bytes - m.quick.peak_allocated_bytes;
            assert!(below > 0 && below <= sum, "{id}: {below} of {sum}");
        } else {
            m.assert_to_the_byte(id);
        }
        n += 1;
    }
    assert_eq!(n, 5);
}

/// The optimizer's states after the first step, as the harness counted them, against what the
/// plan says each trainable tensor gets: about a byte per value for the 4-bit states
/// (two of half a byte) and two for the 8-bit ones, plus a scale per 256 values, where torch's
/// AdamW keeps two states in each parameter's dtype.
#[test]
fn low_bit_states_take_a_quarter_or_an_eighth_of_adamws() {
    let states = |id: &str| -> f64 {
        let v = cases()
            .into_iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("{id}"));
        let r = &v["result"]["per_step"][0];
        (r["after_optimizer_total"].as_u64().expect("after")
            - r["after_backward_total"].as_u64().expect("before")) as f64
    };
    let full = states("llama3.2-1b_full_gc_s1024");
    let (four, eight) = (
        states("llama3.2-1b_full_gc_s1024_tao4"),
        states("llama3.2-1b_full_gc_s1024_tao8"),
    );
    // bf16 parameters: torch's AdamW keeps 4 bytes per value, torchao about 1 and 2.
    assert!((four / full - 0.25).abs() < 0.01, "{}", four / full);
    assert!((eight / full - 0.5).abs() < 0.01, "{}", eight / full);
    let lora = states("llama2-7b_lora64_s1024");
    let lora4 = states("llama2-7b_lora64_s1024_tao4");
    // fp32 adapters: 8 bytes per value against about 1.03.
    assert!(
        (lora4 / lora - 1.03 / 8.0).abs() < 0.005,
        "{}",
        lora4 / lora
    );
}

/// The ranked fix to torchao's 4-bit AdamW is offered where the optimizer is a 32-bit or 8-bit
/// AdamW, and saves exactly what the measured LoRA pair differs by. (The full fine-tuning pair's
/// low-bit peak is the emulated device's out-of-place accumulation, which the fix, judged for a
/// GPU, does not have.)
#[test]
fn the_4bit_optimizer_fix_saves_what_was_measured() {
    let lora: Vec<Value> = cases()
        .into_iter()
        .filter(|v| v["id"].as_str().is_some_and(|id| id.contains("lora")))
        .collect();
    let pairs = crate::fix_saves_each_measured_pair(
        &lora,
        "_tao4",
        FixId::Adamw4bit,
        |id, s: &Settings| assert_eq!(s.optimizer, Optimizer::AdamwTorch4bit, "{id}"),
    );
    assert_eq!(pairs, 1);
}
