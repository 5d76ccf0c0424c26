//! In-process grep with pi 1.6.0 / ripgrep 15 semantics (docs/contracts.md, "grep").
//!
//! The shared ordered walk (`walk`) searches files on every core and hands
//! each file's lines, in path order, to pi's output logic
//! (`text::Collector`); when that has enough, the walk stops, so a search
//! that reaches its limit in the first files never walks the rest of the tree.

// The index's candidates (Linux only, as the index).
#[cfg(target_os = "linux")]
mod listed;
mod long_lines;
mod search;
mod text;

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ignore::overrides::{Override, OverrideBuilder};

use crate::error::{Error, ErrorKind, Result};
use crate::index::Index;
use crate::root::Root;
use crate::walk::{self, Entry, Kind, Rules, Visitor};

pub use search::HEAP_LIMIT;
pub use text::{show_line, OutLine, Outcome, Shown, MAX_OUTPUT_BYTES};

pub(crate) use search::{Engine, EngineOptions, Hit, Worker};
use text::Collector;

/// What to search for.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// The regex (or the literal text with `literal`).
    pub pattern: String,
    /// Case-insensitive matching (rg `-i`).
    pub ignore_case: bool,
    /// The pattern is a literal string, not a regex (rg `-F`).
    pub literal: bool,
    /// rg `--glob`, rooted at the searched directory (leading `./` already dropped).
    pub glob: Option<String>,
    /// Lines kept before and after each match (rg `-C`).
    pub context: u64,
    /// Matches reported at most; one more proves the results were cut.
    pub limit: u64,
    /// Store output lines only while the output is under this many bytes
    /// (pi's 50 KB cut); `None` stores every line.
    pub store_cap: Option<u64>,
}

/// Where to search: a directory (walked) or one named file.
#[derive(Debug, Clone)]
pub enum Target {
    /// A directory, walked with the ignore rules.
    Dir(PathBuf),
    /// A file, with the name its lines are shown under.
    File(PathBuf, String),
}

/// How the search target is opened: bounded by a `Root`, or plainly. Walked
/// files are opened relative to their directory by the walk itself.
pub trait Opener: Sync {
    /// The directory to walk.
    fn open_dir(&self, path: &Path) -> Result<OwnedFd>;
    /// The file named as the search target.
    fn open_named(&self, path: &Path) -> Result<File>;
}

/// The host filesystem, unbounded.
pub struct PlainFs;

impl Opener for PlainFs {
    fn open_dir(&self, path: &Path) -> Result<OwnedFd> {
        use nix::fcntl::{open, OFlag};
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        Ok(open(path, flags, nix::sys::stat::Mode::empty())?)
    }
    /// Without waiting for a FIFO's writer, as `Root`'s.
    fn open_named(&self, path: &Path) -> Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        Ok(std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?)
    }
}

impl Opener for Root {
    fn open_dir(&self, path: &Path) -> Result<OwnedFd> {
        Root::open_dir(self, path)
    }
    /// Any file, a FIFO included (ripgrep searches one named as its
    /// target); opened without waiting for a writer.
    fn open_named(&self, path: &Path) -> Result<File> {
        self.open_any(path)
    }
}

/// Resolves the search path (absolute) to a target, within `root` when
/// given. A missing path is pi's `Path not found: <path>`; a path leaving the
/// root is the workspace refusal, as from the other tools, so the model is
/// not sent looking for a file. `display_name` is what a searched file's
/// lines are shown under.
pub fn target(root: Option<&Root>, path: &Path, display_name: String) -> Result<Target> {
    let (host, is_dir) = match root {
        Some(root) => root.resolve_existing(path).map_err(|e| match e.kind() {
            ErrorKind::Outside => e,
            _ => Error::path_not_found(path),
        })?,
        None => {
            let meta = std::fs::metadata(path).map_err(|_| Error::path_not_found(path))?;
            (path.to_path_buf(), meta.is_dir())
        }
    };
    Ok(if is_dir {
        Target::Dir(host)
    } else {
        Target::File(host, display_name)
    })
}

/// Runs the search. `cancel` may be raised from any thread. `searched`
/// counts the files whose contents the search began to read, so a caller can
/// see how far a cancelled search got.
///
/// ```
/// use std::sync::atomic::{AtomicBool, AtomicU64};
/// use pi_native_ops_core::grep::{self, Query};
/// use pi_native_ops_core::root::Root;
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("a.txt"), "one\nneedle two\nthree\n")?;
/// let root = Root::open(dir.path(), None)?;
/// let target = grep::target(Some(&root), dir.path(), String::new())?;
/// let query = Query { pattern: "needle".into(), limit: 100, ..Query::default() };
/// let (cancel, searched) = (AtomicBool::new(false), AtomicU64::new(0));
/// let outcome = grep::run(&target, &query, &root, &cancel, &searched, None)?;
/// assert_eq!(outcome.match_count, 1);
/// let line = &outcome.lines[0];
/// assert_eq!((&*line.path, line.line_number, &*line.text), ("a.txt", 2, "needle two"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run(
    target: &Target,
    query: &Query,
    opener: &dyn Opener,
    cancel: &AtomicBool,
    searched: &AtomicU64,
    index: Option<&Index>,
) -> Result<Outcome> {
    let engine = Engine::new(
        &query.pattern,
        EngineOptions {
            ignore_case: query.ignore_case,
            literal: query.literal,
            context: query.context,
            limit: query.limit,
        },
    )?;
    let mut collector = Collector::new(query.limit, query.context, query.store_cap);
    match target {
        Target::File(path, name) => {
            let name: Arc<str> = Arc::from(name.as_str());
            let halted = || cancel.load(Ordering::Relaxed);
            if let Ok(file) = opener.open_named(path) {
                searched.fetch_add(1, Ordering::Relaxed);
                let mut searcher = engine.searcher(false);
                for hit in engine.search_file(&mut searcher, &file, false, &halted) {
                    collector.line(0, &name, hit.number, &hit.shown, hit.is_match);
                }
            }
        }
        Target::Dir(dir) => {
            let overrides = overrides(query.glob.as_deref())?;
            let mut file = 0;
            let mut sink = |rel: &Arc<str>, hits: Vec<Hit>| {
                for hit in &hits {
                    collector.line(file, rel, hit.number, &hit.shown, hit.is_match);
                }
                file += 1;
                !collector.done()
            };
            if search_indexed(
                index,
                dir,
                query,
                overrides.as_ref(),
                &engine,
                cancel,
                searched,
                &mut sink,
            ) {
                // Answered from the index's candidates.
            } else if let Ok(start) = opener.open_dir(dir) {
                // A directory that cannot be opened has nothing to search, as with rg.
                let rules = Rules::new(dir, overrides);
                let visitor = Searching {
                    engine: &engine,
                    searched,
                };
                walk::walk(start, &rules, &visitor, cancel, |(rel, hits)| {
                    sink(&rel, hits)
                });
            }
        }
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::aborted());
    }
    Ok(collector.finish())
}

/// Searches the files in scope that the index names as candidates (in walk
/// order, so the output is the walk's), if it can answer; `false`: walk.
#[cfg(target_os = "linux")]
#[allow(clippy::too_many_arguments)]
fn search_indexed(
    index: Option<&Index>,
    dir: &Path,
    query: &Query,
    overrides: Option<&Override>,
    engine: &Engine,
    cancel: &AtomicBool,
    searched: &AtomicU64,
    sink: &mut dyn FnMut(&Arc<str>, Vec<Hit>) -> bool,
) -> bool {
    let Some(index) = index else { return false };
    let Some(found) = index.grep_files(
        dir,
        &query.pattern,
        query.ignore_case,
        query.literal,
        overrides,
    ) else {
        return false;
    };
    let open = |f: &crate::index::GrepFile| found.open(f);
    listed::search_listed(engine, &found.files, &open, cancel, searched, |f, hits| {
        sink(&f.shown, hits)
    });
    true
}

#[cfg(not(target_os = "linux"))]
#[allow(clippy::too_many_arguments)]
fn search_indexed(
    index: Option<&Index>,
    _: &Path,
    _: &Query,
    _: Option<&Override>,
    _: &Engine,
    _: &AtomicBool,
    _: &AtomicU64,
    _: &mut dyn FnMut(&Arc<str>, Vec<Hit>) -> bool,
) -> bool {
    match index {
        Some(never) => match *never {},
        None => false,
    }
}

/// rg's `--glob`, matched against paths relative to the searched directory
/// (rooted at "." so that `ignore` has no prefix to strip from them).
fn overrides(glob: Option<&str>) -> Result<Option<Override>> {
    let Some(glob) = glob else { return Ok(None) };
    let rg_error = |e: ignore::Error| Error::invalid_glob(format!("rg: {e}"));
    let mut builder = OverrideBuilder::new(".");
    builder.add(glob).map_err(rg_error)?;
    Ok(Some(builder.build().map_err(rg_error)?))
}

/// The walk's visitor: searches each file, keeping those with lines to show.
struct Searching<'a> {
    engine: &'a Engine,
    searched: &'a AtomicU64,
}

impl Visitor for Searching<'_> {
    /// A file's path relative to the searched directory, and its lines.
    type Out = (Arc<str>, Vec<Hit>);
    type Local = Worker;
    const SEARCHES_FILES: bool = true;

    fn local(&self) -> Self::Local {
        self.engine.worker()
    }

    /// Deliberate improvement over stock: git's internals are never searched.
    fn skip(&self, entry: &Entry<'_>) -> bool {
        entry.name() == ".git"
    }

    fn visit(&self, worker: &mut Self::Local, entry: &Entry<'_>) -> Option<Self::Out> {
        if entry.kind != Kind::File {
            return None;
        }
        let file = entry.open().ok()?;
        self.searched.fetch_add(1, Ordering::Relaxed);
        let hits = self.engine.search_walked(worker, &file, &|| entry.halted());
        if hits.is_empty() {
            return None;
        }
        // As pi shows rg's paths: `/` separators.
        let rel = entry.rel().to_string_lossy().replace('\\', "/");
        Some((Arc::from(rel), hits))
    }
}

#[cfg(test)]
mod tests;
