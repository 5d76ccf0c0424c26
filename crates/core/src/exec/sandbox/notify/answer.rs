//! Answering a notification: a value or an errno, the kernel's own performance (classic POSIX
//! locks), or a descriptor installed in the caller (`SECCOMP_IOCTL_NOTIF_ADDFD`); and whether a
//! caller still waits.

use std::os::fd::{AsRawFd, BorrowedFd};

use super::Reply;
use crate::sys::errno;

/// The reply of a system call's return value `r` (negative: the errno now).
pub(super) fn result(r: libc::c_long) -> Reply {
    if r < 0 {
        Reply::Errno(errno())
    } else {
        Reply::Value(r)
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

/// Hands `fd` to the caller of notification `id` as the result of its open
/// (`SECCOMP_ADDFD_FLAG_SEND`: installing it answers the notification).
pub(super) fn send_fd(
    listener: BorrowedFd<'_>,
    id: u64,
    fd: BorrowedFd<'_>,
    cloexec: bool,
) -> Reply {
    let addfd = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: ADDFD reads our struct; our descriptor stays ours (the kernel installs a copy).
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD as _,
            &addfd,
        )
    };
    match r {
        r if r >= 0 => Reply::Later, // answered by the kernel
        _ => Reply::Errno(errno()),
    }
}
