// The remote face over the transports agents use. Run it here with a local child process:
//   node examples/remote.mjs child [DIR]
// or against a machine you have: `ssh HOST` (the server on HOST's PATH) or `docker CONTAINER` (the server
// copied in first: docker cp "$(node -p 'require("pi-native-ops").serverBinaryPath()')" CONTAINER:/usr/local/bin/pi-native-ops-server).
//   node examples/remote.mjs ssh HOST [DIR]
//   node examples/remote.mjs docker CONTAINER [DIR]
import { spawn } from "node:child_process";
import { connect, createRemoteTools, serverBinaryPath } from "pi-native-ops";

const [how = "child", target, dirArg] = process.argv.slice(2);
const dir = (how === "child" ? target : dirArg) ?? (how === "child" ? process.cwd() : "/workspace");
const server = ["pi-native-ops-server", "--root", dir];
const commands = {
  child: [serverBinaryPath(), server.slice(1)],
  ssh: ["ssh", ["-T", target, ...server]],
  docker: ["docker", ["exec", "-i", target, ...server]],
};
if (!commands[how] || (how !== "child" && !target)) {
  console.error("usage: node examples/remote.mjs child [DIR] | ssh HOST [DIR] | docker CONTAINER [DIR]");
  process.exit(2);
}
const [file, args] = commands[how];
// stderr is the server's log; stdin and stdout carry the protocol.
const child = spawn(file, args, { stdio: ["pipe", "pipe", "inherit"] });
const connection = await connect(child);
console.log(
  `connected: server ${connection.server.version}, protocol ${connection.server.protocol}, root ${connection.server.root}`,
);

const tools = createRemoteTools(connection.server.root, { connection });
for (const [tool, params] of [
  ["ls", {}],
  ["find", { pattern: "*.md", limit: 5 }],
  ["grep", { pattern: "TODO|FIXME", limit: 3 }],
  ["bash", { command: "uname -sr && pwd" }],
]) {
  try {
    const result = await tools[tool].execute(`example-${tool}`, params);
    console.log(`--- ${tool} ${JSON.stringify(params)}\n${result.content[0].text}`);
  } catch (err) {
    console.log(`--- ${tool} ${JSON.stringify(params)}\nerror: ${err.message}`);
  }
}
await connection.close();
