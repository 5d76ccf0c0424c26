#!/usr/bin/env bash
# Builds pi-native-ops-server (crates/server) in release mode and copies it to the repository root
# as pi-native-ops-server.<platform suffix>, the napi platform suffix of the addon beside it
# (pi-native-ops.<suffix>.node), e.g. pi-native-ops-server.linux-x64-gnu.
#
# On Linux the binary is fully static (glibc with +crt-static: a static-pie executable), so the
# same file runs in any Linux VM, container or chroot with nothing else installed. Elsewhere it is
# a plain release build.
#
# --target TRIPLE builds for another Linux target from a Linux host, e.g. for Graviton VMs and
# Docker on Apple silicon: aarch64-unknown-linux-gnu (-> pi-native-ops-server.linux-arm64-gnu) or
# aarch64-unknown-linux-musl (-> .linux-arm64-musl); also x86_64-unknown-linux-musl. Needs
# `rustup target add TRIPLE` and, for aarch64 from x86_64, Debian's gcc-aarch64-linux-gnu as the
# linker (scripts/test-aarch64.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."

cross=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) cross="${2:?--target needs a triple}"; shift 2 ;;
    --target=*) cross="${1#*=}"; shift ;;
    *) echo "usage: scripts/build-server.sh [--target TRIPLE]" >&2; exit 2 ;;
  esac
done

os=$(uname -s)
arch=$(uname -m)
case "$arch" in
  x86_64 | amd64) napi_arch=x64 rust_arch=x86_64 ;;
  aarch64 | arm64) napi_arch=arm64 rust_arch=aarch64 ;;
  *) echo "build-server: unsupported architecture $arch" >&2; exit 1 ;;
esac

if [ -n "$cross" ]; then
  case "$cross" in
    x86_64-unknown-linux-gnu) suffix=linux-x64-gnu target_arch=x86_64 ;;
    x86_64-unknown-linux-musl) suffix=linux-x64-musl target_arch=x86_64 ;;
    aarch64-unknown-linux-gnu) suffix=linux-arm64-gnu target_arch=aarch64 ;;
    aarch64-unknown-linux-musl) suffix=linux-arm64-musl target_arch=aarch64 ;;
    *) echo "build-server: --target $cross is not one of the Linux targets it knows" >&2; exit 2 ;;
  esac
  if [ "$os" != Linux ]; then
    echo "build-server: --target builds from a Linux host" >&2
    exit 1
  fi
  if ! rustup target list --installed | grep -qx "$cross"; then
    echo "build-server: the Rust standard library for $cross is missing: rustup target add $cross" >&2
    exit 1
  fi
  if [ "$target_arch" != "$rust_arch" ]; then
    # Both gnu and musl link with the cross gcc (Rust brings musl's own C runtime objects).
    linker="$target_arch-linux-gnu-gcc"
    if ! command -v "$linker" >/dev/null; then
      echo "build-server: no linker $linker for $cross: apt-get install gcc-${target_arch//_/-}-linux-gnu" >&2
      exit 1
    fi
    var="CARGO_TARGET_$(echo "$cross" | tr 'a-z-' 'A-Z_')_LINKER"
    export "$var=${!var:-$linker}"
  fi
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release -p pi-native-ops-server --target "$cross"
  built="target/$cross/release/pi-native-ops-server"
  os=cross
fi

case "$os" in
  cross) ;;
  Linux)
    target="$rust_arch-unknown-linux-gnu"
    suffix="linux-$napi_arch-gnu"
    # RUSTFLAGS with an explicit --target reach only the target's crates, not build scripts or
    # proc macros (serde_derive), which stay dynamic host programs.
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
      cargo build --release -p pi-native-ops-server --target "$target"
    built="target/$target/release/pi-native-ops-server"
    ;;
  Darwin)
    suffix="darwin-$napi_arch"
    cargo build --release -p pi-native-ops-server
    built="target/release/pi-native-ops-server"
    ;;
  *)
    echo "build-server: unsupported platform $os" >&2
    exit 1
    ;;
esac

out="pi-native-ops-server.$suffix"
# Replaced, not overwritten in place: a running copy (a test's server) keeps its own inode.
cp "$built" "$out.tmp"
mv -f "$out.tmp" "$out"
echo "build-server: $out ($(wc -c <"$out" | tr -d ' ') bytes)"
