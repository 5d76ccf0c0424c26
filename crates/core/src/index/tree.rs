//! The cached walk: every directory the live walk from the root would enter,
//! its sorted listing (as `walk::listing::Listing` gives it), each child's
//! ignore decision (the walker's own rules, from the root), and per file its
//! content id or a mark that it must be read. Kept fresh by applying
//! inotify events (see `apply`); answers walks with `dfs`.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

use super::watch::{
    untrusted_filesystem, Event, Inotify, Mounts, WatchError, CONTENT_CHANGED, DIR_MASK, LINK_MASK,
    NAMES_CHANGED, RULES_MASK, SELF_CHANGED,
};
use crate::walk::listing::{kind_at, Listing};
use crate::walk::rules::{Level, Rules};
use crate::walk::Kind;

/// A directory's place in `Tree::nodes`.
pub(crate) type DirId = u32;

/// The root directory's id.
pub(crate) const ROOT: DirId = 0;

/// Names whose change alters ignore decisions below their directory (the
/// ignore files, and the repository markers `Level::of_dir` looks at).
const RULE_NAMES: [&[u8]; 4] = [b".gitignore", b".ignore", b".git", b".jj"];

/// What the index knows of a file's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileState {
    /// Indexed under this content id.
    Indexed(u32),
    /// Changed since it was indexed (or new): always a candidate until
    /// re-indexed; the generation tells a re-read that raced a newer change.
    Dirty(u64),
    /// Never indexed (too large, UTF-16, unreadable, ignored): always a
    /// candidate.
    Always,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    /// An indexed subdirectory.
    Dir(DirId),
    /// A directory not indexed: ignored, `.git`, or one that could not be
    /// opened or watched. A walk that must enter it cannot be answered.
    Unindexed,
    /// A subdirectory about to be indexed (only while a listing is applied).
    Pending,
    File(FileState),
    /// A symlink or special file: matched by name, never read.
    Plain,
}

/// One entry of a directory's listing.
#[derive(Debug)]
pub(crate) struct Child {
    pub(crate) name: ChildName,
    pub(crate) kind: Kind,
    /// The walker's decision from the root, without overrides.
    pub(crate) ignored: bool,
    pub(crate) node: Node,
    /// The watch on a hard-linked file's inode (`NO_WATCH` if none): a
    /// write through a link outside every watched directory reports there.
    link: i32,
    /// A file's inode number when it was listed (0 otherwise): a link made
    /// to it later, in the tree, finds it by this (`attach_links`).
    ino: u64,
}

const NO_WATCH: i32 = -1;

/// Bytes of a name kept inside its `Child` (most names are shorter): a walk
/// of the tree then reads each directory's names in one run of memory, not
/// through a pointer per entry (a cache miss each, most of a warm find's
/// time on a large tree). 22 makes the name 24 bytes, as its tag fits.
const INLINE_NAME: usize = 22;

/// A child's name: inline up to `INLINE_NAME` bytes, else on the heap.
#[derive(Clone)]
pub(crate) enum ChildName {
    Inline(u8, [u8; INLINE_NAME]),
    Heap(Box<[u8]>),
}

impl From<&[u8]> for ChildName {
    fn from(name: &[u8]) -> ChildName {
        if name.len() <= INLINE_NAME {
            let mut bytes = [0; INLINE_NAME];
            bytes[..name.len()].copy_from_slice(name);
            ChildName::Inline(name.len() as u8, bytes)
        } else {
            ChildName::Heap(name.into())
        }
    }
}

impl std::ops::Deref for ChildName {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ChildName::Inline(len, bytes) => &bytes[..*len as usize],
            ChildName::Heap(name) => name,
        }
    }
}

impl std::fmt::Debug for ChildName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

pub(crate) struct DirNode {
    parent: Option<DirId>,
    /// Its name in the parent.
    name: Box<[u8]>,
    /// Path from the root ("" for the root).
    pub(crate) rel: Vec<u8>,
    level: Arc<Level>,
    /// Sorted by name, as the walker lists.
    pub(crate) children: Vec<Child>,
    /// The ends of its other entries' names, and where its directories are
    /// in `children`: a find for names ending otherwise visits only these.
    ends: NameEnds,
    dirs: Vec<u32>,
    wd: i32,
    /// Watches on `.git` and `.git/info`, for the exclude file.
    rule_wds: Vec<i32>,
}

impl DirNode {
    /// The only way its children change (their names and kinds, that is:
    /// a child's `node` changes in place), so `ends` and `dirs` stay true.
    fn set_children(&mut self, children: Vec<Child>) {
        let files = children.iter().filter(|c| c.kind != Kind::Dir);
        self.ends = NameEnds::of(files.map(|c| &*c.name));
        self.dirs = (children.iter().enumerate())
            .filter(|(_, c)| c.kind == Kind::Dir)
            .map(|(i, _)| i as u32)
            .collect();
        self.children = children;
    }
}

/// The last two and three bytes (ASCII case folded) of a directory's names
/// that are no directory's, as a 256-bit Bloom filter: most directories
/// hold no name ending with a find's literal tail (`Kconfig`, `.rs`), and
/// passing them by spares reading every entry. 256 bits keep a typical
/// directory (15 entries, 2 bits each) under an eighth full.
#[derive(Clone, Copy, Default)]
pub(crate) struct NameEnds([u64; 4]);

impl NameEnds {
    fn of<'a>(names: impl Iterator<Item = &'a [u8]>) -> NameEnds {
        let mut ends = NameEnds::default();
        for name in names {
            for n in [2, 3] {
                if let Some(at) = name.len().checked_sub(n) {
                    let bit = Self::bit(&name[at..]);
                    ends.0[bit / 64] |= 1 << (bit % 64);
                }
            }
        }
        ends
    }

    fn bit(end: &[u8]) -> usize {
        let key = end.iter().fold(end.len() as u64, |k, b| {
            k << 8 | u64::from(b.to_ascii_lowercase())
        });
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize
    }

    /// Whether a name that is no directory's may end with `tail` (in any
    /// ASCII case); `true` for a tail shorter than two bytes.
    pub(crate) fn may_end_with(&self, tail: &[u8]) -> bool {
        if tail.len() < 2 {
            return true;
        }
        let bit = Self::bit(&tail[tail.len() - tail.len().min(3)..]);
        self.0[bit / 64] >> (bit % 64) & 1 != 0
    }
}

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

/// How the tree gets file contents indexed.
pub(crate) trait Contents {
    /// Indexes the file `name` in `dir` now (the first build), or `None` to
    /// leave it to the background (refreshes: the file is marked dirty).
    /// `linked`: the file has more than one link and its inode is watched,
    /// so it may be indexed even so.
    fn index_now(&mut self, dir: BorrowedFd<'_>, name: &[u8], linked: bool) -> Option<FileState>;
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

/// Where the files a selective grep may read are, derived from the tree
/// at one version (rebuilt by a pass over it when the tree changed):
/// enough to list a few candidates in walk order without walking it all.
pub(crate) struct Places {
    version: u64,
    /// Per content id, the directory of the file indexed under it
    /// (`NO_DIR`: none).
    dir_of: Vec<DirId>,
    /// Directories holding a file searched whatever the query (dirty or
    /// never indexed), or a second file under an id already placed.
    always: Vec<DirId>,
    /// Directories holding a subdirectory a walk would enter but that is
    /// not indexed (a walk through one is not answered from the tree).
    blocked: Vec<DirId>,
}

const NO_DIR: DirId = DirId::MAX;

/// Opens a directory below the root fd by its path from the root, never
/// through a symlink (as the walker, which opens each level `O_NOFOLLOW`).
pub(crate) fn open_beneath(root: BorrowedFd<'_>, rel: &[u8], dir: bool) -> nix::Result<OwnedFd> {
    let rel = if rel.is_empty() { &b"."[..] } else { rel };
    let flags = if dir {
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
    } else {
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC
    };
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    openat2(root, Path::new(OsStr::from_bytes(rel)), how)
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
    /// Watches and lists the whole tree from the root (reading files through
    /// `contents`), watching the root's ancestors for their rule files.
    /// `cancel` stops it (`Err`). Events that arrive meanwhile are pending
    /// in the inotify queue; `drain_into` keeps it from overflowing.
    pub(crate) fn build(
        root_fd: OwnedFd,
        root_host: PathBuf,
        max_watches: usize,
        contents: &mut dyn Contents,
        cancel: &AtomicBool,
        pending: &mut Vec<Event>,
    ) -> Result<Tree, Aside> {
        let inotify = Inotify::new().map_err(|e| format!("inotify unavailable: {e}"))?;
        let rules = Rules::new(&root_host, None);
        let mut tree = Tree {
            root_fd,
            root_host,
            rules,
            nodes: Vec::new(),
            free: Vec::new(),
            freed: Vec::new(),
            watches: HashMap::new(),
            ancestor_wds: Vec::new(),
            on_path: HashMap::new(),
            links: HashMap::new(),
            new_links: Vec::new(),
            inotify,
            mounts: None,
            max_watches,
            generation: 0,
            dirty: Vec::new(),
            scratch: Vec::new(),
            version: 0,
            places: None,
        };
        tree.watch_ancestors()?;
        // Read again now that they are watched: a change after is an event.
        tree.rules = Rules::new(&tree.root_host, None);
        // Read before listing: a mount made during the build is a change.
        tree.mounts = Mounts::new(&tree.root_host).ok();
        let fd = open_beneath(tree.root_fd.as_fd(), b"", true)
            .map_err(|e| format!("the root cannot be opened: {e}"))?;
        let above = tree.rules.above_start();
        let Some((id, subdirs)) = tree.index_one(None, b"", Vec::new(), fd, above, contents)?
        else {
            return Err("the root cannot be watched".to_string());
        };
        debug_assert_eq!(id, ROOT);
        tree.grow_all(id, subdirs, contents, Some((cancel, pending)))?;
        tree.attach_links(contents);
        Ok(tree)
    }

    pub(crate) fn node(&self, id: DirId) -> Option<&DirNode> {
        self.nodes.get(id as usize).and_then(Option::as_ref)
    }

    fn node_mut(&mut self, id: DirId) -> Option<&mut DirNode> {
        self.nodes.get_mut(id as usize).and_then(Option::as_mut)
    }

    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
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
            bytes += node.rel.capacity() + node.name.len();
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

    fn add_watch(&mut self, fd: BorrowedFd<'_>, mask: u32) -> Result<Option<i32>, Aside> {
        if self.watches.len() >= self.max_watches {
            return Err(format!(
                "watch limit reached ({} directories watched)",
                self.watches.len()
            ));
        }
        match self.inotify.add(fd, mask) {
            Ok(wd) => Ok(Some(wd)),
            Err(WatchError::Limit) => Err(format!(
                "inotify watch limit reached (fs.inotify.max_user_watches, {} watched here)",
                self.watches.len()
            )),
            Err(WatchError::Other) => Ok(None),
        }
    }

    fn drop_watch(&mut self, wd: i32, owner: Watched) {
        if self.watches.get(&wd) == Some(&owner) {
            self.watches.remove(&wd);
            self.inotify.remove(wd);
        }
    }

    /// Watches the root's ancestors, and their `.git` and `.git/info`, for
    /// the rule files `Rules::new(root)` reads from them.
    fn watch_ancestors(&mut self) -> Result<(), Aside> {
        for wd in std::mem::take(&mut self.ancestor_wds) {
            self.watches.remove(&wd);
            self.inotify.remove(wd);
        }
        self.on_path.clear();
        let ancestors: Vec<PathBuf> = self
            .root_host
            .ancestors()
            .skip(1)
            .map(Path::to_path_buf)
            .collect();
        let mut below = self.root_host.clone();
        for dir in ancestors {
            let child: Box<[u8]> = below.file_name().map_or(&b""[..], |n| n.as_bytes()).into();
            below = dir.clone();
            let mut first = true;
            let targets = [
                (dir.clone(), RULE_NAMES.as_slice()),
                (dir.join(".git"), GIT_DIR_NAMES),
                (dir.join(".git/info"), GIT_INFO_NAMES),
            ];
            for (path, names) in targets {
                let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                let Ok(fd) = nix::fcntl::open(&path, flags, Mode::empty()) else {
                    continue;
                };
                if let Some(wd) = self.add_watch(fd.as_fd(), RULES_MASK)? {
                    self.watches.insert(wd, Watched::Rules { dir: None, names });
                    self.ancestor_wds.push(wd);
                    if first {
                        self.on_path.insert(wd, child.clone());
                    }
                }
                first = false;
            }
        }
        // Watches replaced here lose the events still queued for them (a
        // root removed meanwhile, say): the root is checked by path instead.
        let at_path = nix::sys::stat::stat(&self.root_host);
        let held = nix::sys::stat::fstat(self.root_fd.as_fd());
        match (at_path, held) {
            (Ok(a), Ok(h)) if (a.st_dev, a.st_ino) == (h.st_dev, h.st_ino) => Ok(()),
            _ => Err("the root was deleted or moved".to_string()),
        }
    }

    /// Watches `.git` and `.git/info` in the directory open at `fd` (when
    /// `.git` is a directory), for its exclude file.
    fn watch_git(&mut self, id: DirId, fd: BorrowedFd<'_>) -> Result<Vec<i32>, Aside> {
        let mut wds = Vec::new();
        if kind_at(fd, b".git") != Some(Kind::Dir) {
            return Ok(wds);
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        for (path, names) in [(".git", GIT_DIR_NAMES), (".git/info", GIT_INFO_NAMES)] {
            let Ok(dir) = openat(fd, path, flags, Mode::empty()) else {
                continue;
            };
            if let Some(wd) = self.add_watch(dir.as_fd(), RULES_MASK)? {
                if self.watches.contains_key(&wd) {
                    continue;
                }
                self.watches.insert(
                    wd,
                    Watched::Rules {
                        dir: Some(id),
                        names,
                    },
                );
                wds.push(wd);
            }
        }
        Ok(wds)
    }

    fn alloc(&mut self, node: DirNode) -> DirId {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                (self.nodes.len() - 1) as DirId
            }
        }
    }

    /// The rules a directory's own level chains to.
    fn above(&self, parent: Option<DirId>) -> Arc<Level> {
        match parent.and_then(|p| self.node(p)) {
            Some(p) => p.level.clone(),
            None => self.rules.above_start(),
        }
    }

    /// Watches (before listing) and lists one directory open at `fd`,
    /// creating its node. `None` when it cannot be watched (it stays
    /// unindexed). Returns the subdirectories to index next.
    fn index_one(
        &mut self,
        parent: Option<DirId>,
        name: &[u8],
        rel: Vec<u8>,
        fd: OwnedFd,
        above: Arc<Level>,
        contents: &mut dyn Contents,
    ) -> Result<Option<Grown>, Aside> {
        if let Some(fs) = untrusted_filesystem(fd.as_fd()) {
            return Err(format!(
                "{fs} filesystem: changes made elsewhere are not reported"
            ));
        }
        let Some(mut wd) = self.add_watch(fd.as_fd(), DIR_MASK)? else {
            return Ok(None);
        };
        if let Some(&other) = self.watches.get(&wd) {
            // The same directory is already indexed elsewhere: moved here
            // and not yet reconciled there, or mounted twice. One watch
            // cannot tell the two places apart: the other place becomes
            // unindexed (searches through it walk live).
            match other {
                Watched::Dir(other) => self.unindex(other, contents),
                Watched::Rules { .. } | Watched::Link => return Ok(None),
            }
            wd = match self.add_watch(fd.as_fd(), DIR_MASK)? {
                Some(wd) if !self.watches.contains_key(&wd) => wd,
                _ => return Ok(None),
            };
        }
        let listing = Listing::of(fd.as_fd());
        let level = Level::for_listing(fd.as_fd(), &rel, &listing.markers, &self.rules, above);
        let id = self.alloc(DirNode {
            parent,
            name: name.into(),
            rel,
            level,
            children: Vec::new(),
            ends: NameEnds::default(),
            dirs: Vec::new(),
            wd,
            rule_wds: Vec::new(),
        });
        self.watches.insert(wd, Watched::Dir(id));
        let (children, grow, _) = self.children(
            id,
            fd.as_fd(),
            &listing,
            Vec::new(),
            &Fresh::All,
            false,
            contents,
        );
        let rule_wds = self.watch_git(id, fd.as_fd())?;
        if let Some(node) = self.node_mut(id) {
            node.set_children(children);
            node.rule_wds = rule_wds;
        }
        Ok(Some((id, grow)))
    }

    /// Indexes the subdirectories `names` of `parent` and everything below
    /// them, depth first in path order. With `build`, checks `cancel` and
    /// keeps the inotify queue drained into `pending` as it goes.
    fn grow_all(
        &mut self,
        parent: DirId,
        names: Vec<Box<[u8]>>,
        contents: &mut dyn Contents,
        mut build: Option<(&AtomicBool, &mut Vec<Event>)>,
    ) -> Result<(), Aside> {
        let mut stack: Vec<(DirId, Box<[u8]>)> =
            names.into_iter().rev().map(|n| (parent, n)).collect();
        // Directories between two drains during a build: the queue (16384
        // events by default) then holds what a few hundred directories'
        // worth of work lets happen meanwhile.
        const DRAIN_EVERY: usize = 64;
        let mut since_drain = 0;
        while let Some((parent, name)) = stack.pop() {
            if let Some((cancel, pending)) = build.as_mut() {
                if cancel.load(Ordering::Relaxed) {
                    return Err("closed".to_string());
                }
                since_drain += 1;
                if since_drain == DRAIN_EVERY {
                    since_drain = 0;
                    self.inotify
                        .drain(pending)
                        .map_err(|e| format!("inotify read failed: {e}"))?;
                }
            }
            let Some(p) = self.node(parent) else { continue };
            let rel = join(&p.rel, &name);
            let above = p.level.clone();
            let grown = match open_beneath(self.root_fd.as_fd(), &rel, true) {
                Ok(fd) => self.index_one(Some(parent), &name, rel, fd, above, contents)?,
                Err(_) => None,
            };
            let node = match &grown {
                Some((id, _)) => Node::Dir(*id),
                None => Node::Unindexed,
            };
            if let Some(p) = self.node_mut(parent) {
                if let Ok(i) = p.children.binary_search_by(|c| (*c.name).cmp(&name)) {
                    p.children[i].node = node;
                }
            }
            if let Some((id, subdirs)) = grown {
                stack.extend(subdirs.into_iter().rev().map(|n| (id, n)));
            }
        }
        Ok(())
    }

    /// A file newly seen (or reported changed): indexed now or marked dirty.
    fn new_file(
        &mut self,
        dir: DirId,
        fd: BorrowedFd<'_>,
        name: &[u8],
        contents: &mut dyn Contents,
    ) -> (FileState, i32, u64) {
        let (link, ino) = self.watch_link(dir, fd, name);
        let state = contents
            .index_now(fd, name, link != NO_WATCH)
            .unwrap_or_else(|| self.mark_dirty(dir, name));
        (state, link, ino)
    }

    /// Watches the inode of file `name` if it has more than one link (before
    /// it is read). `NO_WATCH` if it has one, or cannot be watched (then it
    /// is always searched). With the watch, the file's inode number (0 if it
    /// cannot be stat'ed).
    fn watch_link(&mut self, dir: DirId, fd: BorrowedFd<'_>, name: &[u8]) -> (i32, u64) {
        use nix::fcntl::AtFlags;
        let Ok(st) = nix::sys::stat::fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return (NO_WATCH, 0);
        };
        let ino = st.st_ino;
        if st.st_nlink <= 1 || self.watches.len() >= self.max_watches {
            return (NO_WATCH, ino);
        }
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(file) = openat(fd, OsStr::from_bytes(name), flags, Mode::empty()) else {
            return (NO_WATCH, ino);
        };
        let Ok(wd) = self.inotify.add(file.as_fd(), LINK_MASK) else {
            return (NO_WATCH, ino);
        };
        match self.watches.get(&wd) {
            None => {
                self.watches.insert(wd, Watched::Link);
                self.new_links.push((ino, wd));
            }
            Some(Watched::Link) => {}
            // Not a file we know as linked: leave it unwatched.
            Some(_) => return (NO_WATCH, ino),
        }
        self.links.entry(wd).or_default().push((dir, name.into()));
        (wd, ino)
    }

    /// Gives the inodes first seen linked since the last call their other
    /// names in the tree: files listed while they had one link, so with no
    /// watch on their inode. `ln a/x b/y` reports only `b/y` (a link count
    /// change raises no event in `a`), and a write through `b/y` reports
    /// only there, so `a/x` would keep its old content: here it joins the
    /// inode's watch (later writes through any name mark it dirty) and is
    /// marked dirty now (for a write made before the watch). One pass over
    /// the tree's entries in memory, only after such a link appeared.
    fn attach_links(&mut self, contents: &mut dyn Contents) {
        if self.new_links.is_empty() {
            return;
        }
        let inodes: HashMap<u64, i32> = std::mem::take(&mut self.new_links)
            .into_iter()
            .filter(|&(ino, wd)| ino != 0 && self.watches.get(&wd) == Some(&Watched::Link))
            .collect();
        let mut found: Vec<(DirId, usize, i32)> = Vec::new();
        for (id, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            for (i, child) in node.children.iter().enumerate() {
                if child.kind != Kind::File || child.link != NO_WATCH || child.ino == 0 {
                    continue;
                }
                if let Some(&wd) = inodes.get(&child.ino) {
                    found.push((id as DirId, i, wd));
                }
            }
        }
        for (id, i, wd) in found {
            let Some(child) = self.node(id).map(|n| &n.children[i]) else {
                continue;
            };
            let (name, node, ignored): (Box<[u8]>, Node, bool) =
                ((*child.name).into(), child.node, child.ignored);
            self.links.entry(wd).or_default().push((id, name.clone()));
            let state = match node {
                Node::File(FileState::Indexed(cid)) if !ignored => {
                    contents.retire(cid);
                    Some(self.mark_dirty(id, &name))
                }
                Node::File(FileState::Dirty(_)) if !ignored => Some(self.mark_dirty(id, &name)),
                _ => None,
            };
            if let Some(child) = self.node_mut(id).map(|n| &mut n.children[i]) {
                child.link = wd;
                if let Some(state) = state {
                    child.node = Node::File(state);
                }
            }
        }
    }

    /// Forgets name `name` of `dir` as a name of the linked file `wd`.
    fn unlink(&mut self, wd: i32, dir: DirId, name: &[u8]) {
        if wd == NO_WATCH {
            return;
        }
        if let Some(names) = self.links.get_mut(&wd) {
            names.retain(|(d, n)| !(*d == dir && **n == *name));
            if names.is_empty() {
                self.links.remove(&wd);
                if self.watches.get(&wd) == Some(&Watched::Link) {
                    self.watches.remove(&wd);
                    self.inotify.remove(wd);
                }
            }
        }
    }

    fn mark_dirty(&mut self, dir: DirId, name: &[u8]) -> FileState {
        self.generation += 1;
        self.dirty.push(DirtyRef {
            dir,
            name: name.into(),
            generation: self.generation,
        });
        FileState::Dirty(self.generation)
    }

    /// The children of directory `id` from a fresh `listing`, keeping the
    /// state of `old` children that were not reported changed. Returns the
    /// children, the subdirectories to index, and the kept subdirectories.
    #[allow(clippy::too_many_arguments)]
    fn children(
        &mut self,
        id: DirId,
        fd: BorrowedFd<'_>,
        listing: &Listing,
        old: Vec<Child>,
        fresh: &Fresh<'_>,
        force: bool,
        contents: &mut dyn Contents,
    ) -> (Vec<Child>, Vec<Box<[u8]>>, Vec<DirId>) {
        let Some(node) = self.node(id) else {
            return Default::default();
        };
        let level = node.level.clone();
        let dir_rel = node.rel.clone();
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut old = old.into_iter().peekable();
        let mut out = Vec::with_capacity(listing.entries.len());
        let mut grow = Vec::new();
        let mut kept = Vec::new();
        for entry in &listing.entries {
            let name = listing.name(entry);
            let kind = entry.kind.unwrap_or(Kind::Other);
            while let Some(gone) = old.next_if(|c| *c.name < *name) {
                self.drop_child(id, gone, contents);
            }
            let prev = old.next_if(|c| *c.name == *name);
            let is_fresh = fresh.contains(name);
            let rel = join(&dir_rel, name);
            let ignored = self
                .rules
                .is_ignored(&level, &rel, kind == Kind::Dir, &mut scratch);
            let mut link = NO_WATCH;
            let mut ino = 0;
            let mut keep = |prev: Option<Child>,
                            tree: &mut Tree,
                            (link, ino): (&mut i32, &mut u64)|
             -> Option<Node> {
                let prev = prev?;
                let same = prev.kind == kind && prev.ignored == ignored && !is_fresh;
                let kept_node = match prev.node {
                    Node::Dir(_) | Node::File(_) | Node::Plain if same => Some(prev.node),
                    // Left as it was unless reported or rules changed.
                    Node::Unindexed if same && !force => Some(Node::Unindexed),
                    _ => None,
                };
                if kept_node.is_none() {
                    tree.drop_child(id, prev, contents);
                } else {
                    (*link, *ino) = (prev.link, prev.ino);
                }
                kept_node
            };
            let node = match kind {
                Kind::Dir if name == b".git" || ignored => {
                    keep(prev, self, (&mut link, &mut ino));
                    Node::Unindexed
                }
                Kind::Dir => match keep(prev, self, (&mut link, &mut ino)) {
                    Some(Node::Dir(sub)) => {
                        kept.push(sub);
                        Node::Dir(sub)
                    }
                    Some(node) => node,
                    None => {
                        grow.push(Box::from(name));
                        Node::Pending
                    }
                },
                Kind::File if ignored => {
                    // Always searched, but watched when linked: a write
                    // through it must reach its other names in the tree.
                    if keep(prev, self, (&mut link, &mut ino)).is_none() {
                        (link, ino) = self.watch_link(id, fd, name);
                    }
                    Node::File(FileState::Always)
                }
                Kind::File => match keep(prev, self, (&mut link, &mut ino)) {
                    Some(node) => node,
                    None => {
                        let (state, watched, inode) = self.new_file(id, fd, name, contents);
                        (link, ino) = (watched, inode);
                        Node::File(state)
                    }
                },
                _ => {
                    keep(prev, self, (&mut link, &mut ino));
                    Node::Plain
                }
            };
            out.push(Child {
                name: name.into(),
                kind,
                ignored,
                node,
                link,
                ino,
            });
        }
        for gone in old {
            self.drop_child(id, gone, contents);
        }
        self.scratch = scratch;
        (out, grow, kept)
    }

    fn drop_child(&mut self, dir: DirId, child: Child, contents: &mut dyn Contents) {
        self.unlink(child.link, dir, &child.name);
        match child.node {
            Node::Dir(id) => self.remove_subtree(id, contents),
            Node::File(FileState::Indexed(cid)) => contents.retire(cid),
            _ => {}
        }
    }

    /// Forgets a directory and everything below it (watches dropped, content
    /// ids retired).
    fn remove_subtree(&mut self, id: DirId, contents: &mut dyn Contents) {
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let Some(node) = self.nodes.get_mut(id as usize).and_then(Option::take) else {
                continue;
            };
            self.drop_watch(node.wd, Watched::Dir(id));
            for wd in node.rule_wds {
                self.watches.remove(&wd);
                self.inotify.remove(wd);
            }
            for child in node.children {
                self.unlink(child.link, id, &child.name);
                match child.node {
                    Node::Dir(sub) => stack.push(sub),
                    Node::File(FileState::Indexed(cid)) => contents.retire(cid),
                    _ => {}
                }
            }
            self.freed.push(id);
        }
    }

    /// Makes directory `id` an unindexed child of its parent.
    fn unindex(&mut self, id: DirId, contents: &mut dyn Contents) {
        let Some(node) = self.node(id) else { return };
        let (parent, name) = (node.parent, node.name.clone());
        self.remove_subtree(id, contents);
        if let Some(p) = parent.and_then(|p| self.node_mut(p)) {
            if let Ok(i) = p.children.binary_search_by(|c| (*c.name).cmp(&name)) {
                p.children[i].node = Node::Unindexed;
            }
        }
    }

    /// Lists directory `id` again after events: names in `fresh` (reported
    /// changed) are taken as new, others keep their state. With `force`
    /// (its rules or an ancestor's changed) its rules are read again and
    /// every subdirectory is redone the same way.
    fn reconcile(
        &mut self,
        id: DirId,
        fresh: &Fresh<'_>,
        force: bool,
        contents: &mut dyn Contents,
    ) -> Result<(), Aside> {
        let Some(node) = self.node(id) else {
            return Ok(());
        };
        let (rel, old_wd, parent) = (node.rel.clone(), node.wd, node.parent);
        let fd = match open_beneath(self.root_fd.as_fd(), &rel, true) {
            Ok(fd) => fd,
            Err(_) if id == ROOT => return Err("the root cannot be opened".to_string()),
            Err(_) => {
                // Gone, unreadable or replaced by a symlink: its parent's
                // events (if any) tell the rest.
                self.unindex(id, contents);
                return Ok(());
            }
        };
        // Watching again gives the same descriptor for the same directory;
        // another one means it was replaced: then nothing of it is kept.
        let wd = match self.inotify.add(fd.as_fd(), DIR_MASK) {
            Ok(wd) => wd,
            Err(WatchError::Limit) => {
                return Err("inotify watch limit reached (fs.inotify.max_user_watches)".into())
            }
            Err(WatchError::Other) => {
                self.unindex(id, contents);
                return Ok(());
            }
        };
        let replaced = wd != old_wd;
        if replaced {
            if self.watches.contains_key(&wd) {
                self.inotify.remove(wd);
                self.unindex(id, contents);
                return Ok(());
            }
            self.drop_watch(old_wd, Watched::Dir(id));
            self.watches.insert(wd, Watched::Dir(id));
        }
        let listing = Listing::of(fd.as_fd());
        let force = force || replaced;
        if force {
            let above = self.above(parent);
            let level = Level::for_listing(fd.as_fd(), &rel, &listing.markers, &self.rules, above);
            let rule_wds = match self.node_mut(id) {
                Some(node) => {
                    node.level = level;
                    std::mem::take(&mut node.rule_wds)
                }
                None => Vec::new(),
            };
            for wd in rule_wds {
                self.watches.remove(&wd);
                self.inotify.remove(wd);
            }
            let rule_wds = self.watch_git(id, fd.as_fd())?;
            if let Some(node) = self.node_mut(id) {
                node.rule_wds = rule_wds;
                node.wd = wd;
            }
        } else if let Some(node) = self.node_mut(id) {
            node.wd = wd;
        }
        let old = self
            .node_mut(id)
            .map(|n| std::mem::take(&mut n.children))
            .unwrap_or_default();
        let fresh = if replaced { &Fresh::All } else { fresh };
        let (children, grow, kept) =
            self.children(id, fd.as_fd(), &listing, old, fresh, force, contents);
        if let Some(node) = self.node_mut(id) {
            node.set_children(children);
        }
        drop(fd);
        self.grow_all(id, grow, contents, None)?;
        if force {
            for sub in kept {
                self.reconcile(sub, &Fresh::None, true, contents)?;
            }
        }
        Ok(())
    }

    /// Applies inotify events: re-lists the directories whose names changed,
    /// recomputes decisions below changed rule files, marks written files
    /// dirty. `Err` when the index must step aside.
    pub(crate) fn apply(
        &mut self,
        events: &[Event],
        contents: &mut dyn Contents,
    ) -> Result<(), Aside> {
        self.version += 1;
        let mut changed: HashMap<DirId, HashSet<Box<[u8]>>> = HashMap::new();
        let mut relist: HashSet<DirId> = HashSet::new();
        let mut forced: HashSet<DirId> = HashSet::new();
        let mut written: Vec<(DirId, &[u8])> = Vec::new();
        let mut linked_writes: Vec<Name> = Vec::new();
        let mut global = false;
        for ev in events {
            if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                return Err("inotify queue overflow: events were lost".to_string());
            }
            let Some(&watched) = self.watches.get(&ev.wd) else {
                continue;
            };
            let name = ev.name.as_deref();
            match watched {
                Watched::Link => {
                    // Written (through any of its names, in the tree or not):
                    // every name here is dirty.
                    if let Some(names) = self.links.get(&ev.wd) {
                        linked_writes.extend(names.iter().cloned());
                    }
                    if ev.mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF) != 0 {
                        self.links.remove(&ev.wd);
                        self.watches.remove(&ev.wd);
                    }
                }
                Watched::Dir(id) => {
                    if ev.mask & SELF_CHANGED != 0 {
                        if id == ROOT {
                            return Err("the root was deleted or moved".to_string());
                        }
                        // Gone, moved or no longer watched: its parent
                        // lists again what is under its name now.
                        if let Some(node) = self.node(id) {
                            if let Some(p) = node.parent {
                                changed.entry(p).or_default().insert(node.name.clone());
                                relist.insert(p);
                            }
                        }
                        continue;
                    }
                    let Some(name) = name else {
                        // Its mode changed: can it still be read?
                        relist.insert(id);
                        continue;
                    };
                    if ev.mask & NAMES_CHANGED != 0 {
                        changed.entry(id).or_default().insert(name.into());
                        relist.insert(id);
                    }
                    if ev.mask & CONTENT_CHANGED != 0 {
                        written.push((id, name));
                    }
                    if is_rule_name(name) && ev.mask & (NAMES_CHANGED | CONTENT_CHANGED) != 0 {
                        if id == ROOT {
                            global = true;
                        }
                        forced.insert(id);
                        relist.insert(id);
                    }
                }
                Watched::Rules { dir, names } => {
                    if ev.mask & NAMES_CHANGED != 0
                        && name.is_some()
                        && self.on_path.get(&ev.wd).map(|n| &**n) == name
                    {
                        return Err(
                            "the root (or a directory above it) was deleted or moved".into()
                        );
                    }
                    let relevant =
                        ev.mask & SELF_CHANGED != 0 || name.is_some_and(|n| names.contains(&n));
                    if !relevant {
                        continue;
                    }
                    match dir {
                        None if ev.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0
                            && names == RULE_NAMES.as_slice() =>
                        {
                            return Err("an ancestor of the root was deleted or moved".into())
                        }
                        None => global = true,
                        Some(d) => {
                            forced.insert(d);
                            relist.insert(d);
                        }
                    }
                }
            }
        }
        written.extend(linked_writes.iter().map(|(d, n)| (*d, &**n)));
        let result = self.apply_changes(global, relist, &changed, &forced, &written, contents);
        self.attach_links(contents);
        self.free.append(&mut self.freed);
        result
    }

    fn apply_changes(
        &mut self,
        global: bool,
        relist: HashSet<DirId>,
        changed: &HashMap<DirId, HashSet<Box<[u8]>>>,
        forced: &HashSet<DirId>,
        written: &[(DirId, &[u8])],
        contents: &mut dyn Contents,
    ) -> Result<(), Aside> {
        if global {
            // Watched before read: a change after the read is an event.
            self.watch_ancestors()?;
            self.rules = Rules::new(&self.root_host, None);
            self.reconcile(ROOT, &Fresh::None, true, contents)?;
        }
        // Parents first: a subtree they drop needs no re-listing.
        let mut order: Vec<(usize, DirId)> = relist
            .into_iter()
            .filter_map(|id| self.node(id).map(|n| (n.rel.len(), id)))
            .collect();
        order.sort_unstable();
        for (_, id) in order {
            let empty = HashSet::new();
            let names = changed.get(&id).unwrap_or(&empty);
            self.reconcile(id, &Fresh::Names(names), forced.contains(&id), contents)?;
        }
        for &(id, name) in written {
            let Some(node) = self.node_mut(id) else {
                continue;
            };
            let Ok(i) = node.children.binary_search_by(|c| (*c.name).cmp(name)) else {
                continue;
            };
            let child = &node.children[i];
            if child.kind != Kind::File || child.ignored {
                continue;
            }
            if let Node::File(FileState::Indexed(cid)) = child.node {
                contents.retire(cid);
            }
            let state = self.mark_dirty(id, name);
            if let Some(node) = self.node_mut(id) {
                node.children[i].node = Node::File(state);
            }
        }
        Ok(())
    }

    /// Where the dirty file `r` is, if it is still dirty with that
    /// generation: its path from the root.
    pub(crate) fn dirty_path(&self, r: &DirtyRef) -> Option<Vec<u8>> {
        let node = self.node(r.dir)?;
        let i = node
            .children
            .binary_search_by(|c| (*c.name).cmp(&r.name))
            .ok()?;
        (node.children[i].node == Node::File(FileState::Dirty(r.generation)))
            .then(|| join(&node.rel, &r.name))
    }

    /// Records the re-indexed state of dirty file `r`, if it is still dirty
    /// with that generation (else the caller retires what it indexed).
    /// `linked`: the read saw more than one link, which is indexable only if
    /// the file's inode is watched.
    pub(crate) fn settle(&mut self, r: &DirtyRef, state: FileState, linked: bool) -> bool {
        self.version += 1;
        let Some(node) = self.node_mut(r.dir) else {
            return false;
        };
        let Ok(i) = node.children.binary_search_by(|c| (*c.name).cmp(&r.name)) else {
            return false;
        };
        let child = &mut node.children[i];
        if child.node != Node::File(FileState::Dirty(r.generation)) {
            return false;
        }
        if linked && child.link == NO_WATCH {
            child.node = Node::File(FileState::Always);
            return false;
        }
        child.node = Node::File(state);
        true
    }

    /// The indexed directory at `rel` (from the root), if a walk starting
    /// there can be answered from the tree (INDEX.md "Semantics" 2): it is
    /// indexed, git is required from it exactly as from the root, and the
    /// rule files of the directories above it (which a walk from it reads by
    /// path, following symlinks) are no symlinks.
    pub(crate) fn start(&self, rel: &[u8]) -> Option<DirId> {
        let mut id = ROOT;
        let root_requires_git = self.rules.require_git();
        if rel.is_empty() {
            return Some(id);
        }
        for part in rel.split(|&b| b == b'/') {
            let node = self.node(id)?;
            if !plain_rule_files(node) {
                return None;
            }
            let i = node
                .children
                .binary_search_by(|c| (*c.name).cmp(part))
                .ok()?;
            let Node::Dir(sub) = node.children[i].node else {
                return None;
            };
            id = sub;
            let sub_node = self.node(id)?;
            let has_git = sub_node
                .children
                .binary_search_by(|c| (*c.name).cmp(b".git"))
                .is_ok();
            if has_git && !root_requires_git {
                return None;
            }
        }
        Some(id)
    }

    /// Walks from `start` exactly as `walk::scheduler` would (siblings in
    /// listing order, a directory before its contents), asking `search`
    /// what is left out and handing it what is not. `None` when the walk
    /// would have to enter an unindexed directory.
    pub(crate) fn dfs<S: TreeSearch + ?Sized>(&self, start: DirId, search: &mut S) -> Option<()> {
        // (directory, next child, length of its path from `start`, whether
        // only its directories are visited: `i` then counts in `dirs`)
        let only_dirs = |search: &mut S, node: &DirNode| !search.wants_any(&node.ends);
        let first = only_dirs(search, self.node(start)?);
        let mut stack: Vec<(DirId, usize, usize, bool)> = vec![(start, 0, 0, first)];
        let mut rel: Vec<u8> = Vec::new();
        while let Some(top) = stack.last_mut() {
            let (id, i, len, dirs) = *top;
            let node = self.node(id)?;
            let next = match dirs {
                true => node.dirs.get(i).map(|&at| &node.children[at as usize]),
                false => node.children.get(i),
            };
            let Some(child) = next else {
                stack.pop();
                continue;
            };
            top.1 += 1;
            if child.kind != Kind::Dir && !search.wanted(child) {
                continue;
            }
            rel.truncate(len);
            if len > 0 {
                rel.push(b'/');
            }
            rel.extend_from_slice(&child.name);
            if search.left_out(&rel, child) {
                continue;
            }
            if !search.visit(&rel, child, node) {
                return Some(());
            }
            match child.node {
                Node::Dir(sub) => {
                    let dirs = match self.node(sub) {
                        Some(node) if only_dirs(search, node) => true,
                        Some(node) => {
                            prefetch(&node.children);
                            false
                        }
                        None => false,
                    };
                    stack.push((sub, 0, rel.len(), dirs))
                }
                Node::Unindexed | Node::Pending => return None,
                _ => {}
            }
        }
        Some(())
    }
}

impl Tree {
    /// The tree's `Places`, from `cache` if it is of this version, else
    /// from a pass over every directory (left in `cache`).
    fn places<'c>(&self, cache: &'c mut Option<Places>) -> &'c Places {
        if cache.as_ref().is_some_and(|p| p.version == self.version) {
            return cache.as_ref().expect("checked");
        }
        let mut places = Places {
            version: self.version,
            dir_of: Vec::new(),
            always: Vec::new(),
            blocked: Vec::new(),
        };
        for (d, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            let d = d as DirId;
            let (mut always, mut blocked) = (false, false);
            for child in &node.children {
                if child.ignored || &*child.name == b".git" {
                    continue;
                }
                match child.node {
                    Node::File(FileState::Indexed(id)) => {
                        let id = id as usize;
                        if places.dir_of.len() <= id {
                            places.dir_of.resize(id + 1, NO_DIR);
                        }
                        match places.dir_of[id] {
                            NO_DIR => places.dir_of[id] = d,
                            other => always |= other != d,
                        }
                    }
                    Node::File(_) => always = true,
                    Node::Unindexed | Node::Pending if child.kind == Kind::Dir => blocked = true,
                    _ => {}
                }
            }
            if always {
                places.always.push(d);
            }
            if blocked {
                places.blocked.push(d);
            }
        }
        cache.insert(places)
    }

    /// Whether directory `d` is `start` or below it.
    fn within(&self, mut d: DirId, start: DirId) -> bool {
        loop {
            if d == start {
                return true;
            }
            match self.node(d).and_then(|n| n.parent) {
                Some(p) => d = p,
                None => return false,
            }
        }
    }

    /// What a walk from `start` leaving out only ignored entries and `.git`
    /// (grep's without `--glob`) would visit among the files `wanted`
    /// accepts, in walk order, with their paths from the root, found
    /// through `places` for the content ids in `ids` (and the files searched
    /// whatever the query) instead of walking everything. `None` when such
    /// a walk would enter an unindexed directory (as `dfs`).
    pub(crate) fn locate(
        &mut self,
        start: DirId,
        ids: impl Iterator<Item = u32>,
        wanted: &mut dyn FnMut(&Child) -> bool,
    ) -> Option<Vec<Vec<u8>>> {
        let mut cache = self.places.take();
        let found = self.locate_in(start, self.places(&mut cache), ids, wanted);
        self.places = cache;
        found
    }

    fn locate_in(
        &self,
        start: DirId,
        places: &Places,
        ids: impl Iterator<Item = u32>,
        wanted: &mut dyn FnMut(&Child) -> bool,
    ) -> Option<Vec<Vec<u8>>> {
        if places.blocked.iter().any(|&d| self.within(d, start)) {
            return None;
        }
        let mut dirs: Vec<DirId> = ids
            .filter_map(|id| places.dir_of.get(id as usize).copied())
            .filter(|&d| d != NO_DIR)
            .chain(places.always.iter().copied())
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        // Sort keys: the path with `/` as 0, below every byte a name can
        // hold, so byte order is the walk's (siblings by name, a directory
        // before its contents).
        let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for d in dirs {
            if !self.within(d, start) {
                continue;
            }
            let Some(node) = self.node(d) else { continue };
            for child in &node.children {
                if child.ignored || &*child.name == b".git" || !wanted(child) {
                    continue;
                }
                let path = join(&node.rel, &child.name);
                let key = path
                    .iter()
                    .map(|&b| if b == b'/' { 0 } else { b })
                    .collect();
                found.push((key, path));
            }
        }
        found.sort_unstable();
        Some(found.into_iter().map(|(_, path)| path).collect())
    }
}

/// Asks the CPU to load a directory's listing into cache, all of it at
/// once: a walk reads each listing from start to end, and listings lie
/// apart in memory, so loaded one entry at a time each costs a wait.
#[inline]
fn prefetch(children: &[Child]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = children.as_ptr().cast::<i8>();
        let bytes = std::mem::size_of_val(children);
        // One cache line (64 bytes) at a time.
        for at in (0..bytes).step_by(64) {
            // SAFETY: a prefetch never faults; the address is within the slice.
            unsafe { _mm_prefetch(start.add(at), _MM_HINT_T0) };
        }
    }
}

/// Whether a directory's rule files and repository markers are plain (a
/// walk reading them by path, as for a start directory's ancestors, sees
/// what the tree saw through descriptors).
fn plain_rule_files(node: &DirNode) -> bool {
    node.children.iter().all(|c| {
        !is_rule_name(&c.name)
            || match &*c.name {
                b".git" => matches!(c.kind, Kind::Dir | Kind::File),
                b".jj" => c.kind == Kind::Dir,
                _ => c.kind == Kind::File,
            }
    })
}

/// Which names of a re-listed directory are taken as new.
pub(crate) enum Fresh<'a> {
    All,
    None,
    Names(&'a HashSet<Box<[u8]>>),
}

impl Fresh<'_> {
    fn contains(&self, name: &[u8]) -> bool {
        match self {
            Fresh::All => true,
            Fresh::None => false,
            Fresh::Names(names) => names.contains(name),
        }
    }
}

/// A walk answered from the tree.
pub(crate) trait TreeSearch {
    /// Whether the entry at `rel` (from the start) is left out with
    /// everything below it (`child.ignored` is the stored decision).
    fn left_out(&mut self, rel: &[u8], child: &Child) -> bool;
    /// Whether a child that is no directory can matter to the search:
    /// `false` only when `left_out` and `visit` would do nothing with it
    /// (find: its name cannot match; grep: no candidate), so the walk passes
    /// it without building its path (most entries, on a large tree).
    fn wanted(&mut self, _child: &Child) -> bool {
        true
    }
    /// Whether any child that is no directory can be `wanted` in a
    /// directory whose names end as `ends` says: `false` passes them all by.
    fn wants_any(&mut self, _ends: &NameEnds) -> bool {
        true
    }
    /// An entry not left out, in walk order; `false` ends the walk.
    fn visit(&mut self, rel: &[u8], child: &Child, dir: &DirNode) -> bool;
}

#[cfg(test)]
mod tests {
    use super::NameEnds;

    #[test]
    fn name_ends_never_miss_and_pass_directories_by() {
        let names: [&[u8]; 6] = [b"Kconfig", b"Makefile", b"main.C", b"x.h", b"ab", b"q"];
        let ends = NameEnds::of(names.iter().copied());
        for name in names {
            for at in 0..=name.len() {
                let tail = &name[at..];
                assert!(
                    ends.may_end_with(tail),
                    "{:?}",
                    String::from_utf8_lossy(tail)
                );
                assert!(ends.may_end_with(&tail.to_ascii_uppercase()), "any case");
            }
        }
        assert!(ends.may_end_with(b"x"), "one byte: cannot say");
        let passed = [
            &b".rs"[..],
            b".no-such-extension",
            b".py",
            b"Kbuild",
            b".json",
        ];
        assert!(passed.iter().all(|t| !ends.may_end_with(t)));
        assert!(!NameEnds::of(std::iter::empty()).may_end_with(b"Kconfig"));
    }
}
