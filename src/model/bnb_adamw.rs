//! What bitsandbytes' AdamW keeps for each trainable tensor, as HF Trainer builds it for
//! `optim="adamw_bnb_8bit"`, `"paged_adamw_8bit"` and `"paged_adamw_32bit"`:
//! `bnb.optim.AdamW(optim_bits=8 if "8bit" in the name else 32, is_paged="paged" in the name)`
//! (transformers 5.24 `trainer_optimizer.py:256-289`), every `nn.Embedding` weight overridden
//! to 32-bit states when the optimizer has 8 (`trainer.py:1328-1338`).
//!
//! bitsandbytes 0.50.2 `optim/optimizer.py`, `Optimizer2State.init_state` (lines 492-530), run
//! for each parameter the first time `step()` reaches it:
//! - a tensor of fewer than `min_8bit_size` (4096) values, or one given 32-bit states, gets two
//!   fp32 states of its size (`get_state_buffer(p, torch.float32)`, whatever the parameter's
//!   dtype);
//! - otherwise two uint8 states of its size and two fp32 `absmax` vectors, one value per block
//!   of 256; the first such tensor also moves the two 256-value fp32 quantization maps to the GPU
//!   (`name2qmap[...].to(p.device)`, once per optimizer);
//! - paged, a state of at least 1e5 values is CUDA managed memory (`get_state_buffer`, lines
//!   383-390: `F.get_paged`), outside PyTorch's caching allocator; a smaller one and every
//!   `absmax` are ordinary allocations.
//!
//! The update kernels (`optimizer_update_8bit_blockwise`, `optimizer_update_32bit`) work in
//! place: the step allocates nothing else. Measured with the harness
//! (`tests/data/reference/bnb_optim/`).

use super::Optimizer;

/// Tensors below this many values keep 32-bit states (`min_8bit_size`).
pub const MIN_8BIT_VALUES: u64 = 4096;
/// Values per `absmax` block of the 8-bit states.
pub const BLOCK_VALUES: u64 = 256;
/// A paged optimizer's state of at least this many values is managed memory.
pub const MIN_PAGED_VALUES: u64 = 100_000;
/// Each quantization map: 256 fp32 values (`create_dynamic_map`).
pub const QMAP_VALUES: u64 = 256;

/// One buffer of a tensor's optimizer state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateBuffer {
    /// Values it holds.
    pub values: u64,
    /// 1 (uint8 state) or 4 (fp32 state, `absmax`).
    pub bytes_per_value: u64,
    /// CUDA managed memory (a paged optimizer's large state), outside the caching allocator.
    pub paged: bool,
}

impl StateBuffer {
    /// Its size.
    pub fn bytes(&self) -> u64 {
        self.values.saturating_mul(self.bytes_per_value)
    }
}

/// Whether `opt` is one of bitsandbytes' AdamW variants.
pub fn is_bnb(opt: Optimizer) -> bool {
    matches!(
        opt,
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit
    )
}

/// Whether `opt` puts large states in CUDA managed memory.
pub fn pages(opt: Optimizer) -> bool {
    matches!(opt, Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit)
}

/// Whether the tensor's states are 8-bit.
pub fn eight_bit(opt: Optimizer, values: u64, embedding: bool) -> bool {
    matches!(opt, Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit)
        && !embedding
        && values >= MIN_8BIT_VALUES
}

/// The state buffers `init_state` creates for a trainable tensor of `values` values, in their
/// order (`state1`, `state2`, then `absmax1`, `absmax2` for 8-bit states); `embedding`: the
/// weight of an `nn.Embedding` (Trainer's 32-bit override). Empty for other optimizers.
pub fn states(opt: Optimizer, values: u64, embedding: bool) -> Vec<StateBuffer> {
    if !is_bnb(opt) {
        return vec![];
    }
    let paged = pages(opt) && values >= MIN_PAGED_VALUES;
    let state = |bytes_per_value| StateBuffer {
        values,
        bytes_per_value,
        paged,
    };
    if eight_bit(opt, values, embedding) {
        let absmax = StateBuffer {
            values: values.div_ceil(BLOCK_VALUES),
            bytes_per_value: 4,
            paged: false,
        };
        vec![state(1), state(1), absmax, absmax]
    } else {
        vec![state(4), state(4)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_embedding_tensors_keep_fp32_states_and_large_paged_ones_leave_the_allocator() {
        // A rank-16 lora_A of a 4096-wide projection: 8-bit, in the allocator even when paged.
        let a = states(Optimizer::PagedAdamw8bit, 16 * 4096, false);
        assert_eq!(a.len(), 4);
        assert!(a.iter().all(|b| !b.paged));
        assert_eq!(a[2].values, 256);
        // lora_B of an 11008-wide up_proj: its two uint8 states are managed memory.
        let b = states(Optimizer::PagedAdamw8bit, 11008 * 16, false);
        assert_eq!(
            b.iter().map(|s| s.paged).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        // Under 4096 values, or an embedding: fp32 whatever the parameter's dtype.
        for s in [
            states(Optimizer::Adamw8bit, 4095, false),
            states(Optimizer::Adamw8bit, 1 << 20, true),
        ] {
            assert_eq!(s.len(), 2);
            assert!(s.iter().all(|b| b.bytes_per_value == 4 && !b.paged));
        }
        assert_eq!(
            states(Optimizer::Adamw8bit, 4096, false)[0].bytes_per_value,
            1
        );
        // 32-bit paged: fp32, paged from 1e5 values.
        let p = states(Optimizer::PagedAdamw32bit, 100_000, false);
        assert!(p.iter().all(|b| b.bytes_per_value == 4 && b.paged));
        assert!(states(Optimizer::AdamwTorchFused, 1 << 20, false).is_empty());
    }
}
