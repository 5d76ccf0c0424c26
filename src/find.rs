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
//! ordering. A short sorted sequential walk answers searches that reach the
//! limit early; otherwise the whole tree is walked in parallel and sorted.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use ignore::{DirEntry, WalkState};

use crate::root::{FsError, Root};
use crate::walk;

/// Entries the sequential walk may visit before handing over to the
/// parallel one: enough for dense patterns to fill pi's default limit
/// (1000) without walking a large tree, little enough that a sparse
/// pattern loses almost nothing by starting over in parallel.
const SEQUENTIAL_BUDGET: usize = 4096;

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
            Target::FileName(m) => rel.file_name().is_some_and(|n| m.is_match(n)),
            Target::RelativePath(m) => m.is_match(rel),
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

/// The pruning globs, matched case-sensitively against relative paths.
fn ignore_set(globs: &[String]) -> Result<GlobSet, FindError> {
    let mut set = GlobSetBuilder::new();
    for raw in globs {
        let g = strip_dot_slash(raw);
        let build = |g: &str| -> Result<Glob, FindError> {
            GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .map_err(|e| glob_error(raw, &e))
        };
        set.add(build(g)?);
        // `node_modules/**` means "nothing of node_modules": the directory
        // itself goes too, as with the `glob` package pi used before fd.
        if let Some(dir) = g.strip_suffix("/**").filter(|d| !d.is_empty()) {
            set.add(build(dir)?);
        }
    }
    set.build().map_err(|e| FindError::Glob(e.to_string()))
}

/// A match: the path relative to the search directory, and whether it is a
/// directory (symlinks are never directories here: they are not followed).
type Found = (PathBuf, bool);

/// Runs a search in `cwd` (an absolute runtime or host path inside `root`)
/// and returns absolute runtime paths, directories with a trailing `/`.
pub fn glob(root: &Root, cwd: &Path, search: &Search<'_>) -> Result<Vec<OsString>, FindError> {
    let dir = root.resolve_dir(cwd)?;
    let base = runtime_base(root, cwd, &dir);
    let pattern = Pattern::new(search.pattern, base.clone())?;
    let ignore = ignore_set(search.ignore)?;
    if search.limit == 0 {
        return Ok(Vec::new());
    }
    let found = walk_matches(&dir, Arc::new(pattern), Arc::new(ignore), search.limit);
    Ok(found
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
        Err(FsError::Io(_)) => Ok(false),
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

/// The first `limit` matches below `dir` in path order.
fn walk_matches(dir: &Path, pattern: Arc<Pattern>, ignore: Arc<GlobSet>, limit: usize) -> Vec<Found> {
    let mut builder = walk::builder(dir);
    if !ignore.is_empty() {
        let root = dir.to_path_buf();
        builder.filter_entry(move |e| !is_ignored(&ignore, &root, e));
    }

    // Sorted sequential walk: path order as it goes, stops at the limit.
    let mut found = Vec::new();
    let mut visited = 0;
    for entry in builder.build() {
        // Unreadable directories and vanished entries are skipped, as fd does.
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        if let Some(m) = matched(&pattern, dir, &entry) {
            found.push(m);
            if found.len() == limit {
                return found;
            }
        }
        visited += 1;
        if visited == SEQUENTIAL_BUDGET {
            return walk_parallel(&builder, dir, pattern, limit);
        }
    }
    found
}

/// Walks the whole tree on all cores, then sorts into path order.
fn walk_parallel(
    builder: &ignore::WalkBuilder,
    dir: &Path,
    pattern: Arc<Pattern>,
    limit: usize,
) -> Vec<Found> {
    let (tx, rx) = mpsc::channel::<Vec<Found>>();
    builder.build_parallel().run(|| {
        let mut batch = Batch {
            found: Vec::new(),
            tx: tx.clone(),
        };
        let pattern = pattern.clone();
        let dir = dir.to_path_buf();
        Box::new(move |entry| {
            if let Ok(entry) = entry {
                if entry.depth() > 0 {
                    if let Some(m) = matched(&pattern, &dir, &entry) {
                        batch.found.push(m);
                    }
                }
            }
            WalkState::Continue
        })
    });
    drop(tx);
    let mut found: Vec<Found> = rx.into_iter().flatten().collect();
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    found.truncate(limit);
    found
}

/// One walker thread's matches, handed over when the thread's visitor is dropped.
struct Batch {
    found: Vec<Found>,
    tx: mpsc::Sender<Vec<Found>>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        // The receiver outlives every visitor; a failed send cannot happen.
        let _ = self.tx.send(std::mem::take(&mut self.found));
    }
}

fn relative<'a>(dir: &Path, entry: &'a DirEntry) -> &'a Path {
    entry.path().strip_prefix(dir).unwrap_or(entry.path())
}

fn matched(pattern: &Pattern, dir: &Path, entry: &DirEntry) -> Option<Found> {
    let rel = relative(dir, entry);
    pattern.is_match(rel).then(|| {
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        (rel.to_path_buf(), is_dir)
    })
}

fn is_ignored(ignore: &GlobSet, dir: &Path, entry: &DirEntry) -> bool {
    entry.depth() > 0 && ignore.is_match(relative(dir, entry))
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
        let root = Root::open(t.path(), Some(Path::new("/ws"))).unwrap();
        let ignore: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
        let search = Search {
            pattern,
            ignore: &ignore,
            limit,
        };
        glob(&root, Path::new("/ws"), &search)
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
            ["/ws/c.ts", "/ws/pkg/src/b.ts", "/ws/src/a.ts", "/ws/src/d/e.ts"]
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
        assert_eq!(run(&t, "*", &["**/node_modules/**"], 10), ["/ws/src/", "/ws/y.js"]);
    }

    #[test]
    fn parallel_walk_gives_the_same_order() {
        let files: Vec<String> = (0..SEQUENTIAL_BUDGET + 500)
            .map(|i| format!("d{}/f{}.rs", i % 37, i))
            .collect();
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let t = tree(&refs);
        // Sparse matches: the sequential budget runs out, the parallel walk answers.
        let sparse = run(&t, "f1*.rs", &[], usize::MAX);
        let mut sorted = sparse.clone();
        sorted.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
        assert_eq!(sparse, sorted);
        let count = files.iter().filter(|f| f.contains("/f1")).count();
        assert_eq!(sparse.len(), count);
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
