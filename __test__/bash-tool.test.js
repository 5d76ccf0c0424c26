// pi's own bash tool gives the same results with our operations as with pi's local ones.
import { describe, expect, it } from "vitest";
import { makeBash } from "./helpers/face.js";
import { isPi1, pi, piName, runTool } from "./helpers/pi.js";

const cwd = "/tmp";
const native = await makeBash();
const stock = pi.createLocalBashOperations();

async function run(operations, params, { signal, onUpdate, ...options } = {}) {
  const r = await runTool(pi.createBashTool(cwd, { operations, ...options }), params, { signal, onUpdate });
  // pi 1.x returns non-zero exits as isError results, pi 0.x throws them: both are "failed".
  return r.error === undefined ? { failed: r.isError ?? false, text: r.text } : { failed: true, text: r.error };
}

const cases = [
  ["plain output", { command: "echo hello; printf 'no newline'" }],
  ["no output", { command: "true" }],
  ["non-zero exit", { command: "echo failing >&2; exit 3" }],
  ["timeout", { command: "echo before; sleep 5", timeout: 0.3 }],
  ["large output", { command: "seq 1 5000" }],
];

describe(`pi's createBashTool (${piName}) with native operations`, () => {
  for (const [name, params] of cases) {
    it(`matches pi's local operations: ${name}`, async () => {
      const [ours, theirs] = [await run(native, params), await run(stock, params)];
      // Truncated output names a temp file whose name differs per run.
      const scrub = (r) => ({ ...r, text: r.text.replace(/\/tmp\/pi-bash-[^\s\]]+/g, "<file>") });
      expect(scrub(ours)).toEqual(scrub(theirs));
    });
  }

  it("keeps stdout and stderr in arrival order (pi's two pipes may reorder them)", async () => {
    expect(await run(native, { command: "echo a; echo b >&2; echo c" })).toEqual({ failed: false, text: "a\nb\nc\n" });
  });

  it("reports a signal death as 128 + signal, like pi 1.6.0", async () => {
    const params = { command: "kill -9 $$" };
    const ours = await run(native, params);
    expect(ours).toEqual({ failed: true, text: "(no output)\n\nCommand exited with code 137" });
    // pi 0.x's local operations resolve exitCode null here, which its tool shows as success.
    if (isPi1) expect(await run(stock, params)).toEqual(ours);
  });

  it("matches pi's local operations on abort", async () => {
    const results = [];
    for (const operations of [native, stock]) {
      const controller = new AbortController();
      // Abort once the output has reached pi, so both runs are cut at the same point.
      const onUpdate = (partial) => partial.content.some((c) => c.text?.includes("started")) && controller.abort();
      results.push(
        await run(operations, { command: "echo started; sleep 5" }, { signal: controller.signal, onUpdate }),
      );
    }
    expect(results[0]).toEqual(results[1]);
    expect(results[0].text).toContain("started");
    expect(results[0].text).toContain("Command aborted");
  });

  it("still applies spawnHook and commandPrefix", async () => {
    const spawnHook = (ctx) => ({
      ...ctx,
      command: `${ctx.command}; echo "hooked $HOOKED"`,
      env: { ...ctx.env, HOOKED: "yes" },
    });
    const params = { command: "echo body" };
    const options = { spawnHook, commandPrefix: "echo prefix" };
    const [ours, theirs] = [await run(native, params, options), await run(stock, params, options)];
    expect(ours).toEqual(theirs);
    expect(ours.text).toBe("prefix\nbody\nhooked yes\n");
  });
});
