import { createGrepTool } from "pi-native-ops";
const dir = process.argv[2];
const t = createGrepTool(dir);
for (const p of [{ pattern: "qqzzxx_no_such_thing" }, { pattern: "qqzzxx_no_such_thing", glob: "!dist/bundle/**" }, { pattern: "qqzzxx_no_such_thing", glob: "dist/bundle/**" }]) {
  const ts = []; for (let i = 0; i < 7; i++) { const t0 = performance.now(); await t.execute("x", p); ts.push(performance.now() - t0); }
  ts.sort((a,b)=>a-b); console.log(JSON.stringify(p), ts[3].toFixed(1), "ms");
}
