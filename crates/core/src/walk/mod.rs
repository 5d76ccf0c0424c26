//! The one walker shared by find and grep: an ordered, parallel directory
//! walk on descriptors.
//!
//! Three parts: `rules` (which entries the ignore files leave out),
//! `listing` (reading one directory through its descriptor) and
//! `scheduler` (the ordered parallel walk over both).
//!
//! Rules (fd 10 / ripgrep 15 semantics, see docs/contracts.md, "find"): hidden files
//! included; `.ignore`, `.gitignore` and `.git/info/exclude` honoured
//! hierarchically, whether or not the tree is a git repository; symlinks
//! never followed; the walk never leaves the start directory.
//!
//! **Order.** Output comes in path order (depth-first, siblings by the bytes
//! of their names, a directory before its contents) while every core works.
//! Each directory, and for searching visitors each run of files, is a task
//! keyed by its position in that order; threads always take the first
//! pending task, so they work where the output is, and the calling thread
//! hands results to the sink in order, helping with tasks while it waits.
//! A sink that has enough stops the walk: a search that is answered by the
//! first files of the tree never lists the rest.
//!
//! **Why not `ignore`'s walkers.** Its sorted walk is sequential and its
//! parallel walk runs in no useful order; both open every directory by its
//! whole path and probe each one for ignore files. Here a directory is
//! opened relative to its parent's descriptor with `O_NOFOLLOW` (so a
//! swapped-in symlink can never lead outside), its listing tells which
//! ignore files exist, and only those are read. The rules themselves are
//! `ignore`'s `Gitignore` and `Override` matchers, combined the way its
//! walker combines them.

pub(crate) mod listing;
mod rule_file;
pub(crate) mod rules;
mod scheduler;
#[cfg(test)]
mod tests;

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use listing::DirRef;

pub use listing::DirHandle;
pub use rules::Rules;
// The index's candidate search runs on as many threads as a walk.
#[cfg(target_os = "linux")]
pub(crate) use scheduler::threads;
pub use scheduler::walk;

/// What a directory entry is (symlinks are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symlink (never followed).
    Symlink,
    /// Anything else: a FIFO, socket or device (never read by a walk).
    Other,
}

/// An entry the walk found, as a visitor sees it.
pub struct Entry<'a> {
    dir: DirRef<'a>,
    name: &'a [u8],
    rel: &'a [u8],
    /// What the entry is.
    pub kind: Kind,
    halt: Halt<'a>,
}

/// The walk's end: the sink had enough, or the caller cancelled.
#[derive(Clone, Copy)]
struct Halt<'a> {
    stop: &'a AtomicBool,
    cancel: &'a AtomicBool,
}

impl Halt<'_> {
    fn halted(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.cancel.load(Ordering::Relaxed)
    }
}

impl Entry<'_> {
    /// The entry's name.
    pub fn name(&self) -> &OsStr {
        os_str(self.name)
    }

    /// The path relative to the start directory.
    pub fn rel(&self) -> &Path {
        Path::new(os_str(self.rel))
    }

    /// Whether the walk is ending, so a long visit can give up.
    pub fn halted(&self) -> bool {
        self.halt.halted()
    }

    /// Opens the entry for reading, relative to its directory and without
    /// following a symlink (a file swapped for one since the listing fails).
    pub fn open(&self) -> io::Result<File> {
        listing::open_file_at(self.dir, self.name)
    }
}

/// A walk path or name as an `OsStr`: unix bytes as they are.
#[cfg(unix)]
pub(crate) fn os_str(bytes: &[u8]) -> &OsStr {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(bytes)
}

/// A walk path or name as an `OsStr`: on Windows the bytes are WTF-8, as
/// `OsStr::as_encoded_bytes` gives them.
#[cfg(windows)]
pub(crate) fn os_str(bytes: &[u8]) -> &OsStr {
    // SAFETY: every walk path and name is built from `as_encoded_bytes` of
    // `OsStr`s (names listed, paths given) and of `str`s (patterns, rules),
    // split and joined only at ASCII `/`, which the encoding allows. Bytes
    // read from files never come here (`rules::text_path` checks them).
    unsafe { OsStr::from_encoded_bytes_unchecked(bytes) }
}

/// Where the walk starts, from the workspace root, `/`-separated: the start
/// directory's real path (`dir`, the host path the root resolved) less the
/// root's `host` path; on Windows from the start's final path, so the
/// names are the filesystem's own (long names, stored case).
pub(crate) fn start_in_root(host: &Path, dir: &Path, start: &DirHandle) -> std::path::PathBuf {
    #[cfg(windows)]
    {
        let _ = dir;
        let host = crate::root::normalize(host.as_os_str()).unwrap_or_default();
        if let Some(rel) = crate::root::strip_prefix_ci(start.path(), &host) {
            return std::path::PathBuf::from(rel.replace('\\', "/"));
        }
        std::path::PathBuf::new()
    }
    #[cfg(unix)]
    {
        let _ = start;
        dir.strip_prefix(host)
            .unwrap_or(Path::new(""))
            .to_path_buf()
    }
}

/// What a walk does with the entries it finds.
pub trait Visitor: Sync {
    /// What a visit yields, handed to the sink in path order.
    type Out: Send;
    /// A thread's own state (a searcher and its buffers).
    type Local;
    /// Whether visiting a file is costly (a search): then the files of a
    /// directory are visited in small runs, each a task of its own, so all
    /// threads share a large directory.
    const SEARCHES_FILES: bool = false;

    /// Makes one thread's `Local`, once per walking thread.
    fn local(&self) -> Self::Local;
    /// Entries left out with everything below them, beyond the ignore rules.
    fn skip(&self, _entry: &Entry<'_>) -> bool {
        false
    }
    /// An entry's output, if any. Free of side effects: for the files of a
    /// visitor that does not search them, the walker visits before it asks
    /// the ignore rules (most files match nothing, and a visit is far
    /// cheaper than the rules), so it may visit an entry it then leaves out.
    fn visit(&self, local: &mut Self::Local, entry: &Entry<'_>) -> Option<Self::Out>;
    /// Heap bytes an output holds while it waits to be handed on: the walk
    /// keeps at most a bounded sum of them ahead of the sink.
    fn held(_out: &Self::Out) -> usize {
        0
    }
}
