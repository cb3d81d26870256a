//! What torchao's low-bit AdamW keeps for each trainable tensor, as HF Trainer builds it for
//! `optim="adamw_torch_4bit"` and `"adamw_torch_8bit"`: `torchao.optim.AdamW4bit` /
//! `AdamW8bit` with `block_size` 256 and no stochastic rounding (transformers 5.24
//! `trainer_optimizer.py:450-475`).
//!
//! torchao 0.18 `optim/adam.py`, `_AdamBase.step` (lines 102-160), for each parameter the first
//! time `step()` reaches it: `exp_avg` then `exp_avg_sq`, each made by `_new_buffer` (lines
//! 71-99):
//! - a tensor of 4096 values or more whose size is a multiple of the block gets a quantized
//!   state (`OptimState4bit.zeros`, `subclass_4bit.py:115-130`; `OptimState8bit.zeros`,
//!   `subclass_8bit.py:104-116`): its uint8 codes (two 4-bit values per byte, or one 8-bit
//!   value), one fp32 scale per block, and its own copy of the quantization map (16 or 256 fp32
//!   values, `torch.tensor(qmap_list, device=...)`);
//! - any other tensor gets `zeros_like(param)`: its size, in the parameter's dtype;
//! - the step counter `torch.tensor(0.0)` stays on the CPU.
//!
//! The update itself is one `torch.compile`d `single_param_adam` per parameter, which updates
//! the states and the parameter in place; what its compiled kernels allocate on the way is not
//! measured (the emulated device cannot compile them) and is planned as nothing. The states are
//! measured with the harness (`tests/data/reference/torchao_optim/`).

use super::Optimizer;

/// Tensors below this many values keep full states (`_new_buffer`).
pub const MIN_QUANTIZED_VALUES: u64 = 4096;
/// Values per scale (Trainer's `block_size`).
pub const BLOCK_VALUES: u64 = 256;

/// Whether `opt` is one of torchao's low-bit AdamW variants.
pub fn is_torchao(opt: Optimizer) -> bool {
    matches!(opt, Optimizer::AdamwTorch4bit | Optimizer::AdamwTorch8bit)
}

/// The buffers `step()` creates for a trainable tensor of `values` values stored in `es`
/// bytes each, in their order, as (values, bytes per value): `exp_avg`'s then `exp_avg_sq`'s.
/// Empty for other optimizers.
pub fn states(opt: Optimizer, values: u64, es: u64) -> Vec<(u64, u64)> {
    let (codes, qmap) = match opt {
        Optimizer::AdamwTorch4bit => (values / 2, 16),
        Optimizer::AdamwTorch8bit => (values, 256),
        _ => return vec![],
    };
    let quantized = values >= MIN_QUANTIZED_VALUES && values % BLOCK_VALUES == 0;
    let one: Vec<(u64, u64)> = if quantized {
        vec![(codes, 1), (values / BLOCK_VALUES, 4), (qmap, 4)]
    } else {
        vec![(values, es)]
    };
    [one.clone(), one].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_block_multiples_are_quantized_and_the_rest_kept_in_the_parameters_dtype() {
        // A rank-16 lora_A of a 4096-wide projection in fp32: 4-bit codes, scales, a 16-value map.
        let a = states(Optimizer::AdamwTorch4bit, 16 * 4096, 4);
        assert_eq!(
            a,
            vec![(32768, 1), (256, 4), (16, 4), (32768, 1), (256, 4), (16, 4)]
        );
        let b = states(Optimizer::AdamwTorch8bit, 16 * 4096, 4);
        assert_eq!(b[0], (65536, 1));
        assert_eq!(b[2], (256, 4));
        // A 4096-wide bf16 norm is quantized; a 4095-value or a 4100-value tensor is not.
        assert_eq!(states(Optimizer::AdamwTorch8bit, 4096, 2).len(), 6);
        assert_eq!(
            states(Optimizer::AdamwTorch8bit, 4095, 2),
            vec![(4095, 2); 2]
        );
        assert_eq!(
            states(Optimizer::AdamwTorch4bit, 4100, 2),
            vec![(4100, 2); 2]
        );
        assert!(states(Optimizer::AdamwTorchFused, 1 << 20, 4).is_empty());
    }
}
