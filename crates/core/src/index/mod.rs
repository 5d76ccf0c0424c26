//! Warm search: a cached walk, n-gram posting lists and inotify watches that
//! let find and grep read only the files that can match, and never serve a
//! stale answer (see docs/index.md).
//!
//! One background thread per index builds it (watch, list, read, n-grams),
//! then waits on the inotify descriptor and a waker, applies events and
//! re-indexes changed files. Every search first drains the inotify queue and
//! applies what it holds under the index lock, then answers from the tree;
//! whenever the index cannot answer exactly (not ready, stepped aside, a walk
//! that would enter an unindexed directory) the caller walks live.
//!
//! Here: the API and the state shared with the thread. `thread` runs the
//! thread; `tree` is the cached walk, `watch` its inotify; `reader` reads a
//! file, `grams` and `content` keep its n-grams; `query` turns a pattern into
//! a query over them and `grep_scope` into grep's files.

mod cache;
mod content;
mod grams;
mod grep_scope;
mod query;
mod reader;
mod thread;
mod tree;
mod watch;

#[cfg(test)]
mod tests;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::root::Root;
pub use cache::{default_cache_dir, DEFAULT_CACHE_MAX_BYTES};
use content::Content;
use grams::RawBloom;
pub(crate) use grep_scope::GrepFile;
use tree::Tree;
pub(crate) use tree::{Child, DirNode, NameFilter, TreeSearch};
use watch::Waker;

/// How an index is built.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Directories watched at most (beyond it the index steps aside);
    /// `None`: only the kernel's limit (`fs.inotify.max_user_watches`).
    pub max_watches: Option<usize>,
    /// Larger files are not indexed but always searched.
    pub max_file_bytes: u64,
    /// Files at least this large also get an exact 5-gram filter
    /// (`RawBloom`), after the build.
    pub exact_min_bytes: u64,
    /// Where the index is saved when it closes and read back (checked
    /// against the tree) when it starts: `None`, never saved.
    pub cache_dir: Option<std::path::PathBuf>,
    /// The cache directory's files add up to at most this many bytes (the
    /// least recently saved go first).
    pub cache_max_bytes: u64,
}

/// Files larger than this are always searched instead of indexed, so read
/// by every search: 64 MiB indexes generated sources of tens of MB (the
/// kernel's largest header is 24 MB, which unindexed cost each search more
/// than the rest of it), while the build's read buffer, which holds one
/// file, stays bounded. A file's postings are bounded by the gram space
/// whatever its size, so large files cost the index little memory.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

/// Files from 256 KiB up get an exact 5-gram filter: a third of the
/// kernel's bytes in 263 files, among them the generated register headers
/// whose folded grams make them candidates for most lower-case names, at
/// a filter of 1/64 to 1/32 of their size.
pub const DEFAULT_EXACT_MIN_BYTES: u64 = 256 << 10;

/// This target keeps an index: `None`. Elsewhere the reason it does not,
/// which every face reports as the stats of an index that stays aside.
pub const UNSUPPORTED: Option<&str> = None;

impl IndexOptions {
    /// The options as a face receives them: JS numbers, absent ones the
    /// defaults; `as` saturates a huge or negative one.
    pub fn from_raw(max_watches: Option<f64>, max_file_bytes: Option<f64>) -> IndexOptions {
        let defaults = IndexOptions::default();
        IndexOptions {
            max_watches: max_watches.map(|n| n as usize).or(defaults.max_watches),
            max_file_bytes: max_file_bytes.map_or(defaults.max_file_bytes, |n| n as u64),
            ..defaults
        }
    }
}

/// Where a face asks the index to be kept between sessions.
#[derive(Debug, Clone, Copy)]
pub enum CacheAt<'a> {
    /// `default_cache_dir()`.
    Default,
    /// This directory.
    Dir(&'a Path),
}

impl IndexOptions {
    /// The options with the index kept in `cache` between sessions (`None`:
    /// not kept), the cache directory holding at most `max_bytes` (absent:
    /// the default; a JS number, saturated).
    pub fn with_cache(
        mut self,
        cache: Option<CacheAt<'_>>,
        max_bytes: Option<f64>,
    ) -> IndexOptions {
        self.cache_dir = match cache {
            None => None,
            Some(CacheAt::Default) => default_cache_dir(),
            Some(CacheAt::Dir(dir)) => Some(dir.to_path_buf()),
        };
        if let Some(max) = max_bytes {
            self.cache_max_bytes = max as u64;
        }
        self
    }
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            max_watches: None,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            exact_min_bytes: DEFAULT_EXACT_MIN_BYTES,
            cache_dir: None,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Where an index is in its life (`stats().state`).
pub enum IndexState {
    /// The first build (or a rebuild) is under way: searches walk live.
    Building,
    /// Built and kept fresh: searches read only the files that can match.
    Ready,
    /// Stepped aside (see `Stats::reason`): searches walk live until a rebuild.
    Aside,
    /// Closed: searches walk live for good.
    Closed,
}

impl IndexState {
    /// The state's name as the faces show it (`"ready"`).
    pub fn as_str(self) -> &'static str {
        match self {
            IndexState::Building => "building",
            IndexState::Ready => "ready",
            IndexState::Aside => "aside",
            IndexState::Closed => "closed",
        }
    }
}

#[derive(Debug, Clone)]
/// An index's figures, as `Index::stats` reports them.
pub struct Stats {
    /// Where the index is.
    pub state: IndexState,
    /// Why the index stepped aside.
    pub reason: Option<String>,
    /// Files in indexed directories (not ignored).
    pub files: u64,
    /// Indexed directories.
    pub directories: u64,
    /// Bytes of the files whose n-grams are indexed.
    pub bytes_indexed: u64,
    /// Heap bytes the index holds, roughly (allocator overhead left out).
    pub memory_bytes: u64,
    /// The last completed (re)build, in milliseconds.
    pub build_ms: f64,
    /// When events were last applied (Unix time, milliseconds).
    pub last_refresh_unix_ms: Option<f64>,
    /// Files changed since they were read, searched by every grep until re-read.
    pub dirty_files: u64,
    /// Large files whose exact filter the thread has still to make (read
    /// by every search their folded grams allow until then): 0 once warm.
    pub unfiltered_files: u64,
    /// inotify watches held.
    pub watches: u64,
    /// Files of the last build whose content came from the cache file
    /// (their stamps unchanged), not read.
    pub restored_files: u64,
    /// What the last build made of the cache file (`None`: no cache):
    /// `"restored"`, or why it was not used (`"none saved"`, `"checksum
    /// mismatch"`, ...).
    pub cache: Option<String>,
}

/// A warm search index of one workspace root. Clones share it; dropping
/// the last one closes it.
#[derive(Clone)]
pub struct Index {
    handle: Arc<Handle>,
}

/// Closes the index when the last `Index` goes (the thread holds `Inner`,
/// not this).
struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.close();
    }
}

struct Inner {
    root: Arc<Root>,
    options: IndexOptions,
    shared: Mutex<Shared>,
    /// Signalled when the state changes (for `wait_ready`).
    changed: Condvar,
    waker: Option<Waker>,
    closing: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Tests: the thread leaves events to the searches, so that freshness
    /// is proven by a search's own drain, not by the thread winning a race.
    #[cfg(test)]
    paused: AtomicBool,
}

struct Shared {
    state: IndexState,
    reason: Option<String>,
    /// Present once built; dropped only by the index's thread (which polls
    /// its inotify descriptor without the lock).
    live: Option<Live>,
    build_ms: f64,
    last_refresh_unix_ms: Option<f64>,
    unfiltered_files: u64,
    restored_files: u64,
    cache: Option<String>,
}

struct Live {
    tree: Tree,
    content: Content,
    /// The root directory's identity when built (`Root::identity`): a
    /// workspace replaced since is one the tree never saw.
    root_id: (u64, u64),
}

impl Index {
    /// Starts building in the background; never fails (problems show in
    /// `stats()` and searches walk live).
    ///
    /// ```
    /// use std::path::Path;
    /// use std::sync::Arc;
    /// use pi_native_ops_core::find::{self, Search};
    /// use pi_native_ops_core::index::{Index, IndexOptions, IndexState};
    /// use pi_native_ops_core::root::Root;
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("a.rs"), "fn main() {}\n")?;
    /// let root = Arc::new(Root::open(dir.path(), Some(Path::new("/w")))?);
    /// let index = Index::start(root.clone(), IndexOptions::default());
    /// let stats = index.wait_ready();
    /// assert_eq!((stats.state, stats.files), (IndexState::Ready, 1));
    /// // A file made after the build is seen by the next search.
    /// std::fs::write(dir.path().join("b.rs"), "")?;
    /// let search = Search::new("*.rs", &[], Some(10.0));
    /// let found = find::glob(&root, Path::new("/w"), &search, Some(&index))?;
    /// assert_eq!(found, ["/w/a.rs", "/w/b.rs"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start(root: Arc<Root>, options: IndexOptions) -> Index {
        let waker = Waker::new().ok();
        let failed = waker.is_none();
        let inner = Arc::new(Inner {
            root,
            options,
            shared: Mutex::new(Shared {
                state: if failed {
                    IndexState::Aside
                } else {
                    IndexState::Building
                },
                reason: failed.then(|| "eventfd unavailable".to_string()),
                live: None,
                build_ms: 0.0,
                last_refresh_unix_ms: None,
                unfiltered_files: 0,
                restored_files: 0,
                cache: None,
            }),
            changed: Condvar::new(),
            waker,
            closing: AtomicBool::new(false),
            thread: Mutex::new(None),
            #[cfg(test)]
            paused: AtomicBool::new(false),
        });
        if !failed {
            let thread_inner = inner.clone();
            let spawned = std::thread::Builder::new()
                .name("pi-index".into())
                .spawn(move || thread_inner.run());
            match spawned {
                Ok(handle) => {
                    *inner.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle)
                }
                Err(e) => inner.set_aside(&mut inner.lock(), format!("no thread: {e}")),
            }
        }
        Index {
            handle: Arc::new(Handle { inner }),
        }
    }

    fn inner(&self) -> &Inner {
        &self.handle.inner
    }

    /// Blocks until the first build ends (Ready), or the index is Aside or
    /// Closed. Returns stats then.
    pub fn wait_ready(&self) -> Stats {
        let inner = self.inner();
        let mut shared = inner.lock();
        while shared.state == IndexState::Building {
            shared = inner
                .changed
                .wait(shared)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(shared);
        self.stats()
    }

    /// The figures as of now (pending events applied first, so a root
    /// deleted a moment ago already shows as the reason to step aside).
    pub fn stats(&self) -> Stats {
        let inner = self.inner();
        let mut shared = inner.lock();
        if shared.state == IndexState::Ready {
            if let Err(reason) = inner.refresh(&mut shared) {
                inner.set_aside(&mut shared, reason);
            }
        }
        let mut stats = Stats {
            state: shared.state,
            reason: shared.reason.clone(),
            files: 0,
            directories: 0,
            bytes_indexed: 0,
            memory_bytes: 0,
            build_ms: shared.build_ms,
            last_refresh_unix_ms: shared.last_refresh_unix_ms,
            dirty_files: 0,
            unfiltered_files: 0,
            watches: 0,
            restored_files: shared.restored_files,
            cache: shared.cache.clone(),
        };
        if let (IndexState::Ready, Some(live)) = (shared.state, &shared.live) {
            let (dirs, files) = live.tree.counts();
            stats.directories = dirs;
            stats.files = files;
            stats.bytes_indexed = live.content.ids.live_bytes;
            stats.memory_bytes = (live.tree.memory_bytes()
                + live.content.postings.memory_bytes()
                + live
                    .content
                    .exact
                    .values()
                    .map(RawBloom::memory_bytes)
                    .sum::<usize>()
                + live.content.ids.sizes.capacity() * 4) as u64;
            stats.dirty_files = live.tree.dirty_count();
            stats.unfiltered_files = shared.unfiltered_files;
            stats.watches = live.tree.watch_count() as u64;
        }
        stats
    }

    /// Stops the background thread (joins it promptly, also mid-build),
    /// drops watches and memory. Idempotent.
    pub fn close(&self) {
        self.inner().close();
    }

    /// Runs `f` on the tree after applying every pending event, if the index
    /// is ready and the directory `dir` (a real host path) is inside its
    /// root. `None`: walk live.
    pub(crate) fn answer<T>(
        &self,
        dir: &Path,
        f: impl FnOnce(&mut Tree, tree::DirId, &Content) -> Option<T>,
    ) -> Option<T> {
        let inner = self.inner();
        let rel = dir.strip_prefix(inner.root.host()).ok()?;
        let mut shared = inner.lock();
        if shared.state != IndexState::Ready {
            return None;
        }
        if shared
            .live
            .as_ref()
            .is_some_and(|live| live.root_id != inner.root.identity())
        {
            // Built again, after the backoff, on the directory now there.
            inner.set_aside(&mut shared, "the workspace directory was replaced".into());
            return None;
        }
        if let Err(reason) = inner.refresh(&mut shared) {
            inner.set_aside(&mut shared, reason);
            return None;
        }
        let Live { tree, content, .. } = shared.live.as_mut()?;
        let start = tree.start(rel.as_os_str().as_bytes())?;
        f(tree, start, content)
    }

    /// Walks the cached tree from `dir` for find or grep (see `TreeSearch`);
    /// `None` when the index cannot answer.
    pub(crate) fn walk<S: TreeSearch>(&self, dir: &Path, search: &mut S) -> Option<()> {
        self.answer(dir, |tree, start, _| tree.dfs(start, search))
    }
}
