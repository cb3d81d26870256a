#!/usr/bin/env bash
# Installs what is missing, then builds and serves the web app at http://127.0.0.1:8080/
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
exec trunk serve --release "$@"
