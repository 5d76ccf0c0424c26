//! The helper's view role: a copy of the workspace root's mount, detached, read-only and with
//! symlinks never followed (`MOUNT_ATTR_NOSYMFOLLOW`), sent to Node, where one `fstatat` or
//! `faccessat` relative to it answers a `stat` or `exists` beneath the root (`root::view`). Making
//! a copy of a mount takes `CAP_SYS_ADMIN` over a mount namespace: the helper gets it in user and
//! mount namespaces of its own and holds nothing after (it exits; Node's descriptor keeps the copy).
//! Raw system calls only: no allocation, no locks, nothing that may panic.

use std::os::fd::RawFd;

use super::mount::{
    MountAttr, AT_EMPTY_PATH, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_NOSYMFOLLOW, MOUNT_ATTR_RDONLY, OPEN_TREE_CLONE,
};
use crate::exec::child::{VIEW_CLONE_FAILED, VIEW_OK, VIEW_SETATTR_FAILED, VIEW_UNSHARE_FAILED};
use crate::sys::errno;

/// The view role: makes the view of the directory `root` is open on and sends it on `channel`
/// (code `VIEW_OK` and the descriptor), or the failed step's code and its errno with none.
/// Returns the helper's exit code.
///
/// # Safety
///
/// Only in the helper (single-threaded), with `channel` and `root` the descriptors Node handed it.
pub(in crate::exec) unsafe fn view(channel: RawFd, root: RawFd) -> i32 {
    let report = |code: i32, fds: &[RawFd]| -> i32 {
        let message = [code, errno()];
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&message[0].to_ne_bytes());
        bytes[4..].copy_from_slice(&message[1].to_ne_bytes());
        // SAFETY: `channel` is our end (our contract), `fds` ours.
        let sent = unsafe { crate::sys::send_fds(channel, &bytes, fds) }.is_ok();
        match (code, sent) {
            (VIEW_OK, true) => 0,
            _ => 1,
        }
    };
    // The copy must be of this very directory: entered by descriptor before the new mount
    // namespace, whose copy of the mounts the working directory moves into, it is cloned as "."
    // (a path looked up again could name another).
    // SAFETY: a plain system call on our own descriptor.
    if unsafe { libc::fchdir(root) } != 0 {
        return report(VIEW_CLONE_FAILED, &[]);
    }
    // SAFETY: a plain system call on this single-threaded process.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return report(VIEW_UNSHARE_FAILED, &[]);
    }
    // Not recursive: a mount beneath the root (locked, in a user namespace of our own) fails the
    // clone (`EINVAL`), so a view never shows what a mount there hides.
    // SAFETY: a static NUL-terminated path; the descriptor is ours.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c".".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    } as RawFd;
    if tree < 0 {
        return report(VIEW_CLONE_FAILED, &[]);
    }
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY
            | MOUNT_ATTR_NOSUID
            | MOUNT_ATTR_NODEV
            | MOUNT_ATTR_NOEXEC
            | MOUNT_ATTR_NOSYMFOLLOW,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `tree` is our detached mount; `attr` is valid for the size passed.
    let set = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            AT_EMPTY_PATH,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    };
    if set != 0 {
        return report(VIEW_SETATTR_FAILED, &[]);
    }
    report(VIEW_OK, &[tree])
}
