#!/usr/bin/env bash
# The whole test suite: Rust checks and unit tests, TypeScript type tests against both pi versions,
# vitest on Node 20 with pi 0.73.1 and on Node 22 with pi 1.6.0, and the packaging test.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy --workspace --all-targets"
# Every crate with its tests (the binding has no test or bench target: see Cargo.toml).
cargo clippy --workspace --all-targets -- -D warnings
step "module cycles (none in any crate: a module and what it imports form a tree)"
python3 scripts/module-cycles.py --self-test
for src in crates/core/src crates/server/src src; do python3 scripts/module-cycles.py "$src"; done
step "docs: no dead references (links and anchors, paths in backticks and code comments, DEVELOPING.md's code map)"
python3 scripts/check-docs.py
step "cargo test (the core, without Node)"
cargo test -p pi-native-ops-core
step "cargo test (the core's index suites against a persisted index: built, saved, restored from its cache)"
PI_INDEX_PERSISTED=1 cargo test -p pi-native-ops-core index::
step "cargo test (the remote server: codec, dispatch, the built binary over pipes and a WebSocket)"
cargo test -p pi-native-ops-server
step "cargo machete (every declared dependency is used)"
# Installed once per machine (about a minute from crates.io); the check itself reads sources only.
command -v cargo-machete >/dev/null || cargo install --locked cargo-machete@0.9.2
cargo machete

# Every target must compile: clippy the platform-gated code for macOS, Windows and aarch64 Linux too, where the
# standard library for those targets is installed (scripts/setup.sh tries to add it).
for target in x86_64-apple-darwin x86_64-pc-windows-msvc aarch64-unknown-linux-gnu; do
  if rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    step "cargo clippy --target $target"
    CARGO_TARGET_DIR=target/cross cargo clippy --workspace --target "$target" -- -D warnings
  else
    step "skipped cargo clippy --target $target: rust-std for it is not installed"
  fi
done

step "biome ci: JS/TS lint and format check (npm run format rewrites)"
npx biome ci .

step "TypeScript type tests (both pi versions)"
npx tsc -p __test__/types/tsconfig.json

NODE20=$(command -v node)
NODE22=$(scripts/node22.sh)

# The remote face's tests (__test__/remote-*.test.js, and the parity suites' second run below) spawn it.
step "build pi-native-ops-server (static on Linux)"
bash scripts/build-server.sh

step "vitest: Node $("$NODE20" --version) + @mariozechner/pi-coding-agent@0.73.1"
PI_NATIVE_OPS_PI=@mariozechner/pi-coding-agent "$NODE20" node_modules/vitest/vitest.mjs run

step "vitest: Node $("$NODE22" --version) + @earendil-works/pi-coding-agent@1.6.0"
PI_NATIVE_OPS_PI=@earendil-works/pi-coding-agent "$NODE22" node_modules/vitest/vitest.mjs run

# The parity suites a second time, each fs and bash object a remote connection's to a server child
# process (__test__/helpers/face.js): the same results as local, byte for byte, on both pi versions.
REMOTE_FILES=(__test__/{fs-parity,fs-escape,fs,find,grep,bash-tool,bash}.test.js)
step "vitest, remote face: Node $("$NODE22" --version) + @earendil-works/pi-coding-agent@1.6.0"
PI_NATIVE_OPS_FACE=remote PI_NATIVE_OPS_PI=@earendil-works/pi-coding-agent "$NODE22" node_modules/vitest/vitest.mjs run "${REMOTE_FILES[@]}"
step "vitest, remote face: Node $("$NODE20" --version) + @mariozechner/pi-coding-agent@0.73.1"
PI_NATIVE_OPS_FACE=remote PI_NATIVE_OPS_PI=@mariozechner/pi-coding-agent "$NODE20" node_modules/vitest/vitest.mjs run "${REMOTE_FILES[@]}"

# The same suites over a WebSocket (connectWebSocket to the server's --listen, its session layer between;
# __test__/helpers/face.js), on one Node: the transport is JS of ours plus the ws package, the same on both
# (about 35 s on the busy machine).
step "vitest, websocket face: Node $("$NODE22" --version) + @earendil-works/pi-coding-agent@1.6.0"
PI_NATIVE_OPS_FACE=websocket PI_NATIVE_OPS_PI=@earendil-works/pi-coding-agent "$NODE22" node_modules/vitest/vitest.mjs run "${REMOTE_FILES[@]}"

# The server for aarch64 Linux, cross-built and run under qemu-aarch64: its Rust e2e suites and the remote
# face of the parity suites against it. Installs the Rust target, Debian's cross gcc and qemu-user-static.
step "aarch64 Linux: the server built for aarch64-unknown-linux-musl (no LTO), tested under qemu-aarch64"
PI_NATIVE_OPS_AARCH64_QUICK=1 bash scripts/test-aarch64.sh

# Windows under wine: the addon built for x86_64-pc-windows-gnu and the bounded fs suites in npm's Windows
# Node 22 (docs/windows.md). Installs mingw, wine and the Windows Node on first run.
step "Windows (x86_64-pc-windows-gnu) under wine: the core's Windows tests and the bounded fs suites"
bash scripts/test-windows.sh

# The find and grep suites once more with the warm search index on (__test__/helpers/face.js): each search
# made through an index that must still be ready after it, and cross-checked byte for byte against the same
# search without an index. The index's own suites (__test__/index-*.test.js) run in the runs above.
INDEX_FILES=(__test__/{find,grep}.test.js)
step "vitest, index on: Node $("$NODE22" --version) + @earendil-works/pi-coding-agent@1.6.0"
PI_NATIVE_OPS_INDEX=1 PI_NATIVE_OPS_PI=@earendil-works/pi-coding-agent "$NODE22" node_modules/vitest/vitest.mjs run "${INDEX_FILES[@]}"
step "vitest, index on: Node $("$NODE20" --version) + @mariozechner/pi-coding-agent@0.73.1"
PI_NATIVE_OPS_INDEX=1 PI_NATIVE_OPS_PI=@mariozechner/pi-coding-agent "$NODE20" node_modules/vitest/vitest.mjs run "${INDEX_FILES[@]}"
# Once more against the persisted index (helpers/face.js, helpers/indexed.js): each index built, saved at
# close, and started again from its cache file, which must be restored.
step "vitest, persisted index: Node $("$NODE22" --version) + @earendil-works/pi-coding-agent@1.6.0"
PI_NATIVE_OPS_INDEX=1 PI_NATIVE_OPS_INDEX_CACHE=1 PI_NATIVE_OPS_PI=@earendil-works/pi-coding-agent "$NODE22" \
  node_modules/vitest/vitest.mjs run "${INDEX_FILES[@]}" __test__/index-freshness.test.js

# The suites that run pieces as nobody once more, from a copy of the checkout in a 0700 directory (as a
# clone in root's home is): nobody must load only what they stage for it, never the checkout. The wine leg
# too (wine runs as nobody), with one suite.
# One Node is enough for the proof (the suites themselves ran on both above).
step "vitest, nobody suites from a private (0700) checkout: Node $("$NODE22" --version)"
bash scripts/private-checkout-test.sh "$NODE22"

if [ -f scripts/pack-test.sh ]; then
  step "packaging test"
  bash scripts/pack-test.sh
fi
step "all tests passed"
