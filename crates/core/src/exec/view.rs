//! Node's side of the helper's view role (`helper::view`): a detached, read-only copy of a root
//! directory's mount on which the kernel follows no symlink, so a path looked up relative to it
//! in one system call is the path beneath the root with no symlink on the way (`root::view`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::child::{Role, VIEW_CLONE_FAILED, VIEW_OK, VIEW_SETATTR_FAILED, VIEW_UNSHARE_FAILED};
use super::launch;

/// Why a root has no view.
#[derive(Debug)]
pub enum ViewError {
    /// Not for any root of this process: no helper, or no user and mount namespaces for it, or a
    /// kernel without `open_tree` or `MOUNT_ATTR_NOSYMFOLLOW`.
    Unavailable(io::Error),
    /// Not for this root: it cannot be entered, or its mount cannot be copied (a mount beneath
    /// it).
    NotThisRoot(io::Error),
}

/// Makes the view of the directory `root` is open on, in a sandbox helper (a fresh process: Node
/// is never forked into new namespaces).
pub fn root_view(root: BorrowedFd<'_>) -> Result<OwnedFd, ViewError> {
    let (node, child_end) = crate::sys::seqpacket_pair().map_err(ViewError::Unavailable)?;
    let pid = launch::launch(Role::View, &[], &[child_end.as_fd(), root])
        .map_err(ViewError::Unavailable)?;
    drop(child_end);
    let mut message = [0u8; 8];
    let report = launch::receive_report(&node, &mut message, "the view's helper");
    launch::wait(pid);
    let mut fds = report.map_err(ViewError::Unavailable)?;
    let code = i32::from_ne_bytes(message[..4].try_into().unwrap_or_default());
    let errno = i32::from_ne_bytes(message[4..].try_into().unwrap_or_default());
    let failed = || io::Error::from_raw_os_error(errno);
    match code {
        VIEW_OK if fds.len() == 1 => Ok(fds.remove(0)),
        VIEW_CLONE_FAILED if !matches!(errno, libc::ENOSYS | libc::EPERM) => {
            Err(ViewError::NotThisRoot(failed()))
        }
        VIEW_UNSHARE_FAILED | VIEW_CLONE_FAILED | VIEW_SETATTR_FAILED => {
            Err(ViewError::Unavailable(failed()))
        }
        _ => Err(ViewError::Unavailable(io::Error::other(
            "the view's helper sent a report it should not",
        ))),
    }
}
