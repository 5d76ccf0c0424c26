// The tool factories are typed with the installed pi's own types (not `any`): each result is what pi's
// own factory for that tool returns.
import type * as current from "@earendil-works/pi-coding-agent";
import {
  createGrepTool,
  createGrepToolDefinition,
  createNativeToolDefinitions,
  createNativeTools,
} from "pi-native-ops";

const definitions = createNativeToolDefinitions("/workspace", {
  bash: { spawnHook: (context) => ({ ...context, command: `set -e; ${context.command}` }) },
});
export const readDefinition: ReturnType<typeof current.createReadToolDefinition> = definitions.read;
export const grepDefinition: ReturnType<typeof current.createGrepToolDefinition> =
  createGrepToolDefinition("/workspace");
// @ts-expect-error the read tool's definition is not the bash tool's
export const mixedUp: ReturnType<typeof current.createBashToolDefinition> = definitions.read;

const tools = createNativeTools("/workspace");
export const read: ReturnType<typeof current.createReadTool> = tools.read;
export const grep: ReturnType<typeof current.createGrepTool> = createGrepTool("/workspace");
export const name: string = tools.ls.name;

type IsAny<T> = 0 extends 1 & T ? true : false;
export const notAny: [
  IsAny<typeof tools.read>,
  IsAny<typeof definitions.find>,
  IsAny<ReturnType<typeof createGrepTool>>,
] = [false, false, false];

// @ts-expect-error a tool definition is not a string
export const wrong: string = definitions.read;
// @ts-expect-error spawnHook takes pi's BashSpawnContext, and must return one
createNativeTools("/workspace", { bash: { spawnHook: (context: number) => context } });

// The pi module can be injected (either package's), and anything else is a type error.
import * as piModule from "@earendil-works/pi-coding-agent";
import { createGrepTool as createGrepToolWithPi, type PiModule } from "pi-native-ops";
export const injected: PiModule = piModule;
createNativeTools("/tmp/workspace", { pi: piModule });
createGrepToolWithPi("/tmp/workspace", { pi: piModule });
// @ts-expect-error pi is the pi module
createNativeTools("/tmp/workspace", { pi: "pi" });
