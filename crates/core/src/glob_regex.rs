//! One glob compiled to its regex, as globset's `GlobMatcher` is but with
//! the compile's failure an error: globset's `compile_matcher` panics when
//! the regex passes its size bound (a pattern of 150,000 `a`, a rule of
//! 100,000 `*`), and a pattern or a policy rule is a caller's to choose.

use globset::Glob;
use regex_automata::meta::Regex;
use regex_automata::util::syntax;

/// Bytes a glob's compiled regex may take: globset's bound for its own
/// regexes (10 MiB), which fd and ripgrep share.
pub(crate) const MAX_GLOB_REGEX_BYTES: usize = 10 << 20;

/// Bytes of the lazy DFA's cache per search thread, as globset gives it.
const DFA_CACHE_BYTES: usize = 10 << 20;

/// A compiled glob, matching as globset's `GlobMatcher` does.
#[derive(Clone, Debug)]
pub(crate) struct GlobRegex(Regex);

impl GlobRegex {
    /// `glob`'s regex compiled as globset compiles it; past
    /// [`MAX_GLOB_REGEX_BYTES`], fd's words for it (regex's
    /// `CompiledTooBig`), else the compiler's.
    pub(crate) fn new(glob: &Glob) -> Result<GlobRegex, String> {
        let syntax = syntax::Config::new().utf8(false).dot_matches_new_line(true);
        let config = Regex::config()
            .utf8_empty(false)
            .nfa_size_limit(Some(MAX_GLOB_REGEX_BYTES))
            .hybrid_cache_capacity(DFA_CACHE_BYTES);
        Regex::builder()
            .syntax(syntax)
            .configure(config)
            .build(glob.regex())
            .map(GlobRegex)
            .map_err(|e| match e.size_limit() {
                Some(limit) => too_big(limit),
                None => e.to_string(),
            })
    }

    /// Whether the path (or name) `bytes` matches; on Windows `\` reads as
    /// `/`, as globset's candidates do.
    pub(crate) fn is_match(&self, bytes: &[u8]) -> bool {
        #[cfg(windows)]
        if bytes.contains(&b'\\') {
            let slashed: Vec<u8> = bytes
                .iter()
                .map(|&b| if b == b'\\' { b'/' } else { b })
                .collect();
            return self.0.is_match(&slashed);
        }
        self.0.is_match(bytes)
    }
}

/// fd's (the regex crate's) words for a regex past its size bound.
pub(crate) fn too_big(limit: usize) -> String {
    format!("Compiled regex exceeds size limit of {limit} bytes.")
}

/// `text` as an error message names it: whole when short, else its start
/// and its length, so a hostile input does not make a hostile message.
pub(crate) fn named(text: &str) -> String {
    /// Characters of an input an error message shows, at most.
    const SHOWN_CHARS: usize = 100;
    match text.char_indices().nth(SHOWN_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_as_globset_does() {
        for (pattern, path, want) in [
            ("*.rs", "a.rs", true),
            ("*.rs", "a.c", false),
            ("src/**/*.ts", "src/a/b/c.ts", true),
            ("[ab]?", "bz", true),
        ] {
            let glob = Glob::new(pattern).unwrap();
            let ours = GlobRegex::new(&glob).unwrap();
            assert_eq!(ours.is_match(path.as_bytes()), want, "{pattern} {path}");
            assert_eq!(glob.compile_matcher().is_match(path), want);
        }
    }

    #[test]
    fn a_regex_past_the_bound_is_an_error_not_a_panic() {
        // Case folded, as find folds an all-lowercase pattern: `[Aa]` each.
        let glob = globset::GlobBuilder::new(&"a".repeat(150_000))
            .case_insensitive(true)
            .build()
            .unwrap();
        let err = GlobRegex::new(&glob).unwrap_err();
        assert_eq!(err, "Compiled regex exceeds size limit of 10485760 bytes.");
        let stars = Glob::new(&"*".repeat(100_000)).unwrap();
        assert!(GlobRegex::new(&stars).is_err());
    }

    #[test]
    fn long_inputs_are_named_by_their_start() {
        assert_eq!(named("src/*.rs"), "src/*.rs");
        let long = "é".repeat(150);
        assert_eq!(named(&long), format!("{}… (300 bytes)", "é".repeat(100)));
    }
}
