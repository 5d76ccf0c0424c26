//! Which entries a walk leaves out: the `.ignore`, `.gitignore` and
//! `.git/info/exclude` rules of each directory and of the start directory's
//! ancestors, combined the way `ignore`'s walker combines them (as ripgrep's
//! `ignore` crate keeps them in `dir.rs`, apart from its walker).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::listing::{kind_at, DirRef, Markers};
use super::rule_file::{read_at, read_path};
use super::{os_str, Kind};
use crate::policy::Policy;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use ignore::Match;

/// The rules of one walk: the ignore files above the start directory and how
/// they combine.
pub struct Rules {
    /// The start directory's real path: a `.git` file inside the walk names
    /// its git directory relative to its own directory.
    start: PathBuf,
    /// The globs this walk's levels hold compiled.
    budget: Arc<RuleBudget>,
    /// With it, `.gitignore` counts only inside a repository and parent
    /// rules stop at each repository's top (see `new`).
    require_git: bool,
    overrides: Option<Override>,
    /// Rules of the start directory's ancestors, nearest first.
    ancestors: Option<Arc<Level>>,
    /// The workspace policy's read rules, when it has any.
    denied: Option<Denied>,
}

/// A policy's read rules as a walk asks them: denied-read entries are left
/// out before any other rule (no `--glob` takes one back), a directory with
/// everything below it.
struct Denied {
    policy: Arc<Policy>,
    /// The start directory's path from the workspace root, with a trailing
    /// `/` unless it is the root: an entry's path from the root follows.
    prefix: Vec<u8>,
}

impl Rules {
    /// The rules for a walk of `start`, with ripgrep's
    /// `--glob` overrides when given (rooted at `start`).
    ///
    /// Nested repository boundaries: ripgrep and fd only notice `.git` (and
    /// stop parent `.gitignore` rules there) when they require git, and then
    /// ignore `.gitignore` outside repositories. So, as pi 1.6.0 does with fd
    /// (<https://github.com/earendil-works/pi/issues/5960>), git is required
    /// exactly when the walk starts inside a repository (`.git` in the
    /// directory or an ancestor).
    pub fn new(start: &Path, overrides: Option<Override>) -> Rules {
        // Ancestors are those of the real directory (as `ignore` finds them),
        // also when a caller outside a root passes a symlinked or `..` path.
        let real = std::fs::canonicalize(start);
        let start = real.as_deref().unwrap_or(start);
        // Each ancestor's `.git`, looked at once: it decides `require_git`
        // and is that ancestor's repository marker.
        let mut chain: Vec<(&Path, Option<std::fs::Metadata>)> = start
            .ancestors()
            .skip(1)
            .map(|dir| (dir, std::fs::metadata(dir.join(".git")).ok()))
            .collect();
        chain.reverse();
        let require_git = start.join(".git").exists() || chain.iter().any(|(_, git)| git.is_some());
        let budget = Arc::new(RuleBudget::default());
        let mut ancestors: Option<Arc<Level>> = None;
        for (dir, git) in chain {
            let level =
                Level::of_ancestor(dir, git, start, require_git, &budget, ancestors.clone());
            ancestors = Some(Arc::new(level));
        }
        Rules {
            start: start.to_path_buf(),
            budget,
            require_git,
            overrides,
            ancestors,
            denied: None,
        }
    }

    /// The same rules, leaving out what `policy` denies reading; `start` is
    /// the start directory's real path from the workspace root, which the
    /// caller has already let the walk read (so only entries below it are
    /// asked, each on its own: a denied directory is never entered).
    pub fn with_policy(mut self, policy: Option<&Arc<Policy>>, start: &Path) -> Rules {
        self.denied = policy.filter(|p| !p.reads_unrestricted()).map(|p| {
            let mut prefix = start.as_os_str().as_encoded_bytes().to_vec();
            if !prefix.is_empty() {
                prefix.push(b'/');
            }
            Denied {
                policy: p.clone(),
                prefix,
            }
        });
        self
    }

    /// Whether a policy with read rules is asked.
    #[cfg(target_os = "linux")]
    pub(crate) fn has_policy(&self) -> bool {
        self.denied.is_some()
    }

    /// Whether the policy denies reading the entry at `rel` (from the start).
    pub(crate) fn is_denied(&self, rel: &[u8], is_dir: bool, scratch: &mut Vec<u8>) -> bool {
        let Some(denied) = &self.denied else {
            return false;
        };
        let full = if denied.prefix.is_empty() {
            rel
        } else {
            scratch.clear();
            scratch.extend_from_slice(&denied.prefix);
            scratch.extend_from_slice(rel);
            scratch
        };
        (denied.policy)
            .read_denial_entry(Path::new(os_str(full)), is_dir)
            .is_some()
    }

    /// Whether the entry at `rel` (in a directory whose rules are `level`) is
    /// left out, the way `ignore`'s walker decides.
    pub(crate) fn is_ignored(
        &self,
        level: &Level,
        rel: &[u8],
        is_dir: bool,
        scratch: &mut Vec<u8>,
    ) -> bool {
        if self.is_denied(rel, is_dir, scratch) {
            return true;
        }
        let rel_path = Path::new(os_str(rel));
        if let Some(overrides) = &self.overrides {
            match overrides.matched(rel_path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        let any_git = !self.require_git || level.git_in_chain;
        let mut found = Found::default();
        let mut levels = Some(level);
        while let Some(l) = levels {
            // Each matcher sees the path relative to its own directory.
            match &l.place {
                Place::Inside { strip } => {
                    let candidate = rel.get(*strip..).unwrap_or(rel);
                    found.check(l, Path::new(os_str(candidate)), is_dir, any_git);
                }
                Place::Above { .. } if !l.rules_in_chain => break,
                Place::Above { start } if l.has_rules => {
                    scratch.clear();
                    scratch.extend_from_slice(start);
                    scratch.push(b'/');
                    scratch.extend_from_slice(rel);
                    found.check(l, Path::new(os_str(scratch)), is_dir, any_git);
                }
                Place::Above { .. } => found.saw_git |= l.has_git,
            }
            levels = l.parent.as_deref();
        }
        found.is_ignore()
    }

    /// Whether `.gitignore` rules count only inside a repository (see `new`).
    #[cfg(target_os = "linux")]
    pub(crate) fn require_git(&self) -> bool {
        self.require_git
    }

    /// The rules a listing of the start directory chains to: its ancestors',
    /// or none.
    pub(crate) fn above_start(&self) -> Arc<Level> {
        self.ancestors.clone().unwrap_or_else(|| {
            let place = Place::Above { start: Vec::new() };
            Arc::new(Level::new(
                [None, None, None],
                &self.budget,
                false,
                place,
                None,
            ))
        })
    }
}

/// The first match of each kind of rule, nearest directory first.
#[derive(Default)]
struct Found {
    ignore: Option<bool>,
    gitignore: Option<bool>,
    exclude: Option<bool>,
    /// A repository's top was passed: git rules above it do not apply.
    saw_git: bool,
}

impl Found {
    fn check(&mut self, level: &Level, path: &Path, is_dir: bool, any_git: bool) {
        let first = |slot: &mut Option<bool>, matcher: &Gitignore| {
            if slot.is_none() && !matcher.is_empty() {
                *slot = decided(matcher.matched(path, is_dir));
            }
        };
        first(&mut self.ignore, &level.ignore);
        if any_git && !self.saw_git {
            first(&mut self.gitignore, &level.gitignore);
            first(&mut self.exclude, &level.exclude);
        }
        self.saw_git |= level.has_git;
    }

    fn is_ignore(&self) -> bool {
        self.ignore.or(self.gitignore).or(self.exclude) == Some(true)
    }
}

/// `Some(true)` for an ignore match, `Some(false)` for a whitelist match.
fn decided<T>(m: Match<T>) -> Option<bool> {
    match m {
        Match::None => None,
        Match::Ignore(_) => Some(true),
        Match::Whitelist(_) => Some(false),
    }
}

/// The rules of one directory's ignore files, chained to its parent's.
pub(crate) struct Level {
    ignore: Arc<Gitignore>,
    gitignore: Arc<Gitignore>,
    exclude: Arc<Gitignore>,
    /// A repository's top (`.git` or `.jj` here, when git is required).
    has_git: bool,
    /// Whether this level or one above it is a repository's top.
    git_in_chain: bool,
    place: Place,
    has_rules: bool,
    /// Whether this level or one above it has any rule.
    rules_in_chain: bool,
    parent: Option<Arc<Level>>,
    /// The globs compiled for it, in its walk's budget until it goes.
    _held: Held,
}

/// Where a level's directory is. Its matchers are rooted at "" and given
/// paths relative to that directory, which the walk cuts from what it has
/// (cheaper than `Gitignore`'s own prefix stripping, run for every entry).
enum Place {
    /// Inside the walk: entries' relative paths start with `strip` bytes of
    /// this directory's path and a `/`.
    Inside { strip: usize },
    /// An ancestor of the start directory, whose path relative to it is
    /// `start`.
    Above { start: Vec<u8> },
}

impl Level {
    /// The level of the texts of a directory's `.ignore`, `.gitignore` and
    /// exclude file, compiled within `budget`.
    fn new(
        [ignore, gitignore, exclude]: [Option<Vec<u8>>; 3],
        budget: &Arc<RuleBudget>,
        has_git: bool,
        place: Place,
        parent: Option<Arc<Level>>,
    ) -> Level {
        let mut held = Held {
            budget: budget.clone(),
            globs: 0,
        };
        let [ignore, gitignore, exclude] = [ignore, gitignore, exclude].map(|text| {
            let (m, globs) = matcher(text, budget);
            held.globs += globs;
            m
        });
        let above = parent.as_deref();
        let has_rules = !(ignore.is_empty() && gitignore.is_empty() && exclude.is_empty());
        Level {
            git_in_chain: has_git || above.is_some_and(|p| p.git_in_chain),
            rules_in_chain: has_rules || above.is_some_and(|p| p.rules_in_chain),
            ignore,
            gitignore,
            exclude,
            has_git,
            place,
            has_rules,
            parent,
            _held: held,
        }
    }

    /// An ancestor of the start directory, read by path: only its rules are
    /// used, never its content.
    /// `git` is what `dir/.git` is, if anything.
    fn of_ancestor(
        dir: &Path,
        git: Option<std::fs::Metadata>,
        start: &Path,
        require_git: bool,
        budget: &Arc<RuleBudget>,
        parent: Option<Arc<Level>>,
    ) -> Level {
        let read = |name: &str| read_path(&dir.join(name));
        let has_git = require_git && (git.is_some() || dir.join(".jj").exists());
        let exclude = git
            .and_then(|md| git_common_dir(dir, md.is_file()))
            .and_then(|common| read_path(&common.join("info/exclude")));
        Level::new(
            [read(".ignore"), read(".gitignore"), exclude],
            budget,
            has_git,
            Place::Above {
                start: start
                    .strip_prefix(dir)
                    .unwrap_or(start)
                    .as_os_str()
                    .as_encoded_bytes()
                    .to_vec(),
            },
            parent,
        )
    }

    /// The rules a listed directory's entries are judged by: a level of its
    /// own when its listing holds an ignore file or a repository marker, else
    /// its parent's (most directories hold neither).
    pub(crate) fn for_listing(
        dir: DirRef<'_>,
        rel: &[u8],
        markers: &Markers,
        rules: &Rules,
        parent: Arc<Level>,
    ) -> Arc<Level> {
        if markers.any() {
            Arc::new(Level::of_dir(dir, rel, markers, rules, parent))
        } else {
            parent
        }
    }

    /// A directory inside the walk, read through its descriptor; `rel` is its
    /// path relative to the start directory.
    pub(crate) fn of_dir(
        dir: DirRef<'_>,
        rel: &[u8],
        markers: &Markers,
        rules: &Rules,
        parent: Arc<Level>,
    ) -> Level {
        let read = |present: bool, name: &str| present.then(|| read_at(dir, name)).flatten();
        let git_kind = markers.git.then(|| kind_at(dir, b".git")).flatten();
        let exclude = match git_kind {
            Some(Kind::Dir) => read_at(dir, ".git/info/exclude"),
            // A worktree's or submodule's `.git` file names the real git
            // directory (outside the tree, like an ancestor: rules only).
            Some(Kind::File) => read_at(dir, ".git")
                .and_then(|text| gitdir_line(&rules.start.join(os_str(rel)), &text))
                .and_then(|gitdir| common_dir_of(&gitdir))
                .and_then(|common| read_path(&common.join("info/exclude"))),
            _ => None,
        };
        let has_git = rules.require_git && (git_kind.is_some() || markers.jj);
        Level::new(
            [
                read(markers.ignore, ".ignore"),
                read(markers.gitignore, ".gitignore"),
                exclude,
            ],
            &rules.budget,
            has_git,
            Place::Inside {
                strip: if rel.is_empty() { 0 } else { rel.len() + 1 },
            },
            Some(parent),
        )
    }
}

/// The git directory whose `info/exclude` applies to the repository at `dir`
/// (`.git` itself, or for a `.git` file, the common dir it leads to).
fn git_common_dir(dir: &Path, dot_git_is_file: bool) -> Option<PathBuf> {
    if !dot_git_is_file {
        return Some(dir.join(".git"));
    }
    let text = read_path(&dir.join(".git"))?;
    common_dir_of(&gitdir_line(dir, &text)?)
}

/// The git directory a `.git` file in `dir` names: a relative path is
/// relative to `dir`, as git reads it (never to the process's directory).
fn gitdir_line(dir: &Path, text: &[u8]) -> Option<PathBuf> {
    let line = text.split(|&b| b == b'\n').next()?;
    let path = line.strip_prefix(b"gitdir: ")?;
    Some(dir.join(text_path(path)?))
}

/// A path written in a file (git's): bytes as they are on unix; UTF-8 on
/// Windows (git writes it so), anything else no path.
fn text_path(bytes: &[u8]) -> Option<&std::ffi::OsStr> {
    #[cfg(unix)]
    return Some(os_str(bytes));
    #[cfg(windows)]
    return std::str::from_utf8(bytes).ok().map(std::ffi::OsStr::new);
}

/// A worktree's git directory holds a `commondir` file; a submodule's does
/// not, and then no exclude file applies (as in `ignore`).
fn common_dir_of(gitdir: &Path) -> Option<PathBuf> {
    let text = read_path(&gitdir.join("commondir"))?;
    let line = text.split(|&b| b == b'\n').next()?;
    let common = Path::new(text_path(line)?);
    Some(if line.starts_with(b".") {
        gitdir.join(common)
    } else {
        common.to_path_buf()
    })
}

/// Globs one ignore file may hold, at most. Compiled, a glob costs about
/// 8 KiB (globset's regex set and its lazy DFA), so 5,000 are ~40 MiB, and a
/// file past them (a repository's to write) gives no rules at all: as when
/// globset refuses a file's set (its NFA past 10 MiB), which ripgrep and fd
/// then warn about and use no rules of. Real `.gitignore` files hold tens to
/// a few hundred.
pub(crate) const MAX_RULE_GLOBS: usize = 5_000;

/// Globs one walk (or one index) holds compiled at once, at most (~160
/// MiB): past them, a further ignore file gives no rules, as one past
/// [`MAX_RULE_GLOBS`]. A tree of many large ignore files is a repository's
/// to make too; real trees hold a few thousand globs in all.
pub(crate) const MAX_WALK_RULE_GLOBS: usize = 20_000;

/// Globs kept compiled for the process, at most (~80 MiB): past them the
/// cache starts over. Far more than a large tree's ignore files hold, so
/// only a process walking many different trees starts over.
const CACHED_GLOBS: usize = 10_000;

/// The globs a walk's levels hold compiled ([`MAX_WALK_RULE_GLOBS`]).
#[derive(Default)]
pub(crate) struct RuleBudget(AtomicUsize);

impl RuleBudget {
    /// Whether `globs` more fit; if so they are held.
    fn take(&self, globs: usize) -> bool {
        let fits = |held: usize| {
            held.checked_add(globs)
                .filter(|&total| total <= MAX_WALK_RULE_GLOBS)
        };
        (self.0)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits)
            .is_ok()
    }
}

/// Globs a level holds in its walk's budget, given back when it goes.
struct Held {
    budget: Arc<RuleBudget>,
    globs: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.0.fetch_sub(self.globs, Ordering::Relaxed);
    }
}

/// A matcher for an ignore file's text (given paths relative to the file's
/// directory), and the globs it holds in `budget`: none past
/// [`MAX_RULE_GLOBS`] or past the budget. Compiled matchers are kept for
/// the process, keyed by the text itself (so never stale): an agent
/// searches the same tree again and again, and compiling the matchers is a
/// good part of a walk, as is warming each matcher's lazy DFA.
fn matcher(text: Option<Vec<u8>>, budget: &RuleBudget) -> (Arc<Gitignore>, usize) {
    /// Text kept at most; past it the cache starts over.
    const CACHED_BYTES: usize = 8 << 20;
    /// The text and globs held, and the matchers by text.
    #[derive(Default)]
    struct Compiled {
        bytes: usize,
        globs: usize,
        by_text: Option<HashMap<Vec<u8>, Arc<Gitignore>>>,
    }
    static COMPILED: Mutex<Compiled> = Mutex::new(Compiled {
        bytes: 0,
        globs: 0,
        by_text: None,
    });
    let none = || (Arc::new(Gitignore::empty()), 0);
    let Some(text) = text else {
        return none();
    };
    let globs = glob_lines(&text);
    if globs > MAX_RULE_GLOBS || !budget.take(globs) {
        return none();
    }
    let lock = || COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = lock().by_text.as_ref().and_then(|c| c.get(&text)) {
        return (m.clone(), globs);
    }
    let m = Arc::new(compile(&text));
    let mut cache = lock();
    if cache.bytes + text.len() > CACHED_BYTES || cache.globs + globs > CACHED_GLOBS {
        *cache = Compiled::default();
    }
    cache.bytes += text.len();
    cache.globs += globs;
    cache
        .by_text
        .get_or_insert_with(HashMap::new)
        .insert(text, m.clone());
    (m, globs)
}

/// The lines of an ignore file gitignore reads as globs: all but blank ones
/// and `#` comments.
fn glob_lines(text: &[u8]) -> usize {
    text.split(|&b| b == b'\n')
        .filter(|line| !line.starts_with(b"#") && !line.trim_ascii().is_empty())
        .count()
}

/// Lines as `ignore` reads them: a leading BOM dropped, lines that are not
/// UTF-8 skipped. Candidates are already relative to the rules' directory;
/// the root `.` tells the matcher so, and it then strips nothing.
fn compile(text: &[u8]) -> Gitignore {
    let mut builder = GitignoreBuilder::new(".");
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let line = if i == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        // A bad line is skipped, as ripgrep and fd do.
        let _ = builder.add_line(None, line);
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}
