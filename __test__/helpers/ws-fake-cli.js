// `node ws-fake-cli.js STDIO_SERVER --root DIR --listen HOST:PORT [...]`: the fake of --listen
// (ws-server.js) as a process, for the sandbox adapters' fakes while the built server has no --listen.
// Token from PI_NATIVE_OPS_TOKEN as the server takes it; prints `listening on HOST:PORT`; exits when its
// session ends.
import { startFake } from "./ws-server.js";

const [bin, ...argv] = process.argv.slice(2);
const value = (flag) => argv[argv.indexOf(flag) + 1];
const token = process.env.PI_NATIVE_OPS_TOKEN;
if (!token) {
  console.error("PI_NATIVE_OPS_TOKEN is not set");
  process.exit(2);
}
const [host, port] = value("--listen").split(":");
const fake = await startFake(bin, {
  root: value("--root"),
  token,
  host,
  port: Number(port),
  onEnd: () => setImmediate(() => process.exit(0)),
});
process.stdout.write(`listening on ${fake.address}\n`);
