/** pi's `FindOperations`, answered in-process with fd 10.5 semantics (see `createBoundFs().find`). */
export interface BoundFindOperations {
  /** Whether the path exists; rejects for a path outside the workspace. */
  exists(path: string): Promise<boolean>;
  /**
   * Absolute runtime paths of the entries below `cwd` matching `pattern`, in path order, directories with a
   * trailing `/`. `ignore` globs prune whole subtrees; at most `limit` results (default: all).
   */
  glob(pattern: string, cwd: string, options?: FindOptions): Promise<string[]>;
}

export interface FindOptions {
  /** Globs relative to `cwd` whose matches are skipped with everything below them, e.g. `"**\/node_modules/**"`. */
  ignore?: string[];
  /** Maximum number of results; the first `limit` in path order are kept. */
  limit?: number;
}

/**
 * Finds entries below `cwd` (an absolute directory, also the bound: symlinks are never followed) matching
 * `pattern` with fd's glob semantics. Resolves to absolute paths in path order.
 */
export declare function glob(pattern: string, cwd: string, options?: FindOptions): Promise<string[]>;
