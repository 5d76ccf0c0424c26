//! The persisted index (docs/index.md, "Persisted index"): at close, the
//! content ids of the files the index holds, each with the stamp its file
//! had (inode, size, mtime and ctime to the nanosecond), and the posting
//! lists and exact filters over them, written to one file per workspace in
//! a private cache directory; at the next start, read back, checked (a
//! SHA-256 of the whole, then a decoding that bounds every length) and
//! used by a build that lists and watches the whole tree as any build
//! does, keeping a saved id only for a file whose stamp is unchanged and
//! reading every other file.
//!
//! What proves a file unchanged: its ctime, which the kernel sets to the
//! current time on every change of contents or metadata and which no
//! unprivileged call sets back, with inode, size and mtime. A stamp is
//! saved only when inotify showed no change since the file was read (the
//! queue is drained after the stat pass, and any event cancels the save),
//! and not at all for a file changed within `RACY_NS` before the save, which
//! a later write in the same clock tick could leave with the same stamp.

pub(crate) mod codec;
#[cfg(test)]
pub(super) mod tests;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::AtFlags;
use nix::sys::stat::FileStat;
use sha2::{Digest, Sha256};

use super::content::{Content, Ids};
use super::grams::{Postings, RawBloom};
use super::tree::{open_beneath, Contents, FileState, NewFile, Node, Tree};
use codec::{Cursor, Writer};

const MAGIC: &[u8; 8] = b"piindex\0";
/// Raised whenever the encoding changes: an older file is refused.
const VERSION: u32 = 1;
/// A file changed this close before the save is not saved: a write in the
/// same tick of the kernel's coarse clock (or a filesystem's timestamp
/// granularity, up to FAT's 2 s) could give it the same stamp.
const RACY_NS: i128 = 3_000_000_000;

#[cfg(test)]
thread_local! {
    /// Tests save files just written: they wait for the clock's next tick
    /// instead (see `tests::next_tick`).
    pub(crate) static RACY_NS_FOR_TESTS: std::cell::Cell<Option<i128>> =
        const { std::cell::Cell::new(None) };
}

fn racy_ns() -> i128 {
    #[cfg(test)]
    if let Some(ns) = RACY_NS_FOR_TESTS.get() {
        return ns;
    }
    RACY_NS
}

/// The cache directory's total size, by default: a kernel-sized workspace
/// takes ~100 MB.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 2 << 30;

/// `$XDG_CACHE_HOME/pi-native-ops/index` (an absolute `XDG_CACHE_HOME`),
/// else `$HOME/.cache/pi-native-ops/index`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        let home = PathBuf::from(std::env::var_os("HOME")?);
        home.is_absolute().then(|| home.join(".cache"))
    })?;
    Some(base.join("pi-native-ops").join("index"))
}

/// What proves a file unchanged since its content was indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(crate) fn of(st: &FileStat) -> Stamp {
        Stamp {
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    fn latest_ns(&self) -> i128 {
        let ns = |(s, n): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(n);
        ns(self.mtime).max(ns(self.ctime))
    }
}

/// A saved file: its content id and stamp.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SavedFile {
    pub(crate) id: u32,
    pub(crate) stamp: Stamp,
}

/// A cache file read back and checked.
pub(crate) struct Saved {
    /// By path from the root.
    pub(crate) files: HashMap<Box<[u8]>, SavedFile>,
    pub(crate) content: Content,
}

/// What a cache file must have been written for: the same workspace
/// directory (path and identity) and the same options.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Key<'a> {
    pub(crate) root: &'a Path,
    pub(crate) root_id: (u64, u64),
    pub(crate) max_file_bytes: u64,
    pub(crate) exact_min_bytes: u64,
}

impl Key<'_> {
    fn encode(&self, w: &mut Writer) {
        w.bytes(self.root.as_os_str().as_bytes());
        w.u64(self.root_id.0);
        w.u64(self.root_id.1);
        w.u64(self.max_file_bytes);
        w.u64(self.exact_min_bytes);
    }

    fn matches(&self, c: &mut Cursor<'_>) -> Option<bool> {
        Some(
            c.bytes()? == self.root.as_os_str().as_bytes()
                && (c.u64()?, c.u64()?) == self.root_id
                && c.u64()? == self.max_file_bytes
                && c.u64()? == self.exact_min_bytes,
        )
    }

    /// The file's name in the cache directory: a hash of the root's path.
    fn file_name(&self) -> String {
        let hash = Sha256::digest(self.root.as_os_str().as_bytes());
        let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}.idx")
    }
}

/// The cache file's bytes for `tree` and `content`, or why none is
/// written. `now_ns`: the time before the stat pass (Unix, nanoseconds).
pub(crate) fn encode(
    key: &Key<'_>,
    tree: &Tree,
    content: &Content,
    now_ns: i128,
) -> Result<Vec<u8>, String> {
    let mut w = Writer::default();
    key.encode(&mut w);
    w.u32s(&content.ids.sizes);
    content.postings.encode(&mut w);
    let mut exact: Vec<(&u32, &RawBloom)> = content.exact.iter().collect();
    exact.sort_unstable_by_key(|(id, _)| **id);
    w.u64(exact.len() as u64);
    for (&id, bloom) in exact {
        w.u32(id);
        bloom.encode(&mut w);
    }
    // The stat pass: each indexed file's stamp as it is now.
    let mut files = Writer::default();
    let mut count = 0u64;
    for node in tree.dirs() {
        let Ok(dir) = open_beneath(tree.root_fd(), &node.rel, true) else {
            continue;
        };
        for child in &node.children {
            let Node::File(FileState::Indexed(id)) = child.node else {
                continue;
            };
            if child.ignored || !content.ids.is_live(id) {
                continue;
            }
            let name = OsStr::from_bytes(&child.name);
            let Ok(st) = nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            let stamp = Stamp::of(&st);
            if stamp.latest_ns() >= now_ns - racy_ns() {
                continue;
            }
            let mut path = node.rel.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&child.name);
            files.bytes(&path);
            files.u32(id);
            files.u64(stamp.ino);
            files.i64(stamp.size);
            for (s, n) in [stamp.mtime, stamp.ctime] {
                files.i64(s);
                files.i64(n);
            }
            count += 1;
        }
    }
    w.u64(count);
    w.0.extend_from_slice(&files.0);
    Ok(frame(&w.0))
}

/// Header (magic, version, body length, SHA-256 of the body), then the body.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 52);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(body));
    out.extend_from_slice(body);
    out
}

/// The cache file's contents if they are a whole, checked file written for
/// `key`; else why not.
pub(crate) fn decode(bytes: &[u8], key: &Key<'_>) -> Result<Saved, String> {
    let mut c = Cursor::new(bytes);
    let header = (c.take(8), c.u32(), c.u64(), c.take(32));
    let (Some(magic), Some(version), Some(len), Some(sum)) = header else {
        return Err("truncated".into());
    };
    if magic != MAGIC || version != VERSION {
        return Err("another format".into());
    }
    let body = usize::try_from(len)
        .ok()
        .and_then(|len| c.take(len))
        .filter(|_| c.is_empty())
        .ok_or("truncated")?;
    if Sha256::digest(body)[..] != *sum {
        return Err("checksum mismatch".into());
    }
    decode_body(body, key)?.ok_or_else(|| "malformed".into())
}

fn decode_body(body: &[u8], key: &Key<'_>) -> Result<Option<Saved>, String> {
    let mut c = Cursor::new(body);
    match key.matches(&mut c) {
        Some(true) => {}
        Some(false) => return Err("written for another workspace or options".into()),
        None => return Ok(None),
    }
    Ok(decode_content(&mut c))
}

fn decode_content(c: &mut Cursor<'_>) -> Option<Saved> {
    let sizes = c.u32s()?;
    let ids = u32::try_from(sizes.len()).ok()?;
    let postings = Postings::decode(c, ids)?;
    let mut exact = HashMap::new();
    for _ in 0..c.count(12)? {
        let id = c.u32()?;
        let bloom = RawBloom::decode(c)?;
        if id >= ids || exact.insert(id, bloom).is_some() {
            return None;
        }
    }
    let n = c.count(60)?;
    let mut files = HashMap::with_capacity(n);
    let mut used = vec![false; sizes.len()];
    for _ in 0..n {
        let path = c.bytes()?;
        let id = c.u32()?;
        let stamp = Stamp {
            ino: c.u64()?,
            size: c.i64()?,
            mtime: (c.i64()?, c.i64()?),
            ctime: (c.i64()?, c.i64()?),
        };
        // One file per id, each id of a live size.
        let slot = used.get_mut(id as usize)?;
        if *slot || sizes[id as usize] == super::content::DEAD {
            return None;
        }
        *slot = true;
        if files.insert(path.into(), SavedFile { id, stamp }).is_some() {
            return None;
        }
    }
    if !c.is_empty() {
        return None;
    }
    let live_bytes = sizes
        .iter()
        .filter(|&&s| s != super::content::DEAD)
        .map(|&s| u64::from(s))
        .sum();
    Some(Saved {
        files,
        content: Content {
            postings,
            ids: Ids { sizes, live_bytes },
            exact,
        },
    })
}

/// The walk of a warm start: every file left dirty (as a refresh leaves a
/// changed one), the stamp it had when listed kept by path, for `restore`
/// to match with the saved ones once the cache file is read. Only files
/// the index may hold: regular, and hard-linked only with a watched inode.
#[derive(Default)]
pub(crate) struct Listed {
    stamps: HashMap<Box<[u8]>, Stamp>,
}

impl Contents for Listed {
    fn index_now(&mut self, file: NewFile<'_>) -> Option<FileState> {
        if let Some(st) = file.stat {
            let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
            if regular && (st.st_nlink <= 1 || file.linked) {
                self.stamps.insert(file.rel.into(), Stamp::of(st));
            }
        }
        None
    }
    fn retire(&mut self, _: u32) {}
}

/// Gives each dirty file of `tree` listed with the stamp saved for its path
/// the saved content id (one file per id); the others stay dirty, searched
/// directly until the thread re-reads them. Returns the saved content with
/// the ids no file kept retired, and how many files kept theirs.
pub(crate) fn restore(tree: &mut Tree, listed: &Listed, saved: Saved) -> (Content, u64) {
    let Saved { files, mut content } = saved;
    let mut kept = vec![false; content.ids.sizes.len()];
    let mut restored = 0;
    let mut left = Vec::new();
    for r in std::mem::take(&mut tree.dirty) {
        let id = tree.dirty_path(&r).and_then(|path| {
            let saved = files.get(&path[..])?;
            let unchanged = listed.stamps.get(&path[..]) == Some(&saved.stamp);
            (unchanged && !kept[saved.id as usize]).then_some(saved.id)
        });
        match id {
            Some(id) if tree.settle(&r, FileState::Indexed(id), false) => {
                kept[id as usize] = true;
                restored += 1;
            }
            _ => left.push(r),
        }
    }
    tree.dirty = left;
    for (id, _) in kept.iter().enumerate().filter(|(_, kept)| !**kept) {
        content.ids.retire(id as u32);
    }
    let ids = &content.ids;
    content.exact.retain(|&id, _| ids.is_live(id));
    content.postings.merge_small(&|id| ids.is_live(id));
    (content, restored)
}

/// Whether a cache file for `key` is in `dir` at all (else why not), before
/// a warm start is tried.
pub(crate) fn saved_exists(dir: &Path, key: &Key<'_>) -> Result<(), String> {
    match fs::symlink_metadata(dir.join(key.file_name())) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("none saved".into()),
        Err(e) => Err(format!("cannot open: {e}")),
    }
}

/// The cache directory at `dir`, made private (0700) if it is ours; `Err`
/// when it is not a directory we own (then nothing is read or written).
fn private_dir(dir: &Path, create: bool) -> Result<fs::File, String> {
    if create {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    }
    let handle = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    let meta = handle.metadata().map_err(|e| e.to_string())?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid {
        return Err(format!("{} is not the user's own", dir.display()));
    }
    if meta.mode() & 0o077 != 0 {
        handle
            .set_permissions(fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
    }
    Ok(handle)
}

/// Reads the cache file for `key` from `dir` (at most `max_bytes`) and
/// checks it; `Err` says why there is none to use.
pub(crate) fn load(dir: &Path, key: &Key<'_>, max_bytes: u64) -> Result<Saved, String> {
    if fs::symlink_metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Err("none saved".into());
    }
    let handle = private_dir(dir, false)?;
    let path = dir.join(key.file_name());
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "none saved".to_string(),
            _ => format!("cannot open: {e}"),
        })?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return Err("not a private file of the user's".into());
    }
    if meta.len() > max_bytes {
        return Err("larger than the cache's bound".into());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut file)
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    drop(handle);
    decode(&bytes, key)
}

/// Writes `bytes` as the cache file for `key` in `dir` (atomically: a new
/// file renamed over the old), then removes the least recently written
/// other files until the directory holds at most `max_bytes`.
pub(crate) fn store(dir: &Path, key: &Key<'_>, bytes: &[u8], max_bytes: u64) -> Result<(), String> {
    if bytes.len() as u64 > max_bytes {
        return Err("larger than the cache's bound".into());
    }
    let handle = private_dir(dir, true)?;
    let name = key.file_name();
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
        file.write_all(bytes)?;
        fs::rename(&temp, dir.join(&name))
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(format!("cannot write: {e}"));
    }
    drop(handle);
    evict(dir, &name, max_bytes);
    Ok(())
}

/// Removes the oldest cache files but `keep` while the directory's files
/// add up to more than `max_bytes`.
fn evict(dir: &Path, keep: &str, max_bytes: u64) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_name().as_bytes().ends_with(b".idx"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let when = meta.modified().ok()?;
            meta.is_file().then(|| (when, meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max_bytes {
            break;
        }
        if path.file_name() != Some(OsStr::new(keep)) && fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}
