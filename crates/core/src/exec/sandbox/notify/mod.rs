//! seccomp user notification: the calls a path rule cannot see, answered by a handler thread on
//! Node's side that resolves the target itself and performs the call on what it resolved.
//!
//! - **Landlock mode**: Landlock governs neither modes, owners, times nor xattrs. `chmod`,
//!   `chown`, `utime*`, `*setxattr*`/`*removexattr*` (every variant) reach the handler, which
//!   performs them only on an object beneath a writable area (the root, `readWrite`, the private
//!   temp dir) and refuses the rest with `EPERM`.
//! - **Both modes**: `flock` and the lock commands of `fcntl` (the filter checks the command:
//!   `fcntl` is hot) reach the handler, which refuses a lock on a file outside the writable areas
//!   with `ENOLCK` (a held lock on a host file, e.g. `/etc/.pwd.lock`, stops host programs).
//!   Namespaces mode: "writable" is a read-write mount of the sandbox (the workspace, `readWrite`,
//!   the private `/tmp` and `/dev/shm`; everything else is mounted read-only there).
//!
//! How the pieces meet: the shell's process installs the filter (`SECCOMP_FILTER_FLAG_NEW_LISTENER`)
//! just before `execve` and sends the listener over a socket pair made per exec (`SCM_RIGHTS`);
//! the handler thread receives it and serves until the listener hangs up (no process of the tree
//! uses the filter any more).
//!
//! Why nothing can race: a path is read once from the target's memory into the handler's copy,
//! resolved from the target's cwd (`/proc/<pid>/cwd`) or a copy of its dirfd (`pidfd_getfd`) as the
//! kernel would, and the call is then made on the handler's own descriptor of the object it
//! checked. Descriptor calls work on a `pidfd_getfd` copy, which is the same open file. The one
//! exception is classic POSIX locks (`F_SETLK`/`F_SETLKW`), which belong to the calling process:
//! the handler checks the file and lets the kernel go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`); a
//! second thread of the target that swaps the descriptor between the check and the kernel's own
//! lookup can still lock what it swapped in (documented residual risk).
//!
//! The handler thread holds no capability (it empties its own sets with `capset`, which is
//! per-thread on Linux), so a root caller's handler fails where its capability-less shell would.

// Installing the filter, handing its listener to Node, and the handler loop that answers it.
mod listener;
// The caller of a notification: its pidfd, descriptors, memory and cwd.
mod caller;
// The notified system calls decoded from their numbers and arguments (both handlers').
mod decode;
// Answering a notification.
mod answer;
// Our own descriptors of the objects calls name: identity, kernel path, opens beneath.
mod objects;
// Paths resolved for the caller as the kernel would (both handlers).
mod resolve;
// Mode, owner, time and xattr calls performed on what was resolved (Landlock mode).
mod metadata;
// `flock` and `fcntl` locks (both modes).
mod locks;
// `inotify_add_watch` as the shell could (Landlock mode).
mod watch;
// The workspace policy's calls, served by this handler.
pub(super) mod guard;
// The directory `core.hooksPath` names, protected for each command.
mod hooks_path;
#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use libc::sock_filter;
use nix::fcntl::ResolveFlag;

use super::bpf::{
    self, arg_low, ret_errno, Asm, Jump, ARCH_AT, AUDIT_ARCH, NR_AT, RET_ALLOW, RET_USER_NOTIF,
};
use super::seccomp::XATTR_CALLS;
use caller::{Scratch, Target};
use decode::{Object, SYS_FCHMODAT2};
use objects::{beneath, fd_path, identity, open_beneath_nul, open_path, reopen_beneath};

pub(in crate::exec) use listener::{available, channel, install, serve};

/// The longest path the kernel takes, terminating NUL included (`PATH_MAX`).
pub(super) const PATH_MAX: usize = 4096;
/// `capset`'s `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// Stack of the handler thread and of a lock waiter: a few frames and path buffers.
pub(super) const HANDLER_STACK_BYTES: usize = 256 << 10;

/// The mode, owner and time calls Landlock does not govern, with the path (or descriptor) they act
/// on; with `XATTR_CALLS`, every metadata call the handler performs.
#[cfg(target_arch = "x86_64")]
const MODE_OWNER_TIME_CALLS: &[libc::c_long] = &[
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    SYS_FCHMODAT2,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_utimensat,
];
#[cfg(target_arch = "aarch64")]
const MODE_OWNER_TIME_CALLS: &[libc::c_long] = &[
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    SYS_FCHMODAT2,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
];
/// Refused in Landlock mode: fanotify reports events on what Landlock would not let the shell read
/// (unprivileged fanotify exists since Linux 5.13), and a sandboxed shell has no use for it.
const WATCH_DENIED: &[libc::c_long] = &[libc::SYS_fanotify_init, libc::SYS_fanotify_mark];
/// `fcntl` commands that take a lock (the 64-bit `F_*LK64` share these numbers).
const LOCK_COMMANDS: &[libc::c_int] = &[
    libc::F_SETLK,
    libc::F_SETLKW,
    libc::F_OFD_SETLK,
    libc::F_OFD_SETLKW,
];

/// What the handler lets a sandboxed call touch.
pub(in crate::exec) struct Policy {
    writable: Writable,
    program: Vec<sock_filter>,
    /// Landlock mode: the shell's ruleset, which the watch helper applies to itself.
    ruleset: Option<OwnedFd>,
}

enum Writable {
    /// Landlock mode: beneath one of these directories (canonical path, held descriptor).
    Areas(Vec<(Vec<u8>, OwnedFd)>),
    /// Namespaces mode: on a read-write mount of the sandbox.
    Mounts,
}

impl Policy {
    /// The notification filter the shell's process installs (handed to the sandbox helper).
    pub(in crate::exec) fn program(&self) -> &[sock_filter] {
        &self.program
    }

    /// Landlock mode: metadata and locks, checked against `areas` (the writable paths).
    /// `areas`: each writable path's real path (no symlink left) and a descriptor of it, held
    /// since the sandbox resolved it (`area` opens one).
    pub(in crate::exec) fn landlock(
        areas: Vec<(PathBuf, OwnedFd)>,
        ruleset: BorrowedFd<'_>,
        guard: Option<guard::Filter>,
    ) -> io::Result<Policy> {
        let ruleset = ruleset.try_clone_to_owned()?;
        let held = areas
            .into_iter()
            .map(|(path, fd)| (path.into_os_string().into_vec(), fd))
            .collect();
        let program = program(true, guard)?;
        Ok(Policy {
            writable: Writable::Areas(held),
            program,
            ruleset: Some(ruleset),
        })
    }

    /// Namespaces mode: locks only (Landlock's metadata gap does not exist there: everything
    /// outside the writable areas is mounted read-only).
    pub(in crate::exec) fn namespaces(guard: Option<guard::Filter>) -> io::Result<Policy> {
        Ok(Policy {
            writable: Writable::Mounts,
            program: program(false, guard)?,
            ruleset: None,
        })
    }

    /// The fast way to a path's object (Landlock mode): when the path (made absolute with the
    /// caller's cwd) names something beneath a writable area, that area's held descriptor walks
    /// it with `RESOLVE_BENEATH`, so what it opens is inside by construction and needs no check.
    /// The walk is the kernel's own from the cwd: the cwd's canonical path, then the caller's path
    /// unchanged (`..` and symlinks included; any that leaves the area fails the walk). `None`
    /// (anything else, any failure): resolve as the kernel would, then check (`inside`).
    fn open_beneath(&self, target: &Target<'_>, object: Object) -> Option<OwnedFd> {
        let Writable::Areas(areas) = &self.writable else {
            return None;
        };
        let Object::Path {
            dirfd,
            path,
            follow,
            ..
        } = object
        else {
            return None;
        };
        let mut scratch = target.pidfds.scratch.borrow_mut();
        let Scratch { path: read, joined } = &mut *scratch;
        let n = target.string_into(path, read).ok()?;
        if n == 0 {
            return None;
        }
        let read = &read[..n];
        // `joined`: the absolute path, NUL-terminated (each area's part of it is passed on as is).
        joined.clear();
        if read[0] == b'/' {
            joined.extend_from_slice(read);
        } else if dirfd == libc::AT_FDCWD {
            target.cwd_into(joined)?;
            joined.push(b'/');
            joined.extend_from_slice(read);
        } else {
            return None;
        }
        joined.push(0);
        let absolute = &joined[..joined.len() - 1];
        areas.iter().find_map(|(area, fd)| {
            let rel = beneath(absolute, area)?;
            let rel_nul = &joined[joined.len() - 1 - rel.len()..];
            open_beneath_nul(fd.as_fd(), rel_nul, follow, ResolveFlag::empty())
        })
    }

    /// Whether the object `fd` refers to lies in a writable area.
    fn inside(&self, fd: BorrowedFd<'_>) -> bool {
        match &self.writable {
            Writable::Mounts => {
                // SAFETY: a zeroed statvfs is a valid buffer for the kernel to fill.
                let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
                // SAFETY: fstatvfs on our descriptor into our buffer.
                let known = unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut fs) } == 0;
                known && fs.f_flag & libc::ST_RDONLY == 0
            }
            Writable::Areas(areas) => {
                let Some(at) = fd_path(fd) else {
                    return false;
                };
                let Some(object) = identity(fd) else {
                    return false;
                };
                areas.iter().any(|(area, area_fd)| {
                    let Some(rel) = beneath(&at, area) else {
                        return false;
                    };
                    if rel.is_empty() {
                        return identity(area_fd.as_fd()) == Some(object);
                    }
                    reopen_beneath(area_fd.as_fd(), rel).and_then(|again| identity(again.as_fd()))
                        == Some(object)
                })
            }
        }
    }
}

/// A writable area opened now: its canonical path and an `O_PATH` descriptor (a file may be one
/// too: `readWrite` takes files).
pub(in crate::exec) fn area(path: &Path) -> io::Result<(PathBuf, OwnedFd)> {
    let canonical = std::fs::canonicalize(path)?;
    let fd = open_path(None, canonical.as_os_str().as_bytes(), true)
        .map_err(io::Error::from_raw_os_error)?;
    Ok((canonical, fd))
}

/// The notification filter: in Landlock mode (`metadata`) the metadata calls, in both modes
/// `flock` and `fcntl`'s lock commands, and the guard's calls when it has a `guard` filter. Every
/// other call is allowed here (the main filter of `seccomp.rs`, installed first, refuses what it
/// refuses: an errno outranks a notification).
pub(super) fn program(
    landlock: bool,
    guard: Option<guard::Filter>,
) -> Result<Vec<sock_filter>, bpf::Error> {
    let denied = WATCH_DENIED.iter().filter(|_| landlock);
    let calls = MODE_OWNER_TIME_CALLS
        .iter()
        .chain(XATTR_CALLS)
        .chain(std::iter::once(&libc::SYS_inotify_add_watch))
        .filter(|_| landlock)
        .chain(std::iter::once(&libc::SYS_flock));
    let mut asm = Asm::new();
    let (number, notify, deny, command) = (asm.label(), asm.label(), asm.label(), asm.label());
    asm.load(ARCH_AT);
    // A foreign architecture's numbers mean other calls: the main filter refuses them all.
    asm.jeq(AUDIT_ARCH, number, Jump::Next);
    asm.ret(RET_ALLOW);
    asm.place(number);
    asm.load(NR_AT);
    if let Some(filter) = guard {
        guard::block(&mut asm, filter);
    }
    for &nr in denied {
        asm.jeq(nr as u32, deny, Jump::Next);
    }
    for &nr in calls {
        asm.jeq(nr as u32, notify, Jump::Next);
    }
    asm.jeq(libc::SYS_fcntl as u32, command, Jump::Next);
    asm.ret(RET_ALLOW);
    asm.place(notify);
    asm.ret(RET_USER_NOTIF);
    asm.place(deny);
    asm.ret(ret_errno(libc::EPERM));
    // fcntl: only its lock commands.
    let lock = asm.label();
    asm.place(command);
    asm.load(arg_low(1));
    for &cmd in LOCK_COMMANDS {
        asm.jeq(cmd as u32, lock, Jump::Next);
    }
    asm.ret(RET_ALLOW);
    asm.place(lock);
    asm.ret(RET_USER_NOTIF);
    asm.finish()
}

/// How a call is answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// The call returns this value.
    Value(i64),
    /// The call fails with this errno.
    Errno(i32),
    /// The kernel performs the call itself (classic POSIX locks only).
    Continue,
    /// A lock waiter answers later.
    Later,
}

/// Empties this thread's capability sets (`capset` is per-thread on Linux; a raw call, since the
/// C library may broadcast credential changes to every thread).
pub(super) fn drop_own_capabilities() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    let header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [0u32; 6];
    // SAFETY: capset with a valid header and two zeroed data words per set.
    unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
}
