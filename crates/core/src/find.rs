//! In-process find: pi 1.6.0's `find` tool with fd 10.5 semantics, bounded
//! to a workspace root (see docs/contracts.md, "find").
//!
//! Matching follows how pi drives fd (`--glob`, smart case, `--full-path`
//! with the search path prefixed for patterns holding a `/`): a pattern
//! without `/` is matched against each entry's file name, a relative pattern
//! with `/` against the path relative to the search directory, an absolute
//! one against the absolute (runtime) path. `*` never crosses `/`.
//!
//! Results come in **path order**: depth-first, siblings compared byte-wise
//! by name (a directory before its contents), which is `Path`'s component
//! ordering, kept while walking on all cores (see `walk`).

use std::ffi::{OsStr, OsString};
#[cfg(target_os = "linux")]
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::glob_regex::{named, GlobRegex};
use crate::index::Index;
#[cfg(target_os = "linux")]
use crate::index::{Child, DirNode, NameFilter, TreeSearch};
use crate::root::Root;
use crate::walk::{self, Entry, Kind, Rules, Visitor};

/// One search: what to match, what to prune, how many results at most
/// (built by `Search::new`).
#[derive(Debug, Clone)]
pub struct Search<'a> {
    /// fd's glob pattern (matched against the name, or the path when it holds a `/`).
    pub(crate) pattern: &'a str,
    /// Globs (relative to the search directory) whose matches are pruned
    /// with everything below them; `dir/**` prunes `dir` itself too.
    pub(crate) ignore: &'a [String],
    /// Results kept at most; the walk stops once it has this many.
    pub(crate) limit: usize,
}

impl<'a> Search<'a> {
    /// The one place find's options get their defaults and bounds, for every
    /// face. `limit` as a JS number: absent or infinite is no limit, a
    /// fraction is floored, NaN or a negative one finds nothing.
    pub fn new(pattern: &'a str, ignore: &'a [String], limit: Option<f64>) -> Search<'a> {
        Search {
            pattern,
            ignore,
            // `as` floors and saturates (NaN is 0).
            limit: limit.map_or(usize::MAX, |l| l as usize),
        }
    }
}

/// What a compiled pattern is matched against.
#[derive(Debug)]
enum Target {
    /// Every entry (the empty pattern, as fd's empty regex).
    All,
    FileName(GlobRegex),
    RelativePath(GlobRegex),
    AbsolutePath(GlobRegex),
}

/// A compiled search pattern.
#[derive(Debug)]
struct Pattern {
    target: Target,
    /// The runtime path of the search directory, for absolute patterns.
    base: PathBuf,
    /// The literal every match of a relative pattern ends with, checked
    /// before the glob's regex (most entries fail it).
    tail: Option<Tail>,
    /// Literal runs every match's last component holds (`nothing_like_`
    /// of `nothing_like_*`), checked before the regex as the tail is.
    pieces: Option<Pieces>,
    /// The literal directories every match of a relative path pattern lies
    /// below: the walk does not enter others.
    prefix: Option<Prefix>,
}

/// Characters with a meaning in globset's glob syntax (wildcards, classes,
/// alternations, escapes), and the separator: text free of them matches only
/// itself.
const GLOB_SPECIAL: [char; 8] = ['*', '?', '[', ']', '{', '}', '\\', '/'];

/// The text after a glob's last metacharacter or `/`: a match's last
/// component ends with it. globset folds case in ASCII only (`(?-u)(?i)`),
/// so an ASCII-insensitive comparison answers exactly as its regex would.
#[derive(Debug)]
struct Tail {
    bytes: Vec<u8>,
    ignore_case: bool,
}

impl Tail {
    fn of(glob: &str, ignore_case: bool) -> Option<Tail> {
        let start = glob.rfind(GLOB_SPECIAL).map_or(0, |i| i + 1);
        let bytes = glob.as_bytes()[start..].to_vec();
        (!bytes.is_empty()).then_some(Tail { bytes, ignore_case })
    }

    fn ends(&self, candidate: &[u8]) -> bool {
        let Some(at) = candidate.len().checked_sub(self.bytes.len()) else {
            return false;
        };
        let end = &candidate[at..];
        if self.ignore_case {
            end.eq_ignore_ascii_case(&self.bytes)
        } else {
            end == self.bytes
        }
    }
}

/// The literal runs of a glob's last component between its `*` and `?`
/// (only those: a class or alternation may stand for text of its own, and
/// `**` may cross `/`). A match's name holds each of them (in any ASCII
/// case when the glob ignores case); when the component has no wildcard at
/// all and keeps case, the name is exactly it (`Kconfig`).
#[derive(Debug)]
struct Pieces {
    runs: Vec<Vec<u8>>,
    ignore_case: bool,
    /// Read by the index's walk (Linux) only: the name is exactly `runs[0]`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    whole: bool,
}

impl Pieces {
    fn of(glob: &str, ignore_case: bool) -> Option<Pieces> {
        let last = glob.rsplit('/').next().unwrap_or(glob);
        if last.contains(['[', ']', '{', '}', '\\']) || last.contains("**") {
            return None;
        }
        let runs: Vec<Vec<u8>> = (last.split(['*', '?']))
            .filter(|run| !run.is_empty())
            .map(|run| run.as_bytes().to_vec())
            .collect();
        let whole = !ignore_case && runs.len() == 1 && runs[0].len() == last.len();
        (!runs.is_empty()).then_some(Pieces {
            runs,
            ignore_case,
            whole,
        })
    }

    fn held_by(&self, name: &[u8]) -> bool {
        self.runs.iter().all(|run| match self.ignore_case {
            true => name.windows(run.len()).any(|w| w.eq_ignore_ascii_case(run)),
            false => memchr::memmem::find(name, run).is_some(),
        })
    }
}

/// The leading components of a path glob free of metacharacters, but for
/// its last (`drivers` of `drivers/**/Kconfig`). globset's regex matches
/// them literally (and `*` never crosses `/`), so an entry whose path leaves
/// them (`arch`, `drivers2/x`) matches nothing at or below it.
#[derive(Debug)]
struct Prefix {
    components: Vec<Vec<u8>>,
    ignore_case: bool,
}

impl Prefix {
    fn of(glob: &str, ignore_case: bool) -> Option<Prefix> {
        let (dirs, _last) = glob.rsplit_once('/')?;
        let components: Vec<Vec<u8>> = dirs
            .split('/')
            .take_while(|c| !c.contains(GLOB_SPECIAL))
            .map(|c| c.as_bytes().to_vec())
            .collect();
        (!components.is_empty()).then_some(Prefix {
            components,
            ignore_case,
        })
    }

    /// Whether anything at or below `rel` (from the search directory) may
    /// match: its components agree with the prefix as far as both go.
    fn may_lead_to(&self, rel: &[u8]) -> bool {
        rel.split(|&b| b == b'/')
            .zip(&self.components)
            .all(|(have, want)| match self.ignore_case {
                true => have.eq_ignore_ascii_case(want),
                false => have == want.as_slice(),
            })
    }
}

impl Pattern {
    fn new(pattern: &str, base: PathBuf) -> Result<Pattern> {
        // On Windows `\` is a separator, so pi 1.6 reads `src\**\*.ts` as
        // `src/**/*.ts`; elsewhere it stays a glob escape.
        #[cfg(windows)]
        let pattern = &pattern.replace('\\', "/");
        let effective = strip_dot_slash(pattern);
        if effective.is_empty() {
            return Ok(Pattern {
                target: Target::All,
                base,
                tail: None,
                pieces: None,
                prefix: None,
            });
        }
        // fd's smart case; pi decides it from the pattern's letters.
        let ignore_case = effective == effective.to_lowercase();
        let glob = GlobBuilder::new(effective)
            .literal_separator(true)
            .case_insensitive(ignore_case)
            .build()
            .map_err(|e| glob_error(pattern, &e.kind().to_string()))?;
        let matcher = GlobRegex::new(&glob).map_err(|e| glob_error(pattern, &e))?;
        let target = if !effective.contains('/') {
            Target::FileName(matcher)
        } else if Path::new(effective).has_root() {
            // Rooted, as Node's `path.isAbsolute` (pi's test) reads it: on Windows `/ws/x`
            // and `C:/ws/x` (not `C:x`).
            Target::AbsolutePath(matcher)
        } else {
            Target::RelativePath(matcher)
        };
        let tail = match target {
            Target::FileName(_) | Target::RelativePath(_) => Tail::of(effective, ignore_case),
            _ => None,
        };
        let pieces = match target {
            Target::FileName(_) | Target::RelativePath(_) => Pieces::of(effective, ignore_case),
            _ => None,
        };
        let prefix = match target {
            Target::RelativePath(_) => Prefix::of(effective, ignore_case),
            _ => None,
        };
        Ok(Pattern {
            target,
            base,
            tail,
            pieces,
            prefix,
        })
    }

    /// Whether a directory at `rel` can be left out with everything below
    /// it: nothing there can match.
    fn rules_out_dir(&self, rel: &[u8]) -> bool {
        self.prefix.as_ref().is_some_and(|p| !p.may_lead_to(rel))
    }

    /// Whether an entry named `name` may match (`false`: it cannot). The
    /// tail holds no `/`, so a path ending with it has a last component,
    /// the name, ending with it.
    #[cfg(target_os = "linux")]
    fn may_match_name(&self, name: &[u8]) -> bool {
        self.tail.as_ref().is_none_or(|t| t.ends(name))
            && self.pieces.as_ref().is_none_or(|p| p.held_by(name))
    }

    fn is_match(&self, rel: &Path) -> bool {
        if let Some(tail) = &self.tail {
            if !tail.ends(rel.as_os_str().as_encoded_bytes()) {
                return false;
            }
        }
        if let Some(pieces) = &self.pieces {
            if !pieces.held_by(file_name(rel)) {
                return false;
            }
        }
        match &self.target {
            Target::All => true,
            Target::FileName(m) => m.is_match(file_name(rel)),
            Target::RelativePath(m) => m.is_match(rel.as_os_str().as_encoded_bytes()),
            Target::AbsolutePath(m) => {
                let full = self.base.join(rel);
                // The pattern's separators are `/` (see `new`): so are the path's.
                #[cfg(windows)]
                let full = PathBuf::from(full.to_string_lossy().replace('\\', "/"));
                m.is_match(full.as_os_str().as_encoded_bytes())
            }
        }
    }
}

/// Drops leading `./` (fd's paths never contain `/./`, pi strips them).
fn strip_dot_slash(mut pattern: &str) -> &str {
    while let Some(rest) = pattern.strip_prefix("./") {
        pattern = rest;
    }
    pattern
}

/// A pattern that does not compile: named (its start, when long) with why.
fn glob_error(pattern: &str, why: &str) -> Error {
    let pattern = named(pattern);
    Error::invalid_glob(format!("invalid glob pattern \"{pattern}\": {why}"))
}

/// `options.ignore`: entries matching one of these globs (relative to the
/// search directory, case-sensitive) are skipped with everything below them.
struct Prune {
    /// From `**/NAME/**` with a literal NAME (what pi passes): entries named
    /// NAME, checked without running a regex on every path.
    names: Vec<OsString>,
    globs: GlobSet,
}

impl Prune {
    fn new(globs: &[String]) -> Result<Prune> {
        let mut names = Vec::new();
        let mut set = GlobSetBuilder::new();
        for raw in globs {
            let g = strip_dot_slash(raw);
            let build = |g: &str| -> Result<Glob> {
                GlobBuilder::new(g)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| glob_error(raw, &e.kind().to_string()))
            };
            let glob = build(g)?;
            let literal_name = g
                .strip_prefix("**/")
                .and_then(|rest| rest.strip_suffix("/**"))
                .filter(|n| !n.is_empty() && !n.contains(GLOB_SPECIAL));
            if let Some(name) = literal_name {
                names.push(OsString::from(name));
                continue;
            }
            set.add(glob);
            // `dir/**` means "nothing of dir": the directory itself goes too,
            // as with the `glob` package pi used before fd.
            if let Some(dir) = g.strip_suffix("/**").filter(|d| !d.is_empty()) {
                set.add(build(dir)?);
            }
        }
        let globs = set
            .build()
            .map_err(|e| Error::invalid_glob(e.to_string()))?;
        Ok(Prune { names, globs })
    }

    fn is_pruned(&self, entry: &Entry<'_>) -> bool {
        self.is_pruned_at(entry.name(), entry.rel())
    }

    /// The same for an entry named `name` at `rel` (from the search directory).
    fn is_pruned_at(&self, name: &OsStr, rel: &Path) -> bool {
        self.names.iter().any(|n| n.as_os_str() == name)
            || (!self.globs.is_empty() && self.globs.is_match(rel))
    }
}

/// A match: the path relative to the search directory, and whether it is a
/// directory (symlinks are never directories here: they are not followed).
type Found = (PathBuf, bool);

/// Runs a search in `cwd` (an absolute runtime or host path inside `root`)
/// and returns absolute runtime paths, directories with a trailing `/`, in
/// path order. Fails on a pattern or ignore glob that does not parse, or on
/// `cwd` outside the root, missing or not a directory (as `scandir` of `cwd`).
///
/// With `index` (of this root), the walk is answered from its cached tree
/// when it can be, with the same result.
///
/// ```
/// use std::path::Path;
/// use pi_native_ops_core::find::{self, Search};
/// use pi_native_ops_core::root::Root;
///
/// let dir = tempfile::tempdir()?;
/// std::fs::create_dir(dir.path().join("src"))?;
/// std::fs::write(dir.path().join("src/main.rs"), "")?;
/// std::fs::write(dir.path().join("README.md"), "")?;
/// std::fs::write(dir.path().join(".ignore"), "skip.rs\n")?;
/// std::fs::write(dir.path().join("skip.rs"), "")?;
/// let root = Root::open(dir.path(), Some(Path::new("/w")))?;
/// let search = Search::new("*.rs", &[], Some(100.0));
/// let found = find::glob(&root, Path::new("/w"), &search, None)?;
/// assert_eq!(found, ["/w/src/main.rs"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn glob(
    root: &Root,
    cwd: &Path,
    search: &Search<'_>,
    index: Option<&Index>,
) -> Result<Vec<OsString>> {
    let dir = root.resolve_dir(cwd)?;
    let base = runtime_base(root, cwd, &dir);
    let pattern = Pattern::new(search.pattern, base.clone())?;
    let prune = Prune::new(search.ignore)?;
    if search.limit == 0 {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    let visitor = Matches {
        pattern: &pattern,
        prune: &prune,
    };
    if !from_index(index, &dir, &visitor, &mut found, search.limit) {
        found.clear();
        let start = root.open_dir(&dir).map_err(|e| e.with_path(cwd))?;
        let from_root = walk::start_in_root(root.host(), &dir, &start);
        let rules = Rules::new(&dir, None).with_policy(root.policy(), &from_root);
        walk::walk(start, &rules, &visitor, &Cancel::new(), |m| {
            found.push(m);
            found.len() < search.limit
        });
    }
    Ok(found
        .into_iter()
        .map(|(rel, is_dir)| {
            let mut p = base.join(native_separators(rel)).into_os_string();
            if is_dir {
                p.push(DIR_SUFFIX);
            }
            p
        })
        .collect())
}

/// The walk's visitor: prunes, and keeps what the pattern matches.
struct Matches<'a> {
    pattern: &'a Pattern,
    prune: &'a Prune,
}

impl Visitor for Matches<'_> {
    type Out = Found;
    type Local = ();

    fn local(&self) {}

    fn skip(&self, entry: &Entry<'_>) -> bool {
        self.prune.is_pruned(entry)
            || (entry.kind == Kind::Dir
                && self
                    .pattern
                    .rules_out_dir(entry.rel().as_os_str().as_encoded_bytes()))
    }

    fn visit(&self, _: &mut (), entry: &Entry<'_>) -> Option<Found> {
        let rel = entry.rel();
        self.pattern
            .is_match(rel)
            .then(|| (rel.to_path_buf(), entry.kind == Kind::Dir))
    }
}

/// Answers the search from `index` when it can (`found` then holds the
/// matches); `false`: walk live.
#[cfg(target_os = "linux")]
fn from_index(
    index: Option<&Index>,
    dir: &Path,
    matches: &Matches<'_>,
    found: &mut Vec<Found>,
    limit: usize,
) -> bool {
    let Some(index) = index else { return false };
    let mut cached = Cached {
        matches,
        found,
        limit,
    };
    index.walk(dir, &mut cached).is_some()
}

#[cfg(not(target_os = "linux"))]
fn from_index(
    index: Option<&Index>,
    _: &Path,
    _: &Matches<'_>,
    _: &mut Vec<Found>,
    _: usize,
) -> bool {
    match index {
        Some(never) => match *never {},
        None => false,
    }
}

/// The same search answered from an index's cached tree (left out: the
/// stored ignore decision, or pruned; matches in walk order up to the limit).
#[cfg(target_os = "linux")]
struct Cached<'a, 'm> {
    matches: &'a Matches<'m>,
    found: &'a mut Vec<Found>,
    limit: usize,
}

#[cfg(target_os = "linux")]
impl TreeSearch for Cached<'_, '_> {
    fn left_out(&mut self, rel: &[u8], child: &Child) -> bool {
        child.ignored
            || (child.kind == Kind::Dir && self.matches.pattern.rules_out_dir(rel))
            || self.matches.prune.is_pruned_at(
                OsStr::from_bytes(&child.name),
                Path::new(OsStr::from_bytes(rel)),
            )
    }

    fn wanted(&mut self, child: &Child) -> bool {
        self.matches.pattern.may_match_name(&child.name)
    }

    fn wants_any(&mut self, names: &NameFilter) -> bool {
        let pattern = self.matches.pattern;
        (pattern.tail.as_ref()).is_none_or(|t| names.may_end_with(&t.bytes))
            && (pattern.pieces.as_ref()).is_none_or(|p| p.runs.iter().all(|r| names.may_hold(r)))
    }

    fn only_name(&mut self) -> Option<Vec<u8>> {
        let pieces = self.matches.pattern.pieces.as_ref()?;
        pieces.whole.then(|| pieces.runs[0].clone())
    }

    fn visit(&mut self, rel: &[u8], child: &Child, _: &DirNode) -> bool {
        let rel = Path::new(OsStr::from_bytes(rel));
        if self.matches.pattern.is_match(rel) {
            self.found
                .push((rel.to_path_buf(), child.kind == Kind::Dir));
        }
        self.found.len() < self.limit
    }
}

/// The runtime path results are built on: `cwd` as given when it is in
/// runtime form (so pi's `path.relative(cwd, result)` works even through a
/// symlinked `cwd`), mapped when it is under the host root, else the real
/// directory's runtime form.
fn runtime_base(root: &Root, cwd: &Path, real_dir: &Path) -> PathBuf {
    let paths = root.paths();
    if paths.runtime_relative(cwd).is_some() {
        cwd.to_path_buf()
    } else if paths.host_relative(cwd).is_some() {
        paths.to_runtime(cwd)
    } else {
        paths.to_runtime(real_dir)
    }
}

/// What ends a directory's result: the target's separator, as fd prints it
/// (pi's find tool takes either on Windows).
const DIR_SUFFIX: &str = if cfg!(windows) { "\\" } else { "/" };

/// A walk path (`/`-separated) with the target's own separators: on Windows
/// the results are Windows paths, as fd gives them there.
fn native_separators(rel: PathBuf) -> PathBuf {
    #[cfg(windows)]
    {
        let bytes: Vec<u8> = (rel.as_os_str().as_encoded_bytes().iter())
            .map(|&b| if b == b'/' { b'\\' } else { b })
            .collect();
        PathBuf::from(walk::os_str(&bytes))
    }
    #[cfg(not(windows))]
    {
        rel
    }
}

/// The last component of a relative walk path, as bytes.
fn file_name(rel: &Path) -> &[u8] {
    let bytes = rel.as_os_str().as_encoded_bytes();
    bytes.rsplit(|&b| b == b'/').next().unwrap_or(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use globset::{Candidate, GlobMatcher};
    use std::fs;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for f in files {
            let p = t.path().join(f);
            if let Some(d) = f.strip_suffix('/') {
                fs::create_dir_all(t.path().join(d)).unwrap();
            } else {
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(p, "").unwrap();
            }
        }
        t
    }

    /// A result as the tests spell it: `/`-separated (Windows gives `\`).
    fn shown(p: OsString) -> String {
        let p = p.into_string().unwrap();
        if cfg!(windows) {
            p.replace('\\', "/")
        } else {
            p
        }
    }

    fn run(t: &tempfile::TempDir, pattern: &str, ignore: &[&str], limit: usize) -> Vec<String> {
        let root = Root::open(t.path(), Some(Path::new("/ws"))).unwrap();
        let ignore: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
        let search = Search {
            pattern,
            ignore: &ignore,
            limit,
        };
        let found: Vec<String> = glob(&root, Path::new("/ws"), &search, None)
            .unwrap()
            .into_iter()
            .map(shown)
            .collect();
        // The same search answered from an index: the same answer.
        #[cfg(target_os = "linux")]
        {
            use crate::index::{IndexOptions, IndexState};
            let root = std::sync::Arc::new(root);
            let index = Index::start(root.clone(), IndexOptions::default());
            assert_eq!(index.wait_ready().state, IndexState::Ready);
            let indexed: Vec<String> = glob(&root, Path::new("/ws"), &search, Some(&index))
                .unwrap()
                .into_iter()
                .map(shown)
                .collect();
            assert_eq!(indexed, found, "indexed find of {pattern:?}");
        }
        found
    }

    #[test]
    fn a_policy_prunes_denied_entries_with_or_without_the_index() {
        use crate::policy::{Policy, PolicySpec};
        let t = tree(&[
            "a.rs",
            ".env",
            ".ENV",
            "src/.env",
            "src/b.rs",
            "secrets/c.rs",
            "secrets/deep/d.rs",
            "keys/k.rs",
            "keys/keep.rs",
        ]);
        let spec = PolicySpec::from_raw(
            Some(vec![
                ".env".into(),
                "secrets/".into(),
                "keys/*".into(),
                "!keys/keep.rs".into(),
            ]),
            None,
            None,
        );
        let policy = std::sync::Arc::new(Policy::new(&spec).unwrap());
        let root = Root::open(t.path(), Some(Path::new("/ws")))
            .unwrap()
            .with_policy(policy);
        let root = std::sync::Arc::new(root);
        let find = |pattern: &str, cwd: &str, index: Option<&Index>| {
            let search = Search::new(pattern, &[], Some(100.0));
            glob(&root, Path::new(cwd), &search, index)
                .map(|found| found.into_iter().map(shown).collect::<Vec<_>>())
        };
        let all = [
            "/ws/.ENV",
            "/ws/a.rs",
            "/ws/keys/",
            "/ws/keys/keep.rs",
            "/ws/src/",
            "/ws/src/b.rs",
        ];
        // On Windows `.ENV` is `.env` (one file, names compare case-insensitively), denied.
        let all = if cfg!(windows) { &all[1..] } else { &all[..] };
        assert_eq!(find("*", "/ws", None).unwrap(), all);
        assert_eq!(find("**/*.rs", "/ws/src", None).unwrap(), ["/ws/src/b.rs"]);
        let refused = find("*", "/ws/secrets", None).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Protected);
        #[cfg(target_os = "linux")]
        {
            use crate::index::{IndexOptions, IndexState};
            let index = Index::start(root.clone(), IndexOptions::default());
            assert_eq!(index.wait_ready().state, IndexState::Ready);
            assert_eq!(find("*", "/ws", Some(&index)).unwrap(), all);
            assert_eq!(
                find("**/*.rs", "/ws/src", Some(&index)).unwrap(),
                ["/ws/src/b.rs"]
            );
        }
    }

    #[test]
    fn basename_and_anchored_path_patterns() {
        let t = tree(&["src/a.ts", "pkg/src/b.ts", "c.ts", "src/d/e.ts"]);
        assert_eq!(
            run(&t, "*.ts", &[], 10),
            [
                "/ws/c.ts",
                "/ws/pkg/src/b.ts",
                "/ws/src/a.ts",
                "/ws/src/d/e.ts"
            ]
        );
        assert_eq!(run(&t, "src/*.ts", &[], 10), ["/ws/src/a.ts"]);
        assert_eq!(run(&t, "./src/*.ts", &[], 10), ["/ws/src/a.ts"]);
        assert_eq!(
            run(&t, "**/src/*.ts", &[], 10),
            ["/ws/pkg/src/b.ts", "/ws/src/a.ts"]
        );
        assert_eq!(run(&t, "/ws/src/*.ts", &[], 10), ["/ws/src/a.ts"]);
    }

    #[test]
    #[cfg_attr(
        windows,
        ignore = "names compare case-insensitively: é.c and É.C are one file"
    )]
    fn literal_tails_answer_as_the_glob_does() {
        let t = tree(&[
            "foo", "a/foo", "a/b/xfoo", "FOO.C", "x.c", "é.c", "É.C", "src/k.Rs",
        ]);
        assert_eq!(run(&t, "**/foo", &[], 10), ["/ws/a/foo", "/ws/foo"]);
        assert_eq!(
            run(&t, "*foo", &[], 10),
            ["/ws/a/b/xfoo", "/ws/a/foo", "/ws/foo"]
        );
        // Smart case folds ASCII only, as globset's regex does.
        assert_eq!(
            run(&t, "*.c", &[], 10),
            ["/ws/FOO.C", "/ws/x.c", "/ws/É.C", "/ws/é.c"]
        );
        assert_eq!(run(&t, "é.c", &[], 10), ["/ws/é.c"]);
        assert_eq!(run(&t, "*.C", &[], 10), ["/ws/FOO.C", "/ws/É.C"]);
        assert_eq!(run(&t, "src/*.rs", &[], 10), ["/ws/src/k.Rs"]);
        assert_eq!(run(&t, "src/*.[rR]s", &[], 10), ["/ws/src/k.Rs"]);
        assert_eq!(run(&t, "a/", &[], 10), Vec::<String>::new());
    }

    /// `pattern` compiled here, and by globset alone with pi's smart case.
    fn ours_and_globset(pattern: &str) -> (Pattern, GlobMatcher) {
        let ignore_case = pattern == pattern.to_lowercase();
        let plain = GlobBuilder::new(pattern)
            .literal_separator(true)
            .case_insensitive(ignore_case)
            .build()
            .unwrap()
            .compile_matcher();
        (Pattern::new(pattern, PathBuf::from("/ws")).unwrap(), plain)
    }

    #[test]
    fn literal_tails_and_pieces_never_change_an_answer() {
        let patterns = [
            "*.c",
            "*.C",
            "**/foo",
            "foo",
            "*foo",
            "a/*.h",
            "**/include/**/*.h",
            "x?.c",
            "*.[ch]",
            "*.{c,h}",
            "a\\*b",
            "é*",
            "é.c",
            "src/",
            "*.tar.gz",
            "**",
            "*",
            "nothing_like_*",
            "*oo*",
            "f*o",
            "Foo",
            "a/Foo",
            "*A*",
            "?oo",
            "x*.c",
            "*a*b*",
        ];
        let candidates = [
            "Foo",
            "a/Foo",
            "a/xFoo",
            "nothing_like_x",
            "Nothing_Like_x",
            "a/nothing_like_/b",
            "foo",
            "a/foo",
            "xfoo",
            "a.c",
            "A.C",
            "a/b.h",
            "include/x.h",
            "a/include/b/c.H",
            "xa.c",
            "é",
            "Éx",
            "É.C",
            "é.c",
            "a*b",
            "src",
            "src/x",
            "p.tar.gz",
            "P.TAR.GZ",
            "",
            "c",
            ".c",
        ];
        for pattern in patterns {
            let (p, plain) = ours_and_globset(pattern);
            for c in candidates {
                let subject = if pattern.contains('/') {
                    c.as_bytes()
                } else {
                    file_name(Path::new(c))
                };
                assert_eq!(
                    p.is_match(Path::new(c)),
                    plain.is_match_candidate(&Candidate::from_bytes(subject)),
                    "{pattern} on {c}"
                );
            }
        }
    }

    #[test]
    #[cfg_attr(
        windows,
        ignore = "names compare case-insensitively: Drivers/ and drivers/ are one directory"
    )]
    fn literal_leading_directories_bound_the_walk() {
        let t = tree(&[
            "drivers/Kconfig",
            "drivers/a/Kconfig",
            "drivers/a/b/Kconfig",
            "drivers2/Kconfig",
            "Drivers/c/Kconfig",
            "arch/x/Kconfig",
            "arch/drivers/Kconfig",
        ]);
        let all = [
            "/ws/drivers/Kconfig",
            "/ws/drivers/a/Kconfig",
            "/ws/drivers/a/b/Kconfig",
        ];
        assert_eq!(run(&t, "drivers/**/Kconfig", &[], 10), all);
        assert_eq!(run(&t, "drivers/a/*/Kconfig", &[], 10), [all[2]]);
        assert_eq!(run(&t, "drivers/*/Kconfig", &[], 10), [all[1]]);
        assert_eq!(
            run(&t, "drivers/*", &[], 10),
            ["/ws/Drivers/c/", all[0], "/ws/drivers/a/"]
        );
        // Smart case: lower case folds the directories too (ASCII only).
        assert_eq!(
            run(&t, "drivers/**/kconfig", &[], 10),
            ["/ws/Drivers/c/Kconfig", all[0], all[1], all[2]]
        );
        let p = Pattern::new("drivers/**/Kconfig", PathBuf::from("/ws")).unwrap();
        assert!(p.rules_out_dir(b"arch") && p.rules_out_dir(b"drivers2"));
        assert!(p.rules_out_dir(b"Drivers/c"));
        assert!(!p.rules_out_dir(b"drivers") && !p.rules_out_dir(b"drivers/a/b"));
    }

    /// Whatever a prefix rules out, the glob matches nothing at or below.
    #[test]
    fn leading_directories_never_rule_out_a_match() {
        let patterns = [
            "drivers/**/Kconfig",
            "drivers/kconfig",
            "a/b/*.h",
            "a/*/c",
            "a/{b,c}/d",
            "a/[b]/d",
            "é/x",
            "a\\/b",
            "a//b",
            "a/./b",
            "../a/b",
            "**/a/b",
            "a/**",
            "a/b/",
        ];
        let dirs = [
            "a",
            "A",
            "a/b",
            "a/B",
            "a/c",
            "b",
            "drivers",
            "Drivers",
            "drivers/x",
            "é",
            "É",
            "ab",
            "a/b/c",
            "..",
        ];
        let below = [
            "",
            "/b",
            "/d",
            "/x/y",
            "/Kconfig",
            "/c/Kconfig",
            "/b/d",
            "/b/x.h",
        ];
        for pattern in patterns {
            let (p, plain) = ours_and_globset(pattern);
            for dir in dirs {
                if !p.rules_out_dir(dir.as_bytes()) {
                    continue;
                }
                for tail in below {
                    let path = format!("{dir}{tail}");
                    assert!(
                        !plain.is_match(&path),
                        "{pattern} rules out {dir}, matches {path}"
                    );
                }
            }
        }
    }

    #[test]
    fn smart_case_dirs_and_order() {
        let t = tree(&["A.txt", "b.TXT", "a-b/", "a/x"]);
        assert_eq!(run(&t, "*.txt", &[], 10), ["/ws/A.txt", "/ws/b.TXT"]);
        assert_eq!(run(&t, "*.TXT", &[], 10), ["/ws/b.TXT"]);
        // Path order: `a` and its contents before `a-b` (component-wise).
        assert_eq!(
            run(&t, "*", &[], 10),
            ["/ws/A.txt", "/ws/a/", "/ws/a/x", "/ws/a-b/", "/ws/b.TXT"]
        );
        assert_eq!(run(&t, "*", &[], 2), ["/ws/A.txt", "/ws/a/"]);
    }

    #[test]
    fn ignore_globs_prune_subtrees() {
        let t = tree(&["node_modules/p/x.js", "src/node_modules/q.js", "y.js"]);
        assert_eq!(
            run(&t, "*", &["**/node_modules/**"], 10),
            ["/ws/src/", "/ws/y.js"]
        );
    }

    #[test]
    fn path_order_and_limit_cuts() {
        let files: Vec<String> = (0..600)
            .map(|i| format!("d{}/e{}/g{}/f{i}.rs", i % 7, i % 5, i % 3))
            .chain(["top.rs".to_string(), "d3/x.rs".to_string()])
            .collect();
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let t = tree(&refs);
        let all = run(&t, "*", &[], usize::MAX);
        let mut sorted = all.clone();
        sorted.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
        assert_eq!(all, sorted);
        // 602 files, 7 + 35 + 105 directories.
        assert_eq!(all.len(), 602 + 7 + 35 + 105);
        for limit in [1, 2, 3, 10, 50, 300, 700] {
            assert_eq!(run(&t, "*", &[], limit), all[..limit.min(all.len())]);
        }
        let sparse = run(&t, "f1*.rs", &[], usize::MAX);
        assert!(sparse
            .windows(2)
            .all(|w| Path::new(&w[0]) < Path::new(&w[1])));
        assert_eq!(run(&t, "f1*.rs", &[], 5), sparse[..5]);
    }

    #[test]
    fn errors_name_the_glob() {
        let t = tree(&["a"]);
        let root = Root::open(t.path(), None).unwrap();
        let search = Search {
            pattern: "[abc",
            ignore: &[],
            limit: 1,
        };
        let err = glob(&root, t.path(), &search, None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidGlob);
        assert!(err.to_string().contains("\"[abc\""), "{err}");
        // A regex past globset's bound is an error (globset would panic), in
        // fd's words, the pattern named by its start.
        let huge = "a".repeat(150_000);
        let search = Search {
            pattern: &huge,
            ignore: &[],
            limit: 1,
        };
        let err = glob(&root, t.path(), &search, None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidGlob);
        assert_eq!(
            err.to_string(),
            format!(
                "invalid glob pattern \"{}… (150000 bytes)\": Compiled regex exceeds size limit of 10485760 bytes.",
                "a".repeat(100)
            )
        );
        let outside = Search {
            pattern: "*",
            ignore: &[],
            limit: 1,
        };
        let err = glob(&root, Path::new("/"), &outside, None).unwrap_err();
        assert_eq!(err.to_string(), "path \"/\" is outside workspace");
        let err = glob(&root, &t.path().join("a"), &outside, None).unwrap_err();
        let want = format!(
            "ENOTDIR: not a directory, scandir '{}'",
            t.path().join("a").display()
        );
        assert_eq!(err.to_string(), want);
        let err = root.exists_inside(Path::new("/")).unwrap_err();
        assert_eq!(err.to_string(), "path \"/\" is outside workspace");
        assert_eq!(root.exists_inside(&t.path().join("missing")), Ok(false));
    }

    /// Every face hands find's limit over raw; `Search::new` decides it.
    #[test]
    fn search_new_decides_the_limit() {
        let limit = |l: Option<f64>| Search::new("*", &[], l).limit;
        assert_eq!(limit(None), usize::MAX);
        assert_eq!(limit(Some(f64::INFINITY)), usize::MAX);
        assert_eq!(limit(Some(1e300)), usize::MAX);
        assert_eq!(limit(Some(3.9)), 3);
        assert_eq!(limit(Some(0.0)), 0);
        assert_eq!(limit(Some(-2.0)), 0);
        assert_eq!(limit(Some(f64::NAN)), 0);
    }
}
