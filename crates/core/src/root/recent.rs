//! The directories a root was lately asked about, held open (unix), so that
//! a `stat` or `exists` of a name in one costs an `fstatat` on its
//! descriptor instead of a bounded open, `fstat` and `close`: pi's `ls`
//! stats every entry of the directory it lists.
//!
//! A held directory is never trusted: each use rechecks every level from the
//! root down, one `fstatat(parent, name, AT_SYMLINK_NOFOLLOW)` each, and goes
//! on only when each name is still the very directory held (device and
//! inode; the held descriptor keeps the inode from being reused). So what is
//! then looked up is relative to a descriptor that was, at a moment during
//! this call, the directory at that path beneath the root with no symlink on
//! the way: the guarantee of the component walk, which also goes on from
//! descriptors it opened a moment before.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};

/// Lookups sent straight to the caller's own resolution after a name in a
/// directory turned out to be a symlink: a link costs the recheck and the
/// `fstatat` before that resolution, so a directory of links (such as
/// `node_modules/.bin`) is looked in again only now and then.
const AFTER_A_LINK: u32 = 15;

/// How many directories a root holds, the most recently used first.
const HELD: usize = 4;

/// The deepest directory held: each level costs an `fstatat` per use, and
/// past two the kernel's one bounded open (`openat2`) costs less.
pub(super) const MAX_DEPTH: usize = 2;

/// One level of a held directory: its name in the level above, the
/// directory itself (`O_PATH`) and its identity.
#[derive(Debug)]
struct Level {
    name: OsString,
    fd: OwnedFd,
    id: (u64, u64),
}

/// A directory beneath the root, held with every directory above it.
#[derive(Debug)]
pub(super) struct Dir {
    /// Its path relative to the root (clean: no `.`, `..` or empty names).
    rel: PathBuf,
    /// The directories above it, from the root's child down.
    above: Vec<Level>,
    /// The directory itself.
    last: Level,
    /// Lookups still to leave to the caller (see [`AFTER_A_LINK`]).
    skip: AtomicU32,
}

impl Dir {
    /// The directory, for a lookup of a name in it.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.last.fd.as_fd()
    }

    /// A name looked up in it was a symlink: leave the next lookups to the
    /// caller's resolution, which follows it.
    pub(super) fn met_a_link(&self) {
        self.skip.store(AFTER_A_LINK, Ordering::Relaxed);
    }

    /// Whether this lookup is one to leave to the caller (counting it).
    fn skipping(&self) -> bool {
        self.skip
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Whether every level is still the directory at its name, from `root`.
    fn still_there(&self, root: BorrowedFd<'_>) -> bool {
        let mut parent = root;
        for level in self.above.iter().chain([&self.last]) {
            match fstatat(parent, level.name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if is_dir(&st) && identity(&st) == level.id => parent = level.fd.as_fd(),
                _ => return false,
            }
        }
        true
    }
}

/// The held directories of one root.
#[derive(Debug, Default)]
pub(super) struct Recent {
    dirs: Mutex<Vec<Arc<Dir>>>,
}

impl Recent {
    /// The directory `rel` (relative, clean, 1 to [`MAX_DEPTH`] names)
    /// beneath `root`, checked as of now; opened and held when it is not
    /// yet, if `may_hold` it (the policy lets it and every directory above
    /// it be read). `None` when a level is not a directory reached without a
    /// symlink (or cannot be opened): the caller resolves the path its own way.
    pub(super) fn get(
        &self,
        root: BorrowedFd<'_>,
        rel: &Path,
        may_hold: impl FnOnce(&Path) -> bool,
    ) -> Option<Arc<Dir>> {
        let held = {
            let dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            dirs.iter().find(|d| d.rel == rel).cloned()
        };
        if let Some(dir) = held {
            if dir.skipping() {
                return None;
            }
            if dir.still_there(root) {
                return Some(dir);
            }
        }
        if !may_hold(rel) {
            return None;
        }
        let dir = Arc::new(Dir::open(root, rel)?);
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        dirs.retain(|d| d.rel != rel);
        dirs.insert(0, dir.clone());
        dirs.truncate(HELD);
        Some(dir)
    }
}

impl Dir {
    /// Opens each level of `rel` beneath `root` with `O_NOFOLLOW`: a symlink
    /// on the way fails the open (`O_DIRECTORY`), so nothing is followed.
    fn open(root: BorrowedFd<'_>, rel: &Path) -> Option<Dir> {
        if !(1..=MAX_DEPTH).contains(&rel.iter().count()) {
            return None;
        }
        // Only looked in, never read: `O_PATH` where there is one.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let access = OFlag::O_PATH;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let access = OFlag::O_RDONLY;
        let flags = access | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut levels: Vec<Level> = Vec::new();
        for name in rel.iter() {
            let parent = levels.last().map_or(root, |l| l.fd.as_fd());
            let fd = openat(parent, name, flags, Mode::empty()).ok()?;
            let st = fstat(&fd).ok()?;
            levels.push(Level {
                name: name.to_os_string(),
                fd,
                id: identity(&st),
            });
        }
        let last = levels.pop()?;
        Some(Dir {
            rel: rel.to_path_buf(),
            above: levels,
            last,
            skip: AtomicU32::new(0),
        })
    }
}

/// `rel` split into its directory (1 to [`MAX_DEPTH`] names) and last name,
/// when it has that shape.
pub(super) fn split(rel: &Path) -> Option<(&Path, &OsStr)> {
    let bytes = rel.as_os_str().as_encoded_bytes();
    let slashes = bytes.iter().filter(|&&b| b == b'/').count();
    if slashes == 0 || slashes > MAX_DEPTH {
        return None;
    }
    Some((rel.parent()?, rel.file_name()?))
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode as _) & SFlag::S_IFMT == SFlag::S_IFDIR
}

/// A file's (device, inode).
// `dev_t` is not `u64` everywhere (macOS: `i32`).
#[allow(clippy::unnecessary_cast)]
fn identity(st: &FileStat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn root_fd(dir: &Path) -> OwnedFd {
        nix::fcntl::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn a_held_directory_is_used_only_while_its_path_still_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        let root = root_fd(tmp.path());
        let recent = Recent::default();
        let first = recent
            .get(root.as_fd(), Path::new("a/b"), |_| true)
            .unwrap();
        let again = recent
            .get(root.as_fd(), Path::new("a/b"), |_| true)
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again), "held, not opened again");
        // Renamed away and replaced by a symlink: neither is used.
        fs::rename(tmp.path().join("a"), tmp.path().join("moved")).unwrap();
        std::os::unix::fs::symlink("moved", tmp.path().join("a")).unwrap();
        assert!(recent
            .get(root.as_fd(), Path::new("a/b"), |_| true)
            .is_none());
        // Replaced by another directory: that one is held instead.
        fs::remove_file(tmp.path().join("a")).unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        let other = recent
            .get(root.as_fd(), Path::new("a/b"), |_| true)
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        let st = fstat(other.fd()).unwrap();
        let real = fs::metadata(tmp.path().join("a/b")).unwrap();
        assert_eq!(
            identity(&st),
            (
                std::os::unix::fs::MetadataExt::dev(&real),
                std::os::unix::fs::MetadataExt::ino(&real)
            )
        );
    }

    #[test]
    fn after_a_link_a_directory_is_left_alone_for_a_few_lookups() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("d")).unwrap();
        let root = root_fd(tmp.path());
        let recent = Recent::default();
        let get = || recent.get(root.as_fd(), Path::new("d"), |_| true);
        get().unwrap().met_a_link();
        for _ in 0..AFTER_A_LINK {
            assert!(get().is_none());
        }
        assert!(get().is_some());
        assert!(get().is_some());
    }

    #[test]
    fn at_most_a_few_shallow_directories_are_held() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..HELD + 2 {
            fs::create_dir_all(tmp.path().join(format!("d{i}/x/y"))).unwrap();
        }
        let root = root_fd(tmp.path());
        let recent = Recent::default();
        for i in 0..HELD + 2 {
            assert!(recent
                .get(root.as_fd(), &PathBuf::from(format!("d{i}")), |_| true)
                .is_some());
        }
        assert_eq!(recent.dirs.lock().unwrap().len(), HELD);
        assert!(recent
            .get(root.as_fd(), Path::new("d0/x/y"), |_| true)
            .is_none());
        assert_eq!(
            split(Path::new("a/b/c")).unwrap(),
            (Path::new("a/b"), OsStr::new("c"))
        );
        assert!(split(Path::new("a/b/c/d")).is_none());
        assert!(split(Path::new("a")).is_none());
    }
}
