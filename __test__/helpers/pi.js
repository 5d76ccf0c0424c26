// The pi version under test. CI runs the suite twice: Node 20 with @mariozechner/pi-coding-agent@0.73.1
// and Node 22 with @earendil-works/pi-coding-agent@1.6.0 (PI_NATIVE_OPS_PI names it; the package's own
// resolver in js/pi.js reads the same variable, so tests and package always agree).
const major = Number(process.versions.node.split(".")[0]);
export const piName =
  process.env.PI_NATIVE_OPS_PI ?? (major >= 22 ? "@earendil-works/pi-coding-agent" : "@mariozechner/pi-coding-agent");
process.env.PI_NATIVE_OPS_PI = piName;
export const pi = await import(piName);
export const isPi1 = piName.startsWith("@earendil-works/");

/**
 * Runs a pi tool's `execute`: `{ text, content, details, isError }` when it resolves (`text` joins the
 * text parts), `{ error }` (the thrown message) when it throws.
 */
export async function runTool(tool, params, { signal, onUpdate } = {}) {
  let result;
  try {
    result = await tool.execute(`call-${tool.name}`, params, signal, onUpdate);
  } catch (err) {
    return { error: err.message };
  }
  const text = result.content
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("");
  return { text, content: result.content, details: result.details, isError: result.isError };
}
