//! inotify for the index: one non-blocking instance, a watch per indexed
//! directory set on the very directory that is then listed, and the
//! filesystem check that decides whether its events can be trusted at all.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Events on an indexed directory: names created, deleted, moved or written
/// in it, and the directory itself gone, moved or its mode changed (a
/// directory made unreadable must not keep its listing). `IN_EXCL_UNLINK`:
/// no events from a file after it was unlinked (its old name is already
/// reported deleted).
pub(crate) const DIR_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_EXCL_UNLINK;

/// Events on a directory watched only for the rule files in it (the root's
/// ancestors, `.git` and `.git/info`): the same, but its mode is irrelevant.
pub(crate) const RULES_MASK: u32 = DIR_MASK & !libc::IN_ATTRIB;

/// Events on a hard-linked file's inode: written (through any name), or
/// gone. Not `IN_ATTRIB`: a link made or removed elsewhere (`cp -al` of the
/// tree) changes no contents and would send every file to be re-read.
pub(crate) const LINK_MASK: u32 =
    libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_DELETE_SELF | libc::IN_EXCL_UNLINK;

/// Events that change which names a directory holds.
pub(crate) const NAMES_CHANGED: u32 =
    libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
/// Events that change a file's contents.
pub(crate) const CONTENT_CHANGED: u32 = libc::IN_MODIFY | libc::IN_CLOSE_WRITE;
/// Events on the watched directory itself: it is gone, moved, its mode
/// changed, or its watch was dropped by the kernel.
pub(crate) const SELF_CHANGED: u32 =
    libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED | libc::IN_UNMOUNT;

/// One event, its name copied out of the read buffer.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) wd: i32,
    pub(crate) mask: u32,
    /// The name in the watched directory; `None` for events on the
    /// directory itself.
    pub(crate) name: Option<Box<[u8]>>,
}

/// Why a watch could not be added.
#[derive(Debug)]
pub(crate) enum WatchError {
    /// The kernel's per-user limit (`ENOSPC`) or the index's `max_watches`:
    /// the index cannot watch the whole tree and steps aside.
    Limit,
    /// This directory only (gone, unreadable): it stays unindexed.
    Other,
}

/// A non-blocking inotify instance.
pub(crate) struct Inotify {
    fd: OwnedFd,
}

/// Bytes read from the inotify descriptor at once: room for hundreds of
/// events (16 bytes each plus the name, padded), so a drain takes few reads.
const READ_BYTES: usize = 64 << 10;

impl Inotify {
    pub(crate) fn new() -> io::Result<Inotify> {
        // SAFETY: plain system call; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Inotify {
            // SAFETY: `fd` was just returned to us and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Watches the directory open at `dir` (the very inode that is then
    /// listed, so nothing between watching and listing is missed, and no
    /// symlink swapped in at its path can redirect the watch). inotify takes
    /// a path: `/proc/self/fd/N` resolves to exactly that open directory.
    /// A directory already watched gives its existing descriptor.
    pub(crate) fn add(&self, dir: BorrowedFd<'_>, mask: u32) -> Result<i32, WatchError> {
        let path = CString::new(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|_| WatchError::Other)?;
        // SAFETY: `path` is a valid NUL-terminated string for the call's duration.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), mask) };
        if wd >= 0 {
            return Ok(wd);
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSPC) => Err(WatchError::Limit),
            _ => Err(WatchError::Other),
        }
    }

    /// Removes a watch (one already gone with its directory is fine).
    pub(crate) fn remove(&self, wd: i32) {
        // SAFETY: plain system call on our descriptor; errors are irrelevant.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
    }

    /// Appends every pending event to `out` without blocking. `Err` only for
    /// a read error other than "nothing pending".
    pub(crate) fn drain(&self, out: &mut Vec<Event>) -> io::Result<()> {
        let mut buf = vec![0u8; READ_BYTES];
        loop {
            // SAFETY: reads into our buffer of `buf.len()` bytes.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(()),
                    Some(libc::EINTR) => continue,
                    _ => Err(e),
                };
            }
            let n = n as usize;
            if n == 0 {
                return Ok(());
            }
            parse(&buf[..n], out);
        }
    }
}

/// The events in one read: `struct inotify_event` records, each followed
/// by its NUL-padded name.
fn parse(bytes: &[u8], out: &mut Vec<Event>) {
    const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
    let mut at = 0;
    while at + HEADER <= bytes.len() {
        let field = |o: usize| {
            let b = &bytes[at + o..at + o + 4];
            [b[0], b[1], b[2], b[3]]
        };
        // Layout: wd i32, mask u32, cookie u32, len u32, name[len].
        let wd = i32::from_ne_bytes(field(0));
        let mask = u32::from_ne_bytes(field(4));
        let len = u32::from_ne_bytes(field(12)) as usize;
        let end = (at + HEADER + len).min(bytes.len());
        let raw = &bytes[at + HEADER..end];
        let name = raw.split(|&b| b == 0).next().unwrap_or(raw);
        out.push(Event {
            wd,
            mask,
            name: (!name.is_empty()).then(|| name.into()),
        });
        at += HEADER + len;
    }
}

/// Why a filesystem's events cannot be trusted, if so: on network
/// filesystems, FUSE and the like, changes made elsewhere (the server,
/// another client, the host of a VM) reach no local inotify watch.
pub(crate) fn untrusted_filesystem(dir: BorrowedFd<'_>) -> Option<&'static str> {
    // `statfs` f_type magic numbers (linux/magic.h and the filesystems').
    const UNTRUSTED: [(i64, &str); 12] = [
        (0x6969, "NFS"),
        (0x517B, "SMB"),
        (0xFE53_4D42, "SMB2"),
        (0xFF53_4D42, "CIFS"),
        (0x6573_5546, "FUSE"),
        (0x0102_1997, "9p"),
        (0x5346_414F, "AFS"),
        (0x00C3_6400, "Ceph"),
        (0x7375_7245, "Coda"),
        (0x0BD0_0BD0, "Lustre"),
        (0x0116_1970, "GFS2"),
        (0x6A65_6A63, "virtiofs"),
    ];
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `statfs`.
    if unsafe { libc::fstatfs(dir.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between libcs
    // SAFETY: `fstatfs` succeeded and filled it.
    let kind = unsafe { st.assume_init() }.f_type as i64;
    UNTRUSTED
        .iter()
        .find(|(magic, _)| *magic == kind)
        .map(|(_, name)| *name)
}

/// The mount table, watched for changes: mounting a filesystem on a
/// directory (or unmounting one) raises no inotify event, yet changes what
/// the directory holds.
pub(crate) struct Mounts {
    file: std::fs::File,
    /// Mount points strictly inside the root when last read.
    inside: Vec<Vec<u8>>,
    root: Vec<u8>,
}

impl Mounts {
    pub(crate) fn new(root: &std::path::Path) -> io::Result<Mounts> {
        use std::os::unix::ffi::OsStrExt;
        let file = std::fs::File::open("/proc/self/mountinfo")?;
        let mut mounts = Mounts {
            file,
            inside: Vec::new(),
            root: root.as_os_str().as_bytes().to_vec(),
        };
        mounts.inside = mounts.read_inside()?;
        Ok(mounts)
    }

    /// Whether a filesystem was mounted or unmounted inside the root since
    /// the last call. The kernel flags the open table (`POLLPRI`) at any
    /// change of the mount namespace; only then is it read again.
    pub(crate) fn changed_inside(&mut self) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd; zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n <= 0 || p.revents & (libc::POLLPRI | libc::POLLERR) == 0 {
            return Ok(false);
        }
        let inside = self.read_inside()?;
        let changed = inside != self.inside;
        self.inside = inside;
        Ok(changed)
    }

    fn read_inside(&mut self) -> io::Result<Vec<Vec<u8>>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut text = Vec::new();
        self.file.seek(SeekFrom::Start(0))?;
        self.file.read_to_end(&mut text)?;
        let mut inside: Vec<Vec<u8>> = text
            .split(|&b| b == b'\n')
            .filter_map(|line| line.split(|&b| b == b' ').nth(4))
            .map(unescape)
            .filter(|point| {
                point.len() > self.root.len()
                    && point.starts_with(&self.root)
                    && (point[self.root.len()] == b'/' || self.root == b"/")
            })
            .collect();
        inside.sort();
        Ok(inside)
    }
}

/// A mountinfo path: space, tab, newline and backslash are octal escapes.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// Waits until `fds` has a readable descriptor or `timeout_ms` passed (-1:
/// forever); returns which are readable.
pub(crate) fn poll(fds: &[RawFd], timeout_ms: i32) -> Vec<bool> {
    let mut set: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `set` is a valid array of `set.len()` pollfd records.
    let n = unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, timeout_ms) };
    if n <= 0 {
        return vec![false; fds.len()];
    }
    set.iter().map(|p| p.revents != 0).collect()
}

/// An eventfd that wakes the index's thread (close, step aside, new dirty
/// files to re-index).
pub(crate) struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub(crate) fn new() -> io::Result<Waker> {
        // SAFETY: plain system call; a non-negative result is ours.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waker {
            // SAFETY: just returned, owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64; a full counter is still a wake.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast::<libc::c_void>(),
                8,
            )
        };
    }

    /// Clears pending wakes.
    pub(crate) fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN when none pending.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut n as *mut u64).cast::<libc::c_void>(),
                8,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn events_name_what_changed() {
        let t = tempfile::tempdir().unwrap();
        let ino = Inotify::new().unwrap();
        let dir: OwnedFd = fs::File::open(t.path()).unwrap().into();
        let wd = ino.add(std::os::fd::AsFd::as_fd(&dir), DIR_MASK).unwrap();
        fs::write(t.path().join("a"), "x").unwrap();
        fs::rename(t.path().join("a"), t.path().join("b")).unwrap();
        let mut events = Vec::new();
        ino.drain(&mut events).unwrap();
        let seen: Vec<(u32, &[u8])> = events
            .iter()
            .filter(|e| e.wd == wd)
            .map(|e| (e.mask, e.name.as_deref().unwrap_or(b"")))
            .collect();
        assert!(seen.contains(&(libc::IN_CREATE, &b"a"[..])), "{seen:?}");
        assert!(seen.contains(&(libc::IN_MOVED_TO, &b"b"[..])), "{seen:?}");
        // Drained: nothing more pending.
        events.clear();
        ino.drain(&mut events).unwrap();
        assert!(events.is_empty());
        assert_eq!(untrusted_filesystem(std::os::fd::AsFd::as_fd(&dir)), None);
    }
}
