// find: pi's FindOperations (`exists`, `glob`) answered in-process by the native walker (crates/core/src/find.rs),
// with fd 10.5 semantics as pi 1.6.0 drives fd, so pi's find tool never spawns or downloads fd.
import path from "node:path";
import { native } from "./native.js";
import { checkPath, checkString } from "./args.js";

/** An absolute path argument, normalized. */
const checkAbsolute = (p, what) => path.resolve(checkPath(p, what));

/**
 * Validates `{ ignore, limit }` (types; a limit below 0 is the caller's bug); `limit` is passed on as given,
 * `null` when absent: the core decides what it means (crates/core/src/find.rs, `Search::new`).
 */
export function checkOptions(options) {
  if (options === undefined || options === null) return { ignore: [], limit: null };
  if (typeof options !== "object") throw new TypeError(`options must be an object, got ${typeof options}`);
  const { ignore = [], limit } = options;
  if (!Array.isArray(ignore)) throw new TypeError("options.ignore must be an array of glob strings");
  for (const [i, g] of ignore.entries()) checkString(g, `options.ignore[${i}]`);
  if (limit !== undefined && (typeof limit !== "number" || Number.isNaN(limit) || limit < 0)) {
    throw new TypeError(`options.limit must be a number >= 0, got ${String(limit)}`);
  }
  return { ignore, limit: limit ?? null };
}

/** The native search's paths, each ended by a NUL, as an array. */
const splitPaths = (joined) => (joined === "" ? [] : joined.slice(0, -1).split("\0"));

function search(bound, pattern, cwd, options) {
  try {
    checkString(pattern, "pattern");
    cwd = checkAbsolute(cwd, "cwd");
    const { ignore, limit } = checkOptions(options);
    return native.findGlob(bound, pattern, cwd, ignore, limit).then(splitPaths);
  } catch (err) {
    return Promise.reject(err);
  }
}

/** pi's FindOperations over a boundFs root (used by createBoundFs as `fs.find`). */
export function createFindOperations(bound, _fs) {
  return {
    exists: (p) => {
      try {
        // As given when absolute, as every other operation takes it: a refusal names the path the caller
        // gave (on Windows, path.resolve would turn `/etc/passwd` into `Z:\etc\passwd`).
        const given = checkPath(p, "path");
        return native.findExists(bound, path.isAbsolute(given) ? given : path.resolve(given));
      } catch (err) {
        return Promise.reject(err);
      }
    },
    glob: (pattern, cwd, options) => search(bound, pattern, cwd, options),
  };
}

/**
 * The same search for callers outside pi: entries below `cwd` matching `pattern`, as absolute paths in
 * path order. `cwd` is the bound: symlinks leading out of it are never entered.
 */
export function glob(pattern, cwd, options) {
  let bound;
  try {
    const dir = checkAbsolute(cwd, "cwd");
    bound = new native.BoundRoot(dir, dir);
  } catch (err) {
    return Promise.reject(err);
  }
  return search(bound, pattern, cwd, options);
}
