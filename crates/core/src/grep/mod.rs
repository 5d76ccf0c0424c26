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
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::overrides::{Override, OverrideBuilder};

use crate::cancel::Cancel;
use crate::error::{Error, ErrorKind, Result};
use crate::index::Index;
use crate::policy::Policy;
use crate::root::Root;
use crate::walk::{self, DirHandle, Entry, Kind, Rules, Visitor};

pub use search::HEAP_LIMIT;
pub use text::{show_line, OutLine, Outcome, Shown, MAX_LINE_UNITS, MAX_OUTPUT_BYTES};

pub(crate) use search::{Engine, EngineOptions, Found, Worker};
use text::Collector;

/// pi's grep tool's `limit` when none is given (pi 1.6.0's `DEFAULT_LIMIT`).
pub const DEFAULT_LIMIT: u64 = 100;

/// The largest count a request keeps: 2^53 - 1, the largest integer a JS
/// number holds exactly (`Number.MAX_SAFE_INTEGER`), so the limit a face
/// reports back is exact; no file has more lines or bytes than that.
pub const MAX_COUNT: u64 = (1 << 53) - 1;

/// A grep request as every face receives it: the search path, and the
/// options absent or as given, numbers as JS numbers. `Query::new` decides
/// every default and bound, `search` runs it. The napi binding converts its
/// `GrepOptions` into this; the server reads it off the wire as it is
/// (`serde` feature: the keys in camelCase, numbers also as the strings
/// `"Infinity"`, `"-Infinity"`, `"NaN"`, docs/protocol.md).
#[derive(Debug, Clone, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "camelCase")
)]
pub struct RawQuery {
    /// The regex (or the literal text with `literal`).
    pub pattern: String,
    /// Absolute path of the directory or file to search.
    pub path: String,
    /// The name a searched file's lines are shown under (when `path` is a file).
    pub display_name: String,
    /// Case-insensitive matching (rg `-i`).
    #[cfg_attr(feature = "serde", serde(default))]
    pub ignore_case: bool,
    /// The pattern is a literal string, not a regex (rg `-F`).
    #[cfg_attr(feature = "serde", serde(default))]
    pub literal: bool,
    /// rg `--glob`; empty is none.
    #[cfg_attr(feature = "serde", serde(default))]
    pub glob: Option<String>,
    /// Lines of context; absent, NaN or not positive is none.
    #[cfg_attr(
        feature = "serde",
        serde(default, deserialize_with = "crate::js_number::option")
    )]
    pub context: Option<f64>,
    /// Matches at most; absent or NaN is `DEFAULT_LIMIT`, at least 1.
    #[cfg_attr(
        feature = "serde",
        serde(default, deserialize_with = "crate::js_number::option")
    )]
    pub limit: Option<f64>,
    /// Store output lines only while the output is under this many bytes
    /// (the tool gives `MAX_OUTPUT_BYTES`, pi's cut).
    #[cfg_attr(feature = "serde", serde(default))]
    pub store_cap: Option<f64>,
}

/// What to search for, defaults and bounds applied (built by `Query::new`).
#[derive(Debug, Clone)]
pub struct Query {
    pub(crate) pattern: String,
    pub(crate) ignore_case: bool,
    pub(crate) literal: bool,
    /// rg `--glob`, rooted at the searched directory (leading `./` dropped).
    pub(crate) glob: Option<String>,
    pub(crate) context: u64,
    /// At least 1.
    pub(crate) limit: u64,
    /// Store output lines only while the output is under this many bytes
    /// (pi's 50 KB cut); `None` stores every line.
    pub(crate) store_cap: Option<u64>,
}

/// A count from a JS number: floored, NaN and anything not positive 0,
/// at most `MAX_COUNT` (so infinity is `MAX_COUNT`).
fn count(v: f64) -> u64 {
    if v > 0.0 {
        // `as` saturates; NaN never gets here.
        (v.floor() as u64).min(MAX_COUNT)
    } else {
        0
    }
}

impl Query {
    /// The one place grep's options get their defaults and bounds, for
    /// every face.
    pub fn new(raw: RawQuery) -> Query {
        Query {
            pattern: raw.pattern,
            ignore_case: raw.ignore_case,
            literal: raw.literal,
            // rg never matches a leading "./", so pi drops it; "!" negates.
            glob: raw
                .glob
                .filter(|g| !g.is_empty())
                .map(|g| strip_dot_slash(&g)),
            context: raw.context.map_or(0, count),
            limit: match raw.limit {
                Some(l) if !l.is_nan() => count(l).max(1),
                _ => DEFAULT_LIMIT,
            },
            store_cap: raw.store_cap.map(count),
        }
    }

    /// The match limit (at least 1).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Lines of context around each match.
    pub fn context(&self) -> u64 {
        self.context
    }

    /// The `--glob`, as rg is given it.
    pub fn glob(&self) -> Option<&str> {
        self.glob.as_deref()
    }
}

impl Default for Query {
    /// Every option absent: `Query::new` of an empty pattern.
    fn default() -> Query {
        Query::new(RawQuery::default())
    }
}

/// `glob` without the `./` prefixes after an optional leading `!`
/// (the JS `glob.replace(/^(!?)(?:\.\/)+/, "$1")` pi applies).
fn strip_dot_slash(glob: &str) -> String {
    let (bang, mut rest) = match glob.strip_prefix('!') {
        Some(rest) => ("!", rest),
        None => ("", glob),
    };
    while let Some(r) = rest.strip_prefix("./") {
        rest = r;
    }
    format!("{bang}{rest}")
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
    fn open_dir(&self, path: &Path) -> Result<DirHandle>;
    /// The file named as the search target.
    fn open_named(&self, path: &Path) -> Result<File>;
    /// The workspace policy and the root's host path, for a bounded opener.
    fn policy(&self) -> Option<(&Arc<Policy>, &Path)> {
        None
    }
}

/// The host filesystem, unbounded.
pub struct PlainFs;

#[cfg(unix)]
impl Opener for PlainFs {
    fn open_dir(&self, path: &Path) -> Result<DirHandle> {
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

/// On Windows the directory is opened as a root of its own: the walk's
/// handles need one, and the walk never leaves it anyway.
#[cfg(windows)]
impl Opener for PlainFs {
    fn open_dir(&self, path: &Path) -> Result<DirHandle> {
        Root::open(path, None)?.open_dir(path)
    }
    /// Windows has no FIFO to wait on: a plain open.
    fn open_named(&self, path: &Path) -> Result<File> {
        Ok(File::open(path)?)
    }
}

impl Opener for Root {
    fn open_dir(&self, path: &Path) -> Result<DirHandle> {
        Root::open_dir(self, path)
    }
    fn policy(&self) -> Option<(&Arc<Policy>, &Path)> {
        Root::policy(self).map(|p| (p, self.host()))
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
            ErrorKind::Outside | ErrorKind::Protected => e,
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

/// The one grep entry point of every face: `raw`'s target resolved (within
/// `root` when given, else on the host), its options given their defaults
/// and bounds (`Query::new`), the search run (reading `index` when it can
/// answer). `cancel` may be raised from any thread; its progress counts the
/// files whose contents the search began to read, so a caller can see how far
/// a cancelled search got. A cancelled search fails with `Aborted`.
///
/// ```
/// use pi_native_ops_core::grep::{self, RawQuery};
/// use pi_native_ops_core::root::Root;
/// use pi_native_ops_core::Cancel;
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("a.txt"), "one\nneedle two\nthree\n")?;
/// let root = Root::open(dir.path(), None)?;
/// let request = RawQuery {
///     pattern: "needle".into(),
///     path: dir.path().to_string_lossy().into_owned(),
///     ..RawQuery::default()
/// };
/// let cancel = Cancel::new();
/// let outcome = grep::search(Some(&root), request, &cancel, None)?;
/// assert_eq!((outcome.match_count, outcome.limit), (1, grep::DEFAULT_LIMIT));
/// assert_eq!(cancel.files_searched(), 1);
/// let line = &outcome.lines[0];
/// assert_eq!((&*line.path, line.line_number, &*line.text), ("a.txt", 2, "needle two"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn search(
    root: Option<&Root>,
    raw: RawQuery,
    cancel: &Cancel,
    index: Option<&Index>,
) -> Result<Outcome> {
    let target = target(root, Path::new(&raw.path), raw.display_name.clone())?;
    let query = Query::new(raw);
    let opener: &dyn Opener = match root {
        Some(root) => root,
        None => &PlainFs,
    };
    run(&target, &query, opener, cancel, index)
}

/// Runs the search of a resolved `target` (`search` is the faces' entry).
/// `cancel` as `search`'s.
pub fn run(
    target: &Target,
    query: &Query,
    opener: &dyn Opener,
    cancel: &Cancel,
    index: Option<&Index>,
) -> Result<Outcome> {
    let engine = Engine::new(
        &query.pattern,
        EngineOptions {
            ignore_case: query.ignore_case,
            literal: query.literal,
            context: query.context,
            limit: query.limit,
            store_cap: query.store_cap,
        },
    )?;
    let mut collector = Collector::new(query.limit, query.context, query.store_cap);
    let halted = || cancel.is_cancelled();
    match target {
        Target::File(path, name) => {
            let name: Arc<str> = Arc::from(name.as_str());
            if let Ok(file) = opener.open_named(path) {
                cancel.file_begun();
                let mut searcher = engine.searcher(false);
                // Straight into the collector: nothing of the file is held.
                engine.search_file(&mut searcher, &file, false, &halted, &mut |hit| {
                    collector.line(0, &name, hit.number, &hit.shown, hit.is_match);
                    !collector.done()
                });
            }
        }
        Target::Dir(dir) => {
            let overrides = overrides(query.glob.as_deref())?;
            let mut file = 0;
            // For searching a file again; made on first use.
            let mut worker = None;
            let mut sink = |rel: &Arc<str>, found: Found| {
                for hit in &found.hits.hits {
                    collector.line(file, rel, hit.number, &hit.shown, hit.is_match);
                }
                if let (Some(rest), Some(f)) = (&found.hits.rest, &found.file) {
                    if !collector.rest(file, rel, rest) {
                        // The limit falls among the summed lines: their
                        // outcome depends on each, so the file is searched
                        // again, its lines after the kept ones fed one by one.
                        let worker = worker.get_or_insert_with(|| engine.worker());
                        engine.stream_walked(worker, f, &halted, &mut |hit| {
                            if hit.number > rest.after {
                                collector.line(file, rel, hit.number, &hit.shown, hit.is_match);
                            }
                            !collector.done()
                        });
                    }
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
                &mut sink,
            ) {
                // Answered from the index's candidates.
            } else if let Ok(start) = opener.open_dir(dir) {
                // A directory that cannot be opened has nothing to search, as with rg.
                let rules = match opener.policy() {
                    Some((policy, host)) => {
                        let from_root = walk::start_in_root(host, dir, &start);
                        Rules::new(dir, overrides).with_policy(Some(policy), &from_root)
                    }
                    None => Rules::new(dir, overrides),
                };
                let visitor = Searching {
                    engine: &engine,
                    cancel,
                };
                walk::walk(start, &rules, &visitor, cancel, |(rel, found)| {
                    sink(&rel, found)
                });
            }
        }
    }
    if cancel.is_cancelled() {
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
    cancel: &Cancel,
    sink: &mut dyn FnMut(&Arc<str>, Found) -> bool,
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
    listed::search_listed(engine, &found.files, &open, cancel, |f, hits| {
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
    _: &Cancel,
    _: &mut dyn FnMut(&Arc<str>, Found) -> bool,
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
    /// Counts the files begun.
    cancel: &'a Cancel,
}

impl Visitor for Searching<'_> {
    /// A file's path relative to the searched directory, and its lines.
    type Out = (Arc<str>, Found);
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
        self.cancel.file_begun();
        let found = self.engine.search_walked(worker, file, &|| entry.halted());
        if found.hits.is_empty() {
            return None;
        }
        // As pi shows rg's paths: `/` separators.
        let rel = entry.rel().to_string_lossy().replace('\\', "/");
        Some((Arc::from(rel), found))
    }

    /// What the walk holds of an output while it waits to be handed on.
    fn held(out: &Self::Out) -> usize {
        out.0.len() + out.1.hits.held
    }
}

#[cfg(test)]
mod tests;
