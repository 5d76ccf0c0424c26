//! The index's background thread: build, serve events and re-index dirty
//! files, step aside and rebuild after a backoff; and the shared state's
//! lock, refresh and close, which searches use too.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::cache::{self, Key, Listed};
use super::content::{Building, Content, Ids, Refresh};
use super::grams::{file_grams, Gram, Postings, RawBloom, SegmentBuilder};
use super::reader::{Read_, Reader};
use super::tree::{open_beneath, DirtyRef, Tree};
use super::tree::{Child, DirNode, FileState, Node, TreeSearch};
use super::watch::{poll, Event};
use super::{tree, IndexState, Inner, Live, Shared};

/// Dirty files re-read per round of the thread, at most: the lock is taken
/// once per round to commit them, and a close waits for at most a round.
const REINDEX_FILES: usize = 256;
/// Bytes re-read per round at most (their grams are held until the commit).
const REINDEX_BYTES: u64 = 32 << 20;
/// Waits before a rebuild after stepping aside: doubling from 1 s to 60 s,
/// so a tree that keeps overflowing the queue is not rebuilt in a loop.
const FIRST_BACKOFF_MS: u64 = 1000;
const MAX_BACKOFF_MS: u64 = 60_000;

pub(super) fn now_unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn wake(&self) {
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    /// Steps aside: searches walk live until the thread rebuilds.
    pub(super) fn set_aside(&self, shared: &mut Shared, reason: String) {
        if shared.state == IndexState::Closed {
            return;
        }
        shared.state = IndexState::Aside;
        shared.reason = Some(reason);
        self.changed.notify_all();
        self.wake();
    }

    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.wake();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        // The thread itself may drop the last handle (never: it holds
        // `Inner`, not a `Handle`), so joining is safe.
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        let mut shared = self.lock();
        if shared.state == IndexState::Ready {
            if let Some(dir) = &self.options.cache_dir {
                // A cache not written is only a cold start next time.
                let _ = self.save(&mut shared, dir);
            }
        }
        shared.state = IndexState::Closed;
        shared.live = None;
        self.changed.notify_all();
    }

    fn key(&self, root_id: (u64, u64)) -> Key<'_> {
        Key {
            root: self.root.host(),
            root_id,
            max_file_bytes: self.options.max_file_bytes,
            exact_min_bytes: self.options.exact_min_bytes,
        }
    }

    /// Writes the index to the cache directory `dir`: the stat pass, then,
    /// only if no event arrived meanwhile (nor was pending), the file.
    pub(super) fn save(&self, shared: &mut Shared, dir: &std::path::Path) -> Result<(), String> {
        let live = shared.live.as_mut().ok_or("not built")?;
        if live.root_id != self.root.identity() {
            return Err("the workspace directory was replaced".into());
        }
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_nanos() as i128;
        let key = self.key(live.root_id);
        let bytes = cache::encode(&key, &live.tree, &live.content, now_ns)?;
        if let Some(mounts) = live.tree.mounts.as_mut() {
            if mounts.changed_inside().unwrap_or(true) {
                return Err("mounts changed".into());
            }
        }
        let mut events = Vec::new();
        live.tree
            .inotify
            .drain(&mut events)
            .map_err(|e| e.to_string())?;
        if !live.tree.passes_by(&events) {
            return Err("the tree changed while it was saved".into());
        }
        cache::store(dir, &key, &bytes, self.options.cache_max_bytes)
    }

    /// Drains the inotify queue and applies it (under the lock).
    pub(super) fn refresh(&self, shared: &mut Shared) -> Result<(), String> {
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
    pub(super) fn run(self: Arc<Self>) {
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
        let root_id = nix::sys::stat::fstat(&root_fd)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|e| format!("the root cannot be opened: {e}"))?;
        let mut pending = Vec::new();
        let key = self.key(root_id);
        let (mut tree, content, restored, note) = match self.options.cache_dir.as_deref() {
            None => {
                let (tree, content) = self.cold_build(root_fd, &mut pending)?;
                (tree, content, 0, None)
            }
            Some(dir) => match self.warm_start(dir, &key, root_fd, &mut pending)? {
                Ok((tree, content, restored)) => (tree, content, restored, Some("restored".into())),
                Err(why) => {
                    // The cache could not be used: a build from the tree, as without one.
                    pending.clear();
                    let root_fd = self
                        .root
                        .open_dir(self.root.host())
                        .map_err(|e| format!("the root cannot be opened: {e}"))?;
                    let (tree, content) = self.cold_build(root_fd, &mut pending)?;
                    (tree, content, 0, Some(why))
                }
            },
        };
        tree.inotify
            .drain(&mut pending)
            .map_err(|e| format!("inotify read failed: {e}"))?;
        let mut shared = self.lock();
        if self.closing.load(Ordering::SeqCst) {
            return Err("closed".into());
        }
        let mut content = content;
        tree.apply(&pending, &mut Refresh(&mut content.ids))?;
        let unfiltered = large_files(&tree, &content, self.options.exact_min_bytes);
        shared.unfiltered_files = unfiltered.len() as u64;
        shared.restored_files = restored;
        shared.cache = note;
        shared.live = Some(Live {
            tree,
            content,
            root_id,
        });
        shared.state = IndexState::Ready;
        shared.reason = None;
        shared.build_ms = started.elapsed().as_secs_f64() * 1000.0;
        shared.last_refresh_unix_ms = Some(now_unix_ms());
        self.changed.notify_all();
        Ok(unfiltered)
    }

    /// Tree::build from the root with `contents`.
    fn tree_build(
        &self,
        root_fd: std::os::fd::OwnedFd,
        contents: &mut dyn super::tree::Contents,
        pending: &mut Vec<Event>,
    ) -> Result<Tree, String> {
        Tree::build(
            root_fd,
            self.root.host().to_path_buf(),
            self.root.policy().cloned(),
            self.options.max_watches.unwrap_or(usize::MAX),
            contents,
            &self.closing,
            pending,
        )
    }

    /// A build from the tree: every file read as it is listed, one segment.
    fn cold_build(
        &self,
        root_fd: std::os::fd::OwnedFd,
        pending: &mut Vec<Event>,
    ) -> Result<(Tree, Content), String> {
        let mut ids = Ids::default();
        let mut building = Building {
            reader: Reader::new(self.options.max_file_bytes),
            builder: SegmentBuilder::new(),
            ids: &mut ids,
            bytes: 0,
            cancel: &self.closing,
        };
        let tree = self.tree_build(root_fd, &mut building, pending)?;
        let mut postings = Postings::default();
        postings.push(building.builder.finish());
        let content = Content {
            postings,
            ids,
            exact: HashMap::new(),
        };
        Ok((tree, content))
    }

    /// A start from the cache file in `dir`: the file read and checked on
    /// a second thread while this one lists and watches the tree, leaving
    /// every file dirty with its stamp noted (`Listed`); then the files
    /// whose stamp is the saved one get their saved ids (`cache::restore`).
    /// `Ok(Err(why))`: the cache cannot be used (build from the tree);
    /// `Err`: the build itself failed.
    #[allow(clippy::type_complexity)]
    fn warm_start(
        &self,
        dir: &std::path::Path,
        key: &Key<'_>,
        root_fd: std::os::fd::OwnedFd,
        pending: &mut Vec<Event>,
    ) -> Result<Result<(Tree, Content, u64), String>, String> {
        if let Err(why) = cache::saved_exists(dir, key) {
            return Ok(Err(why));
        }
        std::thread::scope(|scope| {
            let loader = std::thread::Builder::new()
                .name("pi-index-load".into())
                .spawn_scoped(scope, || {
                    cache::load(dir, key, self.options.cache_max_bytes)
                });
            let mut listed = Listed::default();
            let tree = self.tree_build(root_fd, &mut listed, pending);
            let loaded = match loader {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|_| Err("the loader failed".into())),
                Err(e) => Err(format!("no loader thread: {e}")),
            };
            let mut tree = tree?;
            Ok(loaded.map(|saved| {
                let (content, restored) = cache::restore(&mut tree, &listed, saved);
                (tree, content, restored)
            }))
        })
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
pub(super) fn large_files(tree: &Tree, content: &Content, min: u64) -> Vec<(u32, Vec<u8>)> {
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

/// The oldest dirty files still dirty (up to a round's worth), with their
/// paths from the root; stale entries are dropped.
pub(super) fn take_dirty(tree: &mut Tree) -> Vec<(DirtyRef, Vec<u8>)> {
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
