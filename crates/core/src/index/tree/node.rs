//! What the tree holds per directory and per entry: listings, names,
//! the file states the index keeps.

use std::sync::Arc;

use crate::walk::rules::Level;
use crate::walk::Kind;

use super::DirId;

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
    pub(super) link: i32,
    /// A file's inode number when it was listed (0 otherwise): a link made
    /// to it later, in the tree, finds it by this (`attach_links`).
    pub(super) ino: u64,
}

pub(super) const NO_WATCH: i32 = -1;

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
    pub(super) parent: Option<DirId>,
    /// Its name in the parent.
    pub(super) name: Box<[u8]>,
    /// Path from the root ("" for the root).
    pub(crate) rel: Vec<u8>,
    pub(super) level: Arc<Level>,
    /// Sorted by name, as the walker lists.
    pub(crate) children: Vec<Child>,
    /// The ends of its other entries' names, and where its directories are
    /// in `children`: a find for names ending otherwise visits only these.
    pub(super) ends: NameEnds,
    pub(super) dirs: Vec<u32>,
    pub(super) wd: i32,
    /// Watches on `.git` and `.git/info`, for the exclude file.
    pub(super) rule_wds: Vec<i32>,
}

impl DirNode {
    /// The only way its children change (their names and kinds, that is:
    /// a child's `node` changes in place), so `ends` and `dirs` stay true.
    pub(super) fn set_children(&mut self, children: Vec<Child>) {
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
    pub(super) fn of<'a>(names: impl Iterator<Item = &'a [u8]>) -> NameEnds {
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
