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
//! ordering, kept while walking on all cores (see `Walker`).

use std::collections::BinaryHeap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use globset::{Candidate, Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use ignore::{DirEntry, WalkState};

use crate::root::{FsError, Root};
use crate::walk;

/// Why a search failed.
#[derive(Debug, PartialEq, Eq)]
pub enum FindError {
    /// The search pattern or an ignore glob does not parse; the text names
    /// the glob and the problem.
    Glob(String),
    /// The search directory is outside the root, missing or not a directory.
    Root(FsError),
}

impl From<FsError> for FindError {
    fn from(e: FsError) -> Self {
        FindError::Root(e)
    }
}

/// One search: what to match, what to prune, how many results at most.
#[derive(Debug, Clone)]
pub struct Search<'a> {
    pub pattern: &'a str,
    /// Globs (relative to the search directory) whose matches are pruned
    /// with everything below them; `dir/**` prunes `dir` itself too.
    pub ignore: &'a [String],
    pub limit: usize,
}

/// What a compiled pattern is matched against.
#[derive(Debug)]
enum Target {
    /// Every entry (the empty pattern, as fd's empty regex).
    All,
    FileName(GlobMatcher),
    RelativePath(GlobMatcher),
    AbsolutePath(GlobMatcher),
}

/// A compiled search pattern.
#[derive(Debug)]
struct Pattern {
    target: Target,
    /// The runtime path of the search directory, for absolute patterns.
    base: PathBuf,
}

impl Pattern {
    fn new(pattern: &str, base: PathBuf) -> Result<Pattern, FindError> {
        let effective = strip_dot_slash(pattern);
        if effective.is_empty() {
            return Ok(Pattern {
                target: Target::All,
                base,
            });
        }
        // fd's smart case; pi decides it from the pattern's letters.
        let ignore_case = effective == effective.to_lowercase();
        let matcher = GlobBuilder::new(effective)
            .literal_separator(true)
            .case_insensitive(ignore_case)
            .build()
            .map_err(|e| glob_error(pattern, &e))?
            .compile_matcher();
        let target = if !effective.contains('/') {
            Target::FileName(matcher)
        } else if Path::new(effective).is_absolute() {
            Target::AbsolutePath(matcher)
        } else {
            Target::RelativePath(matcher)
        };
        Ok(Pattern { target, base })
    }

    fn is_match(&self, rel: &Path) -> bool {
        match &self.target {
            Target::All => true,
            Target::FileName(m) => m.is_match_candidate(&Candidate::from_bytes(file_name(rel))),
            Target::RelativePath(m) => {
                m.is_match_candidate(&Candidate::from_bytes(rel.as_os_str().as_bytes()))
            }
            Target::AbsolutePath(m) => m.is_match(self.base.join(rel)),
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

fn glob_error(pattern: &str, e: &globset::Error) -> FindError {
    FindError::Glob(format!("invalid glob pattern \"{pattern}\": {}", e.kind()))
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
    fn new(globs: &[String]) -> Result<Prune, FindError> {
        let mut names = Vec::new();
        let mut set = GlobSetBuilder::new();
        for raw in globs {
            let g = strip_dot_slash(raw);
            let build = |g: &str| -> Result<Glob, FindError> {
                GlobBuilder::new(g)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| glob_error(raw, &e))
            };
            let glob = build(g)?;
            let literal_name = g
                .strip_prefix("**/")
                .and_then(|rest| rest.strip_suffix("/**"))
                .filter(|n| {
                    !n.is_empty() && !n.contains(['*', '?', '[', ']', '{', '}', '\\', '/'])
                });
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
        let globs = set.build().map_err(|e| FindError::Glob(e.to_string()))?;
        Ok(Prune { names, globs })
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty() && self.globs.is_empty()
    }

    fn is_pruned(&self, dir: &Path, entry: &DirEntry) -> bool {
        entry.depth() > 0
            && (self
                .names
                .iter()
                .any(|n| n.as_os_str() == entry.file_name())
                || (!self.globs.is_empty() && self.globs.is_match(relative(dir, entry))))
    }
}

/// A match: the path relative to the search directory, and whether it is a
/// directory (symlinks are never directories here: they are not followed).
type Found = (PathBuf, bool);

/// Runs a search in `cwd` (an absolute runtime or host path inside `root`)
/// and returns absolute runtime paths, directories with a trailing `/`.
pub fn glob(root: &Root, cwd: &Path, search: &Search<'_>) -> Result<Vec<OsString>, FindError> {
    glob_with_budget(root, cwd, search, SEQUENTIAL_BUDGET)
}

/// `glob` with a chosen sequential budget (tests force either walker).
fn glob_with_budget(
    root: &Root,
    cwd: &Path,
    search: &Search<'_>,
    sequential_budget: usize,
) -> Result<Vec<OsString>, FindError> {
    let dir = root.resolve_dir(cwd)?;
    let base = runtime_base(root, cwd, &dir);
    let pattern = Pattern::new(search.pattern, base.clone())?;
    let prune = Arc::new(Prune::new(search.ignore)?);
    if search.limit == 0 {
        return Ok(Vec::new());
    }
    let walker = Walker {
        require_git: walk::inside_git_repo(&dir),
        dir: &dir,
        pattern: &pattern,
        prune,
        limit: search.limit,
        sequential_budget,
    };
    Ok(walker
        .run()
        .into_iter()
        .map(|(rel, is_dir)| {
            let mut p = base.join(rel).into_os_string();
            if is_dir {
                p.push("/");
            }
            p
        })
        .collect())
}

/// Whether `path` exists inside the root; a path leaving the root is an error
/// (pi's find reports it instead of "not found").
pub fn exists(root: &Root, path: &Path) -> Result<bool, FsError> {
    match root.resolve_existing(path) {
        Ok(_) => Ok(true),
        Err(FsError::Outside) => Err(FsError::Outside),
        Err(FsError::Io(_) | FsError::Read(_)) => Ok(false),
    }
}

/// The runtime path results are built on: `cwd` as given when it is in
/// runtime form (so pi's `path.relative(cwd, result)` works even through a
/// symlinked `cwd`), mapped when it is under the host root, else the real
/// directory's runtime form.
fn runtime_base(root: &Root, cwd: &Path, real_dir: &Path) -> PathBuf {
    if cwd.starts_with(root.runtime()) {
        cwd.to_path_buf()
    } else if let Ok(rest) = cwd.strip_prefix(root.host()) {
        root.runtime().join(rest)
    } else {
        root.to_runtime(real_dir)
    }
}

/// Entries the sorted sequential walk may visit before the search moves to
/// the parallel walker: a small tree (a typical repository) is answered by
/// it alone, without starting threads, and a large one loses little.
const SEQUENTIAL_BUDGET: usize = 2048;

/// One search's walk.
///
/// A sorted sequential walk yields path order as it goes and stops at the
/// limit, but uses one core (and probes every directory for ignore files).
/// Past `SEQUENTIAL_BUDGET` entries the search starts over with the parallel
/// walker on every core, which visits the tree in no useful order: each
/// thread keeps the `limit` smallest matches it has seen in path order, and
/// once it holds `limit` of them it skips every entry (and subtree) that
/// comes after its largest, since nothing there can be among the first
/// `limit`. Dense patterns thus stop early there too. The threads' matches,
/// merged and sorted, give the first `limit` in path order.
struct Walker<'a> {
    dir: &'a Path,
    pattern: &'a Pattern,
    prune: Arc<Prune>,
    limit: usize,
    /// Decided once for the search directory, as pi decides for fd.
    require_git: bool,
    sequential_budget: usize,
}

impl Walker<'_> {
    fn run(&self) -> Vec<Found> {
        self.walk_sequential()
            .unwrap_or_else(|| self.walk_parallel())
    }

    /// The shared walker rules from the search directory, with the search's own.
    /// With `best`, entries past its bound are skipped too: the parallel
    /// walker reads a directory before visiting it, so the bound is checked
    /// before an entry is queued, not from the visitor.
    fn builder(&self, best: Option<Arc<Smallest>>) -> ignore::WalkBuilder {
        let mut b = walk::builder(self.dir);
        b.require_git(self.require_git);
        if !self.prune.is_empty() || best.is_some() {
            let (prune, dir) = (self.prune.clone(), self.dir.to_path_buf());
            b.filter_entry(move |e| {
                !prune.is_pruned(&dir, e)
                    && !best
                        .as_ref()
                        .is_some_and(|best| best.is_beyond(relative(&dir, e)))
            });
        }
        b
    }

    /// The answer, if the sorted walk finds it within the budget.
    fn walk_sequential(&self) -> Option<Vec<Found>> {
        let mut found = Vec::new();
        for (visited, entry) in self.builder(None).build().enumerate() {
            if visited > self.sequential_budget {
                return None;
            }
            // Unreadable directories and vanished entries are skipped, as fd does.
            let Ok(entry) = entry else { continue };
            if entry.depth() == 0 {
                continue;
            }
            if let Some(m) = matched(self.pattern, self.dir, &entry) {
                found.push(m);
                if found.len() == self.limit {
                    break;
                }
            }
        }
        Some(found)
    }

    fn walk_parallel(&self) -> Vec<Found> {
        let best = Arc::new(Smallest::new(self.limit));
        self.builder(Some(best.clone())).build_parallel().run(|| {
            let best = &best;
            Box::new(move |entry| {
                // Unreadable directories and vanished entries are skipped, as fd does.
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                if entry.depth() == 0 {
                    return WalkState::Continue;
                }
                if let Some(m) = matched(self.pattern, self.dir, &entry) {
                    best.push(m);
                }
                WalkState::Continue
            })
        });
        match Arc::try_unwrap(best) {
            Ok(best) => best.into_sorted(),
            // The walker drops its filter when it finishes; never reached.
            Err(best) => best.lock().heap.clone().into_sorted_vec(),
        }
    }
}

/// The `limit` smallest matches in path order seen by all walker threads
/// (a max-heap), and, once there are `limit` of them, the largest: the
/// bound past which no entry can be among the first `limit`.
struct Smallest {
    state: Mutex<SmallestState>,
    /// Bumped whenever `bound` changes, so threads re-read it only then.
    generation: AtomicUsize,
    /// This search's number (see `BOUND_SEEN`).
    id: usize,
    limit: usize,
}

struct SmallestState {
    heap: BinaryHeap<Found>,
    bound: Option<Arc<Path>>,
}

impl Smallest {
    fn new(limit: usize) -> Smallest {
        Smallest {
            state: Mutex::new(SmallestState {
                heap: BinaryHeap::new(),
                bound: None,
            }),
            generation: AtomicUsize::new(0),
            id: SEARCH_IDS.fetch_add(1, AtomicOrdering::Relaxed),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SmallestState> {
        // A panicking visitor cannot leave the heap inconsistent: recover it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, m: Found) {
        let mut state = self.lock();
        state.heap.push(m);
        if state.heap.len() > self.limit {
            state.heap.pop();
        }
        if state.heap.len() == self.limit {
            let max = state.heap.peek().map(|(max, _)| Arc::from(max.as_path()));
            state.bound = max;
            self.generation.fetch_add(1, AtomicOrdering::Release);
        }
    }

    /// Whether `rel` comes after all of the `limit` matches held. Each
    /// thread keeps a copy of the bound and re-reads it only when it changed.
    fn is_beyond(&self, rel: &Path) -> bool {
        let now = self.generation.load(AtomicOrdering::Acquire);
        if now == 0 {
            return false;
        }
        BOUND_SEEN.with(|seen| {
            let mut seen = seen.borrow_mut();
            if seen.0 != self.id || seen.1 != now {
                *seen = (self.id, now, self.lock().bound.clone());
            }
            seen.2.as_deref().is_some_and(|max| rel > max)
        })
    }

    fn into_sorted(self) -> Vec<Found> {
        let state = self.state.into_inner().unwrap_or_else(|e| e.into_inner());
        state.heap.into_sorted_vec()
    }
}

/// Numbers searches, so a thread's cached bound is never taken for another's.
static SEARCH_IDS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's copy of a search's bound: (search id, generation, bound).
    static BOUND_SEEN: std::cell::RefCell<(usize, usize, Option<Arc<Path>>)> =
        const { std::cell::RefCell::new((usize::MAX, 0, None)) };
}

/// `entry`'s path relative to the search directory. Walk paths are the
/// directory joined with names, so this is a cut, not a component-wise strip
/// (it runs for every entry).
fn relative<'a>(dir: &Path, entry: &'a DirEntry) -> &'a Path {
    let path = entry.path().as_os_str().as_bytes();
    let dir = dir.as_os_str().as_bytes();
    match path.strip_prefix(dir) {
        Some([b'/', rest @ ..]) => Path::new(OsStr::from_bytes(rest)),
        Some(rest) if dir.ends_with(b"/") => Path::new(OsStr::from_bytes(rest)),
        _ => entry.path(),
    }
}

/// The last component of a relative walk path, as bytes.
fn file_name(rel: &Path) -> &[u8] {
    let bytes = rel.as_os_str().as_bytes();
    bytes.rsplit(|&b| b == b'/').next().unwrap_or(bytes)
}

fn matched(pattern: &Pattern, dir: &Path, entry: &DirEntry) -> Option<Found> {
    let rel = relative(dir, entry);
    pattern.is_match(rel).then(|| {
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        (rel.to_path_buf(), is_dir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn run(t: &tempfile::TempDir, pattern: &str, ignore: &[&str], limit: usize) -> Vec<String> {
        let sequential = run_with(t, pattern, ignore, limit, usize::MAX);
        // The parallel walker must give exactly the sorted walk's answer.
        assert_eq!(
            run_with(t, pattern, ignore, limit, 0),
            sequential,
            "{pattern} {limit}"
        );
        sequential
    }

    fn run_with(
        t: &tempfile::TempDir,
        pattern: &str,
        ignore: &[&str],
        limit: usize,
        budget: usize,
    ) -> Vec<String> {
        let root = Root::open(t.path(), Some(Path::new("/ws"))).unwrap();
        let ignore: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
        let search = Search {
            pattern,
            ignore: &ignore,
            limit,
        };
        glob_with_budget(&root, Path::new("/ws"), &search, budget)
            .unwrap()
            .into_iter()
            .map(|p| p.into_string().unwrap())
            .collect()
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
    fn both_walkers_keep_path_order_and_limit_cuts() {
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
        let Err(FindError::Glob(msg)) = glob(&root, t.path(), &search) else {
            panic!("expected a glob error");
        };
        assert!(msg.contains("\"[abc\""), "{msg}");
        let outside = Search {
            pattern: "*",
            ignore: &[],
            limit: 1,
        };
        assert_eq!(
            glob(&root, Path::new("/"), &outside),
            Err(FindError::Root(FsError::Outside))
        );
        assert_eq!(exists(&root, Path::new("/")), Err(FsError::Outside));
        assert_eq!(exists(&root, &t.path().join("missing")), Ok(false));
    }
}
