// Argument validation shared by every module: a wrong argument is the caller's bug, so it throws a
// TypeError naming the argument, before anything touches the file system or spawns. This module
// imports nothing of ours, so fs.js, find.js and grep.js all use it without importing each other.
import path from "node:path";

/** Validates a string argument without NUL bytes (which no system call can take). */
export function checkString(value, what) {
  if (typeof value !== "string")
    throw new TypeError(`${what} must be a string, got ${value === null ? "null" : typeof value}`);
  if (value.includes("\0")) throw new TypeError(`${what} must not contain NUL bytes: ${JSON.stringify(value)}`);
  return value;
}

/** Validates a path argument: an absolute string without NUL bytes. */
export function checkPath(p, what = "path") {
  checkString(p, what);
  if (!path.isAbsolute(p)) throw new TypeError(`${what} must be an absolute path, got ${JSON.stringify(p)}`);
  return p;
}

/** Validates an optional argument: absent (`undefined` or `null`) or of the `typeof` named. */
export function checkOptional(value, type, what) {
  if (value !== undefined && value !== null && typeof value !== type) {
    throw new TypeError(`${what} must be a ${type}, got ${typeof value}`);
  }
  return value;
}

/** Validates an optional number argument: absent (`undefined` or `null`) or a number that is not NaN. */
export function checkNumber(value, what) {
  checkOptional(value, "number", what);
  if (Number.isNaN(value)) throw new TypeError(`${what} must be a number, got NaN`);
  return value;
}

/** Validates an options argument: a non-null object. */
export function checkObject(value, what = "options") {
  if (value === null || typeof value !== "object") throw new TypeError(`${what} must be an object`);
  return value;
}

/** The native root behind each createBoundFs() object (for find, grep and tool wiring; not public API). */
const rootOf = new WeakMap();

/** Records the native root of a boundFs object, for {@link boundRootOf}. */
export function registerBoundFs(fs, root) {
  rootOf.set(fs, root);
  return fs;
}

/** Validates an `fs` argument: an object made by createBoundFs(); returns its native root. */
export function boundRootOf(fs) {
  const root = fs && rootOf.get(fs);
  if (!root) throw new TypeError("expected an object made by createBoundFs()");
  return root;
}

/** The options the `index` option may hold (crates/core/src/index's IndexOptions). */
const INDEX_KEYS = ["maxWatches", "maxFileBytes", "cache", "cacheMaxBytes"];

/** A count option of the index: absent, or an integer >= `min`. */
function checkIndexCount(value, what, min) {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || value < min) {
    const shown = typeof value === "number" ? String(value) : value === null ? "null" : typeof value;
    throw new TypeError(`${what} must be an integer >= ${min}, got ${shown}`);
  }
  return value;
}

/**
 * Validates the `index` option of createBoundFs(), createNativeTools() and connect(): `undefined` or
 * `false` (no index, returns null), `true` (the defaults) or `{ maxWatches?, maxFileBytes?, cache?,
 * cacheMaxBytes? }` (`cache`: `true` for the default cache directory, or an absolute directory). Returns
 * the options with only the given ones (the core's defaults fill the rest).
 */
export function checkIndexOption(value, what = "index", { cache: cacheAllowed = true } = {}) {
  if (value === undefined || value === false) return null;
  if (value === true) return {};
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    const shown = value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
    throw new TypeError(
      `${what} must be true, false or an object { maxWatches?, maxFileBytes?, cache?, cacheMaxBytes? }, got ${shown}`,
    );
  }
  for (const key of Object.keys(value)) {
    if (!INDEX_KEYS.includes(key)) {
      throw new TypeError(`${what}.${key} is not an index option (the options are ${INDEX_KEYS.join(", ")})`);
    }
  }
  const options = {};
  // A watch limit of 0 could index nothing; a file size of 0 leaves every non-empty file unindexed.
  const maxWatches = checkIndexCount(value.maxWatches, `${what}.maxWatches`, 1);
  const maxFileBytes = checkIndexCount(value.maxFileBytes, `${what}.maxFileBytes`, 0);
  if (maxWatches !== undefined) options.maxWatches = maxWatches;
  if (maxFileBytes !== undefined) options.maxFileBytes = maxFileBytes;
  const { cache } = value;
  if (cache !== undefined && cache !== false) {
    if (!cacheAllowed) throw new TypeError(`${what}.cache: a remote server's index is not kept between sessions`);
    if (cache !== true && !(typeof cache === "string" && path.isAbsolute(cache))) {
      throw new TypeError(`${what}.cache must be true, false or an absolute directory, got ${JSON.stringify(cache)}`);
    }
    options.cache = cache;
  }
  const cacheMaxBytes = checkIndexCount(value.cacheMaxBytes, `${what}.cacheMaxBytes`, 1);
  if (cacheMaxBytes !== undefined) options.cacheMaxBytes = cacheMaxBytes;
  return options;
}
