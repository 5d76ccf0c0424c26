// The extension's `--native-policy-log`: policy events appended to a file as JSON lines, bounded whoever
// sends them (a remote server, which may be hostile, or the local guard). The file is kept under a size
// cap by rotation (one previous file, `<log>.1`), and each writer (one per session, so per connection)
// takes events at a bounded rate; the events beyond it are counted and the count written as one line.
import { appendFileSync, renameSync, statSync } from "node:fs";

/** The log's size before it is rotated: the disk the log takes is at most twice this. */
export const POLICY_LOG_MAX_BYTES = 16 * 1024 * 1024;
/** Events a writer takes in a burst, and per second after it (a token bucket); the rest are counted. */
export const POLICY_LOG_BURST = 1000;
export const POLICY_LOG_PER_SECOND = 100;

/**
 * A writer of policy events to `file` (opened now: a log that cannot be written is a startup error, not
 * a silent loss of every event). Returns `{ onPolicyEvent, close }`: `close()` writes the count of the
 * events still left out, at the session's end. An event that cannot be written is lost, not the tool
 * call. `options` (tests): `maxBytes`, `burst`, `perSecond`, `now` (ms).
 */
export function createPolicyLog(file, options = {}) {
  const {
    maxBytes = POLICY_LOG_MAX_BYTES,
    burst = POLICY_LOG_BURST,
    perSecond = POLICY_LOG_PER_SECOND,
    now = Date.now,
  } = options;
  appendFileSync(file, "");
  const stat = statSync(file);
  // A pipe or a terminal (`/dev/stderr`) fills no disk, and cannot be moved aside.
  const capped = stat.isFile();
  let size = stat.size;
  let tokens = burst;
  let refilled = now();
  let dropped = 0;

  const append = (line) => {
    const bytes = Buffer.byteLength(line);
    if (capped && size > 0 && size + bytes > maxBytes) {
      renameSync(file, `${file}.1`);
      size = 0;
    }
    appendFileSync(file, line);
    size += bytes;
  };

  /** Writes the count of the events the rate left out, in the shape onPolicyEvent gives a server's drop. */
  const report = (t) => {
    if (dropped === 0) return;
    append(`${JSON.stringify({ dropped, time: t })}\n`);
    dropped = 0;
  };

  const onPolicyEvent = (event) => {
    const t = now();
    tokens = Math.min(burst, tokens + ((t - refilled) / 1000) * perSecond);
    refilled = t;
    if (tokens < 1) {
      dropped++;
      return;
    }
    tokens -= 1;
    try {
      report(t);
      append(`${JSON.stringify(event)}\n`);
    } catch {
      // The disk refused the line: the event is lost, the tool goes on.
    }
  };
  const close = () => {
    try {
      report(now());
    } catch {
      // As above: the count is lost, the session still ends.
    }
  };
  return { onPolicyEvent, close };
}
