// bench/fs.js's ls rows for the pi named by PI_NATIVE_OPS_PI on this Node, in their own process;
// prints the rows as JSON.
import { lsRows } from "./fs.js";

const { requirePi } = await import("../js/pi.js");
const { module: pi } = requirePi();
const native = await import("pi-native-ops");
console.log(JSON.stringify(await lsRows({ pi, native })));
