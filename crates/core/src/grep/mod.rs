//! In-process grep with pi 1.6.0 / ripgrep 15 semantics (docs "grep").
//!
//! The shared ordered walk (`walk`) searches files on every core and hands
//! each file's lines, in path order, to pi's output logic
//! (`text::Collector`); when that has enough, the walk stops, so a search
//! that reaches its limit in the first files never walks the rest of the tree.

mod long_lines;
mod search;
mod text;

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ignore::overrides::{Override, OverrideBuilder};

use crate::walk::{self, Entry, Kind, Rules, Visitor};

pub use search::HEAP_LIMIT;
pub use text::{show_line, OutLine, Outcome, Shown, MAX_OUTPUT_BYTES};

use search::{Engine, EngineOptions, Hit, Worker};
use text::Collector;

/// Why a search failed.
#[derive(Debug, PartialEq, Eq)]
pub enum GrepError {
    /// The regex does not compile; ripgrep's message.
    Pattern(String),
    /// The glob does not parse; ripgrep's message.
    Glob(String),
    /// The cancel flag was raised.
    Aborted,
}

/// What to search for.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub pattern: String,
    pub ignore_case: bool,
    pub literal: bool,
    /// rg `--glob`, rooted at the searched directory (leading `./` already dropped).
    pub glob: Option<String>,
    pub context: u64,
    pub limit: u64,
    /// Store output lines only while the output is under this many bytes
    /// (pi's 50 KB cut); `None` stores every line.
    pub store_cap: Option<u64>,
}

/// Where to search: a directory (walked) or one named file.
#[derive(Debug, Clone)]
pub enum Target {
    Dir(PathBuf),
    /// A file, with the name its lines are shown under.
    File(PathBuf, String),
}

/// How the search target is opened: bounded by a `Root`, or plainly. Walked
/// files are opened relative to their directory by the walk itself.
pub trait Opener: Sync {
    /// The directory to walk.
    fn open_dir(&self, path: &Path) -> io::Result<OwnedFd>;
    /// The file named as the search target.
    fn open_named(&self, path: &Path) -> io::Result<File>;
}

/// The host filesystem, unbounded.
pub struct PlainFs;

impl Opener for PlainFs {
    fn open_dir(&self, path: &Path) -> io::Result<OwnedFd> {
        use nix::fcntl::{open, OFlag};
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        Ok(open(path, flags, nix::sys::stat::Mode::empty())?)
    }
    fn open_named(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }
}

impl Opener for crate::root::Root {
    fn open_dir(&self, path: &Path) -> io::Result<OwnedFd> {
        crate::root::Root::open_dir(self, path).map_err(root_io)
    }
    fn open_named(&self, path: &Path) -> io::Result<File> {
        self.open_read(path).map_err(root_io)
    }
}

fn root_io(e: crate::root::FsError) -> io::Error {
    match e {
        crate::root::FsError::Outside => io::Error::from(io::ErrorKind::PermissionDenied),
        crate::root::FsError::Io(errno) | crate::root::FsError::Read(errno) => {
            io::Error::from_raw_os_error(errno as i32)
        }
    }
}

/// Runs the search. `cancel` may be raised from any thread. `searched`
/// counts the files whose contents the search began to read, so a caller can
/// see how far a cancelled search got.
pub fn run(
    target: &Target,
    query: &Query,
    opener: &dyn Opener,
    cancel: &AtomicBool,
    searched: &AtomicU64,
) -> Result<Outcome, GrepError> {
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
            // A directory that cannot be opened has nothing to search, as with rg.
            if let Ok(start) = opener.open_dir(dir) {
                let rules = Rules::new(dir, overrides);
                let visitor = Searching {
                    engine: &engine,
                    searched,
                };
                let mut file = 0;
                walk::walk(start, &rules, &visitor, cancel, |(rel, hits)| {
                    for hit in &hits {
                        collector.line(file, &rel, hit.number, &hit.shown, hit.is_match);
                    }
                    file += 1;
                    !collector.done()
                });
            }
        }
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(GrepError::Aborted);
    }
    Ok(collector.finish())
}

/// rg's `--glob`, matched against paths relative to the searched directory
/// (rooted at "." so that `ignore` has no prefix to strip from them).
fn overrides(glob: Option<&str>) -> Result<Option<Override>, GrepError> {
    let Some(glob) = glob else { return Ok(None) };
    let mut builder = OverrideBuilder::new(".");
    builder
        .add(glob)
        .map_err(|e| GrepError::Glob(e.to_string()))?;
    let built = builder
        .build()
        .map_err(|e| GrepError::Glob(e.to_string()))?;
    Ok(Some(built))
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
