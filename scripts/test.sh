#!/usr/bin/env bash
# Runs every test of lorafit; CI (.ci/run) runs exactly this. Installs missing tools first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"

echo "== lint: rustfmt, clippy (native and wasm32)"
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
cargo clippy --locked --target wasm32-unknown-unknown -- -D warnings

echo "== native tests: unit, properties, CLI, reference accuracy"
cargo test --locked -- --nocapture

echo "== reference comparison through the CLI (shared/tools/compare_reference.py)"
cargo build --locked --bin lorafit
REF=../shared/reference/cases.jsonl
if [ -f "$REF" ]; then
  ./target/debug/lorafit estimate --jsonl "$REF" > target/pred.jsonl
  python3 ../shared/tools/compare_reference.py "$REF" target/pred.jsonl
else
  echo "no $REF beside this checkout: skipped the CLI comparison (the cargo test above needs it too)"; exit 1
fi

echo "== release web build (trunk)"
trunk build --release

echo "== browser tests (headless Debian chromium, release build)"
node --test tests/browser/
