//! grep from the index: the candidates of a pattern's n-gram query, and
//! the files in scope among them in walk order (through the tree's places
//! when few, else by walking it).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use ignore::overrides::Override;
use ignore::Match;

use super::tree::{open_beneath, Tree};
use super::tree::{Child, DirNode, FileState, Node, TreeSearch};
use super::{query, tree, Index};
use crate::walk::Kind;

/// A grep whose candidates are more than 1/BROAD_SHARE of the indexed files
/// walks live instead: reading most files anyway, the walk's early stop at
/// the limit wins over the index's listing of the whole scope.
const BROAD_SHARE: usize = 4;
/// Not below this many candidates: listing a thousand files
/// costs well under a millisecond, and the index still spares the rest.
const BROAD_MIN_FILES: usize = 1000;
/// A grep without `--glob` whose candidates are at most this many finds
/// them through the tree's id → directory map instead of walking the tree:
/// that costs a scan of their directories and a sort of their paths, which
/// for this many stays well under a walk of a large tree (the kernel's 83k
/// entries: about 3 ms), while more candidates approach the broad rule's
/// share anyway on trees where walking matters.
const LOCATE_MAX: usize = 2048;

impl Index {
    /// grep's files in scope from `dir` (with its `--glob` overrides) that
    /// may hold a match of the pattern, in walk order: the indexed files
    /// whose n-grams satisfy the pattern's query, and every dirty or
    /// never-indexed one. `None` when the index cannot answer.
    pub(crate) fn grep_files(
        &self,
        dir: &Path,
        pattern: &str,
        ignore_case: bool,
        literal: bool,
        overrides: Option<&Override>,
    ) -> Option<GrepFiles> {
        let plan = query::plan(pattern, ignore_case, literal);
        // Nothing to narrow by (`\w+`, `.`): the live walk, which stops at
        // the limit, beats listing every file in scope first.
        if matches!(plan, query::GramQuery::All) {
            return None;
        }
        let pieces = query::exact_pieces(pattern, ignore_case, literal);
        self.answer(dir, |tree, start, content| {
            // `--glob` may take back what the stored decisions leave out,
            // but never a denied-read file, which they do not tell apart.
            if overrides.is_some() && tree.rules().has_policy() {
                return None;
            }
            let mut candidates = query::candidates(&plan, &content.postings)?;
            content.pass_by(&mut candidates, &pieces);
            let postings = &content.postings;
            // Likewise when the n-grams leave most files (`static`).
            let broad = candidates.len();
            if broad > BROAD_MIN_FILES && broad * BROAD_SHARE > postings.id_end() as usize {
                return None;
            }
            // A few candidates: found where they are, not by a walk.
            let locate = overrides.is_none() && broad <= LOCATE_MAX;
            let files = grep_scope(tree, start, &candidates, overrides, locate)?;
            let root_fd = tree.root_fd().try_clone_to_owned().ok()?;
            Some(GrepFiles { root_fd, files })
        })
    }
}

/// A file grep searches: its path from the root (to open it) and from the
/// searched directory (as shown).
pub(crate) struct GrepFile {
    rel_root: Vec<u8>,
    pub(crate) shown: Arc<str>,
}

/// grep's candidates, and the root they are opened beneath.
pub(crate) struct GrepFiles {
    root_fd: OwnedFd,
    pub(crate) files: Vec<GrepFile>,
}

impl GrepFiles {
    /// Opens a candidate as the walker opens a file: no symlink anywhere on
    /// its path (a component swapped for one fails), non-blocking.
    pub(crate) fn open(&self, file: &GrepFile) -> std::io::Result<File> {
        Ok(open_beneath(self.root_fd.as_fd(), &file.rel_root, false)?.into())
    }
}

/// grep's walk over the tree: what `walk` with grep's visitor would search
/// (overrides first, then the stored decision; `.git` skipped; files only),
/// kept when a candidate.
pub(super) struct GrepScope<'a> {
    overrides: Option<&'a Override>,
    candidates: Option<&'a query::IdSet>,
    files: Vec<GrepFile>,
}

impl TreeSearch for GrepScope<'_> {
    fn left_out(&mut self, rel: &[u8], child: &Child) -> bool {
        let is_dir = child.kind == Kind::Dir;
        let rel_path = Path::new(std::ffi::OsStr::from_bytes(rel));
        let out = match self.overrides.map(|o| o.matched(rel_path, is_dir)) {
            Some(Match::Ignore(_)) => true,
            Some(Match::Whitelist(_)) => false,
            _ => child.ignored,
        };
        out || &*child.name == b".git"
    }

    fn wanted(&mut self, child: &Child) -> bool {
        self.candidate(child)
    }

    fn visit(&mut self, rel: &[u8], child: &Child, dir: &DirNode) -> bool {
        if self.candidate(child) {
            self.files.push(GrepFile {
                rel_root: tree::join(&dir.rel, &child.name),
                shown: shown_path(rel),
            });
        }
        true
    }
}

/// The files in scope from `start` that are candidates, in walk order:
/// found through the tree's places when `locate` (only without
/// `overrides`), else by walking it. `None` when a walk would enter an
/// unindexed directory.
pub(super) fn grep_scope(
    tree: &mut Tree,
    start: tree::DirId,
    candidates: &query::IdSet,
    overrides: Option<&Override>,
    locate: bool,
) -> Option<Vec<GrepFile>> {
    let mut search = GrepScope {
        overrides,
        candidates: Some(candidates),
        files: Vec::new(),
    };
    if !(locate && overrides.is_none()) {
        tree.dfs(start, &mut search)?;
        return Some(search.files);
    }
    let prefix = tree.node(start)?.rel.len();
    // The path from `start`: after its own and a `/`.
    let from = if prefix == 0 { 0 } else { prefix + 1 };
    let paths = tree.locate(start, candidates.iter(), &mut |c| search.candidate(c))?;
    Some(
        paths
            .into_iter()
            .map(|rel_root| GrepFile {
                shown: shown_path(&rel_root[from..]),
                rel_root,
            })
            .collect(),
    )
}

/// A path as the walk shows it: lossy UTF-8, `/` separators.
pub(super) fn shown_path(rel: &[u8]) -> Arc<str> {
    Arc::from(String::from_utf8_lossy(rel).replace('\\', "/"))
}

impl GrepScope<'_> {
    /// A file grep searches if it is in scope: a candidate of the query,
    /// dirty or never indexed.
    fn candidate(&self, child: &Child) -> bool {
        let candidate = match child.node {
            Node::File(FileState::Indexed(id)) => self.candidates.is_none_or(|c| c.contains(id)),
            Node::File(_) => true,
            _ => false,
        };
        candidate && child.kind == Kind::File
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{IndexOptions, IndexState};
    use crate::root::Root;
    use std::fs;
    use std::sync::atomic::Ordering;

    fn files(found: Option<Vec<GrepFile>>) -> Option<Vec<(Vec<u8>, String)>> {
        found.map(|f| {
            f.into_iter()
                .map(|f| (f.rel_root, f.shown.to_string()))
                .collect()
        })
    }

    fn dirs_under(d: &Path) -> Vec<std::path::PathBuf> {
        let mut out = vec![d.to_path_buf()];
        let mut i = 0;
        while i < out.len() {
            if let Ok(rd) = fs::read_dir(&out[i]) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != ".git" {
                        out.push(e.path());
                    }
                }
            }
            i += 1;
        }
        out.sort();
        out
    }

    /// Random changes (files written, moved, deleted; directories made,
    /// moved, removed; ignore rules; unreadable directories), each followed
    /// by greps from the root and a random directory: the candidates found
    /// through the tree's places are the walk's, in its order, with the
    /// same paths; re-indexing runs in the second half.
    #[test]
    fn located_candidates_equal_the_walk() {
        let t = tempfile::tempdir().unwrap();
        let d = fs::canonicalize(t.path()).unwrap();
        for (f, text) in [
            ("a/x.rs", "needle"),
            ("a/b/y.rs", "hay"),
            ("c/z.txt", "Needle"),
            ("c/d/e/w.rs", "needle hay"),
            ("a-b/k.rs", "needle"),
            ("a.c", "needle"),
        ] {
            let p = d.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        let root = Arc::new(Root::open(&d, None).unwrap());
        let index = Index::start(root.clone(), IndexOptions::default());
        assert_eq!(index.wait_ready().state, IndexState::Ready);
        index.inner().paused.store(true, Ordering::SeqCst);
        let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        let names = ["a", "b", "a-b", "a.c", "x.rs", "y.rs", "z.txt", "é", "ab"];
        let texts = ["needle", "hay", "NEEDLE hay", "a needle", "other"];
        let queries = [
            ("needle", false, false),
            ("needle", true, false),
            ("hay", false, true),
            ("ne+dle", false, false),
        ];
        let mut located = 0;
        for step in 0..300 {
            if step == 150 {
                index.inner().paused.store(false, Ordering::SeqCst);
                index.inner().wake();
            }
            let dirs = dirs_under(&d);
            let dir = &dirs[next(dirs.len())];
            let name = names[next(names.len())];
            let p = dir.join(name);
            let other = dirs[next(dirs.len())].join(names[next(names.len())]);
            let _ = match next(10) {
                0..=2 => fs::write(&p, texts[next(texts.len())]),
                3 => fs::create_dir(&p),
                4 => fs::remove_file(&p),
                5 => fs::remove_dir_all(&p),
                6 if !other.starts_with(&p) => fs::rename(&p, &other),
                7 => fs::write(dir.join(".gitignore"), format!("{name}\n")),
                8 => fs::remove_file(dir.join(".gitignore")),
                _ => {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = if next(2) == 0 { 0o000 } else { 0o755 };
                    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
                }
            };
            let dirs = dirs_under(&d);
            for at in [&d, &dirs[next(dirs.len())]] {
                for (pattern, ic, lit) in queries {
                    // Both ways under one hold of the lock: the same tree.
                    let plan = query::plan(pattern, ic, lit);
                    let both = index.answer(at, |tree, start, content| {
                        let c = query::candidates(&plan, &content.postings)?;
                        let by_walk = files(grep_scope(tree, start, &c, None, false));
                        let by_places = files(grep_scope(tree, start, &c, None, true));
                        Some((by_walk, by_places))
                    });
                    let (by_walk, by_places) = both.unwrap_or_default();
                    assert_eq!(by_places, by_walk, "step {step}: {pattern:?} from {at:?}");
                    located += usize::from(by_places.is_some());
                }
            }
        }
        for dir in dirs_under(&d) {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
        }
        // A file located while dirty, then re-indexed by the thread (no
        // event in between): located under its new id.
        let both_ways = || {
            let plan = query::plan("needle", false, false);
            index
                .answer(&d, |tree, start, content| {
                    let c = query::candidates(&plan, &content.postings)?;
                    let by_walk = files(grep_scope(tree, start, &c, None, false));
                    let by_places = files(grep_scope(tree, start, &c, None, true));
                    Some((by_walk, by_places))
                })
                .unwrap()
        };
        index.inner().paused.store(true, Ordering::SeqCst);
        fs::write(d.join("fresh.rs"), "needle").unwrap();
        for settled in [false, true] {
            if settled {
                index.inner().paused.store(false, Ordering::SeqCst);
                index.inner().wake();
                while index.stats().dirty_files > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            let (by_walk, by_places) = both_ways();
            assert_eq!(by_places, by_walk, "settled: {settled}");
            let found = by_places.unwrap();
            assert!(found.iter().any(|(p, _)| p == b"fresh.rs"), "{found:?}");
        }
        assert_eq!(index.stats().state, IndexState::Ready);
        // Not vacuous: most greps were answered (and so located).
        assert!(located > 1200, "located {located} of 2400");
    }
}
