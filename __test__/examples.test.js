// The README's remote example stays runnable: examples/remote.mjs over a local child process.
import { execFileSync } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { serverBinaryPath } from "pi-native-ops";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const server = (() => {
  try {
    return serverBinaryPath();
  } catch {
    return null;
  }
})();

describe.skipIf(!server)("examples/remote.mjs", () => {
  const dir = makeTree(tempDir("pno-example-"), { "README.md": "# x\nTODO: one\n", "src/a.md": "a\n" });
  afterAll(() => removeTree(dir));

  it("connects to a child server and runs ls, find, grep and bash on its workspace", () => {
    const out = execFileSync(process.execPath, ["examples/remote.mjs", "child", dir], { encoding: "utf8" });
    expect(out).toContain(`protocol 1, root ${dir}\n`);
    expect(out).toContain("--- ls {}\nREADME.md\nsrc/\n");
    expect(out).toContain('--- find {"pattern":"*.md","limit":5}\nREADME.md\nsrc/a.md\n');
    expect(out).toContain('--- grep {"pattern":"TODO|FIXME","limit":3}\nREADME.md:2: TODO: one\n');
    expect(out).toContain(`--- bash {"command":"uname -sr && pwd"}\n`);
    expect(out.trimEnd().endsWith(dir)).toBe(true);
  });
});
