//! The first build, and growing the tree into new directories: watch
//! each directory before listing it, list it, decide each entry.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::index::watch::{untrusted_filesystem, Event, Inotify, Mounts, DIR_MASK};
use crate::policy::Policy;
use crate::walk::listing::Listing;
use crate::walk::rules::{Level, Rules};
use crate::walk::Kind;

use super::{
    join, open_beneath, Aside, Child, Contents, DirId, DirNode, FileState, Fresh, Grown,
    NameFilter, NewFile, Node, Tree, Watched, NO_WATCH, ROOT,
};

impl Tree {
    /// Watches and lists the whole tree from the root (reading files through
    /// `contents`), watching the root's ancestors for their rule files.
    /// `cancel` stops it (`Err`). Events that arrive meanwhile are pending
    /// in the inotify queue; `drain_into` keeps it from overflowing.
    pub(crate) fn build(
        root_fd: OwnedFd,
        root_host: PathBuf,
        policy: Option<Arc<Policy>>,
        max_watches: usize,
        contents: &mut dyn Contents,
        cancel: &AtomicBool,
        pending: &mut Vec<Event>,
    ) -> Result<Tree, Aside> {
        let inotify = Inotify::new().map_err(|e| format!("inotify unavailable: {e}"))?;
        let rules = Rules::new(&root_host, None).with_policy(policy.as_ref(), Path::new(""));
        let mut tree = Tree {
            root_fd,
            root_host,
            rules,
            policy,
            nodes: Vec::new(),
            free: Vec::new(),
            freed: Vec::new(),
            watches: HashMap::new(),
            ancestor_wds: Vec::new(),
            on_path: HashMap::new(),
            links: HashMap::new(),
            new_links: Vec::new(),
            inotify,
            mounts: None,
            max_watches,
            generation: 0,
            dirty: Vec::new(),
            scratch: Vec::new(),
            version: 0,
            places: None,
        };
        tree.watch_ancestors()?;
        // Read again now that they are watched: a change after is an event.
        tree.rules = tree.new_rules();
        // Read before listing: a mount made during the build is a change.
        tree.mounts = Mounts::new(&tree.root_host).ok();
        let fd = open_beneath(tree.root_fd.as_fd(), b"", true)
            .map_err(|e| format!("the root cannot be opened: {e}"))?;
        let above = tree.rules.above_start();
        let Some((id, subdirs)) = tree.index_one(None, b"", Vec::new(), fd, above, contents)?
        else {
            return Err("the root cannot be watched".to_string());
        };
        debug_assert_eq!(id, ROOT);
        tree.grow_all(id, subdirs, contents, Some((cancel, pending)))?;
        tree.attach_links(contents);
        Ok(tree)
    }

    fn alloc(&mut self, node: DirNode) -> DirId {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                (self.nodes.len() - 1) as DirId
            }
        }
    }

    /// The rules a directory's own level chains to.
    pub(super) fn above(&self, parent: Option<DirId>) -> Arc<Level> {
        match parent.and_then(|p| self.node(p)) {
            Some(p) => p.level.clone(),
            None => self.rules.above_start(),
        }
    }

    /// Watches (before listing) and lists one directory open at `fd`,
    /// creating its node. `None` when it cannot be watched (it stays
    /// unindexed). Returns the subdirectories to index next.
    pub(super) fn index_one(
        &mut self,
        parent: Option<DirId>,
        name: &[u8],
        rel: Vec<u8>,
        fd: OwnedFd,
        above: Arc<Level>,
        contents: &mut dyn Contents,
    ) -> Result<Option<Grown>, Aside> {
        if let Some(fs) = untrusted_filesystem(fd.as_fd()) {
            return Err(format!(
                "{fs} filesystem: changes made elsewhere are not reported"
            ));
        }
        let Some(mut wd) = self.add_watch(fd.as_fd(), DIR_MASK)? else {
            return Ok(None);
        };
        if let Some(&other) = self.watches.get(&wd) {
            // The same directory is already indexed elsewhere: moved here
            // and not yet reconciled there, or mounted twice. One watch
            // cannot tell the two places apart: the other place becomes
            // unindexed (searches through it walk live).
            match other {
                Watched::Dir(other) => self.unindex(other, contents),
                Watched::Rules { .. } | Watched::Link => return Ok(None),
            }
            wd = match self.add_watch(fd.as_fd(), DIR_MASK)? {
                Some(wd) if !self.watches.contains_key(&wd) => wd,
                _ => return Ok(None),
            };
        }
        let listing = Listing::of(fd.as_fd());
        let level = Level::for_listing(fd.as_fd(), &rel, &listing.markers, &self.rules, above);
        let id = self.alloc(DirNode {
            parent,
            name: name.into(),
            rel,
            level,
            children: Vec::new(),
            names: NameFilter::default(),
            dirs: Vec::new(),
            wd,
            rule_wds: Vec::new(),
        });
        self.watches.insert(wd, Watched::Dir(id));
        let (children, grow, _) = self.children(
            id,
            fd.as_fd(),
            &listing,
            Vec::new(),
            &Fresh::All,
            false,
            contents,
        );
        let rule_wds = self.watch_git(id, fd.as_fd())?;
        if let Some(node) = self.node_mut(id) {
            node.set_children(children);
            node.rule_wds = rule_wds;
        }
        Ok(Some((id, grow)))
    }

    /// Indexes the subdirectories `names` of `parent` and everything below
    /// them, depth first in path order. With `build`, checks `cancel` and
    /// keeps the inotify queue drained into `pending` as it goes.
    pub(super) fn grow_all(
        &mut self,
        parent: DirId,
        names: Vec<Box<[u8]>>,
        contents: &mut dyn Contents,
        mut build: Option<(&AtomicBool, &mut Vec<Event>)>,
    ) -> Result<(), Aside> {
        let mut stack: Vec<(DirId, Box<[u8]>)> =
            names.into_iter().rev().map(|n| (parent, n)).collect();
        // Directories between two drains during a build: the queue (16384
        // events by default) then holds what a few hundred directories'
        // worth of work lets happen meanwhile.
        const DRAIN_EVERY: usize = 64;
        let mut since_drain = 0;
        while let Some((parent, name)) = stack.pop() {
            if let Some((cancel, pending)) = build.as_mut() {
                if cancel.load(Ordering::Relaxed) {
                    return Err("closed".to_string());
                }
                since_drain += 1;
                if since_drain == DRAIN_EVERY {
                    since_drain = 0;
                    self.inotify
                        .drain(pending)
                        .map_err(|e| format!("inotify read failed: {e}"))?;
                }
            }
            let Some(p) = self.node(parent) else { continue };
            let rel = join(&p.rel, &name);
            let above = p.level.clone();
            let grown = match open_beneath(self.root_fd.as_fd(), &rel, true) {
                Ok(fd) => self.index_one(Some(parent), &name, rel, fd, above, contents)?,
                Err(_) => None,
            };
            let node = match &grown {
                Some((id, _)) => Node::Dir(*id),
                None => Node::Unindexed,
            };
            if let Some(p) = self.node_mut(parent) {
                if let Ok(i) = p.children.binary_search_by(|c| (*c.name).cmp(&name)) {
                    p.children[i].node = node;
                }
            }
            if let Some((id, subdirs)) = grown {
                stack.extend(subdirs.into_iter().rev().map(|n| (id, n)));
            }
        }
        Ok(())
    }

    /// A file newly seen (or reported changed): indexed now or marked dirty.
    fn new_file(
        &mut self,
        dir: DirId,
        fd: BorrowedFd<'_>,
        name: &[u8],
        rel: &[u8],
        contents: &mut dyn Contents,
    ) -> (FileState, i32, u64) {
        use nix::fcntl::AtFlags;
        let stat = nix::sys::stat::fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok();
        let (link, ino) = match &stat {
            Some(st) => self.watch_link_of(dir, fd, name, st),
            None => (NO_WATCH, 0),
        };
        let file = NewFile {
            dir: fd,
            name,
            rel,
            linked: link != NO_WATCH,
            stat: stat.as_ref(),
        };
        let state = contents
            .index_now(file)
            .unwrap_or_else(|| self.mark_dirty(dir, name));
        (state, link, ino)
    }

    /// The children of directory `id` from a fresh `listing`, keeping the
    /// state of `old` children that were not reported changed. Returns the
    /// children, the subdirectories to index, and the kept subdirectories.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn children(
        &mut self,
        id: DirId,
        fd: BorrowedFd<'_>,
        listing: &Listing,
        old: Vec<Child>,
        fresh: &Fresh<'_>,
        force: bool,
        contents: &mut dyn Contents,
    ) -> (Vec<Child>, Vec<Box<[u8]>>, Vec<DirId>) {
        let Some(node) = self.node(id) else {
            return Default::default();
        };
        let level = node.level.clone();
        let dir_rel = node.rel.clone();
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut old = old.into_iter().peekable();
        let mut out = Vec::with_capacity(listing.entries.len());
        let mut grow = Vec::new();
        let mut kept = Vec::new();
        for entry in &listing.entries {
            let name = listing.name(entry);
            let kind = entry.kind.unwrap_or(Kind::Other);
            while let Some(gone) = old.next_if(|c| *c.name < *name) {
                self.drop_child(id, gone, contents);
            }
            let prev = old.next_if(|c| *c.name == *name);
            let is_fresh = fresh.contains(name);
            let rel = join(&dir_rel, name);
            let ignored = self
                .rules
                .is_ignored(&level, &rel, kind == Kind::Dir, &mut scratch);
            let mut link = NO_WATCH;
            let mut ino = 0;
            let mut keep = |prev: Option<Child>,
                            tree: &mut Tree,
                            (link, ino): (&mut i32, &mut u64)|
             -> Option<Node> {
                let prev = prev?;
                let same = prev.kind == kind && prev.ignored == ignored && !is_fresh;
                let kept_node = match prev.node {
                    Node::Dir(_) | Node::File(_) | Node::Plain if same => Some(prev.node),
                    // Left as it was unless reported or rules changed.
                    Node::Unindexed if same && !force => Some(Node::Unindexed),
                    _ => None,
                };
                if kept_node.is_none() {
                    tree.drop_child(id, prev, contents);
                } else {
                    (*link, *ino) = (prev.link, prev.ino);
                }
                kept_node
            };
            let node = match kind {
                Kind::Dir if name == b".git" || ignored => {
                    keep(prev, self, (&mut link, &mut ino));
                    Node::Unindexed
                }
                Kind::Dir => match keep(prev, self, (&mut link, &mut ino)) {
                    Some(Node::Dir(sub)) => {
                        kept.push(sub);
                        Node::Dir(sub)
                    }
                    Some(node) => node,
                    None => {
                        grow.push(Box::from(name));
                        Node::Pending
                    }
                },
                Kind::File if ignored => {
                    // Always searched, but watched when linked: a write
                    // through it must reach its other names in the tree.
                    if keep(prev, self, (&mut link, &mut ino)).is_none() {
                        (link, ino) = self.watch_link(id, fd, name);
                    }
                    Node::File(FileState::Always)
                }
                Kind::File => match keep(prev, self, (&mut link, &mut ino)) {
                    Some(node) => node,
                    None => {
                        let (state, watched, inode) = self.new_file(id, fd, name, &rel, contents);
                        (link, ino) = (watched, inode);
                        Node::File(state)
                    }
                },
                _ => {
                    keep(prev, self, (&mut link, &mut ino));
                    Node::Plain
                }
            };
            out.push(Child {
                name: name.into(),
                kind,
                ignored,
                node,
                link,
                ino,
            });
        }
        for gone in old {
            self.drop_child(id, gone, contents);
        }
        self.scratch = scratch;
        (out, grow, kept)
    }
}
