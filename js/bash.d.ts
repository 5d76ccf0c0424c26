import type { Policy, PolicyEvent } from "./fs.js";

/** Options of {@link createBashOperations}. */
export interface NativeBashOptions {
  /** Shell to run commands with; default as pi: /bin/bash, else bash on PATH, else sh. */
  shellPath?: string;
  /**
   * Run every command in a sandbox (Linux): the workspace `root` at `runtimeRoot`, no network, a clean
   * environment (the `env` pi passes on each call is not given to the shell). exec rejects, never runs
   * unsandboxed, when this machine offers no sandbox: check with {@link sandboxSupport}. Its paths are
   * resolved once, by createBashOperations, which throws `ESANDBOX` for one it cannot use (missing, or
   * reached through a symlink where the sandbox's commands can write); exec rejects with `ESANDBOX` once one
   * of them no longer names what it did (removed, replaced, moved or swapped for a symlink).
   */
  sandbox?: SandboxOptions;
}

/** How a command is sandboxed: `"auto"` picks namespaces when available, else Landlock. */
export type SandboxMode = "auto" | "namespaces" | "landlock";

/** The `sandbox` option of {@link createBashOperations}. */
export interface SandboxOptions {
  /** Host directory of the workspace: an existing directory (relative to the process's cwd if relative). */
  root: string;
  /**
   * Absolute path the shell sees `root` at; exec's `cwd` is in this form (e.g. `/workspace/src`).
   * Default `/workspace`. Landlock mode cannot remap paths: there it must equal `root`.
   */
  runtimeRoot?: string;
  /**
   * Share the host's network. Default `false`: nothing of the host's network, its loopback included.
   * `{ allow }` (namespaces mode; Landlock mode throws `ESANDBOX`): no network but through a proxy this
   * package runs, which lets through only the hosts listed (see {@link SandboxNetworkAllow}).
   */
  network?: boolean | SandboxNetworkAllow;
  /**
   * Extra host paths visible read-only, at the same path. One inside the workspace or a `readWrite` path
   * stays read-only there too (namespaces mode); Landlock mode cannot enforce that and throws `ESANDBOX`.
   */
  readOnly?: string[];
  /** Extra host paths visible read-write, at the same path. */
  readWrite?: string[];
  /** Variables added to the sandbox's clean environment (HOME, PATH, TMPDIR, LANG, TERM). */
  env?: Record<string, string>;
  /** Default `"auto"`. */
  mode?: SandboxMode;
  /** Most processes the command's tree may have at once (a fork bomb stops there). Default 512. */
  maxProcesses?: number;
  /**
   * Namespaces mode: bytes each of the command's private tmpfs mounts, `/tmp` and `/dev/shm`, may hold
   * (a write past it fails with ENOSPC). Default: the machine's RAM / 8, at most 2 GiB. Landlock mode's
   * temp directory is on the host's `/tmp` and not bounded by it.
   */
  tmpSize?: number;
  /**
   * The workspace policy the shell is held to, in both modes: `denyRead` paths cannot be opened (nor a
   * directory all of whose entries are denied listed), `denyWrite` paths and the protected defaults
   * (`.git/hooks/`, `.git/config`, `.envrc`, …; `protect: false` drops them) cannot be created,
   * written, truncated, removed, renamed, linked or replaced, nor can a directory a rule names be
   * renamed. Gitignore lines relative to `root`. Absent: the protected defaults. A rule that does not
   * parse throws here, and so does (`ESANDBOX`) a policy that restricts anything where seccomp user
   * notification is missing (`sandboxSupport().userNotification`). Refusals fail with `EACCES` in the
   * command. Unsandboxed bash is not confined by the policy.
   */
  policy?: Policy;
  /**
   * Called with each refusal of the policy in a command:
   * `{ tool: "bash", access: "read" | "write", path, rule, allowed: false, time, command }` (`path` in the
   * runtime form), and each connection the allow-list proxy allowed or refused (`access: "connect"`).
   * Called on Node's thread after the fact; an exception it throws is caught and ignored.
   */
  onPolicyEvent?: (event: PolicyEvent) => void;
}

/**
 * The sandbox's network allow-list: its commands reach the hosts listed, and nothing else, through an
 * HTTP proxy on Node's side (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and their lowercase forms point at
 * it; plain `http://` requests and `CONNECT` tunnels). Names are resolved by the proxy, not in the sandbox.
 */
export interface SandboxNetworkAllow {
  /**
   * `registry.npmjs.org` (exactly that name), `*.github.com` (its subdomains, not `github.com` itself),
   * or an IP address (allowed only when listed literally: `localhost` does not allow `127.0.0.1`).
   */
  allow: string[];
  /**
   * Headers the proxy adds to plain `http://` requests to a host (same patterns as `allow`), replacing
   * any of the same name: `{ "npm.internal": { Authorization: "Bearer …" } }`. HTTPS goes through a
   * `CONNECT` tunnel whose TLS the proxy cannot change: headers never apply to it.
   */
  headers?: Record<string, Record<string, string>>;
}

/** What this machine offers for `createBashOperations({ sandbox })`. */
export interface SandboxSupport {
  /** `process.platform`'s value: only "linux" has a sandbox. */
  platform: string;
  /** Kernel release (uname), e.g. "6.8.0-45-generic"; null where unknown. */
  kernel: string | null;
  /** Namespaces mode works here (user, mount and PID namespaces and a /proc mount, probed). */
  namespaces: boolean;
  /** Why namespaces mode does not work, else null. */
  namespacesError: string | null;
  /** The kernel's Landlock ABI version; 0 = none. */
  landlockAbi: number;
  /** Why Landlock mode does not work, else null. */
  landlockError: string | null;
  /** seccomp filters can be installed. */
  seccomp: boolean;
  /** seccomp user notification works here (what guards metadata in Landlock mode and locks in both modes). */
  userNotification: boolean;
  /** The mode `"auto"` picks; null = no sandbox possible here (exec rejects). */
  auto: "namespaces" | "landlock" | null;
  /** What each mode confines on this machine; null where the mode is unavailable. */
  enforces: { namespaces: SandboxGuarantees | null; landlock: SandboxGuarantees | null };
}

/**
 * What one sandbox mode confines on this machine: `false` where this kernel lacks what a guarantee
 * needs, so an agent can refuse to start without one it relies on.
 */
export interface SandboxGuarantees {
  /** Files are read, written, created and removed only where allowed. */
  files: boolean;
  /** Truncating a file outside the writable paths is refused (Landlock ABI 3). */
  truncate: boolean;
  /** `ioctl` on devices other than the allowed few is refused (Landlock ABI 5). */
  deviceIoctl: boolean;
  /** No socket reaches the host's network unless `network` is on; never AF_VSOCK or another family off the allow-list. */
  network: boolean;
  /** Signals reach only the sandbox's own processes (namespaces: a PID namespace; Landlock: signal scoping, ABI 6). */
  signals: boolean;
  /** Abstract Unix sockets outside the sandbox cannot be reached (a network namespace; Landlock ABI 6). */
  abstractUnixSockets: boolean;
  /** Other processes' limits, priorities, CPU placement and I/O class, and the host's System V IPC, are out of reach. */
  otherProcesses: boolean;
  /** No setuid or setgid bit is ever set. */
  setIdBits: boolean;
  /** Everything a command started ends when it does (background jobs included). */
  processLifetime: boolean;
  /** Modes, owners, times and xattrs change only inside the writable paths (Landlock: seccomp user notification). */
  metadata: boolean;
  /** No lock (flock, fcntl, OFD) is taken on a file outside the writable paths (seccomp user notification). */
  locks: boolean;
}

/** What this machine offers for sandboxed bash (for an agent's startup check). */
export declare function sandboxSupport(): SandboxSupport;

/** Structurally identical to pi's `BashOperations`; pass it as `createBashTool(cwd, { operations })`. */
export interface NativeBashOperations {
  exec(
    command: string,
    cwd: string,
    options: {
      onData: (data: Buffer) => void;
      signal?: AbortSignal;
      /** Seconds. */
      timeout?: number;
      /** The whole environment of the command; default: this process's environment. */
      env?: NodeJS.ProcessEnv;
    },
  ): Promise<{ exitCode: number | null }>;
}

/**
 * BashOperations implemented natively: streamed output with backpressure, whole-tree kill on
 * abort/timeout (on Linux including descendants that called setsid; on Windows every process of the
 * command's Job object), and no command outliving Node. On Windows the shell is found as pi finds it
 * (`shellPath`, then Git Bash under `%ProgramFiles%` and `%ProgramFiles(x86)%`, then `bash.exe` on
 * `PATH`); the sandbox is Linux-only (a sandboxed exec rejects with `ESANDBOX` elsewhere).
 */
export declare function createBashOperations(options?: NativeBashOptions): NativeBashOperations;

/**
 * pi 1.6's `PowerShellOperations` implemented natively, for `createPowerShellTool(cwd, { operations })`:
 * PowerShell found as pi's `getPowerShellConfig` finds it (`pwsh.exe` on `PATH`, PowerShell 7 under
 * `%ProgramFiles%`, `powershell.exe` on `PATH`, Windows PowerShell under `%SystemRoot%`), the command
 * wrapped as pi wraps it (UTF-8 output; Windows PowerShell's exit-code suffix), with the same streaming
 * and whole-tree kill as {@link createBashOperations}. Windows only: elsewhere exec rejects with pi's
 * "The powershell tool is only available on Windows.".
 */
export declare function createPowerShellOperations(options?: Record<string, never>): NativeBashOperations;
