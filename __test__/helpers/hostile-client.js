// The client under test in a process of its own (hostile-server.js, `hostileChild`): connects over its
// stdio (`stdio`) or a WebSocket (`ws URL TOKEN`), reports `{ connected }` over IPC, does one action, and
// reports `{ result, after }`: the action's outcome and that of a later call (is the connection alive?).
import { connect, connectWebSocket } from "pi-native-ops";

const [kind, action, url, token] = process.argv.slice(2);
const connection =
  kind === "ws"
    ? await connectWebSocket(url, { token, graceMs: 2000 })
    : await connect({ readable: process.stdin, writable: process.stdout });
process.send({ connected: true });
const go = () => new Promise((resolve) => process.once("message", resolve));
const outcome = (promise) =>
  promise.then(
    (value) => ({ value }),
    (err) => ({ error: err.message }),
  );

let result;
if (action === "readdir") {
  result = await outcome(connection.fs.ls.readdir("/workspace").then((names) => names.length));
} else if (action === "exists") {
  result = await outcome(connection.fs.ls.exists("/workspace/a"));
} else if (action === "readStream") {
  // A consumer that takes one chunk, then waits for the test's word (the server meanwhile sends on).
  result = await outcome(
    (async () => {
      let taken = 0;
      for await (const chunk of connection.fs.read.createReadStream("/workspace/big")) {
        if (taken === 0) {
          process.send({ first: chunk.length });
          await go();
        }
        taken += chunk.length;
      }
      return taken;
    })(),
  );
}
const after = await outcome(connection.fs.ls.exists("/workspace/a"));
// It stays (the IPC channel holds it) until the test has read its memory and kills it.
process.send({ result, after });
