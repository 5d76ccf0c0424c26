//! Our own descriptors of the objects a call names: their identity and kernel path, what they
//! are (`stat`), the opens beneath a held directory (`openat2` with `RESOLVE_BENEATH`) that place
//! an object in a writable area or the workspace, and whether one lies on procfs.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};

use super::PATH_MAX;
use crate::sys::errno;

/// `PROC_SUPER_MAGIC`: the file system type of `/proc`.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
/// The inode of procfs's root directory.
const PROC_ROOT_INO: u64 = 1;

/// `path` relative to `area` when it is `area` itself (empty) or lies beneath it.
pub(super) fn beneath<'a>(path: &'a [u8], area: &[u8]) -> Option<&'a [u8]> {
    if area == b"/" {
        return path.strip_prefix(b"/");
    }
    let rest = path.strip_prefix(area)?;
    if rest.is_empty() {
        return Some(rest);
    }
    rest.strip_prefix(b"/")
}

/// The path the kernel shows for our descriptor (`/proc/self/fd/N`), when absolute.
pub(super) fn fd_path(fd: BorrowedFd<'_>) -> Option<Vec<u8>> {
    let link = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    let mut buf = vec![0u8; PATH_MAX + 1];
    // SAFETY: readlink into our buffer of the length given.
    let n = unsafe { libc::readlink(link.as_ptr().cast(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 || n as usize >= buf.len() {
        return None;
    }
    buf.truncate(n as usize);
    buf.starts_with(b"/").then_some(buf)
}

/// Device and inode of the object `fd` refers to.
pub(super) fn identity(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor (O_PATH ones included) into our buffer.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Opens `rel` beneath `dir`, crossing no symlink and never leaving `dir`.
pub(super) fn reopen_beneath(dir: BorrowedFd<'_>, rel: &[u8]) -> Option<OwnedFd> {
    open_beneath(dir, rel, false, ResolveFlag::RESOLVE_NO_SYMLINKS)
}

/// Opens `rel` (`O_PATH`) beneath `dir`: symlinks are followed (the last one when `follow`) as
/// long as the walk never leaves `dir` (`RESOLVE_BENEATH`); `extra` adds resolve flags.
pub(super) fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &[u8],
    follow: bool,
    extra: ResolveFlag,
) -> Option<OwnedFd> {
    let mut path = rel.to_vec();
    path.push(0);
    open_beneath_nul(dir, &path, follow, extra)
}

/// `open_beneath` of a path given with its terminating NUL (and nothing after it); an empty one
/// names `dir` itself.
pub(super) fn open_beneath_nul(
    dir: BorrowedFd<'_>,
    rel: &[u8],
    follow: bool,
    extra: ResolveFlag,
) -> Option<OwnedFd> {
    if rel.last() != Some(&0) || rel[..rel.len() - 1].contains(&0) {
        return None;
    }
    let path = CStr::from_bytes_with_nul(if rel.len() == 1 { b".\0" } else { rel }).ok()?;
    let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if !follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let resolve = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS | extra;
    openat2(dir, path, OpenHow::new().flags(flags).resolve(resolve)).ok()
}

/// `openat(dir, path, O_PATH)`, following the last component or not.
pub(super) fn open_path(
    dir: Option<BorrowedFd<'_>>,
    path: &[u8],
    follow: bool,
) -> Result<OwnedFd, i32> {
    let mut c = path.to_vec();
    c.push(0);
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let dir = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: openat with a NUL-terminated path.
    let fd = unsafe { libc::openat(dir, c.as_ptr().cast(), flags) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: just opened, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `/proc/self/fd/N` of our descriptor, NUL-terminated: a path that reaches the very object.
pub(super) fn proc_fd(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}\0", fd.as_raw_fd())
}

/// What `fstatat` said of a name: the parts the checks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    pub(super) mode: u32,
    pub(super) rdev: u64,
}

/// What `name` in `dir` is now (not following it), `None` when nothing is there.
pub(super) fn stat_at(dir: BorrowedFd<'_>, name: &[u8]) -> Option<Stat> {
    let mut c = name.to_vec();
    c.push(0);
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat on our descriptor, a NUL-terminated name, our buffer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr().cast(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    (r == 0).then_some(Stat {
        mode: st.st_mode,
        rdev: st.st_rdev,
    })
}

pub(super) fn stat_of(fd: BorrowedFd<'_>) -> Option<Stat> {
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor into our buffer.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some(Stat {
        mode: st.st_mode,
        rdev: st.st_rdev,
    })
}

pub(super) fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, i32> {
    fd.try_clone_to_owned()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))
}

/// Splits a path into its components (empty ones dropped).
pub(super) fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

pub(super) fn is_proc_root(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: a zeroed statfs is a valid buffer.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on our descriptor into our buffer.
    let on_proc = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) } == 0
        && fs.f_type as i64 == PROC_SUPER_MAGIC;
    on_proc && identity(fd).is_some_and(|(_, ino)| ino == PROC_ROOT_INO)
}

pub(super) fn on_proc(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: a zeroed statfs is a valid buffer.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on our descriptor into our buffer.
    unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) == 0 && fs.f_type as i64 == PROC_SUPER_MAGIC }
}

pub(super) fn is_number(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(u8::is_ascii_digit)
}

pub(super) fn openat(dir: BorrowedFd<'_>, name: &[u8], flags: i32) -> Result<OwnedFd, i32> {
    let mut c = name.to_vec();
    c.push(0);
    // SAFETY: openat on our descriptor with a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr().cast(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: just opened, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn readlinkat(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Vec<u8>, i32> {
    let mut c = name.to_vec();
    c.push(0);
    let mut buf = vec![0u8; PATH_MAX];
    // SAFETY: readlinkat into our buffer of the length given.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr().cast(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(errno());
    }
    if n as usize >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    buf.truncate(n as usize);
    Ok(buf)
}
