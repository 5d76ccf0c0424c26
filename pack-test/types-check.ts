// Compiled with `tsc --noEmit`: proves the published type declarations fit the Operations interfaces of
// both supported pi versions (pi 1.6.0's ReadOperations adds createReadStream).
import { createBashOperations, createBoundFs, createNativeTools } from "pi-native-ops";
import * as legacy from "@mariozechner/pi-coding-agent";
import * as current from "@earendil-works/pi-coding-agent";

const fs = createBoundFs("/workspace");
const bash = createBashOperations();

export const legacyOps: [
  legacy.ReadOperations,
  legacy.WriteOperations,
  legacy.EditOperations,
  legacy.LsOperations,
  legacy.BashOperations,
] = [fs.read, fs.write, fs.edit, fs.ls, bash];
export const currentOps: [
  current.ReadOperations,
  current.WriteOperations,
  current.EditOperations,
  current.LsOperations,
  current.BashOperations,
] = [fs.read, fs.write, fs.edit, fs.ls, bash];

export const tools = [
  legacy.createReadTool("/workspace", { operations: fs.read }),
  current.createReadTool("/workspace", { operations: fs.read }),
  current.createBashTool("/workspace", { operations: bash }),
];
export const native = createNativeTools("/workspace", { runtimeRoot: "/workspace" });
