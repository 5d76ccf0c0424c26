// Policy events (docs/policy.md, "Events"): the one event shape `onPolicyEvent` receives, its delivery, and the
// `policy`/`onPolicyEvent` options' type checks. Shared by every face; the events themselves are the
// core's (crates/core/src/policy.rs: `EventFields`, a file tool's `PolicyEvent::refusal`).
import { native } from "./native.js";

/** An event's keys, in the order `onPolicyEvent` sees them (absent ones are left out). */
const EVENT_KEYS = ["tool", "access", "path", "host", "port", "rule", "allowed", "time", "command"];

/** The keys a `policy` option may have. */
const POLICY_KEYS = new Set(["denyRead", "denyWrite", "protect"]);

/**
 * Calls `onPolicyEvent(event)`. A callback that throws, or returns a promise that rejects, is ignored:
 * it never stops a tool, a command or a connection, nor crashes the process.
 */
export function deliver(onPolicyEvent, event) {
  if (typeof onPolicyEvent !== "function") return;
  try {
    const result = onPolicyEvent(event);
    if (result !== null && typeof result === "object" && typeof result.then === "function") {
      result.then(undefined, () => {});
    }
  } catch {
    // The caller's callback failed: events are reports, the tool goes on.
  }
}

/** `fields` (an event as the core's faces send it) as the event `onPolicyEvent` receives: its keys, in order. */
export function eventOf(fields) {
  const event = {};
  for (const key of EVENT_KEYS) {
    if (fields[key] !== undefined) event[key] = fields[key];
  }
  return event;
}

/**
 * Reports a file tool's refusal: `error` is what the call threw, an event only when it is the policy's
 * refusal (the core's Protected error, which has an own `rule`). `path` is the path the tool was given.
 */
export function emitRefusal(onPolicyEvent, tool, access, path, error) {
  if (typeof onPolicyEvent !== "function") return;
  if (error === null || typeof error !== "object" || !Object.hasOwn(error, "rule")) return;
  const rule = typeof error.rule === "string" ? error.rule : null;
  deliver(onPolicyEvent, eventOf(native.policyRefusal(tool, access, path, rule)));
}

function checkRules(value, name) {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || !value.every((rule) => typeof rule === "string")) {
    throw new TypeError(`${name} must be an array of strings (gitignore lines relative to the root)`);
  }
  return [...value];
}

/**
 * Type-checks a `policy` option; returns a copy (`undefined` when absent). What a rule may be is the
 * core's to decide (a bad one fails with its `policy.denyRead: invalid rule …`).
 */
export function checkPolicy(value, name = "policy") {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new TypeError(`${name} must be an object { denyRead?, denyWrite?, protect? }`);
  }
  for (const key of Object.keys(value)) {
    // A misspelt key would silently protect nothing.
    if (!POLICY_KEYS.has(key))
      throw new TypeError(`${name}.${key} is not a policy option (denyRead, denyWrite, protect)`);
  }
  if (value.protect !== undefined && typeof value.protect !== "boolean") {
    throw new TypeError(`${name}.protect must be a boolean`);
  }
  return {
    denyRead: checkRules(value.denyRead, `${name}.denyRead`),
    denyWrite: checkRules(value.denyWrite, `${name}.denyWrite`),
    protect: value.protect,
  };
}

/** Type-checks an `onPolicyEvent` option. */
export function checkOnPolicyEvent(value, name = "onPolicyEvent") {
  if (value !== undefined && typeof value !== "function") throw new TypeError(`${name} must be a function`);
  return value;
}

/** Where each native root's refusals are reported (the `onPolicyEvent` of its createBoundFs). */
const reporterOf = new WeakMap();

/**
 * Builds the reporter of a native root: `report(tool, access, err, path)` calls `onPolicyEvent` with the event
 * of a policy refusal (an error with an own `rule`, set by src/error.rs) of `path` (as the tool gave it: runtime
 * form) and returns `err`. A callback that throws is ignored: reporting never changes what the tool does.
 */
export function registerPolicyEvents(root, onPolicyEvent) {
  const report = (tool, access, err, path) => {
    emitRefusal(onPolicyEvent, tool, access, path, err);
    return err;
  };
  reporterOf.set(root, report);
  return report;
}

/** The reporter of a native root (a no-op for one made elsewhere, e.g. by `glob()`). */
export function policyReporterOf(root) {
  return (root && reporterOf.get(root)) ?? ((_tool, _access, err) => err);
}
