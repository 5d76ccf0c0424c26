//! Paths resolved for the caller as the kernel would, for both handlers (the metadata calls'
//! objects and the guard's): one component at a time from the caller's root or cwd (`walk`),
//! symlinks read and followed inside the caller's root, `/proc/self` as the caller's, and nothing
//! in another process's `/proc/<pid>` ever looked up, opened or followed (`proc_decision`).

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::caller::Target;
use super::decode::{At, Object};
use super::objects::{
    components, dup, identity, is_number, is_proc_root, on_proc, openat, readlinkat, stat_at,
    stat_of, Stat,
};
use super::PATH_MAX;

/// Symlinks followed in one path before `ELOOP` (the kernel's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;
/// What a walk into another process's `/proc/<pid>` (or anywhere it cannot place) fails with.
const OUT_OF_REACH: i32 = libc::EACCES;

/// The caller of one notification, for path walks: its root, and its pid as its `/proc` shows it.
pub(super) struct Caller<'a, 'b> {
    pub(super) target: &'a Target<'b>,
    /// Opened on first use: a relative path without `..` or absolute symlinks needs none.
    root: std::cell::OnceCell<Result<OwnedFd, i32>>,
    /// `ns_ids`, read on first use (only a path through `/proc` needs them).
    ids: std::cell::OnceCell<Option<(String, String)>>,
}

impl<'a, 'b> Caller<'a, 'b> {
    pub(super) fn new(target: &'a Target<'b>) -> Self {
        Caller {
            target,
            root: std::cell::OnceCell::new(),
            ids: std::cell::OnceCell::new(),
        }
    }

    /// The caller's own process and thread directories as `/proc` names them.
    fn ids(&self) -> Result<(&str, &str), i32> {
        match self.ids.get_or_init(|| self.ns_ids()) {
            Some((pid, tid)) => Ok((pid, tid)),
            None => Err(libc::ESRCH),
        }
    }

    /// Whether `name`, in the procfs root `root`, is the caller's own: its process, its thread,
    /// or another of its threads (`<pid>/task/<name>`). Every other process's is refused. The
    /// caller's procfs is mounted for its own PID namespace (the sandbox's, or the host's in
    /// Landlock mode), and the shell can mount no other, so its pids there are `ns_ids`.
    fn owns_proc_entry(&self, root: BorrowedFd<'_>, name: &[u8]) -> Result<(), i32> {
        let (pid, tid) = self.ids()?;
        if name == pid.as_bytes() || name == tid.as_bytes() {
            return Ok(());
        }
        let mut thread = format!("{pid}/task/").into_bytes();
        thread.extend_from_slice(name);
        match proc_decision(ProcEntry::Named(stat_at(root, &thread).is_some())) {
            true => Ok(()),
            false => Err(OUT_OF_REACH),
        }
    }

    /// Refuses a descriptor inside another process's `/proc/<pid>` directory (a dirfd, a cwd, or
    /// where a `/proc` magic link led): the guard never looks up, opens or follows anything
    /// there. Outside procfs, procfs's root and its other directories (`sys`, `bus`) pass;
    /// a non-directory on procfs is refused (which process it belongs to cannot be told).
    fn proc_allowed(&self, fd: BorrowedFd<'_>) -> Result<(), i32> {
        if !on_proc(fd) {
            return Ok(());
        }
        let is_dir = stat_of(fd).is_some_and(|st| st.mode & libc::S_IFMT == libc::S_IFDIR);
        let entry = match is_dir {
            false => ProcEntry::File,
            true => match proc_top(fd)? {
                None => ProcEntry::Root,
                Some((root, top)) => {
                    let (pid, tid) = self.ids()?;
                    let own = [pid, tid].iter().any(|id| {
                        openat(
                            root.as_fd(),
                            id.as_bytes(),
                            libc::O_PATH | libc::O_DIRECTORY,
                        )
                        .ok()
                        .and_then(|fd| identity(fd.as_fd()))
                            == identity(top.as_fd())
                    });
                    match own {
                        true => ProcEntry::Own,
                        // A process or thread directory holds `task`; `sys` and `bus` do not.
                        false => ProcEntry::Other {
                            process: stat_at(top.as_fd(), b"task").is_some(),
                        },
                    }
                }
            },
        };
        match proc_decision(entry) {
            true => Ok(()),
            false => Err(OUT_OF_REACH),
        }
    }

    /// The caller's root directory (`/proc/<pid>/root`).
    pub(super) fn root(&self) -> Result<BorrowedFd<'_>, i32> {
        self.root
            .get_or_init(|| self.target.proc_open(c"root"))
            .as_ref()
            .map(|fd| fd.as_fd())
            .map_err(|e| *e)
    }

    /// The caller's umask (`/proc/<pid>/status`).
    pub(super) fn umask(&self) -> Result<u32, i32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.target.pid))
            .map_err(|_| libc::ESRCH)?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .ok_or(libc::ESRCH)
    }

    /// The caller's pid and tid in its own pid namespace (`NSpid`'s last entries).
    fn ns_ids(&self) -> Option<(String, String)> {
        let last = |pid: libc::pid_t| -> Option<String> {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            line.split_whitespace().last().map(str::to_string)
        };
        let tid = last(self.target.pid)?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.target.pid)).ok()?;
        let tgid: libc::pid_t = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))?
            .trim()
            .parse()
            .ok()?;
        Some((last(tgid)?, tid))
    }
}

impl Target<'_> {
    /// The object a call names, opened `O_PATH` (`O_NOFOLLOW` unless it follows): a copy of the
    /// caller's descriptor, or the path resolved as the kernel would for the caller (`walk`).
    pub(super) fn resolve(&self, object: Object) -> Result<OwnedFd, i32> {
        let (at, follow) = match object {
            Object::Fd(fd) => return self.fd(fd),
            Object::Path {
                dirfd,
                path,
                follow,
                empty,
            } => (At { dirfd, path, empty }, follow),
        };
        match Caller::new(self).resolve(at, follow)? {
            Resolved::Object(object) => Ok(object),
            Resolved::Entry { dir, name, .. } => {
                openat(dir.as_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW)
            }
        }
    }
}

/// What a path names once resolved: a name in a directory, or (`.`, `..`, a `/proc` magic link)
/// the object itself.
pub(super) enum Resolved {
    Entry {
        dir: OwnedFd,
        name: Vec<u8>,
        /// What the name is, looked at once per call (by the walk, else on first ask): every
        /// check of one call sees the same answer, and four `fstatat`s of the name become one.
        seen: std::cell::OnceCell<Option<Stat>>,
    },
    Object(OwnedFd),
}

impl Resolved {
    pub(super) fn entry(dir: OwnedFd, name: Vec<u8>, seen: Option<Stat>) -> Resolved {
        Resolved::Entry {
            dir,
            name,
            seen: std::cell::OnceCell::from(seen),
        }
    }

    /// What the entry's name is (`None`: nothing there); an object's own stat.
    pub(super) fn stat(&self) -> Option<Stat> {
        match self {
            Resolved::Entry { dir, name, seen } => *seen.get_or_init(|| stat_at(dir.as_fd(), name)),
            Resolved::Object(fd) => stat_of(fd.as_fd()),
        }
    }

    pub(super) fn kind(&self) -> Option<Kind> {
        self.stat().map(|st| Kind::of(st.mode))
    }
}

/// What a name is (or becomes): the policy asks rules of directories and of files apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Dir,
    /// Both: a symlink may stand for a directory (`.git/hooks` as a link to a directory of hooks).
    Symlink,
}

impl Kind {
    fn of(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::File,
        }
    }

    pub(super) fn dirs(self) -> &'static [bool] {
        match self {
            Kind::File => &[false],
            Kind::Dir => &[true],
            Kind::Symlink => &[false, true],
        }
    }
}

impl Caller<'_, '_> {
    /// The path a call names, resolved as the kernel would for the caller.
    pub(super) fn resolve(&self, at: At, follow: bool) -> Result<Resolved, i32> {
        let path = if at.path == 0 && at.empty {
            Vec::new()
        } else {
            self.target.string(at.path, PATH_MAX, libc::ENAMETOOLONG)?
        };
        self.resolve_path(at, &path, follow)
    }

    /// `resolve` of a path already read (`at.path` is not read again).
    pub(super) fn resolve_path(&self, at: At, path: &[u8], follow: bool) -> Result<Resolved, i32> {
        let start = || -> Result<OwnedFd, i32> {
            if at.dirfd == libc::AT_FDCWD {
                self.target.proc_open(c"cwd")
            } else {
                self.target.fd(at.dirfd)
            }
        };
        if path.is_empty() {
            return match at.empty {
                true => {
                    let object = start()?;
                    self.proc_allowed(object.as_fd())?;
                    Ok(Resolved::Object(object))
                }
                false => Err(libc::ENOENT),
            };
        }
        let base = match path[0] == b'/' {
            true => dup(self.root()?)?,
            false => start()?,
        };
        walk(self, base, path, follow)
    }
}

/// Directories between a procfs directory and procfs's root (`/proc/<pid>/task/<tid>/net/dev_snmp6`
/// is five): a walk up that takes more is refused.
const MAX_PROC_DEPTH: usize = 16;

/// What a descriptor or name on procfs is, for `proc_decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProcEntry {
    /// procfs's root.
    Root,
    /// Beneath the caller's own process (or thread) directory.
    Own,
    /// Beneath a top directory that is not the caller's: a process's (`process`), or `sys`, `bus`.
    Other { process: bool },
    /// A non-directory on procfs reached as an object (through a magic link, a dirfd).
    File,
    /// A numeric name in procfs's root: whether it is one of the caller's threads.
    Named(bool),
}

/// Whether the guard may look further into `entry` for the caller: never into another
/// process's `/proc/<pid>` (its `mem`, `environ`, `fd/N` would be opened with the agent's
/// authority, outside every check the kernel would make of the caller).
pub(super) fn proc_decision(entry: ProcEntry) -> bool {
    match entry {
        ProcEntry::Root | ProcEntry::Own => true,
        ProcEntry::Other { process } => !process,
        ProcEntry::File => false,
        ProcEntry::Named(thread) => thread,
    }
}

/// procfs's root and the directory beneath it that holds `fd` (a procfs directory); `None` when
/// `fd` is the root itself.
pub(super) fn proc_top(fd: BorrowedFd<'_>) -> Result<Option<(OwnedFd, OwnedFd)>, i32> {
    if is_proc_root(fd) {
        return Ok(None);
    }
    let mut child = dup(fd)?;
    for _ in 0..MAX_PROC_DEPTH {
        let parent = openat(child.as_fd(), b"..", libc::O_PATH | libc::O_DIRECTORY)?;
        if is_proc_root(parent.as_fd()) {
            return Ok(Some((parent, child)));
        }
        if !on_proc(parent.as_fd()) {
            // A procfs directory mounted elsewhere: whose it is cannot be told.
            return Err(OUT_OF_REACH);
        }
        child = parent;
    }
    Err(OUT_OF_REACH)
}

/// The kernel's path walk, for the caller: from `base`, component by component, `..` never above
/// the caller's root, symlinks followed (absolute ones from the caller's root; the last only when
/// `follow` or the path ends in `/`), `/proc/self` and `/proc/thread-self` as the caller's, other
/// `/proc` symlinks (magic links) jumped by the kernel.
pub(super) fn walk(
    caller: &Caller<'_, '_>,
    base: OwnedFd,
    path: &[u8],
    follow: bool,
) -> Result<Resolved, i32> {
    let trailing = path.ends_with(b"/");
    let mut rest: VecDeque<Vec<u8>> = components(path).map(<[u8]>::to_vec).collect();
    caller.proc_allowed(base.as_fd())?;
    let mut cur = base;
    let mut links = 0;
    let dir_flags = libc::O_PATH | libc::O_DIRECTORY;
    while let Some(name) = rest.pop_front() {
        let last = rest.is_empty();
        match name.as_slice() {
            b"." => {
                if last {
                    return Ok(Resolved::Object(cur));
                }
            }
            b".." => {
                if identity(cur.as_fd()) != identity(caller.root()?) {
                    cur = openat(cur.as_fd(), b"..", dir_flags)?;
                }
                if last {
                    return Ok(Resolved::Object(cur));
                }
            }
            _ => {
                if is_number(&name) && is_proc_root(cur.as_fd()) {
                    caller.owns_proc_entry(cur.as_fd(), &name)?;
                }
                let seen = stat_at(cur.as_fd(), &name);
                let kind = seen.map(|st| Kind::of(st.mode));
                if last && !(follow || trailing) {
                    return Ok(Resolved::entry(cur, name, seen));
                }
                match kind {
                    None if last => return Ok(Resolved::entry(cur, name, seen)),
                    None => return Err(libc::ENOENT),
                    Some(Kind::Symlink) => {
                        links += 1;
                        if links > MAX_SYMLINKS {
                            return Err(libc::ELOOP);
                        }
                        let proc_root = is_proc_root(cur.as_fd());
                        if proc_root && matches!(name.as_slice(), b"self" | b"thread-self") {
                            let (pid, tid) = caller.ids()?;
                            let mut spliced = vec![pid.as_bytes().to_vec()];
                            if name == b"thread-self" {
                                spliced.push(b"task".to_vec());
                                spliced.push(tid.as_bytes().to_vec());
                            }
                            for part in spliced.into_iter().rev() {
                                rest.push_front(part);
                            }
                            continue;
                        }
                        // procfs's root holds plain symlinks (`net` is `self/net`), read below;
                        // beneath it, in the caller's own directory (no other is ever entered),
                        // they are magic links: the kernel jumps to the object one stands for.
                        if !proc_root && on_proc(cur.as_fd()) {
                            let object = openat(cur.as_fd(), &name, libc::O_PATH)?;
                            // Where the link led (a cwd in `/proc/1`) is checked as a start.
                            caller.proc_allowed(object.as_fd())?;
                            if last {
                                return Ok(Resolved::Object(object));
                            }
                            cur = object;
                            continue;
                        }
                        let text = readlinkat(cur.as_fd(), &name)?;
                        if text.first() == Some(&b'/') {
                            cur = dup(caller.root()?)?;
                        }
                        let parts: Vec<Vec<u8>> = components(&text).map(<[u8]>::to_vec).collect();
                        if parts.is_empty() && text.first() == Some(&b'/') && last {
                            return Ok(Resolved::Object(cur));
                        }
                        for part in parts.into_iter().rev() {
                            rest.push_front(part);
                        }
                    }
                    Some(_) if last => return Ok(Resolved::entry(cur, name, seen)),
                    Some(_) => cur = openat(cur.as_fd(), &name, dir_flags | libc::O_NOFOLLOW)?,
                }
            }
        }
    }
    Ok(Resolved::Object(cur))
}
