#!/usr/bin/env bash
# Builds pi-native-ops-server (crates/server) in release mode and copies it to the repository root
# as pi-native-ops-server.<platform suffix>, the napi platform suffix of the addon beside it
# (pi-native-ops.<suffix>.node), e.g. pi-native-ops-server.linux-x64-gnu.
#
# On Linux the binary is fully static (glibc with +crt-static: a static-pie executable), so the
# same file runs in any Linux VM, container or chroot with nothing else installed. Elsewhere it is
# a plain release build.
set -euo pipefail
cd "$(dirname "$0")/.."

os=$(uname -s)
arch=$(uname -m)
case "$arch" in
  x86_64 | amd64) napi_arch=x64 rust_arch=x86_64 ;;
  aarch64 | arm64) napi_arch=arm64 rust_arch=aarch64 ;;
  *) echo "build-server: unsupported architecture $arch" >&2; exit 1 ;;
esac

case "$os" in
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
