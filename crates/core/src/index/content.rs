//! What the index holds of file contents: content ids and their sizes, the
//! posting lists over them, and how the tree hands files to them (read now
//! during the build, marked dirty on a refresh).

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::grams::{Postings, RawBloom, SegmentBuilder};
use super::query;
use super::reader::{Read_, Reader};
use super::tree::FileState;
use super::tree::{Contents, NewFile};

/// Content ids: the bytes each stood for, or `DEAD` once retired.
#[derive(Default)]
pub(super) struct Ids {
    pub(super) sizes: Vec<u32>,
    pub(super) live_bytes: u64,
}

pub(super) const DEAD: u32 = u32::MAX;

impl Ids {
    pub(super) fn assign(&mut self, bytes: u64) -> u32 {
        let id = self.sizes.len() as u32;
        let size = u32::try_from(bytes).unwrap_or(DEAD - 1).min(DEAD - 1);
        self.sizes.push(size);
        self.live_bytes += u64::from(size);
        id
    }

    pub(super) fn retire(&mut self, id: u32) {
        if let Some(size) = self.sizes.get_mut(id as usize) {
            if *size != DEAD {
                self.live_bytes -= u64::from(*size);
                *size = DEAD;
            }
        }
    }

    pub(super) fn is_live(&self, id: u32) -> bool {
        self.sizes.get(id as usize).is_some_and(|&s| s != DEAD)
    }
}

/// The index's contents: posting lists and the ids they are over.
pub(crate) struct Content {
    pub(super) postings: Postings,
    pub(super) ids: Ids,
    /// Large files' exact 5-gram filters, by content id.
    pub(super) exact: HashMap<u32, RawBloom>,
}

impl Content {
    /// Drops `candidates` that a large file's exact filter shows cannot
    /// hold every one of `pieces`.
    pub(super) fn pass_by(&self, candidates: &mut query::IdSet, pieces: &[Vec<u8>]) {
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
pub(super) struct Refresh<'a>(pub(super) &'a mut Ids);

impl Contents for Refresh<'_> {
    fn index_now(&mut self, _: NewFile<'_>) -> Option<FileState> {
        None
    }
    fn retire(&mut self, id: u32) {
        self.0.retire(id);
    }
}

/// The first build: every file read as it is listed, into one segment.
pub(super) struct Building<'a> {
    pub(super) reader: Reader,
    pub(super) builder: SegmentBuilder,
    pub(super) ids: &'a mut Ids,
    pub(super) bytes: u64,
    /// Raised by `close()`: files are no longer read (the build then ends
    /// at the next directory), so a close mid-directory is prompt too.
    pub(super) cancel: &'a AtomicBool,
}

impl Contents for Building<'_> {
    fn index_now(&mut self, file: NewFile<'_>) -> Option<FileState> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let name = std::ffi::OsStr::from_bytes(file.name);
        if self.cancel.load(Ordering::Relaxed) {
            return Some(FileState::Always);
        }
        let Ok(fd) = openat(file.dir, name, flags, Mode::empty()) else {
            return Some(FileState::Always);
        };
        Some(match self.reader.read(fd.into(), file.linked) {
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
