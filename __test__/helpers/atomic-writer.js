// Writes <size> bytes of 'B' over <file> through boundFs; the parent kills it mid-write.
import path from "node:path";
import { createBoundFs } from "pi-native-ops";

const [file, size] = process.argv.slice(2);
const fs = createBoundFs(path.dirname(file));
const content = "B".repeat(Number(size));
process.stdout.write("go\n");
await fs.write.writeFile(file, content);
process.stdout.write("done\n");
