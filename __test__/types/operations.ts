// Each member of pi-native-ops is assignable to the Operations interfaces of both supported pi
// versions, and both versions' tool factories take them (checked by `tsc --noEmit`, never run).
import type * as legacy from "@mariozechner/pi-coding-agent";
import type * as current from "@earendil-works/pi-coding-agent";
import { createBashOperations, createBoundFs, createPowerShellOperations } from "pi-native-ops";

const fs = createBoundFs("/tmp/workspace", { runtimeRoot: "/workspace" });
const bash = createBashOperations({ shellPath: "/bin/bash" });

type Ops<P extends typeof legacy | typeof current> = [
  NonNullable<Parameters<P["createReadTool"]>[1]>["operations"],
  NonNullable<Parameters<P["createWriteTool"]>[1]>["operations"],
  NonNullable<Parameters<P["createEditTool"]>[1]>["operations"],
  NonNullable<Parameters<P["createLsTool"]>[1]>["operations"],
  NonNullable<Parameters<P["createFindTool"]>[1]>["operations"],
  NonNullable<Parameters<P["createBashTool"]>[1]>["operations"],
];
export const legacyOps: Ops<typeof legacy> = [fs.read, fs.write, fs.edit, fs.ls, fs.find, bash];
export const currentOps: Ops<typeof current> = [fs.read, fs.write, fs.edit, fs.ls, fs.find, bash];
// pi 1.6's PowerShellOperations, for its powershell tool.
export const powershell: current.PowerShellOperations = createPowerShellOperations();
export const powershellToolOps: NonNullable<
  Parameters<typeof current.createPowerShellToolDefinition>[1]
>["operations"] = createPowerShellOperations();
export const legacyGrep: legacy.GrepOperations = fs.grep;
export const currentGrep: current.GrepOperations = fs.grep;
export const legacyNamed: [legacy.ReadOperations, legacy.WriteOperations, legacy.EditOperations, legacy.LsOperations] =
  [fs.read, fs.write, fs.edit, fs.ls];
export const currentNamed: [
  current.ReadOperations,
  current.WriteOperations,
  current.EditOperations,
  current.LsOperations,
] = [fs.read, fs.write, fs.edit, fs.ls];

// The checks can fail: a readFile resolving to a string is not a ReadOperations...
// @ts-expect-error readFile must resolve to a Buffer
export const wrong: current.ReadOperations = { ...fs.read, readFile: async (_p: string) => "text" };
// ...and the members are really typed (not `any`): wrong arguments are rejected.
// @ts-expect-error glob takes a string pattern
fs.find.glob(42, "/workspace", { ignore: [], limit: 10 });
// @ts-expect-error isDirectory takes a path string
fs.grep.isDirectory(1);
// @ts-expect-error stat takes a path string
fs.ls.stat(null);
// @ts-expect-error exec takes a command string
bash.exec(1, "/workspace", { onData() {} });
