// The remote client's types: a connection's operations are pi's Operations, its tools pi's own tool types
// (checked by `tsc --noEmit`, never run).
import { spawn } from "node:child_process";
import { Duplex } from "node:stream";
import type * as current from "@earendil-works/pi-coding-agent";
import type * as legacy from "@mariozechner/pi-coding-agent";
import { connect, createRemoteToolDefinitions, createRemoteTools, serverBinaryPath } from "pi-native-ops";

const child = spawn(serverBinaryPath({ platform: "linux", arch: "arm64" }), ["--root", "/workspace"]);
export async function use() {
  const conn = await connect(child, { forwardEnv: (env) => ({ PATH: env.PATH }) });
  await connect(new Duplex(), {
    policy: { denyRead: [".env"], denyWrite: ["dist/"], protect: true },
    onPolicyEvent: (event) => {
      if ("dropped" in event) return event.dropped;
      const where: string | undefined = event.path ?? event.host;
      return [event.tool, event.access, event.rule, event.allowed, event.time, where];
    },
  });
  await connect({ readable: new ReadableStream<Uint8Array>(), writable: new WritableStream<Uint8Array>() });
  const currentOps: [
    current.ReadOperations,
    current.WriteOperations,
    current.EditOperations,
    current.LsOperations,
    current.GrepOperations,
  ] = [conn.fs.read, conn.fs.write, conn.fs.edit, conn.fs.ls, conn.fs.grep];
  const legacyBash: NonNullable<Parameters<typeof legacy.createBashTool>[1]>["operations"] = conn.bash;
  const tools = createRemoteTools("/workspace", { connection: conn, bash: { shellPath: "/bin/sh" } });
  const read: ReturnType<typeof current.createReadTool> = tools.read;
  const grep: ReturnType<typeof current.createGrepToolDefinition> = createRemoteToolDefinitions("/workspace", {
    connection: conn,
  }).grep;
  const root: string = conn.server.root;
  const matches = (await conn.grep({ pattern: "x", path: "src" })).matches;
  await conn.close();
  return [currentOps, legacyBash, read, grep, root, matches];
}

// @ts-expect-error a transport is a pair of streams
connect("ssh host");
// @ts-expect-error forwardEnv is a boolean or a function
connect(new Duplex(), { forwardEnv: "yes" });
// @ts-expect-error policy rules are strings
connect(new Duplex(), { policy: { denyRead: [1] } });
// @ts-expect-error the tools need a connection
createRemoteTools("/workspace", {});
