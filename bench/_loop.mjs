import { createGrepTool } from "pi-native-ops";
const t = createGrepTool(process.argv[2]);
for (let i = 0; i < 60; i++) await t.execute("x", { pattern: "qqzzxx_no_such_thing" });
