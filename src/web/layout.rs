//! Which settings the page shows where, by their names in the settings table
//! ([`crate::formats::fields`]), and the page's own rules between them. Pure, so a native test
//! checks that every name exists.

use crate::model::{Settings, Strategy};

/// The main column, in order.
pub const MAIN: &[&str] = &[
    "batch",
    "seq",
    "lora_r",
    "lora_dropout",
    "grad_accum",
    "base_weights",
    "autocast",
    "attn_impl",
    "optimizer",
    "grad_ckpt",
    "padded_mask",
];

/// The "GPUs" group.
pub const GPUS: &[&str] = &["gpus_per_node", "nodes", "strategy", "offload"];

/// The "Mixture of experts" group, shown for MoE models.
pub const MOE: &[&str] = &[
    "target_parameters",
    "output_router_logits",
    "experts_implementation",
];

/// After the GPU count changes: several GPUs need a strategy (FSDP full shard unless one is
/// chosen); one GPU runs without one and cannot offload parameters or optimizer states.
pub fn after_gpu_count(s: &mut Settings) {
    let p = &mut s.parallel;
    if p.world() > 1 && p.strategy == Strategy::Single {
        p.strategy = Strategy::FsdpFullShard;
    }
    if p.world() == 1 {
        p.strategy = Strategy::Single;
        p.offload_params = false;
        p.offload_optimizer = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::fields;

    #[test]
    fn every_name_is_a_setting_of_the_table() {
        for name in MAIN
            .iter()
            .chain(GPUS)
            .chain(MOE)
            .chain(&["target_modules", "modules_to_save"])
        {
            assert!(
                fields::by_name(name).is_some(),
                "{name} is not in the table"
            );
        }
    }

    #[test]
    fn the_gpu_count_keeps_the_layout_valid() {
        let mut s = Settings::default();
        s.parallel.gpus_per_node = 4;
        after_gpu_count(&mut s);
        assert_eq!(s.parallel.strategy, Strategy::FsdpFullShard);
        assert!(s.parallel.validate(s.grad_ckpt).is_ok());
        s.parallel.offload_params = true;
        s.parallel.gpus_per_node = 1;
        after_gpu_count(&mut s);
        assert_eq!(s.parallel.strategy, Strategy::Single);
        assert!(s.parallel.validate(s.grad_ckpt).is_ok());
    }
}
