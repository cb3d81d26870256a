//! Steps with Liger-Kernel's RMSNorm, SwiGLU and RoPE (`liger_kernel`), measured with the harness
//! beside the same steps without them (`tests/data/reference/liger/`): each planned to the byte
//! (the quick and the settled plan against the measured peak, reserved against PyTorch's
//! caching allocator replayed over the measured step), and the fix "Liger kernels" saving what
//! the two measured steps differ by.

use lorafit::planning::fixes::FixId;
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/liger/cases.jsonl")
}

/// A catalog model's architecture.
fn catalog(model: &str) -> lorafit::model::Architecture {
    lorafit::formats::catalog::resolve_model(&serde_json::json!(model))
        .expect("model")
        .value
}

/// A LLaMA-Factory config switching Liger on (`enable_liger_kernel: true`) for the Hub model
/// `model_id`, with `lora_target` when given, as read with its catalog model resolved (which
/// adjusts the switch to the family's kernels and says how).
pub(crate) fn read_liger_switch(
    model_id: &str,
    lora_target: Option<&str>,
) -> lorafit::formats::framework::Reading {
    let target = lora_target.map_or(String::new(), |t| format!("lora_target: {t}\n"));
    let mut read = lorafit::formats::framework::read(&format!(
        "model_name_or_path: {model_id}\nstage: sft\nfinetuning_type: lora\n{target}enable_liger_kernel: true\n"
    ))
    .expect("reads");
    assert!(
        read.catalog_model().expect("catalog").is_some(),
        "{model_id}"
    );
    read
}

/// A refusal's reason, from `start` on, has its Chinese.
fn assert_translated(err: &str, start: &str) {
    let why = &err[err.find(start).expect("the reason")..];
    assert!(lorafit::web::i18n::has(why), "no Chinese for {why}");
}

#[test]
fn liger_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        assert!(q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        n += 1;
    }
    assert_eq!(n, 33);
}

/// Each measured pair (`ID` without, `ID_liger` with the three kernels, DeepSeek-V2's and
/// gpt-oss's two): the
/// fix the planner offers for `ID` is those kernels, and it saves exactly what the measurements
/// differ by.
#[test]
fn the_liger_fix_saves_what_the_measured_steps_differ_by() {
    let pairs = crate::fix_saves_each_measured_pair(&cases(), "_liger", FixId::Liger, |id, s| {
        // (DeepSeek-V2's Liger has no RoPE kernel, gpt-oss's no SwiGLU.)
        let want = lorafit::model::Liger {
            rope: !id.starts_with("deepseek-v2"),
            swiglu: !id.starts_with("gpt-oss"),
            ..lorafit::model::Liger::ALL
        };
        assert_eq!(s.liger, want, "{id}");
    });
    assert_eq!(pairs, 14);
}

/// Liger's fused experts read the expert weights themselves: LoRA on them with Liger's SwiGLU —
/// by `target_parameters`, or by the MLP names peft maps onto Qwen3-MoE's experts — is refused
/// by name, and the plan with LoRA on the attention alone is the fused experts'.
#[test]
fn liger_experts_refuse_lora_on_the_experts() {
    use lorafit::model::{plan, ExpertParam, Liger, Settings, Target};
    let arch = catalog("qwen3-30b-a3b");
    let s = Settings {
        liger: Liger::ALL,
        target_parameters: ExpertParam::ALL.to_vec(),
        lora_dropout: 0.0,
        ..Settings::default()
    };
    let err = plan(&arch, &s).expect_err("refused").to_string();
    assert!(
        err.contains("liger_kernel") && err.contains("LigerExperts"),
        "{err}"
    );
    let mapped = Settings {
        target_parameters: vec![],
        targets: vec![Target::Q, Target::V, Target::Gate, Target::Up, Target::Down],
        ..s.clone()
    };
    let err = plan(&arch, &mapped).expect_err("refused").to_string();
    assert!(err.contains("peft maps onto them"), "{err}");
    let attention_only = Settings {
        targets: vec![Target::Q, Target::K, Target::V, Target::O],
        ..mapped
    };
    assert!(plan(&arch, &attention_only).is_ok());
}

/// On Mixtral Liger costs memory: its fused experts' backward zeroes both expert weights'
/// gradients whole (2.8 GB a layer), more than its kernels save in a checkpointed step. The
/// measured step with it is the higher one, planned so, and the planner does not offer it.
#[test]
fn liger_on_mixtral_costs_memory_and_is_not_offered() {
    let cases = cases();
    let id = "mixtral-8x7b_lora_qkvo_gc_s4096";
    let without = crate::case_of(cases.clone(), id);
    let with = crate::case_of(cases, &format!("{id}_liger"));
    let peak = |v: &Value| v["result"]["peak_bytes"].as_u64().expect("peak");
    assert!(peak(&with) > peak(&without) + (2u64 << 30));
    let m = crate::plan_measured_line(&without);
    let fixes = lorafit::planning::fixes::suggest(&m.arch, &m.settings, 1u128 << 50, true);
    assert!(fixes.iter().all(|f| f.id != FixId::Liger));
    let w = crate::plan_measured_line(&with);
    assert!(w.settled.peak_allocated_bytes > m.settled.peak_allocated_bytes);
}

/// DeepSeek-V2's Liger (`apply_liger_kernel_to_deepseek_v2`) has no RoPE kernel: asking for it is
/// refused by name, and a framework's switch reads as the norm and SwiGLU with a note. peft maps
/// `gate_proj` / `up_proj` / `down_proj` onto DeepSeek's fused experts, which `LigerExperts`
/// reads directly: LoRA reaching them that way is refused with Liger's SwiGLU too.
#[test]
fn deepseek_v2_liger_is_its_norm_and_swiglu() {
    use lorafit::model::{plan, Liger, Settings, Target};
    let arch = catalog("deepseek-v2-lite");
    let attn = Settings {
        targets: vec![Target::Q, Target::K, Target::V, Target::O],
        ..Settings::default()
    };
    let rope = Settings {
        liger: Liger::ALL,
        ..attn.clone()
    };
    let err = plan(&arch, &rope).expect_err("refused").to_string();
    assert!(
        err.contains("no RoPE kernel for deepseek_v2") && err.contains("rms_norm,swiglu"),
        "{err}"
    );
    assert_translated(&err, "Liger-Kernel has");
    let two = Settings {
        liger: Liger {
            rope: false,
            ..Liger::ALL
        },
        ..attn.clone()
    };
    assert!(plan(&arch, &two).is_ok());
    let mlp = Settings {
        targets: vec![Target::Q, Target::O, Target::Gate, Target::Up, Target::Down],
        lora_dropout: 0.0,
        ..two.clone()
    };
    let err = plan(&arch, &mlp).expect_err("refused").to_string();
    assert!(
        err.contains("LigerExperts") && err.contains("peft maps onto them"),
        "{err}"
    );
    assert_translated(&err, "Liger-Kernel's");
    let read = read_liger_switch("deepseek-ai/DeepSeek-V2-Lite", Some("q_proj,o_proj"));
    assert_eq!(read.settings.liger, two.liger);
    assert!(
        read.notes
            .iter()
            .any(|n| n.contains("no RoPE kernel for deepseek_v2")),
        "{:?}",
        read.notes
    );
}

/// liger-kernel 0.8.5's switch for Qwen2.5-VL and Qwen3-VL raises ImportError under transformers
/// 5.24 (its fused-loss forward imports an output class it defines only when transformers has the
/// family's): asking for Liger's kernels or its fused loss there is refused with that reason, and a
/// framework config that switches Liger on is planned without it, the key named with why.
#[test]
fn liger_on_qwen_vl_fails_to_import_and_says_so() {
    use lorafit::model::{plan, FusedCe, Liger, Settings};
    for model in ["qwen2.5-vl-3b", "qwen3-vl-4b"] {
        let arch = catalog(model);
        for s in [
            Settings {
                liger: Liger::ALL,
                ..Settings::default()
            },
            Settings {
                fused_ce: FusedCe::Liger,
                ..Settings::default()
            },
        ] {
            let err = plan(&arch, &s).expect_err("refused").to_string();
            assert!(
                err.contains("raises ImportError") && err.contains(arch.family.name()),
                "{model}: {err}"
            );
            assert_translated(&err, "liger-kernel ");
        }
        assert!(plan(&arch, &Settings::default()).is_ok(), "{model}");
    }
    let read = read_liger_switch("Qwen/Qwen2.5-VL-3B-Instruct", None);
    assert_eq!(read.settings.liger, Liger::NONE);
    assert_eq!(read.settings.fused_ce, FusedCe::Off);
    assert!(
        read.not_modeled
            .iter()
            .any(|n| n.key == "enable_liger_kernel" && n.why.contains("raises ImportError")),
        "{:?}",
        read.not_modeled
    );
}

/// gpt-oss's Liger (`apply_liger_kernel_to_gpt_oss`) is its norm and RoPE over the whole head: it
/// has no SwiGLU for the clamped experts. Asking for one is refused by name, a framework's switch
/// reads as the other two with a note, and its fused loss chunks with gpt-oss's own
/// `chunk_mem_const` (8; the two-layer recordings `ligergptoss*` check it event for event).
#[test]
fn gpt_oss_liger_is_its_norm_and_rope() {
    use lorafit::model::{plan, Liger, Settings, Target};
    let arch = catalog("gpt-oss-20b");
    let attn = Settings {
        targets: vec![Target::Q, Target::K, Target::V, Target::O],
        ..Settings::default()
    };
    let all = Settings {
        liger: Liger::ALL,
        ..attn.clone()
    };
    let err = plan(&arch, &all).expect_err("refused").to_string();
    assert!(
        err.contains("no SwiGLU kernel for gpt_oss") && err.contains("rms_norm,rope"),
        "{err}"
    );
    assert_translated(&err, "Liger-Kernel has");
    let two = Liger {
        swiglu: false,
        ..Liger::ALL
    };
    let planned = Settings {
        liger: two,
        ..attn.clone()
    };
    let with = plan(&arch, &planned).expect("planned");
    let without = plan(&arch, &attn).expect("planned");
    assert!(with.peak_allocated_bytes < without.peak_allocated_bytes);
    let read = read_liger_switch("openai/gpt-oss-20b", Some("q_proj,k_proj,v_proj,o_proj"));
    assert_eq!(read.settings.liger, two);
    assert!(
        read.notes
            .iter()
            .any(|n| n.contains("no SwiGLU kernel for gpt_oss")),
        "{:?}",
        read.notes
    );
}

/// liger-kernel 0.8.5 has no kernels for OLMoE or GLM-4.5 (no `apply_liger_kernel_to_olmoe` /
/// `_glm4_moe` in `MODEL_TYPE_TO_APPLY_LIGER_FN`): Trainer's and LLaMA-Factory's switches leave
/// the model as it is. Asking for them is refused with that reason; a framework config's switch
/// is planned without them (its fused loss too), the key named with why.
#[test]
fn families_without_liger_kernels_say_so() {
    use lorafit::model::{plan, FusedCe, Liger, Settings, Target};
    for model in ["olmoe-1b-7b", "glm4.5-air"] {
        let arch = catalog(model);
        let s = Settings {
            liger: Liger::ALL,
            targets: vec![Target::Q, Target::K, Target::V, Target::O],
            ..Settings::default()
        };
        let err = plan(&arch, &s).expect_err("refused").to_string();
        assert!(
            err.contains(&format!("has no kernels for {}", arch.family.name())),
            "{model}: {err}"
        );
        assert_translated(&err, "liger-kernel");
    }
    let read = read_liger_switch(
        "allenai/OLMoE-1B-7B-0924",
        Some("q_proj,k_proj,v_proj,o_proj"),
    );
    assert_eq!(read.settings.liger, Liger::NONE);
    assert_eq!(read.settings.fused_ce, FusedCe::Off);
    let n = read
        .not_modeled
        .iter()
        .find(|n| n.key == "enable_liger_kernel")
        .expect("named");
    assert!(n.why.contains("has no kernels for olmoe"), "{}", n.why);
    assert!(lorafit::web::i18n::has(&n.why), "no Chinese for {}", n.why);
}

/// With images: Qwen3.5's and Qwen3.5-MoE's Liger patch leaves the vision tower as transformers
/// builds it (the recordings `q35vlliger*`, `q35moevlliger` check the sequence event for event),
/// so their steps with images are planned under Liger, the tower's bytes as without it; Qwen3-VL-MoE's
/// patch also replaces the tower's RoPE (`liger_rotary_pos_emb_vision`), not planned: refused.
#[test]
fn liger_with_images_is_planned_where_the_tower_is_untouched() {
    use lorafit::model::{plan, Liger, Settings};
    let images = |s: Settings| {
        let mut s = s;
        s.images.images_per_sample = 1;
        s.images.image_width = 448;
        s.images.image_height = 448;
        s.seq = 326;
        s
    };
    for model in ["qwen3.5-4b", "qwen3.5-35b-a3b"] {
        let arch = catalog(model);
        let base = images(Settings::default());
        let with = Settings {
            liger: Liger {
                rope: false,
                ..Liger::ALL
            },
            ..base.clone()
        };
        let p = plan(&arch, &with).unwrap_or_else(|e| panic!("{model}: {e}"));
        let q = plan(&arch, &base).expect("planned");
        // (On the MoE model Liger's fused experts zero both expert weights' gradients whole:
        // there it can cost memory, as on Mixtral.)
        assert_ne!(p.peak_allocated_bytes, q.peak_allocated_bytes, "{model}");
    }
    let arch = catalog("qwen3-vl-30b-a3b");
    let s = images(Settings {
        liger: Liger::ALL,
        targets: vec![lorafit::model::Target::Q, lorafit::model::Target::V],
        ..Settings::default()
    });
    let err = plan(&arch, &s).expect_err("refused").to_string();
    assert!(err.contains("text steps"), "{err}");
}
