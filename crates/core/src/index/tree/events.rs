//! Keeping the tree fresh: inotify events applied (directories listed
//! again, rules re-decided, written files marked dirty), dirty files settled.

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;

use crate::index::watch::{
    Event, WatchError, CONTENT_CHANGED, DIR_MASK, NAMES_CHANGED, SELF_CHANGED,
};
use crate::walk::listing::Listing;
use crate::walk::rules::Level;
use crate::walk::Kind;

use super::{
    is_rule_name, join, open_beneath, Aside, Child, Contents, DirId, DirtyRef, FileState, Name,
    Node, Tree, Watched, NO_WATCH, ROOT, RULE_NAMES,
};

impl Tree {
    pub(super) fn mark_dirty(&mut self, dir: DirId, name: &[u8]) -> FileState {
        self.generation += 1;
        self.dirty.push(DirtyRef {
            dir,
            name: name.into(),
            generation: self.generation,
        });
        FileState::Dirty(self.generation)
    }

    pub(super) fn drop_child(&mut self, dir: DirId, child: Child, contents: &mut dyn Contents) {
        self.unlink(child.link, dir, &child.name);
        match child.node {
            Node::Dir(id) => self.remove_subtree(id, contents),
            Node::File(FileState::Indexed(cid)) => contents.retire(cid),
            _ => {}
        }
    }

    /// Forgets a directory and everything below it (watches dropped, content
    /// ids retired).
    fn remove_subtree(&mut self, id: DirId, contents: &mut dyn Contents) {
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let Some(node) = self.nodes.get_mut(id as usize).and_then(Option::take) else {
                continue;
            };
            self.drop_watch(node.wd, Watched::Dir(id));
            for wd in node.rule_wds {
                self.watches.remove(&wd);
                self.inotify.remove(wd);
            }
            for child in node.children {
                self.unlink(child.link, id, &child.name);
                match child.node {
                    Node::Dir(sub) => stack.push(sub),
                    Node::File(FileState::Indexed(cid)) => contents.retire(cid),
                    _ => {}
                }
            }
            self.freed.push(id);
        }
    }

    /// Makes directory `id` an unindexed child of its parent.
    pub(super) fn unindex(&mut self, id: DirId, contents: &mut dyn Contents) {
        let Some(node) = self.node(id) else { return };
        let (parent, name) = (node.parent, node.name.clone());
        self.remove_subtree(id, contents);
        if let Some(p) = parent.and_then(|p| self.node_mut(p)) {
            if let Ok(i) = p.children.binary_search_by(|c| (*c.name).cmp(&name)) {
                p.children[i].node = Node::Unindexed;
            }
        }
    }

    /// Lists directory `id` again after events: names in `fresh` (reported
    /// changed) are taken as new, others keep their state. With `force`
    /// (its rules or an ancestor's changed) its rules are read again and
    /// every subdirectory is redone the same way.
    fn reconcile(
        &mut self,
        id: DirId,
        fresh: &Fresh<'_>,
        force: bool,
        contents: &mut dyn Contents,
    ) -> Result<(), Aside> {
        let Some(node) = self.node(id) else {
            return Ok(());
        };
        let (rel, old_wd, parent) = (node.rel.clone(), node.wd, node.parent);
        let fd = match open_beneath(self.root_fd.as_fd(), &rel, true) {
            Ok(fd) => fd,
            Err(_) if id == ROOT => return Err("the root cannot be opened".to_string()),
            Err(_) => {
                // Gone, unreadable or replaced by a symlink: its parent's
                // events (if any) tell the rest.
                self.unindex(id, contents);
                return Ok(());
            }
        };
        // Watching again gives the same descriptor for the same directory;
        // another one means it was replaced: then nothing of it is kept.
        let wd = match self.inotify.add(fd.as_fd(), DIR_MASK) {
            Ok(wd) => wd,
            Err(WatchError::Limit) => {
                return Err("inotify watch limit reached (fs.inotify.max_user_watches)".into())
            }
            Err(WatchError::Other) => {
                self.unindex(id, contents);
                return Ok(());
            }
        };
        let replaced = wd != old_wd;
        if replaced {
            if self.watches.contains_key(&wd) {
                self.inotify.remove(wd);
                self.unindex(id, contents);
                return Ok(());
            }
            self.drop_watch(old_wd, Watched::Dir(id));
            self.watches.insert(wd, Watched::Dir(id));
        }
        let listing = Listing::of(fd.as_fd());
        let force = force || replaced;
        if force {
            let above = self.above(parent);
            let level = Level::for_listing(fd.as_fd(), &rel, &listing.markers, &self.rules, above);
            let rule_wds = match self.node_mut(id) {
                Some(node) => {
                    node.level = level;
                    std::mem::take(&mut node.rule_wds)
                }
                None => Vec::new(),
            };
            for wd in rule_wds {
                self.watches.remove(&wd);
                self.inotify.remove(wd);
            }
            let rule_wds = self.watch_git(id, fd.as_fd())?;
            if let Some(node) = self.node_mut(id) {
                node.rule_wds = rule_wds;
                node.wd = wd;
            }
        } else if let Some(node) = self.node_mut(id) {
            node.wd = wd;
        }
        let old = self
            .node_mut(id)
            .map(|n| std::mem::take(&mut n.children))
            .unwrap_or_default();
        let fresh = if replaced { &Fresh::All } else { fresh };
        let (children, grow, kept) =
            self.children(id, fd.as_fd(), &listing, old, fresh, force, contents);
        if let Some(node) = self.node_mut(id) {
            node.set_children(children);
        }
        drop(fd);
        self.grow_all(id, grow, contents, None)?;
        if force {
            for sub in kept {
                self.reconcile(sub, &Fresh::None, true, contents)?;
            }
        }
        Ok(())
    }

    /// Applies inotify events: re-lists the directories whose names changed,
    /// recomputes decisions below changed rule files, marks written files
    /// dirty. `Err` when the index must step aside.
    /// Whether `apply` would pass every one of `events` by: each on a watch
    /// kept for rule files only (the root's ancestors, `.git`), about
    /// another name (`/tmp` sees every temporary file of the machine).
    pub(crate) fn passes_by(&self, events: &[Event]) -> bool {
        events.iter().all(|ev| match self.watches.get(&ev.wd) {
            Some(Watched::Rules { names, .. }) => {
                let name = ev.name.as_deref();
                ev.mask & (SELF_CHANGED | libc::IN_Q_OVERFLOW) == 0
                    && name.is_some_and(|n| !names.contains(&n))
                    && self.on_path.get(&ev.wd).map(|n| &**n) != name
            }
            _ => false,
        })
    }

    pub(crate) fn apply(
        &mut self,
        events: &[Event],
        contents: &mut dyn Contents,
    ) -> Result<(), Aside> {
        self.version += 1;
        let mut changed: HashMap<DirId, HashSet<Box<[u8]>>> = HashMap::new();
        let mut relist: HashSet<DirId> = HashSet::new();
        let mut forced: HashSet<DirId> = HashSet::new();
        let mut written: Vec<(DirId, &[u8])> = Vec::new();
        let mut linked_writes: Vec<Name> = Vec::new();
        let mut global = false;
        for ev in events {
            if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                return Err("inotify queue overflow: events were lost".to_string());
            }
            let Some(&watched) = self.watches.get(&ev.wd) else {
                continue;
            };
            let name = ev.name.as_deref();
            match watched {
                Watched::Link => {
                    // Written (through any of its names, in the tree or not):
                    // every name here is dirty.
                    if let Some(names) = self.links.get(&ev.wd) {
                        linked_writes.extend(names.iter().cloned());
                    }
                    if ev.mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF) != 0 {
                        self.links.remove(&ev.wd);
                        self.watches.remove(&ev.wd);
                    }
                }
                Watched::Dir(id) => {
                    if ev.mask & SELF_CHANGED != 0 {
                        if id == ROOT {
                            return Err("the root was deleted or moved".to_string());
                        }
                        // Gone, moved or no longer watched: its parent
                        // lists again what is under its name now.
                        if let Some(node) = self.node(id) {
                            if let Some(p) = node.parent {
                                changed.entry(p).or_default().insert(node.name.clone());
                                relist.insert(p);
                            }
                        }
                        continue;
                    }
                    let Some(name) = name else {
                        // Its mode changed: can it still be read?
                        relist.insert(id);
                        continue;
                    };
                    if ev.mask & NAMES_CHANGED != 0 {
                        changed.entry(id).or_default().insert(name.into());
                        relist.insert(id);
                    }
                    if ev.mask & CONTENT_CHANGED != 0 {
                        written.push((id, name));
                    }
                    if is_rule_name(name) && ev.mask & (NAMES_CHANGED | CONTENT_CHANGED) != 0 {
                        if id == ROOT {
                            global = true;
                        }
                        forced.insert(id);
                        relist.insert(id);
                    }
                }
                Watched::Rules { dir, names } => {
                    if ev.mask & NAMES_CHANGED != 0
                        && name.is_some()
                        && self.on_path.get(&ev.wd).map(|n| &**n) == name
                    {
                        return Err(
                            "the root (or a directory above it) was deleted or moved".into()
                        );
                    }
                    let relevant =
                        ev.mask & SELF_CHANGED != 0 || name.is_some_and(|n| names.contains(&n));
                    if !relevant {
                        continue;
                    }
                    match dir {
                        None if ev.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0
                            && names == RULE_NAMES.as_slice() =>
                        {
                            return Err("an ancestor of the root was deleted or moved".into())
                        }
                        None => global = true,
                        Some(d) => {
                            forced.insert(d);
                            relist.insert(d);
                        }
                    }
                }
            }
        }
        written.extend(linked_writes.iter().map(|(d, n)| (*d, &**n)));
        let result = self.apply_changes(global, relist, &changed, &forced, &written, contents);
        self.attach_links(contents);
        self.free.append(&mut self.freed);
        result
    }

    fn apply_changes(
        &mut self,
        global: bool,
        relist: HashSet<DirId>,
        changed: &HashMap<DirId, HashSet<Box<[u8]>>>,
        forced: &HashSet<DirId>,
        written: &[(DirId, &[u8])],
        contents: &mut dyn Contents,
    ) -> Result<(), Aside> {
        if global {
            // Watched before read: a change after the read is an event.
            self.watch_ancestors()?;
            self.rules = self.new_rules();
            self.reconcile(ROOT, &Fresh::None, true, contents)?;
        }
        // Parents first: a subtree they drop needs no re-listing.
        let mut order: Vec<(usize, DirId)> = relist
            .into_iter()
            .filter_map(|id| self.node(id).map(|n| (n.rel.len(), id)))
            .collect();
        order.sort_unstable();
        for (_, id) in order {
            let empty = HashSet::new();
            let names = changed.get(&id).unwrap_or(&empty);
            self.reconcile(id, &Fresh::Names(names), forced.contains(&id), contents)?;
        }
        for &(id, name) in written {
            let Some(node) = self.node_mut(id) else {
                continue;
            };
            let Ok(i) = node.children.binary_search_by(|c| (*c.name).cmp(name)) else {
                continue;
            };
            let child = &node.children[i];
            if child.kind != Kind::File || child.ignored {
                continue;
            }
            if let Node::File(FileState::Indexed(cid)) = child.node {
                contents.retire(cid);
            }
            let state = self.mark_dirty(id, name);
            if let Some(node) = self.node_mut(id) {
                node.children[i].node = Node::File(state);
            }
        }
        Ok(())
    }

    /// Where the dirty file `r` is, if it is still dirty with that
    /// generation: its path from the root.
    pub(crate) fn dirty_path(&self, r: &DirtyRef) -> Option<Vec<u8>> {
        let node = self.node(r.dir)?;
        let i = node
            .children
            .binary_search_by(|c| (*c.name).cmp(&r.name))
            .ok()?;
        (node.children[i].node == Node::File(FileState::Dirty(r.generation)))
            .then(|| join(&node.rel, &r.name))
    }

    /// Records the re-indexed state of dirty file `r`, if it is still dirty
    /// with that generation (else the caller retires what it indexed).
    /// `linked`: the read saw more than one link, which is indexable only if
    /// the file's inode is watched.
    pub(crate) fn settle(&mut self, r: &DirtyRef, state: FileState, linked: bool) -> bool {
        self.version += 1;
        let Some(node) = self.node_mut(r.dir) else {
            return false;
        };
        let Ok(i) = node.children.binary_search_by(|c| (*c.name).cmp(&r.name)) else {
            return false;
        };
        let child = &mut node.children[i];
        if child.node != Node::File(FileState::Dirty(r.generation)) {
            return false;
        }
        if linked && child.link == NO_WATCH {
            child.node = Node::File(FileState::Always);
            return false;
        }
        child.node = Node::File(state);
        true
    }
}

/// Which names of a re-listed directory are taken as new.
pub(crate) enum Fresh<'a> {
    All,
    None,
    Names(&'a HashSet<Box<[u8]>>),
}

impl Fresh<'_> {
    pub(super) fn contains(&self, name: &[u8]) -> bool {
        match self {
            Fresh::All => true,
            Fresh::None => false,
            Fresh::Names(names) => names.contains(name),
        }
    }
}
