//! Watch bookkeeping: which inotify watch stands for what (directories,
//! the rule files of the root's ancestors, hard-linked files' inodes).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use crate::index::watch::{WatchError, LINK_MASK, RULES_MASK};
use crate::walk::listing::kind_at;
use crate::walk::Kind;

use super::{
    Aside, Contents, DirId, FileState, Node, Tree, Watched, GIT_DIR_NAMES, GIT_INFO_NAMES,
    NO_WATCH, RULE_NAMES,
};

impl Tree {
    pub(super) fn add_watch(
        &mut self,
        fd: BorrowedFd<'_>,
        mask: u32,
    ) -> Result<Option<i32>, Aside> {
        if self.watches.len() >= self.max_watches {
            return Err(format!(
                "watch limit reached ({} directories watched)",
                self.watches.len()
            ));
        }
        match self.inotify.add(fd, mask) {
            Ok(wd) => Ok(Some(wd)),
            Err(WatchError::Limit) => Err(format!(
                "inotify watch limit reached (fs.inotify.max_user_watches, {} watched here)",
                self.watches.len()
            )),
            Err(WatchError::Other) => Ok(None),
        }
    }

    pub(super) fn drop_watch(&mut self, wd: i32, owner: Watched) {
        if self.watches.get(&wd) == Some(&owner) {
            self.watches.remove(&wd);
            self.inotify.remove(wd);
        }
    }

    /// Watches the root's ancestors, and their `.git` and `.git/info`, for
    /// the rule files `Rules::new(root)` reads from them.
    pub(super) fn watch_ancestors(&mut self) -> Result<(), Aside> {
        for wd in std::mem::take(&mut self.ancestor_wds) {
            self.watches.remove(&wd);
            self.inotify.remove(wd);
        }
        self.on_path.clear();
        let ancestors: Vec<PathBuf> = self
            .root_host
            .ancestors()
            .skip(1)
            .map(Path::to_path_buf)
            .collect();
        let mut below = self.root_host.clone();
        for dir in ancestors {
            let child: Box<[u8]> = below.file_name().map_or(&b""[..], |n| n.as_bytes()).into();
            below = dir.clone();
            let mut first = true;
            let targets = [
                (dir.clone(), RULE_NAMES.as_slice()),
                (dir.join(".git"), GIT_DIR_NAMES),
                (dir.join(".git/info"), GIT_INFO_NAMES),
            ];
            for (path, names) in targets {
                let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                let Ok(fd) = nix::fcntl::open(&path, flags, Mode::empty()) else {
                    continue;
                };
                if let Some(wd) = self.add_watch(fd.as_fd(), RULES_MASK)? {
                    self.watches.insert(wd, Watched::Rules { dir: None, names });
                    self.ancestor_wds.push(wd);
                    if first {
                        self.on_path.insert(wd, child.clone());
                    }
                }
                first = false;
            }
        }
        // Watches replaced here lose the events still queued for them (a
        // root removed meanwhile, say): the root is checked by path instead.
        let at_path = nix::sys::stat::stat(&self.root_host);
        let held = nix::sys::stat::fstat(self.root_fd.as_fd());
        match (at_path, held) {
            (Ok(a), Ok(h)) if (a.st_dev, a.st_ino) == (h.st_dev, h.st_ino) => Ok(()),
            _ => Err("the root was deleted or moved".to_string()),
        }
    }

    /// Watches `.git` and `.git/info` in the directory open at `fd` (when
    /// `.git` is a directory), for its exclude file.
    pub(super) fn watch_git(&mut self, id: DirId, fd: BorrowedFd<'_>) -> Result<Vec<i32>, Aside> {
        let mut wds = Vec::new();
        if kind_at(fd, b".git") != Some(Kind::Dir) {
            return Ok(wds);
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        for (path, names) in [(".git", GIT_DIR_NAMES), (".git/info", GIT_INFO_NAMES)] {
            let Ok(dir) = openat(fd, path, flags, Mode::empty()) else {
                continue;
            };
            if let Some(wd) = self.add_watch(dir.as_fd(), RULES_MASK)? {
                if self.watches.contains_key(&wd) {
                    continue;
                }
                self.watches.insert(
                    wd,
                    Watched::Rules {
                        dir: Some(id),
                        names,
                    },
                );
                wds.push(wd);
            }
        }
        Ok(wds)
    }

    /// Watches the inode of file `name` if it has more than one link (before
    /// it is read). `NO_WATCH` if it has one, or cannot be watched (then it
    /// is always searched). With the watch, the file's inode number (0 if it
    /// cannot be stat'ed).
    pub(super) fn watch_link(&mut self, dir: DirId, fd: BorrowedFd<'_>, name: &[u8]) -> (i32, u64) {
        use nix::fcntl::AtFlags;
        match nix::sys::stat::fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => self.watch_link_of(dir, fd, name, &st),
            Err(_) => (NO_WATCH, 0),
        }
    }

    /// `watch_link` for a file whose `fstatat` is `st`.
    pub(super) fn watch_link_of(
        &mut self,
        dir: DirId,
        fd: BorrowedFd<'_>,
        name: &[u8],
        st: &nix::sys::stat::FileStat,
    ) -> (i32, u64) {
        let ino = st.st_ino;
        if st.st_nlink <= 1 || self.watches.len() >= self.max_watches {
            return (NO_WATCH, ino);
        }
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(file) = openat(fd, OsStr::from_bytes(name), flags, Mode::empty()) else {
            return (NO_WATCH, ino);
        };
        let Ok(wd) = self.inotify.add(file.as_fd(), LINK_MASK) else {
            return (NO_WATCH, ino);
        };
        match self.watches.get(&wd) {
            None => {
                self.watches.insert(wd, Watched::Link);
                self.new_links.push((ino, wd));
            }
            Some(Watched::Link) => {}
            // Not a file we know as linked: leave it unwatched.
            Some(_) => return (NO_WATCH, ino),
        }
        self.links.entry(wd).or_default().push((dir, name.into()));
        (wd, ino)
    }

    /// Gives the inodes first seen linked since the last call their other
    /// names in the tree: files listed while they had one link, so with no
    /// watch on their inode. `ln a/x b/y` reports only `b/y` (a link count
    /// change raises no event in `a`), and a write through `b/y` reports
    /// only there, so `a/x` would keep its old content: here it joins the
    /// inode's watch (later writes through any name mark it dirty) and is
    /// marked dirty now (for a write made before the watch). One pass over
    /// the tree's entries in memory, only after such a link appeared.
    pub(super) fn attach_links(&mut self, contents: &mut dyn Contents) {
        if self.new_links.is_empty() {
            return;
        }
        let inodes: HashMap<u64, i32> = std::mem::take(&mut self.new_links)
            .into_iter()
            .filter(|&(ino, wd)| ino != 0 && self.watches.get(&wd) == Some(&Watched::Link))
            .collect();
        let mut found: Vec<(DirId, usize, i32)> = Vec::new();
        for (id, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            for (i, child) in node.children.iter().enumerate() {
                if child.kind != Kind::File || child.link != NO_WATCH || child.ino == 0 {
                    continue;
                }
                if let Some(&wd) = inodes.get(&child.ino) {
                    found.push((id as DirId, i, wd));
                }
            }
        }
        for (id, i, wd) in found {
            let Some(child) = self.node(id).map(|n| &n.children[i]) else {
                continue;
            };
            let (name, node, ignored): (Box<[u8]>, Node, bool) =
                ((*child.name).into(), child.node, child.ignored);
            self.links.entry(wd).or_default().push((id, name.clone()));
            let state = match node {
                Node::File(FileState::Indexed(cid)) if !ignored => {
                    contents.retire(cid);
                    Some(self.mark_dirty(id, &name))
                }
                Node::File(FileState::Dirty(_)) if !ignored => Some(self.mark_dirty(id, &name)),
                _ => None,
            };
            if let Some(child) = self.node_mut(id).map(|n| &mut n.children[i]) {
                child.link = wd;
                if let Some(state) = state {
                    child.node = Node::File(state);
                }
            }
        }
    }

    /// Forgets name `name` of `dir` as a name of the linked file `wd`.
    pub(super) fn unlink(&mut self, wd: i32, dir: DirId, name: &[u8]) {
        if wd == NO_WATCH {
            return;
        }
        if let Some(names) = self.links.get_mut(&wd) {
            names.retain(|(d, n)| !(*d == dir && **n == *name));
            if names.is_empty() {
                self.links.remove(&wd);
                if self.watches.get(&wd) == Some(&Watched::Link) {
                    self.watches.remove(&wd);
                    self.inotify.remove(wd);
                }
            }
        }
    }
}
