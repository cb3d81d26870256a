//! The Chinese side of the message table, one file per part of the product: the page's own
//! labels ([`page`]), the settings table ([`settings`]), the memory model's terms, phases and
//! notes ([`model`]), what the planning features write: fixes, myths, verdicts ([`planning`]),
//! and the GPU benchmark page ([`gpu`]).
//! Written for practitioners in the words the forums use (显存, 梯度检查点, 激活值, 优化器状态,
//! 碎片, 混合精度, 量化); identifiers users type (`q_proj`, `gradient_checkpointing`) stay as
//! they are.

mod gpu;
mod model;
mod page;
mod planning;
mod settings;

/// All the tables.
pub const TABLES: &[&[(&str, &str)]] = &[
    page::ENTRIES,
    settings::ENTRIES,
    model::ENTRIES,
    planning::ENTRIES,
    gpu::ENTRIES,
];
