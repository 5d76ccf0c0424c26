import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Each file starts Node processes that load pi (seconds of CPU on a busy machine), pi install among
    // them: generous limits, and one file at a time so they do not starve each other.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    fileParallelism: false,
  },
});
