#!/usr/bin/env bash
# Runs every test of lorafit; CI (.ci/run) runs exactly this. Installs missing tools first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"

export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

echo "== lint: rustfmt, clippy (native and wasm32, with and without the GPU benchmark)"
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
cargo clippy --locked --all-targets --features gpu -- -D warnings
cargo clippy --locked --target wasm32-unknown-unknown -- -D warnings
# The page's first bundle: the planner without the extended ops (index.html, src/model/extended.rs).
cargo clippy --locked --target wasm32-unknown-unknown --no-default-features --bin lorafit -- -D warnings
cargo clippy --locked --target wasm32-unknown-unknown --features gpu --bin gpubench -- -D warnings

echo "== native tests: unit, properties, CLI, reference accuracy, wgpu kernels on Vulkan (lavapipe)"
cargo test --locked --features gpu -- --nocapture

echo "== reference comparison through the CLI (tests/data/compare_reference.py)"
cargo build --locked --bin lorafit
REF=tests/data/reference/cases.jsonl
# The harness's emulated GPU runs no cuBLAS, so its steps hold no cuBLAS workspace: the cases
# are planned with CUBLAS_WORKSPACE_CONFIG=:0:0, which says the same.
python3 -c 'import json,sys
for l in open(sys.argv[1]):
    c = json.loads(l); c["settings"]["cublas_workspace_config"] = ":0:0"; print(json.dumps(c))' "$REF" > target/cases-harness.jsonl
./target/debug/lorafit estimate --jsonl target/cases-harness.jsonl > target/pred.jsonl
python3 tests/data/compare_reference.py "$REF" target/pred.jsonl

echo "== release web build (trunk): the planner, the lazily loaded GPU benchmark page, plan() for JavaScript"
trunk build --release
trunk build --release --dist dist/gpu gpu/index.html
trunk build --release --dist dist/lib --filehash false lib/index.html

echo "== browser tests (headless Debian chromium, release build)"
node --test tests/browser/
