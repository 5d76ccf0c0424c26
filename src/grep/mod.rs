//! In-process grep with pi 1.6.0 / ripgrep 15 semantics (docs "grep").
//!
//! One sorted, sequential walk (the shared `walk::builder`) numbers the files;
//! a small pool of threads searches them; the caller's thread re-sequences the
//! results by number and feeds pi's output logic (`text::Collector`), so the
//! output is in path order while the search runs in parallel. A window bounds
//! how far the walk may run ahead of the output, so a search that reaches its
//! limit in the first files stops without walking the rest of the tree.

mod long_lines;
mod search;
mod text;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ignore::overrides::OverrideBuilder;

pub use search::HEAP_LIMIT;
pub use text::{show_line, OutLine, Outcome, Shown, MAX_OUTPUT_BYTES};

use search::{Engine, Hit, WholeBuffer};
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

/// How files are opened: bounded by a `Root`, or plainly.
pub trait Opener: Sync {
    /// A file the walk found (no symlink followed on the way).
    fn open_walked(&self, path: &Path) -> io::Result<File>;
    /// The same, given a search thread's cache of the last parent directory
    /// (consecutive walked files mostly share one).
    fn open_walked_cached(&self, path: &Path, _cache: &mut ParentDir) -> io::Result<File> {
        self.open_walked(path)
    }
    /// The file named as the search target.
    fn open_named(&self, path: &Path) -> io::Result<File>;
}

/// A search thread's last parent directory, kept open.
#[derive(Default)]
pub struct ParentDir(#[cfg(unix)] Option<(PathBuf, std::os::fd::OwnedFd)>);

/// The host filesystem, unbounded.
pub struct PlainFs;

impl Opener for PlainFs {
    fn open_walked(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }
    /// Opens the name relative to the cached parent: the kernel then looks up
    /// one component instead of the whole path.
    #[cfg(unix)]
    fn open_walked_cached(&self, path: &Path, cache: &mut ParentDir) -> io::Result<File> {
        use nix::fcntl::{open, openat, OFlag};
        use nix::sys::stat::Mode;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return File::open(path);
        };
        if cache
            .0
            .as_ref()
            .is_none_or(|(p, _)| p.as_os_str() != parent.as_os_str())
        {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            let base = OFlag::O_PATH;
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            let base = OFlag::O_RDONLY;
            let flags = base | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            cache.0 = None;
            let fd = open(parent, flags, Mode::empty()).map_err(io::Error::from)?;
            cache.0 = Some((parent.to_path_buf(), fd));
        }
        let Some((_, dir)) = &cache.0 else {
            return File::open(path);
        };
        let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
        Ok(openat(dir, name, flags, Mode::empty())
            .map_err(io::Error::from)?
            .into())
    }
    fn open_named(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }
}

#[cfg(unix)]
impl Opener for crate::root::Root {
    fn open_walked(&self, path: &Path) -> io::Result<File> {
        crate::root::Root::open_walked(self, path).map_err(root_io)
    }
    fn open_named(&self, path: &Path) -> io::Result<File> {
        self.open_read(path).map_err(root_io)
    }
}

#[cfg(unix)]
fn root_io(e: crate::root::FsError) -> io::Error {
    match e {
        crate::root::FsError::Outside => io::Error::from(io::ErrorKind::PermissionDenied),
        crate::root::FsError::Io(errno) | crate::root::FsError::Read(errno) => {
            io::Error::from_raw_os_error(errno as i32)
        }
    }
}

/// Files the walk may run ahead of the output.
const WINDOW: usize = 2048;
/// Files handed to a search thread at once: one channel round trip (and
/// thread wake-up) per batch instead of per file, which on small files costs
/// more than the search itself. Batches start small, so a search that reaches
/// its limit in the first files searches few files past it, and double up to
/// the largest size, so a long search wakes threads rarely.
const FIRST_BATCH: usize = 8;
const LARGEST_BATCH: usize = 128;
/// How often a waiting thread looks at the cancel flag.
const POLL: Duration = Duration::from_millis(5);

/// A searched batch: each file's relative path and hits, in path order.
type Searched = Vec<(Option<Arc<str>>, Vec<Hit>)>;

/// Search threads: the machine's cores, at most 4 (beyond that the sorted
/// walk and the re-sequencing are the bottleneck).
fn pool_size() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
}

/// The walk's progress against the output, for the look-ahead window.
struct Window {
    consumed: Mutex<usize>,
    moved: Condvar,
}

/// Runs the search. `cancel` may be raised from any thread.
pub fn run(
    target: &Target,
    query: &Query,
    opener: &dyn Opener,
    cancel: &AtomicBool,
) -> Result<Outcome, GrepError> {
    let engine = Engine::new(
        &query.pattern,
        query.ignore_case,
        query.literal,
        query.context,
        query.limit,
    )?;
    let mut collector = Collector::new(query.limit, query.context, query.store_cap);
    match target {
        Target::File(path, name) => {
            let name: Arc<str> = Arc::from(name.as_str());
            let halted = || cancel.load(Ordering::Relaxed);
            if let Ok(file) = opener.open_named(path) {
                let mut searcher = engine.searcher(false);
                for hit in engine.search_file(&mut searcher, &file, false, &halted) {
                    collector.line(0, &name, hit.number, &hit.shown, hit.is_match);
                }
            }
        }
        Target::Dir(dir) => search_dir(dir, query, &engine, opener, cancel, &mut collector)?,
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(GrepError::Aborted);
    }
    Ok(collector.finish())
}

fn walker(dir: &Path, glob: Option<&str>) -> Result<ignore::Walk, GrepError> {
    let mut builder = crate::walk::builder(dir);
    if let Some(glob) = glob {
        let mut overrides = OverrideBuilder::new(dir);
        overrides
            .add(glob)
            .map_err(|e| GrepError::Glob(e.to_string()))?;
        builder.overrides(
            overrides
                .build()
                .map_err(|e| GrepError::Glob(e.to_string()))?,
        );
    }
    // Deliberate improvement over stock: git's internals are never searched.
    builder.filter_entry(|e| e.depth() == 0 || e.file_name() != ".git");
    Ok(builder.build())
}

fn search_dir(
    dir: &Path,
    query: &Query,
    engine: &Engine,
    opener: &dyn Opener,
    cancel: &AtomicBool,
    collector: &mut Collector,
) -> Result<(), GrepError> {
    let walk = walker(dir, query.glob.as_deref())?;
    let stop = AtomicBool::new(false);
    let halted = || stop.load(Ordering::Relaxed) || cancel.load(Ordering::Relaxed);
    let window = Window {
        consumed: Mutex::new(0),
        moved: Condvar::new(),
    };
    let threads = pool_size();
    // A batch is consecutive files in path order, numbered from its first index.
    let (work_tx, work_rx) = mpsc::sync_channel::<(usize, Vec<PathBuf>)>(threads * 2);
    let work_rx = Mutex::new(work_rx);
    let (done_tx, done_rx) = mpsc::channel::<(usize, Searched)>();

    std::thread::scope(|scope| {
        // The walk: numbers files in path order, never more than WINDOW ahead.
        scope.spawn(|| {
            // Owned here, so the searchers see the channel close when the walk ends.
            let work_tx = work_tx;
            let mut first = 0usize;
            let mut size = FIRST_BATCH;
            let mut batch = Vec::with_capacity(size);
            let send = |first: &mut usize, batch: &mut Vec<PathBuf>, size: &mut usize| {
                let mut consumed = window.consumed.lock().unwrap_or_else(|e| e.into_inner());
                while *first >= *consumed + WINDOW && !halted() {
                    consumed = window
                        .moved
                        .wait_timeout(consumed, POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                drop(consumed);
                *size = (*size * 2).min(LARGEST_BATCH);
                let files = std::mem::replace(batch, Vec::with_capacity(*size));
                let n = files.len();
                let sent = work_tx.send((*first, files)).is_ok();
                *first += n;
                sent
            };
            for entry in walk {
                if halted() {
                    return;
                }
                let Ok(entry) = entry else { continue };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                batch.push(entry.into_path());
                if batch.len() == size && !send(&mut first, &mut batch, &mut size) {
                    return;
                }
            }
            if !batch.is_empty() {
                send(&mut first, &mut batch, &mut size);
            }
        });
        for _ in 0..threads {
            let done_tx = done_tx.clone();
            let (work_rx, halted) = (&work_rx, &halted);
            scope.spawn(move || {
                let mut searcher = engine.searcher(true);
                let mut buf = WholeBuffer::default();
                let mut parent = ParentDir::default();
                loop {
                    let next = work_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok((first, paths)) = next else { break };
                    let mut results = Vec::with_capacity(paths.len());
                    for path in paths {
                        if halted() {
                            return;
                        }
                        let hits = match opener.open_walked_cached(&path, &mut parent) {
                            Ok(file) => {
                                engine.search_walked(&mut searcher, &file, &mut buf, halted)
                            }
                            Err(_) => Vec::new(),
                        };
                        // Only files with lines to show need their name.
                        let rel = if hits.is_empty() {
                            None
                        } else {
                            let rel = path.strip_prefix(dir).unwrap_or(&path);
                            Some(Arc::from(rel.to_string_lossy().replace('\\', "/")))
                        };
                        results.push((rel, hits));
                    }
                    if done_tx.send((first, results)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done_tx);

        // Output in file order.
        let mut pending: BTreeMap<usize, Searched> = BTreeMap::new();
        let mut next = 0usize;
        'output: while !collector.done() && !cancel.load(Ordering::Relaxed) {
            match done_rx.recv_timeout(POLL) {
                Ok((first, results)) => {
                    pending.insert(first, results);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            while let Some(results) = pending.remove(&next) {
                for (rel, hits) in results {
                    if let Some(rel) = &rel {
                        for hit in &hits {
                            collector.line(next, rel, hit.number, &hit.shown, hit.is_match);
                        }
                    }
                    next += 1;
                    if collector.done() {
                        break 'output;
                    }
                }
            }
            *window.consumed.lock().unwrap_or_else(|e| e.into_inner()) = next;
            window.moved.notify_all();
        }
        stop.store(true, Ordering::Relaxed);
        window.moved.notify_all();
        // Unblock searchers waiting for work so the scope can end.
        drop(done_rx);
        while work_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_recv()
            .is_ok()
        {}
    });
    Ok(())
}

#[cfg(test)]
mod tests;
