// The sandbox options and sandboxSupport() are typed: a wrong mode, a missing root or a sandbox on the
// bash tool options (where pi would ignore it) do not compile.
import { createBashOperations, createNativeTools, type SandboxSupport, sandboxSupport } from "pi-native-ops";

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
