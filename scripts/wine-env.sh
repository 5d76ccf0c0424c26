# Sourced by scripts/wine-node.sh and scripts/test-windows.sh: the environment that runs this checkout's
# Windows programs under wine (npm's Windows Node, the core's test binary). Needs scripts/build-windows.sh
# to have set up $PI_NATIVE_OPS_WIN_TOOLS (default .tools/windows).
#
# The wine prefix (its C: drive, registry) lives in $PI_NATIVE_OPS_WIN_TOOLS/prefix and is made on first
# use (about 20 s). Wine maps Linux's / to Z:.
wine_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PI_NATIVE_OPS_WIN_TOOLS=${PI_NATIVE_OPS_WIN_TOOLS:-$wine_root/.tools/windows}
export PI_NATIVE_OPS_WIN_TOOLS
export WINEDEBUG=${WINEDEBUG:--all} WINEARCH=win64
# Wine's programs never run as root (scripts/wine-as.sh runs them): as root, they run as
# $PI_NATIVE_OPS_WINE_USER (default nobody) with a home and a wine prefix that user owns
# ($PI_NATIVE_OPS_WIN_TOOLS/home-USER; the suites' temporary directories are in its prefix), so whatever a
# test does through Z: (Linux's /) meets that user's permissions.
if [ "$(id -u)" = 0 ]; then
  export PI_NATIVE_OPS_WINE_AS=${PI_NATIVE_OPS_WINE_USER:-nobody}
  export PI_NATIVE_OPS_WINE_HOME="$PI_NATIVE_OPS_WIN_TOOLS/home-$PI_NATIVE_OPS_WINE_AS"
  mkdir -p "$PI_NATIVE_OPS_WINE_HOME"
  chown "$PI_NATIVE_OPS_WINE_AS:$(id -g "$PI_NATIVE_OPS_WINE_AS")" "$PI_NATIVE_OPS_WINE_HOME"
  chmod 700 "$PI_NATIVE_OPS_WINE_HOME"
  export WINEPREFIX="$PI_NATIVE_OPS_WINE_HOME/prefix"
else
  unset PI_NATIVE_OPS_WINE_AS
  export WINEPREFIX="$PI_NATIVE_OPS_WIN_TOOLS/prefix"
fi
wine_as="$wine_root/scripts/wine-as.sh"
# Our ProcessPrng stub (see build-windows.sh) instead of wine's own bcryptprimitives.dll; no Mono, Gecko
# or desktop menus asked for while the prefix is made.
export WINEDLLOVERRIDES="bcryptprimitives=n;mscoree=;mshtml=;winemenubuilder.exe=d"
export NODE_SKIP_PLATFORM_CHECK=1
# The win32 builds of rollup's and esbuild's native parts, for vitest (build-windows.sh unpacks them).
export NODE_PATH="Z:${PI_NATIVE_OPS_WIN_TOOLS//\//\\}\\node_modules"
export NAPI_RS_NATIVE_LIBRARY_PATH=${NAPI_RS_NATIVE_LIBRARY_PATH:-$PI_NATIVE_OPS_WIN_TOOLS/pi-native-ops.win32-x64-gnu.node}
if [ ! -d "$WINEPREFIX/drive_c/windows/system32" ]; then
  "$wine_as" wineboot --init >/dev/null 2>&1 || true
  "$wine_as" wineserver -w
fi
# In system32, where every program finds it: Go programs (esbuild.exe, which vitest starts) look nowhere else.
"$wine_as" cp -u "$PI_NATIVE_OPS_WIN_TOOLS/dlls/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
