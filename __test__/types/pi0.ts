// Each member of pi-native-ops is assignable to @mariozechner/pi-coding-agent's own interfaces, and pi's factories take them.
import type {
  BashOperations,
  EditOperations,
  FindOperations,
  GrepOperations,
  LsOperations,
  ReadOperations,
  WriteOperations,
} from "@mariozechner/pi-coding-agent";
import {
  createBashTool,
  createEditTool,
  createFindTool,
  createLsTool,
  createReadTool,
  createWriteTool,
} from "@mariozechner/pi-coding-agent";
import { createBashOperations, createBoundFs } from "pi-native-ops";

const fs = createBoundFs("/tmp/workspace", { runtimeRoot: "/workspace" });
export const read: ReadOperations = fs.read;
export const write: WriteOperations = fs.write;
export const edit: EditOperations = fs.edit;
export const ls: LsOperations = fs.ls;
export const find: FindOperations = fs.find;
export const grep: GrepOperations = fs.grep;
export const bash: BashOperations = createBashOperations();

export const tools = [
  createReadTool("/workspace", { operations: fs.read }),
  createWriteTool("/workspace", { operations: fs.write }),
  createEditTool("/workspace", { operations: fs.edit }),
  createLsTool("/workspace", { operations: fs.ls }),
  createFindTool("/workspace", { operations: fs.find }),
  createBashTool("/workspace", { operations: createBashOperations({ shellPath: "/bin/bash" }) }),
];

// The check can fail: a readFile resolving to a string is not a ReadOperations.
// @ts-expect-error readFile must resolve to a Buffer
export const wrong: ReadOperations = { ...fs.read, readFile: async (_p: string) => "text" };

// And the members are really typed (not \`any\`): wrong arguments are rejected.
// @ts-expect-error glob takes a string pattern
fs.find.glob(42, "/workspace", { ignore: [], limit: 10 });
// @ts-expect-error isDirectory takes a path string
fs.grep.isDirectory(1);
// @ts-expect-error stat takes a path string
fs.ls.stat(null);
