// The policy's types: the `policy` and `onPolicyEvent` options of createBoundFs, the tools and the sandbox, and
// the event (checked by `tsc --noEmit`, never run).
import { type Policy, type PolicyEvent, createBashOperations, createBoundFs, createNativeTools } from "pi-native-ops";

const policy: Policy = { denyRead: [".env", "secrets/"], denyWrite: ["dist/**"], protect: true };
const seen: PolicyEvent[] = [];
createBoundFs("/tmp/workspace", { policy, onPolicyEvent: (event) => seen.push(event) });
createBoundFs("/tmp/workspace", { policy: { protect: false } });
// @ts-expect-error rules are lists of strings
createBoundFs("/tmp/workspace", { policy: { denyRead: ".env" } });
// @ts-expect-error protect is a boolean
createBoundFs("/tmp/workspace", { policy: { protect: "yes" } });
createNativeTools("/workspace", { policy, onPolicyEvent: (e) => seen.push(e), sandbox: true });
createBashOperations({ sandbox: { root: "/workspace", policy } });

export function describe(event: PolicyEvent): string {
  const rule: string | null = event.rule;
  const allowed: boolean = event.allowed;
  const time: number = event.time;
  const where = event.path ?? `${event.host}:${event.port}`;
  // @ts-expect-error not a tool
  const bad: PolicyEvent["tool"] = "cat";
  return `${event.tool} ${event.access} ${where} ${rule} ${allowed} ${time} ${bad}`;
}
