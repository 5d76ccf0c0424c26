// Swaps path components for symlinks to outside in a tight loop, until killed:
// - <root>/swap is always a symlink, atomically re-pointed between <root>/real and <outside>;
// - <root>/swapdir is a real directory, renamed away and replaced by a symlink to <outside>, and back.
import { renameSync, symlinkSync, unlinkSync, rmSync } from "node:fs";
import path from "node:path";

const [root, outside] = process.argv.slice(2);
const swap = path.join(root, "swap");
const swapdir = path.join(root, "swapdir");
const held = path.join(root, "swapdir.held");
let n = 0;
for (;;) {
  const tmp = path.join(root, `swap.tmp`);
  rmSync(tmp, { force: true });
  symlinkSync(n % 2 ? outside : "real", tmp);
  renameSync(tmp, swap);
  try {
    if (n % 2) {
      renameSync(swapdir, held);
      symlinkSync(outside, swapdir);
    } else {
      unlinkSync(swapdir);
      renameSync(held, swapdir);
    }
  } catch {
    // A reader's operation may race us into a state we did not expect; carry on swapping.
  }
  n++;
}
