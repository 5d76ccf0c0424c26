// connectWebSocket and the sandbox adapters: the same connection type as connect()'s (checked by
// `tsc --noEmit`, never run).
import type * as current from "@earendil-works/pi-coding-agent";
import {
  type DaytonaSandboxLike,
  type E2BSandboxLike,
  type RemoteConnection,
  type VercelSandboxLike,
  connectDaytona,
  connectE2B,
  connectVercelSandbox,
  connectWebSocket,
} from "pi-native-ops";

export async function use(vercel: VercelSandboxLike, e2b: E2BSandboxLike, daytona: DaytonaSandboxLike) {
  const conn: RemoteConnection = await connectWebSocket("wss://example.invalid/", {
    token: "t",
    graceMs: 30_000,
    tokenIn: "protocol",
    forwardEnv: false,
    index: true,
  });
  const read: current.ReadOperations = conn.fs.read;
  const a = await connectVercelSandbox(vercel, { root: "/vercel/sandbox", port: 8765, index: true });
  const b = await connectE2B(e2b, { root: "/home/user", graceMs: 10_000 });
  const c = await connectDaytona(daytona, { root: "/home/daytona", serverArgs: ["--index"] });
  return [read, a.server.root, b.bash, c.fs];
}
