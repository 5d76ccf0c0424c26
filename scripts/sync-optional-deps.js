// Run by `npm version` (after `napi version` bumped npm/*/package.json): pins the root package's
// optionalDependencies on its platform packages to the new version, in package.json and in the
// lockfile's root entry, so `npm ci` and the pack test see the shape `napi prepublish` will publish.
import { readFileSync, writeFileSync } from "node:fs";

const readJson = (file) => JSON.parse(readFileSync(file, "utf8"));
const writeJson = (file, value) => writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);

const manifest = readJson("package.json");
const pin = (deps) => {
  for (const name of Object.keys(deps ?? {})) {
    if (name.startsWith(`${manifest.name}-`)) deps[name] = manifest.version;
  }
};
pin(manifest.optionalDependencies);
writeJson("package.json", manifest);

const lock = readJson("package-lock.json");
pin(lock.packages?.[""]?.optionalDependencies);
writeJson("package-lock.json", lock);
