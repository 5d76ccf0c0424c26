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
    /// What its other entries' names hold, and where its directories are
    /// in `children`: a find for names that cannot be there visits only these.
    pub(super) names: NameFilter,
    pub(super) dirs: Vec<u32>,
    pub(super) wd: i32,
    /// Watches on `.git` and `.git/info`, for the exclude file.
    pub(super) rule_wds: Vec<i32>,
}

impl DirNode {
    /// The only way its children change (their names and kinds, that is:
    /// a child's `node` changes in place), so `names` and `dirs` stay true.
    pub(super) fn set_children(&mut self, mut children: Vec<Child>) {
        let files = children.iter().filter(|c| c.kind != Kind::Dir);
        self.names = NameFilter::of(files.map(|c| &*c.name));
        children.shrink_to_fit();
        self.dirs = (children.iter().enumerate())
            .filter(|(_, c)| c.kind == Kind::Dir)
            .map(|(i, _)| i as u32)
            .collect();
        self.children = children;
    }
}

/// What a directory's names that are no directory's hold, as a Bloom filter
/// (ASCII case folded): their last two and three bytes, and every three
/// bytes anywhere in them. Most directories hold no name ending with a
/// find's literal tail (`Kconfig`, `.rs`) or holding its literal pieces
/// (`nothing_like_this_` of `nothing_like_this_*`), and passing them by
/// spares reading every entry. Four bits a key, one hash: a typical
/// directory's filter is under a fifth full, so a piece of a few trigrams
/// rarely passes by chance.
#[derive(Clone, Default)]
pub(crate) struct NameFilter(Box<[u64]>);

/// Key tags: an end of two or three bytes, or a trigram anywhere.
const END: u64 = 1 << 60;
const GRAM: u64 = 2 << 60;

impl NameFilter {
    pub(super) fn of<'a>(names: impl Iterator<Item = &'a [u8]> + Clone) -> NameFilter {
        let keys: usize = (names.clone()).map(|n| 2 + n.len().saturating_sub(2)).sum();
        // At least 256 bits, as a single word's filter would fill at once.
        let words = (keys * 4).next_power_of_two().max(256) / 64;
        let mut filter = NameFilter(vec![0; words].into_boxed_slice());
        for name in names {
            for n in [2, 3] {
                if let Some(at) = name.len().checked_sub(n) {
                    filter.set(END | Self::key(&name[at..]));
                }
            }
            for gram in name.windows(3) {
                filter.set(GRAM | Self::key(gram));
            }
        }
        filter
    }

    fn key(bytes: &[u8]) -> u64 {
        bytes.iter().fold(bytes.len() as u64, |k, b| {
            k << 8 | u64::from(b.to_ascii_lowercase())
        })
    }

    /// The bit of `key`: the top bits of a multiplicative hash.
    fn bit(&self, key: u64) -> usize {
        let bits = self.0.len() * 64;
        if bits == 0 {
            return 0;
        }
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits.trailing_zeros())) as usize
    }

    fn set(&mut self, key: u64) {
        let bit = self.bit(key);
        self.0[bit / 64] |= 1 << (bit % 64);
    }

    fn has(&self, key: u64) -> bool {
        let bit = self.bit(key);
        self.0
            .get(bit / 64)
            .is_some_and(|w| w >> (bit % 64) & 1 != 0)
    }

    /// Whether a name that is no directory's may end with `tail` (in any
    /// ASCII case); `true` for a tail shorter than two bytes.
    pub(crate) fn may_end_with(&self, tail: &[u8]) -> bool {
        if tail.len() < 2 {
            return true;
        }
        self.has(END | Self::key(&tail[tail.len() - tail.len().min(3)..]))
    }

    /// Whether a name that is no directory's may hold `piece` (in any ASCII
    /// case); `true` for a piece shorter than three bytes.
    pub(crate) fn may_hold(&self, piece: &[u8]) -> bool {
        piece
            .windows(3)
            .all(|gram| self.has(GRAM | Self::key(gram)))
    }

    /// Heap bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.0.len() * 8
    }
}
