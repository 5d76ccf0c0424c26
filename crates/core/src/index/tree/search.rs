//! Answering walks from the tree: the start directory, the depth-first
//! walk, and the places a selective grep finds its few candidates through.

use crate::walk::Kind;

use super::{is_rule_name, join, Child, DirId, DirNode, FileState, NameFilter, Node, Tree, ROOT};

/// Where the files a selective grep may read are, derived from the tree
/// at one version (rebuilt by a pass over it when the tree changed):
/// enough to list a few candidates in walk order without walking it all.
pub(crate) struct Places {
    version: u64,
    /// Per content id, the directory of the file indexed under it
    /// (`NO_DIR`: none).
    pub(super) dir_of: Vec<DirId>,
    /// Directories holding a file searched whatever the query (dirty or
    /// never indexed), or a second file under an id already placed.
    pub(super) always: Vec<DirId>,
    /// Directories holding a subdirectory a walk would enter but that is
    /// not indexed (a walk through one is not answered from the tree).
    pub(super) blocked: Vec<DirId>,
}

pub(super) const NO_DIR: DirId = DirId::MAX;

impl Tree {
    /// The indexed directory at `rel` (from the root), if a walk starting
    /// there can be answered from the tree (INDEX.md "Semantics" 2): it is
    /// indexed, git is required from it exactly as from the root, and the
    /// rule files of the directories above it (which a walk from it reads by
    /// path, following symlinks) are no symlinks.
    pub(crate) fn start(&self, rel: &[u8]) -> Option<DirId> {
        let mut id = ROOT;
        let root_requires_git = self.rules.require_git();
        if rel.is_empty() {
            return Some(id);
        }
        for part in rel.split(|&b| b == b'/') {
            let node = self.node(id)?;
            if !plain_rule_files(node) {
                return None;
            }
            let i = node
                .children
                .binary_search_by(|c| (*c.name).cmp(part))
                .ok()?;
            let Node::Dir(sub) = node.children[i].node else {
                return None;
            };
            id = sub;
            let sub_node = self.node(id)?;
            let has_git = sub_node
                .children
                .binary_search_by(|c| (*c.name).cmp(b".git"))
                .is_ok();
            if has_git && !root_requires_git {
                return None;
            }
        }
        Some(id)
    }

    /// Walks from `start` exactly as `walk::scheduler` would (siblings in
    /// listing order, a directory before its contents), asking `search`
    /// what is left out and handing it what is not. `None` when the walk
    /// would have to enter an unindexed directory.
    pub(crate) fn dfs<S: TreeSearch + ?Sized>(&self, start: DirId, search: &mut S) -> Option<()> {
        let only_name = search.only_name();
        // Which of a directory's children the walk reads: all, or only its
        // directories and, when the search names its files exactly, the one
        // child of that name (`Some(at)`).
        let visits = |search: &mut S, node: &DirNode| -> Visits {
            if !search.wants_any(&node.names) {
                return Visits::Dirs(None);
            }
            match &only_name {
                Some(name) => Visits::Dirs(
                    (node.children.binary_search_by(|c| (*c.name).cmp(name)))
                        .ok()
                        .filter(|&at| node.children[at].kind != Kind::Dir)
                        .map(|at| at as u32),
                ),
                None => Visits::All,
            }
        };
        // (directory, next child, length of its path from `start`, which
        // children: `i` then counts in `dirs`, the named child among them)
        let first = visits(search, self.node(start)?);
        let mut stack: Vec<(DirId, usize, usize, Visits)> = vec![(start, 0, 0, first)];
        let mut rel: Vec<u8> = Vec::new();
        while let Some(top) = stack.last_mut() {
            let (id, i, len, which) = *top;
            let node = self.node(id)?;
            let next = match which {
                Visits::All => node.children.get(i),
                Visits::Dirs(named) => {
                    // The named child goes where its name sorts among the
                    // directories.
                    let before =
                        named.map_or(usize::MAX, |at| node.dirs.partition_point(|&d| d < at));
                    let at = match i.cmp(&before) {
                        std::cmp::Ordering::Less => node.dirs.get(i).copied(),
                        std::cmp::Ordering::Equal => named,
                        std::cmp::Ordering::Greater => node.dirs.get(i - 1).copied(),
                    };
                    at.map(|at| &node.children[at as usize])
                }
            };
            let Some(child) = next else {
                stack.pop();
                continue;
            };
            top.1 += 1;
            if child.kind != Kind::Dir && !search.wanted(child) {
                continue;
            }
            rel.truncate(len);
            if len > 0 {
                rel.push(b'/');
            }
            rel.extend_from_slice(&child.name);
            if search.left_out(&rel, child) {
                continue;
            }
            if !search.visit(&rel, child, node) {
                return Some(());
            }
            match child.node {
                Node::Dir(sub) => {
                    let which = match self.node(sub) {
                        Some(node) => {
                            let which = visits(search, node);
                            if which == Visits::All {
                                prefetch(&node.children);
                            }
                            which
                        }
                        None => Visits::All,
                    };
                    stack.push((sub, 0, rel.len(), which))
                }
                Node::Unindexed | Node::Pending => return None,
                _ => {}
            }
        }
        Some(())
    }

    /// The tree's `Places`, from `cache` if it is of this version, else
    /// from a pass over every directory (left in `cache`).
    fn places<'c>(&self, cache: &'c mut Option<Places>) -> &'c Places {
        if cache.as_ref().is_some_and(|p| p.version == self.version) {
            return cache.as_ref().expect("checked");
        }
        let mut places = Places {
            version: self.version,
            dir_of: Vec::new(),
            always: Vec::new(),
            blocked: Vec::new(),
        };
        for (d, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            let d = d as DirId;
            let (mut always, mut blocked) = (false, false);
            for child in &node.children {
                if child.ignored || &*child.name == b".git" {
                    continue;
                }
                match child.node {
                    Node::File(FileState::Indexed(id)) => {
                        let id = id as usize;
                        if places.dir_of.len() <= id {
                            places.dir_of.resize(id + 1, NO_DIR);
                        }
                        match places.dir_of[id] {
                            NO_DIR => places.dir_of[id] = d,
                            other => always |= other != d,
                        }
                    }
                    Node::File(_) => always = true,
                    Node::Unindexed | Node::Pending if child.kind == Kind::Dir => blocked = true,
                    _ => {}
                }
            }
            if always {
                places.always.push(d);
            }
            if blocked {
                places.blocked.push(d);
            }
        }
        cache.insert(places)
    }

    /// Whether directory `d` is `start` or below it.
    fn within(&self, mut d: DirId, start: DirId) -> bool {
        loop {
            if d == start {
                return true;
            }
            match self.node(d).and_then(|n| n.parent) {
                Some(p) => d = p,
                None => return false,
            }
        }
    }

    /// What a walk from `start` leaving out only ignored entries and `.git`
    /// (grep's without `--glob`) would visit among the files `wanted`
    /// accepts, in walk order, with their paths from the root, found
    /// through `places` for the content ids in `ids` (and the files searched
    /// whatever the query) instead of walking everything. `None` when such
    /// a walk would enter an unindexed directory (as `dfs`).
    pub(crate) fn locate(
        &mut self,
        start: DirId,
        ids: impl Iterator<Item = u32>,
        wanted: &mut dyn FnMut(&Child) -> bool,
    ) -> Option<Vec<Vec<u8>>> {
        let mut cache = self.places.take();
        let found = self.locate_in(start, self.places(&mut cache), ids, wanted);
        self.places = cache;
        found
    }

    fn locate_in(
        &self,
        start: DirId,
        places: &Places,
        ids: impl Iterator<Item = u32>,
        wanted: &mut dyn FnMut(&Child) -> bool,
    ) -> Option<Vec<Vec<u8>>> {
        if places.blocked.iter().any(|&d| self.within(d, start)) {
            return None;
        }
        let mut dirs: Vec<DirId> = ids
            .filter_map(|id| places.dir_of.get(id as usize).copied())
            .filter(|&d| d != NO_DIR)
            .chain(places.always.iter().copied())
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        // Sort keys: the path with `/` as 0, below every byte a name can
        // hold, so byte order is the walk's (siblings by name, a directory
        // before its contents).
        let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for d in dirs {
            if !self.within(d, start) {
                continue;
            }
            let Some(node) = self.node(d) else { continue };
            for child in &node.children {
                if child.ignored || &*child.name == b".git" || !wanted(child) {
                    continue;
                }
                let path = join(&node.rel, &child.name);
                let key = path
                    .iter()
                    .map(|&b| if b == b'/' { 0 } else { b })
                    .collect();
                found.push((key, path));
            }
        }
        found.sort_unstable();
        Some(found.into_iter().map(|(_, path)| path).collect())
    }
}

/// Asks the CPU to load a directory's listing into cache, all of it at
/// once: a walk reads each listing from start to end, and listings lie
/// apart in memory, so loaded one entry at a time each costs a wait.
#[inline]
fn prefetch(children: &[Child]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = children.as_ptr().cast::<i8>();
        let bytes = std::mem::size_of_val(children);
        // One cache line (64 bytes) at a time.
        for at in (0..bytes).step_by(64) {
            // SAFETY: a prefetch never faults; the address is within the slice.
            unsafe { _mm_prefetch(start.add(at), _MM_HINT_T0) };
        }
    }
    // Elsewhere the hardware's own prefetcher is left to it.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = children;
}

/// Whether a directory's rule files and repository markers are plain (a
/// walk reading them by path, as for a start directory's ancestors, sees
/// what the tree saw through descriptors).
fn plain_rule_files(node: &DirNode) -> bool {
    node.children.iter().all(|c| {
        !is_rule_name(&c.name)
            || match &*c.name {
                b".git" => matches!(c.kind, Kind::Dir | Kind::File),
                b".jj" => c.kind == Kind::Dir,
                _ => c.kind == Kind::File,
            }
    })
}

/// Which children of a directory a walk reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visits {
    All,
    /// Its directories, and the child at this place in `children`.
    Dirs(Option<u32>),
}

/// A walk answered from the tree.
pub(crate) trait TreeSearch {
    /// Whether the entry at `rel` (from the start) is left out with
    /// everything below it (`child.ignored` is the stored decision).
    fn left_out(&mut self, rel: &[u8], child: &Child) -> bool;
    /// Whether a child that is no directory can matter to the search:
    /// `false` only when `left_out` and `visit` would do nothing with it
    /// (find: its name cannot match; grep: no candidate), so the walk passes
    /// it without building its path (most entries, on a large tree).
    fn wanted(&mut self, _child: &Child) -> bool {
        true
    }
    /// Whether any child that is no directory can be `wanted` in a
    /// directory whose names `names` describes: `false` passes them all by.
    fn wants_any(&mut self, _names: &NameFilter) -> bool {
        true
    }
    /// The one name a child that is no directory must have to be `wanted`
    /// (`None`: names cannot say): the walk reads only that child and the
    /// directories.
    fn only_name(&mut self) -> Option<Vec<u8>> {
        None
    }
    /// An entry not left out, in walk order; `false` ends the walk.
    fn visit(&mut self, rel: &[u8], child: &Child, dir: &DirNode) -> bool;
}
