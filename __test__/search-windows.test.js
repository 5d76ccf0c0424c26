// Windows only: find and grep walk the tree on handles (crates/core/src/walk/listing_windows.rs) and never
// list or search anything outside the root: not through symlinks or junctions, not through a directory swapped
// for a link while the walk runs, not by a name's case, an 8.3 short name or an alternate data stream. Under
// wine (scripts/test-windows.sh) the links are unix symlinks made by the Linux helper (helpers/tree.js), which
// wine shows as the directory or file they lead to: what keeps the walk in is then its final-path check of
// every directory it enters and every file it opens. Junctions are made on the Windows runner only.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createNativeTools } from "pi-native-ops";
import { runTool } from "./helpers/pi.js";
import { makeTree, removeTree, tempDir, wineExchangeStart, wineSwapStart } from "./helpers/tree.js";
import { underWine, windows } from "./helpers/windows.js";

const describeWindows = windows ? describe : describe.skip;
const OUTSIDE_TEXT = /SECRET|INNER/;
const OUTSIDE_NAMES = /secret\.txt|inner\.txt/;

/** A find and a grep of everything, as the model would run them. */
async function searchAll(tools, params = {}) {
  const found = await runTool(tools.find, { pattern: "*", limit: 1000, ...params });
  const grepped = await runTool(tools.grep, { pattern: "needle|SECRET|INNER", limit: 1000, ...params });
  return { found: found.error ?? found.text, grepped: grepped.error ?? grepped.text };
}

/** The 8.3 name `dir /x` lists for `name` in `dir`, or "" when the volume gives it none. */
function shortNameOf(dir, name) {
  const listing = execFileSync("cmd", ["/d", "/c", "dir", "/x", "/a", dir], { encoding: "utf8" });
  const line = listing.split(/\r?\n/).find((l) => l.endsWith(` ${name}`));
  const short =
    line
      ?.trim()
      .split(/\s+/)
      .at(-1 - name.split(" ").length) ?? "";
  return short.includes("~") ? short : "";
}

describeWindows("find and grep on Windows stay inside the root", () => {
  let base;
  let root;
  let outside;
  let tools;

  beforeAll(() => {
    base = tempDir("pno-winsearch-");
    outside = makeTree(path.join(base, "outside"), { "secret.txt": "SECRET needle\n", "dir/inner.txt": "INNER\n" });
    root = makeTree(path.join(base, "root"), {
      "a.txt": "needle a\n",
      "sub/b.txt": "needle b\n",
      "link-dir-out": { symlink: outside },
      "link-file-out": { symlink: path.join(outside, "secret.txt") },
      "sub/deep-out": { symlink: path.join(outside, "dir") },
      "link-in": { symlink: path.join(base, "root", "sub") },
    });
    tools = createNativeTools(root);
  });
  afterAll(() => removeTree(base));

  it("links out are never entered or read; what is inside is found", async () => {
    const { found, grepped } = await searchAll(tools);
    expect(found).toContain("a.txt");
    expect(found).toContain("sub/b.txt");
    expect(found).not.toMatch(OUTSIDE_NAMES);
    expect(grepped).toContain("a.txt:1: needle a");
    expect(grepped).toContain("sub/b.txt:1: needle b");
    expect(grepped).not.toMatch(OUTSIDE_TEXT);
    // A link back in is not followed either (fd and rg follow no link): b.txt is found once, under sub.
    expect(grepped.split("\n").filter((l) => l.includes("needle b"))).toEqual(["sub/b.txt:1: needle b"]);
  });

  it("a search started at a link out is refused as outside", async () => {
    for (const p of ["link-dir-out", "sub\\deep-out", "link-file-out"]) {
      const { found, grepped } = await searchAll(tools, { path: p });
      expect(found, p).toMatch(/is outside workspace/);
      expect(grepped, p).toMatch(/is outside workspace/);
    }
  });

  it.skipIf(underWine)("a junction out is listed as a link and never entered (Windows runner)", async () => {
    symlinkSync(outside, path.join(root, "junction-out"), "junction");
    try {
      const { found, grepped } = await searchAll(tools);
      expect(found).toContain("junction-out");
      expect(found).not.toMatch(OUTSIDE_NAMES);
      expect(grepped).not.toMatch(OUTSIDE_TEXT);
    } finally {
      rmSync(path.join(root, "junction-out"));
    }
  });

  // Under wine the Linux side swaps the directory for a unix symlink (helpers/tree.js); on Windows a junction.
  it("a directory swapped for a link out while walks run never lets one out", async () => {
    const swapped = path.join(root, "swapped");
    let ended;
    if (underWine) ended = wineSwapStart(swapped, outside, 300);
    else {
      let swaps = 0;
      ended = () => {
        // A swap may be refused while a walk holds the directory (held without FILE_SHARE_DELETE).
        try {
          rmSync(swapped, { recursive: true, force: true });
          if (swaps % 2 === 0) mkdirSync(swapped);
          else symlinkSync(outside, swapped, "junction");
        } catch {}
        return ++swaps > 200;
      };
    }
    let walks = 0;
    while (!ended()) {
      const { found, grepped } = await searchAll(tools);
      expect(found).not.toMatch(OUTSIDE_NAMES);
      expect(grepped).not.toMatch(OUTSIDE_TEXT);
      walks++;
    }
    expect(walks).toBeGreaterThan(0);
  });

  // The walk enters each directory by name, and wine follows a unix symlink that is no reparse point: a directory
  // exchanged atomically (renameat2) with a link out, at full speed, is refused by its identity (its `..`).
  it.runIf(underWine)(
    "a directory exchanged atomically with a link out while walks run never lets one out",
    async () => {
      const exchanged = makeTree(path.join(root, "exchanged"), { "mine.txt": "needle mine\n" });
      const stop = wineExchangeStart(exchanged, path.join(base, "exchanged-link"), outside);
      let swaps;
      try {
        for (let i = 0; i < 40; i++) {
          const { found, grepped } = await searchAll(tools);
          expect(found).not.toMatch(OUTSIDE_NAMES);
          expect(grepped).not.toMatch(OUTSIDE_TEXT);
        }
      } finally {
        swaps = stop();
        removeTree(exchanged);
      }
      expect(swaps).toBeGreaterThan(0);
    },
  );

  it("an alternate data stream is never listed or searched", async (ctx) => {
    writeFileSync(path.join(root, "a.txt:hidden"), "needle in a stream\n");
    // Wine 8 has no alternate data streams: it makes a file of that name. Nothing to look for then.
    if (readdirSync(root).includes("a.txt:hidden")) {
      rmSync(path.join(root, "a.txt:hidden"));
      ctx.skip();
    }
    const { found, grepped } = await searchAll(tools);
    expect(found).not.toContain(":hidden");
    expect(grepped).not.toContain("in a stream");
    expect(grepped).toContain("a.txt:1: needle a");
  });

  describe("names as Windows compares them", () => {
    let proot;
    let ptools;
    beforeAll(() => {
      proot = makeTree(path.join(base, "policy-root"), {
        ".Env": "needle env\n",
        "Secret Stuff/x.txt": "needle secret\n",
        "a long directory name/y.txt": "needle long\n",
        "ok.txt": "needle ok\n",
      });
      ptools = createNativeTools(proot, { policy: { denyRead: [".env", "secret stuff/**"] } });
    });

    it("a denied name is left out whatever its case", async () => {
      const { found, grepped } = await searchAll(ptools);
      expect(found).toContain("ok.txt");
      expect(found.toLowerCase()).not.toContain(".env");
      expect(found).not.toContain("x.txt");
      expect(grepped).toContain("ok.txt:1: needle ok");
      expect(grepped).not.toMatch(/needle env|needle secret/);
    });

    it("the search path in another case, or with forward slashes, finds the same", async () => {
      const want = "y.txt:1: needle long";
      for (const p of [
        path.join(proot, "A LONG DIRECTORY NAME"),
        `${proot.replaceAll("\\", "/")}/a long directory name`,
      ]) {
        const grepped = await runTool(ptools.grep, { pattern: "needle", path: p });
        expect(grepped.text, p).toBe(want);
      }
    });

    it("an 8.3 short name searches the same directory and is refused where its long name is", async (ctx) => {
      const short = shortNameOf(proot, "a long directory name");
      const shortSecret = shortNameOf(proot, "Secret Stuff");
      // Volumes can have 8.3 names turned off: then there is nothing to test.
      if (!short || !shortSecret) ctx.skip();
      const grepped = await runTool(ptools.grep, { pattern: "needle", path: short });
      expect(grepped.text).toBe("y.txt:1: needle long");
      const found = await runTool(ptools.find, { pattern: "*", path: short });
      expect(found.text).toBe("y.txt");
      const refused = await runTool(ptools.grep, { pattern: "needle", path: shortSecret });
      expect(refused.error ?? refused.text).not.toContain("needle secret");
      const listed = await runTool(ptools.find, { pattern: "*", path: shortSecret });
      expect(listed.error ?? listed.text).not.toContain("x.txt");
    });
  });

  it("find's results are pi's: relative, with `/`, directories ending in `/`", async () => {
    const found = await runTool(tools.find, { pattern: "*" });
    for (const line of found.text.split("\n")) expect(line).not.toContain("\\");
    expect(found.text.split("\n")).toContain("sub/");
    expect(existsSync(path.join(root, "sub", "b.txt"))).toBe(true);
  });
});
