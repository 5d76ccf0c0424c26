//! The bounded root on unix, on descriptors (the guarantee and the shared
//! types: `mod.rs`).
//!
//! Each component is opened relative to its parent's descriptor with
//! `O_NOFOLLOW`; a symlink met is read (`readlinkat`) and its target spliced
//! into the walk (openat2's `RESOLVE_BENEATH` would refuse an absolute target
//! that points back inside the root). The final call is made with
//! `O_NOFOLLOW` on the descriptor the walk holds and the name it checked, so
//! there is no re-lookup to race. A fast kernel resolution (openat2, bounded
//! beneath the root) is taken only when it followed no symlink: then the path
//! as given is the path reached, for the policy too.
//!
//! One file past 800 lines on purpose: every operation is a use of the one
//! component walk and the descriptors it holds, and what a held descriptor
//! may be used for (and when the policy is asked) stays private to it.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{faccessat, fchown, unlinkat, AccessFlags, Gid, Uid, UnlinkatFlags};

use super::recent::{self, Recent};
use super::{Access, Result, RuntimeMap, Stat};
use crate::error::{errno_of, Error, ErrorKind};
use crate::policy::Policy;

/// Symlinks expanded in one resolution before giving up, as Linux's `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// A path given of this many bytes or more is refused with `ENAMETOOLONG`,
/// as the kernel refuses it to Node's fs (Linux's `PATH_MAX`, which counts
/// the terminating NUL): the walk would reach it, one component at a time,
/// where stock pi fails.
const PATH_MAX: usize = 4096;

/// How a directory is opened to be listed ([`Root::open_dir`], [`Root::read_dir_upto`]).
const LIST_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_CLOEXEC);

/// A directory entry found by a resolution: the open parent directory and the
/// final name inside it (`"."` when the path is that directory itself). The
/// name itself is not a symlink unless the resolution was asked not to follow.
struct Entry {
    parent: OwnedFd,
    name: OsString,
    /// The real path of the entry relative to the root.
    rel: PathBuf,
}

/// A workspace root. Paths under the runtime root, the root as given or its
/// canonical form all map to the same host directory.
///
/// ```
/// use std::path::Path;
/// use pi_native_ops_core::{root::Root, ErrorKind};
///
/// let dir = tempfile::tempdir()?;
/// let root = Root::open(dir.path(), Some(Path::new("/workspace")))?;
/// // The agent's path and the host path name the same file.
/// root.write_file(Path::new("/workspace/a.txt"), b"hi")?;
/// assert_eq!(root.read_file(&dir.path().join("a.txt"))?, b"hi");
/// // A symlink leading out of the root is refused, not followed.
/// std::os::unix::fs::symlink("/etc", dir.path().join("out"))?;
/// let err = root.read_file(Path::new("/workspace/out/hostname")).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Outside);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Root {
    /// The root directory, open; re-opened when its path names another
    /// directory (`held`), unless `pinned`.
    dir: RwLock<Held>,
    pinned: bool,
    /// The canonical host path and the agent's path of the root.
    paths: RuntimeMap,
    /// Prefixes mapping to the root, longest first.
    aliases: Vec<PathBuf>,
    /// What no operation may read or write, when given.
    policy: Option<Arc<Policy>>,
    /// Directories lately looked in, held (a name in one is one `fstatat`).
    recent: Recent,
    /// Directories lately found readable under the policy, with every one
    /// above them: a name in one is asked of its own rules alone.
    readable: ReadableDirs,
}

thread_local! {
    /// Set on this thread by `Root::trusting`: the held root is used unchecked.
    static TRUSTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The root directory held open, and its identity when opened.
#[derive(Debug)]
struct Held {
    fd: Arc<OwnedFd>,
    dev: u64,
    ino: u64,
    /// Its view: a `stat` or `exists` of a path with no symlink on it in one system call.
    #[cfg(target_os = "linux")]
    view: Arc<super::view::View>,
}

impl Held {
    /// Opens the directory at `path` (not through a symlink in its place).
    fn open(path: &Path) -> io::Result<Held> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::open(path, flags, Mode::empty())?;
        let st = nix::sys::stat::fstat(&fd)?;
        Ok(Held {
            fd: Arc::new(fd),
            dev: identity(&st).0,
            ino: identity(&st).1,
            #[cfg(target_os = "linux")]
            view: Arc::default(),
        })
    }
}

/// The directory a name is looked up in directly (`Root::direct_parent`).
enum Parent<'a> {
    /// The root, as held for this call.
    Root(RwLockReadGuard<'a, Held>),
    /// A directory beneath it, held and just rechecked.
    Recent(Arc<recent::Dir>),
}

impl Parent<'_> {
    /// `name`'s status, unless it is a symlink (`None`: to be followed).
    fn stat(&self, name: &OsStr) -> Result<Option<FileStat>> {
        let fd = match self {
            Parent::Root(held) => held.fd.as_fd(),
            Parent::Recent(dir) => dir.fd(),
        };
        let st = fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if file_type(&st) != SFlag::S_IFLNK {
            return Ok(Some(st));
        }
        if let Parent::Recent(dir) = self {
            dir.met_a_link();
        }
        Ok(None)
    }
}

/// How many directories `ReadableDirs` remembers (pi's `ls` stats the
/// entries of one).
const READABLE_REMEMBERED: usize = 4;

/// Directories (relative to the root) lately found readable under the
/// root's policy, with every directory above them. The policy's answer for a
/// path never changes, so remembering it holds whatever the tree does.
#[derive(Debug, Default)]
struct ReadableDirs(std::sync::Mutex<Vec<PathBuf>>);

impl ReadableDirs {
    /// Whether `policy` lets `dir` and every directory above it be read
    /// (the root, `""`, always), remembered when it does.
    fn knows(&self, policy: &Policy, dir: &Path) -> bool {
        if dir.as_os_str().is_empty() {
            return true;
        }
        let mut dirs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if dirs.iter().any(|d| d.as_os_str() == dir.as_os_str()) {
            return true;
        }
        if policy.read_denial(dir, true).is_some() {
            return false;
        }
        dirs.insert(0, dir.to_path_buf());
        dirs.truncate(READABLE_REMEMBERED);
        true
    }
}

/// The directory of a clean relative path (`""` for a name in the root),
/// by its last `/`: `Path::parent` parses every component.
fn parent_of(rel: &Path) -> &Path {
    let bytes = rel.as_os_str().as_bytes();
    let end = bytes.iter().rposition(|&b| b == b'/').unwrap_or(0);
    Path::new(OsStr::from_bytes(&bytes[..end]))
}

/// The refusal of reading `rel` (relative, real or as given), if denied.
fn refuse_read(policy: &Policy, rel: &Path, is_dir: bool) -> Result<()> {
    match policy.read_denial(rel, is_dir) {
        Some(denial) => Err(Error::protected(denial.rule)),
        None => Ok(()),
    }
}

/// The refusal of writing `rel`, if denied or protected.
fn refuse_write(policy: &Policy, rel: &Path, is_dir: bool) -> Result<()> {
    match policy.write_denial(rel, is_dir) {
        Some(denial) => Err(Error::protected(denial.rule)),
        None => Ok(()),
    }
}

impl Root {
    /// Opens `host` (an existing directory) as a root whose agent-visible path
    /// is `runtime` (default: `host`).
    pub fn open(host: &Path, runtime: Option<&Path>) -> Result<Root> {
        let unavailable = |e: io::Error| Error::root_unavailable(host, errno_of(&e));
        let canonical = std::fs::canonicalize(host).map_err(unavailable)?;
        let held = Held::open(&canonical).map_err(unavailable)?;
        let runtime = runtime
            .map(Path::to_path_buf)
            .unwrap_or_else(|| host.to_path_buf());
        let mut aliases = vec![runtime.clone(), host.to_path_buf(), canonical.clone()];
        aliases.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
        aliases.dedup();
        Ok(Root {
            dir: RwLock::new(held),
            pinned: false,
            paths: RuntimeMap::new(canonical, runtime),
            aliases,
            policy: None,
            recent: Recent::default(),
            readable: ReadableDirs::default(),
        })
    }

    /// The same root, held to the directory it opened even when its path
    /// comes to name another (`true`); by default every operation follows
    /// the path, as Node's fs does.
    pub fn pinned(mut self, pinned: bool) -> Root {
        self.pinned = pinned;
        self
    }

    /// Whether the root stays the directory it opened ([`Root::pinned`]).
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// The root directory for one operation: the one held, unless its path
    /// now names another directory (the workspace was moved aside or removed,
    /// and made again), which is then opened and held instead. One `lstat`
    /// of the root's path; a symlink put in its place is not followed. Inside
    /// the root every walk goes on from this descriptor, race-free as ever.
    fn current(&self) -> RwLockReadGuard<'_, Held> {
        let held = self.dir.read().unwrap_or_else(|e| e.into_inner());
        if self.pinned || TRUSTED.get() {
            return held;
        }
        match nix::sys::stat::lstat(&self.paths.host) {
            Ok(st) if identity(&st) == (held.dev, held.ino) => held,
            Ok(st) if file_type(&st) == SFlag::S_IFDIR => {
                drop(held);
                let mut held = self.dir.write().unwrap_or_else(|e| e.into_inner());
                // Unless another thread just did, or the path changed again.
                if let Ok(now) = Held::open(&self.paths.host) {
                    if (now.dev, now.ino) != (held.dev, held.ino) {
                        *held = now;
                    }
                }
                drop(held);
                self.dir.read().unwrap_or_else(|e| e.into_inner())
            }
            // Gone, or not a directory: the held one answers (a removed
            // directory's calls fail as the missing path's would).
            _ => held,
        }
    }

    /// The root directory (`current`) for an operation that holds it a while.
    fn dir(&self) -> Arc<OwnedFd> {
        self.current().fd.clone()
    }

    /// Runs `f` with the root directory as held, not checked against its
    /// path: for a face that has checked it moments before on this thread,
    /// in the same uninterrupted run of calls (js/fs.js: one turn of the
    /// event loop), where one more `lstat` per call would double the cost
    /// of pi's `ls`, which stats every entry.
    pub fn trusting<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Reset(bool);
        impl Drop for Reset {
            fn drop(&mut self) {
                TRUSTED.set(self.0);
            }
        }
        let _reset = Reset(TRUSTED.replace(true));
        f()
    }

    /// The identity (device, inode) of the root directory operations use
    /// now (see `dir`): it changes when the workspace is replaced.
    pub fn identity(&self) -> (u64, u64) {
        let held = self.current();
        (held.dev, held.ino)
    }

    /// The same root with `policy` asked by every operation.
    pub fn with_policy(mut self, policy: Arc<Policy>) -> Root {
        self.policy = Some(policy);
        // Held under no rules: let the policy decide what is held.
        self.recent = Recent::default();
        self.readable = ReadableDirs::default();
        self
    }

    /// The root's policy, if it has one.
    pub fn policy(&self) -> Option<&Arc<Policy>> {
        self.policy.as_ref()
    }

    /// The policy when it has read rules: with none, reads ask nothing.
    fn read_rules(&self) -> Option<&Policy> {
        self.policy.as_deref().filter(|p| !p.reads_unrestricted())
    }

    /// The policy when it has write rules (its own or the protected ones).
    fn write_rules(&self) -> Option<&Policy> {
        self.policy.as_deref().filter(|p| !p.writes_unrestricted())
    }

    /// `path` relative to the root as given, `.` and `..` taken lexically
    /// (a `..` above the root is the walk's refusal too).
    fn lexical<'a>(&self, path: &'a Path) -> Result<Cow<'a, Path>> {
        if let Some(rel) = self.clean_relative(path) {
            return Ok(Cow::Borrowed(rel));
        }
        let mut out = PathBuf::new();
        for c in self.relative(path)?.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::ParentDir if !out.pop() => return Err(Error::outside()),
                _ => {}
            }
        }
        Ok(Cow::Owned(out))
    }

    /// Resolves `path` for a read `policy` may deny: the path as given and
    /// the path reached are both asked, as a directory when `is_dir`.
    fn resolve_readable(&self, policy: &Policy, path: &Path, is_dir: bool) -> Result<Entry> {
        let given = self.lexical(path)?;
        refuse_read(policy, &given, is_dir)?;
        let e = self.resolve(path, false)?;
        if e.rel != *given {
            refuse_read(policy, &e.rel, is_dir)?;
        }
        Ok(e)
    }

    /// For an entry found to be a directory: the rules that name only
    /// directories (`secrets/`), on the path as given and the path reached.
    fn refuse_read_dir(&self, policy: &Policy, path: &Path, e: &Entry) -> Result<()> {
        refuse_read(policy, &self.lexical(path)?, true)?;
        refuse_read(policy, &e.rel, true)
    }

    /// Resolves `path` for a write `policy` may refuse, both paths asked.
    fn resolve_writable(&self, policy: &Policy, path: &Path, is_dir: bool) -> Result<Entry> {
        let given = self.lexical(path)?;
        refuse_write(policy, &given, is_dir)?;
        let e = self.resolve(path, false)?;
        if e.rel != *given {
            refuse_write(policy, &e.rel, is_dir)?;
        }
        Ok(e)
    }

    /// Whether `path` (absolute, clean, as pi's tools give it) names the root
    /// or one of its ancestors, by any of the root's names.
    fn is_root_or_ancestor(&self, path: &Path) -> bool {
        path.is_absolute() && self.aliases.iter().any(|alias| alias.starts_with(path))
    }

    /// The canonical host path of the root.
    pub fn host(&self) -> &Path {
        &self.paths.host
    }

    /// The agent-visible path of the root.
    pub fn runtime(&self) -> &Path {
        &self.paths.runtime
    }

    /// The root's two paths: its canonical host path and the agent's.
    pub fn paths(&self) -> &RuntimeMap {
        &self.paths
    }

    /// The path relative to the root, if `path` (absolute) lies lexically
    /// under one of the root's aliases.
    fn relative<'a>(&self, path: &'a Path) -> Result<&'a Path> {
        if path.as_os_str().len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG.into());
        }
        // pi's tools pass clean paths (`<root>/a/b`): a byte comparison answers
        // those without parsing components, which costs as much as a stat.
        if let Some(rel) = self.clean_relative(path) {
            return Ok(rel);
        }
        self.aliases
            .iter()
            .find_map(|a| path.strip_prefix(a).ok())
            .ok_or_else(Error::outside)
    }

    /// The part of `path` after the first alias it starts with, when that part
    /// is clean (no empty, `.` or `..` component, no trailing `/`): then it is
    /// exactly what `Path::strip_prefix` would give. `None` leaves the
    /// question to `strip_prefix`.
    fn clean_relative<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.len() >= PATH_MAX {
            return None;
        }
        let alias = self.aliases.iter().find(|a| {
            let a = a.as_os_str().as_bytes();
            bytes.len() > a.len() + 1 && bytes.starts_with(a) && bytes[a.len()] == b'/'
        })?;
        let rest = &bytes[alias.as_os_str().len() + 1..];
        rest.split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
            .then(|| Path::new(std::ffi::OsStr::from_bytes(rest)))
    }

    /// Maps a host path inside the root to its runtime form.
    pub fn to_runtime(&self, host_path: &Path) -> PathBuf {
        self.paths.to_runtime(host_path)
    }

    /// Walks `path` beneath the root, a symlink in the last position expanded
    /// too; `create_dirs` makes missing directories on the way (including the
    /// last component).
    fn resolve(&self, path: &Path, create_dirs: bool) -> Result<Entry> {
        let mut pending: VecDeque<OsString> = VecDeque::new();
        push_front_components(&mut pending, self.relative(path)?);
        let root = self.dir();
        // Open directories below the root, with their names: our own `..`.
        let mut stack: Vec<(OwnedFd, OsString)> = Vec::new();
        // The names of `stack` joined, kept as it changes: the walk's cost
        // stays linear in the depth.
        let mut names = PathBuf::new();
        // The top of `stack` is a directory this walk created, asked of the
        // policy with every directory above it: one below it needs asking
        // alone.
        let mut created_top = false;
        let mut created: Option<OsString> = None;
        let mut symlinks = 0;
        let mut retries = 0;
        while let Some(name) = pending.pop_front() {
            if name == ".." {
                stack.pop().ok_or_else(Error::outside)?;
                names.pop();
                created_top = false;
                continue;
            }
            let last = pending.is_empty();
            let top = stack.last().map_or(root.as_fd(), |(fd, _)| fd.as_fd());
            let st = match fstatat(top, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::ENOENT) if create_dirs => {
                    // A directory is created only where writing is allowed,
                    // asked of its real path (symlinks followed so far).
                    if let Some(policy) = self.write_rules() {
                        let rel = names.join(&name);
                        let denial = match created_top {
                            true => policy.write_denial_entry(&rel, true),
                            false => policy.write_denial(&rel, true),
                        };
                        if let Some(denial) = denial {
                            return Err(Error::protected(denial.rule));
                        }
                    }
                    match mkdirat(top, name.as_os_str(), Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    created = Some(name.clone());
                    pending.push_front(name);
                    continue;
                }
                Err(Errno::ENOENT) if last => return Ok(self.entry(top, names, name)),
                Err(e) => return Err(e.into()),
            };
            let just_created = created.take().is_some_and(|c| c == name);
            match file_type(&st) {
                SFlag::S_IFLNK => {
                    symlinks += 1;
                    if symlinks > MAX_SYMLINKS {
                        return Err(Errno::ELOOP.into());
                    }
                    let target = match readlinkat(top, name.as_os_str()) {
                        Ok(t) => PathBuf::from(t),
                        // Swapped for a non-link since the stat: look again.
                        Err(Errno::EINVAL) => {
                            pending.push_front(name);
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    created_top = false;
                    if target.is_absolute() {
                        let rel = self.relative(&target)?.to_path_buf();
                        stack.clear();
                        names.clear();
                        push_front_components(&mut pending, &rel);
                    } else {
                        push_front_components(&mut pending, &target);
                    }
                }
                SFlag::S_IFDIR if !last || create_dirs => {
                    match openat(top, name.as_os_str(), dir_flags(), Mode::empty()) {
                        Ok(fd) => {
                            names.push(&name);
                            stack.push((fd, name));
                            created_top = just_created;
                        }
                        // Swapped between the stat and the open: look again, a bounded
                        // number of times, so a hostile swapper cannot spin us forever.
                        Err(Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT)
                            if retries < MAX_SYMLINKS =>
                        {
                            retries += 1;
                            pending.push_front(name);
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                _ if last => return Ok(self.entry(top, names, name)),
                _ => return Err(Errno::ENOTDIR.into()),
            }
        }
        // The walk ended on a directory we hold open (the root, a `..`, or a
        // symlink to a directory): the entry is that directory itself.
        let top = stack.last().map_or(root.as_fd(), |(fd, _)| fd.as_fd());
        Ok(self.entry(top, names, OsString::from(".")))
    }

    fn entry(&self, parent: BorrowedFd<'_>, mut rel: PathBuf, name: OsString) -> Entry {
        if name != "." {
            rel.push(&name);
        }
        // Duplicating keeps `Entry` independent of the walk's stack; failure
        // (EMFILE) is reported by the first use of the parent.
        let parent = parent.try_clone_to_owned().unwrap_or_else(|_| {
            self.dir()
                .try_clone()
                .expect("duplicating the root descriptor")
        });
        Entry { parent, name, rel }
    }

    /// The kernel's bounded open, when it can settle the question alone: on
    /// Linux, `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` resolves the
    /// whole path in one race-free call. It refuses absolute symlinks and any
    /// escape with `EXDEV`/`ELOOP`; then `None` sends the caller to the
    /// component-wise walk, which honours absolute in-root links and words the
    /// refusal. A path the kernel resolves beneath the root is exactly what the
    /// walk would have reached, so both give the same answers.
    #[cfg(target_os = "linux")]
    fn open_beneath(&self, path: &Path, flags: OFlag) -> Option<Result<OwnedFd>> {
        self.open_beneath_how(path, flags, false)
    }

    /// [`Root::open_beneath`]; with `no_symlinks`, a path through a symlink
    /// is left to the walk too (the policy needs the path reached, which is
    /// then the path as given).
    #[cfg(target_os = "linux")]
    fn open_beneath_how(
        &self,
        path: &Path,
        flags: OFlag,
        no_symlinks: bool,
    ) -> Option<Result<OwnedFd>> {
        use nix::fcntl::{openat2, OpenHow, ResolveFlag};
        use std::sync::atomic::AtomicBool;
        // Kernels before 5.6 (or seccomp filters) lack openat2: stop trying.
        static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
        if UNAVAILABLE.load(Ordering::Relaxed) {
            return None;
        }
        let rel = match self.relative(path) {
            Ok(rel) if rel.as_os_str().is_empty() => Path::new("."),
            Ok(rel) => rel,
            Err(e) => return Some(Err(e)),
        };
        let mut resolve = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS;
        if no_symlinks {
            resolve |= ResolveFlag::RESOLVE_NO_SYMLINKS;
        }
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(resolve);
        // The guard lives for this one call (nothing in it takes the lock).
        match openat2(&self.current().fd, rel, how) {
            Ok(fd) => Some(Ok(fd)),
            Err(Errno::ENOSYS) => {
                UNAVAILABLE.store(true, Ordering::Relaxed);
                None
            }
            Err(Errno::EXDEV | Errno::ELOOP | Errno::EAGAIN | Errno::EPERM | Errno::EINVAL) => None,
            Err(e) => Some(Err(e.into())),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn open_beneath(&self, _path: &Path, _flags: OFlag) -> Option<Result<OwnedFd>> {
        None
    }

    #[cfg(not(target_os = "linux"))]
    fn open_beneath_how(&self, _: &Path, _: OFlag, _: bool) -> Option<Result<OwnedFd>> {
        None
    }

    /// Opens a file to read what it holds, symlinks followed within the root.
    /// The open never waits (`O_NONBLOCK`: opening a FIFO would wait for a
    /// writer), and a FIFO or socket is refused at once with `ESPIPE`, the
    /// error pi's own read gives a FIFO (a positioned read) once a writer
    /// appears: the read tool never hangs on one (docs/contracts.md, "read").
    pub fn open_read(&self, path: &Path) -> Result<File> {
        let file = self.open_any(path)?;
        let st =
            nix::sys::stat::fstat(file.as_fd()).map_err(|e| Error::from(e).at("open", path))?;
        if matches!(file_type(&st), SFlag::S_IFIFO | SFlag::S_IFSOCK) {
            return Err(Error::read(libc::ESPIPE));
        }
        Ok(file)
    }

    /// Opens any file for reading without waiting (`O_NONBLOCK`), a FIFO
    /// included: for grep, which searches a FIFO named as its target as
    /// ripgrep does, waiting for its data only as long as it is not cancelled.
    pub fn open_any(&self, path: &Path) -> Result<File> {
        named("open", path, || {
            let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK;
            if let Some(policy) = self.read_rules() {
                return self.open_readable(policy, path, flags).map(File::from);
            }
            if let Some(fd) = self.open_beneath(path, flags) {
                return fd.map(File::from);
            }
            let e = self.resolve(path, false)?;
            Ok(openat(&e.parent, e.name.as_os_str(), read_flags(), Mode::empty())?.into())
        })
    }

    /// Opens `path` (with `flags`) for a read `policy` may deny. The path as
    /// given is asked before anything is opened (a denied name is refused
    /// whether or not it exists); as a file: a read of a directory fails
    /// anyway, and listing one asks as a directory ([`Root::open_dir`]).
    fn open_readable(&self, policy: &Policy, path: &Path, flags: OFlag) -> Result<OwnedFd> {
        Ok(self.open_readable_reached(policy, path, flags)?.0)
    }

    /// [`Root::open_readable`], with the path the open reached (relative to
    /// the root) when it is not the path as given: where a listing's
    /// entries are judged too.
    fn open_readable_reached(
        &self,
        policy: &Policy,
        path: &Path,
        flags: OFlag,
    ) -> Result<(OwnedFd, Option<PathBuf>)> {
        let is_dir = flags.contains(OFlag::O_DIRECTORY);
        let given = self.lexical(path)?;
        refuse_read(policy, &given, is_dir)?;
        // Through no symlink, the path reached is the path as given.
        if let Some(fd) = self.open_beneath_how(path, flags, true) {
            return Ok((fd?, None));
        }
        let e = self.resolve(path, false)?;
        if e.rel != *given {
            refuse_read(policy, &e.rel, is_dir)?;
        }
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&e.parent, e.name.as_os_str(), flags, Mode::empty())?;
        Ok((fd, (e.rel != *given).then_some(e.rel)))
    }

    /// Reads a whole file as Node's `fs.readFile` does: a regular file up to
    /// its size at open time (refused past [`MAX_READ_BYTES`](crate::error::MAX_READ_BYTES) with Node's
    /// `ERR_FS_FILE_TOO_LARGE`), anything else to its end (refused once more
    /// than that has arrived). Memory is reserved only up to the read's reserve (`whole_read`)
    /// from the size the file claims; past it the buffer grows as bytes
    /// arrive, so a sparse file of a terabyte costs nothing before it is
    /// refused.
    pub fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        self.read_file_within(path, crate::error::MAX_READ_BYTES)
    }

    /// [`Root::read_file`] for a face that carries at most `max` bytes in one answer (the remote
    /// protocol's frame): a larger file is refused before any of it is read, with the same
    /// kind and code as Node's refusal.
    pub fn read_file_within(&self, path: &Path, max: u64) -> Result<Vec<u8>> {
        let file = self.open_read(path)?;
        let meta = file
            .metadata()
            .map_err(|e| Error::from(e).at("open", path))?;
        let claimed = if meta.is_file() { meta.len() } else { 0 };
        crate::whole_read::whole(&file, claimed, max)
    }

    /// Reads at most `len` bytes from the start of a file.
    pub fn read_head(&self, path: &Path, len: usize) -> Result<Vec<u8>> {
        crate::whole_read::head(&self.open_read(path)?, len)
    }

    /// Checks that the file exists and grants `access` to the caller.
    pub fn access(&self, path: &Path, access: Access) -> Result<()> {
        named("access", path, || {
            // Editing asks to read first: what cannot be read cannot be edited.
            let e = match (self.read_rules(), self.write_rules(), access) {
                (Some(policy), _, _) => {
                    let e = self.resolve_readable(policy, path, false)?;
                    match (self.write_rules(), access) {
                        (Some(policy), Access::ReadWrite) => {
                            self.resolve_writable(policy, path, false)?
                        }
                        _ => e,
                    }
                }
                (None, Some(policy), Access::ReadWrite) => {
                    self.resolve_writable(policy, path, false)?
                }
                _ => self.resolve(path, false)?,
            };
            let mode = match access {
                Access::Read => AccessFlags::R_OK,
                Access::ReadWrite => AccessFlags::R_OK | AccessFlags::W_OK,
            };
            Ok(faccessat(
                &e.parent,
                e.name.as_os_str(),
                mode,
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )?)
        })
    }

    /// Whether the path exists inside the root (false when outside).
    pub fn exists(&self, path: &Path) -> bool {
        if self.read_rules().is_some() {
            return self.stat(path).is_ok();
        }
        if let Some(found) = self.exists_by_view(path) {
            return found;
        }
        match self.stat_in_root(path) {
            Ok(Some(_)) => return true,
            Err(_) => return false,
            Ok(None) => {}
        }
        // Opening it is enough to know: the `fstat` after would always succeed.
        #[cfg(target_os = "linux")]
        if let Some(fd) = self.open_beneath(path, OFlag::O_PATH) {
            return fd.is_ok();
        }
        self.stat(path).is_ok()
    }

    /// pi's `ls.exists` and `find.exists`: false for a missing path, the
    /// refusal for a path leaving the root, so the model reads
    /// `path "…" is outside workspace` (as from read, write and edit) rather
    /// than a `not found`. An existing path costs what `exists` costs.
    pub fn exists_inside(&self, path: &Path) -> Result<bool> {
        if self.read_rules().is_some() {
            // A denied path is refused, not missing: the model reads why.
            return match self.stat(path) {
                Ok(_) => Ok(true),
                Err(e) if matches!(e.kind(), ErrorKind::Outside | ErrorKind::Protected) => Err(e),
                Err(_) => Ok(false),
            };
        }
        if self.exists(path) {
            return Ok(true);
        }
        match self.resolve_existing(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::Outside => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// Status of the path, symlinks followed within the root.
    pub fn stat(&self, path: &Path) -> Result<Stat> {
        self.stat_how(path, true)
            .unwrap_or_else(|| Err(Errno::EAGAIN.into()))
    }

    /// [`Root::stat`] when it takes a few system calls whatever the tree
    /// holds (one `fstatat` in the root, or the kernel's own bounded
    /// resolution); `None` when the answer needs the component walk, whose
    /// cost grows with the symlinks it meets: a face runs that off its event
    /// loop.
    pub fn stat_quick(&self, path: &Path) -> Option<Result<Stat>> {
        self.stat_how(path, false)
    }

    /// `stat`; without `walk`, `None` where the component walk would be needed.
    fn stat_how(&self, path: &Path, walk: bool) -> Option<Result<Stat>> {
        let st = named("stat", path, || match self.read_rules() {
            Some(policy) => self.stat_readable(policy, path, walk),
            None => match self.stat_by_view(path) {
                Some(st) => Ok(Some(st)),
                None => match self.stat_in_root(path)? {
                    Some(st) => Ok(Some(st)),
                    None => self.stat_resolved(path, walk),
                },
            },
        });
        let st = match st {
            Ok(Some(st)) => st,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let kind = file_type(&st);
        Some(Ok(Stat {
            is_dir: kind == SFlag::S_IFDIR,
            is_file: kind == SFlag::S_IFREG,
            is_symlink: kind == SFlag::S_IFLNK,
            size: st.st_size as u64,
            mtime_ms: st.st_mtime as f64 * 1000.0 + st.st_mtime_nsec as f64 / 1e6,
            mode: st.st_mode as u32,
        }))
    }

    /// [`Root::exists_inside`] when it takes a few system calls (as
    /// [`Root::stat_quick`]); `None` when it needs the component walk.
    pub fn exists_quick(&self, path: &Path) -> Option<Result<bool>> {
        if self.read_rules().is_some() {
            return match self.stat_quick(path)? {
                Ok(_) => Some(Ok(true)),
                Err(e) if matches!(e.kind(), ErrorKind::Outside | ErrorKind::Protected) => {
                    Some(Err(e))
                }
                // Missing as given may still be refused as reached: walk.
                Err(_) => None,
            };
        }
        if let Some(found) = self.exists_by_view(path) {
            return Some(Ok(found));
        }
        // A name that failed its `fstatat` is asked of the kernel's
        // resolution, which tells a missing name from a refusal.
        if let Ok(Some(_)) = self.stat_in_root(path) {
            return Some(Ok(true));
        }
        #[cfg(target_os = "linux")]
        match self.open_beneath(path, OFlag::O_PATH)? {
            Ok(_) => Some(Ok(true)),
            Err(e) if e.kind() == ErrorKind::Outside => Some(Err(e.at("stat", path))),
            // The kernel resolved beneath the root up to a missing name.
            Err(_) => Some(Ok(false)),
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    /// `stat` under a policy with read rules: a denied path's metadata is
    /// refused too (`ls` of a denied directory starts with it).
    fn stat_readable(&self, policy: &Policy, path: &Path, walk: bool) -> Result<Option<FileStat>> {
        // Through no symlink (one `fstatat` in the root or a held directory,
        // or the kernel's resolution told to follow none), the path reached
        // is the path given.
        let given = self.lexical(path)?;
        // With every directory above it known readable, a name's own rules
        // decide alone.
        let refuse_given = |above_readable: bool, is_dir| {
            let denial = match above_readable {
                true => policy.read_denial_entry(&given, is_dir),
                false => policy.read_denial(&given, is_dir),
            };
            denial.map_or(Ok(()), |denial| Err(Error::protected(denial.rule)))
        };
        if let Some(st) = self.stat_by_view(path) {
            // The view follows no symlink: the path reached is the path given.
            let above_readable = self.readable.knows(policy, parent_of(&given));
            refuse_given(above_readable, false)?;
            if file_type(&st) == SFlag::S_IFDIR {
                refuse_given(above_readable, true)?;
            }
            return Ok(Some(st));
        }
        let parent = self.direct_parent(path);
        // A direct parent's directories are all readable (the root has none
        // above a name; a directory is held only when readable).
        let above_readable = parent.is_some();
        let refuse = |is_dir| refuse_given(above_readable, is_dir);
        refuse(false)?;
        // The parent (the root's lock, for the root) is let go here, before
        // any other resolution takes it again.
        let direct = match parent {
            Some((parent, name)) => parent.stat(name)?,
            None => None,
        };
        let direct = match direct {
            Some(st) => Some(st),
            None => {
                #[cfg(target_os = "linux")]
                let beneath = self.open_beneath_how(path, OFlag::O_PATH, true);
                #[cfg(not(target_os = "linux"))]
                let beneath: Option<Result<OwnedFd>> = None;
                match beneath {
                    Some(fd) => Some(nix::sys::stat::fstat(&fd?)?),
                    None => None,
                }
            }
        };
        if let Some(st) = direct {
            if file_type(&st) == SFlag::S_IFDIR {
                refuse(true)?;
            }
            return Ok(Some(st));
        }
        if !walk {
            return Ok(None);
        }
        let e = self.resolve_readable(policy, path, false)?;
        let st = fstatat(&e.parent, e.name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if file_type(&st) == SFlag::S_IFDIR {
            self.refuse_read_dir(policy, path, &e)?;
        }
        Ok(Some(st))
    }

    /// The root's view, when it has one in use (`view`).
    #[cfg(target_os = "linux")]
    fn view(&self) -> Option<Arc<OwnedFd>> {
        let held = self.current();
        held.view.get(&held.fd)
    }

    /// What the root's view is doing (a diagnostic: whether `stat` and
    /// `exists` take one system call).
    #[cfg(target_os = "linux")]
    pub fn view_state(&self) -> super::ViewState {
        self.current().view.state()
    }

    /// `stat` of a clean path (`clean_relative`) by the root's view: one
    /// `fstatat`, `None` when there is no view or the path is not there
    /// through directories only (a symlink on it, followed or not, fails on
    /// the view; the caller's resolution then answers, errors included).
    fn stat_by_view(&self, path: &Path) -> Option<FileStat> {
        #[cfg(target_os = "linux")]
        {
            let rel = self.clean_relative(path)?;
            fstatat(self.view()?.as_fd(), rel, AtFlags::empty()).ok()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = path;
            None
        }
    }

    /// `exists` of a clean path by the root's view: one `faccessat`; `false`
    /// when a name on it is missing or not a directory (reached through
    /// directories only, as the bounded resolution would), `None` when there
    /// is no view or a symlink is on the way.
    fn exists_by_view(&self, path: &Path) -> Option<bool> {
        #[cfg(target_os = "linux")]
        {
            let rel = self.clean_relative(path)?;
            match faccessat(
                self.view()?.as_fd(),
                rel,
                AccessFlags::F_OK,
                AtFlags::AT_EACCESS,
            ) {
                Ok(()) => Some(true),
                Err(Errno::ENOENT | Errno::ENOTDIR) => Some(false),
                Err(_) => None,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = path;
            None
        }
    }

    /// One `fstatat` for a name whose directory is at hand (`direct_parent`):
    /// a name that is not a symlink is its own answer, as the kernel looks
    /// it up in a directory reached without a symlink. `None` (a deeper
    /// path, or a symlink to follow) leaves it to [`Root::stat_resolved`].
    fn stat_in_root(&self, path: &Path) -> Result<Option<FileStat>> {
        match self.direct_parent(path) {
            Some((parent, name)) => parent.stat(name),
            None => Ok(None),
        }
    }

    /// The directory a name of `path` (clean, as pi's tools give it) is
    /// looked up in with one `fstatat`, and that name: the root for a name
    /// directly in it (what `ls` of the root stats per entry), or a directory
    /// up to [`recent::MAX_DEPTH`] levels below, held and rechecked
    /// (`recent`; what `ls` of a subdirectory stats). Under read rules, only
    /// a directory the policy lets read (with all above it) is held.
    fn direct_parent<'a>(&self, path: &'a Path) -> Option<(Parent<'_>, &'a OsStr)> {
        let rel = self.clean_relative(path)?;
        let root = self.current();
        match recent::split(rel) {
            Some((dir, name)) => {
                let readable = |dir: &Path| {
                    self.read_rules()
                        .is_none_or(|policy| policy.read_denial(dir, true).is_none())
                };
                let held = self.recent.get(root.fd.as_fd(), dir, readable)?;
                Some((Parent::Recent(held), name))
            }
            None if !rel.as_os_str().as_bytes().contains(&b'/') => {
                Some((Parent::Root(root), rel.as_os_str()))
            }
            None => None,
        }
    }

    /// `stat` by a bounded resolution: the kernel's (`openat2`) when it can,
    /// else (with `walk`) our component-wise walk.
    fn stat_resolved(&self, path: &Path, walk: bool) -> Result<Option<FileStat>> {
        #[cfg(target_os = "linux")]
        let fast = self.open_beneath(path, OFlag::O_PATH);
        #[cfg(not(target_os = "linux"))]
        let fast: Option<Result<OwnedFd>> = None;
        match fast {
            Some(fd) => Ok(Some(nix::sys::stat::fstat(&fd?)?)),
            None if !walk => Ok(None),
            None => {
                let e = self.resolve(path, false)?;
                Ok(Some(fstatat(
                    &e.parent,
                    e.name.as_os_str(),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )?))
            }
        }
    }

    /// The host path of an existing directory inside the root, symlinks
    /// resolved: the start of a walk for find and grep.
    pub fn resolve_dir(&self, path: &Path) -> Result<PathBuf> {
        named("scandir", path, || match self.existing(path)? {
            (host, true) => Ok(host),
            (_, false) => Err(Errno::ENOTDIR.into()),
        })
    }

    /// The real host path of an existing entry inside the root and whether it
    /// is a directory.
    pub fn resolve_existing(&self, path: &Path) -> Result<(PathBuf, bool)> {
        named("stat", path, || self.existing(path))
    }

    fn existing(&self, path: &Path) -> Result<(PathBuf, bool)> {
        let policy = self.read_rules();
        let e = match policy {
            Some(policy) => self.resolve_readable(policy, path, false)?,
            None => self.resolve(path, false)?,
        };
        let st = fstatat(&e.parent, e.name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
        let is_dir = file_type(&st) == SFlag::S_IFDIR;
        if let (Some(policy), true) = (policy, is_dir) {
            self.refuse_read_dir(policy, path, &e)?;
        }
        Ok((self.paths.host.join(&e.rel), is_dir))
    }

    /// Opens a directory for listing (symlinks followed within the root): the
    /// start of a walk for find and grep.
    pub fn open_dir(&self, path: &Path) -> Result<OwnedFd> {
        if let Some(policy) = self.read_rules() {
            return named("scandir", path, || {
                self.open_readable(policy, path, LIST_FLAGS)
            });
        }
        named("scandir", path, || {
            match self.open_beneath(path, LIST_FLAGS) {
                Some(fd) => fd,
                None => {
                    let e = self.resolve(path, false)?;
                    Ok(openat(
                        &e.parent,
                        e.name.as_os_str(),
                        LIST_FLAGS | OFlag::O_NOFOLLOW,
                        Mode::empty(),
                    )?)
                }
            }
        })
    }

    /// Names in a directory, in byte order (as Node's `readdir` on unix).
    pub fn read_dir(&self, path: &Path) -> Result<Vec<OsString>> {
        Ok(self.read_dir_upto(path, usize::MAX)?.unwrap_or_default())
    }

    /// The directory's entry names if it has at most `max` entries, else
    /// `None` (having read no more than `max + 1` of them).
    ///
    /// Under a policy, denied-read entries are left out (of the count too).
    pub fn read_dir_upto(&self, path: &Path, max: usize) -> Result<Option<Vec<OsString>>> {
        // Where the directory is, as given and as reached: an entry denied
        // under either is left out.
        let (fd, places) = match self.read_rules() {
            Some(policy) => {
                let (fd, reached) = named("scandir", path, || {
                    self.open_readable_reached(policy, path, LIST_FLAGS)
                })?;
                (fd, Some((policy, self.lexical(path)?, reached)))
            }
            None => (self.open_dir(path)?, None),
        };
        named("scandir", path, || {
            let mut dir = nix::dir::Dir::from_fd(fd)?;
            let mut names = Vec::new();
            // An entry's path under the policy, made in one buffer for all.
            let mut joined: Vec<u8> = Vec::new();
            let dir_fd = dir.as_raw_fd();
            for entry in dir.iter() {
                let entry = entry?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                if let Some((policy, given, real)) = &places {
                    let name = std::ffi::OsStr::from_bytes(name);
                    let kind = match entry.file_type() {
                        Some(nix::dir::Type::Directory) => SFlag::S_IFDIR,
                        Some(nix::dir::Type::Symlink) => SFlag::S_IFLNK,
                        Some(_) => SFlag::S_IFREG,
                        None => {
                            // SAFETY: `dir_fd` is the descriptor `dir` owns, alive for the loop.
                            let dir_fd = unsafe { BorrowedFd::borrow_raw(dir_fd) };
                            fstatat(dir_fd, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                                .map_or(SFlag::S_IFREG, |st| file_type(&st))
                        }
                    };
                    let is_dir = kind == SFlag::S_IFDIR;
                    // The directory is allowed (it was opened), so the entry alone decides.
                    let mut denied = |dir: &Path| {
                        joined.clear();
                        joined.extend_from_slice(dir.as_os_str().as_bytes());
                        if !joined.is_empty() {
                            joined.push(b'/');
                        }
                        joined.extend_from_slice(name.as_bytes());
                        let entry = Path::new(OsStr::from_bytes(&joined));
                        policy.read_denial_entry(entry, is_dir).is_some()
                    };
                    if denied(given) || real.as_deref().is_some_and(&mut denied) {
                        continue;
                    }
                    // A symlink is listed as what it leads to (a listing stats
                    // each entry): one to a denied path is left out too.
                    if kind == SFlag::S_IFLNK
                        && self
                            .stat_readable(policy, &path.join(name), true)
                            .is_err_and(|e| e.kind() == ErrorKind::Protected)
                    {
                        continue;
                    }
                }
                if names.len() == max {
                    return Ok(None);
                }
                names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
            }
            // In byte order, as Node's readdir gives them (libuv's scandir
            // sorts with strcmp): pi's ls then sorts a list already in order.
            names.sort_unstable();
            Ok(Some(names))
        })
    }

    /// Creates the directory and its missing parents, never outside the root.
    /// Under a policy, a directory is created only where writing is allowed;
    /// one that exists already is no write and passes.
    pub fn mkdir_all(&self, path: &Path) -> Result<()> {
        // Usually the directory exists already (pi calls mkdir before every write).
        if let Some(Ok(_)) = self.open_beneath(path, dir_flags() & !OFlag::O_NOFOLLOW) {
            return Ok(());
        }
        // The root and its ancestors exist, whatever the workspace holds. pi's write makes its file's
        // parent first: for a file beside the root (`../x`) or the root itself (`.`), the refusal (or
        // EISDIR) then comes from the write of the file, and names it rather than its directory.
        if self.is_root_or_ancestor(path) {
            return Ok(());
        }
        named("mkdir", path, || {
            if let Some(policy) = self.write_rules() {
                refuse_write(policy, &self.lexical(path)?, true)?;
            }
            let e = self.resolve(path, true)?;
            // The walk stops on the last component when it is not a directory.
            if e.name != "." {
                let st = fstatat(&e.parent, e.name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
                if file_type(&st) != SFlag::S_IFDIR {
                    return Err(Errno::EEXIST.into());
                }
            }
            Ok(())
        })
    }

    /// Replaces the file's content atomically: the data goes to a temporary
    /// file in the same directory, which is renamed over the target, so a
    /// crash leaves the old or the new content, never a torn file. A symlink
    /// is written through (its target is replaced, the link kept); an existing
    /// file keeps its mode and owner. The parent directory must exist.
    pub fn write_file(&self, path: &Path, data: &[u8]) -> Result<()> {
        named("open", path, || self.replace(path, data))
    }

    fn replace(&self, path: &Path, data: &[u8]) -> Result<()> {
        let e = match self.write_rules() {
            Some(policy) => self.resolve_writable(policy, path, false)?,
            None => self.resolve(path, false)?,
        };
        if e.name == "." {
            return Err(Errno::EISDIR.into());
        }
        let existing = match fstatat(&e.parent, e.name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if file_type(&st) == SFlag::S_IFDIR => return Err(Errno::EISDIR.into()),
            Ok(st) => Some(st),
            Err(Errno::ENOENT) => None,
            Err(err) => return Err(err.into()),
        };
        let tmp = temp_name();
        let fd = openat(
            &e.parent,
            tmp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )?;
        let written = (|| -> Result<()> {
            if let Some(st) = &existing {
                let (uid, gid) = (Uid::from_raw(st.st_uid), Gid::from_raw(st.st_gid));
                if uid != Uid::effective() || gid != Gid::effective() {
                    // Only root can give a file away; anyone else keeps ownership as is.
                    let _ = fchown(&fd, Some(uid), Some(gid));
                }
                fchmod(&fd, Mode::from_bits_truncate(st.st_mode as _))?;
            }
            File::from(fd.try_clone()?).write_all(data)?;
            renameat(&e.parent, tmp.as_os_str(), &e.parent, e.name.as_os_str())?;
            Ok(())
        })();
        if written.is_err() {
            let _ = unlinkat(&e.parent, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
        }
        written
    }
}

/// Runs `op`, naming the system call (as Node names it) and the path as given
/// in its error, so messages read like Node's (`ENOENT: …, open '<path>'`).
fn named<T>(syscall: &'static str, path: &Path, op: impl FnOnce() -> Result<T>) -> Result<T> {
    op().map_err(|e| e.at(syscall, path))
}

/// Puts the components of `path` in front of the pending walk.
fn push_front_components(pending: &mut VecDeque<OsString>, path: &Path) {
    for c in path.components().rev() {
        match c {
            Component::Normal(n) => pending.push_front(n.to_os_string()),
            Component::ParentDir => pending.push_front(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
}

/// A file's (device, inode).
// `dev_t` is not `u64` everywhere (macOS: `i32`).
#[allow(clippy::unnecessary_cast)]
fn identity(st: &FileStat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode as _) & SFlag::S_IFMT
}

/// Flags for a directory opened only to walk through it.
fn dir_flags() -> OFlag {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let base = OFlag::O_PATH;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let base = OFlag::O_RDONLY;
    base | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// A read never waits on its open: `O_NONBLOCK` (a FIFO's open waits for a
/// writer; a regular file's reads ignore the flag).
fn read_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// A name for a temporary file, unique in this process and across processes.
fn temp_name() -> OsString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    OsString::from(format!(".pi-native-ops-{}-{n}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::MAX_READ_BYTES;
    use std::fs;
    use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};

    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(root.join("sub/deep")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(root.join("a.txt"), "A").unwrap();
        fs::write(root.join("sub/deep/b.txt"), "B").unwrap();
        fs::write(outside.join("secret"), "S").unwrap();
        Fixture {
            _tmp: tmp,
            root,
            outside,
        }
    }

    /// A failed call's kind and errno, to compare.
    fn failure<T: std::fmt::Debug>(r: Result<T>) -> (ErrorKind, Option<i32>) {
        let e = r.unwrap_err();
        (e.kind(), e.errno())
    }

    const OUTSIDE: (ErrorKind, Option<i32>) = (ErrorKind::Outside, None);

    fn os(e: Errno) -> (ErrorKind, Option<i32>) {
        (ErrorKind::Os, Some(e as i32))
    }

    fn open(f: &Fixture) -> Root {
        Root::open(&f.root, None).unwrap()
    }

    #[test]
    fn reads_inside_and_refuses_outside() {
        let f = fixture();
        let r = open(&f);
        assert_eq!(r.read_file(&f.root.join("a.txt")).unwrap(), b"A");
        assert_eq!(
            r.read_file(&f.root.join("sub/deep/../deep/b.txt")).unwrap(),
            b"B"
        );
        assert_eq!(failure(r.read_file(&f.outside.join("secret"))), OUTSIDE);
        assert_eq!(
            failure(r.read_file(&f.root.join("../outside/secret"))),
            OUTSIDE
        );
        assert_eq!(
            failure(r.read_file(&f.root.join("missing"))),
            os(Errno::ENOENT)
        );
    }

    #[test]
    fn read_file_within_refuses_past_its_bound_before_reading() {
        let f = fixture();
        let r = open(&f);
        let file = f.root.join("ten");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(r.read_file_within(&file, 10).unwrap(), b"0123456789");
        let e = r.read_file_within(&file, 9).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::FileTooLarge);
        assert_eq!(e.code().as_deref(), Some("ERR_FS_FILE_TOO_LARGE"));
        assert_eq!(
            e.to_string(),
            "File size (10) is greater than 9 bytes, the most one answer carries"
        );
        // Past Node's bound, Node's refusal, whatever the bound given (as the local face says it).
        let sparse = f.root.join("sparse");
        File::create(&sparse).unwrap().set_len(1 << 40).unwrap();
        let e = r.read_file_within(&sparse, u64::MAX).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("File size ({}) is greater than 2 GiB", 1u64 << 40)
        );
        let e = r.read_file_within(&sparse, 9).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("File size ({}) is greater than 2 GiB", 1u64 << 40)
        );
    }

    #[test]
    fn a_file_over_2_gib_is_refused_without_reserving_its_size() {
        let f = fixture();
        let r = open(&f);
        let sparse = f.root.join("sparse");
        let file = File::create(&sparse).unwrap();
        for size in [1u64 << 40, MAX_READ_BYTES + 1] {
            file.set_len(size).unwrap();
            let e = r.read_file(&sparse).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::FileTooLarge, "{size}");
            assert_eq!(
                e.to_string(),
                format!("File size ({size}) is greater than 2 GiB")
            );
        }
        // A regular file is read up to its size; a sniff reads its head.
        fs::write(&sparse, "0123456789").unwrap();
        assert_eq!(r.read_file(&sparse).unwrap(), b"0123456789");
        assert_eq!(r.read_head(&sparse, 4).unwrap(), b"0123");
    }

    #[test]
    fn a_fifo_is_refused_at_once_for_reading() {
        let f = fixture();
        let r = open(&f);
        let fifo = f.root.join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let espipe = (ErrorKind::Os, Some(libc::ESPIPE));
        assert_eq!(failure(r.read_file(&fifo)), espipe);
        assert_eq!(failure(r.read_head(&fifo, 16)), espipe);
        assert_eq!(failure(r.open_read(&fifo)), espipe);
        assert_eq!(
            r.read_file(&fifo).unwrap_err().to_string(),
            "ESPIPE: invalid seek, read"
        );
        // Grep's open takes it, without waiting for a writer.
        assert!(r
            .open_any(&fifo)
            .unwrap()
            .metadata()
            .unwrap()
            .file_type()
            .is_fifo());
    }

    #[test]
    fn follows_symlinks_only_within_the_root() {
        let f = fixture();
        symlink("sub/deep/b.txt", f.root.join("rel-link")).unwrap();
        symlink(f.root.join("a.txt"), f.root.join("abs-link")).unwrap();
        symlink(&f.outside, f.root.join("out-dir")).unwrap();
        symlink(f.outside.join("secret"), f.root.join("out-file")).unwrap();
        symlink("../../outside/secret", f.root.join("sub/up")).unwrap();
        symlink("loop-b", f.root.join("loop-a")).unwrap();
        symlink("loop-a", f.root.join("loop-b")).unwrap();
        let r = open(&f);
        assert_eq!(r.read_file(&f.root.join("rel-link")).unwrap(), b"B");
        assert_eq!(r.read_file(&f.root.join("abs-link")).unwrap(), b"A");
        assert_eq!(
            failure(r.read_file(&f.root.join("out-dir/secret"))),
            OUTSIDE
        );
        assert_eq!(failure(r.read_file(&f.root.join("out-file"))), OUTSIDE);
        assert_eq!(failure(r.read_file(&f.root.join("sub/up"))), OUTSIDE);
        assert_eq!(
            failure(r.read_file(&f.root.join("loop-a"))),
            os(Errno::ELOOP)
        );
        assert!(!r.exists(&f.root.join("out-dir")));
        assert!(r.stat(&f.root.join("sub")).unwrap().is_dir);
    }

    #[test]
    fn a_path_of_path_max_bytes_is_refused_as_node_s_fs_refuses_it() {
        let f = fixture();
        // With the protected defaults: the policy is asked of each new directory.
        let policy = Policy::new(&crate::policy::PolicySpec::from_raw(None, None, None)).unwrap();
        let r = open(&f).with_policy(Arc::new(policy));
        let deep = f.root.join("ab/".repeat(2000));
        let file = deep.join("f.txt");
        let too_long = |e: Error, call: &str, p: &Path| {
            assert_eq!((e.kind(), e.errno()), os(Errno::ENAMETOOLONG));
            assert!(e.to_string().starts_with(&format!(
                "ENAMETOOLONG: name too long, {call} '{}",
                p.display()
            )));
        };
        too_long(r.mkdir_all(&deep).unwrap_err(), "mkdir", &deep);
        too_long(r.write_file(&file, b"x").unwrap_err(), "open", &file);
        too_long(r.stat(&file).unwrap_err(), "stat", &file);
        assert!(!r.exists_inside(&file).unwrap());
        assert!(!f.root.join("ab").exists(), "nothing created");
        // Just under the bound, as deep as it goes: made, written, read.
        let room = PATH_MAX - 1 - f.root.as_os_str().len() - "/f".len();
        let deepest = f.root.join("ab/".repeat(room / 3));
        r.mkdir_all(&deepest).unwrap();
        r.write_file(&deepest.join("f"), b"deep").unwrap();
        assert_eq!(r.read_file(&deepest.join("f")).unwrap(), b"deep");
        // A denied name deep down is still refused as the walk creates it.
        for denied in ["ab/ab/ab/.git/hooks/x", "fresh/new/.git/hooks/x"] {
            assert_eq!(
                failure(r.mkdir_all(&f.root.join(denied))).0,
                ErrorKind::Protected
            );
        }
        assert!(!f.root.join("fresh/new/.git/hooks").exists());
    }

    #[test]
    fn errors_name_the_call_and_the_path_as_given() {
        let f = fixture();
        let r = open(&f);
        let (missing, file) = (f.root.join("missing"), f.root.join("a.txt"));
        let text = |e: Error| e.to_string();
        let enoent = |call: &str| {
            format!(
                "ENOENT: no such file or directory, {call} '{}'",
                missing.display()
            )
        };
        assert_eq!(text(r.read_file(&missing).unwrap_err()), enoent("open"));
        assert_eq!(text(r.read_head(&missing, 4).unwrap_err()), enoent("open"));
        assert_eq!(
            text(r.access(&missing, Access::Read).unwrap_err()),
            enoent("access")
        );
        assert_eq!(text(r.stat(&missing).unwrap_err()), enoent("stat"));
        assert_eq!(text(r.read_dir(&missing).unwrap_err()), enoent("scandir"));
        assert_eq!(
            text(r.resolve_existing(&missing).unwrap_err()),
            enoent("stat")
        );
        let notdir = format!("ENOTDIR: not a directory, scandir '{}'", file.display());
        assert_eq!(text(r.resolve_dir(&file).unwrap_err()), notdir);
        assert_eq!(text(r.read_dir_upto(&file, 1).unwrap_err()), notdir);
        assert_eq!(
            text(r.mkdir_all(&file).unwrap_err()),
            format!("EEXIST: file already exists, mkdir '{}'", file.display())
        );
        let sub = f.root.join("sub");
        assert_eq!(
            text(r.write_file(&sub, b"x").unwrap_err()),
            format!(
                "EISDIR: illegal operation on a directory, open '{}'",
                sub.display()
            )
        );
        // A refusal names the path given, not where its symlink leads.
        symlink(f.outside.join("secret"), f.root.join("out-file")).unwrap();
        let link = f.root.join("out-file");
        let refusal = r.read_file(&link).unwrap_err();
        assert_eq!(
            text(refusal.clone()),
            format!("path \"{}\" is outside workspace", link.display())
        );
        assert_eq!((refusal.code(), refusal.syscall()), (None, None));
        assert_eq!(
            text(Root::open(&missing, None).unwrap_err()),
            format!(
                "cannot open workspace root \"{}\": No such file or directory (os error 2)",
                missing.display()
            )
        );
    }

    #[test]
    fn stat_of_a_name_in_the_root_matches_the_resolved_stat() {
        let f = fixture();
        symlink("a.txt", f.root.join("in-link")).unwrap();
        symlink("sub", f.root.join("dir-link")).unwrap();
        symlink(f.outside.join("secret"), f.root.join("out-file")).unwrap();
        symlink("missing", f.root.join("dangling")).unwrap();
        let r = open(&f);
        let meta = |p: &str| fs::metadata(f.root.join(p)).unwrap();
        for (given, real) in [
            ("a.txt", "a.txt"),
            ("sub", "sub"),
            ("in-link", "a.txt"),
            ("dir-link", "sub"),
            ("sub/deep/b.txt", "sub/deep/b.txt"),
            ("./a.txt", "a.txt"),
            ("sub/../a.txt", "a.txt"),
            ("a.txt/", "a.txt"),
        ] {
            let st = r.stat(&PathBuf::from(format!("{}/{given}", f.root.display())));
            let (st, m) = (st.unwrap(), meta(real));
            assert_eq!(
                (st.mode, st.size, st.is_dir, st.is_file, st.is_symlink),
                (m.mode(), m.len(), m.is_dir(), m.is_file(), false),
                "{given}"
            );
            assert!(r.exists(&f.root.join(given)), "{given}");
            assert_eq!(r.exists_inside(&f.root.join(given)), Ok(true));
        }
        // A symlink in the root is followed, never stat'ed as the link, and
        // still bounded.
        assert_eq!(failure(r.stat(&f.root.join("out-file"))), OUTSIDE);
        assert!(!r.exists(&f.root.join("out-file")));
        for missing in ["dangling", "missing", "sub/missing"] {
            assert_eq!(
                failure(r.stat(&f.root.join(missing))),
                os(Errno::ENOENT),
                "{missing}"
            );
            assert!(!r.exists(&f.root.join(missing)), "{missing}");
            assert_eq!(r.exists_inside(&f.root.join(missing)), Ok(false));
        }
        for given in ["a.txt", "sub", "."] {
            assert_eq!(r.exists_inside(&f.root.join(given)), Ok(true), "{given}");
        }
        // Outside: the refusal, not `false` (a link out, the root's parent).
        for outside in [f.root.join("out-file"), f.root.join("..")] {
            let refused = r.exists_inside(&outside).unwrap_err();
            assert_eq!(refused.kind(), ErrorKind::Outside, "{outside:?}");
        }
        assert_eq!(failure(r.stat(&f.root.join("a.txt/x"))), os(Errno::ENOTDIR));
        assert_eq!(
            failure(r.stat(&f.root.join("x".repeat(300)))),
            os(Errno::ENAMETOOLONG)
        );
    }

    #[test]
    fn a_held_subdirectory_moved_out_is_not_looked_in_again() {
        let f = fixture();
        let plain = open(&f);
        let ruled = with_policy(&f, &["*.key"], &[]);
        for r in [&plain, &ruled] {
            let file = f.root.join("sub/deep/b.txt");
            let quick = |p: &Path| r.stat_quick(p).unwrap();
            assert_eq!(quick(&file).unwrap().size, 1);
            assert_eq!(r.exists_quick(&file), Some(Ok(true)));
            // Held now; moved out of the root: missing, not the moved file.
            fs::rename(f.root.join("sub"), f.outside.join("sub")).unwrap();
            assert_eq!(failure(quick(&file)), os(Errno::ENOENT));
            assert_eq!(r.exists_inside(&file), Ok(false));
            // A symlink out in its place: refused.
            symlink(f.outside.join("sub"), f.root.join("sub")).unwrap();
            assert_eq!(failure(r.stat(&file)), OUTSIDE);
            assert_eq!(
                r.exists_inside(&file).map_err(|e| e.kind()),
                Err(ErrorKind::Outside)
            );
            fs::remove_file(f.root.join("sub")).unwrap();
            fs::rename(f.outside.join("sub"), f.root.join("sub")).unwrap();
        }
        // Under read rules, a name in a held directory is judged by its own
        // rules, a directory's too, as the whole path is.
        fs::write(f.root.join("sub/deep/k.key"), "K").unwrap();
        let denied = with_policy(&f, &["*.key", "deep/"], &[]);
        assert!(rule(denied.stat(&f.root.join("sub/deep/b.txt"))).is_some());
        assert!(rule(denied.stat(&f.root.join("sub/deep"))).is_some());
        assert!(rule(ruled.stat(&f.root.join("sub/deep/k.key"))).is_some());
        assert!(ruled.stat(&f.root.join("sub/deep")).is_ok());
    }

    #[test]
    fn parent_of_is_path_parent_for_clean_paths() {
        for p in ["a", "a/b", "a/b/c.txt", "dir.d/x"] {
            let p = Path::new(p);
            assert_eq!(parent_of(p), p.parent().unwrap(), "{}", p.display());
        }
    }

    #[test]
    fn readable_dirs_remember_only_what_the_policy_lets_read() {
        let policy = Policy::new(&crate::policy::PolicySpec {
            deny_read: vec!["secrets/".to_string()],
            deny_write: Vec::new(),
            protect: false,
        })
        .unwrap();
        let dirs = ReadableDirs::default();
        assert!(dirs.knows(&policy, Path::new("")));
        assert!(dirs.knows(&policy, Path::new("a/b")));
        assert!(!dirs.knows(&policy, Path::new("a/secrets")));
        assert!(!dirs.knows(&policy, Path::new("a/secrets/inner")));
        assert!(dirs.knows(&policy, Path::new("a/b")));
        assert_eq!(dirs.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn clean_relative_is_what_strip_prefix_gives() {
        let f = fixture();
        let r = Root::open(&f.root, Some(Path::new("/workspace"))).unwrap();
        let root = f.root.canonicalize().unwrap();
        fn strip<'a>(r: &Root, p: &'a Path) -> Option<&'a Path> {
            r.aliases.iter().find_map(|a| p.strip_prefix(a).ok())
        }
        for p in [
            root.join("a.txt"),
            root.join("sub/deep/b.txt"),
            PathBuf::from("/workspace/sub/deep"),
        ] {
            assert_eq!(r.clean_relative(&p), strip(&r, &p), "{}", p.display());
            assert!(r.clean_relative(&p).is_some(), "{}", p.display());
        }
        // Anything else is left to strip_prefix.
        for p in [
            "/workspace",
            "/workspace/",
            "/workspace//a",
            "/workspace/./a",
            "/workspace/a/../b",
            "/workspace/a/",
            "/workspacex/a",
            "/elsewhere/a",
        ] {
            assert_eq!(r.clean_relative(Path::new(p)), None, "{p}");
        }
    }

    #[test]
    fn runtime_paths_map_to_the_host_root() {
        let f = fixture();
        let r = Root::open(&f.root, Some(Path::new("/workspace"))).unwrap();
        assert_eq!(r.read_file(Path::new("/workspace/a.txt")).unwrap(), b"A");
        assert_eq!(
            r.to_runtime(&r.host().join("sub")),
            Path::new("/workspace/sub")
        );
        assert_eq!(
            failure(r.read_file(Path::new("/workspace/../etc/passwd"))),
            OUTSIDE
        );
    }

    #[test]
    fn writes_atomically_keeping_mode_and_links() {
        let f = fixture();
        let r = open(&f);
        let a = f.root.join("a.txt");
        fs::set_permissions(&a, fs::Permissions::from_mode(0o751)).unwrap();
        r.write_file(&a, b"new").unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&a).unwrap().permissions().mode() & 0o777,
            0o751
        );
        symlink("a.txt", f.root.join("link")).unwrap();
        r.write_file(&f.root.join("link"), b"through").unwrap();
        assert!(fs::symlink_metadata(f.root.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&a).unwrap(), b"through");
        // No temporary files are left behind.
        let leftovers: Vec<_> = r
            .read_dir(&f.root)
            .unwrap()
            .into_iter()
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn writes_never_leave_the_root() {
        let f = fixture();
        let r = open(&f);
        symlink(f.outside.join("new"), f.root.join("dangling")).unwrap();
        symlink(&f.outside, f.root.join("out-dir")).unwrap();
        assert_eq!(
            failure(r.write_file(&f.root.join("dangling"), b"x")),
            OUTSIDE
        );
        assert_eq!(
            failure(r.write_file(&f.root.join("out-dir/x"), b"x")),
            OUTSIDE
        );
        assert_eq!(failure(r.mkdir_all(&f.root.join("out-dir/x/y"))), OUTSIDE);
        assert!(!f.outside.join("new").exists() && !f.outside.join("x").exists());
        assert_eq!(
            failure(r.write_file(&f.root.join("no/such/dir/file"), b"x")),
            os(Errno::ENOENT)
        );
    }

    #[test]
    fn mkdir_of_the_root_or_an_ancestor_passes_and_the_write_beneath_names_its_file() {
        let f = fixture();
        let r = open(&f);
        let parent = f.root.parent().unwrap();
        r.mkdir_all(parent).unwrap();
        r.mkdir_all(Path::new("/")).unwrap();
        r.mkdir_all(&f.root).unwrap();
        assert_eq!(
            r.write_file(&parent.join("outside.txt"), b"x")
                .unwrap_err()
                .to_string(),
            format!(
                "path \"{}\" is outside workspace",
                parent.join("outside.txt").display()
            )
        );
        assert_eq!(failure(r.write_file(&f.root, b"x")), os(Errno::EISDIR));
        // A directory outside that is not an ancestor is still refused, not made.
        let beside = parent.join("beside");
        assert!(r.mkdir_all(&beside).is_err());
        assert!(!beside.exists());
    }

    #[test]
    fn mkdir_creates_parents_and_rejects_files() {
        let f = fixture();
        let r = open(&f);
        r.mkdir_all(&f.root.join("x/y/z")).unwrap();
        assert!(f.root.join("x/y/z").is_dir());
        r.mkdir_all(&f.root.join("x/y/z")).unwrap();
        r.mkdir_all(&f.root).unwrap();
        assert_eq!(
            failure(r.mkdir_all(&f.root.join("a.txt"))),
            os(Errno::EEXIST)
        );
    }

    #[test]
    fn access_and_read_dir() {
        let f = fixture();
        let r = open(&f);
        r.access(&f.root.join("a.txt"), Access::ReadWrite).unwrap();
        assert_eq!(
            failure(r.access(&f.root.join("nope"), Access::Read)),
            os(Errno::ENOENT)
        );
        let mut names = r.read_dir(&f.root.join("sub/..")).unwrap();
        names.sort();
        assert_eq!(names, [OsString::from("a.txt"), OsString::from("sub")]);
        // Up to a count: all names, or None when there are more.
        let upto = |max| r.read_dir_upto(&f.root, max).unwrap().map(|n| n.len());
        assert_eq!((upto(3), upto(2), upto(1)), (Some(2), Some(2), None));
        assert_eq!(
            failure(r.read_dir_upto(&f.root.join("a.txt"), 5)),
            os(Errno::ENOTDIR)
        );
        assert_eq!(
            r.resolve_dir(&f.root.join("sub/deep")).unwrap(),
            r.host().join("sub/deep")
        );
    }

    fn with_policy(f: &Fixture, read: &[&str], write: &[&str]) -> Root {
        use crate::policy::PolicySpec;
        let spec = PolicySpec {
            deny_read: read.iter().map(|s| s.to_string()).collect(),
            deny_write: write.iter().map(|s| s.to_string()).collect(),
            protect: true,
        };
        open(f).with_policy(Arc::new(Policy::new(&spec).unwrap()))
    }

    /// The rule of a refusal, or `None` for any other outcome.
    fn rule<T: std::fmt::Debug>(r: Result<T>) -> Option<String> {
        r.err()
            .filter(|e| e.kind() == ErrorKind::Protected)
            .map(|e| e.rule().unwrap().to_string())
    }

    #[test]
    fn a_policy_refuses_denied_reads_as_given_and_as_reached() {
        let f = fixture();
        fs::write(f.root.join(".env"), "SECRET").unwrap();
        fs::write(f.root.join(".ENV"), "other file").unwrap();
        fs::create_dir_all(f.root.join("secrets/deep")).unwrap();
        fs::write(f.root.join("secrets/deep/key"), "K").unwrap();
        symlink(".env", f.root.join("x")).unwrap();
        symlink("secrets/deep", f.root.join("pub")).unwrap();
        symlink("a.txt", f.root.join("sub/.env")).unwrap();
        let r = with_policy(&f, &[".env", "secrets/"], &[]);
        let p = |rel: &str| f.root.join(rel);
        for path in [
            ".env",
            "x",
            "sub/.env",
            "secrets/deep/key",
            "pub/key",
            "sub/../.env",
        ] {
            let path = p(path);
            assert!(rule(r.read_file(&path)).is_some(), "{path:?}");
            assert!(rule(r.read_head(&path, 4)).is_some(), "{path:?}");
            assert!(rule(r.access(&path, Access::Read)).is_some(), "{path:?}");
            assert!(rule(r.stat(&path)).is_some(), "{path:?}");
            assert!(rule(r.exists_inside(&path)).is_some(), "{path:?}");
            assert!(!r.exists(&path), "{path:?}");
        }
        let e = r.read_file(&p("x")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("path \"{}\" is protected by policy", p("x").display())
        );
        assert_eq!(e.rule(), Some(".env"));
        // A missing denied name is refused too (whether it exists is not told).
        assert_eq!(
            rule(r.read_file(&p("sub/deep/.env"))).as_deref(),
            Some(".env")
        );
        // Directories: refused as a whole, listing included.
        for dir in ["secrets", "secrets/deep", "pub"] {
            assert!(rule(r.read_dir(&p(dir))).is_some(), "{dir}");
            assert!(rule(r.resolve_dir(&p(dir))).is_some(), "{dir}");
            assert!(rule(r.stat(&p(dir))).is_some(), "{dir}");
        }
        // A listing leaves denied entries out; the rest reads as before.
        let mut names = r.read_dir(&f.root).unwrap();
        names.sort();
        // `x` and `pub` lead to denied paths: left out as what they lead to.
        assert_eq!(names, [".ENV", "a.txt", "sub"].map(OsString::from));
        assert_eq!(
            r.read_dir_upto(&f.root, 3).unwrap().map(|n| n.len()),
            Some(3)
        );
        assert_eq!(r.read_dir(&p("sub")).unwrap(), [OsString::from("deep")]);
        // Case matters on a case-sensitive file system: `.ENV` is another file.
        assert_eq!(r.read_file(&p(".ENV")).unwrap(), b"other file");
        assert_eq!(r.read_file(&p("a.txt")).unwrap(), b"A");
        // Created after the policy: no match is cached.
        fs::write(f.root.join("sub/deep/.env"), "late").unwrap();
        assert!(rule(r.read_file(&p("sub/deep/.env"))).is_some());
        // Writing a denied-read file is allowed (it reveals nothing).
        r.write_file(&p(".env"), b"new").unwrap();
    }

    #[test]
    fn a_policy_refuses_protected_writes_through_symlinks() {
        let f = fixture();
        fs::create_dir_all(f.root.join(".git/hooks")).unwrap();
        fs::write(f.root.join(".git/config"), "[core]").unwrap();
        symlink(".git/hooks", f.root.join("link")).unwrap();
        symlink(".git", f.root.join("g")).unwrap();
        let r = with_policy(&f, &[], &["locked/"]);
        let p = |rel: &str| f.root.join(rel);
        for path in [
            ".git/hooks/pre-commit",
            "link/pre-commit",
            "g/config",
            ".envrc",
            "locked/x",
        ] {
            assert!(rule(r.write_file(&p(path), b"x")).is_some(), "{path}");
        }
        assert!(rule(r.access(&p("g/config"), Access::ReadWrite)).is_some());
        r.access(&p("g/config"), Access::Read).unwrap();
        assert!(rule(r.mkdir_all(&p("link/sub"))).is_some());
        assert!(rule(r.mkdir_all(&p("g/hooks/sub"))).is_some());
        assert!(rule(r.mkdir_all(&p("locked"))).is_some());
        assert!(!p(".git/hooks/pre-commit").exists() && !p(".git/hooks/sub").exists());
        assert!(!p(".envrc").exists() && !p("locked").exists());
        assert_eq!(fs::read(p(".git/config")).unwrap(), b"[core]");
        // What git itself writes stays writable; an existing directory is no write.
        r.write_file(&p(".git/index"), b"i").unwrap();
        r.mkdir_all(&p(".git/hooks")).unwrap();
        r.write_file(&p("a.txt"), b"ok").unwrap();
        // Without the protected defaults, the hook is written.
        let open_root = open(&f).with_policy(Arc::new(
            Policy::new(&crate::policy::PolicySpec::from_raw(
                None,
                None,
                Some(false),
            ))
            .unwrap(),
        ));
        open_root.write_file(&p("link/pre-commit"), b"x").unwrap();
    }

    #[test]
    fn access_modes_are_named_once() {
        assert!(matches!(Access::from_mode("rw"), Access::ReadWrite));
        for mode in ["r", "", "w", "RW", "rwx"] {
            assert!(matches!(Access::from_mode(mode), Access::Read), "{mode}");
        }
    }
}
