// The prebuilt platform packages this package publishes (npm/<suffix>/, optionalDependencies), by their
// napi-rs suffix; one per target of package.json's `napi.targets` (scripts/pack-check.js checks both agree).
export const PREBUILT = [
  "linux-x64-gnu",
  "linux-x64-musl",
  "linux-arm64-gnu",
  "linux-arm64-musl",
  "darwin-x64",
  "darwin-arm64",
  "win32-x64-msvc",
];
