//! Parameter and weight accounting checked against the counts the reference harness read from
//! the real PyTorch modules (`params` and `measured.at_peak` of every case).

use lorafit::formats::jsonl::estimate_line;

#[test]
fn parameter_counts_and_weight_bytes_match_pytorch() {
    let text = std::fs::read_to_string(super::reference::cases_path()).expect("reference cases");
    assert!(check_weights(super::reference::full_size_lines(&text)) >= 10);
}

/// The MoE families: total (routed experts, routers, shared experts, MLA, sinks and biases
/// included), trainable (expert LoRA included) and the frozen bytes (experts fp32 after
/// prepare_model_for_kbit_training, DeepSeek's fp32 routers).
#[test]
fn moe_parameter_counts_and_weight_bytes_match_pytorch() {
    let text = std::fs::read_to_string(super::reference::moe_cases_path()).expect("MoE cases");
    assert_eq!(check_weights(super::reference::full_size_lines(&text)), 28);
}

fn check_weights(lines: Vec<&str>) -> usize {
    let mut checked = 0;
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        let (_, p, _, _) = estimate_line(line).unwrap_or_else(|(_, e)| panic!("{id}: {e}"));
        let total = v["params"]["total_params"].as_u64().unwrap() as u128;
        let trainable = v["params"]["trainable_params"].as_u64().unwrap() as u128;
        assert_eq!(
            p.params.trainable_params, trainable,
            "{id}: trainable params"
        );
        // total_params counts 4-bit packed weights as uint8 elements (2 weights each); compare the
        // unquantized base count only where nothing is packed.
        if v["settings"]["quant"].is_null() {
            assert_eq!(
                p.params.base_params + p.params.trainable_params,
                total,
                "{id}: total params"
            );
        }
        let at = &v["measured"]["at_peak"];
        let bytes_of = |key: &str| -> u128 {
            p.breakdown
                .iter()
                .filter(|c| c.key == key)
                .map(|c| c.bytes)
                .sum()
        };
        assert_eq!(
            bytes_of("frozen_weights") + bytes_of("frozen_experts") + bytes_of("quant_state"),
            at["frozen_weights"].as_u64().unwrap() as u128,
            "{id}: frozen weights"
        );
        assert_eq!(
            bytes_of("trainable_weights"),
            at["trainable_weights"].as_u64().unwrap() as u128,
            "{id}: trainable bytes"
        );
        let opt = at["optimizer_states"].as_u64().unwrap() as u128;
        let ours = bytes_of("optimizer_states");
        // The harness counts the fused step counters as 4 B, the foreach ones on the CPU (0 B).
        assert!(
            ours.abs_diff(opt) <= 4 * 1024,
            "{id}: optimizer states {ours} vs {opt}"
        );
        checked += 1;
    }
    checked
}
