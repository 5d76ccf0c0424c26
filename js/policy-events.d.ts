/** A workspace policy: gitignore lines relative to the root. */
export interface Policy {
  /** Paths no tool reads, lists or searches. */
  denyRead?: string[];
  /** Paths no tool writes, creates, removes or renames. */
  denyWrite?: string[];
  /** The protected defaults (git hooks and config, `.envrc`, editor task files, …); `true` unless `false`. */
  protect?: boolean;
}

/** One refusal, or one connection decision, as `onPolicyEvent` receives it. */
export interface PolicyEvent {
  tool: "read" | "write" | "edit" | "ls" | "find" | "grep" | "bash";
  access: "read" | "write" | "connect";
  /** The path, in runtime form (read and write). */
  path?: string;
  /** The host asked for (connect). */
  host?: string;
  port?: number;
  /** The rule that decided, or null. */
  rule: string | null;
  /** `false` for a refusal; `true` only for an allowed connection. */
  allowed: boolean;
  /** Milliseconds since the epoch. */
  time: number;
  /** For bash: the command. */
  command?: string;
}

/** Over a remote connection: events the client did not take fast enough were dropped (docs/protocol.md). */
export interface PolicyEventsDropped {
  dropped: number;
  time: number;
}
