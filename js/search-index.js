// `fs.index`: the face of the warm search index (crates/core/src/index/), one shape over the napi binding
// (fs.js) and over a remote connection (remote.js). The index only changes which files find and grep read,
// never what they return, so everything here is observation and lifecycle.

/** The stats both faces give: every field present, `null` where there is nothing to say. */
export function indexStatsOf(raw) {
  return {
    state: raw.state,
    reason: raw.reason ?? null,
    files: raw.files,
    directories: raw.directories,
    bytesIndexed: raw.bytesIndexed,
    memoryBytes: raw.memoryBytes,
    buildMs: raw.buildMs,
    lastRefresh: raw.lastRefresh ?? null,
    dirtyFiles: raw.dirtyFiles,
    unfilteredFiles: raw.unfilteredFiles ?? 0,
    watches: raw.watches,
    restoredFiles: raw.restoredFiles ?? 0,
    cache: raw.cache ?? null,
  };
}

/** Stats of an index that holds nothing: `state` with `reason`. */
export function emptyIndexStats(state, reason) {
  return indexStatsOf({
    state,
    reason,
    files: 0,
    directories: 0,
    bytesIndexed: 0,
    memoryBytes: 0,
    buildMs: 0,
    dirtyFiles: 0,
    unfilteredFiles: 0,
    watches: 0,
  });
}

/**
 * `fs.index` over `ops`: `ready()` (raw stats once the first build ended, or the index stepped aside or
 * closed), `stats()` (raw stats now) and `close()`. `ready` is asked for when first read, so an index nobody
 * waits for holds no thread; it never rejects, since an unawaited rejection would end the Node process: a
 * failure (a remote connection gone) resolves as state "closed" with the failure's message as the reason.
 */
export function createIndexFace(ops) {
  let ready = null;
  return Object.freeze({
    get ready() {
      ready ??= (async () => {
        try {
          return indexStatsOf(await ops.ready());
        } catch (err) {
          return emptyIndexStats("closed", String(err?.message ?? err));
        }
      })();
      return ready;
    },
    stats: async () => indexStatsOf(await ops.stats()),
    close: async () => {
      await ops.close();
    },
  });
}
