/** Options of {@link createBashOperations}. */
export interface NativeBashOptions {
  /** Shell to run commands with; default as pi: /bin/bash, else bash on PATH, else sh. */
  shellPath?: string;
}

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
 * abort/timeout (on Linux including descendants that called setsid), and no command outliving Node.
 * Not supported on Windows (exec rejects).
 */
export declare function createBashOperations(options?: NativeBashOptions): NativeBashOperations;
