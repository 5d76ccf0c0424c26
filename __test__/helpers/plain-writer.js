// The control for the atomic-write test: Node's own (non-atomic) writeFile, killed the same way.
import { writeFile } from "node:fs/promises";

const [file, size] = process.argv.slice(2);
const content = "B".repeat(Number(size));
process.stdout.write("go\n");
await writeFile(file, content);
process.stdout.write("done\n");
