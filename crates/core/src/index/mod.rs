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

mod grams;
mod query;
mod tree;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

use ignore::overrides::Override;
use ignore::Match;

use crate::root::Root;
use crate::walk::Kind;
use grams::{file_grams, Gram, GramScratch, Postings, RawBloom, SegmentBuilder};
use tree::{open_beneath, Contents, DirtyRef, Tree};
pub(crate) use tree::{Child, DirNode, FileState, NameEnds, Node, TreeSearch};
use watch::{poll, Event, Waker};

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

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            max_watches: None,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            exact_min_bytes: DEFAULT_EXACT_MIN_BYTES,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexState {
    Building,
    Ready,
    Aside,
    Closed,
}

impl IndexState {
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
pub struct Stats {
    pub state: IndexState,
    /// Why the index stepped aside.
    pub reason: Option<String>,
    pub files: u64,
    pub directories: u64,
    pub bytes_indexed: u64,
    pub memory_bytes: u64,
    /// The last completed (re)build, in milliseconds.
    pub build_ms: f64,
    /// When events were last applied (Unix time, milliseconds).
    pub last_refresh_unix_ms: Option<f64>,
    pub dirty_files: u64,
    /// Large files whose exact filter the thread has still to make (read
    /// by every search their folded grams allow until then): 0 once warm.
    pub unfiltered_files: u64,
    pub watches: u64,
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
}

struct Live {
    tree: Tree,
    content: Content,
}

/// Content ids: the bytes each stood for, or `DEAD` once retired.
#[derive(Default)]
struct Ids {
    sizes: Vec<u32>,
    live_bytes: u64,
}

const DEAD: u32 = u32::MAX;

impl Ids {
    fn assign(&mut self, bytes: u64) -> u32 {
        let id = self.sizes.len() as u32;
        let size = u32::try_from(bytes).unwrap_or(DEAD - 1).min(DEAD - 1);
        self.sizes.push(size);
        self.live_bytes += u64::from(size);
        id
    }

    fn retire(&mut self, id: u32) {
        if let Some(size) = self.sizes.get_mut(id as usize) {
            if *size != DEAD {
                self.live_bytes -= u64::from(*size);
                *size = DEAD;
            }
        }
    }

    fn is_live(&self, id: u32) -> bool {
        self.sizes.get(id as usize).is_some_and(|&s| s != DEAD)
    }
}

/// The index's contents: posting lists and the ids they are over.
pub(crate) struct Content {
    postings: Postings,
    ids: Ids,
    /// Large files' exact 5-gram filters, by content id.
    exact: HashMap<u32, RawBloom>,
}

impl Content {
    /// Drops `candidates` that a large file's exact filter shows cannot
    /// hold every one of `pieces`.
    fn pass_by(&self, candidates: &mut query::IdSet, pieces: &[Vec<u8>]) {
        if pieces.is_empty() {
            return;
        }
        for (&id, bloom) in &self.exact {
            if candidates.contains(id) && !pieces.iter().all(|p| bloom.may_hold(p)) {
                candidates.remove(id);
            }
        }
    }
}

/// Refreshing: files are marked dirty (the thread re-indexes them).
struct Refresh<'a>(&'a mut Ids);

impl Contents for Refresh<'_> {
    fn index_now(&mut self, _: BorrowedFd<'_>, _: &[u8], _: bool) -> Option<FileState> {
        None
    }
    fn retire(&mut self, id: u32) {
        self.0.retire(id);
    }
}

/// Reads files and turns them into n-grams.
struct Reader {
    max_file_bytes: u64,
    scratch: GramScratch,
    buf: Vec<u8>,
}

/// What reading a file gave.
enum Read_ {
    /// Its contents (in the reader's `buf`), and whether it has more than
    /// one link.
    Read(bool),
    Always,
}

impl Reader {
    fn new(max_file_bytes: u64) -> Reader {
        Reader {
            max_file_bytes,
            scratch: GramScratch::new(),
            buf: Vec::new(),
        }
    }

    /// Reads `file` into `buf`; `Always` for a file that is searched
    /// without asking the index. A hard-linked file is read only when
    /// `links` (its inode is watched).
    fn read(&mut self, file: File, links: bool) -> Read_ {
        let Ok(st) = fstat(file.as_fd()) else {
            return Read_::Always;
        };
        let regular = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
        // A hard-linked file can be written through a name outside every
        // watched directory: indexed only with its inode watched.
        let linked = st.st_nlink > 1;
        if !regular || (linked && !links) || st.st_size as u64 > self.max_file_bytes {
            return Read_::Always;
        }
        if read_up_to(
            &file,
            st.st_size as usize,
            self.max_file_bytes,
            &mut self.buf,
        )
        .is_err()
            || self.buf.len() as u64 > self.max_file_bytes
        {
            return Read_::Always;
        }
        // grep transcodes UTF-16 files (BOM first): their bytes are not
        // what it matches.
        if self.buf.starts_with(&[0xFF, 0xFE]) || self.buf.starts_with(&[0xFE, 0xFF]) {
            return Read_::Always;
        }
        Read_::Read(linked)
    }
}

/// Bytes of the size fstat claims that a read trusts up front: a file that
/// claims more (a sparse one, under a `max_file_bytes` raised past this)
/// grows the buffer only as bytes arrive. The default bound: under it every
/// file is read in one go.
const READ_RESERVE: usize = DEFAULT_MAX_FILE_BYTES as usize;

/// Reads `file` into `buf` (replacing its contents): the `size` bytes fstat
/// gave in one read (up to `READ_RESERVE`), then on to the end if it has
/// more, stopping past `max` bytes. (`read_to_end` without a size hint reads
/// 8 KiB first and doubles: three reads for a typical source file.)
fn read_up_to(mut file: &File, size: usize, max: u64, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let size = size.min(READ_RESERVE);
    // One byte more than the size: a read that fills it has grown.
    buf.resize(size + 1, 0);
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    if filled > size {
        let rest = (max + 1).saturating_sub(filled as u64);
        file.take(rest).read_to_end(buf)?;
    }
    Ok(())
}

/// The first build: every file read as it is listed, into one segment.
struct Building<'a> {
    reader: Reader,
    builder: SegmentBuilder,
    ids: &'a mut Ids,
    bytes: u64,
    /// Raised by `close()`: files are no longer read (the build then ends
    /// at the next directory), so a close mid-directory is prompt too.
    cancel: &'a AtomicBool,
}

impl Contents for Building<'_> {
    fn index_now(&mut self, dir: BorrowedFd<'_>, name: &[u8], linked: bool) -> Option<FileState> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let name = std::ffi::OsStr::from_bytes(name);
        if self.cancel.load(Ordering::Relaxed) {
            return Some(FileState::Always);
        }
        let Ok(fd) = openat(dir, name, flags, Mode::empty()) else {
            return Some(FileState::Always);
        };
        Some(match self.reader.read(fd.into(), linked) {
            Read_::Read(_) => {
                let bytes = self.reader.buf.len() as u64;
                let id = self.ids.assign(bytes);
                self.builder.add_text(id, &self.reader.buf);
                self.bytes += bytes;
                FileState::Indexed(id)
            }
            Read_::Always => FileState::Always,
        })
    }
    fn retire(&mut self, id: u32) {
        self.ids.retire(id);
    }
}

/// A grep whose candidates are more than 1/BROAD_SHARE of the indexed files
/// walks live instead: reading most files anyway, the walk's early stop at
/// the limit wins over the index's listing of the whole scope.
const BROAD_SHARE: usize = 4;
/// Not below this many candidates: listing a thousand files
/// costs well under a millisecond, and the index still spares the rest.
const BROAD_MIN_FILES: usize = 1000;
/// A grep without `--glob` whose candidates are at most this many finds
/// them through the tree's id → directory map instead of walking the tree:
/// that costs a scan of their directories and a sort of their paths, which
/// for this many stays well under a walk of a large tree (the kernel's 83k
/// entries: about 3 ms), while more candidates approach the broad rule's
/// share anyway on trees where walking matters.
const LOCATE_MAX: usize = 2048;

/// Dirty files re-read per round of the thread, at most: the lock is taken
/// once per round to commit them, and a close waits for at most a round.
const REINDEX_FILES: usize = 256;
/// Bytes re-read per round at most (their grams are held until the commit).
const REINDEX_BYTES: u64 = 32 << 20;
/// Waits before a rebuild after stepping aside: doubling from 1 s to 60 s,
/// so a tree that keeps overflowing the queue is not rebuilt in a loop.
const FIRST_BACKOFF_MS: u64 = 1000;
const MAX_BACKOFF_MS: u64 = 60_000;

fn now_unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

impl Index {
    /// Starts building in the background; never fails (problems show in
    /// `stats()` and searches walk live).
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
        if let Err(reason) = inner.refresh(&mut shared) {
            inner.set_aside(&mut shared, reason);
            return None;
        }
        let Live { tree, content } = shared.live.as_mut()?;
        let start = tree.start(rel.as_os_str().as_bytes())?;
        f(tree, start, content)
    }

    /// grep's files in scope from `dir` (with its `--glob` overrides) that
    /// may hold a match of the pattern, in walk order: the indexed files
    /// whose n-grams satisfy the pattern's query, and every dirty or
    /// never-indexed one. `None` when the index cannot answer.
    pub(crate) fn grep_files(
        &self,
        dir: &Path,
        pattern: &str,
        ignore_case: bool,
        literal: bool,
        overrides: Option<&Override>,
    ) -> Option<GrepFiles> {
        let plan = query::plan(pattern, ignore_case, literal);
        // Nothing to narrow by (`\w+`, `.`): the live walk, which stops at
        // the limit, beats listing every file in scope first.
        if matches!(plan, query::GramQuery::All) {
            return None;
        }
        let pieces = query::exact_pieces(pattern, ignore_case, literal);
        self.answer(dir, |tree, start, content| {
            let mut candidates = query::candidates(&plan, &content.postings)?;
            content.pass_by(&mut candidates, &pieces);
            let postings = &content.postings;
            // Likewise when the n-grams leave most files (`static`).
            let broad = candidates.len();
            if broad > BROAD_MIN_FILES && broad * BROAD_SHARE > postings.id_end() as usize {
                return None;
            }
            // A few candidates: found where they are, not by a walk.
            let locate = overrides.is_none() && broad <= LOCATE_MAX;
            let files = grep_scope(tree, start, &candidates, overrides, locate)?;
            let root_fd = tree.root_fd().try_clone_to_owned().ok()?;
            Some(GrepFiles { root_fd, files })
        })
    }

    /// Walks the cached tree from `dir` for find or grep (see `TreeSearch`);
    /// `None` when the index cannot answer.
    pub(crate) fn walk<S: TreeSearch>(&self, dir: &Path, search: &mut S) -> Option<()> {
        self.answer(dir, |tree, start, _| tree.dfs(start, search))
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    /// Steps aside: searches walk live until the thread rebuilds.
    fn set_aside(&self, shared: &mut Shared, reason: String) {
        if shared.state == IndexState::Closed {
            return;
        }
        shared.state = IndexState::Aside;
        shared.reason = Some(reason);
        self.changed.notify_all();
        self.wake();
    }

    fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.wake();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        // The thread itself may drop the last handle (never: it holds
        // `Inner`, not a `Handle`), so joining is safe.
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        let mut shared = self.lock();
        shared.state = IndexState::Closed;
        shared.live = None;
        self.changed.notify_all();
    }

    /// Drains the inotify queue and applies it (under the lock).
    fn refresh(&self, shared: &mut Shared) -> Result<(), String> {
        let Some(live) = shared.live.as_mut() else {
            return Ok(());
        };
        if let Some(mounts) = live.tree.mounts.as_mut() {
            if mounts.changed_inside().unwrap_or(true) {
                return Err("a filesystem was mounted or unmounted inside the root".into());
            }
        }
        let mut events: Vec<Event> = Vec::new();
        live.tree
            .inotify
            .drain(&mut events)
            .map_err(|e| format!("inotify read failed: {e}"))?;
        if events.is_empty() {
            return Ok(());
        }
        let had_dirty = live.tree.dirty.len();
        live.tree
            .apply(&events, &mut Refresh(&mut live.content.ids))?;
        shared.last_refresh_unix_ms = Some(now_unix_ms());
        if live.tree.dirty.len() > had_dirty {
            self.wake();
        }
        Ok(())
    }

    /// The index's thread: build, serve, and after stepping aside, rebuild
    /// after a backoff.
    fn run(self: Arc<Self>) {
        let mut backoff_ms = FIRST_BACKOFF_MS;
        while !self.closing.load(Ordering::SeqCst) {
            let unfiltered = match self.build() {
                Ok(unfiltered) => unfiltered,
                Err(_) if self.closing.load(Ordering::SeqCst) => break,
                Err(reason) => {
                    let mut shared = self.lock();
                    self.set_aside(&mut shared, reason);
                    Vec::new()
                }
            };
            let ready_at = Instant::now();
            self.serve(unfiltered);
            if self.closing.load(Ordering::SeqCst) {
                break;
            }
            let reason = {
                let mut shared = self.lock();
                shared.live = None;
                shared.reason.clone().unwrap_or_default()
            };
            // Served long enough: this step aside is not part of a loop.
            if ready_at.elapsed() >= Duration::from_millis(MAX_BACKOFF_MS) {
                backoff_ms = FIRST_BACKOFF_MS;
            }
            // An untrusted filesystem stays so: no rebuild.
            let wait = if reason.contains("filesystem") {
                -1
            } else {
                backoff_ms as i32
            };
            self.sleep(wait);
            backoff_ms = (backoff_ms * 2).min(MAX_BACKOFF_MS);
            if !self.closing.load(Ordering::SeqCst) {
                let mut shared = self.lock();
                shared.state = IndexState::Building;
                self.changed.notify_all();
            }
        }
    }

    /// Waits `ms` (-1: until closed), returning early on close.
    fn sleep(&self, ms: i32) {
        let Some(waker) = &self.waker else { return };
        let deadline = (ms >= 0).then(|| Instant::now() + Duration::from_millis(ms as u64));
        while !self.closing.load(Ordering::SeqCst) {
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.as_millis().max(1) as i32,
                    _ => return,
                },
                None => -1,
            };
            poll(&[waker.raw()], left);
            waker.clear();
        }
    }

    /// Builds the index and installs it (Ready), applying the events that
    /// arrived meanwhile. Returns the large files still to be given an
    /// exact filter, counted in the same step so `stats` never shows a
    /// ready index as warm before they are.
    fn build(&self) -> Result<Vec<(u32, Vec<u8>)>, String> {
        let started = Instant::now();
        let root_fd = self
            .root
            .open_dir(self.root.host())
            .map_err(|e| format!("the root cannot be opened: {e}"))?;
        let mut ids = Ids::default();
        let mut building = Building {
            reader: Reader::new(self.options.max_file_bytes),
            builder: SegmentBuilder::new(),
            ids: &mut ids,
            bytes: 0,
            cancel: &self.closing,
        };
        let mut pending = Vec::new();
        let mut tree = Tree::build(
            root_fd,
            self.root.host().to_path_buf(),
            self.options.max_watches.unwrap_or(usize::MAX),
            &mut building,
            &self.closing,
            &mut pending,
        )?;
        let segment = building.builder.finish();
        let mut postings = Postings::new();
        postings.push(segment);
        tree.inotify
            .drain(&mut pending)
            .map_err(|e| format!("inotify read failed: {e}"))?;
        let mut shared = self.lock();
        if self.closing.load(Ordering::SeqCst) {
            return Err("closed".into());
        }
        tree.apply(&pending, &mut Refresh(&mut ids))?;
        let content = Content {
            postings,
            ids,
            exact: HashMap::new(),
        };
        let unfiltered = large_files(&tree, &content, self.options.exact_min_bytes);
        shared.unfiltered_files = unfiltered.len() as u64;
        shared.live = Some(Live { tree, content });
        shared.state = IndexState::Ready;
        shared.reason = None;
        shared.build_ms = started.elapsed().as_secs_f64() * 1000.0;
        shared.last_refresh_unix_ms = Some(now_unix_ms());
        self.changed.notify_all();
        Ok(unfiltered)
    }

    /// While ready: waits for events or wakes, applies events, re-indexes
    /// dirty files. Returns when the index stepped aside or is closing.
    /// `unfiltered`: the large files still without an exact filter, given
    /// theirs in rounds while nothing else is to do.
    fn serve(&self, mut unfiltered: Vec<(u32, Vec<u8>)>) {
        let Some(waker) = &self.waker else { return };
        let mut reader = Reader::new(self.options.max_file_bytes);
        loop {
            let (inotify_fd, busy) = {
                let shared = self.lock();
                match (&shared.live, shared.state) {
                    (Some(live), IndexState::Ready) => (
                        live.tree.inotify.raw(),
                        !live.tree.dirty.is_empty() || !unfiltered.is_empty(),
                    ),
                    _ => return,
                }
            };
            #[cfg(test)]
            if self.paused.load(Ordering::SeqCst) && !self.closing.load(Ordering::SeqCst) {
                // Pause between checks, in milliseconds: only tests pause.
                poll(&[waker.raw()], 10);
                waker.clear();
                continue;
            }
            if !busy {
                poll(&[inotify_fd, waker.raw()], -1);
            }
            waker.clear();
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            // Take a round of dirty files (with their paths) under the lock.
            let batch = {
                let mut shared = self.lock();
                if shared.state != IndexState::Ready {
                    return;
                }
                if let Err(reason) = self.refresh(&mut shared) {
                    self.set_aside(&mut shared, reason);
                    return;
                }
                let Some(live) = shared.live.as_mut() else {
                    return;
                };
                take_dirty(&mut live.tree)
            };
            if batch.is_empty() {
                self.filter_large(&mut reader, &mut unfiltered);
                continue;
            }
            self.reindex(&mut reader, batch);
        }
    }

    /// Reads a round of large files (without the lock) and keeps their
    /// exact filters for the ids still live (a file changed since is dirty
    /// with its id retired: the filter is not kept).
    fn filter_large(&self, reader: &mut Reader, unfiltered: &mut Vec<(u32, Vec<u8>)>) {
        let Ok(root_fd) = self.root.open_dir(self.root.host()) else {
            unfiltered.clear();
            self.lock().unfiltered_files = 0;
            return;
        };
        let mut made = Vec::new();
        let mut bytes = 0;
        while let Some((id, path)) = unfiltered.pop() {
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            let Ok(fd) = open_beneath(root_fd.as_fd(), &path, false) else {
                continue;
            };
            if let Read_::Read(_) = reader.read(fd.into(), true) {
                bytes += reader.buf.len() as u64;
                made.push((id, RawBloom::of(&reader.buf)));
            }
            if bytes > REINDEX_BYTES {
                break;
            }
        }
        let mut shared = self.lock();
        shared.unfiltered_files = unfiltered.len() as u64;
        if let Some(live) = shared.live.as_mut() {
            let content = &mut live.content;
            for (id, bloom) in made {
                if content.ids.is_live(id) {
                    content.exact.insert(id, bloom);
                }
            }
        }
    }

    /// Re-reads a round of dirty files without the lock, then commits those
    /// still dirty with the same generation.
    fn reindex(&self, reader: &mut Reader, batch: Vec<(DirtyRef, Vec<u8>)>) {
        let root_fd = match self.root.open_dir(self.root.host()) {
            Ok(fd) => fd,
            Err(_) => return,
        };
        // Each file with its bytes, grams and exact filter if large, or
        // `None`: always a candidate.
        type Reread = (DirtyRef, Option<(u64, bool, Vec<Gram>, Option<RawBloom>)>);
        let mut done: Vec<Reread> = Vec::new();
        let mut bytes = 0;
        let mut batch = batch.into_iter();
        for (r, path) in batch.by_ref() {
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            let read = match open_beneath(root_fd.as_fd(), &path, false) {
                Ok(fd) => {
                    // Linked files are read; the commit keeps them only if
                    // their inode is watched.
                    match reader.read(fd.into(), true) {
                        Read_::Read(linked) => {
                            let mut grams = Vec::new();
                            file_grams(&reader.buf, &mut reader.scratch, &mut grams);
                            let n = reader.buf.len() as u64;
                            bytes += n;
                            let exact = (n >= self.options.exact_min_bytes)
                                .then(|| RawBloom::of(&reader.buf));
                            Some((n, linked, grams, exact))
                        }
                        Read_::Always => None,
                    }
                }
                Err(_) => None,
            };
            done.push((r, read));
            if bytes > REINDEX_BYTES {
                break;
            }
        }
        let mut shared = self.lock();
        if shared.state != IndexState::Ready {
            return;
        }
        let Some(live) = shared.live.as_mut() else {
            return;
        };
        // Left for the next round.
        let rest: Vec<DirtyRef> = batch.map(|(r, _)| r).collect();
        live.tree.dirty.splice(0..0, rest);
        let mut builder = SegmentBuilder::new();
        let mut added = false;
        for (r, read) in done {
            if live.tree.dirty_path(&r).is_none() {
                continue;
            }
            let (state, linked) = match read {
                Some((n, linked, grams, exact)) => {
                    let id = live.content.ids.assign(n);
                    builder.add(id, &grams);
                    if let Some(bloom) = exact {
                        live.content.exact.insert(id, bloom);
                    }
                    added = true;
                    (FileState::Indexed(id), linked)
                }
                None => (FileState::Always, false),
            };
            if !live.tree.settle(&r, state, linked) {
                if let FileState::Indexed(id) = state {
                    live.content.ids.retire(id);
                }
            }
        }
        if added {
            live.content.postings.push(builder.finish());
        }
        let ids = &live.content.ids;
        live.content.postings.merge_small(&|id| ids.is_live(id));
        live.content.exact.retain(|&id, _| ids.is_live(id));
    }
}

/// The indexed files of at least `min` bytes without an exact filter, with
/// their paths from the root.
fn large_files(tree: &Tree, content: &Content, min: u64) -> Vec<(u32, Vec<u8>)> {
    struct Large<'a> {
        content: &'a Content,
        min: u64,
        found: Vec<(u32, Vec<u8>)>,
    }
    impl TreeSearch for Large<'_> {
        fn left_out(&mut self, _: &[u8], child: &Child) -> bool {
            child.ignored || &*child.name == b".git"
        }
        fn visit(&mut self, rel: &[u8], child: &Child, _: &DirNode) -> bool {
            if let Node::File(FileState::Indexed(id)) = child.node {
                let size = self
                    .content
                    .ids
                    .sizes
                    .get(id as usize)
                    .copied()
                    .unwrap_or(0);
                if u64::from(size) >= self.min && !self.content.exact.contains_key(&id) {
                    self.found.push((id, rel.to_vec()));
                }
            }
            true
        }
    }
    let mut search = Large {
        content,
        min,
        found: Vec::new(),
    };
    // An unindexed directory ends the walk early: the files found so far
    // are filtered, the rest are searched as before.
    let _ = tree.dfs(tree::ROOT, &mut search);
    search.found
}

/// A file grep searches: its path from the root (to open it) and from the
/// searched directory (as shown).
pub(crate) struct GrepFile {
    rel_root: Vec<u8>,
    pub(crate) shown: Arc<str>,
}

/// grep's candidates, and the root they are opened beneath.
pub(crate) struct GrepFiles {
    root_fd: OwnedFd,
    pub(crate) files: Vec<GrepFile>,
}

impl GrepFiles {
    /// Opens a candidate as the walker opens a file: no symlink anywhere on
    /// its path (a component swapped for one fails), non-blocking.
    pub(crate) fn open(&self, file: &GrepFile) -> std::io::Result<File> {
        Ok(open_beneath(self.root_fd.as_fd(), &file.rel_root, false)?.into())
    }
}

/// grep's walk over the tree: what `walk` with grep's visitor would search
/// (overrides first, then the stored decision; `.git` skipped; files only),
/// kept when a candidate.
struct GrepScope<'a> {
    overrides: Option<&'a Override>,
    candidates: Option<&'a query::IdSet>,
    files: Vec<GrepFile>,
}

impl TreeSearch for GrepScope<'_> {
    fn left_out(&mut self, rel: &[u8], child: &Child) -> bool {
        let is_dir = child.kind == Kind::Dir;
        let rel_path = Path::new(std::ffi::OsStr::from_bytes(rel));
        let out = match self.overrides.map(|o| o.matched(rel_path, is_dir)) {
            Some(Match::Ignore(_)) => true,
            Some(Match::Whitelist(_)) => false,
            _ => child.ignored,
        };
        out || &*child.name == b".git"
    }

    fn wanted(&mut self, child: &Child) -> bool {
        self.candidate(child)
    }

    fn visit(&mut self, rel: &[u8], child: &Child, dir: &DirNode) -> bool {
        if self.candidate(child) {
            self.files.push(GrepFile {
                rel_root: tree::join(&dir.rel, &child.name),
                shown: shown_path(rel),
            });
        }
        true
    }
}

/// The files in scope from `start` that are candidates, in walk order:
/// found through the tree's places when `locate` (only without
/// `overrides`), else by walking it. `None` when a walk would enter an
/// unindexed directory.
fn grep_scope(
    tree: &mut Tree,
    start: tree::DirId,
    candidates: &query::IdSet,
    overrides: Option<&Override>,
    locate: bool,
) -> Option<Vec<GrepFile>> {
    let mut search = GrepScope {
        overrides,
        candidates: Some(candidates),
        files: Vec::new(),
    };
    if !(locate && overrides.is_none()) {
        tree.dfs(start, &mut search)?;
        return Some(search.files);
    }
    let prefix = tree.node(start)?.rel.len();
    // The path from `start`: after its own and a `/`.
    let from = if prefix == 0 { 0 } else { prefix + 1 };
    let paths = tree.locate(start, candidates.iter(), &mut |c| search.candidate(c))?;
    Some(
        paths
            .into_iter()
            .map(|rel_root| GrepFile {
                shown: shown_path(&rel_root[from..]),
                rel_root,
            })
            .collect(),
    )
}

/// A path as the walk shows it: lossy UTF-8, `/` separators.
fn shown_path(rel: &[u8]) -> Arc<str> {
    Arc::from(String::from_utf8_lossy(rel).replace('\\', "/"))
}

impl GrepScope<'_> {
    /// A file grep searches if it is in scope: a candidate of the query,
    /// dirty or never indexed.
    fn candidate(&self, child: &Child) -> bool {
        let candidate = match child.node {
            Node::File(FileState::Indexed(id)) => self.candidates.is_none_or(|c| c.contains(id)),
            Node::File(_) => true,
            _ => false,
        };
        candidate && child.kind == Kind::File
    }
}

/// The oldest dirty files still dirty (up to a round's worth), with their
/// paths from the root; stale entries are dropped.
fn take_dirty(tree: &mut Tree) -> Vec<(DirtyRef, Vec<u8>)> {
    let mut batch = Vec::new();
    let mut taken = 0;
    for r in &tree.dirty {
        taken += 1;
        if let Some(path) = tree.dirty_path(r) {
            batch.push((r.clone(), path));
            if batch.len() == REINDEX_FILES {
                break;
            }
        }
    }
    tree.dirty.drain(..taken);
    batch
}

#[cfg(test)]
mod locate_tests {
    use super::*;
    use std::fs;

    fn files(found: Option<Vec<GrepFile>>) -> Option<Vec<(Vec<u8>, String)>> {
        found.map(|f| {
            f.into_iter()
                .map(|f| (f.rel_root, f.shown.to_string()))
                .collect()
        })
    }

    fn dirs_under(d: &Path) -> Vec<std::path::PathBuf> {
        let mut out = vec![d.to_path_buf()];
        let mut i = 0;
        while i < out.len() {
            if let Ok(rd) = fs::read_dir(&out[i]) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != ".git" {
                        out.push(e.path());
                    }
                }
            }
            i += 1;
        }
        out.sort();
        out
    }

    /// Random changes (files written, moved, deleted; directories made,
    /// moved, removed; ignore rules; unreadable directories), each followed
    /// by greps from the root and a random directory: the candidates found
    /// through the tree's places are the walk's, in its order, with the
    /// same paths; re-indexing runs in the second half.
    #[test]
    fn located_candidates_equal_the_walk() {
        let t = tempfile::tempdir().unwrap();
        let d = fs::canonicalize(t.path()).unwrap();
        for (f, text) in [
            ("a/x.rs", "needle"),
            ("a/b/y.rs", "hay"),
            ("c/z.txt", "Needle"),
            ("c/d/e/w.rs", "needle hay"),
            ("a-b/k.rs", "needle"),
            ("a.c", "needle"),
        ] {
            let p = d.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        let root = Arc::new(Root::open(&d, None).unwrap());
        let index = Index::start(root.clone(), IndexOptions::default());
        assert_eq!(index.wait_ready().state, IndexState::Ready);
        index.inner().paused.store(true, Ordering::SeqCst);
        let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        let names = ["a", "b", "a-b", "a.c", "x.rs", "y.rs", "z.txt", "é", "ab"];
        let texts = ["needle", "hay", "NEEDLE hay", "a needle", "other"];
        let queries = [
            ("needle", false, false),
            ("needle", true, false),
            ("hay", false, true),
            ("ne+dle", false, false),
        ];
        let mut located = 0;
        for step in 0..300 {
            if step == 150 {
                index.inner().paused.store(false, Ordering::SeqCst);
                index.inner().wake();
            }
            let dirs = dirs_under(&d);
            let dir = &dirs[next(dirs.len())];
            let name = names[next(names.len())];
            let p = dir.join(name);
            let other = dirs[next(dirs.len())].join(names[next(names.len())]);
            let _ = match next(10) {
                0..=2 => fs::write(&p, texts[next(texts.len())]),
                3 => fs::create_dir(&p),
                4 => fs::remove_file(&p),
                5 => fs::remove_dir_all(&p),
                6 if !other.starts_with(&p) => fs::rename(&p, &other),
                7 => fs::write(dir.join(".gitignore"), format!("{name}\n")),
                8 => fs::remove_file(dir.join(".gitignore")),
                _ => {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = if next(2) == 0 { 0o000 } else { 0o755 };
                    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
                }
            };
            let dirs = dirs_under(&d);
            for at in [&d, &dirs[next(dirs.len())]] {
                for (pattern, ic, lit) in queries {
                    // Both ways under one hold of the lock: the same tree.
                    let plan = query::plan(pattern, ic, lit);
                    let both = index.answer(at, |tree, start, content| {
                        let c = query::candidates(&plan, &content.postings)?;
                        let by_walk = files(grep_scope(tree, start, &c, None, false));
                        let by_places = files(grep_scope(tree, start, &c, None, true));
                        Some((by_walk, by_places))
                    });
                    let (by_walk, by_places) = both.unwrap_or_default();
                    assert_eq!(by_places, by_walk, "step {step}: {pattern:?} from {at:?}");
                    located += usize::from(by_places.is_some());
                }
            }
        }
        for dir in dirs_under(&d) {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
        }
        // A file located while dirty, then re-indexed by the thread (no
        // event in between): located under its new id.
        let both_ways = || {
            let plan = query::plan("needle", false, false);
            index
                .answer(&d, |tree, start, content| {
                    let c = query::candidates(&plan, &content.postings)?;
                    let by_walk = files(grep_scope(tree, start, &c, None, false));
                    let by_places = files(grep_scope(tree, start, &c, None, true));
                    Some((by_walk, by_places))
                })
                .unwrap()
        };
        index.inner().paused.store(true, Ordering::SeqCst);
        fs::write(d.join("fresh.rs"), "needle").unwrap();
        for settled in [false, true] {
            if settled {
                index.inner().paused.store(false, Ordering::SeqCst);
                index.inner().wake();
                while index.stats().dirty_files > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            let (by_walk, by_places) = both_ways();
            assert_eq!(by_places, by_walk, "settled: {settled}");
            let found = by_places.unwrap();
            assert!(found.iter().any(|(p, _)| p == b"fresh.rs"), "{found:?}");
        }
        assert_eq!(index.stats().state, IndexState::Ready);
        // Not vacuous: most greps were answered (and so located).
        assert!(located > 1200, "located {located} of 2400");
    }
}
