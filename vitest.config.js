import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["__test__/**/*.test.{js,ts}"],
    // Native work and child processes: keep files isolated but do not oversubscribe 2 cores.
    pool: "forks",
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
