// The sandbox options and sandboxSupport() are typed: a wrong mode, a missing root or a sandbox on the
// bash tool options (where pi would ignore it) do not compile.
import {
  createBashOperations,
  createNativeTools,
  type PolicyEvent,
  type SandboxSupport,
  sandboxSupport,
} from "pi-native-ops";

export const ops = createBashOperations({
  sandbox: {
    root: "/srv/ws",
    runtimeRoot: "/workspace",
    network: false,
    readOnly: ["/opt"],
    env: { A: "b" },
    mode: "landlock",
    maxProcesses: 512,
  },
});
export const allowList = createBashOperations({
  sandbox: {
    root: "/srv/ws",
    network: { allow: ["registry.npmjs.org", "*.github.com"], headers: { "npm.internal": { Authorization: "t" } } },
    onPolicyEvent: (event: PolicyEvent) => {
      const host: string | undefined = event.host;
      const rule: string | null = event.rule;
      return [host, rule, event.allowed, event.time];
    },
  },
});
export const support: SandboxSupport = sandboxSupport();
export const auto: "namespaces" | "landlock" | null = support.auto;
export const tools = createNativeTools("/workspace", { root: "/srv/ws", runtimeRoot: "/workspace", sandbox: true });
export const tools2 = createNativeTools("/workspace", { root: "/srv/ws", sandbox: { network: true } });

// @ts-expect-error mode is one of "auto", "namespaces", "landlock"
createBashOperations({ sandbox: { root: "/srv/ws", mode: "chroot" } });
// @ts-expect-error createBashOperations' sandbox needs its root
createBashOperations({ sandbox: { network: true } });
// @ts-expect-error the sandbox is the tools' own option, not pi's bash tool's
createNativeTools("/workspace", { bash: { sandbox: { root: "/srv/ws" } } });
// @ts-expect-error the allow-list is a list of host names
createBashOperations({ sandbox: { root: "/srv/ws", network: { allow: "registry.npmjs.org" } } });
