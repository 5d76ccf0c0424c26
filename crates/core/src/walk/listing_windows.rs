//! The walk's per-target part on Windows: directories held as handles, each
//! listed with `FileFullDirectoryInfo` and each entry opened relative to its
//! directory's handle (`NtCreateFile` with `RootDirectory`,
//! `FILE_OPEN_REPARSE_POINT`), with the bounded root's primitives
//! (`root/windows.rs`).
//!
//! The guarantee is the unix walk's: nothing outside the start directory is
//! listed or searched. A symlink or junction is listed as a symlink and never
//! entered or read. Every directory entered and every file opened is also
//! checked by its final path (`GetFinalPathNameByHandleW`): it must be its
//! directory's final path and its listed name, so whatever the filesystem
//! resolved behind our back (a directory swapped for a junction since the
//! listing, wine's unix symlinks, which wine shows as what they lead to) is
//! skipped as unreadable. Under wine, where that final path is looked up by
//! name after the open, each directory entered is also checked by identity
//! (its `..` is the directory it was listed in), so a link swapped in and out
//! between the two is refused too: by its own listing, whose `..` comes
//! before any entry is given (`for_each_child_entry`), or, for one opened
//! through without a listing, by `verify_child`; nothing is opened through a
//! directory before it is so checked. A directory is held
//! without `FILE_SHARE_DELETE`, so it cannot be renamed away while the walk is
//! beneath it.
//!
//! Names are the listing's (long names in their stored case; 8.3 short names
//! and alternate data streams are never listed), as WTF-8 bytes (the
//! encoding of `OsStr` on Windows), so paths and rules see them as on unix.
//! Windows has no FIFO a walk could wait on: a named pipe is no directory
//! entry, and an `AF_UNIX` socket is a reparse point, listed as `Other`.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::windows::ffi::{OsStrExt, OsStringExt};
use std::os::windows::io::{AsHandle, BorrowedHandle, OwnedHandle};
use std::sync::atomic::{AtomicBool, Ordering};

use windows_sys::Wdk::Storage::FileSystem::{FILE_NON_DIRECTORY_FILE, FILE_OPEN};
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_GENERIC_READ,
};

use crate::root::{
    dir_key, eq_ci, final_path, for_each_child_entry, for_each_entry, is_link, normalize, nt_open,
    tag_info, under_wine, verify_child, DirKey, DIR_ACCESS, DIR_OPTIONS, PROBE_ACCESS, SHARE_ALL,
};
use crate::walk::{os_str, Kind};

/// A reparse point that is an `AF_UNIX` socket (`IO_REPARSE_TAG_AF_UNIX`).
const TAG_AF_UNIX: u32 = 0x8000_0023;

/// A directory the walk holds open: its handle and its final path
/// (normalized as the root's, `C:\…`), which its entries' must extend.
#[derive(Debug)]
pub struct DirHandle {
    handle: OwnedHandle,
    path: String,
    /// Its identity (under wine; see `verify_child`).
    key: DirKey,
    /// Under wine, the identity of the directory it was opened in by name,
    /// until its `..` has shown to be that one (see `checked`).
    parent: Option<DirKey>,
    /// Whether nothing is left to check: entries are opened through it only then.
    checked: AtomicBool,
}

/// A directory the walk holds open, borrowed.
pub(crate) type DirRef<'a> = &'a DirHandle;

impl DirHandle {
    /// Holds the directory open at `handle` (which the caller has checked to
    /// be where the walk may go), with its final path.
    pub(crate) fn new(handle: OwnedHandle) -> io::Result<DirHandle> {
        let key = dir_key(handle.as_handle()).map_err(os_error)?;
        let path = final_path(handle.as_handle())
            .ok()
            .and_then(|p| normalize(&p))
            .ok_or_else(|| io::Error::from_raw_os_error(ERROR_ACCESS_DENIED))?;
        Ok(DirHandle::held(handle, path, key, None))
    }

    /// Holds `handle`, at `path` with identity `key`; `parent`: the identity
    /// of the directory it was opened in, for its check, when it has one left.
    fn held(handle: OwnedHandle, path: String, key: DirKey, parent: Option<DirKey>) -> DirHandle {
        DirHandle {
            handle,
            path,
            key,
            checked: AtomicBool::new(parent.is_none()),
            parent,
        }
    }

    /// The directory's final path (normalized: `C:\…`, no trailing `\`).
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    fn handle(&self) -> BorrowedHandle<'_> {
        self.handle.as_handle()
    }

    /// The handle, to open its entries through once it is checked: by its
    /// listing, or else here (a directory only walked through, such as a
    /// rule file's `.git`), on a handle of its own so a listing still reads
    /// it whole.
    fn checked_handle(&self) -> io::Result<BorrowedHandle<'_>> {
        if !self.checked.load(Ordering::Acquire) {
            let parent = self.parent.ok_or_else(refused)?;
            verify_child(parent, self.handle(), true).map_err(|_| refused())?;
            self.checked.store(true, Ordering::Release);
        }
        Ok(self.handle())
    }
}

/// The Win32 error a refused entry reads as (`ERROR_ACCESS_DENIED`).
const ERROR_ACCESS_DENIED: i32 = 5;

fn refused() -> io::Error {
    io::Error::from_raw_os_error(ERROR_ACCESS_DENIED)
}

/// A core error as an I/O error (the walk only skips what fails).
fn os_error(e: crate::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// The UTF-16 name of a listed name (WTF-8 bytes from `read_entries`).
fn wide(name: &[u8]) -> Vec<u16> {
    os_str(name).encode_wide().collect()
}

/// Whether `h`, opened as `name` in `dir`, is that very entry: its final path
/// is the directory's and the name, as the filesystem compares names.
fn is_where_listed(dir: &DirHandle, name: &[u8], h: BorrowedHandle<'_>) -> bool {
    where_listed(dir, name, h).is_some()
}

/// [`is_where_listed`]: the entry's final path (normalized) when it is.
fn where_listed(dir: &DirHandle, name: &[u8], h: BorrowedHandle<'_>) -> Option<String> {
    let name = os_str(name).to_str()?;
    let reached = final_path(h).ok().and_then(|p| normalize(&p))?;
    let mut expected = String::with_capacity(dir.path.len() + 1 + name.len());
    expected.push_str(&dir.path);
    if !expected.ends_with('\\') {
        expected.push('\\');
    }
    expected.push_str(name);
    eq_ci(&reached, &expected).then_some(reached)
}

/// Opens the subdirectory `name` of `dir`: never through a reparse point, and
/// only where it was listed (see the module's notes).
pub(crate) fn open_dir_at(dir: DirRef<'_>, name: &[u8]) -> io::Result<DirHandle> {
    let h = nt_open(
        dir.checked_handle()?,
        &wide(name),
        DIR_ACCESS,
        FILE_OPEN,
        DIR_OPTIONS,
        0,
    )
    .map_err(nt_io_error)?;
    let (attrs, tag) = tag_info(h.as_handle()).map_err(os_error)?;
    if attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 && is_link(attrs, tag) {
        return Err(refused());
    }
    let path = where_listed(dir, name, h.as_handle()).ok_or_else(refused)?;
    let key = dir_key(h.as_handle()).map_err(|_| refused())?;
    // Its identity is checked before anything is opened through it.
    let parent = under_wine().then_some(dir.key);
    Ok(DirHandle::held(h, path, key, parent))
}

/// Opens the file `name` of `dir` for reading: never a reparse point's link
/// itself, and only where it was listed.
pub(crate) fn open_file_at(dir: DirRef<'_>, name: &[u8]) -> io::Result<File> {
    let h = nt_open(
        dir.checked_handle()?,
        &wide(name),
        FILE_GENERIC_READ,
        FILE_OPEN,
        FILE_NON_DIRECTORY_FILE,
        SHARE_ALL,
    )
    .map_err(nt_io_error)?;
    let (attrs, tag) = tag_info(h.as_handle()).map_err(os_error)?;
    if is_link(attrs, tag) || attrs & FILE_ATTRIBUTE_DIRECTORY != 0 {
        return Err(refused());
    }
    if !is_where_listed(dir, name, h.as_handle()) {
        return Err(refused());
    }
    Ok(File::from(h))
}

/// What an entry with these attributes and reparse tag is to the walk.
fn kind_of(attrs: u32, tag: u32) -> Kind {
    if is_link(attrs, tag) {
        Kind::Symlink
    } else if attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 && tag == TAG_AF_UNIX {
        Kind::Other
    } else if attrs & FILE_ATTRIBUTE_DIRECTORY != 0 {
        Kind::Dir
    } else {
        Kind::File
    }
}

/// What `name` in `dir` is, without following a reparse point.
pub(crate) fn kind_at(dir: DirRef<'_>, name: &[u8]) -> Option<Kind> {
    let h = nt_open(
        dir.checked_handle().ok()?,
        &wide(name),
        PROBE_ACCESS,
        FILE_OPEN,
        0,
        SHARE_ALL,
    )
    .ok()?;
    let (attrs, tag) = tag_info(h.as_handle()).ok()?;
    if !is_link(attrs, tag) && !is_where_listed(dir, name, h.as_handle()) {
        return None;
    }
    Some(kind_of(attrs, tag))
}

/// Calls `each` with every entry of `dir` (but `.` and `..`), its name as
/// WTF-8 bytes and its kind; a directory not yet checked is checked by this
/// listing, and gives no entry unless it passes.
pub(crate) fn read_entries(
    dir: DirRef<'_>,
    mut each: impl FnMut(&[u8], Option<Kind>),
) -> io::Result<()> {
    let mut name = Vec::new();
    let mut give = |units: &[u16], attrs, tag| {
        // An entry is given only once `..` has passed.
        dir.checked.store(true, Ordering::Release);
        name.clear();
        name.extend_from_slice(OsString::from_wide(units).as_encoded_bytes());
        each(&name, Some(kind_of(attrs, tag)));
        true
    };
    let listed = match dir.parent {
        Some(parent) if !dir.checked.load(Ordering::Acquire) => {
            for_each_child_entry(dir.handle(), parent, &mut give)
        }
        _ => for_each_entry(dir.handle(), &mut give),
    };
    listed.map_err(os_error)?;
    dir.checked.store(true, Ordering::Release);
    Ok(())
}

/// An `NTSTATUS` failure as an I/O error (its Win32 code).
fn nt_io_error(status: i32) -> io::Error {
    // SAFETY: RtlNtStatusToDosError only maps a number.
    let code = unsafe { windows_sys::Win32::Foundation::RtlNtStatusToDosError(status) };
    io::Error::from_raw_os_error(code as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root::Root;

    fn held(dir: &std::path::Path) -> DirHandle {
        Root::open(dir, None).unwrap().open_dir(dir).unwrap()
    }

    /// What keeps the walk in: an entry opened where its directory is not
    /// (as after a swap, or through wine's unix symlinks) is refused.
    #[test]
    fn an_entry_is_opened_only_where_it_was_listed() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        std::fs::write(t.path().join("sub").join("f.txt"), "x").unwrap();
        let dir = held(t.path());
        let sub = open_dir_at(&dir, b"sub").unwrap();
        assert!(open_file_at(&sub, b"f.txt").is_ok());
        assert!(
            open_dir_at(&dir, b"f.txt").is_err(),
            "a file is no directory"
        );
        assert!(
            open_file_at(&dir, b"sub").is_err(),
            "a directory is no file"
        );
        // The same handles, believed elsewhere: their entries' final paths do not match.
        let forged = |d: &DirHandle| {
            DirHandle::held(
                d.handle.try_clone().unwrap(),
                format!("{}\\elsewhere", d.path),
                d.key,
                None,
            )
        };
        assert!(open_dir_at(&forged(&dir), b"sub").is_err());
        assert!(open_file_at(&forged(&sub), b"f.txt").is_err());
        assert!(kind_at(&forged(&sub), b"f.txt").is_none());
        // Names compare as the filesystem compares them.
        assert!(open_file_at(&sub, b"F.TXT").is_ok());
    }

    /// Under wine, a directory entered is checked by its own listing: unless
    /// its `..` is the directory it was opened in (as after a link swapped
    /// in for its name), it lists nothing and nothing is opened through it.
    #[test]
    fn a_directory_lists_only_as_the_child_of_its_own_parent() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a")).unwrap();
        std::fs::create_dir_all(t.path().join("b")).unwrap();
        std::fs::write(t.path().join("a").join("x.txt"), "x").unwrap();
        let dir = held(t.path());
        let names = |d: &DirHandle| {
            let mut seen = Vec::new();
            let listed = read_entries(d, |name, _| seen.push(name.to_vec()));
            listed.map(|()| seen)
        };
        let a = open_dir_at(&dir, b"a").unwrap();
        assert_eq!(names(&a).unwrap(), [b"x.txt".to_vec()]);
        assert!(open_file_at(&a, b"x.txt").is_ok());
        if under_wine() {
            // The same directory, believed opened in `b`.
            let b = open_dir_at(&dir, b"b").unwrap();
            let elsewhere = DirHandle::held(
                a.handle.try_clone().unwrap(),
                a.path.clone(),
                a.key,
                Some(b.key),
            );
            assert!(names(&elsewhere).is_err());
            assert!(open_file_at(&elsewhere, b"x.txt").is_err());
            assert!(kind_at(&elsewhere, b"x.txt").is_none());
            assert!(open_dir_at(&elsewhere, b"c").is_err());
        }
    }

    /// Long names only, in their stored case; kinds from the listing.
    #[test]
    fn a_listing_gives_stored_names_and_kinds() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("Sub Dir")).unwrap();
        std::fs::write(t.path().join("A Long File Name.txt"), "x").unwrap();
        let mut seen = Vec::new();
        read_entries(&held(t.path()), |name, kind| {
            seen.push((String::from_utf8(name.to_vec()).unwrap(), kind))
        })
        .unwrap();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            [
                ("A Long File Name.txt".to_string(), Some(Kind::File)),
                ("Sub Dir".to_string(), Some(Kind::Dir)),
            ]
        );
    }
}
