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

// The workspace policy's calls, served by this handler.
pub(super) mod guard;
// The directory `core.hooksPath` names, protected for each command.
mod hooks_path;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use libc::sock_filter;

use super::bpf::{
    self, arg_low, ret_errno, Asm, Jump, ARCH_AT, AUDIT_ARCH, NR_AT, RET_ALLOW, RET_USER_NOTIF,
};
use super::seccomp::{SYS_REMOVEXATTRAT, SYS_SETXATTRAT, XATTR_CALLS};

use crate::sys::errno;

/// The longest path the kernel takes, terminating NUL included (`PATH_MAX`).
pub(super) const PATH_MAX: usize = 4096;
/// The longest xattr name, NUL included (`XATTR_NAME_MAX` + 1).
const XATTR_NAME_BYTES: usize = 256;
/// The largest xattr value the kernel takes (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 65_536;
/// `struct xattr_args` of `setxattrat` (value pointer, size, flags): its first version's size.
const XATTR_ARGS_BYTES: usize = 16;
/// Stack of the handler thread and of a lock waiter: a few frames and path buffers.
pub(super) const HANDLER_STACK_BYTES: usize = 256 << 10;
/// A waiter for a blocking lock retries at growing intervals from the first to the second, and
/// checks each time whether the caller still waits (a signal or a kill ends its call).
const LOCK_RETRY_FIRST: Duration = Duration::from_millis(1);
const LOCK_RETRY_MAX: Duration = Duration::from_millis(50);

/// `fchmodat2` (Linux 6.6), one number on every architecture.
const SYS_FCHMODAT2: libc::c_long = 452;
/// `pidfd_open`'s flag for a thread's pid (Linux 6.9; `O_EXCL`'s value).
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): the handler runs on the waiting caller's CPU.
const NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
/// `openat2`'s `RESOLVE_*` flags.
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
/// `capset`'s `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

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
            open_beneath_nul(fd.as_fd(), rel_nul, follow, 0)
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
    open_beneath(dir, rel, false, RESOLVE_NO_SYMLINKS)
}

/// Opens `rel` (`O_PATH`) beneath `dir`: symlinks are followed (the last one when `follow`) as
/// long as the walk never leaves `dir` (`RESOLVE_BENEATH`); `extra` adds `RESOLVE_*` flags.
fn open_beneath(dir: BorrowedFd<'_>, rel: &[u8], follow: bool, extra: u64) -> Option<OwnedFd> {
    let mut path = rel.to_vec();
    path.push(0);
    open_beneath_nul(dir, &path, follow, extra)
}

/// `open_beneath` of a path given with its terminating NUL (and nothing after it); an empty one
/// names `dir` itself.
fn open_beneath_nul(dir: BorrowedFd<'_>, rel: &[u8], follow: bool, extra: u64) -> Option<OwnedFd> {
    if rel.last() != Some(&0) || rel[..rel.len() - 1].contains(&0) {
        return None;
    }
    let path = if rel.len() == 1 { &b".\0"[..] } else { rel };
    let resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | extra;
    openat2_path(dir.as_raw_fd(), path, follow, resolve).ok()
}

/// `openat2(dir, path, O_PATH, resolve)`, following the last component or not; `path` ends in
/// its NUL and holds no other.
fn openat2_path(dir: RawFd, path: &[u8], follow: bool, resolve: u64) -> Result<OwnedFd, i32> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: openat2 with a NUL-terminated path (the caller's contract) and a valid `open_how`
    // of the size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const OpenHow,
            size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(errno_now());
    }
    // SAFETY: a descriptor we just got.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
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

/// Installs the notification filter `program` (a `Policy`'s) on the calling process and sends
/// its listener over `channel`. Runs in the shell's process after `confine` (no_new_privs is
/// set), just before `execve`. Async-signal-safe; `Err` is the errno.
///
/// # Safety
///
/// Call only in a process about to `execve`: the filter stays for good. `channel` is an open
/// socket of this process (the children's end of the plan's pair).
pub(in crate::exec) unsafe fn install(program: &[sock_filter], channel: RawFd) -> Result<(), i32> {
    let program = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut sock_filter,
    };
    // SAFETY: `program` points to the policy's filter, valid for `len` instructions (the kernel
    // copies it); the caller's process is the one to filter.
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &program as *const libc::sock_fprog,
        )
    };
    if listener < 0 {
        return Err(errno());
    }
    let listener = listener as RawFd;
    /// Room for one descriptor's control message (CMSG_SPACE(4) on 64-bit Linux).
    const CONTROL_BYTES: usize = 24;
    let mut control = [0u64; CONTROL_BYTES / 8];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: `msghdr` is a plain C struct: all-zero bytes are valid.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = CONTROL_BYTES as _;
    // SAFETY: `control` (8-byte aligned, CONTROL_BYTES long) holds one header and one descriptor,
    // so CMSG_FIRSTHDR is non-null and the header and its data lie inside it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), listener);
    }
    // SAFETY: `message` and the buffers it points to are valid; `channel` is the caller's socket.
    let sent = unsafe { libc::sendmsg(channel, &message, libc::MSG_NOSIGNAL) };
    let code = errno();
    // SAFETY: the listener is ours; the handler got its copy.
    unsafe { libc::close(listener) };
    if sent != 1 {
        return Err(code);
    }
    Ok(())
}

/// Whether seccomp user notification works here: a forked child installs an allow-all filter with
/// a listener (the kernel may lack it, or a container's own filter may hold the one listener a
/// process may have). Probed once per process.
pub(in crate::exec) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let mut asm = Asm::new();
        asm.ret(RET_ALLOW);
        let Ok(allow) = asm.finish() else {
            return false;
        };
        let program = libc::sock_fprog {
            len: allow.len() as libc::c_ushort,
            filter: allow.as_ptr() as *mut sock_filter,
        };
        // SAFETY: the child makes raw system calls on memory prepared above and exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: raw calls in the child; `program` outlives them.
            unsafe {
                let ok = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                    && libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                        &program as *const libc::sock_fprog,
                    ) >= 0;
                libc::_exit(if ok { 0 } else { 1 })
            }
        }
        if child < 0 {
            return false;
        }
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child.
            let r = unsafe { libc::waitpid(child, &mut status, 0) };
            if r >= 0 || errno_now() != libc::EINTR {
                break;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    })
}

/// A socket pair for one exec's listener: (Node's end, the children's end), both close-on-exec.
pub(in crate::exec) fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: a valid two-element buffer.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both just created and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts the handler thread of one exec: it waits for the listener on `channel` (none comes when
/// the shell failed before `execve`: the children's ends close), then answers until the listener
/// hangs up. `plan` keeps the policy alive.
pub(in crate::exec) fn serve(
    plan: Arc<super::Plan>,
    channel: OwnedFd,
    guard: Option<guard::Session>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("pi-sandbox-notify".into())
        .stack_size(HANDLER_STACK_BYTES)
        .spawn(move || {
            if let Some(policy) = plan.notify() {
                drop_own_capabilities();
                if let Some(listener) = receive(&channel) {
                    drop(channel);
                    run(policy, Arc::new(listener), guard);
                }
            }
        })
        .map(drop)
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

/// The listener sent over `channel`, or `None` at end-of-file.
fn receive(channel: &OwnedFd) -> Option<OwnedFd> {
    const CONTROL_BYTES: usize = 24;
    let mut control = [0u64; CONTROL_BYTES / 8];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a zeroed msghdr is valid; we point it at our buffers.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = CONTROL_BYTES as _;
    loop {
        // SAFETY: recvmsg into the buffers above.
        let n = unsafe { libc::recvmsg(channel.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return None;
        }
        break;
    }
    // SAFETY: the kernel filled `message`; the header and data lie within `control`.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null()
            || (*header).cmsg_level != libc::SOL_SOCKET
            || (*header).cmsg_type != libc::SCM_RIGHTS
        {
            return None;
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<RawFd>());
        Some(OwnedFd::from_raw_fd(fd))
    }
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

fn run(policy: &Policy, listener: Arc<OwnedFd>, mut guard: Option<guard::Session>) {
    let mut watcher = None;
    let pidfds = Pidfds::default();
    // SAFETY: an ioctl on our listener with a valid flags value; older kernels refuse it harmlessly.
    let sync = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            NOTIF_FD_SYNC_WAKE_UP,
        )
    } == 0;
    // Where the flag exists (Linux 6.6), RECV itself waits, and returns ENOENT once no process
    // uses the filter any more: no poll before each notification. Before, RECV would wait past
    // that, so poll says when a notification is there or the listener hung up.
    loop {
        if !sync {
            match wait_readable(listener.as_fd(), -1) {
                Readiness::Readable => {}
                Readiness::Other => continue,
                Readiness::HungUp => return, // no process of the tree uses the filter any more
            }
        }
        // SAFETY: the kernel requires a zeroed notification buffer.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV fills our buffer.
        if unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut notif,
            )
        } != 0
        {
            match io::Error::last_os_error().raw_os_error() {
                // The caller went (killed, or a signal ended its call) before we read it, or
                // (waiting in RECV) the filter has no process left.
                Some(libc::ENOENT) | Some(libc::EINTR) => {
                    if sync && wait_readable(listener.as_fd(), 0) == Readiness::HungUp {
                        return;
                    }
                    continue;
                }
                _ => return,
            }
        }
        let nr = notif.data.nr as libc::c_long;
        if let Some(session) = guard.as_mut().filter(|_| guard::Session::handles(nr)) {
            let target = Target::new(&listener, &pidfds, notif.pid as libc::pid_t, notif.id);
            let ruleset = policy.ruleset.as_ref().map(|r| r.as_fd());
            let reply = session.handle(&target, nr, notif.data.args, ruleset);
            respond(listener.as_fd(), notif.id, reply);
            continue;
        }
        let call = Call::decode(nr, notif.data.args);
        let reply = match call {
            Ok(call) => {
                let target = Target::new(&listener, &pidfds, notif.pid as libc::pid_t, notif.id);
                handle(policy, &target, call, &mut watcher)
            }
            Err(code) => Reply::Errno(code),
        };
        respond(listener.as_fd(), notif.id, reply);
    }
}

/// What `poll` says of the listener.
#[derive(Debug, PartialEq, Eq)]
enum Readiness {
    /// A notification waits.
    Readable,
    /// No process uses the filter any more (or the listener is unusable).
    HungUp,
    /// Interrupted, or nothing yet (a zero timeout).
    Other,
}

/// Polls the listener for at most `timeout_ms` (-1: no limit).
fn wait_readable(listener: BorrowedFd<'_>, timeout_ms: libc::c_int) -> Readiness {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if ready < 0 {
        return if errno_now() == libc::EINTR {
            Readiness::Other
        } else {
            Readiness::HungUp
        };
    }
    if pfd.revents & libc::POLLIN != 0 {
        Readiness::Readable
    } else if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Readiness::HungUp
    } else {
        Readiness::Other
    }
}

/// Sends `reply` for notification `id`; false when the caller no longer waits.
pub(super) fn respond(listener: BorrowedFd<'_>, id: u64, reply: Reply) -> bool {
    let (val, error, flags) = match reply {
        Reply::Value(v) => (v, 0, 0),
        Reply::Errno(e) => (0, -e, 0),
        Reply::Continue => (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
        Reply::Later => return true,
    };
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags,
    };
    // SAFETY: SEND reads our response.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp,
        ) == 0
    }
}

/// Whether notification `id` still waits for an answer (its caller is alive and blocked).
pub(super) fn id_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    let mut id = id;
    // SAFETY: ID_VALID reads our u64.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &mut id,
        ) == 0
    }
}

/// Where a call's object is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    /// A path (a pointer in the caller's memory; 0 is NULL) relative to `dirfd`.
    Path {
        dirfd: i32,
        path: u64,
        follow: bool,
        /// `AT_EMPTY_PATH`: an empty (or NULL) path names `dirfd` itself.
        empty: bool,
    },
    /// A descriptor of the caller.
    Fd(i32),
}

/// How a call's timestamps are given in the caller's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Times {
    /// `struct utimbuf` (two `time_t`, seconds): `utime`, an x86_64-only call.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Utimbuf,
    /// `struct timeval[2]`: `utimes` and `futimesat`, x86_64-only calls.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Timeval,
    /// `struct timespec[2]` (`utimensat`).
    Timespec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Chmod(u32),
    Chown(u32, u32),
    /// The times pointer (0: now).
    Utimes(Times, u64),
    SetXattr {
        name: u64,
        value: u64,
        size: u64,
        flags: i32,
    },
    /// `setxattrat`: the value and flags are in a `struct xattr_args` of `size` bytes.
    SetXattrArgs {
        name: u64,
        args: u64,
        size: u64,
    },
    RemoveXattr(u64),
    Flock(i32),
    /// `fcntl` lock command and the `struct flock` pointer.
    Lock(i32, u64),
    /// `inotify_add_watch` on the caller's inotify descriptor.
    Watch {
        inotify: i32,
        mask: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Call {
    object: Object,
    op: Op,
}

impl Call {
    /// The call of system call `nr` with `args`, or the errno the kernel gives bad arguments.
    fn decode(nr: libc::c_long, a: [u64; 6]) -> Result<Call, i32> {
        let fd = |i: usize| a[i] as i32;
        let path = |dirfd: i32, path: u64, follow: bool| Object::Path {
            dirfd,
            path,
            follow,
            empty: false,
        };
        let at_flags = |flags: u64| -> Result<(bool, bool), i32> {
            let flags = flags as i32;
            if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
                return Err(libc::EINVAL);
            }
            Ok((
                flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                flags & libc::AT_EMPTY_PATH != 0,
            ))
        };
        let at = |dirfd: i32, ptr: u64, flags: u64| -> Result<Object, i32> {
            let (follow, empty) = at_flags(flags)?;
            Ok(Object::Path {
                dirfd,
                path: ptr,
                follow,
                empty,
            })
        };
        let cwd = libc::AT_FDCWD;
        let call = |object, op| Ok(Call { object, op });
        #[cfg(target_arch = "x86_64")]
        match nr {
            libc::SYS_chmod => return call(path(cwd, a[0], true), Op::Chmod(a[1] as u32)),
            libc::SYS_chown => {
                return call(path(cwd, a[0], true), Op::Chown(a[1] as u32, a[2] as u32))
            }
            libc::SYS_lchown => {
                return call(path(cwd, a[0], false), Op::Chown(a[1] as u32, a[2] as u32))
            }
            libc::SYS_utime => {
                return call(path(cwd, a[0], true), Op::Utimes(Times::Utimbuf, a[1]))
            }
            libc::SYS_utimes => {
                return call(path(cwd, a[0], true), Op::Utimes(Times::Timeval, a[1]))
            }
            libc::SYS_futimesat => {
                return call(path(fd(0), a[1], true), Op::Utimes(Times::Timeval, a[2]))
            }
            _ => {}
        }
        match nr {
            libc::SYS_fchmod => call(Object::Fd(fd(0)), Op::Chmod(a[1] as u32)),
            // fchmodat has no flags argument: it follows.
            libc::SYS_fchmodat => call(path(fd(0), a[1], true), Op::Chmod(a[2] as u32)),
            SYS_FCHMODAT2 => call(at(fd(0), a[1], a[3])?, Op::Chmod(a[2] as u32)),
            libc::SYS_fchown => call(Object::Fd(fd(0)), Op::Chown(a[1] as u32, a[2] as u32)),
            libc::SYS_fchownat => call(at(fd(0), a[1], a[4])?, Op::Chown(a[2] as u32, a[3] as u32)),
            libc::SYS_utimensat => {
                let op = Op::Utimes(Times::Timespec, a[2]);
                if a[1] == 0 {
                    // A NULL path names the descriptor itself, and takes no flags.
                    if fd(0) == cwd {
                        return Err(libc::EFAULT);
                    }
                    if a[3] as i32 != 0 {
                        return Err(libc::EINVAL);
                    }
                    return call(Object::Fd(fd(0)), op);
                }
                call(at(fd(0), a[1], a[3])?, op)
            }
            libc::SYS_setxattr | libc::SYS_lsetxattr => call(
                path(cwd, a[0], nr == libc::SYS_setxattr),
                Op::SetXattr {
                    name: a[1],
                    value: a[2],
                    size: a[3],
                    flags: a[4] as i32,
                },
            ),
            libc::SYS_fsetxattr => call(
                Object::Fd(fd(0)),
                Op::SetXattr {
                    name: a[1],
                    value: a[2],
                    size: a[3],
                    flags: a[4] as i32,
                },
            ),
            libc::SYS_removexattr | libc::SYS_lremovexattr => call(
                path(cwd, a[0], nr == libc::SYS_removexattr),
                Op::RemoveXattr(a[1]),
            ),
            libc::SYS_fremovexattr => call(Object::Fd(fd(0)), Op::RemoveXattr(a[1])),
            SYS_SETXATTRAT => call(
                at(fd(0), a[1], a[2])?,
                Op::SetXattrArgs {
                    name: a[3],
                    args: a[4],
                    size: a[5],
                },
            ),
            SYS_REMOVEXATTRAT => call(at(fd(0), a[1], a[2])?, Op::RemoveXattr(a[3])),
            libc::SYS_flock => call(Object::Fd(fd(0)), Op::Flock(a[1] as i32)),
            libc::SYS_inotify_add_watch => call(
                path(cwd, a[1], a[2] as u32 & libc::IN_DONT_FOLLOW == 0),
                Op::Watch {
                    inotify: fd(0),
                    mask: a[2] as u32,
                },
            ),
            libc::SYS_fcntl => call(Object::Fd(fd(0)), Op::Lock(a[1] as i32, a[2])),
            _ => Err(libc::ENOSYS),
        }
    }
}

/// The caller of one notification: its pid (in our namespace), a pidfd, the listener and id.
pub(super) struct Target<'a> {
    pub(super) pid: libc::pid_t,
    /// Taken from `pidfds` or opened on first use: a path relative to the cwd needs none.
    /// With it, whether it was kept from an earlier call (not opened for this one).
    pidfd: std::cell::OnceCell<Result<(Rc<OwnedFd>, bool), i32>>,
    pidfds: &'a Pidfds,
    /// `fd` copied the caller's descriptor through a pidfd kept from an earlier call.
    fd_by_kept_pidfd: std::cell::Cell<bool>,
    /// `cwd_into` read the cwd through a `/proc/<pid>` directory kept from an earlier call.
    cwd_by_kept_dir: std::cell::Cell<bool>,
    pub(super) listener: &'a Arc<OwnedFd>,
    pub(super) id: u64,
}

/// The pidfd of the last caller, kept across notifications: a shell's metadata calls come in runs
/// from one process (`touch` and `chmod` make one call per file), and a pidfd_open and close per
/// call are a fifth of the handler's system calls. Safe to keep: a pidfd names one process for
/// good, so once that process has gone it answers `ESRCH` and a fresh one is opened (`Target::fd`).
#[derive(Default)]
struct Pidfds {
    last: std::cell::RefCell<Option<(libc::pid_t, Rc<OwnedFd>)>>,
    /// The last caller's `/proc/<pid>` directory (`Target::cwd_into`), kept on the same terms: it
    /// names one process for good and answers `ENOENT` once that process has gone.
    proc_dir: std::cell::RefCell<Option<(libc::pid_t, OwnedFd)>>,
    /// The buffers a path-based call reads into.
    scratch: std::cell::RefCell<Scratch>,
}

/// Buffers reused from call to call (a `touch` or `chmod` of many files makes one call each).
#[derive(Default)]
struct Scratch {
    /// A path read from the caller.
    path: Vec<u8>,
    /// The same made absolute (the caller's cwd, `/`, the path), NUL-terminated.
    joined: Vec<u8>,
}

impl Pidfds {
    fn get(&self, pid: libc::pid_t) -> Option<Rc<OwnedFd>> {
        match &*self.last.borrow() {
            Some((last, fd)) if *last == pid => Some(Rc::clone(fd)),
            _ => None,
        }
    }

    fn keep(&self, pid: libc::pid_t, fd: &Rc<OwnedFd>) {
        *self.last.borrow_mut() = Some((pid, Rc::clone(fd)));
    }

    fn forget(&self, pid: libc::pid_t) {
        let mut last = self.last.borrow_mut();
        if matches!(&*last, Some((p, _)) if *p == pid) {
            *last = None;
        }
    }
}

impl<'a> Target<'a> {
    fn new(listener: &'a Arc<OwnedFd>, pidfds: &'a Pidfds, pid: libc::pid_t, id: u64) -> Self {
        Target {
            pid,
            pidfd: std::cell::OnceCell::new(),
            pidfds,
            fd_by_kept_pidfd: std::cell::Cell::new(false),
            cwd_by_kept_dir: std::cell::Cell::new(false),
            listener,
            id,
        }
    }

    /// A pidfd of the caller (checked against pid reuse by `valid` before anything is done).
    fn pidfd(&self) -> Result<BorrowedFd<'_>, i32> {
        let fd = self.pidfd.get_or_init(|| {
            if let Some(kept) = self.pidfds.get(self.pid) {
                return Ok((kept, true));
            }
            let open = |flags: libc::c_uint| {
                // SAFETY: pidfd_open takes a pid and flags.
                unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid, flags) }
            };
            let mut fd = open(0);
            if fd < 0 && errno_now() == libc::EINVAL {
                fd = open(PIDFD_THREAD); // a thread of the caller, not its leader
            }
            let mut exact = true;
            if fd < 0 {
                // Before Linux 6.9 a thread has no pidfd: its thread group's leader shares its
                // descriptors (the same `valid` check covers the pid read here). Not kept: it
                // would outlive the thread, whose pid another process may then get.
                exact = false;
                if let Some(leader) = thread_group(self.pid) {
                    // SAFETY: pidfd_open takes a pid and flags.
                    fd = unsafe { libc::syscall(libc::SYS_pidfd_open, leader, 0) };
                }
            }
            if fd < 0 {
                return Err(libc::ESRCH);
            }
            // SAFETY: just opened, ours.
            let fd = Rc::new(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
            if exact {
                self.pidfds.keep(self.pid, &fd);
            }
            Ok((fd, false))
        });
        fd.as_ref().map(|(fd, _)| fd.as_fd()).map_err(|e| *e)
    }

    /// Whether the caller still waits: what we read by pid was its.
    pub(super) fn valid(&self) -> bool {
        id_valid(self.listener.as_fd(), self.id)
    }

    /// Whether a descriptor copied by `fd` is the caller's without asking `valid`: the pidfd it
    /// went through was kept from an earlier call and names exactly this pid (a process, or a
    /// thread), and the copy succeeded, so that process was alive then. A live process keeps its
    /// pid to itself, so it is the caller. Only for a call that read nothing else by pid.
    fn fd_proven(&self) -> bool {
        self.fd_by_kept_pidfd.get()
    }

    /// Whether what this call read by pid up to and including its cwd (`cwd_into`) was the
    /// caller's without asking `valid`: the cwd was read through a `/proc/<pid>` directory kept
    /// from an earlier call, and a kept directory answers only while its process lives. Alive, that
    /// process has held the pid since it was kept, so the caller is it, and the reads by pid
    /// before (the path) were its. Only for a call that reads nothing by pid afterwards.
    fn cwd_proven(&self) -> bool {
        self.cwd_by_kept_dir.get()
    }

    /// Our copy of the caller's descriptor `fd` (the same open file).
    pub(super) fn fd(&self, fd: i32) -> Result<OwnedFd, i32> {
        if fd < 0 {
            return Err(libc::EBADF);
        }
        let getfd = |pidfd: BorrowedFd<'_>| {
            // SAFETY: pidfd_getfd on our pidfd; the copy it makes is close-on-exec.
            let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
            if copy < 0 {
                return Err(errno_now());
            }
            // SAFETY: a descriptor we just got.
            Ok(unsafe { OwnedFd::from_raw_fd(copy as RawFd) })
        };
        let pidfd = self.pidfd()?;
        let by_kept = matches!(self.pidfd.get(), Some(Ok((_, true))));
        self.fd_by_kept_pidfd.set(false);
        match getfd(pidfd) {
            Err(libc::ESRCH) if by_kept => {
                // The kept pidfd named an earlier process with this pid: open the caller's own.
                self.pidfds.forget(self.pid);
                let fresh = Target::new(self.listener, self.pidfds, self.pid, self.id);
                getfd(fresh.pidfd()?)
            }
            Ok(copy) => {
                self.fd_by_kept_pidfd.set(by_kept);
                Ok(copy)
            }
            copy => copy,
        }
    }

    /// `len` bytes of the caller's memory at `addr`.
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let local = libc::iovec {
                iov_base: buf[done..].as_mut_ptr().cast(),
                iov_len: len - done,
            };
            let remote = libc::iovec {
                iov_base: (addr as usize + done) as *mut libc::c_void,
                iov_len: len - done,
            };
            // SAFETY: reads into our buffer's remaining part.
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            if n <= 0 {
                return Err(libc::EFAULT);
            }
            done += n as usize;
        }
        Ok(buf)
    }

    /// A NUL-terminated string of the caller (at most `max` bytes with the NUL), without the NUL;
    /// `too_long` is the errno when there is no NUL within `max`.
    pub(super) fn string(&self, addr: u64, max: usize, too_long: i32) -> Result<Vec<u8>, i32> {
        /// Reads stop at page boundaries: a string may end just before an unmapped page.
        const PAGE: usize = 4096;
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        let mut out = Vec::new();
        while out.len() < max {
            let at = addr as usize + out.len();
            let chunk = (PAGE - at % PAGE).min(max - out.len());
            let bytes = self.read(at as u64, chunk)?;
            if let Some(end) = bytes.iter().position(|&b| b == 0) {
                out.extend_from_slice(&bytes[..end]);
                return Ok(out);
            }
            out.extend_from_slice(&bytes);
        }
        Err(too_long)
    }

    /// A path of the caller (at most `PATH_MAX` bytes with the NUL), read into `out` (kept from
    /// call to call): its length without the NUL. One read when the path ends within the page it
    /// starts in (the common case).
    fn string_into(&self, addr: u64, out: &mut Vec<u8>) -> Result<usize, i32> {
        /// Reads stop at page boundaries: a string may end just before an unmapped page.
        const PAGE: usize = 4096;
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        if out.len() < PATH_MAX {
            out.resize(PATH_MAX, 0);
        }
        let mut done = 0;
        while done < PATH_MAX {
            let at = addr as usize + done;
            let chunk = (PAGE - at % PAGE).min(PATH_MAX - done);
            let local = libc::iovec {
                iov_base: out[done..].as_mut_ptr().cast(),
                iov_len: chunk,
            };
            let remote = libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: chunk,
            };
            // SAFETY: reads at most `chunk` bytes into our buffer, which has that many from `done`.
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            if n <= 0 {
                return Err(libc::EFAULT);
            }
            let n = n as usize;
            if let Some(end) = out[done..done + n].iter().position(|&b| b == 0) {
                return Ok(done + end);
            }
            done += n;
        }
        Err(libc::ENAMETOOLONG)
    }

    /// Appends the caller's cwd (`/proc/<pid>/cwd`) to `out`: read through the last caller's kept
    /// `/proc/<pid>` directory, opened anew for another caller or when the kept one names a
    /// process that has gone. What it read is the caller's only once `valid` (or `cwd_proven`)
    /// says so.
    fn cwd_into(&self, out: &mut Vec<u8>) -> Option<()> {
        self.through_proc_dir(|dir| {
            let start = out.len();
            out.resize(start + PATH_MAX + 1, 0);
            // SAFETY: readlinkat into our buffer's tail of the length given.
            let n = unsafe {
                libc::readlinkat(
                    dir.as_raw_fd(),
                    c"cwd".as_ptr(),
                    out[start..].as_mut_ptr().cast(),
                    PATH_MAX + 1,
                )
            };
            if n <= 0 || n as usize > PATH_MAX {
                out.truncate(start);
                return Err(if n < 0 {
                    errno_now()
                } else {
                    libc::ENAMETOOLONG
                });
            }
            out.truncate(start + n as usize);
            Ok(())
        })
        .ok()
    }

    /// The caller's `/proc/<pid>/<name>` (`cwd`, `root`: the magic link followed), opened `O_PATH`
    /// through the kept `/proc/<pid>` directory as `cwd_into` reads. What it opened is the caller's
    /// only once `valid` (or `cwd_proven`) says so.
    pub(super) fn proc_open(&self, name: &std::ffi::CStr) -> Result<OwnedFd, i32> {
        self.through_proc_dir(|dir| {
            // SAFETY: openat on our descriptor with a NUL-terminated name.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_PATH | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(errno_now());
            }
            // SAFETY: just opened, ours.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        })
    }

    /// `read` on the last caller's kept `/proc/<pid>` directory, opened anew (and kept) for
    /// another caller or when the kept one names a process that has gone.
    fn through_proc_dir<T>(
        &self,
        mut read: impl FnMut(BorrowedFd<'_>) -> Result<T, i32>,
    ) -> Result<T, i32> {
        self.cwd_by_kept_dir.set(false);
        let mut kept = self.pidfds.proc_dir.borrow_mut();
        if let Some((pid, dir)) = &*kept {
            if *pid == self.pid {
                match read(dir.as_fd()) {
                    Ok(value) => {
                        self.cwd_by_kept_dir.set(true);
                        return Ok(value);
                    }
                    // The kept directory's process has gone: this caller only shares its pid.
                    Err(libc::ENOENT | libc::ESRCH) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        *kept = None;
        let path = format!("/proc/{}\0", self.pid);
        // SAFETY: open of a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(libc::ESRCH);
        }
        // SAFETY: just opened, ours.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        let value = read(dir.as_fd())?;
        *kept = Some((self.pid, dir));
        Ok(value)
    }

    /// The object a path-based call names, opened `O_PATH` (`O_NOFOLLOW` unless it follows).
    fn resolve(&self, object: Object) -> Result<OwnedFd, i32> {
        let (dirfd, ptr, follow, empty) = match object {
            Object::Fd(fd) => return self.fd(fd),
            Object::Path {
                dirfd,
                path,
                follow,
                empty,
            } => (dirfd, path, follow, empty),
        };
        let path = if ptr == 0 && empty {
            Vec::new()
        } else {
            self.string(ptr, PATH_MAX, libc::ENAMETOOLONG)?
        };
        if path.is_empty() && !empty {
            return Err(libc::ENOENT);
        }
        // Only the caller's own `/proc/self` (and its cwd) is followed through a magic link;
        // another process's `/proc/<pid>/fd/N` or `cwd` never is (`RESOLVE_NO_MAGICLINKS`).
        if path.first() == Some(&b'/') {
            return match callers_proc(&path, self.pid) {
                // glibc's `/proc/self/fd/N`: one of the caller's own descriptors.
                std::borrow::Cow::Owned(own) if own_fd_link(&own) => open_path(None, &own, follow),
                path => open_no_magic(None, &path, follow),
            };
        }
        let base = if dirfd == libc::AT_FDCWD {
            self.proc_open(c"cwd")?
        } else {
            self.fd(dirfd)?
        };
        if path.is_empty() {
            return Ok(base);
        }
        open_no_magic(Some(base.as_fd()), &path, follow)
    }
}

/// `path` with a leading `/proc/self/` or `/proc/thread-self/` naming the caller `pid` instead of
/// the handler (glibc's `fchmodat(…, AT_SYMLINK_NOFOLLOW)` without `fchmodat2` changes the mode of
/// `/proc/self/fd/N`, its own `O_PATH` descriptor). Anything else is left as given: what it reaches
/// is checked against the writable areas all the same.
fn callers_proc(path: &[u8], pid: libc::pid_t) -> std::borrow::Cow<'_, [u8]> {
    for (prefix, with) in [
        (&b"/proc/self/"[..], format!("/proc/{pid}/")),
        (
            &b"/proc/thread-self/"[..],
            format!("/proc/{pid}/task/{pid}/"),
        ),
    ] {
        if let Some(rest) = path.strip_prefix(prefix) {
            return std::borrow::Cow::Owned([with.as_bytes(), rest].concat());
        }
    }
    std::borrow::Cow::Borrowed(path)
}

/// Whether `path` is `/proc/<pid>/fd/<N>` or `/proc/<pid>/task/<tid>/fd/<N>` and nothing more.
fn own_fd_link(path: &[u8]) -> bool {
    let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    let number = |p: &[u8]| !p.is_empty() && p.iter().all(u8::is_ascii_digit);
    match parts.as_slice() {
        [b"", b"proc", pid, b"fd", n] => number(pid) && number(n),
        [b"", b"proc", pid, b"task", tid, b"fd", n] => number(pid) && number(tid) && number(n),
        _ => false,
    }
}

/// The thread group (process) of thread `tid`, from `/proc/<tid>/status`.
fn thread_group(tid: libc::pid_t) -> Option<libc::pid_t> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|value| value.trim().parse().ok())
}

pub(super) fn errno_now() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
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
        return Err(errno_now());
    }
    // SAFETY: just opened, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open_path`, crossing no `/proc` magic link (`RESOLVE_NO_MAGICLINKS`): what the caller names
/// is followed only through plain symlinks.
fn open_no_magic(dir: Option<BorrowedFd<'_>>, path: &[u8], follow: bool) -> Result<OwnedFd, i32> {
    let mut c = path.to_vec();
    c.push(0);
    if path.contains(&0) {
        return Err(libc::EINVAL);
    }
    let dir = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    openat2_path(dir, &c, follow, RESOLVE_NO_MAGICLINKS)
}

/// The status flags of `fd` (`F_GETFL`), `None` when unknown.
fn status_flags(fd: BorrowedFd<'_>) -> Option<i32> {
    // SAFETY: F_GETFL on our descriptor.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    (flags >= 0).then_some(flags)
}

/// Whether status `flags` are those of a file opened for writing: setting its times to now (what
/// every write does) needs no check then, since Landlock let the caller open it for writing
/// (`touch` does exactly this on each file). `O_PATH` descriptors are not.
fn for_writing(flags: i32) -> bool {
    flags & libc::O_PATH == 0 && matches!(flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
}

fn is_symlink(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into our buffer.
    let known = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0;
    known && st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

/// `/proc/self/fd/N` of our descriptor, NUL-terminated: a path that reaches the very object.
pub(super) fn proc_fd(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}\0", fd.as_raw_fd())
}

fn result(r: libc::c_long) -> Reply {
    if r < 0 {
        Reply::Errno(errno_now())
    } else {
        Reply::Value(r)
    }
}

fn handle(
    policy: &Policy,
    target: &Target<'_>,
    call: Call,
    watcher: &mut Option<Watcher>,
) -> Reply {
    if let Op::Watch { inotify, mask } = call.op {
        return watch(policy, target, call.object, inotify, mask, watcher)
            .map_or_else(Reply::Errno, Reply::Value);
    }
    match perform(policy, target, call) {
        Ok(reply) => reply,
        Err(code) => Reply::Errno(code),
    }
}

/// Refused metadata changes outside the writable areas: "operation not permitted", what the
/// kernel answers a caller that may not change a file's attributes.
const REFUSED_METADATA: i32 = libc::EPERM;
/// Refused locks outside the writable areas: "no locks available".
const REFUSED_LOCK: i32 = libc::ENOLCK;

fn perform(policy: &Policy, target: &Target<'_>, call: Call) -> Result<Reply, i32> {
    if let Op::Flock(_) | Op::Lock(..) = call.op {
        return lock(policy, target, call);
    }
    // `opened`: the descriptor is an open file (not `O_PATH`), so the descriptor calls take it.
    // `fast`: opened beneath an area (`open_beneath`), where the path and the cwd were all that
    // was read by pid.
    let (object, allowed, opened, fast) = match policy.open_beneath(target, call.object) {
        Some(object) => (object, true, false, true),
        None => {
            let object = target.resolve(call.object)?;
            let flags = match (call.object, call.op) {
                (Object::Fd(_), Op::Utimes(..)) => status_flags(object.as_fd()),
                // Not asked (nothing below needs it): taken as O_PATH, so the calls below go
                // through `fd, ""` with AT_EMPTY_PATH, which takes any descriptor.
                _ => Some(libc::O_PATH),
            };
            let writer = matches!(call.op, Op::Utimes(_, 0)) && flags.is_some_and(for_writing);
            let opened = flags.is_some_and(|f| f & libc::O_PATH == 0);
            (object, writer, opened, false)
        }
    };
    let fd = object.as_fd();
    // Everything read from the caller (by pid) is read: it must still be the caller, unless a
    // handle kept from an earlier call proved it (`fd_proven`, `cwd_proven`) after the last read
    // by pid: these calls read no arguments from its memory.
    let arguments = read_arguments(target, call.op)?;
    let no_arguments = matches!(call.op, Op::Chmod(_) | Op::Chown(..) | Op::Utimes(_, 0));
    let proven = no_arguments
        && match call.object {
            Object::Fd(_) => target.fd_proven(),
            Object::Path { .. } => fast && target.cwd_proven(),
        };
    if !(proven || target.valid()) {
        return Err(libc::ENOENT);
    }
    if !allowed && !policy.inside(fd) {
        return Err(REFUSED_METADATA);
    }

    let path = || proc_fd(fd);
    // A path opened following its last component is no symlink; anything else may be.
    let symlink = || {
        !matches!(
            call.object,
            Object::Path {
                follow: true,
                empty: false,
                ..
            }
        ) && is_symlink(fd)
    };
    // SAFETY: each call below is a system call on our descriptor, our NUL-terminated strings and
    // buffers read above.
    let r = unsafe {
        match (call.op, arguments) {
            (Op::Chmod(_), _) if symlink() => return Err(libc::EOPNOTSUPP),
            (Op::Chmod(mode), _) => {
                let r = libc::syscall(
                    SYS_FCHMODAT2,
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    mode,
                    libc::AT_EMPTY_PATH,
                );
                if r < 0 && errno_now() == libc::ENOSYS {
                    libc::chmod(path().as_ptr().cast(), mode) as libc::c_long
                } else {
                    r
                }
            }
            (Op::Chown(uid, gid), _) => {
                libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH)
                    as libc::c_long
            }
            (Op::Utimes(..), Arguments::Times(times)) => {
                let times_ptr = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
                if opened {
                    // `futimens`: no path lookup at all, where the descriptor allows it.
                    libc::futimens(fd.as_raw_fd(), times_ptr) as libc::c_long
                } else {
                    libc::utimensat(fd.as_raw_fd(), c"".as_ptr(), times_ptr, libc::AT_EMPTY_PATH)
                        as libc::c_long
                }
            }
            (
                Op::SetXattr { .. } | Op::SetXattrArgs { .. },
                Arguments::Xattr(name, value, flags),
            ) => {
                if symlink() {
                    return Err(libc::EPERM);
                }
                let (ptr, len) = (value.as_ptr(), value.len());
                match call.object {
                    Object::Fd(_) => libc::fsetxattr(
                        fd.as_raw_fd(),
                        name.as_ptr().cast(),
                        ptr.cast(),
                        len,
                        flags,
                    ) as libc::c_long,
                    _ => libc::setxattr(
                        path().as_ptr().cast(),
                        name.as_ptr().cast(),
                        ptr.cast(),
                        len,
                        flags,
                    ) as libc::c_long,
                }
            }
            (Op::RemoveXattr(_), Arguments::Name(name)) => {
                if symlink() {
                    return Err(libc::EPERM);
                }
                match call.object {
                    Object::Fd(_) => {
                        libc::fremovexattr(fd.as_raw_fd(), name.as_ptr().cast()) as libc::c_long
                    }
                    _ => libc::removexattr(path().as_ptr().cast(), name.as_ptr().cast())
                        as libc::c_long,
                }
            }
            _ => return Err(libc::EINVAL),
        }
    };
    Ok(result(r))
}

/// What a call needs from the caller's memory besides the path.
enum Arguments {
    None,
    /// `utimensat`'s times (`None`: now).
    Times(Option<[libc::timespec; 2]>),
    /// A name, NUL-terminated, a value, and the flags.
    Xattr(Vec<u8>, Vec<u8>, i32),
    Name(Vec<u8>),
}

fn xattr_name(target: &Target<'_>, ptr: u64) -> Result<Vec<u8>, i32> {
    let mut name = target.string(ptr, XATTR_NAME_BYTES, libc::ERANGE)?;
    if name.is_empty() {
        return Err(libc::ERANGE);
    }
    name.push(0);
    Ok(name)
}

fn read_arguments(target: &Target<'_>, op: Op) -> Result<Arguments, i32> {
    Ok(match op {
        Op::Utimes(kind, 0) => {
            let _ = kind;
            Arguments::Times(None)
        }
        Op::Utimes(kind, ptr) => Arguments::Times(Some(decode_times(
            kind,
            &target.read(ptr, times_bytes(kind))?,
        )?)),
        Op::SetXattr {
            name,
            value,
            size,
            flags,
        } => {
            let name = xattr_name(target, name)?;
            let value = xattr_value(target, value, size)?;
            Arguments::Xattr(name, value, flags)
        }
        Op::SetXattrArgs { name, args, size } => {
            if (size as usize) < XATTR_ARGS_BYTES {
                return Err(libc::EINVAL);
            }
            let name = xattr_name(target, name)?;
            let raw = target.read(args, XATTR_ARGS_BYTES)?;
            let value_ptr = u64::from_ne_bytes(raw[0..8].try_into().expect("8 bytes"));
            let value_size = u32::from_ne_bytes(raw[8..12].try_into().expect("4 bytes"));
            let flags = u32::from_ne_bytes(raw[12..16].try_into().expect("4 bytes"));
            let value = xattr_value(target, value_ptr, value_size as u64)?;
            Arguments::Xattr(name, value, flags as i32)
        }
        Op::RemoveXattr(name) => Arguments::Name(xattr_name(target, name)?),
        _ => Arguments::None,
    })
}

fn xattr_value(target: &Target<'_>, ptr: u64, size: u64) -> Result<Vec<u8>, i32> {
    if size as usize > XATTR_SIZE_MAX || size > usize::MAX as u64 {
        return Err(libc::E2BIG);
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    target.read(ptr, size as usize)
}

fn times_bytes(kind: Times) -> usize {
    match kind {
        Times::Utimbuf => 2 * size_of::<libc::time_t>(),
        Times::Timeval => 2 * size_of::<libc::timeval>(),
        Times::Timespec => 2 * size_of::<libc::timespec>(),
    }
}

/// Two timestamps as `utimensat` takes them, from the caller's bytes of `kind`.
fn decode_times(kind: Times, raw: &[u8]) -> Result<[libc::timespec; 2], i32> {
    let word = |i: usize| i64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    /// Microseconds and nanoseconds per second.
    const MICROS: i64 = 1_000_000;
    const NANOS_PER_MICRO: i64 = 1_000;
    let ts = |sec: i64, nsec: i64| libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    };
    Ok(match kind {
        Times::Utimbuf => [ts(word(0), 0), ts(word(1), 0)],
        Times::Timeval => {
            let (s0, u0, s1, u1) = (word(0), word(1), word(2), word(3));
            if !(0..MICROS).contains(&u0) || !(0..MICROS).contains(&u1) {
                return Err(libc::EINVAL);
            }
            [ts(s0, u0 * NANOS_PER_MICRO), ts(s1, u1 * NANOS_PER_MICRO)]
        }
        // Passed on as they are: the kernel checks them (UTIME_NOW, UTIME_OMIT, the range).
        Times::Timespec => [ts(word(0), word(1)), ts(word(2), word(3))],
    })
}

/// `flock` and `fcntl` locks: refused outside the writable areas; `flock` and OFD locks are
/// taken on our copy of the open file (the same lock), classic POSIX locks are left to the kernel.
fn lock(policy: &Policy, target: &Target<'_>, call: Call) -> Result<Reply, i32> {
    let Object::Fd(fd) = call.object else {
        return Err(libc::EINVAL);
    };
    let copy = target.fd(fd)?;
    let request = match call.op {
        Op::Lock(_, ptr) => {
            let raw = target.read(ptr, size_of::<libc::flock>())?;
            // SAFETY: `raw` holds exactly one `struct flock` (plain integers).
            Some(unsafe { std::ptr::read_unaligned(raw.as_ptr().cast::<libc::flock>()) })
        }
        _ => None,
    };
    if !target.valid() {
        return Err(libc::ENOENT);
    }
    if !policy.inside(copy.as_fd()) {
        return Err(REFUSED_LOCK);
    }
    match (call.op, request) {
        (Op::Lock(libc::F_SETLK | libc::F_SETLKW, _), _) => Ok(Reply::Continue),
        (Op::Lock(cmd, _), Some(mut fl)) => {
            let blocking = cmd == libc::F_OFD_SETLKW;
            let raw = copy.as_raw_fd();
            let first = {
                // SAFETY: fcntl on our copy with our flock.
                unsafe { libc::fcntl(raw, libc::F_OFD_SETLK, &mut fl) as libc::c_long }
            };
            if !blocking || first >= 0 || !would_block(errno_now()) {
                return Ok(result(first));
            }
            let undo = fl;
            let listener = Arc::clone(target.listener);
            let id = target.id;
            wait_for_lock(
                listener,
                id,
                copy,
                move |fd| {
                    let mut fl = fl;
                    // SAFETY: fcntl on our copy with our flock.
                    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) as libc::c_long }
                },
                move |fd| {
                    let mut fl = undo;
                    fl.l_type = libc::F_UNLCK as _;
                    // SAFETY: fcntl on our copy with our flock.
                    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) };
                },
            )
        }
        (Op::Flock(operation), _) => {
            let raw = copy.as_raw_fd();
            // SAFETY: flock on our copy.
            let first = unsafe { libc::flock(raw, operation | libc::LOCK_NB) } as libc::c_long;
            let blocking = operation & (libc::LOCK_NB | libc::LOCK_UN) == 0;
            if !blocking || first >= 0 || !would_block(errno_now()) {
                return Ok(result(first));
            }
            let listener = Arc::clone(target.listener);
            let id = target.id;
            wait_for_lock(
                listener,
                id,
                copy,
                // SAFETY: flock on our copy.
                move |fd| unsafe { libc::flock(fd, operation | libc::LOCK_NB) } as libc::c_long,
                // SAFETY: flock on our copy.
                move |fd| unsafe {
                    libc::flock(fd, libc::LOCK_UN);
                },
            )
        }
        _ => Err(libc::EINVAL),
    }
}

fn would_block(code: i32) -> bool {
    code == libc::EAGAIN || code == libc::EWOULDBLOCK || code == libc::EACCES
}

/// A blocking lock the handler must not wait for: a waiter thread retries it (without blocking)
/// while the caller still waits, answers when it is taken, and gives it back if the caller is
/// gone by then.
fn wait_for_lock(
    listener: Arc<OwnedFd>,
    id: u64,
    copy: OwnedFd,
    attempt: impl Fn(RawFd) -> libc::c_long + Send + 'static,
    undo: impl Fn(RawFd) + Send + 'static,
) -> Result<Reply, i32> {
    std::thread::Builder::new()
        .name("pi-sandbox-lock".into())
        .stack_size(HANDLER_STACK_BYTES)
        .spawn(move || {
            drop_own_capabilities();
            let mut delay = LOCK_RETRY_FIRST;
            loop {
                std::thread::sleep(delay);
                delay = (delay * 2).min(LOCK_RETRY_MAX);
                if !id_valid(listener.as_fd(), id) {
                    return;
                }
                let r = attempt(copy.as_raw_fd());
                if r < 0 && would_block(errno_now()) {
                    continue;
                }
                let reply = result(r);
                if !respond(listener.as_fd(), id, reply) && r >= 0 {
                    undo(copy.as_raw_fd());
                }
                return;
            }
        })
        .map(|_| Reply::Later)
        .map_err(|_| libc::ENOLCK)
}

/// Refused watches: "permission denied", what the kernel answers a caller that may not read
/// what it would watch.
const REFUSED_WATCH: i32 = libc::EACCES;

/// A thread confined by the shell's own Landlock ruleset (`landlock_restrict_self` is
/// per-thread), which opens what a watch names as the shell would: a watch is added only on what
/// the shell could read. The handler itself stays unconfined: Landlock would keep a confined
/// thread from reading the shell's memory and descriptors (a sibling domain).
struct Watcher {
    jobs: std::sync::mpsc::Sender<(OwnedFd, OwnedFd, u32)>,
    answers: std::sync::mpsc::Receiver<Result<i64, i32>>,
}

impl Watcher {
    fn start(ruleset: BorrowedFd<'_>) -> Result<Watcher, i32> {
        let ruleset = ruleset.try_clone_to_owned().map_err(|_| REFUSED_WATCH)?;
        let (jobs, job_rx) = std::sync::mpsc::channel::<(OwnedFd, OwnedFd, u32)>();
        let (answer_tx, answers) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("pi-sandbox-watch".into())
            .stack_size(HANDLER_STACK_BYTES)
            .spawn(move || {
                drop_own_capabilities();
                // SAFETY: per-thread no_new_privs (what landlock_restrict_self requires without
                // CAP_SYS_ADMIN), then the ruleset on this thread only.
                let confined = unsafe {
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                        && libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0)
                            == 0
                };
                drop(ruleset);
                for (object, inotify, mask) in job_rx {
                    let answer = if confined {
                        watch_as_shell(object.as_fd(), inotify.as_fd(), mask)
                    } else {
                        Err(REFUSED_WATCH) // fail closed
                    };
                    if answer_tx.send(answer).is_err() {
                        return;
                    }
                }
            })
            .map_err(|_| REFUSED_WATCH)?;
        Ok(Watcher { jobs, answers })
    }
}

/// Opens `object` for reading as the confined thread may (Landlock decides), and watches what it
/// opened on the caller's inotify instance. Directories and regular files only: opening anything
/// else can have effects (a FIFO, a device).
fn watch_as_shell(object: BorrowedFd<'_>, inotify: BorrowedFd<'_>, mask: u32) -> Result<i64, i32> {
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into our buffer.
    if unsafe { libc::fstat(object.as_raw_fd(), &mut st) } != 0 {
        return Err(errno_now());
    }
    let flags = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => libc::O_RDONLY | libc::O_DIRECTORY,
        libc::S_IFREG => libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        _ => return Err(REFUSED_WATCH),
    };
    let path = proc_fd(object);
    // SAFETY: open of a NUL-terminated path.
    let readable = unsafe { libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC) };
    if readable < 0 {
        return Err(errno_now());
    }
    // SAFETY: just opened, ours.
    let readable = unsafe { OwnedFd::from_raw_fd(readable) };
    let path = proc_fd(readable.as_fd());
    // SAFETY: inotify_add_watch on our copy of the caller's instance, through our descriptor.
    let wd = unsafe {
        libc::inotify_add_watch(
            inotify.as_raw_fd(),
            path.as_ptr().cast(),
            mask & !libc::IN_DONT_FOLLOW,
        )
    };
    if wd < 0 {
        return Err(errno_now());
    }
    Ok(i64::from(wd))
}

/// `inotify_add_watch`: added only on what the shell could read (Landlock mode), or on a special
/// file or a symlink itself inside the writable areas.
fn watch(
    policy: &Policy,
    target: &Target<'_>,
    object: Object,
    inotify: i32,
    mask: u32,
    watcher: &mut Option<Watcher>,
) -> Result<i64, i32> {
    let object = target.resolve(object)?;
    let instance = target.fd(inotify)?;
    if !target.valid() {
        return Err(libc::ENOENT);
    }
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into our buffer.
    if unsafe { libc::fstat(object.as_raw_fd(), &mut st) } != 0 {
        return Err(errno_now());
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFDIR && kind != libc::S_IFREG {
        if !policy.inside(object.as_fd()) {
            return Err(REFUSED_WATCH);
        }
        let path = proc_fd(object.as_fd());
        // SAFETY: inotify_add_watch on our copy of the caller's instance, through our descriptor.
        let wd = unsafe {
            libc::inotify_add_watch(
                instance.as_raw_fd(),
                path.as_ptr().cast(),
                mask & !libc::IN_DONT_FOLLOW,
            )
        };
        return if wd < 0 {
            Err(errno_now())
        } else {
            Ok(i64::from(wd))
        };
    }
    let Some(ruleset) = policy.ruleset.as_ref() else {
        return Err(REFUSED_WATCH);
    };
    if watcher.is_none() {
        *watcher = Some(Watcher::start(ruleset.as_fd())?);
    }
    let helper = watcher.as_ref().expect("started above");
    if helper.jobs.send((object, instance, mask)).is_err() {
        *watcher = None;
        return Err(REFUSED_WATCH);
    }
    helper.answers.recv().unwrap_or(Err(REFUSED_WATCH))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn proc_self_names_the_caller() {
        assert_eq!(&*callers_proc(b"/proc/self/fd/3", 42), b"/proc/42/fd/3");
        assert_eq!(
            &*callers_proc(b"/proc/thread-self/fd/3", 42),
            b"/proc/42/task/42/fd/3"
        );
        assert_eq!(&*callers_proc(b"/proc/selfish/x", 42), b"/proc/selfish/x");
        assert_eq!(&*callers_proc(b"/w/proc/self/x", 42), b"/w/proc/self/x");
    }

    #[test]
    fn beneath_matches_whole_components() {
        assert_eq!(beneath(b"/ws/a/b", b"/ws"), Some(&b"a/b"[..]));
        assert_eq!(beneath(b"/ws", b"/ws"), Some(&b""[..]));
        assert_eq!(beneath(b"/wsx/a", b"/ws"), None);
        assert_eq!(beneath(b"/etc/passwd", b"/ws"), None);
        assert_eq!(beneath(b"/etc/passwd", b"/"), Some(&b"etc/passwd"[..]));
    }

    #[test]
    fn a_kept_pidfd_of_a_process_gone_is_replaced() {
        // A pidfd kept under our pid that names a process which has exited and been reaped: what
        // the cache holds when a pid is reused. The copy must come from the caller (us) anyway.
        // SAFETY: the child only calls _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: async-signal-safe exit in the forked child.
            unsafe { libc::_exit(0) };
        }
        // SAFETY: pidfd_open of our child before it is reaped.
        let gone = unsafe { libc::syscall(libc::SYS_pidfd_open, child, 0) };
        assert!(gone >= 0, "pidfd_open: {}", io::Error::last_os_error());
        // SAFETY: reaping our own child; a null status pointer is allowed.
        let reaped = unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        assert_eq!(reaped, child);
        // SAFETY: a descriptor we just got.
        let gone = Rc::new(unsafe { OwnedFd::from_raw_fd(gone as RawFd) });

        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let pidfds = Pidfds::default();
        pidfds.keep(me, &gone);
        let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let target = Target::new(&listener, &pidfds, me, 0);
        let copy = target
            .fd(file.as_raw_fd())
            .expect("a copy of our own descriptor");
        assert_eq!(identity(copy.as_fd()), identity(file.as_fd()));
        // The fresh pidfd is kept for the next call of this caller.
        assert!(!Rc::ptr_eq(&pidfds.get(me).unwrap(), &gone));
        // A copy through a pidfd opened for this call does not prove the caller by itself.
        assert!(!target.fd_proven());
        // The next call's copy goes through the kept pidfd, which does.
        let next = Target::new(&listener, &pidfds, me, 0);
        next.fd(file.as_raw_fd())
            .expect("a copy through the kept pidfd");
        assert!(next.fd_proven());
        // A first call (nothing kept) proves nothing either.
        let fresh = Pidfds::default();
        let first = Target::new(&listener, &fresh, me, 0);
        first
            .fd(file.as_raw_fd())
            .expect("a copy through a new pidfd");
        assert!(!first.fd_proven());
        // A failed copy proves nothing.
        assert_eq!(next.fd(-5).map(drop), Err(libc::EBADF));
        let closed = Target::new(&listener, &pidfds, me, 0);
        assert!(closed.fd(1 << 20).is_err());
        assert!(!closed.fd_proven());
    }

    /// Waits (a bounded number of times, never on the clock alone) until `ready` holds.
    fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
        for _ in 0..2_000 {
            if ready() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("never: {what}");
    }

    #[test]
    fn the_cwd_is_read_anew_through_the_kept_proc_dir() {
        let base = Dir::new("cwd");
        let (a, b, c) = (base.0.join("a"), base.0.join("b"), base.0.join("c"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        // A shell that changes its cwd when told (one line on stdin each time).
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "cd \"$1\" && read x && cd \"$2\" && read y", "sh"])
            .arg(&a)
            .arg(&b)
            .current_dir(&base.0)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = shell.id() as libc::pid_t;
        let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let pidfds = Pidfds::default();
        let proven = std::cell::Cell::new(false);
        let cwd = || {
            let target = Target::new(&listener, &pidfds, pid, 0);
            let mut out = b"prefix:".to_vec();
            let read = target.cwd_into(&mut out).map(|()| out[7..].to_vec());
            proven.set(target.cwd_proven());
            read
        };
        let path = |p: &Path| Some(p.as_os_str().as_bytes().to_vec());
        assert!(cwd().is_some());
        assert!(
            !proven.get(),
            "read through a directory opened for this call"
        );
        wait_until("the shell is in a", || cwd() == path(&a));
        assert!(proven.get(), "read through the kept directory");
        let kept = pidfds
            .proc_dir
            .borrow()
            .as_ref()
            .map(|(p, fd)| (*p, fd.as_raw_fd()));
        assert_eq!(kept.map(|(p, _)| p), Some(pid));
        // chdir: seen on the next call through the same kept directory.
        use std::io::Write;
        shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        wait_until("the shell is in b", || cwd() == path(&b));
        // Its cwd renamed under it: the new name.
        std::fs::rename(&b, &c).unwrap();
        assert_eq!(cwd(), path(&c));
        let still = pidfds
            .proc_dir
            .borrow()
            .as_ref()
            .map(|(p, fd)| (*p, fd.as_raw_fd()));
        assert_eq!(still, kept, "the kept directory served every call");
        // Another caller (we, while the shell lives) does not get the kept directory's answer.
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let ours = std::fs::canonicalize(std::env::current_dir().unwrap()).unwrap();
        let mut out = Vec::new();
        Target::new(&listener, &pidfds, me, 0)
            .cwd_into(&mut out)
            .unwrap();
        assert_eq!(Some(out), path(&ours));
        assert_eq!(cwd(), path(&c), "and the shell's is read anew");
        assert!(!proven.get(), "through a directory opened anew");
        // Gone: a kept directory answers nothing (no other process has its pid yet).
        shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        shell.wait().unwrap();
        assert_eq!(cwd(), None);
        assert!(!proven.get());
    }

    #[test]
    fn the_root_and_cwd_open_through_the_kept_proc_dir() {
        let base = Dir::new("proc-open");
        let (a, b) = (base.0.join("a"), base.0.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "cd \"$1\" && read x && cd \"$2\" && read y", "sh"])
            .arg(&a)
            .arg(&b)
            .current_dir(&base.0)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = shell.id() as libc::pid_t;
        let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let pidfds = Pidfds::default();
        let open = |name: &std::ffi::CStr| {
            Target::new(&listener, &pidfds, pid, 0)
                .proc_open(name)
                .map(|fd| identity(fd.as_fd()))
        };
        let id = |p: &Path| Ok(identity(o_path(p, true).as_fd()));
        wait_until("the shell is in a", || open(c"cwd") == id(&a));
        let kept = pidfds
            .proc_dir
            .borrow()
            .as_ref()
            .map(|(p, fd)| (*p, fd.as_raw_fd()));
        assert_eq!(kept.map(|(p, _)| p), Some(pid));
        let target = Target::new(&listener, &pidfds, pid, 0);
        assert_eq!(
            target.proc_open(c"root").map(|fd| identity(fd.as_fd())),
            id(Path::new("/"))
        );
        assert!(target.cwd_proven(), "opened through the kept directory");
        use std::io::Write;
        shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        wait_until("the shell is in b", || open(c"cwd") == id(&b));
        let still = pidfds
            .proc_dir
            .borrow()
            .as_ref()
            .map(|(p, fd)| (*p, fd.as_raw_fd()));
        assert_eq!(still, kept, "the kept directory served every call");
        // Another caller gets its own, and the kept one is replaced by its.
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let ours = Target::new(&listener, &pidfds, me, 0)
            .proc_open(c"cwd")
            .map(|fd| identity(fd.as_fd()));
        assert_eq!(ours, id(&std::env::current_dir().unwrap()));
        assert_eq!(pidfds.proc_dir.borrow().as_ref().map(|(p, _)| *p), Some(me));
        // Gone: nothing opens (no other process has its pid yet).
        shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        shell.wait().unwrap();
        assert!(open(c"cwd").is_err());
        // A kept directory of a process gone, under our pid: ours is opened anew.
        let child = std::process::Command::new("true").spawn().unwrap();
        let gone = o_path(Path::new(&format!("/proc/{}", child.id())), true);
        let mut child = child;
        child.wait().unwrap();
        *pidfds.proc_dir.borrow_mut() = Some((me, gone));
        let target = Target::new(&listener, &pidfds, me, 0);
        let again = target.proc_open(c"cwd").map(|fd| identity(fd.as_fd()));
        assert_eq!(again, id(&std::env::current_dir().unwrap()));
        assert!(!target.cwd_proven(), "the kept directory did not answer");
    }

    #[test]
    fn a_kept_proc_dir_of_a_process_gone_is_replaced() {
        // What the cache holds when a pid is reused: a /proc directory of an exited process
        // kept under our pid. The cwd read must be ours anyway.
        let child = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = child.id();
        let gone = o_path(Path::new(&format!("/proc/{gone_pid}")), true);
        let mut child = child;
        child.wait().unwrap();
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let pidfds = Pidfds::default();
        *pidfds.proc_dir.borrow_mut() = Some((me, gone));
        let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let target = Target::new(&listener, &pidfds, me, 0);
        let mut out = Vec::new();
        target.cwd_into(&mut out).expect("our own cwd");
        assert!(!target.cwd_proven(), "the kept directory did not answer");
        let ours = std::fs::canonicalize(std::env::current_dir().unwrap()).unwrap();
        assert_eq!(out, ours.as_os_str().as_bytes());
        let kept = pidfds.proc_dir.borrow();
        let (pid, dir) = kept.as_ref().unwrap();
        assert_eq!(*pid, me);
        assert_eq!(
            identity(dir.as_fd()),
            identity(o_path(Path::new("/proc/self"), true).as_fd())
        );
    }

    #[test]
    fn the_fast_path_opens_only_beneath_an_area() {
        // The caller is this process: its cwd is the area (the crate's directory), its paths are
        // C strings in our memory.
        let cwd = std::fs::canonicalize(std::env::current_dir().unwrap()).unwrap();
        let outside = Dir::new("fast-outside");
        std::fs::write(outside.0.join("out"), "").unwrap();
        let policy = Policy::landlock(
            vec![super::area(&cwd).unwrap()],
            area_fd(&cwd).as_fd(),
            None,
        )
        .unwrap();
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let pidfds = Pidfds::default();
        let target = Target::new(&listener, &pidfds, me, 0);
        let open = |path: &[u8], follow: bool| {
            let c = std::ffi::CString::new(path).unwrap();
            let object = Object::Path {
                dirfd: libc::AT_FDCWD,
                path: c.as_ptr() as u64,
                follow,
                empty: false,
            };
            policy
                .open_beneath(&target, object)
                .and_then(|fd| identity(fd.as_fd()))
        };
        let id = |p: &Path| identity(o_path(p, true).as_fd());
        assert_eq!(open(b"Cargo.toml", true), id(&cwd.join("Cargo.toml")));
        assert_eq!(
            open(b"src/../Cargo.toml", true),
            id(&cwd.join("Cargo.toml"))
        );
        assert_eq!(open(b"src/", true), id(&cwd.join("src")));
        assert_eq!(open(b".", true), id(&cwd));
        let absolute = cwd.as_os_str().as_bytes();
        assert_eq!(open(absolute, true), id(&cwd), "the area itself");
        assert_eq!(
            open(&[absolute, b"/src/lib.rs"].concat(), true),
            id(&cwd.join("src/lib.rs"))
        );
        // Anything that leaves the area is not for the fast path (resolved and checked instead).
        assert_eq!(open(b"../Cargo.toml", true), None);
        assert_eq!(
            open(outside.0.join("out").as_os_str().as_bytes(), true),
            None
        );
        assert_eq!(open(b"", true), None);
        // A symlink in the area to the outside: followed, it leaves; not followed, it is inside.
        let link = cwd.join(format!("pno-fast-link-{}", std::process::id()));
        std::os::unix::fs::symlink(outside.0.join("out"), &link).unwrap();
        let name = link.file_name().unwrap().as_bytes().to_vec();
        let followed = open(&name, true);
        let itself = open(&name, false);
        std::fs::remove_file(&link).unwrap();
        assert_eq!(followed, None);
        assert!(itself.is_some());
        // The buffers are reused: a long path, then a short one.
        let long = [&b"src/"[..], &b"./"[..].repeat(1000), b"lib.rs"].concat();
        assert_eq!(open(&long, true), id(&cwd.join("src/lib.rs")));
        assert_eq!(open(b"src", true), id(&cwd.join("src")));
    }

    #[test]
    fn reads_a_path_into_the_reused_buffer() {
        const PAGE: usize = 4096;
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let pidfds = Pidfds::default();
        let target = Target::new(&listener, &pidfds, me, 0);
        // SAFETY: a fresh anonymous mapping of three pages, ours; the third is unmapped again so
        // that a read past the second page faults.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::munmap(p.cast::<u8>().add(2 * PAGE).cast(), PAGE), 0);
            p.cast::<u8>()
        };
        let put = |at: usize, bytes: &[u8]| {
            assert!(at + bytes.len() <= 2 * PAGE);
            // SAFETY: within the two mapped pages.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(at), bytes.len()) };
            base as u64 + at as u64
        };
        let mut buf = Vec::new();
        let read =
            |addr: u64, buf: &mut Vec<u8>| target.string_into(addr, buf).map(|n| buf[..n].to_vec());
        // Across a page boundary.
        let across = put(PAGE - 3, b"dir/file\0");
        assert_eq!(read(across, &mut buf), Ok(b"dir/file".to_vec()));
        // Ending just before the unmapped page: no read past it.
        let last = put(2 * PAGE - 4, b"abc\0");
        assert_eq!(read(last, &mut buf), Ok(b"abc".to_vec()));
        // A shorter path after a longer one, in the same buffer.
        let short = put(10, b"x\0");
        assert_eq!(read(short, &mut buf), Ok(b"x".to_vec()));
        let empty = put(20, b"\0");
        assert_eq!(read(empty, &mut buf), Ok(Vec::new()));
        // No NUL before the unmapped page: a fault; NULL: a fault.
        put(2 * PAGE - 2, b"yz");
        assert_eq!(
            read(base as u64 + 2 * PAGE as u64 - 2, &mut buf),
            Err(libc::EFAULT)
        );
        assert_eq!(read(0, &mut buf), Err(libc::EFAULT));
        // No NUL within PATH_MAX bytes (the two pages hold 8 KiB of 'a'): too long.
        // SAFETY: within the two mapped pages.
        unsafe { std::ptr::write_bytes(base, b'a', 2 * PAGE) };
        assert_eq!(read(base as u64, &mut buf), Err(libc::ENAMETOOLONG));
        // SAFETY: the two pages mapped above, no longer used.
        unsafe { libc::munmap(base.cast(), 2 * PAGE) };
    }

    #[test]
    fn decodes_paths_flags_and_descriptors() {
        let p = 0x1000u64;
        let call = Call::decode(
            SYS_FCHMODAT2,
            [3, p, 0o644, libc::AT_SYMLINK_NOFOLLOW as u64, 0, 0],
        );
        assert_eq!(
            call,
            Ok(Call {
                object: Object::Path {
                    dirfd: 3,
                    path: p,
                    follow: false,
                    empty: false
                },
                op: Op::Chmod(0o644)
            })
        );
        assert_eq!(
            Call::decode(libc::SYS_fchownat, [3, p, 1, 2, 0x8000, 0]),
            Err(libc::EINVAL)
        );
        // utimensat(fd, NULL, times, 0) acts on the descriptor; with flags it is refused.
        assert_eq!(
            Call::decode(libc::SYS_utimensat, [5, 0, 0, 0, 0, 0]).map(|c| c.object),
            Ok(Object::Fd(5))
        );
        assert_eq!(
            Call::decode(
                libc::SYS_utimensat,
                [5, 0, 0, libc::AT_SYMLINK_NOFOLLOW as u64, 0, 0]
            ),
            Err(libc::EINVAL)
        );
        assert_eq!(
            Call::decode(libc::SYS_utimensat, [libc::AT_FDCWD as u64, 0, 0, 0, 0, 0]),
            Err(libc::EFAULT)
        );
        assert_eq!(
            Call::decode(libc::SYS_lsetxattr, [p, 2, 3, 4, 1, 0]).map(|c| c.object),
            Ok(Object::Path {
                dirfd: libc::AT_FDCWD,
                path: p,
                follow: false,
                empty: false
            })
        );
        assert_eq!(
            Call::decode(
                SYS_SETXATTRAT,
                [7, 0, libc::AT_EMPTY_PATH as u64, 9, 10, 16]
            ),
            Ok(Call {
                object: Object::Path {
                    dirfd: 7,
                    path: 0,
                    follow: true,
                    empty: true
                },
                op: Op::SetXattrArgs {
                    name: 9,
                    args: 10,
                    size: 16
                }
            })
        );
        assert_eq!(
            Call::decode(libc::SYS_fcntl, [4, libc::F_OFD_SETLKW as u64, p, 0, 0, 0]),
            Ok(Call {
                object: Object::Fd(4),
                op: Op::Lock(libc::F_OFD_SETLKW, p)
            })
        );
        assert_eq!(
            Call::decode(
                libc::SYS_inotify_add_watch,
                [3, p, libc::IN_DONT_FOLLOW as u64 | 2, 0, 0, 0]
            ),
            Ok(Call {
                object: Object::Path {
                    dirfd: libc::AT_FDCWD,
                    path: p,
                    follow: false,
                    empty: false
                },
                op: Op::Watch {
                    inotify: 3,
                    mask: libc::IN_DONT_FOLLOW | 2
                }
            })
        );
        assert_eq!(Call::decode(libc::SYS_read, [0; 6]), Err(libc::ENOSYS));
    }

    /// A fresh directory under the system temp dir, removed on drop.
    struct Dir(std::path::PathBuf);
    impl Dir {
        fn new(name: &str) -> Dir {
            let dir =
                std::env::temp_dir().join(format!("pno-notify-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Any descriptor stands in for the ruleset where no watch is made.
    fn area_fd(path: &Path) -> OwnedFd {
        o_path(path, true)
    }

    fn o_path(path: &Path, follow: bool) -> OwnedFd {
        open_path(None, path.as_os_str().as_bytes(), follow).unwrap()
    }

    #[test]
    fn containment_is_judged_on_the_object_opened() {
        let area = Dir::new("area");
        let outside = Dir::new("outside");
        let policy = Policy::landlock(
            vec![super::area(&area.0).unwrap()],
            area_fd(&area.0).as_fd(),
            None,
        )
        .unwrap();
        std::fs::write(area.0.join("in"), "").unwrap();
        std::fs::write(outside.0.join("out"), "").unwrap();
        std::os::unix::fs::symlink(outside.0.join("out"), area.0.join("link")).unwrap();
        std::os::unix::fs::symlink(&outside.0, area.0.join("dirlink")).unwrap();
        let inside =
            |p: std::path::PathBuf, follow: bool| policy.inside(o_path(&p, follow).as_fd());
        assert!(inside(area.0.clone(), true), "the area itself");
        assert!(inside(area.0.join("in"), true));
        assert!(!inside(outside.0.join("out"), true));
        assert!(
            !inside(area.0.join("link"), true),
            "a symlink's outside target"
        );
        assert!(inside(area.0.join("link"), false), "the symlink itself");
        assert!(
            !inside(area.0.join("dirlink/out"), true),
            "through a symlinked directory"
        );
        // An unlinked file has no path beneath the area any more: refused.
        let gone = o_path(&area.0.join("in"), true);
        std::fs::remove_file(area.0.join("in")).unwrap();
        assert!(!policy.inside(gone.as_fd()));
        // A writable file (`readWrite` may name one) is inside; nothing is beneath it.
        let file_area = area.0.join("alone");
        std::fs::write(&file_area, "").unwrap();
        let by_file = Policy::landlock(
            vec![super::area(&file_area).unwrap()],
            area_fd(&area.0).as_fd(),
            None,
        )
        .unwrap();
        assert!(by_file.inside(o_path(&file_area, true).as_fd()));
        assert!(!by_file.inside(o_path(&area.0, true).as_fd()));
        // A sibling whose name starts with the area's is not beneath it.
        let sibling = std::path::PathBuf::from(format!("{}x", area.0.display()));
        std::fs::create_dir_all(&sibling).unwrap();
        assert!(!inside(sibling.clone(), true));
        std::fs::remove_dir_all(&sibling).unwrap();
    }

    #[test]
    fn namespaces_mode_judges_the_mount() {
        let dir = Dir::new("mount");
        let policy = Policy::namespaces(None).unwrap();
        assert!(
            policy.inside(o_path(&dir.0, true).as_fd()),
            "a writable mount"
        );
        // /proc/sys is mounted read-only in most containers; /sys often is too. Where neither
        // is, this part proves nothing and is skipped.
        for ro in ["/proc/sys", "/sys"] {
            let fd = o_path(Path::new(ro), true);
            // SAFETY: a zeroed statvfs is a valid buffer.
            let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
            // SAFETY: fstatvfs into our buffer.
            if unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut fs) } == 0
                && fs.f_flag & libc::ST_RDONLY != 0
            {
                assert!(!policy.inside(fd.as_fd()), "{ro} is read-only");
            }
        }
    }

    #[test]
    fn decodes_times() {
        let words = |w: [i64; 4]| w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let t = decode_times(Times::Timeval, &words([10, 5, 20, 999_999])).unwrap();
        assert_eq!((t[0].tv_sec, t[0].tv_nsec), (10, 5_000));
        assert_eq!((t[1].tv_sec, t[1].tv_nsec), (20, 999_999_000));
        assert_eq!(
            decode_times(Times::Timeval, &words([10, 1_000_000, 0, 0])).map(|_| ()),
            Err(libc::EINVAL)
        );
        let t = decode_times(Times::Utimbuf, &words([7, 8, 0, 0])[..16]).unwrap();
        assert_eq!((t[0].tv_sec, t[1].tv_sec, t[1].tv_nsec), (7, 8, 0));
    }

    /// The notification program's answer to one call (`arg1`: its second argument).
    fn verdict(program: &[sock_filter], nr: u32, arg1: u32) -> u32 {
        bpf::run(program, nr.into(), [0, arg1.into(), 0, 0, 0, 0])
    }

    #[test]
    fn the_filter_notifies_only_what_it_must() {
        let landlock = program(true, None).unwrap();
        let namespaces = program(false, None).unwrap();
        for &nr in MODE_OWNER_TIME_CALLS.iter().chain(XATTR_CALLS) {
            assert_eq!(verdict(&landlock, nr as u32, 0), RET_USER_NOTIF, "{nr}");
            assert_eq!(verdict(&namespaces, nr as u32, 0), RET_ALLOW, "{nr}");
        }
        let watch = libc::SYS_inotify_add_watch as u32;
        assert_eq!(verdict(&landlock, watch, 0), RET_USER_NOTIF);
        assert_eq!(verdict(&namespaces, watch, 0), RET_ALLOW);
        for &nr in WATCH_DENIED {
            let refused = ret_errno(libc::EPERM);
            assert_eq!(verdict(&landlock, nr as u32, 0), refused, "{nr}");
            assert_eq!(verdict(&namespaces, nr as u32, 0), RET_ALLOW, "{nr}");
        }
        for p in [&landlock, &namespaces] {
            assert_eq!(verdict(p, libc::SYS_flock as u32, 0), RET_USER_NOTIF);
            for &cmd in LOCK_COMMANDS {
                assert_eq!(
                    verdict(p, libc::SYS_fcntl as u32, cmd as u32),
                    RET_USER_NOTIF
                );
            }
            for cmd in [
                libc::F_GETFL,
                libc::F_SETFD,
                libc::F_DUPFD_CLOEXEC,
                libc::F_GETLK,
            ] {
                assert_eq!(verdict(p, libc::SYS_fcntl as u32, cmd as u32), RET_ALLOW);
            }
            for nr in [libc::SYS_read, libc::SYS_openat, libc::SYS_write] {
                assert_eq!(verdict(p, nr as u32, 0), RET_ALLOW);
            }
        }
    }
}
