// Temporary fixture trees for tests: `makeTree({ "a.txt": "x", "d/b.txt": Buffer, "l": { symlink: "a.txt" } })`.
import {
  mkdtempSync,
  mkdirSync,
  writeFileSync,
  symlinkSync,
  rmSync,
  readdirSync,
  readFileSync,
  lstatSync,
  readlinkSync,
  realpathSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

export function tempDir(prefix = "pno-") {
  return realpathSync(mkdtempSync(path.join(tmpdir(), prefix)));
}

export function makeTree(dir, spec) {
  for (const [rel, value] of Object.entries(spec)) {
    const p = path.join(dir, rel);
    if (rel.endsWith("/")) {
      mkdirSync(p, { recursive: true });
      continue;
    }
    mkdirSync(path.dirname(p), { recursive: true });
    if (value && typeof value === "object" && "symlink" in value) symlinkSync(value.symlink, p);
    else writeFileSync(p, value);
  }
  return dir;
}

/** Everything under `dir` as { relPath: content | "->target" | "<dir>" }, to prove nothing changed. */
export function snapshot(dir) {
  const out = {};
  const walk = (d) => {
    for (const name of readdirSync(d).sort()) {
      const p = path.join(d, name);
      const rel = path.relative(dir, p);
      const st = lstatSync(p);
      if (st.isSymbolicLink()) out[rel] = `->${readlinkSync(p)}`;
      else if (st.isDirectory()) {
        out[rel] = "<dir>";
        walk(p);
      } else out[rel] = readFileSync(p).toString("base64");
    }
  };
  walk(dir);
  return out;
}

export function removeTree(dir) {
  rmSync(dir, { recursive: true, force: true });
}
