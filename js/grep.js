// In-process grep: pi's GrepOperations for boundFs, a drop-in pi grep tool whose execute searches
// natively (no rg binary), and the search as a plain async function. Output logic mirrors pi 1.6.0's
// grep tool (see docs/contracts.md, "grep"); the search and all byte accounting are native (crates/core/src/grep/).
import { homedir } from "node:os";
import path from "node:path";
import { native } from "./native.js";
import { piOf } from "./pi.js";
import { boundRootOf, checkNumber, checkObject, checkOptional } from "./args.js";
import { policyReporterOf } from "./policy-events.js";

const UNICODE_SPACES = /[\u00A0\u2000-\u200A\u202F\u205F\u3000]/g;

/** GrepOperations for createBoundFs: bounded `isDirectory` (throws when missing or outside) and `readFile`. */
export function createGrepOperations(_bound, fs) {
  return {
    isDirectory: async (p) => (await fs.ls.stat(p)).isDirectory(),
    readFile: async (p) => (await fs.read.readFile(p)).toString("utf-8"),
  };
}

/** pi's `resolveToCwd`: unicode spaces normalized, `@` prefix dropped, `~` expanded, resolved against cwd. */
function resolveToCwd(p, cwd) {
  let s = p.replace(UNICODE_SPACES, " ");
  if (s.startsWith("@")) s = s.slice(1);
  if (s === "~") s = homedir();
  else if (s.startsWith("~/")) s = path.join(homedir(), s.slice(2));
  return path.isAbsolute(s) ? path.normalize(s) : path.resolve(cwd, s);
}

/** Ends pi's ls tool once it has resolved its path (piResolve). */
const RESOLVED = Symbol("resolved");

/**
 * Where pi's own grep would search `p` from `cwd` (its `resolveToCwd`, which pi's package does not export:
 * Git Bash `/c/...` and `file://` forms on Windows, `~`, `@`, unicode spaces): asked of the same pi's ls
 * tool, which resolves its path as its grep does and hands it first to `exists`, stopped there.
 */
async function piResolve(pi, cwd, p, ctx) {
  let resolved;
  const stop = () => Promise.reject(RESOLVED);
  const operations = {
    exists: (given) => {
      resolved = given;
      return stop();
    },
    stat: stop,
    readdir: stop,
  };
  await pi
    .createLsToolDefinition(cwd, { operations })
    .execute("resolve", { path: p }, undefined, undefined, ctx)
    .catch(() => {});
  if (typeof resolved !== "string") throw new Error(`pi's ls tool did not resolve ${JSON.stringify(p)}`);
  return resolved;
}

/** The core's `Operation aborted`, with how many files the native search had begun to read when it stopped. */
export function abortedError(filesSearched) {
  return Object.assign(new Error(native.OPERATION_ABORTED), { filesSearched });
}

/**
 * Runs the native search. When `signal` fires the search is told to stop, and the promise rejects with
 * `Operation aborted` only once the native task has ended, so no search outlives its settled promise.
 */
function runSearch(bound, request, signal) {
  if (signal?.aborted) return Promise.reject(abortedError(0));
  const abort = new native.GrepAbort();
  const onAbort = () => abort.abort();
  signal?.addEventListener("abort", onAbort, { once: true });
  return native
    .grepSearch(bound, request, abort)
    .then(
      (out) => {
        if (signal?.aborted) throw abortedError(abort.filesSearched);
        return out;
      },
      (err) => {
        if (signal?.aborted) throw abortedError(abort.filesSearched);
        // Node-shaped natively (src/error.rs); a policy refusal is reported as the grep tool's.
        throw policyReporterOf(bound)("grep", "read", err, request.path);
      },
    )
    .finally(() => signal?.removeEventListener("abort", onAbort));
}

/**
 * Validates tool-style parameters (types only) and builds the native request for an absolute search path;
 * the core gives the options their defaults and bounds (crates/core/src/grep/mod.rs, `Query::new`) and
 * answers the limit it ran with.
 */
function request(params, searchPath, storeCap) {
  const { pattern, glob, ignoreCase, literal, context, limit } = params;
  if (typeof pattern !== "string") throw new TypeError(`pattern must be a string, got ${typeof pattern}`);
  checkOptional(glob, "string", "glob");
  checkNumber(context, "context");
  checkNumber(limit, "limit");
  if (pattern.includes("\0") || searchPath.includes("\0"))
    throw new TypeError("pattern and path must not contain NUL bytes");
  return {
    pattern,
    path: searchPath,
    displayName: path.basename(searchPath),
    ignoreCase: Boolean(ignoreCase),
    literal: Boolean(literal),
    glob: glob ?? undefined,
    context: context ?? undefined,
    limit: limit ?? undefined,
    storeCap,
  };
}

/**
 * Searches file contents like pi's grep tool (ripgrep semantics), without spawning anything.
 * Returns every output line up to the limit (matches and context) in stable order.
 */
export async function grep(options) {
  checkObject(options);
  const bound = options.fs ? boundRootOf(options.fs) : null;
  const search = (req, signal) => runSearch(bound, req, signal);
  return grepWith(search, options, options.fs?.runtimeRoot ?? process.cwd());
}

/**
 * grep()'s validation, path resolution and result around a search: `search(request, signal)` runs it
 * (natively here, over a connection in remote.js); `defaultCwd` resolves a relative path without `cwd`.
 */
export async function grepWith(search, options, defaultCwd) {
  checkObject(options);
  checkOptional(options.path, "string", "path");
  const cwd = options.cwd ?? defaultCwd;
  const searchPath = resolveToCwd(options.path || ".", cwd);
  const out = await search(request(options, searchPath, undefined), options.signal);
  return {
    matches: out.lines.map((l) => ({ path: l.path, lineNumber: l.lineNumber, text: l.text, isContext: !l.isMatch })),
    matchCount: out.matchCount,
    matchLimitReached: out.matchLimitReached ? out.limit : undefined,
    linesTruncated: out.linesTruncated,
  };
}

/** pi's grep ToolDefinition (metadata and renderers from the installed pi) with a native `execute`. */
export function createGrepToolDefinition(cwd, options = {}) {
  if (typeof cwd !== "string") throw new TypeError("cwd must be a string");
  const pi = piOf(options?.pi);
  const bound = options?.fs ? boundRootOf(options.fs) : null;
  return grepToolDefinitionWith(cwd, (req, signal) => runSearch(bound, req, signal), pi);
}

/**
 * The grep ToolDefinition around a search: `search(request, signal)` runs it (natively here, over a
 * connection in remote.js); the output the model reads is formatted here for both. `pi`: the pi module
 * (validated by piOf).
 */
export function grepToolDefinitionWith(cwd, search, pi) {
  const stock = pi.createGrepToolDefinition(cwd);
  return {
    ...stock,
    async execute(_toolCallId, params, signal, _onUpdate, ctx) {
      if (signal?.aborted) throw new Error(native.OPERATION_ABORTED);
      const searchPath = await piResolve(pi, cwd, params?.path, ctx);
      // The core's caps (crates/core/src/grep/text.rs): lines stored only under pi's byte cut.
      const { GREP_MAX_OUTPUT_BYTES: maxBytes, GREP_MAX_LINE_CHARS: maxLineChars } = native;
      const out = await search(request(params ?? {}, searchPath, maxBytes), signal);
      if (out.matchCount === 0) return { content: [{ type: "text", text: "No matches found" }], details: undefined };
      const rawOutput = out.lines
        .map((l) => (l.isMatch ? `${l.path}:${l.lineNumber}: ${l.text}` : `${l.path}-${l.lineNumber}- ${l.text}`))
        .join("\n");
      const truncation = pi.truncateHead(rawOutput, { maxLines: Number.MAX_SAFE_INTEGER });
      truncation.totalLines = out.outputLines;
      truncation.totalBytes = out.outputBytes;
      let output = truncation.content;
      const details = {};
      const notices = [];
      if (out.matchLimitReached) {
        notices.push(`${out.limit} matches limit reached. Use limit=${out.limit * 2} for more, or refine pattern`);
        details.matchLimitReached = out.limit;
      }
      if (truncation.truncated) {
        notices.push(`${pi.formatSize(maxBytes)} limit reached`);
        details.truncation = truncation;
      }
      if (out.linesTruncated) {
        notices.push(`Some lines truncated to ${maxLineChars} chars. Use read tool to see full lines`);
        details.linesTruncated = true;
      }
      if (notices.length > 0) output += `\n\n[${notices.join(". ")}]`;
      return {
        content: [{ type: "text", text: output }],
        details: Object.keys(details).length > 0 ? details : undefined,
      };
    },
  };
}

/** pi's grep AgentTool (as the installed pi's `createGrepTool` builds it) with a native `execute`. */
export function createGrepTool(cwd, options = {}) {
  const pi = piOf(options?.pi);
  return grepToolOf(cwd, createGrepToolDefinition(cwd, { ...options, pi }), pi);
}

/** pi's grep AgentTool whose `execute` is `definition`'s; `pi`: the pi module (validated by piOf). */
export function grepToolOf(cwd, definition, pi) {
  return {
    ...pi.createGrepTool(cwd),
    execute: (toolCallId, params, signal, onUpdate, ctx) =>
      definition.execute(toolCallId, params, signal, onUpdate, ctx),
  };
}
