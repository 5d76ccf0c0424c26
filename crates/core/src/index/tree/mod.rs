//! The cached walk: every directory the live walk from the root would enter,
//! its sorted listing (as `walk::listing::Listing` gives it), each child's
//! ignore decision (the walker's own rules, from the root), and per file its
//! content id or a mark that it must be read. Kept fresh by applying
//! inotify events (see `apply`); answers walks with `dfs`.
//!
//! One job per file: `node` (what is kept per directory and entry), `build`
//! (the first build, growing into new directories), `watches` (which watch
//! stands for what), `events` (applying inotify events, settling re-read
//! files) and `search` (answering walks).

mod build;
mod events;
mod node;
mod search;
#[cfg(test)]
mod tests;
mod watches;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

use super::watch::{Inotify, Mounts};
use crate::policy::Policy;
use crate::walk::rules::Rules;
use crate::walk::Kind;

use events::Fresh;
pub(crate) use node::{Child, DirNode, FileState, NameFilter, Node};
use node::{ChildName, NO_WATCH};
use search::Places;
pub(crate) use search::TreeSearch;

/// A directory's place in `Tree::nodes`.
pub(crate) type DirId = u32;

/// The root directory's id.
pub(crate) const ROOT: DirId = 0;

/// Names whose change alters ignore decisions below their directory (the
/// ignore files, and the repository markers `Level::of_dir` looks at).
const RULE_NAMES: [&[u8]; 4] = [b".gitignore", b".ignore", b".git", b".jj"];

/// What a watch descriptor watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    Dir(DirId),
    /// A hard-linked file's inode; its names in the tree are in `links`.
    Link,
    /// A directory watched for rule files only: events on `names` change the
    /// decisions of `dir`'s subtree (`None`: the whole tree, for ancestors
    /// of the root).
    Rules {
        dir: Option<DirId>,
        names: &'static [&'static [u8]],
    },
}

const GIT_DIR_NAMES: &[&[u8]] = &[b"info"];
const GIT_INFO_NAMES: &[&[u8]] = &[b"exclude"];

/// A file to re-index: where it is and the generation it was marked with.
#[derive(Debug, Clone)]
pub(crate) struct DirtyRef {
    pub(crate) dir: DirId,
    pub(crate) name: Box<[u8]>,
    pub(crate) generation: u64,
}

/// A file the tree has just listed, for `Contents::index_now`.
pub(crate) struct NewFile<'a> {
    /// Its directory, open.
    pub(crate) dir: BorrowedFd<'a>,
    pub(crate) name: &'a [u8],
    /// Its path from the root.
    pub(crate) rel: &'a [u8],
    /// It has more than one link and its inode is watched, so it may be
    /// indexed even so.
    pub(crate) linked: bool,
    /// What `fstatat` (no symlinks followed) said of it as it was listed.
    pub(crate) stat: Option<&'a nix::sys::stat::FileStat>,
}

/// How the tree gets file contents indexed.
pub(crate) trait Contents {
    /// Indexes `file` now (a build), or `None` to leave it to the
    /// background (refreshes: the file is marked dirty).
    fn index_now(&mut self, file: NewFile<'_>) -> Option<FileState>;
    /// A content id no file uses any more.
    fn retire(&mut self, id: u32);
}

/// A name in the tree: its directory and the name in it.
type Name = (DirId, Box<[u8]>);

/// A directory just indexed, and its subdirectories to index next.
type Grown = (DirId, Vec<Box<[u8]>>);

/// Why the index cannot go on: it steps aside with this reason.
pub(crate) type Aside = String;

pub(crate) struct Tree {
    root_fd: OwnedFd,
    root_host: PathBuf,
    rules: Rules,
    /// The workspace policy: denied-read entries are stored as ignored.
    policy: Option<Arc<Policy>>,
    nodes: Vec<Option<DirNode>>,
    /// Ids free for reuse; ids freed while events are applied wait in
    /// `freed` until the end, so no pending event reaches a reused id.
    free: Vec<DirId>,
    freed: Vec<DirId>,
    watches: HashMap<i32, Watched>,
    /// Watches on the root's ancestors (for their rule files).
    ancestor_wds: Vec<i32>,
    /// Per ancestor watch, the name in it that leads to the root: deleting
    /// or moving it takes the root away (the root's own `IN_DELETE_SELF`
    /// waits until its last descriptor closes, and the index holds one).
    on_path: HashMap<i32, Box<[u8]>>,
    /// Per hard-linked file's watch, its names in the tree.
    links: HashMap<i32, Vec<Name>>,
    /// Inodes whose link watch was made since the last `attach_links`, with
    /// their watches: the first name of each seen linked, whose other names
    /// may be in the tree unwatched (listed while they had one link).
    new_links: Vec<(u64, i32)>,
    pub(crate) inotify: Inotify,
    /// `None` where /proc is not mounted (mounts are then not noticed).
    pub(crate) mounts: Option<Mounts>,
    max_watches: usize,
    generation: u64,
    /// Files marked dirty, oldest first (entries may be stale: check the
    /// generation).
    pub(crate) dirty: Vec<DirtyRef>,
    scratch: Vec<u8>,
    /// Raised by every change of the tree (`apply`, `settle`, the only
    /// ways to change it once built): what is derived from the tree (its
    /// `Places`) holds for one version.
    version: u64,
    places: Option<Places>,
}

/// Opens a directory below the root fd by its path from the root, never
/// through a symlink (as the walker, which opens each level `O_NOFOLLOW`).
pub(crate) fn open_beneath(root: BorrowedFd<'_>, rel: &[u8], dir: bool) -> nix::Result<OwnedFd> {
    let rel = if rel.is_empty() { &b"."[..] } else { rel };
    let flags = if dir {
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
    } else {
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC
    };
    // Kernels before 5.6, seccomp filters and emulators (qemu-user 7.2) lack openat2: stop trying.
    static NO_OPENAT2: AtomicBool = AtomicBool::new(false);
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let how = OpenHow::new()
            .flags(flags)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
        match openat2(root, Path::new(OsStr::from_bytes(rel)), how) {
            Err(Errno::ENOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            done => return done,
        }
    }
    open_by_components(root, rel, flags)
}

/// `open_beneath` one component at a time, each directory opened `O_NOFOLLOW`: what
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` asks of the kernel, for kernels without it. The index
/// names paths by the names it listed, so `.`, `..` and empty components are refused (`EXDEV`,
/// as the kernel refuses an escape), not resolved.
fn open_by_components(root: BorrowedFd<'_>, rel: &[u8], flags: OFlag) -> nix::Result<OwnedFd> {
    if rel == b"." {
        return openat(root, ".", flags, Mode::empty());
    }
    let mut parts = rel.split(|&b| b == b'/').peekable();
    let mut dir: Option<OwnedFd> = None;
    while let Some(part) = parts.next() {
        if part.is_empty() || part == b"." || part == b".." {
            return Err(Errno::EXDEV);
        }
        let at = dir.as_ref().map_or(root, |d| d.as_fd());
        let name = OsStr::from_bytes(part);
        if parts.peek().is_none() {
            return openat(at, name, flags, Mode::empty());
        }
        let step = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        dir = Some(openat(at, name, step, Mode::empty())?);
    }
    Err(Errno::ENOENT)
}

/// `dir/name`, or `name` at the top.
pub(crate) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(dir.len() + 1 + name.len());
    path.extend_from_slice(dir);
    if !dir.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

fn is_rule_name(name: &[u8]) -> bool {
    RULE_NAMES.contains(&name)
}

impl Tree {
    pub(crate) fn node(&self, id: DirId) -> Option<&DirNode> {
        self.nodes.get(id as usize).and_then(Option::as_ref)
    }

    fn node_mut(&mut self, id: DirId) -> Option<&mut DirNode> {
        self.nodes.get_mut(id as usize).and_then(Option::as_mut)
    }

    pub(crate) fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The rules of a walk from the root, as read now, with the policy's.
    fn new_rules(&self) -> Rules {
        Rules::new(&self.root_host, None).with_policy(self.policy.as_ref(), Path::new(""))
    }

    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// Every indexed directory.
    pub(crate) fn dirs(&self) -> impl Iterator<Item = &DirNode> {
        self.nodes.iter().flatten()
    }

    pub(crate) fn watch_count(&self) -> usize {
        self.watches.len()
    }

    /// Indexed directories, and files (not ignored) in them.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let mut dirs = 0;
        let mut files = 0;
        for node in self.nodes.iter().flatten() {
            dirs += 1;
            files += node
                .children
                .iter()
                .filter(|c| c.kind == Kind::File && !c.ignored)
                .count() as u64;
        }
        (dirs, files)
    }

    /// Heap bytes of the tree (listings, names, watch table), roughly.
    pub(crate) fn memory_bytes(&self) -> usize {
        let mut bytes = self.nodes.capacity() * std::mem::size_of::<Option<DirNode>>();
        for node in self.nodes.iter().flatten() {
            bytes += node.rel.capacity() + node.name.len() + node.names.memory_bytes();
            bytes += node.children.capacity() * std::mem::size_of::<Child>();
            bytes += node
                .children
                .iter()
                .filter(|c| matches!(c.name, ChildName::Heap(_)))
                .map(|c| c.name.len())
                .sum::<usize>();
        }
        // A hash table entry: key, value and control byte, at 7/8 load.
        bytes += self.watches.capacity() * (std::mem::size_of::<(i32, Watched)>() + 1);
        for names in self.links.values() {
            bytes += names.capacity() * std::mem::size_of::<Name>();
            bytes += names.iter().map(|(_, n)| n.len()).sum::<usize>();
        }
        bytes += self.links.capacity() * (std::mem::size_of::<(i32, Vec<Name>)>() + 1);
        if let Some(p) = &self.places {
            bytes += (p.dir_of.capacity() + p.always.capacity() + p.blocked.capacity()) * 4;
        }
        bytes + self.dirty.capacity() * std::mem::size_of::<DirtyRef>()
    }

    /// Files currently dirty.
    pub(crate) fn dirty_count(&self) -> u64 {
        self.nodes
            .iter()
            .flatten()
            .flat_map(|n| &n.children)
            .filter(|c| matches!(c.node, Node::File(FileState::Dirty(_))))
            .count() as u64
    }
}
