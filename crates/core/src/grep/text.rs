//! How pi 1.6.0's grep tool turns ripgrep's lines into output: terminator
//! stripping, the 500-unit line cut, and the limit / context state machine.

use std::sync::Arc;

/// pi's `GREP_MAX_LINE_LENGTH`, in UTF-16 code units.
pub const MAX_LINE_UNITS: usize = 500;
/// pi's `DEFAULT_MAX_BYTES`: output lines are stored only while under it.
pub const MAX_OUTPUT_BYTES: u64 = 50 * 1024;
/// Bytes of a line enough to hold more than `MAX_LINE_UNITS` UTF-16 units
/// whatever the content (a unit never takes more than 3 bytes of UTF-8 or of
/// lossily decoded garbage), so longer lines are decoded from this prefix.
pub const LINE_PREFIX_BYTES: usize = 3 * (MAX_LINE_UNITS + 1) + 4;

/// A line as pi shows it: decoded lossily, terminator stripped, cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The text pi shows, cut to 500 UTF-16 units with `... [truncated]`.
    pub text: String,
    /// Whether the line was cut.
    pub truncated: bool,
}

/// `bytes` is the start of a line (at most `LINE_PREFIX_BYTES` are looked
/// at); `complete` says whether it is the whole line with its terminator.
pub fn show_line(bytes: &[u8], complete: bool) -> Shown {
    let mut line = bytes;
    // pi strips `/\r?\n?$/` from the decoded line: one `\n`, then one `\r`.
    if complete {
        line = line.strip_suffix(b"\n").unwrap_or(line);
        line = line.strip_suffix(b"\r").unwrap_or(line);
    }
    let long = !complete || line.len() > LINE_PREFIX_BYTES;
    let decoded = String::from_utf8_lossy(&line[..line.len().min(LINE_PREFIX_BYTES)]);
    let units: usize = decoded.chars().map(char::len_utf16).sum();
    if !long && units <= MAX_LINE_UNITS {
        return Shown {
            text: decoded.into_owned(),
            truncated: false,
        };
    }
    // pi's `sliceHead`: at most 500 units, never half a surrogate pair.
    let mut used = 0;
    let mut end = 0;
    for (i, c) in decoded.char_indices() {
        if used + c.len_utf16() > MAX_LINE_UNITS {
            break;
        }
        used += c.len_utf16();
        end = i + c.len_utf8();
    }
    Shown {
        text: format!("{}... [truncated]", &decoded[..end]),
        truncated: true,
    }
}

/// One output line, structured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutLine {
    /// The file's path as shown (relative to the searched directory).
    pub path: Arc<str>,
    /// The line's number in its file, from 1.
    pub line_number: u64,
    /// The line as pi shows it (see `show_line`).
    pub text: String,
    /// A matching line (`rel:N: text`), or context (`rel-N- text`).
    pub is_match: bool,
}

impl OutLine {
    /// UTF-8 length of pi's `rel:N: text` / `rel-N- text`.
    fn formatted_len(&self) -> u64 {
        let digits = self.line_number.to_string().len();
        (self.path.len() + 1 + digits + 2 + self.text.len()) as u64
    }
}

/// The result of a search, as pi's grep tool accounts for it.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Stored lines: all of them, or (with a byte cap) those pi keeps.
    pub lines: Vec<OutLine>,
    /// The match limit the search ran with (`Query`'s, defaults and clamps
    /// applied): the number pi's notice and `details` show.
    pub limit: u64,
    /// Matches counted, up to the limit.
    pub match_count: u64,
    /// Another match after the limit-th proved results were cut.
    pub match_limit_reached: bool,
    /// Whether any output line was cut at 500 units.
    pub lines_truncated: bool,
    /// Bytes of all output lines joined with `\n` (stored or not).
    pub output_bytes: u64,
    /// Output lines (stored or not).
    pub output_lines: u64,
}

/// pi 1.6.0's `rl.on("line")` logic, fed lines in output order.
pub struct Collector {
    limit: u64,
    context: u64,
    store_cap: Option<u64>,
    limit_hit: bool,
    trailing_end: u64,
    last_file: usize,
    /// Output bytes counting a newline after every line (pi's `outputBytes`).
    bytes_with_newlines: u64,
    done: bool,
    out: Outcome,
}

impl Collector {
    /// `limit` is at least 1 (`Query::new` sees to it).
    pub fn new(limit: u64, context: u64, store_cap: Option<u64>) -> Self {
        Collector {
            limit,
            context,
            store_cap,
            limit_hit: false,
            trailing_end: 0,
            last_file: usize::MAX,
            bytes_with_newlines: 0,
            done: false,
            out: Outcome {
                limit,
                ..Outcome::default()
            },
        }
    }

    /// True once nothing more can change the outcome.
    pub fn done(&self) -> bool {
        self.done
    }

    fn push(&mut self, file: usize, line: OutLine, shown_truncated: bool) {
        self.last_file = file;
        self.out.lines_truncated |= shown_truncated;
        let len = line.formatted_len();
        let keep = match self.store_cap {
            Some(cap) => self.bytes_with_newlines <= cap.saturating_add(1),
            None => true,
        };
        if keep {
            self.out.lines.push(line);
        }
        self.bytes_with_newlines += len + 1;
        self.out.output_lines += 1;
    }

    /// A line of file number `file` (files numbered in output order).
    pub fn line(
        &mut self,
        file: usize,
        path: &Arc<str>,
        number: u64,
        shown: &Shown,
        is_match: bool,
    ) {
        if self.done {
            return;
        }
        let make = |is_match| OutLine {
            path: path.clone(),
            line_number: number,
            text: shown.text.clone(),
            is_match,
        };
        if !self.limit_hit {
            self.push(file, make(is_match), shown.truncated);
            if !is_match {
                return;
            }
            self.out.match_count += 1;
            if self.out.match_count >= self.limit {
                self.limit_hit = true;
                self.trailing_end = number.saturating_add(self.context);
            }
            return;
        }
        let in_window = file == self.last_file && number <= self.trailing_end;
        // A match inside the last match's trailing context is shown as context.
        if in_window {
            self.push(file, make(false), shown.truncated);
        }
        if is_match {
            self.out.match_limit_reached = true;
        }
        if self.out.match_limit_reached && !(in_window && number < self.trailing_end) {
            self.done = true;
        }
    }

    /// The lines of file `file` that `FileHits` summed rather than kept
    /// (see there), after its kept lines: `true` when they were applied,
    /// `false` when the limit falls among them, so the caller must feed the
    /// file's lines after `rest.after` one by one (`line`).
    pub fn rest(&mut self, file: usize, path: &str, rest: &Rest) -> bool {
        if self.done {
            return true;
        }
        if !self.limit_hit && self.out.match_count + rest.matches < self.limit {
            // Every line is pushed, none stored: each begins past the cap.
            self.last_file = file;
            self.out.lines_truncated |= rest.truncated;
            let paths = rest.lines.saturating_mul(path.len() as u64);
            self.bytes_with_newlines += rest.bytes.saturating_add(paths);
            self.out.output_lines += rest.lines;
            self.out.match_count += rest.matches;
            return true;
        }
        if self.limit_hit && self.last_file != file {
            // Outside the last match's window only a match counts: the proof.
            if rest.matches > 0 {
                self.out.match_limit_reached = true;
                self.done = true;
            }
            return true;
        }
        false
    }

    pub fn finish(mut self) -> Outcome {
        self.out.output_bytes = self.bytes_with_newlines.saturating_sub(1);
        self.out
    }
}

/// A line of a file worth sending to the collector.
#[derive(Debug, Clone)]
pub struct Hit {
    pub number: u64,
    pub shown: Shown,
    pub is_match: bool,
}

/// The lines of one file past what pi may store, as sums.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rest {
    /// The last kept line's number: the summed lines come after it.
    pub after: u64,
    /// Lines summed.
    pub lines: u64,
    /// Their output bytes, a newline after each, less their paths.
    pub bytes: u64,
    /// Matches among them.
    pub matches: u64,
    /// Whether any was cut at 500 units.
    pub truncated: bool,
}

/// One file's lines as a search hands them on, in memory bounded by what pi
/// can show: lines are kept while the file's own output is within the store
/// cap (pi's 50 KB); every later line begins past the cap whatever files
/// come before it, so pi never stores it and only its sums (`Rest`) are kept.
#[derive(Debug, Default)]
pub struct FileHits {
    cap: Option<u64>,
    /// The file's own output so far, a newline after each line, counted
    /// without the path (a lower bound of what the collector counts, so a
    /// summed line is surely past the cap).
    own: u64,
    /// The lines kept, in order.
    pub hits: Vec<Hit>,
    /// The lines after them, summed.
    pub rest: Option<Rest>,
    /// Heap bytes the kept lines hold (for the walk's look-ahead bound).
    pub held: usize,
}

impl FileHits {
    /// Keeps lines while the file's output is within `cap` (`None`: every line).
    pub fn new(cap: Option<u64>) -> FileHits {
        FileHits {
            cap,
            ..FileHits::default()
        }
    }

    /// Adds the file's next line.
    pub fn push(&mut self, hit: Hit) {
        let digits = hit.number.checked_ilog10().unwrap_or(0) as u64 + 1;
        // `rel:N: text` and a newline, less the path.
        let len = 1 + digits + 2 + hit.shown.text.len() as u64 + 1;
        let past_cap = self.cap.is_some_and(|cap| self.own > cap.saturating_add(1));
        self.own = self.own.saturating_add(len);
        if !past_cap {
            self.held += std::mem::size_of::<Hit>() + hit.shown.text.capacity();
            self.hits.push(hit);
            return;
        }
        let after = self.hits.last().map_or(0, |h| h.number);
        let rest = self.rest.get_or_insert(Rest {
            after,
            ..Rest::default()
        });
        rest.lines += 1;
        rest.matches += u64::from(hit.is_match);
        rest.truncated |= hit.shown.truncated;
        rest.bytes = rest.bytes.saturating_add(len);
    }

    /// Whether there is nothing to hand on.
    pub fn is_empty(&self) -> bool {
        self.hits.is_empty() && self.rest.is_none()
    }
}

/// Decides, per file, which lines can still matter to pi's limit logic: every
/// line until the file's `limit`-th match and its trailing context, then only
/// the next match (the proof that results were cut).
pub struct Limiter {
    limit: u64,
    context: u64,
    matches: u64,
    cutoff: Option<u64>,
}

impl Limiter {
    pub fn new(limit: u64, context: u64) -> Self {
        Limiter {
            limit,
            context,
            matches: 0,
            cutoff: None,
        }
    }

    /// Whether to record the line, and whether the file is worth reading on.
    pub fn accept(&mut self, number: u64, is_match: bool) -> (bool, bool) {
        match self.cutoff {
            None => {
                if is_match {
                    self.matches += 1;
                    if self.matches >= self.limit {
                        self.cutoff = Some(number.saturating_add(self.context));
                    }
                }
                (true, true)
            }
            Some(cutoff) if number <= cutoff => (true, true),
            Some(_) if is_match => (true, false),
            Some(_) => (false, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_keeps_window_then_one_proof() {
        let mut l = Limiter::new(1, 1);
        assert_eq!(l.accept(1, true), (true, true));
        assert_eq!(l.accept(2, true), (true, true));
        assert_eq!(l.accept(3, false), (false, true));
        assert_eq!(l.accept(4, true), (true, false));
    }

    #[test]
    fn strips_only_the_terminator() {
        assert_eq!(show_line(b"a\rb\r\n", true).text, "a\rb");
        assert_eq!(show_line(b"ab\r", true).text, "ab");
        assert_eq!(show_line(b"ab\r\r\n", true).text, "ab\r");
        assert_eq!(show_line(b"\xffab\n", true).text, "\u{fffd}ab");
    }

    #[test]
    fn cuts_at_500_units_without_splitting_pairs() {
        let exact = "x".repeat(500);
        assert!(!show_line(exact.as_bytes(), true).truncated);
        let long = format!("{}\u{1F600}tail", "x".repeat(499));
        let shown = show_line(long.as_bytes(), true);
        assert_eq!(shown.text, format!("{}... [truncated]", "x".repeat(499)));
        let huge = "é".repeat(10_000);
        let shown = show_line(huge.as_bytes(), true);
        assert_eq!(shown.text, format!("{}... [truncated]", "é".repeat(500)));
        let partial = show_line(&huge.as_bytes()[..LINE_PREFIX_BYTES], false);
        assert_eq!(partial, shown);
    }

    fn feed(c: &mut Collector, file: usize, n: u64, m: bool) {
        let p: Arc<str> = Arc::from("f");
        let s = Shown {
            text: format!("l{n}"),
            truncated: false,
        };
        c.line(file, &p, n, &s, m);
    }

    #[test]
    fn limit_keeps_trailing_context_and_needs_proof() {
        let mut c = Collector::new(1, 2, None);
        feed(&mut c, 0, 1, true);
        feed(&mut c, 0, 2, true);
        assert!(!c.done());
        feed(&mut c, 0, 3, false);
        assert!(c.done());
        feed(&mut c, 0, 4, false);
        let out = c.finish();
        assert_eq!(out.lines.len(), 3);
        assert!(!out.lines[1].is_match);
        assert!(out.match_limit_reached);

        let mut c = Collector::new(1, 0, None);
        feed(&mut c, 0, 1, true);
        let out = c.finish();
        assert!(!out.match_limit_reached);
        assert_eq!(out.output_bytes, "f:1: l1".len() as u64);
    }
}
