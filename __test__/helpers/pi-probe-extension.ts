// A pi extension for tests: loaded beside pi-native-ops, it checks that each of the seven tools pi
// registered was built by the pi instance that runs (a tool's parameter schema is a module-level object
// of pi's tool module, so a second copy of pi's modules gives a different object), and writes what it
// saw to $PI_PROBE_OUT as JSON. TypeScript, so that pi's loader maps the package name below to the pi
// that runs (every pi maps the legacy name).
import { writeFileSync } from "node:fs";
import * as pi from "@mariozechner/pi-coding-agent";

const NAMES = ["read", "bash", "edit", "write", "grep", "find", "ls"];

// biome-ignore lint/suspicious/noExplicitAny: pi's ExtensionAPI, of either pi version
export default function probe(api: any) {
  api.on("before_agent_start", async (_event: unknown, ctx: { cwd: string }) => {
    const tools = api.getAllTools();
    const hostBuilt: Record<string, boolean | null> = {};
    for (const name of NAMES) {
      const registered = tools.find((tool: { name: string }) => tool.name === name);
      const factory = (pi as unknown as Record<string, (cwd: string) => { parameters: unknown }>)[
        `create${name[0].toUpperCase()}${name.slice(1)}ToolDefinition`
      ];
      hostBuilt[name] = registered === undefined ? null : registered.parameters === factory(ctx.cwd).parameters;
    }
    writeFileSync(process.env.PI_PROBE_OUT as string, JSON.stringify({ hostBuilt, active: api.getActiveTools() }));
  });
}
