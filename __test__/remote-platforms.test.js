// Opt-in smoke tests against the real platforms: each runs only when its credentials are in the
// environment and its SDK is installed (a devDependency, not a dependency of this package); otherwise its
// test is skipped, and its title says why. Each creates a sandbox, connects through its adapter (upload, start,
// dial through the platform's TLS proxy), runs a file call and a command, closes, and removes the sandbox.
//   Vercel Sandbox: VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID (@vercel/sandbox)
//   E2B:            E2B_API_KEY (e2b)
//   Daytona:        DAYTONA_API_KEY (@daytonaio/sdk)
import { describe, expect, it } from "vitest";
import { connectDaytona, connectE2B, connectVercelSandbox } from "pi-native-ops";

/** Imports `name`, or null when it is not installed. */
async function sdk(name) {
  try {
    return await import(name);
  } catch {
    return null;
  }
}

/** `[title, run]` for a platform: skipped (with the reason) unless every variable is set and the SDK loads. */
async function platform(label, vars, pkg) {
  const missing = vars.filter((v) => !process.env[v]);
  if (missing.length) return { skip: `${label}: skipped, ${missing.join(", ")} not set` };
  const mod = await sdk(pkg);
  if (!mod) return { skip: `${label}: skipped, ${pkg} is not installed (npm install --no-save ${pkg})` };
  return { mod };
}

/** The same check on every platform: a file written and read back, a command's output, a clean close. */
async function exercise(connection, root) {
  expect(connection.server.root).toBe(root);
  const file = `${root}/pi-native-ops-smoke.txt`;
  await connection.fs.write.writeFile(file, "smoke\n");
  expect((await connection.fs.read.readFile(file)).toString()).toBe("smoke\n");
  let out = "";
  const { exitCode } = await connection.bash.exec("uname -m", root, {
    onData: (d) => {
      out += d.toString();
    },
  });
  expect(exitCode).toBe(0);
  expect(out.trim()).toMatch(/^(x86_64|aarch64)$/);
  await connection.close();
}

const MINUTES = 60_000;

describe("real platforms (opt-in)", async () => {
  const vercel = await platform(
    "Vercel Sandbox",
    ["VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID"],
    "@vercel/sandbox",
  );
  const e2b = await platform("E2B", ["E2B_API_KEY"], "e2b");
  const daytona = await platform("Daytona", ["DAYTONA_API_KEY"], "@daytonaio/sdk");

  it.skipIf(vercel.skip)(vercel.skip ?? "Vercel Sandbox: connectVercelSandbox", { timeout: 5 * MINUTES }, async () => {
    const sandbox = await vercel.mod.Sandbox.create({
      teamId: process.env.VERCEL_TEAM_ID,
      projectId: process.env.VERCEL_PROJECT_ID,
      token: process.env.VERCEL_TOKEN,
      ports: [8765],
      timeout: 5 * MINUTES,
    });
    try {
      await exercise(await connectVercelSandbox(sandbox, { root: "/vercel/sandbox", port: 8765 }), "/vercel/sandbox");
    } finally {
      await sandbox.stop();
    }
  });

  it.skipIf(e2b.skip)(e2b.skip ?? "E2B: connectE2B", { timeout: 5 * MINUTES }, async () => {
    const sandbox = await e2b.mod.Sandbox.create();
    try {
      await exercise(await connectE2B(sandbox, { root: "/home/user" }), "/home/user");
    } finally {
      await sandbox.kill();
    }
  });

  it.skipIf(daytona.skip)(daytona.skip ?? "Daytona: connectDaytona", { timeout: 5 * MINUTES }, async () => {
    const client = new daytona.mod.Daytona();
    const sandbox = await client.create();
    try {
      await exercise(await connectDaytona(sandbox, { root: "/home/daytona" }), "/home/daytona");
    } finally {
      await sandbox.delete();
    }
  });
});
