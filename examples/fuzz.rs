//! A mutation fuzzer for lorafit's untrusted-input doors (benchmark-style, not run in CI):
//!     cargo run --release --example fuzz -- [TARGET|all] [INPUTS_PER_TARGET]
//! Seeds come from tests/fuzz-corpus/TARGET/*; inputs are seeds mutated by byte flips,
//! insertions of interesting tokens, truncation and splicing. Every input runs under
//! catch_unwind; a panic or broken invariant is saved to tests/fuzz-corpus/TARGET/crash-*.
//! No coverage guidance (cargo-fuzz needs a nightly toolchain, not available here).

use std::panic;
use std::path::Path;
use std::time::Instant;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&str] = &[
    "&",
    "=",
    "%",
    "%00",
    "%ZZ",
    "%e2%82",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "\n",
    "-1",
    "0",
    "1e309",
    "NaN",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "<script>alert(1)</script>",
    "javascript:alert(1)",
    "\" onerror=\"x",
    "model=",
    "b=",
    "s=",
    "arch=",
    "llama.4096.11008.32.32.32.128.32000.0",
    "\"hidden_size\":",
    "\"model_type\":\"llama\"",
    "\"text_config\":{",
    "\"text\":\"",
    "num_tokens",
    "é",
    "\u{202e}",
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut d = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(6) {
        match rng.below(6) {
            0 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            1 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let i = rng.below(d.len() + 1);
                d.splice(i..i, t.iter().copied());
            }
            2 if !d.is_empty() => {
                let i = rng.below(d.len());
                d.truncate(i);
            }
            3 => {
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let i = rng.below(other.len());
                    d.extend_from_slice(&other[i..]);
                }
            }
            4 if !d.is_empty() => {
                let i = rng.below(d.len());
                let j = (i + rng.below(16)).min(d.len());
                d.drain(i..j);
            }
            _ => {
                let n = rng.below(8);
                for _ in 0..n {
                    d.push((rng.next() & 0xff) as u8);
                }
            }
        }
    }
    d
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map(String::as_str).unwrap_or("all");
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    panic::set_hook(Box::new(|_| {}));
    for target in lorafit::fuzz::TARGETS
        .iter()
        .filter(|t| which == "all" || which == **t)
    {
        let dir = root.join(target);
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| std::fs::read(e.ok()?.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        if seeds.is_empty() {
            seeds.push(vec![]);
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ target.len() as u64);
        let (mut crashes, t0) = (0u64, Instant::now());
        for i in 0..n {
            let input = mutate(&mut rng, &seeds);
            let r = panic::catch_unwind(|| lorafit::fuzz::run(target, &input));
            let bad = match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some("panic".to_string()),
            };
            if let Some(why) = bad {
                crashes += 1;
                let path = dir.join(format!("crash-{i}"));
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::write(&path, &input);
                eprintln!("{target}: {why} → {}", path.display());
                if crashes >= 10 {
                    break;
                }
            }
        }
        println!(
            "{target:<9} {n} inputs in {:.1} s, {crashes} failures, {} seeds",
            t0.elapsed().as_secs_f64(),
            seeds.len()
        );
    }
}
