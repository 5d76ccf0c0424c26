// The warm search index's types: the `index` option of createBoundFs, the tools and connect, and
// `fs.index` (checked by `tsc --noEmit`, never run).
import {
  type BoundIndex,
  type IndexOptions,
  type IndexState,
  type IndexStats,
  connect,
  createBoundFs,
  createNativeTools,
} from "pi-native-ops";

const options: IndexOptions = { maxWatches: 10_000, maxFileBytes: 1 << 20 };
const fs = createBoundFs("/tmp/workspace", { index: options });
createBoundFs("/tmp/workspace", { index: true });
// @ts-expect-error index is a boolean or the options object
createBoundFs("/tmp/workspace", { index: "yes" });
// @ts-expect-error maxWatches is a number
createBoundFs("/tmp/workspace", { index: { maxWatches: "8" } });
// Without the option there may be no index: `fs.index` is optional.
// @ts-expect-error possibly undefined
fs.index.stats();

export async function use() {
  const index: BoundIndex | undefined = fs.index;
  const stats: IndexStats | undefined = await index?.ready;
  const state: IndexState | undefined = stats?.state;
  const refreshed: number | null | undefined = stats?.lastRefresh;
  const reason: string | null | undefined = (await fs.index?.stats())?.reason;
  await fs.index?.close();
  const tools = createNativeTools("/workspace", { index: true });
  const toolsIndex: BoundIndex | undefined = tools.index;
  const conn = await connect(process, { index: { maxFileBytes: 0 } });
  const remote: Promise<IndexStats> | undefined = conn.fs.index?.ready;
  // The root's view: a local fs says what it is doing; a connection's root is the server's.
  const view: "ready" | "making" | "unasked" | "none" = fs.view();
  // @ts-expect-error a connection's fs has no view() of its own
  conn.fs.view();
  return [state, refreshed, reason, toolsIndex, remote, view];
}
