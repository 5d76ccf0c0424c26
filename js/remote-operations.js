// The Operations of a remote connection: each local function's argument checks, then one call (or a
// stream) on the connection, and the answer converted back to what the local function returns.
import path from "node:path";
import { checkObject, checkPath, checkString } from "./args.js";
import { checkExecArguments, envEntries } from "./bash.js";
import { checkOptions } from "./find.js";
import { abortedError, createGrepOperations } from "./grep.js";
import { closedErrors, frameFields } from "./remote-connection.js";
import { emitRefusal } from "./policy-events.js";
import { createIndexFace, emptyIndexStats } from "./search-index.js";

/**
 * `fn` reporting its policy refusals to the connection's onPolicyEvent as `tool` (the pi tool whose
 * Operations it is) attempting `access` on its first argument, the path.
 */
function reporting(conn, tool, access, fn) {
  return async (p, ...rest) => {
    try {
      return await fn(p, ...rest);
    } catch (err) {
      emitRefusal(conn.onPolicyEvent, tool, access, p, err);
      throw err;
    }
  };
}

/** `exec` over the connection; env policy as {@link connect} documents. */
export function remoteBashOperations(conn, { shellPath, forwardEnv }) {
  return {
    exec: async (command, cwd, execOptions) => {
      const { onData, signal, timeout, env, timeoutMs } = checkExecArguments(command, cwd, execOptions);
      if (signal?.aborted) throw new Error("aborted");
      let sent = null;
      if (forwardEnv === true) sent = env === undefined ? null : envEntries(env);
      else if (typeof forwardEnv === "function") {
        const chosen = forwardEnv(env ?? process.env);
        if (chosen !== undefined && chosen !== null) sent = envEntries(checkObject(chosen, "forwardEnv's result"));
      }

      let consumerError;
      let timedOut = false;
      let timer;
      // The local exec's error, in its order: the consumer's, then the abort, then the timeout. A cancel
      // the server does not answer in time settles the call with it (the deadline is ours).
      const failure = () => consumerError ?? new Error(signal?.aborted ? "aborted" : `timeout:${timeout}`);
      const { id, promise } = conn.start(
        "exec",
        { command, cwd, env: sent, shell: shellPath ?? null },
        null,
        (chunk) => {
          if (consumerError === undefined) {
            try {
              onData(chunk);
            } catch (err) {
              consumerError = err;
              conn.cancel(id, failure);
            }
          }
          conn.credit(id, chunk.length);
        },
      );
      const onAbort = () => conn.cancel(id, failure);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          timedOut = true;
          conn.cancel(id, failure);
        }, timeoutMs);
        timer.unref?.();
      }
      try {
        const { header } = await promise;
        if (consumerError !== undefined) throw consumerError;
        if (signal?.aborted) throw new Error("aborted");
        if (timedOut) throw new Error(`timeout:${timeout}`);
        return { exitCode: typeof header.exitCode === "number" ? header.exitCode : null };
      } finally {
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      }
    },
  };
}

/**
 * A number option as the wire carries it (docs/protocol.md): JSON has no infinities or NaN, so those travel
 * as `String(n)`; absent is null. The server's core reads it as the binding reads the number itself.
 */
const wireNumber = (n) => (n === undefined || n === null ? null : Number.isFinite(n) ? n : String(n));

/** grep's search over the connection, with the local search's abort semantics. */
export function remoteSearch(conn) {
  return (request, signal) => {
    if (signal?.aborted) return Promise.reject(abortedError(0));
    // grep.js's request as it is (the core's `RawQuery`), its JS numbers in their wire form.
    const { id, promise } = conn.start("grep", {
      ...request,
      glob: request.glob ?? null,
      context: wireNumber(request.context),
      limit: wireNumber(request.limit),
      storeCap: request.storeCap ?? null,
    });
    // A server that does not answer the cancel in time: the search rejects on its own, as aborted.
    const onAbort = () => conn.cancel(id, () => abortedError(0));
    signal?.addEventListener("abort", onAbort, { once: true });
    return promise
      .catch((err) => {
        emitRefusal(conn.onPolicyEvent, "grep", "read", request.path, err);
        throw err;
      })
      .then(
        ({ header }) => {
          if (signal?.aborted) throw abortedError(header.filesSearched ?? 0);
          return header;
        },
        (err) => {
          if (signal?.aborted && !closedErrors.has(err)) throw abortedError(frameFields.get(err)?.filesSearched ?? 0);
          throw err;
        },
      )
      .finally(() => signal?.removeEventListener("abort", onAbort));
  };
}

/** The same object createBoundFs() returns, every operation a call to the server. */
export function remoteFs(conn) {
  const root = conn.server.root;
  const readFile = async (p) => (await conn.start("readFile", { path: checkPath(p) }).promise).payload;
  const writeFile = async (p, content) => {
    checkPath(p);
    if (typeof content !== "string" && !Buffer.isBuffer(content)) {
      throw new TypeError(`content must be a string or Buffer, got ${typeof content}`);
    }
    await conn.call("writeFile", { path: p }, typeof content === "string" ? Buffer.from(content, "utf8") : content);
  };
  const stat = async (p) => {
    const s = await conn.call("stat", { path: checkPath(p) });
    return {
      size: s.size,
      mtimeMs: s.mtimeMs,
      mode: s.mode,
      isDirectory: () => s.isDirectory,
      isFile: () => s.isFile,
      isSymbolicLink: () => s.isSymbolicLink,
    };
  };

  /**
   * Streams the file as the local reader does (a regular file up to its size at open). Each chunk is
   * credited when the consumer takes it, so at most the protocol's window waits here; leaving the loop
   * early cancels the server's read.
   */
  async function* createReadStream(p, _options) {
    checkPath(p);
    const ready = [];
    let wake = null;
    let abandoned = false;
    const { id, promise } = conn.start("readStream", { path: p }, null, (chunk) => {
      // After the consumer left, chunks still in flight are credited and dropped.
      if (abandoned) return conn.credit(id, chunk.length);
      ready.push(chunk);
      wake?.();
    });
    let settled = false;
    let failure = null;
    promise.then(
      () => {
        settled = true;
        wake?.();
      },
      (err) => {
        settled = true;
        failure = err;
        wake?.();
      },
    );
    try {
      for (;;) {
        if (ready.length > 0) {
          const chunk = ready.shift();
          conn.credit(id, chunk.length);
          yield chunk;
        } else if (settled) {
          if (failure) throw failure;
          return;
        } else {
          await new Promise((resolve) => {
            wake = resolve;
          });
          wake = null;
        }
      }
    } finally {
      if (!settled) {
        abandoned = true;
        for (const chunk of ready.splice(0)) conn.credit(id, chunk.length);
        conn.cancel(id);
      }
    }
  }

  /** createReadStream, reporting a refusal (which comes as the stream's error) as the read tool's. */
  async function* readStreamReporting(p, options) {
    try {
      yield* createReadStream(p, options);
    } catch (err) {
      emitRefusal(conn.onPolicyEvent, "read", "read", p, err);
      throw err;
    }
  }

  const access = (mode) => async (p) => {
    await conn.call("access", { path: checkPath(p), mode });
  };
  const mkdir = async (dir) => {
    await conn.call("mkdir", { path: checkPath(dir, "dir") });
  };
  const exists = async (p) => (await conn.call("exists", { path: checkPath(p) })).exists;
  const readdir = async (p) => (await conn.call("readdir", { path: checkPath(p) })).names;
  const findExists = async (p) => (await conn.call("findExists", { path: path.resolve(checkPath(p, "path")) })).exists;
  const detectImageMimeType = async (p) =>
    (await conn.call("detectImageMimeType", { path: checkPath(p) })).mime ?? null;
  const glob = async (cwd, pattern, options) => {
    checkString(pattern, "pattern");
    const dir = path.resolve(checkPath(cwd, "cwd"));
    const { ignore, limit } = checkOptions(options);
    const answer = await conn.call("glob", { pattern, cwd: dir, ignore, limit: wireNumber(limit) });
    return answer.paths;
  };
  /** edit's access ("rw"): a refusal is reported as a read when the path cannot be read either. */
  const editAccess = async (p) => {
    try {
      await access("rw")(p);
    } catch (err) {
      let kind = "write";
      if (
        typeof conn.onPolicyEvent === "function" &&
        err !== null &&
        typeof err === "object" &&
        Object.hasOwn(err, "rule")
      ) {
        try {
          await access("r")(p);
        } catch (probe) {
          if (probe !== null && typeof probe === "object" && Object.hasOwn(probe, "rule")) kind = "read";
        }
      }
      emitRefusal(conn.onPolicyEvent, "edit", kind, p, err);
      throw err;
    }
  };
  // Each tool's Operations report their refusals as that tool's (the same call serves several tools).
  const read = (tool, fn) => reporting(conn, tool, "read", fn);
  const write = (tool, fn) => reporting(conn, tool, "write", fn);
  const findGlob = read("find", glob);
  const fs = {
    root,
    runtimeRoot: root,
    read: {
      readFile: read("read", readFile),
      access: read("read", access("r")),
      detectImageMimeType: read("read", detectImageMimeType),
      createReadStream: readStreamReporting,
    },
    write: {
      writeFile: write("write", writeFile),
      mkdir: write("write", mkdir),
    },
    edit: {
      readFile: read("edit", readFile),
      writeFile: write("edit", writeFile),
      access: editAccess,
    },
    ls: {
      exists: read("ls", exists),
      stat: read("ls", stat),
      readdir: read("ls", readdir),
    },
    find: {
      exists: read("find", findExists),
      // The refusal names the directory searched.
      glob: (pattern, cwd, options) => findGlob(cwd, pattern, options),
    },
  };
  fs.grep = createGrepOperations(null, {
    ls: { stat: read("grep", stat) },
    read: { readFile: read("grep", readFile) },
  });
  return fs;
}

/**
 * `fs.index` of a connection made with `index` options: starts the server's index (one already running,
 * from `--index`, is kept as it is) without waiting for the answer, so connecting costs no round trip.
 * A server that cannot index (one older than the index) gives an index that stays aside.
 */
export function remoteIndex(conn, options) {
  const started = conn.call("indexStart", {
    maxWatches: options.maxWatches ?? null,
    maxFileBytes: options.maxFileBytes ?? null,
  });
  // Its failure is reported by ready/stats, whenever they are asked.
  started.catch(() => {});
  const call = async (op) => {
    try {
      await started;
    } catch (err) {
      if (closedErrors.has(err)) throw err;
      return emptyIndexStats("aside", `the server cannot index: ${err.message}`);
    }
    return conn.call(op, {});
  };
  return createIndexFace({
    ready: () => call("indexReady"),
    stats: () => call("indexStats"),
    close: async () => {
      try {
        await call("indexClose");
      } catch (err) {
        // A closed connection has no index left to close.
        if (!closedErrors.has(err)) throw err;
      }
    },
  });
}
