//! The one walker shared by find and grep: an ordered, parallel directory
//! walk on descriptors.
//!
//! Rules (fd 10 / ripgrep 15 semantics, see docs "find"): hidden files
//! included; `.ignore`, `.gitignore` and `.git/info/exclude` honoured
//! hierarchically, whether or not the tree is a git repository; symlinks
//! never followed; the walk never leaves the start directory.
//!
//! **Order.** Output comes in path order (depth-first, siblings by the bytes
//! of their names, a directory before its contents) while every core works.
//! Each directory, and for searching visitors each run of files, is a task
//! keyed by its position in that order; threads always take the first
//! pending task, so they work where the output is, and the calling thread
//! hands results to the sink in order, helping with tasks while it waits.
//! A sink that has enough stops the walk: a search that is answered by the
//! first files of the tree never lists the rest.
//!
//! **Why not `ignore`'s walkers.** Its sorted walk is sequential and its
//! parallel walk runs in no useful order; both open every directory by its
//! whole path and probe each one for ignore files. Here a directory is
//! opened relative to its parent's descriptor with `O_NOFOLLOW` (so a
//! swapped-in symlink can never lead outside), its listing tells which
//! ignore files exist, and only those are read. The rules themselves are
//! `ignore`'s `Gitignore` and `Override` matchers, combined the way its
//! walker combines them.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use ignore::Match;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};

/// What a directory entry is (symlinks are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

/// An entry the walk found, as a visitor sees it.
pub struct Entry<'a> {
    dir: BorrowedFd<'a>,
    name: &'a [u8],
    rel: &'a [u8],
    pub kind: Kind,
    halt: Halt<'a>,
}

/// The walk's end: the sink had enough, or the caller cancelled.
#[derive(Clone, Copy)]
struct Halt<'a> {
    stop: &'a AtomicBool,
    cancel: &'a AtomicBool,
}

impl Halt<'_> {
    fn halted(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.cancel.load(Ordering::Relaxed)
    }
}

impl Entry<'_> {
    /// The entry's name.
    pub fn name(&self) -> &OsStr {
        OsStr::from_bytes(self.name)
    }

    /// The path relative to the start directory.
    pub fn rel(&self) -> &Path {
        Path::new(OsStr::from_bytes(self.rel))
    }

    /// Opens the entry for reading, relative to its directory and without
    /// following a symlink (a file swapped for one since the listing fails).
    /// Whether the walk is ending, so a long visit can give up.
    pub fn halted(&self) -> bool {
        self.halt.halted()
    }

    pub fn open(&self) -> io::Result<File> {
        // Non-blocking, so a FIFO swapped in is not waited on.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        Ok(openat(self.dir, self.name, flags, Mode::empty())?.into())
    }
}

/// What a walk does with the entries it finds.
pub trait Visitor: Sync {
    /// What a visit yields, handed to the sink in path order.
    type Out: Send;
    /// A thread's own state (a searcher and its buffers).
    type Local;
    /// Whether visiting a file is costly (a search): then the files of a
    /// directory are visited in small runs, each a task of its own, so all
    /// threads share a large directory.
    const SEARCHES_FILES: bool = false;

    fn local(&self) -> Self::Local;
    /// Entries left out with everything below them, beyond the ignore rules.
    fn skip(&self, _entry: &Entry<'_>) -> bool {
        false
    }
    /// An entry's output, if any. Free of side effects: for the files of a
    /// visitor that does not search them, the walker visits before it asks
    /// the ignore rules (most files match nothing, and a visit is far
    /// cheaper than the rules), so it may visit an entry it then leaves out.
    fn visit(&self, local: &mut Self::Local, entry: &Entry<'_>) -> Option<Self::Out>;
}

/// The rules of one walk: the ignore files above the start directory and how
/// they combine.
pub struct Rules {
    /// With it, `.gitignore` counts only inside a repository and parent
    /// rules stop at each repository's top (see `new`).
    require_git: bool,
    overrides: Option<Override>,
    /// Rules of the start directory's ancestors, nearest first.
    ancestors: Option<Arc<Level>>,
}

impl Rules {
    /// The rules for a walk of `start`, with ripgrep's
    /// `--glob` overrides when given (rooted at `start`).
    ///
    /// Nested repository boundaries: ripgrep and fd only notice `.git` (and
    /// stop parent `.gitignore` rules there) when they require git, and then
    /// ignore `.gitignore` outside repositories. So, as pi 1.6.0 does with fd
    /// (pi #5960), git is required exactly when the walk starts inside a
    /// repository (`.git` in the directory or an ancestor).
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
        let mut ancestors: Option<Arc<Level>> = None;
        for (dir, git) in chain {
            let level = Level::of_ancestor(dir, git, start, require_git, ancestors.clone());
            ancestors = Some(Arc::new(level));
        }
        Rules {
            require_git,
            overrides,
            ancestors,
        }
    }

    /// Whether the entry at `rel` (in a directory whose rules are `level`) is
    /// left out, the way `ignore`'s walker decides.
    fn is_ignored(&self, level: &Level, rel: &[u8], is_dir: bool, scratch: &mut Vec<u8>) -> bool {
        let rel_path = Path::new(OsStr::from_bytes(rel));
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
                    found.check(l, Path::new(OsStr::from_bytes(candidate)), is_dir, any_git);
                }
                Place::Above { .. } if !l.rules_in_chain => break,
                Place::Above { start } if l.has_rules => {
                    scratch.clear();
                    scratch.extend_from_slice(start);
                    scratch.push(b'/');
                    scratch.extend_from_slice(rel);
                    found.check(l, Path::new(OsStr::from_bytes(scratch)), is_dir, any_git);
                }
                Place::Above { .. } => found.saw_git |= l.has_git,
            }
            levels = l.parent.as_deref();
        }
        found.is_ignore()
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
struct Level {
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

/// Which ignore files and repository markers a directory holds.
#[derive(Default)]
struct Markers {
    ignore: bool,
    gitignore: bool,
    git: bool,
    jj: bool,
}

impl Markers {
    fn note(&mut self, name: &[u8]) {
        match name {
            b".ignore" => self.ignore = true,
            b".gitignore" => self.gitignore = true,
            b".git" => self.git = true,
            b".jj" => self.jj = true,
            _ => {}
        }
    }

    fn any(&self) -> bool {
        self.ignore || self.gitignore || self.git || self.jj
    }
}

impl Level {
    fn new(
        ignore: Arc<Gitignore>,
        gitignore: Arc<Gitignore>,
        exclude: Arc<Gitignore>,
        has_git: bool,
        place: Place,
        parent: Option<Arc<Level>>,
    ) -> Level {
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
        parent: Option<Arc<Level>>,
    ) -> Level {
        let read = |name: &str| std::fs::read(dir.join(name)).ok();
        let has_git = require_git && (git.is_some() || dir.join(".jj").exists());
        let exclude = git
            .and_then(|md| git_common_dir(dir, md.is_file()))
            .and_then(|common| std::fs::read(common.join("info/exclude")).ok());
        Level::new(
            matcher(read(".ignore")),
            matcher(read(".gitignore")),
            matcher(exclude),
            has_git,
            Place::Above {
                start: start
                    .strip_prefix(dir)
                    .unwrap_or(start)
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            },
            parent,
        )
    }

    /// A directory inside the walk, read through its descriptor; `rel` is its
    /// path relative to the start directory.
    fn of_dir(
        dir: BorrowedFd<'_>,
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
                .and_then(|text| gitdir_line(&text))
                .and_then(|gitdir| common_dir_of(&gitdir))
                .and_then(|common| std::fs::read(common.join("info/exclude")).ok()),
            _ => None,
        };
        let has_git = rules.require_git && (git_kind.is_some() || markers.jj);
        Level::new(
            matcher(read(markers.ignore, ".ignore")),
            matcher(read(markers.gitignore, ".gitignore")),
            matcher(exclude),
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
    let text = std::fs::read(dir.join(".git")).ok()?;
    common_dir_of(&gitdir_line(&text)?)
}

fn gitdir_line(text: &[u8]) -> Option<PathBuf> {
    let line = text.split(|&b| b == b'\n').next()?;
    let path = line.strip_prefix(b"gitdir: ")?;
    Some(PathBuf::from(OsStr::from_bytes(path)))
}

/// A worktree's git directory holds a `commondir` file; a submodule's does
/// not, and then no exclude file applies (as in `ignore`).
fn common_dir_of(gitdir: &Path) -> Option<PathBuf> {
    let text = std::fs::read(gitdir.join("commondir")).ok()?;
    let line = text.split(|&b| b == b'\n').next()?;
    let common = Path::new(OsStr::from_bytes(line));
    Some(if line.starts_with(b".") {
        gitdir.join(common)
    } else {
        common.to_path_buf()
    })
}

/// A matcher for an ignore file's text (given paths relative to the file's
/// directory). Compiled matchers are kept for the process, keyed by the
/// text itself (so never stale): an agent searches the same tree again and
/// again, and compiling is a good part of a walk (6 ms for the kernel's 306
/// `.gitignore` files), as is warming each matcher's lazy DFA.
fn matcher(text: Option<Vec<u8>>) -> Arc<Gitignore> {
    /// Text kept at most; past it the cache starts over.
    const CACHED_BYTES: usize = 8 << 20;
    /// The text held, and the matchers by text.
    type Compiled = (usize, Option<HashMap<Vec<u8>, Arc<Gitignore>>>);
    static COMPILED: Mutex<Compiled> = Mutex::new((0, None));
    let Some(text) = text else {
        return Arc::new(Gitignore::empty());
    };
    let lock = || COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = lock().1.as_ref().and_then(|c| c.get(&text)) {
        return m.clone();
    }
    let m = Arc::new(compile(&text));
    let mut cache = lock();
    if cache.0 + text.len() > CACHED_BYTES {
        *cache = (0, None);
    }
    cache.0 += text.len();
    cache
        .1
        .get_or_insert_with(HashMap::new)
        .insert(text, m.clone());
    m
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

/// Reads a (small) file below `dir` without following symlinks.
fn read_at(dir: BorrowedFd<'_>, rel: &str) -> Option<Vec<u8>> {
    let mut top: Option<OwnedFd> = None;
    let mut parts = rel.split('/').peekable();
    while let Some(part) = parts.next() {
        let at = top.as_ref().map_or(dir, |fd| fd.as_fd());
        let flags = if parts.peek().is_some() {
            OFlag::O_RDONLY | OFlag::O_DIRECTORY
        } else {
            OFlag::O_RDONLY | OFlag::O_NONBLOCK
        };
        top = Some(
            openat(
                at,
                part,
                flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok()?,
        );
    }
    let mut text = Vec::new();
    File::from(top?).read_to_end(&mut text).ok()?;
    Some(text)
}

fn kind_at(dir: BorrowedFd<'_>, name: &[u8]) -> Option<Kind> {
    let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    Some(
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        },
    )
}

/// A directory's entries: names in one buffer, sorted by their bytes.
struct Listing {
    names: Vec<u8>,
    entries: Vec<Listed>,
    markers: Markers,
}

struct Listed {
    start: usize,
    len: usize,
    /// `None` until known when the directory did not say (`fstatat` tells).
    kind: Option<Kind>,
}

impl Listing {
    /// Room for a typical directory, so listing one does not grow its
    /// buffers a few times over; each under 1 KiB, which malloc serves from
    /// its per-thread cache.
    fn with_room() -> Self {
        Listing {
            names: Vec::with_capacity(960),
            entries: Vec::with_capacity(40),
            markers: Markers::default(),
        }
    }

    fn push(&mut self, name: &[u8], kind: Option<Kind>) {
        self.markers.note(name);
        self.entries.push(Listed {
            start: self.names.len(),
            len: name.len(),
            kind,
        });
        self.names.extend_from_slice(name);
    }

    fn name(&self, entry: &Listed) -> &[u8] {
        &self.names[entry.start..entry.start + entry.len]
    }

    fn sort(&mut self) {
        let names = &self.names;
        self.entries.sort_unstable_by(|a, b| {
            names[a.start..a.start + a.len].cmp(&names[b.start..b.start + b.len])
        });
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn kind_of_d_type(d_type: u8) -> Option<Kind> {
    match d_type {
        libc::DT_DIR => Some(Kind::Dir),
        libc::DT_REG => Some(Kind::File),
        libc::DT_LNK => Some(Kind::Symlink),
        libc::DT_UNKNOWN => None,
        _ => Some(Kind::Other),
    }
}

/// Calls `each` with every entry of the directory open at `fd` (but `.` and
/// `..`): `getdents64` into one buffer, so the descriptor stays ours for
/// opening the entries.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_entries(fd: BorrowedFd<'_>, mut each: impl FnMut(&[u8], Option<Kind>)) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // `linux_dirent64` records are 8-byte aligned. Left uninitialized: only
    // what the kernel wrote is read, and zeroing 32 KiB per directory costs
    // more than listing a small one.
    let mut buf = std::mem::MaybeUninit::<[u64; 4096]>::uninit();
    loop {
        // SAFETY: the kernel writes at most `size_of_val(&buf)` bytes into `buf`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                std::mem::size_of_val(&buf),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the first `n` bytes were written by the kernel.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
        // Each record: d_ino (8), d_off (8), d_reclen (2), d_type (1), name\0.
        let mut at = 0;
        while let Some(record) = bytes.get(at..) {
            let (Some(len), Some(&d_type)) = (record.get(16..18), record.get(18)) else {
                break;
            };
            let len = u16::from_ne_bytes([len[0], len[1]]) as usize;
            let Some(name) = record.get(19..len.max(19)) else {
                break;
            };
            let name = &name[..memchr::memchr(0, name).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                each(name, kind_of_d_type(d_type));
            }
            if len == 0 {
                break;
            }
            at += len;
        }
    }
}

/// Elsewhere, `readdir` on a duplicate of the descriptor.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read_entries(fd: BorrowedFd<'_>, mut each: impl FnMut(&[u8], Option<Kind>)) -> io::Result<()> {
    let mut dir = nix::dir::Dir::from_fd(fd.try_clone_to_owned()?)?;
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            let kind = entry.file_type().map(|t| match t {
                nix::dir::Type::Directory => Kind::Dir,
                nix::dir::Type::File => Kind::File,
                nix::dir::Type::Symlink => Kind::Symlink,
                _ => Kind::Other,
            });
            each(name, kind);
        }
    }
    Ok(())
}

/// A directory being walked: its descriptor, path, rules and entries.
struct Dir {
    fd: OwnedFd,
    rel: Vec<u8>,
    level: Arc<Level>,
    key: Vec<u32>,
    listing: Listing,
}

impl Dir {
    /// Entry `index`, its path written into `path`.
    fn entry<'a>(&'a self, index: usize, path: &'a mut Vec<u8>, halt: Halt<'a>) -> Entry<'a> {
        let listed = &self.listing.entries[index];
        let name = self.listing.name(listed);
        join(path, &self.rel, name);
        Entry {
            dir: self.fd.as_fd(),
            name,
            rel: path,
            kind: listed.kind.unwrap_or(Kind::Other),
            halt,
        }
    }

    /// The path of entry `index` (its name joined to this directory's path).
    fn child_path(&self, index: usize) -> Vec<u8> {
        let mut path = Vec::new();
        join(
            &mut path,
            &self.rel,
            self.listing.name(&self.listing.entries[index]),
        );
        path
    }

    fn child_key(&self, index: usize) -> Vec<u32> {
        let mut key = Vec::with_capacity(self.key.len() + 1);
        key.extend_from_slice(&self.key);
        key.push(u32::try_from(index).unwrap_or(u32::MAX));
        key
    }
}

/// `path` := `dir/name` (or `name` at the top).
fn join(path: &mut Vec<u8>, dir: &[u8], name: &[u8]) {
    path.clear();
    path.extend_from_slice(dir);
    if !dir.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
}

enum Work {
    /// List the start directory.
    Start(OwnedFd, Arc<Level>),
    /// List entry `index` of a listed directory.
    List(Arc<Dir>, usize),
    /// Visit a run of files of a listed directory (searching visitors).
    Files(Arc<Dir>, Vec<usize>),
}

/// A task, ordered by its place in path order: the indices of the sorted
/// entries leading to it (a run of files by its first file).
struct Task {
    key: Vec<u32>,
    id: usize,
    work: Work,
}

impl PartialEq for Task {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Task {}
impl PartialOrd for Task {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Task {
    /// Reversed: `BinaryHeap` pops its greatest, and we want the first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.key.cmp(&self.key)
    }
}

/// A piece of a task's output: a visit's result, or the place where another
/// task's output goes.
enum Part<T> {
    Out(T),
    Task(usize),
}

struct State<T> {
    queue: BinaryHeap<Task>,
    /// Outputs of finished tasks not yet handed to the sink.
    done: HashMap<usize, Vec<Part<T>>>,
    over: bool,
    /// Threads waiting on `changed`: wake-ups (a system call each) are only
    /// made when someone waits.
    waiting: usize,
}

struct Shared<'a, V: Visitor> {
    rules: &'a Rules,
    visitor: &'a V,
    state: Mutex<State<V::Out>>,
    changed: Condvar,
    next_id: AtomicUsize,
    halt: Halt<'a>,
}

/// Finished outputs the threads may hold ahead of the sink (bounds memory
/// when the sink waits on one long task).
const AHEAD: usize = 4096;
/// Files per task for searching visitors: small, so a search that ends in
/// its first files searches few past them.
const FILES_PER_TASK: usize = 8;

/// Walks the directory open at `start` (whose real host path `rules` was
/// made for), handing each visit's output to `sink` in path order until it
/// returns `false`, or until `cancel` is raised (from any thread). Entries
/// that cannot be read are skipped, as fd and ripgrep do.
pub fn walk<V: Visitor>(
    start: OwnedFd,
    rules: &Rules,
    visitor: &V,
    cancel: &AtomicBool,
    mut sink: impl FnMut(V::Out) -> bool,
) {
    let stop = AtomicBool::new(false);
    let above = rules.ancestors.clone().unwrap_or_else(|| {
        let none = || Arc::new(Gitignore::empty());
        let place = Place::Above { start: Vec::new() };
        Arc::new(Level::new(none(), none(), none(), false, place, None))
    });
    let shared = Shared {
        rules,
        visitor,
        state: Mutex::new(State {
            queue: BinaryHeap::from([Task {
                key: Vec::new(),
                id: 0,
                work: Work::Start(start, above),
            }]),
            done: HashMap::new(),
            over: false,
            waiting: 0,
        }),
        changed: Condvar::new(),
        next_id: AtomicUsize::new(1),
        halt: Halt {
            stop: &stop,
            cancel,
        },
    };
    std::thread::scope(|scope| {
        for _ in 1..threads() {
            scope.spawn(|| shared.work());
        }
        shared.consume(&mut sink);
        shared.lock().over = true;
        shared.changed.notify_all();
    });
}

/// Threads per walk: one per core (at most 8) besides the calling thread,
/// which waits whenever another thread holds the task it needs next; the
/// extra thread keeps every core busy then (a fifth less time on the
/// kernel tree with 2 cores).
fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.clamp(1, 8) + 1
}

impl<V: Visitor> Shared<'_, V> {
    fn lock(&self) -> MutexGuard<'_, State<V::Out>> {
        // Nothing panics while holding the lock; recover regardless.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn halted(&self) -> bool {
        self.halt.halted()
    }

    fn wait<'s>(
        &'s self,
        mut state: MutexGuard<'s, State<V::Out>>,
    ) -> MutexGuard<'s, State<V::Out>> {
        state.waiting += 1;
        let mut state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        state.waiting -= 1;
        state
    }

    fn wake(&self, state: MutexGuard<'_, State<V::Out>>) {
        let anyone = state.waiting > 0;
        drop(state);
        if anyone {
            self.changed.notify_all();
        }
    }

    /// A worker thread: runs the first pending task, while the sink is not
    /// too far behind, until the walk is over.
    fn work(&self) {
        let mut local = self.visitor.local();
        let mut state = self.lock();
        while !state.over && !self.halted() {
            if state.done.len() < AHEAD {
                if let Some(task) = state.queue.pop() {
                    drop(state);
                    self.run(task, &mut local);
                    state = self.lock();
                    continue;
                }
            }
            state = self.wait(state);
        }
    }

    /// The calling thread: hands outputs to the sink in path order, running
    /// tasks itself while the one it needs is not done.
    fn consume(&self, sink: &mut impl FnMut(V::Out) -> bool) {
        let mut local = self.visitor.local();
        let mut stack: Vec<std::vec::IntoIter<Part<V::Out>>> = Vec::new();
        let mut needed = Some(0);
        while !self.halted() {
            if let Some(id) = needed.take() {
                match self.wait_for(id, &mut local) {
                    Some(parts) => stack.push(parts.into_iter()),
                    None => return,
                }
            }
            let Some(top) = stack.last_mut() else { return };
            match top.next() {
                None => {
                    stack.pop();
                }
                Some(Part::Out(out)) => {
                    if !sink(out) {
                        self.halt.stop.store(true, Ordering::Relaxed);
                        return;
                    }
                }
                Some(Part::Task(id)) => needed = Some(id),
            }
        }
    }

    /// The output of task `id`, running pending tasks meanwhile (`id` itself
    /// first: nothing before it in path order is pending, so when it is
    /// queued it is the queue's first). `None` when the walk was stopped.
    fn wait_for(&self, id: usize, local: &mut V::Local) -> Option<Vec<Part<V::Out>>> {
        let mut state = self.lock();
        loop {
            if let Some(parts) = state.done.remove(&id) {
                // Room ahead again for workers that wait for it.
                self.wake(state);
                return Some(parts);
            }
            if self.halted() {
                return None;
            }
            let first_is_needed = state.queue.peek().is_some_and(|t| t.id == id);
            if first_is_needed || state.done.len() < AHEAD {
                if let Some(task) = state.queue.pop() {
                    drop(state);
                    self.run(task, local);
                    state = self.lock();
                    continue;
                }
            }
            state = self.wait(state);
        }
    }

    fn run(&self, task: Task, local: &mut V::Local) {
        let mut new_tasks = Vec::new();
        let parts = if self.halted() {
            Vec::new()
        } else {
            match task.work {
                Work::Start(fd, above) => {
                    self.list(fd, Vec::new(), above, task.key, &mut new_tasks, local)
                }
                Work::List(parent, index) => {
                    let flags =
                        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                    let name = parent.listing.name(&parent.listing.entries[index]);
                    match openat(parent.fd.as_fd(), name, flags, Mode::empty()) {
                        Ok(fd) => {
                            let rel = parent.child_path(index);
                            let level = parent.level.clone();
                            drop(parent);
                            self.list(fd, rel, level, task.key, &mut new_tasks, local)
                        }
                        // Unreadable, or swapped for a symlink since it was listed.
                        Err(_) => Vec::new(),
                    }
                }
                Work::Files(dir, files) => self.visit_files(&dir, &files, local),
            }
        };
        let mut state = self.lock();
        state.queue.extend(new_tasks);
        state.done.insert(task.id, parts);
        self.wake(state);
    }

    /// Queues `work` (once the running task ends) and returns its place.
    fn new_task(&self, work: Work, new_tasks: &mut Vec<Task>) -> Part<V::Out> {
        let key = match &work {
            Work::Start(..) => Vec::new(),
            Work::List(dir, index) => dir.child_key(*index),
            Work::Files(dir, files) => dir.child_key(files[0]),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        new_tasks.push(Task { key, id, work });
        Part::Task(id)
    }

    /// Makes the run of files gathered so far (if any) a task in its place.
    fn files_task(
        &self,
        dir: &Arc<Dir>,
        files: &mut Vec<usize>,
        parts: &mut Vec<Part<V::Out>>,
        new_tasks: &mut Vec<Task>,
    ) {
        if !files.is_empty() {
            let run = std::mem::take(files);
            parts.push(self.new_task(Work::Files(dir.clone(), run), new_tasks));
        }
    }

    /// Lists a directory and visits its entries in order; subdirectories
    /// (and runs of files, for searching visitors) become tasks.
    fn list(
        &self,
        fd: OwnedFd,
        rel: Vec<u8>,
        above: Arc<Level>,
        key: Vec<u32>,
        new_tasks: &mut Vec<Task>,
        local: &mut V::Local,
    ) -> Vec<Part<V::Out>> {
        let mut listing = Listing::with_room();
        // A directory that fails midway is used as far as it was read.
        let _ = read_entries(fd.as_fd(), |name, kind| listing.push(name, kind));
        for listed in &mut listing.entries {
            if listed.kind.is_none() {
                let name = &listing.names[listed.start..listed.start + listed.len];
                listed.kind = Some(kind_at(fd.as_fd(), name).unwrap_or(Kind::Other));
            }
        }
        listing.sort();
        let level = if listing.markers.any() {
            Arc::new(Level::of_dir(
                fd.as_fd(),
                &rel,
                &listing.markers,
                self.rules,
                above,
            ))
        } else {
            above
        };
        let dir = Arc::new(Dir {
            fd,
            rel,
            level,
            key,
            listing,
        });
        let mut parts = Vec::new();
        let mut files: Vec<usize> = Vec::new();
        let mut path = Vec::new();
        let mut scratch = Vec::new();
        for index in 0..dir.listing.entries.len() {
            let entry = dir.entry(index, &mut path, self.halt);
            let is_dir = entry.kind == Kind::Dir;
            let left_out = |scratch: &mut Vec<u8>| {
                self.rules
                    .is_ignored(&dir.level, entry.rel, is_dir, scratch)
                    || self.visitor.skip(&entry)
            };
            if !is_dir && !V::SEARCHES_FILES {
                // Visit first: the rules only matter for a file that yields.
                match self.visitor.visit(local, &entry) {
                    Some(out) if !left_out(&mut scratch) => parts.push(Part::Out(out)),
                    _ => {}
                }
                continue;
            }
            if left_out(&mut scratch) {
                continue;
            }
            if V::SEARCHES_FILES && !is_dir {
                files.push(index);
                if files.len() == FILES_PER_TASK {
                    self.files_task(&dir, &mut files, &mut parts, new_tasks);
                }
                continue;
            }
            self.files_task(&dir, &mut files, &mut parts, new_tasks);
            if let Some(out) = self.visitor.visit(local, &entry) {
                parts.push(Part::Out(out));
            }
            if is_dir {
                parts.push(self.new_task(Work::List(dir.clone(), index), new_tasks));
            }
        }
        self.files_task(&dir, &mut files, &mut parts, new_tasks);
        parts
    }

    fn visit_files(&self, dir: &Dir, files: &[usize], local: &mut V::Local) -> Vec<Part<V::Out>> {
        let mut parts = Vec::new();
        let mut path = Vec::new();
        for &index in files {
            if self.halted() {
                break;
            }
            let entry = dir.entry(index, &mut path, self.halt);
            if let Some(out) = self.visitor.visit(local, &entry) {
                parts.push(Part::Out(out));
            }
        }
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Collects every entry's relative path (directories with a `/`).
    struct Paths<const SEARCH: bool>;

    impl<const SEARCH: bool> Visitor for Paths<SEARCH> {
        type Out = String;
        type Local = ();
        const SEARCHES_FILES: bool = SEARCH;
        fn local(&self) {}
        fn skip(&self, entry: &Entry<'_>) -> bool {
            entry.name() == ".git"
        }
        fn visit(&self, _: &mut (), entry: &Entry<'_>) -> Option<String> {
            let slash = if entry.kind == Kind::Dir { "/" } else { "" };
            Some(format!("{}{slash}", entry.rel().display()))
        }
    }

    fn walk_all(dir: &Path, limit: usize) -> Vec<String> {
        let searching = walk_with(Paths::<true>, dir, limit);
        assert_eq!(walk_with(Paths::<false>, dir, limit), searching);
        searching
    }

    fn walk_with<V: Visitor<Out = String>>(v: V, dir: &Path, limit: usize) -> Vec<String> {
        walk_rules(v, dir, None, &AtomicBool::new(false), limit)
    }

    fn walk_rules<V: Visitor<Out = String>>(
        v: V,
        dir: &Path,
        overrides: Option<Override>,
        cancel: &AtomicBool,
        limit: usize,
    ) -> Vec<String> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        let fd = nix::fcntl::open(dir, flags, Mode::empty()).unwrap();
        let rules = Rules::new(&fs::canonicalize(dir).unwrap(), overrides);
        let mut out = Vec::new();
        walk(fd, &rules, &v, cancel, |p| {
            out.push(p);
            out.len() < limit
        });
        out
    }

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for f in files {
            if let Some(d) = f.strip_suffix('/') {
                fs::create_dir_all(t.path().join(d)).unwrap();
            } else {
                let p = t.path().join(f);
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(p, "").unwrap();
            }
        }
        t
    }

    #[test]
    fn honours_gitignore_outside_git_and_includes_hidden() {
        let t = tree(&[
            "ignored.txt",
            ".hidden",
            "b.txt",
            "a.txt",
            "d/ignored.txt",
            "d/keep",
        ]);
        fs::write(t.path().join(".gitignore"), "ignored.txt\n").unwrap();
        assert_eq!(
            walk_all(t.path(), usize::MAX),
            [".gitignore", ".hidden", "a.txt", "b.txt", "d/", "d/keep"]
        );
    }

    #[test]
    fn path_order_and_limits() {
        let t = tree(&["a/x", "a-b/x", "a.b/x", "B/x", "ab/x", "a/y/z"]);
        let all = walk_all(t.path(), usize::MAX);
        assert_eq!(
            all,
            [
                "B/", "B/x", "a/", "a/x", "a/y/", "a/y/z", "a-b/", "a-b/x", "a.b/", "a.b/x", "ab/",
                "ab/x"
            ]
        );
        for limit in 1..all.len() {
            assert_eq!(walk_all(t.path(), limit), all[..limit]);
        }
    }

    #[test]
    fn many_directories_keep_path_order() {
        let files: Vec<String> = (0..900)
            .map(|i| format!("d{}/e{}/g{}/f{i}", i % 7, i % 5, i % 3))
            .collect();
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let t = tree(&refs);
        let all = walk_all(t.path(), usize::MAX);
        let mut sorted = all.clone();
        sorted.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
        assert_eq!(all, sorted);
        assert_eq!(all.len(), 900 + 7 + 35 + 105);
        assert_eq!(walk_all(t.path(), 500), all[..500]);
    }

    #[test]
    fn ignore_files_nest_negate_and_stop_at_repositories() {
        let t = tree(&[
            ".git/",
            "a.out",
            "keep.out",
            "sub/b.out",
            "sub/c.log",
            "sub/deep/d.log",
            "nested/.git/",
            "nested/n.out",
            "plain/p.out",
            "only/.ignore",
        ]);
        fs::write(t.path().join(".gitignore"), "*.out\n!keep.out\n/only\n").unwrap();
        fs::write(t.path().join("sub/.gitignore"), "*.log\n!deep/\n").unwrap();
        fs::write(t.path().join("sub/.ignore"), "!b.out\n").unwrap();
        fs::write(t.path().join(".git/info"), "").ok();
        assert_eq!(
            walk_all(t.path(), usize::MAX),
            [
                ".gitignore",
                "keep.out",
                "nested/",
                "nested/n.out",
                "plain/",
                "sub/",
                "sub/.gitignore",
                "sub/.ignore",
                "sub/b.out",
                "sub/deep/",
            ]
        );
    }

    #[test]
    fn git_exclude_and_ancestors_rules() {
        let t = tree(&[".git/info/", "w/x.tmp", "w/y.skip", "w/z"]);
        fs::write(t.path().join(".git/info/exclude"), "*.tmp\n").unwrap();
        fs::write(t.path().join(".gitignore"), "*.skip\n").unwrap();
        // Walking `w`: the repository's rules above it still apply.
        assert_eq!(walk_all(&t.path().join("w"), usize::MAX), ["z"]);
    }

    #[test]
    fn symlinks_are_entries_never_followed() {
        let t = tree(&["d/f", "outside/secret"]);
        std::os::unix::fs::symlink(t.path().join("outside"), t.path().join("d/link")).unwrap();
        std::os::unix::fs::symlink("..", t.path().join("d/loop")).unwrap();
        assert_eq!(
            walk_all(&t.path().join("d"), usize::MAX),
            ["f", "link", "loop"]
        );
    }

    #[test]
    fn a_large_directory_interleaving_files_and_subdirectories_stays_in_order() {
        let files: Vec<String> = (0..300)
            .map(|i| {
                if i % 10 == 0 {
                    format!("f{i:03}/inner")
                } else {
                    format!("f{i:03}")
                }
            })
            .collect();
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let t = tree(&refs);
        let all = walk_all(t.path(), usize::MAX);
        assert_eq!(all.len(), 300 + 30);
        let mut sorted = all.clone();
        sorted.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
        assert_eq!(all, sorted);
        for limit in [1, 9, 10, 11, 100, 329] {
            assert_eq!(walk_all(t.path(), limit), all[..limit]);
        }
    }

    #[test]
    fn overrides_come_first_and_whitelist_ignored_files() {
        let t = tree(&["a.c", "b.h", "gen/x.c", "gen/y.h"]);
        fs::write(t.path().join(".gitignore"), "gen/\n*.c\n").unwrap();
        let mut b = ignore::overrides::OverrideBuilder::new(".");
        b.add("*.c").unwrap();
        let ov = b.build().unwrap();
        // `gen/` stays ignored (directories unmatched by a whitelist fall
        // through to the rules); `a.c` is searched although `.gitignore`
        // ignores it, as with `rg --glob`.
        let out = walk_rules(
            Paths::<true>,
            t.path(),
            Some(ov),
            &AtomicBool::new(false),
            usize::MAX,
        );
        assert_eq!(out, ["a.c"]);
    }

    #[test]
    fn cancel_ends_the_walk() {
        let files: Vec<String> = (0..200).map(|i| format!("d{}/f{i}", i % 20)).collect();
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let t = tree(&refs);
        let cancel = AtomicBool::new(true);
        assert!(walk_rules(Paths::<true>, t.path(), None, &cancel, usize::MAX).is_empty());
    }

    /// Concurrent walks past the `AHEAD` window, each stopped at a limit or
    /// cancelled from another thread midway, all end (bounded by a timeout
    /// rather than hanging the suite), and every limit cut is a prefix.
    #[test]
    fn stopped_and_cancelled_walks_always_end() {
        let files: Vec<String> = (0..3000).map(|i| format!("d{}/e{i}/f", i % 3)).collect();
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let t = tree(&refs);
        let all = walk_with(Paths::<true>, t.path(), usize::MAX);
        assert_eq!(all.len(), 3 + 3000 * 2);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            for lane in 0..4usize {
                let (done, all, dir) = (done.clone(), &all, t.path());
                scope.spawn(move || {
                    for round in 0..12usize {
                        let limit = 1 + (lane * 12 + round) * 97 % all.len();
                        assert_eq!(walk_with(Paths::<true>, dir, limit), all[..limit]);
                        let cancel = AtomicBool::new(false);
                        let out = std::thread::scope(|inner| {
                            inner.spawn(|| {
                                std::thread::sleep(std::time::Duration::from_micros(
                                    round as u64 * 300,
                                ));
                                cancel.store(true, Ordering::Relaxed);
                            });
                            walk_rules(Paths::<false>, dir, None, &cancel, usize::MAX)
                        });
                        assert_eq!(out, all[..out.len()]);
                    }
                    done.send(()).unwrap();
                });
            }
            for _ in 0..4 {
                let ended = finished.recv_timeout(std::time::Duration::from_secs(60));
                assert!(ended.is_ok(), "a walk did not end");
            }
        });
    }

    #[test]
    fn ancestors_are_those_of_the_real_directory() {
        let t = tree(&["a/sub/x.tmp", "a/sub/y", "b/"]);
        fs::write(t.path().join("a/.gitignore"), "*.tmp\n").unwrap();
        let link = t.path().join("b/link");
        std::os::unix::fs::symlink(t.path().join("a/sub"), &link).unwrap();
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        let fd = nix::fcntl::open(&link, flags, Mode::empty()).unwrap();
        let rules = Rules::new(&link, None);
        let mut out = Vec::new();
        walk(fd, &rules, &Paths::<false>, &AtomicBool::new(false), |p| {
            out.push(p);
            true
        });
        assert_eq!(out, ["y"]);
    }
}
