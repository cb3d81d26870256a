#!/usr/bin/env bash
# Installs what lorafit's build and tests need and is missing on this machine.
# Idempotent: every step is skipped when its tool is already there at the right version.
# Sources: crates.io (trunk, wasm-bindgen-cli), Debian (chromium, chromedriver, mesa-vulkan-drivers),
# npm (binaryen for wasm-opt, terser for the release scripts, playwright-core to drive chromium, axe-core for accessibility checks).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"

say() { printf '[setup] %s\n' "$*"; }

if ! rustup target list --installed 2>/dev/null | grep -q '^wasm32-unknown-unknown$'; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

TRUNK_VERSION=0.21.14
if ! trunk --version 2>/dev/null | grep -q "$TRUNK_VERSION"; then
  say "building trunk $TRUNK_VERSION from crates.io (about 11 minutes)"
  cargo install --locked trunk --version "$TRUNK_VERSION"
fi

# wasm-bindgen-cli must match the wasm-bindgen library version pinned in Cargo.lock exactly.
WB_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; print $3; exit}' Cargo.lock | tr -d '"')
if [ -z "$WB_VERSION" ]; then echo "[setup] Cargo.lock has no wasm-bindgen entry" >&2; exit 1; fi
if ! wasm-bindgen --version 2>/dev/null | grep -q " $WB_VERSION\$"; then
  say "building wasm-bindgen-cli $WB_VERSION from crates.io (about 6 minutes)"
  cargo install wasm-bindgen-cli --version "$WB_VERSION" --force
fi

# wasm-opt: npm's binaryen (Debian's binaryen 108 produces a wasm that crashes on load); terser
# minifies wasm-bindgen's scripts in release builds (scripts/externalize_boot.py).
if [ ! -x node_modules/.bin/wasm-opt ] || [ ! -x node_modules/.bin/terser ] || [ ! -d node_modules/playwright-core ] || [ ! -d node_modules/axe-core ]; then
  say "installing binaryen (wasm-opt), terser, playwright-core and axe-core from npm"
  npm install --no-audit --no-fund --silent
fi

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# Software Vulkan (lavapipe) for the native wgpu tests of the GPU benchmark.
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need_apt+=(mesa-vulkan-drivers libvulkan1)
# A Chinese font, so the 中文 page's screenshots show characters, not boxes (5 MB).
[ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || need_apt+=(fonts-wqy-microhei)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing ${need_apt[*]} from Debian"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
# Trunk builds offline: every locked crate (all targets: native, wasm32, the GPU feature) must be in
# the local registry before the first build. A no-op when they already are.
say "fetching the locked crates (cargo fetch)"
cargo fetch --locked --quiet
say "all tools present"
