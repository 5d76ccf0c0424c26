//! A root's view (Linux): a detached, read-only copy of the root directory's mount on which the
//! kernel follows no symlink (`exec::view`, made by a helper in namespaces of its own). A path
//! looked up relative to it, clean (no `.`, `..` or empty names), either reaches its file through
//! directories only, beneath the root, or fails with `ELOOP` at the first symlink; so one
//! `fstatat` or `faccessat` answers a `stat` or `exists` as the bounded resolution would (a path
//! with a symlink on it is left to that resolution), where Node's own answer is one `statx`.
//!
//! The copy is of the root's mount alone, made only when no mount is beneath the root; a mount
//! made or removed anywhere in this process's mount namespace afterwards retires every view
//! (seen by a thread polling `/proc/self/mountinfo`), and the next call asks for a new one.
//! A root has no view when this process cannot make one (no helper, no unprivileged user
//! namespaces, a kernel before 5.12): then nothing changes.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::exec::view::{root_view, ViewError};

/// Changes of this process's mount table seen so far (`watch_mounts`).
static MOUNT_CHANGES: AtomicU64 = AtomicU64::new(0);
/// Cleared for good when a view cannot be made for any root of this process.
static POSSIBLE: AtomicBool = AtomicBool::new(true);

/// A root directory's view, asked for on first use and made in the background.
#[derive(Debug, Default)]
pub(super) struct View {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Unasked,
    Making,
    /// Made while the mount table was at `mounts` changes.
    Made {
        fd: Arc<OwnedFd>,
        mounts: u64,
    },
    /// This root has none (`ViewError`).
    None,
}

/// What a view is doing, for a face to report (`statView`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewState {
    /// Not asked for yet, or asked for again after the mount table changed.
    Unasked,
    /// Being made.
    Making,
    /// In use.
    Ready,
    /// None for this root.
    None,
}

impl View {
    /// The view of `root` (the directory this view belongs to) when it is made and the mount
    /// table has not changed since; the first call, and the first after a change, ask for one.
    pub(super) fn get(self: &Arc<Self>, root: &Arc<OwnedFd>) -> Option<Arc<OwnedFd>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &*state {
            State::Made { fd, mounts } if *mounts == MOUNT_CHANGES.load(Ordering::Acquire) => {
                return Some(fd.clone())
            }
            State::Made { .. } | State::Unasked => {}
            State::Making | State::None => return None,
        }
        if !POSSIBLE.load(Ordering::Relaxed) {
            *state = State::None;
            return None;
        }
        *state = State::Making;
        let (view, root) = (Arc::clone(self), Arc::clone(root));
        let made = std::thread::Builder::new()
            .name("pi-native-ops-view".into())
            .spawn(move || view.make(root.as_fd()));
        if made.is_err() {
            *state = State::None;
        }
        None
    }

    /// Makes the view (on a thread of its own: a helper process is started and waited for).
    fn make(&self, root: BorrowedFd<'_>) {
        let made = match watch_mounts() {
            // Read before the copy: a change from here on retires it.
            Some(()) => {
                let mounts = MOUNT_CHANGES.load(Ordering::Acquire);
                root_view(root).map(|fd| State::Made {
                    fd: Arc::new(fd),
                    mounts,
                })
            }
            None => Err(ViewError::Unavailable(std::io::Error::other(
                "the mount table cannot be watched",
            ))),
        };
        let state = match made {
            Ok(made) => made,
            Err(ViewError::Unavailable(_)) => {
                POSSIBLE.store(false, Ordering::Relaxed);
                State::None
            }
            Err(ViewError::NotThisRoot(_)) => State::None,
        };
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// What the view is doing.
    pub(super) fn state(&self) -> ViewState {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Made { mounts, .. } if *mounts == MOUNT_CHANGES.load(Ordering::Acquire) => {
                ViewState::Ready
            }
            State::Made { .. } | State::Unasked => ViewState::Unasked,
            State::Making => ViewState::Making,
            State::None => ViewState::None,
        }
    }
}

/// Starts, once per process, the thread that counts changes of the mount table; `None` when it
/// cannot. Its descriptor is opened before this returns, so every change after the return is
/// counted (`poll` reports a change since the open, then since the last report).
fn watch_mounts() -> Option<()> {
    static WATCHING: OnceLock<bool> = OnceLock::new();
    let watching = WATCHING.get_or_init(|| {
        let Ok(table) = std::fs::File::open("/proc/self/mountinfo") else {
            return false;
        };
        std::thread::Builder::new()
            .name("pi-native-ops-mounts".into())
            .spawn(move || loop {
                let mut poll = libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&table),
                    events: libc::POLLPRI,
                    revents: 0,
                };
                // SAFETY: one valid `pollfd`, on a descriptor this thread owns.
                let n = unsafe { libc::poll(&mut poll, 1, -1) };
                if n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                }
                MOUNT_CHANGES.fetch_add(1, Ordering::AcqRel);
                if n < 0 || poll.revents & libc::POLLNVAL != 0 {
                    // No longer watched: no view may be trusted again.
                    POSSIBLE.store(false, Ordering::Relaxed);
                    return;
                }
            })
            .is_ok()
    });
    watching.then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;
    use nix::fcntl::{openat, AtFlags, OFlag};
    use nix::sys::stat::{fstatat, Mode};
    use std::fs;

    /// Whether this machine lets an unprivileged process make user and mount namespaces.
    fn userns() -> bool {
        std::process::Command::new("unshare")
            .args(["-Ur", "true"])
            .status()
            .is_ok_and(|s| s.success())
    }

    #[test]
    fn a_view_follows_no_symlink_and_writes_nothing() {
        if !userns() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::write(tmp.path().join("a/b/f.txt"), "four").unwrap();
        std::os::unix::fs::symlink("b", tmp.path().join("a/link")).unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("out")).unwrap();
        let root = nix::fcntl::open(tmp.path(), OFlag::O_PATH, Mode::empty()).unwrap();
        let view = root_view(root.as_fd()).unwrap();
        let st = fstatat(view.as_fd(), "a/b/f.txt", AtFlags::empty()).unwrap();
        assert_eq!(st.st_size, 4);
        for through_a_link in ["a/link/f.txt", "out/hostname", "out"] {
            assert_eq!(
                fstatat(view.as_fd(), through_a_link, AtFlags::empty()).unwrap_err(),
                Errno::ELOOP,
                "{through_a_link}"
            );
        }
        // The link itself is there, unfollowed.
        assert!(fstatat(view.as_fd(), "out", AtFlags::AT_SYMLINK_NOFOLLOW).is_ok());
        let write = openat(
            view.as_fd(),
            "a/new.txt",
            OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        );
        assert_eq!(write.unwrap_err(), Errno::EROFS);
        assert!(!tmp.path().join("a/new.txt").exists());
    }

    #[test]
    fn a_root_is_viewed_once_asked_and_answers_as_without() {
        if !userns() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("d/e")).unwrap();
        fs::write(tmp.path().join("d/e/f.txt"), "abc").unwrap();
        let root = crate::root::Root::open(tmp.path(), None).unwrap();
        let path = tmp.path().join("d/e/f.txt");
        let before = root.stat(&path).unwrap();
        assert_ne!(root.view_state(), ViewState::None);
        while root.view_state() != ViewState::Ready {
            assert_ne!(root.view_state(), ViewState::None, "no view made");
            std::thread::yield_now();
        }
        let after = root.stat(&path).unwrap();
        assert_eq!((before.size, before.mode), (after.size, after.mode));
        assert!(root.exists(&path));
        assert!(!root.exists(&tmp.path().join("d/missing")));
        assert!(!root.exists(&tmp.path().join("d/e/f.txt/under-a-file")));
    }
}
