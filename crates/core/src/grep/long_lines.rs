//! Searching files with lines too long to buffer, in constant memory.
//!
//! ripgrep holds each line in memory (a 200 MiB single-line file costs
//! 200 MiB). Here a line is kept whole only up to `FULL_LINE`; beyond that
//! only its first bytes are kept (all pi shows is the first 500 units) and
//! the match is decided by a lazy DFA fed the line as it streams by, so memory
//! is bounded by the DFA cache whatever the line length. Context is kept as
//! the same short prefixes.
//!
//! Feeding a DFA byte by byte runs at about 100 MB/s. When every match of the
//! regex must begin with one of a few literals (regex-automata extracts them),
//! the DFA is fed only from where one occurs: while it sits in a start state
//! (no match under way), nothing can match before the next occurrence, which
//! a memchr/memmem/Teddy prefilter finds at several GB/s, as ripgrep does for
//! ordinary lines.

use std::collections::VecDeque;
use std::io::{self, Read};

use encoding_rs_io::DecodeReaderBytesBuilder;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::hybrid::LazyStateID;
use regex_automata::util::prefilter::Prefilter;
use regex_automata::util::start;
use regex_automata::util::syntax;
use regex_automata::{Anchored, MatchKind, Span};

use super::text::{show_line, Hit, Limiter, Shown, LINE_PREFIX_BYTES};

/// Lines up to this length are kept whole and matched by the regular matcher.
const FULL_LINE: usize = 1 << 20;
const CHUNK: usize = 64 * 1024;

/// Whether a regex matches somewhere in a line given as a stream of bytes.
pub struct StreamMatcher {
    dfa: DFA,
    /// Finds where a match may begin, when every match begins with one of a
    /// known set of literals; `None` feeds the DFA every byte.
    prefilter: Option<Prefilter>,
}

/// Escapes regex metacharacters (for `literal`).
fn escape(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    for c in pattern.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl StreamMatcher {
    /// Compiles `pattern` as the searcher's matcher does (`ignore_case`: rg
    /// `-i`; `literal`: rg `-F`).
    pub fn new(pattern: &str, ignore_case: bool, literal: bool) -> Result<Self, String> {
        let pattern = if literal {
            escape(pattern)
        } else {
            pattern.to_string()
        };
        let syntax = syntax::Config::new()
            .case_insensitive(ignore_case)
            .multi_line(true)
            .unicode(true)
            .utf8(false);
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .minimum_cache_clear_count(None)
                    .unicode_word_boundary(true)
                    // Tags start states, so `feed` sees when it may skip.
                    .specialize_start_states(true),
            )
            .syntax(syntax)
            .build(&pattern)
            .map_err(|e| e.to_string())?;
        // The literals every match begins with (none for a pattern that can
        // begin anywhere, or with too many alternatives to be worth it).
        let prefilter = syntax::parse_with(&pattern, &syntax)
            .ok()
            .and_then(|hir| Prefilter::from_hir_prefix(MatchKind::LeftmostFirst, &hir));
        Ok(StreamMatcher { dfa, prefilter })
    }
}

/// One line's streaming match state.
struct LineScan<'a> {
    dfa: &'a DFA,
    prefilter: Option<&'a Prefilter>,
    cache: &'a mut Cache,
    state: Option<LazyStateID>,
    matched: bool,
}

impl LineScan<'_> {
    fn start(&mut self) {
        self.restart(b'\n');
        self.matched = false;
    }

    /// Puts the DFA in its start state after the byte `behind`.
    fn restart(&mut self, behind: u8) {
        let config = start::Config::new()
            .anchored(Anchored::No)
            .look_behind(Some(behind));
        self.state = self.dfa.start_state(self.cache, &config).ok();
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mut at = 0;
        while let Some(&b) = bytes.get(at) {
            let Some(sid) = self.state else { return };
            if self.matched {
                return;
            }
            if let (true, Some(pre)) = (sid.is_start(), self.prefilter) {
                // No match is under way, and none can begin before the next
                // literal. One cut by the end of `bytes` is fed to the DFA,
                // which carries it over to the next call.
                let next = match pre.find(bytes, Span::from(at..bytes.len())) {
                    Some(found) => found.start,
                    None => bytes
                        .len()
                        .saturating_sub(pre.max_needle_len().saturating_sub(1)),
                };
                if next > at {
                    at = next;
                    self.restart(bytes[at - 1]);
                    continue;
                }
            }
            at += 1;
            // Matches are reported one byte late, on the state after the match.
            match self.dfa.next_state(self.cache, sid, b) {
                Ok(next) if next.is_match() => self.matched = true,
                // Dead: no match can start any more; quit: a Unicode word
                // boundary beyond ASCII, which a DFA cannot decide.
                Ok(next) if next.is_dead() || next.is_quit() => self.state = None,
                Ok(next) => self.state = Some(next),
                Err(_) => self.state = None,
            }
        }
    }

    fn finish(&mut self) -> bool {
        if !self.matched {
            if let Some(sid) = self.state {
                self.matched =
                    matches!(self.dfa.next_eoi_state(self.cache, sid), Ok(s) if s.is_match());
            }
        }
        self.matched
    }
}

/// Emits lines with rg's context merging, through the per-file limiter. Lines
/// waiting as context before a match are kept as pi shows them (at most 500
/// units each), never whole: `context` lines of up to `FULL_LINE` bytes each
/// would otherwise be held.
struct Emitter<'a> {
    context: u64,
    before: VecDeque<(u64, Shown)>,
    after_left: u64,
    limiter: Limiter,
    on_hit: &'a mut dyn FnMut(Hit) -> bool,
}

impl Emitter<'_> {
    fn emit(&mut self, number: u64, shown: Shown, is_match: bool) -> bool {
        let (record, go_on) = self.limiter.accept(number, is_match);
        if record {
            let hit = Hit {
                number,
                shown,
                is_match,
            };
            return (self.on_hit)(hit) && go_on;
        }
        go_on
    }

    /// A finished line; false once the file needs no more reading.
    fn line(&mut self, number: u64, prefix: &[u8], complete: bool, is_match: bool) -> bool {
        if is_match {
            while let Some((n, shown)) = self.before.pop_front() {
                if !self.emit(n, shown, false) {
                    return false;
                }
            }
            self.after_left = self.context;
            return self.emit(number, show_line(prefix, complete), true);
        }
        if self.after_left > 0 {
            self.after_left -= 1;
            return self.emit(number, show_line(prefix, complete), false);
        }
        if self.context > 0 {
            if self.before.len() as u64 >= self.context {
                self.before.pop_front();
            }
            self.before.push_back((number, show_line(prefix, complete)));
        }
        true
    }
}

/// Searches `reader` (a whole file) line by line in bounded memory: lines up
/// to `FULL_LINE` are decided by `short` (the searcher's matcher), longer
/// ones by `stream`; `limit` and `context` as the searcher's. Each line pi
/// may show goes to `on_hit`, which says whether to go on.
pub fn search(
    stream: &StreamMatcher,
    short: &dyn Fn(&[u8]) -> bool,
    (limit, context): (u64, u64),
    reader: impl Read,
    walked: bool,
    halted: &dyn Fn() -> bool,
    on_hit: &mut dyn FnMut(Hit) -> bool,
) -> io::Result<()> {
    // The same BOM handling as grep-searcher's default.
    let mut reader = DecodeReaderBytesBuilder::new()
        .utf8_passthru(true)
        .strip_bom(true)
        .bom_override(true)
        .bom_sniffing(true)
        .build(reader);
    let mut cache = stream.dfa.create_cache();
    let mut scan = LineScan {
        dfa: &stream.dfa,
        prefilter: stream.prefilter.as_ref(),
        cache: &mut cache,
        state: None,
        matched: false,
    };
    let mut out = Emitter {
        context,
        before: VecDeque::new(),
        after_left: 0,
        limiter: Limiter::new(limit, context),
        on_hit,
    };
    let mut chunk = vec![0u8; CHUNK];
    // The current line: whole while short, else its prefix (and `streaming`).
    let mut line: Vec<u8> = Vec::new();
    let mut streaming = false;
    let mut number = 1u64;
    loop {
        let n = reader.read(&mut chunk)?;
        if n == 0 || halted() {
            break;
        }
        let mut data = &chunk[..n];
        if walked && data.contains(&0) {
            // rg skips a walked file once it sees a NUL byte.
            break;
        }
        while !data.is_empty() {
            let (part, ends) = match memchr::memchr(b'\n', data) {
                Some(i) => (&data[..=i], true),
                None => (data, false),
            };
            data = &data[part.len()..];
            if streaming {
                scan.feed(part);
                let room = LINE_PREFIX_BYTES.saturating_sub(line.len());
                line.extend_from_slice(&part[..part.len().min(room)]);
            } else {
                line.extend_from_slice(part);
                if line.len() > FULL_LINE {
                    streaming = true;
                    scan.start();
                    scan.feed(&line);
                    line.truncate(LINE_PREFIX_BYTES);
                    line.shrink_to(LINE_PREFIX_BYTES);
                }
            }
            if ends {
                let is_match = if streaming {
                    scan.finish()
                } else {
                    short(&line)
                };
                if !out.line(number, &line, !streaming, is_match) {
                    return Ok(());
                }
                line.clear();
                if line.capacity() > FULL_LINE {
                    line.shrink_to(LINE_PREFIX_BYTES);
                }
                streaming = false;
                number += 1;
            }
        }
    }
    if !line.is_empty() {
        let is_match = if streaming {
            scan.finish()
        } else {
            short(&line)
        };
        out.line(number, &line, !streaming, is_match);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grep::search::Engine;
    use crate::grep::EngineOptions;

    /// `search` as the grep engine runs it for `engine`'s pattern.
    fn search_as(engine: &Engine, stream: &StreamMatcher, data: &[u8]) -> io::Result<Vec<Hit>> {
        let short = |line: &[u8]| engine.is_match(line);
        let mut hits = Vec::new();
        search(
            stream,
            &short,
            (engine.limit, engine.context),
            data,
            true,
            &|| false,
            &mut |hit| {
                hits.push(hit);
                true
            },
        )?;
        Ok(hits)
    }

    fn run(pattern: &str, data: &[u8], context: u64) -> Vec<(u64, String, bool)> {
        let options = EngineOptions {
            context,
            limit: 100,
            ..Default::default()
        };
        let engine = Engine::new(pattern, options).unwrap();
        let stream = StreamMatcher::new(pattern, false, false).unwrap();
        search_as(&engine, &stream, data)
            .unwrap()
            .into_iter()
            .map(|h| (h.number, h.shown.text, h.is_match))
            .collect()
    }

    /// Whether `m` finds a match in `line`, fed in pieces cut at `cuts`.
    fn scan(m: &StreamMatcher, line: &[u8], cuts: &[usize]) -> bool {
        let mut cache = m.dfa.create_cache();
        let mut scan = LineScan {
            dfa: &m.dfa,
            prefilter: m.prefilter.as_ref(),
            cache: &mut cache,
            state: None,
            matched: false,
        };
        scan.start();
        let mut from = 0;
        for &cut in cuts.iter().chain([&line.len()]) {
            scan.feed(&line[from..cut]);
            from = cut;
        }
        scan.finish()
    }

    /// The same matcher without its prefilter: every byte fed to the DFA.
    fn unfiltered(m: &StreamMatcher) -> StreamMatcher {
        StreamMatcher {
            dfa: m.dfa.clone(),
            prefilter: None,
        }
    }

    /// Lines to try a pattern on: `needle` at every offset of a short line,
    /// the line cut at every place, each answer checked against the DFA fed
    /// every byte.
    fn agrees_everywhere(m: &StreamMatcher, needle: &[u8]) {
        let reference = unfiltered(m);
        let filler = b"xx ab-a.b Needl needlx ";
        for offset in 0..filler.len() {
            let mut line = filler[..offset].to_vec();
            line.extend_from_slice(needle);
            line.extend_from_slice(&filler[offset..]);
            for cut in 0..=line.len() {
                for candidate in [&line[..], &line[..cut]] {
                    let want = scan(&reference, candidate, &[]);
                    assert_eq!(
                        scan(m, candidate, &[cut.min(candidate.len())]),
                        want,
                        "{:?} cut at {cut}",
                        String::from_utf8_lossy(candidate)
                    );
                }
            }
        }
    }

    #[test]
    fn prefilter_decides_as_the_dfa_does() {
        for (pattern, ignore_case, literal, needle) in [
            ("needle", false, false, &b"needle"[..]),
            (r"needle\$$", false, false, b"needle$"),
            (r"\bneedle\b", false, false, b" needle "),
            ("(?:foo|needle)ba?r", false, false, b"needlebr"),
            ("^needle", false, false, b"needle"),
            ("a.b(", false, true, b"a.b("),
            ("NeEdLe", true, false, b"nEEDle"),
        ] {
            let m = StreamMatcher::new(pattern, ignore_case, literal).unwrap();
            assert!(
                m.prefilter.is_some(),
                "{pattern}: a literal every match begins with"
            );
            agrees_everywhere(&m, needle);
            assert!(scan(&m, needle, &[needle.len() / 2]) || pattern.starts_with(r"\b"));
        }
        let m = StreamMatcher::new("needle", false, false).unwrap();
        assert!(!scan(&m, b"needl needlx eedle", &[]));
        assert!(scan(&m, b"xxxxneedle", &[4, 5, 6, 7, 8, 9]));
        let m = StreamMatcher::new("NEEDLE", true, false).unwrap();
        assert!(scan(&m, b"a NeEdLe b", &[5]));
        assert!(!scan(&m, b"a NeEdL b", &[]));
    }

    #[test]
    fn patterns_without_a_required_literal_feed_every_byte() {
        for (pattern, hit, miss) in [
            (".*z$", &b"abcz"[..], &b"zabc"[..]),
            (r"\w+!", b"--ab!", b"--!"),
            ("[^x]y", b"xay", b"xxy"),
        ] {
            let m = StreamMatcher::new(pattern, false, false).unwrap();
            assert!(m.prefilter.is_none(), "{pattern}");
            assert!(scan(&m, hit, &[1]), "{pattern}");
            assert!(!scan(&m, miss, &[1]), "{pattern}");
        }
    }

    #[test]
    fn a_literal_across_chunk_and_full_line_boundaries() {
        let engine = |p: &str| {
            let options = EngineOptions {
                limit: 100,
                ..Default::default()
            };
            Engine::new(p, options).unwrap()
        };
        // The needle straddles the first whole-line cut, a read chunk's end,
        // or sits at the very end of the line.
        for at in [FULL_LINE - 3, FULL_LINE + CHUNK - 2, 2 * FULL_LINE + 5] {
            let mut data = vec![b'a'; at];
            data.extend_from_slice(b"needle");
            data.extend_from_slice(b"\nnext\n");
            for (pattern, hits) in [
                ("needle", 1),
                (r"needle$", 1),
                ("needles", 0),
                ("aneedle", 1),
            ] {
                let stream = StreamMatcher::new(pattern, false, false).unwrap();
                let got = search_as(&engine(pattern), &stream, &data[..]).unwrap();
                assert_eq!(got.len(), hits, "{pattern} at {at}");
                if hits > 0 {
                    assert_eq!(got[0].number, 1);
                    assert_eq!(
                        got[0].shown.text,
                        format!("{}... [truncated]", "a".repeat(500))
                    );
                }
            }
        }
    }

    #[test]
    fn matches_far_into_a_huge_line() {
        let mut data = b"first\n".to_vec();
        data.extend(std::iter::repeat_n(b'a', 3 * FULL_LINE));
        data.extend_from_slice(b"needle$\nlast needle\n");
        let hits = run(r"needle\$$", &data, 1);
        assert_eq!(hits.len(), 3);
        assert_eq!(hits[0], (1, "first".to_string(), false));
        assert_eq!(hits[1].0, 2);
        assert_eq!(hits[1].1, format!("{}... [truncated]", "a".repeat(500)));
        assert!(hits[1].2);
        assert_eq!(hits[2], (3, "last needle".to_string(), false));
        assert!(run("^aaa", &data, 0)[0].2);
        assert!(run("zzz", &data, 0).is_empty());
    }
}
