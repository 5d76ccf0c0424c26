// Windows: whether this is wine (scripts/test-windows.sh) rather than Windows itself. Wine 8 cannot make a
// symlink or junction: the suites' links are unix symlinks there (helpers/tree.js), which wine shows as the
// file or directory they lead to. Tests that need a Windows link itself skip under wine, with that reason.
import { existsSync } from "node:fs";
import path from "node:path";

export const windows = process.platform === "win32";
export const underWine =
  windows && existsSync(path.join(process.env.WINDIR ?? "C:\\windows", "system32", "winecfg.exe"));
