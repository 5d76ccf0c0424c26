// A hostile pi-native-ops-server for the policy log's bounds (remote-hostile-log.test.js): it greets, answers the `policy`
// call after N policy events (any other call with an empty `ok`), then sends events as fast as its
// stdout takes them, until its input ends. Run as a `--native-remote` command: `node event-flood-server.js N`.
import { frame, frameReader } from "./fake-server.js";

const out = process.stdout;
const send = (header) => out.write(frame(header));
const EVENT = { t: "event", tool: "bash", access: "read", path: "/workspace/.env", rule: ".env", allowed: false };

/** Events sent before the `policy` call's answer (argv): connect() delivers them all, however short the session. */
const EVENTS_FIRST = Number(process.argv[2]);

async function flood(count) {
  for (let i = 0; i < count; i++) {
    if (!send({ ...EVENT, time: Date.now(), command: "cat .env" })) {
      await new Promise((resolve) => out.once("drain", resolve));
    }
  }
}

send({ t: "hello", protocol: 1, server: "0.0.0-flood", root: "/workspace", platform: "linux-x64" });
let flooding = false;
process.stdin.on(
  "data",
  frameReader((header) => {
    if (header.t !== "call") return;
    if (header.op !== "policy" || flooding) return send({ t: "ok", id: header.id });
    flooding = true;
    flood(EVENTS_FIRST).then(() => {
      send({ t: "ok", id: header.id, pinned: null });
      return flood(Number.POSITIVE_INFINITY);
    });
  }),
);
process.stdin.on("end", () => process.exit(0));
out.on("error", () => process.exit(0));
