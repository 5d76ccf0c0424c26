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
