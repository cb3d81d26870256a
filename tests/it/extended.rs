//! The page's first bundle leaves the extended ops out (`lorafit::model::extended`): what it
//! refuses up front must be exactly what the step program runs of them.

use lorafit::formats::catalog;
use lorafit::model::extended::needed;
use lorafit::model::settings::Stage;
use lorafit::model::steptrace::generate;
use lorafit::model::{Architecture, Settings};

/// `needed` names a step exactly when the step program runs one of the extended ops for
/// it (`Trace::extended`), over every catalog model (four layers deep, a short sequence)
/// with the default settings and each extended setting (TRL's fused LM head for SFT among
/// them).
#[test]
fn needed_is_what_the_program_runs() {
    let variants = [
        Settings::default(),
        Settings {
            use_dora: true,
            ..Settings::default()
        },
        Settings {
            fused_ce: lorafit::model::FusedCe::Liger,
            ..Settings::default()
        },
        Settings {
            stage: Stage::Dpo,
            ..Settings::default()
        },
        Settings {
            liger: lorafit::model::Liger::ALL,
            ..Settings::default()
        },
        Settings {
            logits: Some(lorafit::model::Logits::Fused),
            ..Settings::default()
        },
        Settings {
            optimizer: lorafit::model::Optimizer::AdamwTorch4bit,
            ..Settings::default()
        },
        Settings {
            packing: true,
            batch: 2,
            ..Settings::default()
        },
        Settings {
            packing: true,
            attn_impl: lorafit::model::AttnImpl::FlashAttention2,
            ..Settings::default()
        },
        Settings {
            neat_packing: true,
            ..Settings::default()
        },
        Settings {
            quant: Some(lorafit::model::Quant::Nf4),
            parallel: lorafit::model::Parallel {
                gpus_per_node: 2,
                strategy: lorafit::model::Strategy::FsdpFullShard,
                ..Default::default()
            },
            ..Settings::default()
        },
    ];
    let mut checked = 0;
    for m in catalog::models() {
        let mut arch = m.arch.clone();
        let shallow = Architecture {
            num_hidden_layers: arch.num_hidden_layers.min(4),
            ..arch.clone()
        };
        if shallow.validate().is_ok() {
            arch = shallow;
        }
        for base in &variants {
            let s = Settings {
                seq: 256,
                ..base.clone()
            };
            let Ok(trace) = generate(&arch, &s) else {
                continue; // refused for another reason (the plan says why)
            };
            assert_eq!(
                needed(&arch, &s).is_some(),
                trace.extended.is_some(),
                "{}: needed {:?}, the program ran {:?}",
                arch.name,
                needed(&arch, &s),
                trace.extended
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} steps checked");
    let llama = &catalog::find_model("llama2-7b").unwrap().arch;
    assert_eq!(needed(llama, &Settings::default()), None);
}
