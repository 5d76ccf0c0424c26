//! Reading one directory through its descriptor: its entries sorted by
//! name, with their kinds, and which ignore files it holds; and the opens
//! relative to a walked directory. The listing itself is shared; what is
//! per target (the unix descriptors here, the Windows handles in
//! `listing_windows.rs`) is the directory handle, `read_entries`, `kind_at`
//! and the opens.

#[cfg(unix)]
use std::fs::File;
#[cfg(unix)]
use std::io;
#[cfg(unix)]
use std::os::fd::{BorrowedFd, OwnedFd};

#[cfg(unix)]
use nix::fcntl::{openat, AtFlags, OFlag};
#[cfg(unix)]
use nix::sys::stat::{fstatat, Mode, SFlag};

use super::Kind;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::sys::{getdents, DirentBuf};
#[cfg(windows)]
#[path = "listing_windows.rs"]
mod target;
#[cfg(windows)]
pub use target::DirHandle;
#[cfg(windows)]
pub(crate) use target::{kind_at, open_dir_at, open_file_at, read_entries, DirRef};

/// A directory the walk holds open: its descriptor.
#[cfg(unix)]
pub type DirHandle = OwnedFd;
/// A directory the walk holds open, borrowed.
#[cfg(unix)]
pub(crate) type DirRef<'a> = BorrowedFd<'a>;

/// Borrows a held directory.
#[cfg(unix)]
pub(crate) fn borrow(dir: &DirHandle) -> DirRef<'_> {
    use std::os::fd::AsFd;
    dir.as_fd()
}
#[cfg(windows)]
pub(crate) fn borrow(dir: &DirHandle) -> DirRef<'_> {
    dir
}

/// Opens the subdirectory `name` of `dir` without following a symlink (one
/// swapped in since the listing fails).
#[cfg(unix)]
pub(crate) fn open_dir_at(dir: DirRef<'_>, name: &[u8]) -> io::Result<DirHandle> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(openat(dir, name, flags, Mode::empty())?)
}

/// Opens the entry `name` of `dir` for reading, without following a symlink
/// and without waiting (a FIFO swapped in is not waited on).
#[cfg(unix)]
pub(crate) fn open_file_at(dir: DirRef<'_>, name: &[u8]) -> io::Result<File> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    Ok(openat(dir, name, flags, Mode::empty())?.into())
}

/// What `name` in `dir` is, without following a symlink.
#[cfg(unix)]
pub(crate) fn kind_at(dir: BorrowedFd<'_>, name: &[u8]) -> Option<Kind> {
    let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    Some(
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        },
    )
}

/// Which ignore files and repository markers a directory holds.
#[derive(Default)]
pub(crate) struct Markers {
    pub(super) ignore: bool,
    pub(super) gitignore: bool,
    pub(super) git: bool,
    pub(super) jj: bool,
}

impl Markers {
    pub(crate) fn note(&mut self, name: &[u8]) {
        match name {
            b".ignore" => self.ignore = true,
            b".gitignore" => self.gitignore = true,
            b".git" => self.git = true,
            b".jj" => self.jj = true,
            _ => {}
        }
    }

    pub(crate) fn any(&self) -> bool {
        self.ignore || self.gitignore || self.git || self.jj
    }
}

/// A directory's entries: names in one buffer, sorted by their bytes.
pub(crate) struct Listing {
    names: Vec<u8>,
    pub(crate) entries: Vec<Listed>,
    pub(crate) markers: Markers,
}

pub(crate) struct Listed {
    start: usize,
    len: usize,
    /// `None` until known when the directory did not say (`fstatat` tells).
    pub(crate) kind: Option<Kind>,
}

impl Listing {
    /// The entries of the directory open at `fd`, sorted, each with its kind.
    /// A directory that fails midway is used as far as it was read.
    pub(crate) fn of(fd: DirRef<'_>) -> Listing {
        let mut listing = Listing::with_room();
        let _ = read_entries(fd, |name, kind| listing.push(name, kind));
        for listed in &mut listing.entries {
            if listed.kind.is_none() {
                let name = &listing.names[listed.start..listed.start + listed.len];
                listed.kind = Some(kind_at(fd, name).unwrap_or(Kind::Other));
            }
        }
        listing.sort();
        listing
    }

    /// Room for a typical directory, so listing one does not grow its
    /// buffers a few times over.
    fn with_room() -> Self {
        // 40 entries of 24 bytes and 960 bytes of names (24 a name): each
        // buffer under 1 KiB, which malloc serves from its per-thread cache.
        const ROOM_ENTRIES: usize = 40;
        const ROOM_NAME_BYTES: usize = 960;
        Listing {
            names: Vec::with_capacity(ROOM_NAME_BYTES),
            entries: Vec::with_capacity(ROOM_ENTRIES),
            markers: Markers::default(),
        }
    }

    fn push(&mut self, name: &[u8], kind: Option<Kind>) {
        self.markers.note(name);
        self.entries.push(Listed {
            start: self.names.len(),
            len: name.len(),
            kind,
        });
        self.names.extend_from_slice(name);
    }

    pub(crate) fn name(&self, entry: &Listed) -> &[u8] {
        &self.names[entry.start..entry.start + entry.len]
    }

    fn sort(&mut self) {
        let names = &self.names;
        self.entries.sort_unstable_by(|a, b| {
            names[a.start..a.start + a.len].cmp(&names[b.start..b.start + b.len])
        });
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn kind_of_d_type(d_type: u8) -> Option<Kind> {
    match d_type {
        libc::DT_DIR => Some(Kind::Dir),
        libc::DT_REG => Some(Kind::File),
        libc::DT_LNK => Some(Kind::Symlink),
        libc::DT_UNKNOWN => None,
        _ => Some(Kind::Other),
    }
}

/// Bytes `getdents64` reads into at once: a typical directory (a few hundred
/// entries with names of tens of bytes) in one call. On the stack of a walk
/// thread, so no allocation per directory.
#[cfg(any(target_os = "linux", target_os = "android"))]
const LISTING_BYTES: usize = 32 << 10;

/// Calls `each` with every entry of the directory open at `fd` (but `.` and
/// `..`): `getdents64` into one buffer, so the descriptor stays ours for
/// opening the entries.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_entries(fd: BorrowedFd<'_>, mut each: impl FnMut(&[u8], Option<Kind>)) -> io::Result<()> {
    let mut buf = DirentBuf::<LISTING_BYTES>::new();
    while let Some(batch) = getdents(fd, &mut buf)? {
        for entry in batch {
            if entry.name != b"." && entry.name != b".." {
                each(entry.name, kind_of_d_type(entry.d_type));
            }
        }
    }
    Ok(())
}

/// Elsewhere on unix, `readdir` on a duplicate of the descriptor.
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
fn read_entries(fd: BorrowedFd<'_>, mut each: impl FnMut(&[u8], Option<Kind>)) -> io::Result<()> {
    let mut dir = nix::dir::Dir::from_fd(fd.try_clone_to_owned()?)?;
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            let kind = entry.file_type().map(|t| match t {
                nix::dir::Type::Directory => Kind::Dir,
                nix::dir::Type::File => Kind::File,
                nix::dir::Type::Symlink => Kind::Symlink,
                _ => Kind::Other,
            });
            each(name, kind);
        }
    }
    Ok(())
}
