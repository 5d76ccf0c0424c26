/**
 * The workspace policy: gitignore lines relative to the workspace root (`.env` and `*.pem` at any depth,
 * `secrets/` a directory at any depth, `/build` only at the root, `!keep.pem` takes a path back), matched
 * case-sensitively on Linux. A path beneath a denied directory cannot be taken back (as in git).
 */
export interface Policy {
  /** Paths no tool reads, lists, finds or searches (refused when named; silently left out of listings). */
  denyRead?: string[];
  /** Paths no tool writes or creates. */
  denyWrite?: string[];
  /**
   * The protected defaults: paths that run code on the host later (`.git/hooks/`, `.git/config`, `.envrc`,
   * the editors' task files, a home directory's shell start files) refused to write. Default `true`.
   */
  protect?: boolean;
}

/** One refusal (or, from the sandbox's proxy, one connection decision). Absent keys are omitted. */
export interface PolicyEvent {
  tool: "read" | "write" | "edit" | "ls" | "find" | "grep" | "bash";
  access: "read" | "write" | "connect";
  /** The path as the tool gave it (runtime form). */
  path?: string;
  host?: string;
  port?: number;
  /** The rule that decided, or null. */
  rule: string | null;
  /** `false` for a refusal; `true` only for an allowed connection. */
  allowed: boolean;
  /** When, in milliseconds since the epoch. */
  time: number;
  /** For `bash`: the command. */
  command?: string;
}

/** Over a remote connection: events the client did not take fast enough were dropped (docs/protocol.md). */
export interface PolicyEventsDropped {
  dropped: number;
  time: number;
}
