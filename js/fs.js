// boundFs: pi's Read/Write/Edit/Ls (and Find/Grep) Operations, every path resolved natively beneath
// one workspace root (see crates/core/src/root/ for how that stays race-free). This layer only validates
// arguments and maps runtime paths; all file work is native, and errors come Node-shaped from the
// binding (src/error.rs). access/mkdir/readdirSmall, and stat/exists when a few syscalls answer them,
// are synchronous natively: called inside async functions, their throws become rejections, as pi's async
// contract wants. stat/exists that need the component walk (symlinks to follow) run in the thread pool,
// and a run of synchronous ones lets the event loop turn every SYNC_SLICE_MS.
import { createReadStream as streamFromFd } from "node:fs";
import path from "node:path";
import { checkIndexOption, checkObject, checkOptional, checkPath, registerBoundFs } from "./args.js";
import { checkOnPolicyEvent, checkPolicy, registerPolicyEvents } from "./policy-events.js";
import { native } from "./native.js";
import { createFindOperations } from "./find.js";
import { createGrepOperations } from "./grep.js";
import { createIndexFace, emptyIndexStats } from "./search-index.js";
import { giveHelper } from "./server-binary.js";

// Node's file type bits of `mode` (S_IFMT and three of its values).
const S_IFMT = 0o170000;
const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;

/** What `ls.stat` resolves to; like Node's Stats, the type methods read `mode` (pi's ls calls one per entry). */
class BoundStats {
  constructor(mode, size, mtimeMs) {
    this.size = size;
    this.mtimeMs = mtimeMs;
    this.mode = mode;
  }
  isDirectory() {
    return (this.mode & S_IFMT) === S_IFDIR;
  }
  isFile() {
    return (this.mode & S_IFMT) === S_IFREG;
  }
  isSymbolicLink() {
    return (this.mode & S_IFMT) === S_IFLNK;
  }
}

const WINDOWS = process.platform === "win32";
// Chunks a stream reads at a time, as Node's createReadStream with our highWaterMark below.
const CHUNK = 64 * 1024;

/** Windows: the file's chunks from a native FileReader (up to its size at open time), closed at the end. */
async function* readerChunks(reader) {
  try {
    let left = reader.isFile && reader.size > 0 ? reader.size : Number.POSITIVE_INFINITY;
    while (left > 0) {
      const chunk = await reader.read(Math.min(CHUNK, left));
      if (chunk.length === 0) break;
      left -= chunk.length;
      yield chunk;
    }
  } finally {
    reader.close();
  }
}

// native.rootStat writes [mode, size, mtimeMs] here; one array serves every call, as the call is
// synchronous and read at once.
const statValues = new Float64Array(3);

// pi's ls awaits a stat per entry, and awaits of synchronous calls never leave the microtask queue: the
// event loop (timers, I/O, an abort) would wait for the whole listing. A run of synchronous calls is
// therefore cut after this many milliseconds: the next call waits for the loop to turn once
// (setImmediate; cheaper than a trip through the thread pool), then starts the next run.
const SYNC_SLICE_MS = 8;
// Synchronous calls between two looks at the clock.
const CALLS_PER_LOOK = 16;
// When the current run of synchronous calls began (performance.now()), or -1 when the loop has turned since.
let sliceStart = -1;
let callsSinceLook = 0;
const endSlice = () => {
  sliceStart = -1;
};
const NOT_NOW = 0;
const CHECKED = 1;
const TRUSTED = 2;
/** Resolves once the event loop has turned. */
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
/**
 * Whether the next quick call may run synchronously (NOT_NOW: after the loop turns), and whether it is the
 * first of its run (CHECKED: it checks the root against its path, as every call in the pool does) or a
 * later one (TRUSTED: the root as the first found it; crates/core/src/root/unix.rs, `Root::trusting`).
 */
function syncCall() {
  if (sliceStart < 0) {
    sliceStart = performance.now();
    callsSinceLook = 0;
    setImmediate(endSlice);
    return CHECKED;
  }
  if (++callsSinceLook < CALLS_PER_LOOK) return TRUSTED;
  callsSinceLook = 0;
  return performance.now() - sliceStart < SYNC_SLICE_MS ? TRUSTED : NOT_NOW;
}

/**
 * `fs.index` of a root made with `index` options: the native index's, or (where the core keeps none, and
 * says why) one that stays aside and lets every search walk, so the option is never an error.
 */
function indexFace(bound, unsupported) {
  if (unsupported !== null) {
    const aside = () => emptyIndexStats("aside", unsupported);
    return createIndexFace({ ready: async () => aside(), stats: async () => aside(), close: async () => {} });
  }
  return createIndexFace({
    ready: () => bound.indexReady(),
    stats: () => bound.indexStats(),
    close: () => bound.indexClose(),
  });
}

/**
 * Path-bounded Operations for pi's tools. `root` is the host directory; `runtimeRoot` (default: `root`)
 * is the absolute path the agent sees, e.g. `/workspace` inside a sandbox. `index` (Linux) keeps a warm
 * index of the workspace that find and grep read instead of walking it (same results); see `fs.index`.
 */
export function createBoundFs(root, options = {}) {
  if (typeof root !== "string" || root.length === 0) throw new TypeError("root must be a non-empty string");
  if (root.includes("\0")) throw new TypeError("root must not contain NUL bytes");
  checkObject(options);
  const hostRoot = path.resolve(root);
  const runtimeRoot = options.runtimeRoot === undefined ? hostRoot : checkPath(options.runtimeRoot, "runtimeRoot");
  const index = checkIndexOption(options.index);
  const policy = checkPolicy(options.policy) ?? {};
  const onPolicyEvent = checkOnPolicyEvent(options.onPolicyEvent);
  checkOptional(options.pinRoot, "boolean", "options.pinRoot");
  const unsupported = index === null ? null : native.indexUnsupported();
  // The helper makes the root's view (Linux), which answers stat and exists in one system call.
  giveHelper();
  const indexed = index !== null && unsupported === null;
  // The core compiles the policy (a bad rule is its error, naming the option and the rule).
  const bound = new native.BoundRoot(
    hostRoot,
    path.resolve(runtimeRoot),
    indexed ? index : undefined,
    policy,
    options.pinRoot ?? false,
  );
  const report = registerPolicyEvents(bound, onPolicyEvent);
  /**
   * `op` with its policy refusals reported as `tool`'s `access` of its path argument (the `at`th); as is
   * without a callback.
   */
  const reported = (tool, access, op, at = 0) =>
    onPolicyEvent === undefined
      ? op
      : async (...args) => {
          try {
            return await op(...args);
          } catch (err) {
            throw report(tool, access, err, args[at]);
          }
        };
  /** Which access refused edit's `access` ("rw"): what cannot be read is refused as a read. */
  const editAccess = async (p) => {
    try {
      return bound.access(checkPath(p), "rw");
    } catch (err) {
      let access = "write";
      if (Object.hasOwn(err, "rule")) {
        try {
          bound.access(p, "r");
        } catch (probe) {
          if (Object.hasOwn(probe, "rule")) access = "read";
        }
      }
      throw report("edit", access, err, p);
    }
  };

  const readFile = async (p) => bound.readFile(checkPath(p));
  const handle = bound.handle();
  // The await of the thread pool's answer is kept out of `stat`: an async function with an `await`
  // allocates its suspended state on every call, which the per-entry stat of pi's ls would pay.
  const statInPool = async (p) => {
    const [mode, size, mtimeMs] = await bound.stat(p);
    return new BoundStats(mode, size, mtimeMs);
  };
  const stat = async (p) => {
    checkPath(p);
    const call = syncCall();
    if (call === NOT_NOW) return nextTurn().then(() => stat(p));
    if (native.rootStat(handle, p, statValues, call === TRUSTED)) {
      return new BoundStats(statValues[0], statValues[1], statValues[2]);
    }
    return statInPool(p);
  };
  const exists = async (p) => {
    checkPath(p);
    const call = syncCall();
    if (call === NOT_NOW) return nextTurn().then(() => exists(p));
    return native.rootExists(handle, p, call === TRUSTED) ?? bound.exists(p);
  };
  const writeFile = async (p, content) => {
    checkPath(p);
    if (typeof content !== "string" && !Buffer.isBuffer(content)) {
      throw new TypeError(`content must be a string or Buffer, got ${typeof content}`);
    }
    return bound.writeFile(p, content);
  };

  /** Streams the file as pi's own reader does: a regular file up to its size at open time. */
  async function* createReadStream(p, _options) {
    let opened;
    try {
      if (WINDOWS) opened = await bound.openReader(checkPath(p));
      else opened = await bound.openRead(checkPath(p));
    } catch (err) {
      throw report("read", "read", err, p);
    }
    if (WINDOWS) {
      yield* readerChunks(opened);
      return;
    }
    const { fd, size, isFile } = opened;
    const end = isFile && size > 0 ? size - 1 : undefined;
    const stream = streamFromFd("", { fd, autoClose: true, highWaterMark: CHUNK, start: 0, end });
    try {
      yield* stream;
    } finally {
      stream.destroy();
    }
  }

  const fs = {
    root: hostRoot,
    runtimeRoot: path.resolve(runtimeRoot),
    // Each tool's operations report its own refusals (read and edit both read files).
    read: {
      readFile: reported("read", "read", readFile),
      access: reported("read", "read", async (p) => bound.access(checkPath(p), "r")),
      detectImageMimeType: reported("read", "read", async (p) => bound.detectImageMimeType(checkPath(p))),
      createReadStream,
    },
    write: {
      writeFile: reported("write", "write", writeFile),
      mkdir: reported("write", "write", async (dir) => bound.mkdir(checkPath(dir, "dir"))),
    },
    edit: {
      readFile: reported("edit", "read", readFile),
      writeFile: reported("edit", "write", writeFile),
      access: editAccess,
    },
    ls: {
      // The core's answer (`Root::exists_inside`): false when missing, the refusal when outside or denied.
      exists: reported("ls", "read", exists),
      stat: reported("ls", "read", stat),
      // A small directory is listed right away; a larger one in the thread pool.
      readdir: reported("ls", "read", async (p) => {
        const dir = checkPath(p);
        const joined = bound.readdirSmall(dir);
        if (joined === null) return bound.readdir(dir);
        // Each name is followed by a NUL (src/fs.rs, readdir_small).
        const names = joined.split("\0");
        names.pop();
        return names;
      }),
    },
  };
  registerBoundFs(fs, bound);
  const find = createFindOperations(bound, fs);
  fs.find = { exists: reported("find", "read", find.exists), glob: reported("find", "read", find.glob, 1) };
  const grep = createGrepOperations(bound, { ls: { stat }, read: { readFile } });
  fs.grep = {
    isDirectory: reported("grep", "read", grep.isDirectory),
    readFile: reported("grep", "read", grep.readFile),
  };
  if (index !== null) fs.index = indexFace(bound, unsupported);
  fs.view = () => bound.viewState();
  return fs;
}
