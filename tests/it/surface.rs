//! The quick plan across batch sizes and lengths (`QuickSurface`, the step's live bytes as
//! polynomials in both) against the quick plan itself, on the catalog under several options.

use lorafit::formats::catalog;
use lorafit::model::{plan, AttnImpl, Quant, QuickSurface, Settings};

#[test]
fn the_surface_gives_the_quick_plans_nvidia_smi() {
    let variants: Vec<(&str, Settings)> = vec![
        ("default", Settings::default()),
        (
            "nf4 gc",
            Settings {
                quant: Some(Quant::Nf4),
                grad_ckpt: true,
                ..Settings::default()
            },
        ),
        (
            "eager padded",
            Settings {
                attn_impl: AttnImpl::Eager,
                padded_mask: true,
                ..Settings::default()
            },
        ),
    ];
    let (mut built, mut n, mut off_lattice) = (0, 0, 0u128);
    for m in catalog::models() {
        let a = &m.arch;
        for (name, s) in &variants {
            let Some(q) = QuickSurface::build(a, s) else {
                println!("no surface: {} {name}", a.name);
                continue;
            };
            built += 1;
            for (b, seq) in [
                (1u64, 96u64),
                (1, 4096),
                (5, 4096),
                (16, 32768),
                (7, 1000),
                (2, 777),
            ] {
                let at = Settings {
                    batch: b,
                    seq,
                    ..s.clone()
                };
                let want = plan(a, &at).map(|p| p.nvidia_smi_bytes);
                let Some(got) = q.nvidia_smi(b, seq) else {
                    assert!(
                        seq < a.sliding_window_tokens().unwrap_or(0)
                            || a.attention_chunk().is_some_and(|c| seq >= c),
                        "{} b={b} s={seq}",
                        a.name
                    );
                    continue;
                };
                let id = format!("{} {name} b={b} s={seq}", a.name);
                match (want, got) {
                    (Ok(w), Ok(g)) if seq % 32 == 0 => assert_eq!(g, w, "{id}"),
                    // Off the multiples of 32: memory-efficient attention's padded rows.
                    (Ok(w), Ok(g)) => {
                        assert!(g <= w, "{id}: {g} > {w}");
                        off_lattice = off_lattice.max(w - g);
                    }
                    (Err(_), Err(_)) => {}
                    (w, g) => panic!("{id}: plan {w:?}, surface {g:?}"),
                }
                n += 1;
            }
        }
    }
    println!(
        "{built} surfaces, {n} points; off the multiples of 32 short by at most {off_lattice} B"
    );
    assert!(
        built * 4 > catalog::models().len() * variants.len() * 3,
        "{built} surfaces"
    );
    assert!(off_lattice < 1 << 20, "{off_lattice}");
}
