#!/usr/bin/env bash
# Runs a command (wine, wineserver, a Windows test binary through wine) as the wine user that
# scripts/wine-env.sh chose, never as root: wine maps Linux's / to Z: and shows unix symlinks as the
# directories they lead to, so a Windows program that goes wrong (a recursive delete following a link out)
# must meet an unprivileged user's permissions (EACCES on the system's files), not root's. As is when the
# caller is not root (PI_NATIVE_OPS_WINE_AS unset).
set -euo pipefail
user=${PI_NATIVE_OPS_WINE_AS:-}
if [ -z "$user" ]; then
  exec "$@"
fi
exec setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups -- \
  env HOME="$PI_NATIVE_OPS_WINE_HOME" USER="$user" LOGNAME="$user" "$@"
