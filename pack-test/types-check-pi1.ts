// Same check as types-check.ts, against pi 1.6.0 (@earendil-works), whose ReadOperations adds createReadStream.
import { createBashOperations, createBoundFs, createNativeTools } from "pi-native-ops";
import type {
  BashOperations,
  EditOperations,
  LsOperations,
  ReadOperations,
  WriteOperations,
} from "@earendil-works/pi-coding-agent";
import { createBashTool, createReadTool } from "@earendil-works/pi-coding-agent";

const fs = createBoundFs("/workspace");
export const read: ReadOperations = fs.read;
export const write: WriteOperations = fs.write;
export const edit: EditOperations = fs.edit;
export const ls: LsOperations = fs.ls;
export const bash: BashOperations = createBashOperations();

export const tools = [
  createReadTool("/workspace", { operations: fs.read }),
  createBashTool("/workspace", { operations: bash }),
];
export const native = createNativeTools("/workspace", { runtimeRoot: "/workspace" });
