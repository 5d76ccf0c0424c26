// The installed pi-coding-agent, found once: PI_NATIVE_OPS_PI names the package to use, otherwise
// the current name (@earendil-works, pi >= 1.0) is tried before the legacy one (@mariozechner).
// Only the tool factories need pi; the Operations objects work without it.
const CANDIDATES = process.env.PI_NATIVE_OPS_PI
  ? [process.env.PI_NATIVE_OPS_PI]
  : ["@earendil-works/pi-coding-agent", "@mariozechner/pi-coding-agent"];

const failures = [];
let found = null;
for (const name of CANDIDATES) {
  try {
    found = { name, module: await import(name) };
    break;
  } catch (err) {
    failures.push(`${name}: ${err.message.split("\n")[0]}`);
  }
}

/** The pi module and its package name, or throws saying why none could be loaded. */
export function requirePi() {
  if (found) return found;
  throw new Error(
    `pi-native-ops: this needs pi-coding-agent, and none could be loaded:\n  ${failures.join("\n  ")}\n` +
      `Install "@earendil-works/pi-coding-agent" (Node >= 22.19) or "@mariozechner/pi-coding-agent".`,
  );
}
