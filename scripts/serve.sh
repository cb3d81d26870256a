#!/usr/bin/env bash
# Installs what is missing, builds the planner and the GPU benchmark page, and serves them at
# http://127.0.0.1:8080/ (any static server works; this one is Python's).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
trunk build --release
trunk build --release --dist dist/gpu gpu/index.html
trunk build --release --dist dist/lib --filehash false lib/index.html
echo "lorafit: http://127.0.0.1:${PORT:-8080}/"
exec python3 -m http.server "${PORT:-8080}" --bind 127.0.0.1 --directory dist
