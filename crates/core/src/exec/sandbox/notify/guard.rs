//! The workspace policy (`crate::policy`) in the sandboxed shell, both modes.
//!
//! The notification filter (`notify::program`) sends the handler every `open`/`openat`/`creat`
//! that can write (`O_WRONLY`, `O_RDWR`, `O_CREAT`, `O_TRUNC`; every open when `denyRead` has
//! rules) and every call that makes, removes or renames a name (`rename*`, `link*`, `symlink*`,
//! `unlink*`, `rmdir`, `mkdir*`, `mknod*`, `truncate`, and `bind`: a Unix socket's path). For each,
//! the handler:
//!
//! 1. resolves the path as the kernel would for the caller (`walk`): from the caller's own root
//!    and cwd descriptors (`/proc/<pid>/root`, `/proc/<pid>/cwd`) or a copy of its dirfd, one
//!    component at a time, symlinks read and followed inside the caller's root (in namespaces
//!    mode the handler lives outside the sandbox's mount namespace; a `/workspace/…` symlink
//!    means the caller's `/workspace`), `/proc/self` as the caller's, the caller's own `/proc`
//!    magic links jumped by the kernel. Nothing in another process's `/proc/<pid>` is ever looked
//!    up, opened or followed (`proc_decision`): the handler would do it with the agent's
//!    authority, past the checks the kernel makes of the caller. The result is a descriptor of the
//!    parent directory and the last name, or of the object itself;
//! 2. places that directory (or object) in the workspace (`place`): the kernel's current path of
//!    the descriptor, checked by reopening it beneath the workspace's held descriptor and
//!    comparing identities. Outside the workspace the policy has nothing to say (the mounts or
//!    the Landlock rules decide);
//! 3. asks the policy (`decide`), and either refuses with `EACCES` (and reports a `PolicyEvent`)
//!    or performs the call itself on the descriptor it resolved (`Performer`): in namespaces mode
//!    on the handler thread (its fs state unshared from Node's, umask 0), in Landlock mode on a
//!    thread confined by the shell's own ruleset, so the handler never does what the shell could
//!    not. A FIFO's open that waits for its other end is retried by the command's one FIFO thread
//!    (at most `MAX_FIFO_WAITS` at once). An open's descriptor is handed to the caller
//!    with `SECCOMP_IOCTL_NOTIF_ADDFD` (`SECCOMP_ADDFD_FLAG_SEND`), its `O_CLOEXEC` kept; creations
//!    take the caller's umask.
//!
//! Nothing is left to the kernel's own later lookup (no `SECCOMP_USER_NOTIF_FLAG_CONTINUE`), so a
//! path swapped between the check and the call changes nothing. The name-changing calls of all
//! commands of one sandbox are checked and performed one at a time (`Guard::names`), so a rename
//! cannot move a directory between another call's check and its performance.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::super::bpf::{arg_low, Asm, Jump, NR_AT, RET_USER_NOTIF};
use super::{self as notify, Reply, Target};
use crate::policy::{Denial, EventSink, EventTarget, Policy, PolicyEvent};

/// Symlinks followed in one path before `ELOOP` (the kernel's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;
/// `PROC_SUPER_MAGIC`: the file system type of `/proc`.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
/// The inode of procfs's root directory.
const PROC_ROOT_INO: u64 = 1;
/// What a refused call fails with: "permission denied", as for a file the caller may not write.
pub(super) const REFUSED: i32 = libc::EACCES;
/// The open flags that can change a file (the filter notifies these opens).
pub(super) const WRITE_FLAGS: u32 =
    (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;
/// A name no rule names itself: a directory is unreadable when this name inside it would be
/// (`secrets/**` denies listing `secrets`; `*.pem` does not deny listing anything).
const PROBE: &str = "\u{1}pi-native-ops-probe";

/// Events one command may report: a command that runs into the policy in a loop must not fill the
/// agent's queue (each event is a JS object); refusals past this are still refused, unreported.
pub(super) const MAX_EVENTS_PER_COMMAND: usize = 1000;

/// The calls the guard answers, with their number.
#[cfg(target_arch = "x86_64")]
pub(super) const NAME_CALLS: &[libc::c_long] = &[
    libc::SYS_creat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_rmdir,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_truncate,
    libc::SYS_bind,
];
#[cfg(target_arch = "aarch64")]
pub(super) const NAME_CALLS: &[libc::c_long] = &[
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_unlinkat,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_truncate,
    libc::SYS_bind,
];
/// The open calls, with the index of their flags argument.
#[cfg(target_arch = "x86_64")]
pub(super) const OPEN_CALLS: &[(libc::c_long, u32)] = &[(libc::SYS_open, 1), (libc::SYS_openat, 2)];
#[cfg(target_arch = "aarch64")]
pub(super) const OPEN_CALLS: &[(libc::c_long, u32)] = &[(libc::SYS_openat, 2)];

/// What the filter must send the guard: write opens and name changes, and with `reads` every
/// open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::exec) struct Filter {
    /// `denyRead` has rules: reads are checked too.
    pub(in crate::exec) reads: bool,
}

/// The guard's block of the notification program (`notify::program`), which it enters with the
/// call's number loaded: the name calls and the opens the guard must see are notified; every
/// other call falls through with the number loaded again, as the block found it.
pub(super) fn block(asm: &mut Asm, filter: Filter) {
    let (notify, restore, end) = (asm.label(), asm.label(), asm.label());
    for &nr in NAME_CALLS {
        asm.jeq(nr as u32, notify, Jump::Next);
    }
    let checks: Vec<_> = OPEN_CALLS.iter().map(|_| asm.label()).collect();
    for (&(nr, _), &check) in OPEN_CALLS.iter().zip(&checks) {
        asm.jeq(nr as u32, check, Jump::Next);
    }
    asm.goto(end);
    for (&(_, flags), &check) in OPEN_CALLS.iter().zip(&checks) {
        asm.place(check);
        asm.load(arg_low(flags));
        // O_PATH opens neither read nor write (the kernel ignores the other flags), and their
        // descriptors cannot be handed over (ADDFD takes no O_PATH file): the kernel's.
        asm.jset(libc::O_PATH as u32, restore, Jump::Next);
        match filter.reads {
            true => asm.goto(notify),
            false => asm.jset(WRITE_FLAGS, notify, Jump::Next),
        }
        asm.goto(restore);
    }
    asm.place(notify);
    asm.ret(RET_USER_NOTIF);
    asm.place(restore);
    asm.load(NR_AT);
    asm.place(end);
}

/// The policy of one prepared sandbox, with the workspace it is relative to.
pub(in crate::exec) struct Guard {
    policy: Arc<Policy>,
    /// The workspace on the host (`O_PATH`), held since the sandbox was prepared.
    root: OwnedFd,
    /// Its identity (device, inode): a held descriptor's object does not change.
    root_id: (u64, u64),
    /// Its real path on the host.
    host: Vec<u8>,
    /// Where the shell sees it (`runtime_root`; the host path in Landlock mode).
    runtime: Vec<u8>,
    events: Option<EventSink>,
    /// Held while a name-changing call is checked and performed (see the module docs).
    names: Mutex<()>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// The guard of `policy` over the workspace `root` (its real path, a held descriptor), seen
    /// by the shell at `runtime`; `None` when the policy restricts nothing.
    pub(in crate::exec) fn new(
        policy: Arc<Policy>,
        root: (&Path, BorrowedFd<'_>),
        runtime: &Path,
        events: Option<EventSink>,
    ) -> io::Result<Option<Guard>> {
        if policy.reads_unrestricted() && policy.writes_unrestricted() {
            return Ok(None);
        }
        let root_id = notify::identity(root.1).ok_or_else(io::Error::last_os_error)?;
        Ok(Some(Guard {
            policy,
            root_id,
            root: root.1.try_clone_to_owned()?,
            host: root.0.as_os_str().as_bytes().to_vec(),
            runtime: runtime.as_os_str().as_bytes().to_vec(),
            events,
            names: Mutex::new(()),
        }))
    }

    /// What the notification filter must send.
    pub(in crate::exec) fn filter(&self) -> Filter {
        Filter {
            reads: !self.policy.reads_unrestricted(),
        }
    }

    /// The runtime form of `rel`, as events name it.
    fn runtime_path(&self, rel: &Path) -> String {
        let mut path = PathBuf::from(OsStr::from_bytes(&self.runtime));
        if !rel.as_os_str().is_empty() {
            path.push(rel);
        }
        path.to_string_lossy().into_owned()
    }

    /// Where `fd`'s object lies: `rel` beneath the workspace, outside it, or somewhere that
    /// names the workspace but is not what the workspace holds there (refused).
    fn place(&self, fd: BorrowedFd<'_>) -> Place {
        let Some(object) = notify::identity(fd) else {
            return Place::Unknown;
        };
        // The workspace's own directory, wherever it shows (a command's usual cwd): its path
        // needs no reading.
        if object == self.root_id {
            return Place::Inside(PathBuf::new());
        }
        let Some(at) = notify::fd_path(fd) else {
            return Place::Outside;
        };
        let mut named = false;
        for prefix in [&self.runtime, &self.host] {
            let Some(rel) = notify::beneath(&at, prefix) else {
                continue;
            };
            named = true;
            let same = if rel.is_empty() {
                self.root_id == object
            } else {
                notify::reopen_beneath(self.root.as_fd(), rel)
                    .and_then(|again| notify::identity(again.as_fd()))
                    == Some(object)
            };
            if same {
                return Place::Inside(PathBuf::from(OsStr::from_bytes(rel)));
            }
        }
        match named {
            true => Place::Unknown,
            false => Place::Outside,
        }
    }
}

/// Where a resolved directory or object lies.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Inside(PathBuf),
    Outside,
    Unknown,
}

/// What a path names once resolved: a name in a directory, or (`.`, `..`, a `/proc` magic link)
/// the object itself.
enum Resolved {
    Entry {
        dir: OwnedFd,
        name: Vec<u8>,
        /// What the name is, looked at once per call (by the walk, else on first ask): every
        /// check of one call sees the same answer, and four `fstatat`s of the name become one.
        seen: std::cell::OnceCell<Option<Stat>>,
    },
    Object(OwnedFd),
}

/// What `fstatat` said of a name: the parts the checks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    mode: u32,
    rdev: u64,
}

impl Resolved {
    fn entry(dir: OwnedFd, name: Vec<u8>, seen: Option<Stat>) -> Resolved {
        Resolved::Entry {
            dir,
            name,
            seen: std::cell::OnceCell::from(seen),
        }
    }

    /// What the entry's name is (`None`: nothing there); an object's own stat.
    fn stat(&self) -> Option<Stat> {
        match self {
            Resolved::Entry { dir, name, seen } => *seen.get_or_init(|| stat_at(dir.as_fd(), name)),
            Resolved::Object(fd) => stat_of(fd.as_fd()),
        }
    }

    fn kind(&self) -> Option<Kind> {
        self.stat().map(|st| Kind::of(st.mode))
    }
}

/// One exec's side of the guard: the command its events name, and the performer thread.
pub(in crate::exec) struct Session {
    guard: Arc<Guard>,
    command: String,
    performer: Option<Performer>,
    /// The `.git` directories this exec made (device, inode): a repository the command creates
    /// (`git init`, `git clone`) writes its own config and hooks. The protected defaults guard
    /// the repositories that were there before.
    new_repositories: std::cell::RefCell<Vec<(u64, u64)>>,
    /// Landlock mode: the shell's ruleset, which every thread that opens for it applies.
    ruleset: Option<OwnedFd>,
    /// Events reported so far (at most `MAX_EVENTS_PER_COMMAND`).
    events: usize,
    /// The directory `core.hooksPath` names in the workspace, read when the command started.
    hooks: Option<PathBuf>,
    /// The command's FIFO opens that wait, started on the first.
    fifo: std::cell::OnceCell<Option<FifoWaiter>>,
}

impl Session {
    /// The session of one exec of `command`.
    pub(in crate::exec) fn new(guard: Arc<Guard>, command: &str) -> Session {
        Session {
            command: command.to_string(),
            performer: None,
            new_repositories: std::cell::RefCell::new(Vec::new()),
            ruleset: None,
            events: 0,
            hooks: match guard.policy.protects() {
                true => super::hooks_path::hooks_dir(Path::new(OsStr::from_bytes(&guard.host))),
                false => None,
            },
            fifo: std::cell::OnceCell::new(),
            guard,
        }
    }

    /// Whether system call `nr` is the guard's.
    pub(super) fn handles(nr: libc::c_long) -> bool {
        NAME_CALLS.contains(&nr) || OPEN_CALLS.iter().any(|(open, _)| *open == nr)
    }

    /// Answers one notification of a guarded call. `ruleset`: Landlock mode's, which the
    /// performer confines itself with.
    pub(super) fn handle(
        &mut self,
        target: &Target<'_>,
        nr: libc::c_long,
        args: [u64; 6],
        ruleset: Option<BorrowedFd<'_>>,
    ) -> Reply {
        if self.ruleset.is_none() {
            if let Some(ruleset) = ruleset {
                match ruleset.try_clone_to_owned() {
                    Ok(owned) => self.ruleset = Some(owned),
                    Err(_) => return Reply::Errno(REFUSED),
                }
            }
        }
        if self.performer.is_none() {
            match Performer::start(ruleset) {
                Ok(performer) => self.performer = Some(performer),
                Err(_) => return Reply::Errno(REFUSED),
            }
        }
        let call = match decode(nr, args) {
            Ok(call) => call,
            Err(code) => return Reply::Errno(code),
        };
        // Only name changes need the lock; opens that create take it too (they add a name).
        let guard = Arc::clone(&self.guard);
        let _names = match call.changes_names() {
            true => Some(guard.names.lock().unwrap_or_else(|e| e.into_inner())),
            false => None,
        };
        match self.serve(target, call) {
            Ok(reply) => reply,
            Err(Refusal::Errno(code)) => Reply::Errno(code),
            Err(Refusal::Policy(path, read, denial)) => {
                let sink = self.guard.events.as_ref();
                if let Some(sink) = sink.filter(|_| self.events < MAX_EVENTS_PER_COMMAND) {
                    self.events += 1;
                    let path = self.guard.runtime_path(&path);
                    sink(PolicyEvent {
                        tool: "bash",
                        command: Some(self.command.clone()),
                        target: match read {
                            true => EventTarget::Read(path),
                            false => EventTarget::Write(path),
                        },
                        rule: Some(denial.rule),
                        allowed: false,
                        time_ms: crate::policy::now_ms(),
                    });
                }
                Reply::Errno(REFUSED)
            }
        }
    }

    /// Whether `rel` lies in a repository this exec made (its `.git` directory's identity).
    fn in_new_repository(&self, rel: &Path) -> bool {
        if self.new_repositories.borrow().is_empty() {
            return false;
        }
        let mut upto = PathBuf::new();
        for part in rel.iter() {
            upto.push(part);
            if part == ".git" {
                let id =
                    notify::reopen_beneath(self.guard.root.as_fd(), upto.as_os_str().as_bytes())
                        .and_then(|fd| notify::identity(fd.as_fd()));
                if id.is_some_and(|id| self.new_repositories.borrow().contains(&id)) {
                    return true;
                }
            }
        }
        false
    }

    /// A refusal, unless it is a protected default inside a repository this exec made.
    fn waived(&self, result: Result<Kind, Refusal>) -> Result<Kind, Refusal> {
        match result {
            Err(Refusal::Policy(rel, read, denial)) => {
                if denial.guard == crate::policy::Guard::Protected && self.in_new_repository(&rel) {
                    return Ok(Kind::File);
                }
                Err(Refusal::Policy(rel, read, denial))
            }
            other => other,
        }
    }

    fn serve(&self, target: &Target<'_>, call: Call) -> Result<Reply, Refusal> {
        let caller = Caller::new(target)?;
        let performer = self.performer.as_ref().ok_or(Refusal::Errno(REFUSED))?;
        let guard = &*self.guard;
        match call {
            Call::Open { at, flags, mode } => {
                let follow = flags & libc::O_NOFOLLOW == 0
                    && !(flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0);
                let resolved = caller.resolve(at, follow)?;
                if is_controlling_tty(&resolved) {
                    // Opened here it would be the agent's own terminal; the shell, in a session of
                    // its own, has none.
                    return Err(Refusal::Errno(libc::ENXIO));
                }
                // The mode counts only for a file the open makes (`touch` of an existing one
                // needs no umask).
                let makes = match &resolved {
                    Resolved::Entry { .. } => {
                        flags & libc::O_CREAT != 0 && resolved.stat().is_none()
                    }
                    Resolved::Object(_) => false,
                };
                let umask = match makes || is_tmpfile(flags) {
                    true => caller.umask()?,
                    false => 0,
                };
                // What was read from the caller by pid was the caller's.
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                self.waived(
                    guard
                        .check_open(&resolved, flags, self.hooks.as_deref())
                        .map(|_| Kind::File),
                )?;
                if let Some(fifo) = blocking_fifo(&resolved, flags) {
                    let waiter = self
                        .fifo
                        .get_or_init(|| FifoWaiter::start(self.ruleset.as_ref()).ok());
                    return Ok(match waiter {
                        Some(waiter) => waiter.wait(target, fifo, flags),
                        None => Reply::Errno(libc::EAGAIN),
                    });
                }
                let fd = performer.run(Job::Open {
                    resolved,
                    flags,
                    mode: mode & !umask,
                })?;
                let cloexec = flags & libc::O_CLOEXEC != 0;
                Ok(send_fd(target, fd, cloexec))
            }
            Call::Rename { from, to, flags } => {
                let from = caller.resolve(from, false)?;
                let to = caller.resolve(to, false)?;
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                let exchange = flags & libc::RENAME_EXCHANGE != 0;
                let moved =
                    self.waived(guard.check_name(&from, None, true, self.hooks.as_deref()))?;
                let there =
                    self.waived(guard.check_name(&to, Some(moved), true, self.hooks.as_deref()))?;
                if exchange {
                    // Each name takes the other's object.
                    self.waived(guard.check_name(&from, Some(there), true, self.hooks.as_deref()))?;
                }
                performer
                    .run(Job::Rename { from, to, flags })
                    .map(|_| Reply::Value(0))
            }
            Call::Link { from, to, follow } => {
                let from = caller.resolve(from, follow)?;
                let to = caller.resolve(to, false)?;
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                let linked =
                    self.waived(guard.check_name(&from, None, true, self.hooks.as_deref()))?;
                self.waived(guard.check_name(&to, Some(linked), true, self.hooks.as_deref()))?;
                performer
                    .run(Job::Link { from, to })
                    .map(|_| Reply::Value(0))
            }
            Call::Symlink { text, at } => {
                let text = target
                    .string(text, notify::PATH_MAX, libc::ENAMETOOLONG)
                    .map_err(Refusal::Errno)?;
                let at = caller.resolve(at, false)?;
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                self.waived(guard.check_name(
                    &at,
                    Some(Kind::Symlink),
                    false,
                    self.hooks.as_deref(),
                ))?;
                performer
                    .run(Job::Symlink { text, at })
                    .map(|_| Reply::Value(0))
            }
            Call::Unlink { at, dir } => {
                let at = caller.resolve(at, false)?;
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                self.waived(guard.check_name(&at, None, false, self.hooks.as_deref()))?;
                performer
                    .run(Job::Unlink { at, dir })
                    .map(|_| Reply::Value(0))
            }
            Call::Make { at, mode, dev } => {
                let at = caller.resolve(at, false)?;
                let umask = caller.umask()?;
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                let kind = match dev {
                    None => Kind::Dir,
                    Some(_) => Kind::File,
                };
                self.waived(guard.check_name(&at, Some(kind), false, self.hooks.as_deref()))?;
                let mode = mode & !umask;
                let repository = match (&at, dev) {
                    (Resolved::Entry { dir, name, .. }, None) if name == b".git" => {
                        Some(dup(dir.as_fd())?)
                    }
                    _ => None,
                };
                performer.run(Job::Make { at, mode, dev })?;
                if let Some(dir) = repository {
                    if let Ok(made) = openat(dir.as_fd(), b".git", libc::O_PATH | libc::O_NOFOLLOW)
                    {
                        if let Some(id) = notify::identity(made.as_fd()) {
                            self.new_repositories.borrow_mut().push(id);
                        }
                    }
                }
                Ok(Reply::Value(0))
            }
            Call::Bind { fd, addr, len } => {
                // The kernel's own bound: at most a `sockaddr_storage`.
                if len as usize > size_of::<libc::sockaddr_storage>() {
                    return Err(Refusal::Errno(libc::EINVAL));
                }
                let address = match len {
                    0 => Vec::new(),
                    _ => target.read(addr, len as usize)?,
                };
                let socket = target.fd(fd)?;
                let at = match unix_path(&address) {
                    None => None,
                    Some(path) => {
                        Some((caller.resolve_path(At::CWD, path, false)?, caller.umask()?))
                    }
                };
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                let (at, umask) = match at {
                    None => (None, 0),
                    Some((at, umask)) => {
                        self.waived(guard.check_name(
                            &at,
                            Some(Kind::File),
                            false,
                            self.hooks.as_deref(),
                        ))?;
                        (Some(at), umask)
                    }
                };
                performer
                    .run(Job::Bind {
                        socket,
                        address,
                        at,
                        umask,
                    })
                    .map(|_| Reply::Value(0))
            }
            Call::Truncate { at, length } => {
                let resolved = caller.resolve(at, true)?;
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                self.waived(
                    guard
                        .check_open(&resolved, libc::O_WRONLY, self.hooks.as_deref())
                        .map(|_| Kind::File),
                )?;
                performer
                    .run(Job::Truncate { resolved, length })
                    .map(|_| Reply::Value(0))
            }
        }
    }
}

/// Why a call is not performed.
enum Refusal {
    /// The call fails as the kernel would fail it.
    Errno(i32),
    /// The policy refuses it: the path (relative), whether the access was a read, the rule.
    Policy(PathBuf, bool, Denial),
}

impl From<i32> for Refusal {
    fn from(code: i32) -> Refusal {
        Refusal::Errno(code)
    }
}

/// What a name is (or becomes): the policy asks rules of directories and of files apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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

    fn dirs(self) -> &'static [bool] {
        match self {
            Kind::File => &[false],
            Kind::Dir => &[true],
            Kind::Symlink => &[false, true],
        }
    }
}

/// The policy's answer for one access, pure (the unit tests' subject).
///
/// - `Open`: a write (`flags` can write) asks `write_denial`, a read (`O_RDONLY`, `O_RDWR`)
///   `read_denial`; a directory opened for reading also asks whether a name inside it would be
///   denied (listing `secrets` under `secrets/**`).
/// - `Name`: a name made, removed or renamed: `rename_denial` when it moves or links (`moves`),
///   else `write_denial`; for each kind the object is or becomes.
///
/// `hooks`: the directory `core.hooksPath` names in the workspace (`hooks_path`), protected as
/// the protected defaults are: nothing is written beneath it, and no directory above it is moved
/// away or replaced by a symlink.
fn decide(
    policy: &Policy,
    hooks: Option<&Path>,
    rel: &Path,
    access: Access,
) -> Option<(bool, Denial)> {
    if let Some(hooks) = hooks {
        let writes = match access {
            Access::Open { flags, .. } => flags & WRITE_FLAGS as i32 != 0,
            Access::Name { .. } => true,
        };
        let above = match access {
            Access::Name { kind, moves } => kind != Kind::File && (moves || kind == Kind::Symlink),
            Access::Open { .. } => false,
        };
        if writes && (rel.starts_with(hooks) || (above && hooks.starts_with(rel))) {
            let denial = Denial {
                rule: super::hooks_path::RULE.to_string(),
                guard: crate::policy::Guard::Protected,
            };
            return Some((false, denial));
        }
    }
    match access {
        Access::Open { flags, kind } => {
            let is_dir = kind == Kind::Dir;
            if flags & (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) != 0 {
                for &dir in kind.dirs() {
                    if let Some(d) = policy.write_denial(rel, dir) {
                        return Some((false, d));
                    }
                }
            }
            let path_only = flags & libc::O_PATH != 0;
            if !path_only && flags & libc::O_ACCMODE != libc::O_WRONLY {
                if let Some(d) = policy.read_denial(rel, is_dir) {
                    return Some((true, d));
                }
                if is_dir {
                    if let Some(d) = policy.read_denial(&rel.join(PROBE), false) {
                        return Some((true, d));
                    }
                }
            }
            None
        }
        Access::Name { kind, moves } => kind.dirs().iter().find_map(|&dir| {
            match moves {
                true => policy.rename_denial(rel, dir),
                false => policy.write_denial(rel, dir),
            }
            .map(|d| (false, d))
        }),
    }
}

#[derive(Debug, Clone, Copy)]
enum Access {
    Open { flags: i32, kind: Kind },
    Name { kind: Kind, moves: bool },
}

/// What `name` in `dir` is now (not following it), `None` when nothing is there.
fn stat_at(dir: BorrowedFd<'_>, name: &[u8]) -> Option<Stat> {
    let mut c = name.to_vec();
    c.push(0);
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat on our descriptor, a NUL-terminated name, our buffer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr().cast(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    (r == 0).then_some(Stat {
        mode: st.st_mode,
        rdev: st.st_rdev,
    })
}

fn stat_of(fd: BorrowedFd<'_>) -> Option<Stat> {
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor into our buffer.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some(Stat {
        mode: st.st_mode,
        rdev: st.st_rdev,
    })
}

impl Guard {
    /// Where `resolved` is and what it is: `None` outside the workspace.
    fn locate(&self, resolved: &Resolved) -> Result<Option<(PathBuf, Option<Kind>)>, Refusal> {
        let (place, name) = match resolved {
            Resolved::Entry { dir, name, .. } => (self.place(dir.as_fd()), Some(name)),
            Resolved::Object(fd) => (self.place(fd.as_fd()), None),
        };
        let kind = resolved.kind();
        match place {
            Place::Outside => Ok(None),
            Place::Unknown => Err(Refusal::Errno(REFUSED)),
            Place::Inside(mut rel) => {
                if let Some(name) = name {
                    rel.push(OsStr::from_bytes(name));
                }
                Ok(Some((rel, kind)))
            }
        }
    }

    fn check_open(
        &self,
        resolved: &Resolved,
        flags: i32,
        hooks: Option<&Path>,
    ) -> Result<(), Refusal> {
        let Some((rel, kind)) = self.locate(resolved)? else {
            return Ok(());
        };
        let kind = match kind {
            Some(kind) => kind,
            None if is_tmpfile(flags) || flags & libc::O_DIRECTORY != 0 => Kind::Dir,
            None => Kind::File,
        };
        match decide(&self.policy, hooks, &rel, Access::Open { flags, kind }) {
            Some((read, denial)) => Err(Refusal::Policy(rel, read, denial)),
            None => Ok(()),
        }
    }

    /// Checks a name made, removed, renamed or linked; `becomes`: the kind it takes (a rename's
    /// or link's source kind), else what is there now. Returns the kind there now (a file when
    /// nothing is).
    fn check_name(
        &self,
        resolved: &Resolved,
        becomes: Option<Kind>,
        moves: bool,
        hooks: Option<&Path>,
    ) -> Result<Kind, Refusal> {
        let located = self.locate(resolved)?;
        let now = match &located {
            Some((_, kind)) => kind.unwrap_or(Kind::File),
            None => resolved.kind().unwrap_or(Kind::File),
        };
        let Some((rel, there)) = located else {
            return Ok(now);
        };
        // What is there now, and what the name becomes: with nothing there, only the latter
        // (`mkdir .git` makes no gitfile); an unlink of nothing is asked as of a file.
        let now_asked = match (there, becomes) {
            (None, Some(_)) => None,
            _ => Some(now),
        };
        for kind in [now_asked, becomes].into_iter().flatten() {
            let access = Access::Name { kind, moves };
            if let Some((read, denial)) = decide(&self.policy, hooks, &rel, access) {
                return Err(Refusal::Policy(rel, read, denial));
            }
        }
        Ok(now)
    }
}

/// `/dev/tty`'s device number (5, 0): whoever opens it gets their own controlling terminal.
const TTY_DEVICE: (u32, u32) = (5, 0);

/// Whether `resolved` is `/dev/tty` (any node of its number).
fn is_controlling_tty(resolved: &Resolved) -> bool {
    resolved.stat().is_some_and(|st| {
        st.mode & libc::S_IFMT == libc::S_IFCHR
            && (libc::major(st.rdev), libc::minor(st.rdev)) == TTY_DEVICE
    })
}

fn is_tmpfile(flags: i32) -> bool {
    flags & libc::O_TMPFILE == libc::O_TMPFILE
}

/// Where a call names a path: `dirfd` (or the cwd) and the pointer to the path.
#[derive(Debug, Clone, Copy)]
struct At {
    dirfd: i32,
    path: u64,
    /// `AT_EMPTY_PATH`: an empty path names `dirfd` itself.
    empty: bool,
}

impl At {
    /// The cwd, for a path read already (`bind`'s, from its address).
    const CWD: At = At {
        dirfd: libc::AT_FDCWD,
        path: 0,
        empty: false,
    };
}

#[derive(Debug, Clone, Copy)]
enum Call {
    Open {
        at: At,
        flags: i32,
        mode: u32,
    },
    Rename {
        from: At,
        to: At,
        flags: u32,
    },
    Link {
        from: At,
        to: At,
        follow: bool,
    },
    Symlink {
        text: u64,
        at: At,
    },
    Unlink {
        at: At,
        dir: bool,
    },
    /// `mkdir` (`dev` None) or `mknod`.
    Make {
        at: At,
        mode: u32,
        dev: Option<u64>,
    },
    Truncate {
        at: At,
        length: i64,
    },
    /// `bind(fd, addr, len)`: a Unix socket's path is a name like any other.
    Bind {
        fd: i32,
        addr: u64,
        len: u32,
    },
}

impl Call {
    fn changes_names(&self) -> bool {
        match self {
            Call::Open { flags, .. } => flags & libc::O_CREAT != 0,
            Call::Truncate { .. } => false,
            _ => true,
        }
    }
}

fn decode(nr: libc::c_long, a: [u64; 6]) -> Result<Call, i32> {
    let cwd = libc::AT_FDCWD;
    let at = |dirfd: u64, path: u64| At {
        dirfd: dirfd as i32,
        path,
        empty: false,
    };
    let here = |path: u64| at(cwd as u64, path);
    #[cfg(target_arch = "x86_64")]
    match nr {
        libc::SYS_open => {
            return Ok(Call::Open {
                at: here(a[0]),
                flags: a[1] as i32,
                mode: a[2] as u32,
            })
        }
        libc::SYS_creat => {
            return Ok(Call::Open {
                at: here(a[0]),
                flags: libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                mode: a[1] as u32,
            })
        }
        libc::SYS_rename => {
            return Ok(Call::Rename {
                from: here(a[0]),
                to: here(a[1]),
                flags: 0,
            })
        }
        libc::SYS_renameat => {
            return Ok(Call::Rename {
                from: at(a[0], a[1]),
                to: at(a[2], a[3]),
                flags: 0,
            })
        }
        libc::SYS_link => {
            return Ok(Call::Link {
                from: here(a[0]),
                to: here(a[1]),
                follow: false,
            })
        }
        libc::SYS_symlink => {
            return Ok(Call::Symlink {
                text: a[0],
                at: here(a[1]),
            })
        }
        libc::SYS_unlink => {
            return Ok(Call::Unlink {
                at: here(a[0]),
                dir: false,
            })
        }
        libc::SYS_rmdir => {
            return Ok(Call::Unlink {
                at: here(a[0]),
                dir: true,
            })
        }
        libc::SYS_mkdir => {
            return Ok(Call::Make {
                at: here(a[0]),
                mode: a[1] as u32,
                dev: None,
            })
        }
        libc::SYS_mknod => {
            return Ok(Call::Make {
                at: here(a[0]),
                mode: a[1] as u32,
                dev: Some(a[2]),
            })
        }
        _ => {}
    }
    match nr {
        libc::SYS_openat => Ok(Call::Open {
            at: at(a[0], a[1]),
            flags: a[2] as i32,
            mode: a[3] as u32,
        }),
        libc::SYS_renameat2 => Ok(Call::Rename {
            from: at(a[0], a[1]),
            to: at(a[2], a[3]),
            flags: a[4] as u32,
        }),
        libc::SYS_linkat => {
            let flags = a[4] as i32;
            if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
                return Err(libc::EINVAL);
            }
            let mut from = at(a[0], a[1]);
            from.empty = flags & libc::AT_EMPTY_PATH != 0;
            Ok(Call::Link {
                from,
                to: at(a[2], a[3]),
                follow: flags & libc::AT_SYMLINK_FOLLOW != 0,
            })
        }
        libc::SYS_symlinkat => Ok(Call::Symlink {
            text: a[0],
            at: at(a[1], a[2]),
        }),
        libc::SYS_unlinkat => {
            let flags = a[2] as i32;
            if flags & !libc::AT_REMOVEDIR != 0 {
                return Err(libc::EINVAL);
            }
            Ok(Call::Unlink {
                at: at(a[0], a[1]),
                dir: flags & libc::AT_REMOVEDIR != 0,
            })
        }
        libc::SYS_mkdirat => Ok(Call::Make {
            at: at(a[0], a[1]),
            mode: a[2] as u32,
            dev: None,
        }),
        libc::SYS_mknodat => Ok(Call::Make {
            at: at(a[0], a[1]),
            mode: a[2] as u32,
            dev: Some(a[3]),
        }),
        libc::SYS_truncate => Ok(Call::Truncate {
            at: here(a[0]),
            length: a[1] as i64,
        }),
        libc::SYS_bind => Ok(Call::Bind {
            fd: a[0] as i32,
            addr: a[1],
            len: a[2] as u32,
        }),
        _ => Err(libc::ENOSYS),
    }
}

/// The caller of one notification, for path walks: its root, and its pid as its `/proc` shows it.
struct Caller<'a, 'b> {
    target: &'a Target<'b>,
    /// Opened on first use: a relative path without `..` or absolute symlinks needs none.
    root: std::cell::OnceCell<Result<OwnedFd, i32>>,
    /// `ns_ids`, read on first use (only a path through `/proc` needs them).
    ids: std::cell::OnceCell<Option<(String, String)>>,
}

impl<'a, 'b> Caller<'a, 'b> {
    fn new(target: &'a Target<'b>) -> Result<Self, Refusal> {
        Ok(Caller {
            target,
            root: std::cell::OnceCell::new(),
            ids: std::cell::OnceCell::new(),
        })
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
            false => Err(REFUSED),
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
                        .and_then(|fd| notify::identity(fd.as_fd()))
                            == notify::identity(top.as_fd())
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
            false => Err(REFUSED),
        }
    }

    /// The caller's root directory (`/proc/<pid>/root`).
    fn root(&self) -> Result<BorrowedFd<'_>, i32> {
        self.root
            .get_or_init(|| self.target.proc_open(c"root"))
            .as_ref()
            .map(|fd| fd.as_fd())
            .map_err(|e| *e)
    }

    /// The caller's umask (`/proc/<pid>/status`).
    fn umask(&self) -> Result<u32, Refusal> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.target.pid))
            .map_err(|_| Refusal::Errno(libc::ESRCH))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .ok_or(Refusal::Errno(libc::ESRCH))
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

    /// The path a call names, resolved as the kernel would for the caller.
    fn resolve(&self, at: At, follow: bool) -> Result<Resolved, Refusal> {
        let path = if at.path == 0 && at.empty {
            Vec::new()
        } else {
            self.target
                .string(at.path, notify::PATH_MAX, libc::ENAMETOOLONG)?
        };
        self.resolve_path(at, &path, follow)
    }

    /// `resolve` of a path already read (`at.path` is not read again).
    fn resolve_path(&self, at: At, path: &[u8], follow: bool) -> Result<Resolved, Refusal> {
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
                false => Err(Refusal::Errno(libc::ENOENT)),
            };
        }
        let base = match path[0] == b'/' {
            true => dup(self.root()?)?,
            false => start()?,
        };
        Ok(walk(self, base, path, follow)?)
    }
}

fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, i32> {
    fd.try_clone_to_owned()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))
}

/// Splits a path into its components (empty ones dropped).
fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

fn is_proc_root(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: a zeroed statfs is a valid buffer.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on our descriptor into our buffer.
    let on_proc = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) } == 0
        && fs.f_type as i64 == PROC_SUPER_MAGIC;
    on_proc && notify::identity(fd).is_some_and(|(_, ino)| ino == PROC_ROOT_INO)
}

fn on_proc(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: a zeroed statfs is a valid buffer.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on our descriptor into our buffer.
    unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) == 0 && fs.f_type as i64 == PROC_SUPER_MAGIC }
}

/// Directories between a procfs directory and procfs's root (`/proc/<pid>/task/<tid>/net/dev_snmp6`
/// is five): a walk up that takes more is refused.
const MAX_PROC_DEPTH: usize = 16;

/// What a descriptor or name on procfs is, for `proc_decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProcEntry {
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
fn proc_decision(entry: ProcEntry) -> bool {
    match entry {
        ProcEntry::Root | ProcEntry::Own => true,
        ProcEntry::Other { process } => !process,
        ProcEntry::File => false,
        ProcEntry::Named(thread) => thread,
    }
}

/// procfs's root and the directory beneath it that holds `fd` (a procfs directory); `None` when
/// `fd` is the root itself.
fn proc_top(fd: BorrowedFd<'_>) -> Result<Option<(OwnedFd, OwnedFd)>, i32> {
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
            return Err(REFUSED);
        }
        child = parent;
    }
    Err(REFUSED)
}

fn is_number(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(u8::is_ascii_digit)
}

fn openat(dir: BorrowedFd<'_>, name: &[u8], flags: i32) -> Result<OwnedFd, i32> {
    let mut c = name.to_vec();
    c.push(0);
    // SAFETY: openat on our descriptor with a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr().cast(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(notify::errno_now());
    }
    // SAFETY: just opened, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn readlinkat(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Vec<u8>, i32> {
    let mut c = name.to_vec();
    c.push(0);
    let mut buf = vec![0u8; notify::PATH_MAX];
    // SAFETY: readlinkat into our buffer of the length given.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr().cast(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(notify::errno_now());
    }
    if n as usize >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// The kernel's path walk, for the caller: from `base`, component by component, `..` never above
/// the caller's root, symlinks followed (absolute ones from the caller's root; the last only when
/// `follow` or the path ends in `/`), `/proc/self` and `/proc/thread-self` as the caller's, other
/// `/proc` symlinks (magic links) jumped by the kernel.
fn walk(
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
                if notify::identity(cur.as_fd()) != notify::identity(caller.root()?) {
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

/// One call to perform on the performer thread.
enum Job {
    Open {
        resolved: Resolved,
        flags: i32,
        mode: u32,
    },
    Rename {
        from: Resolved,
        to: Resolved,
        flags: u32,
    },
    Link {
        from: Resolved,
        to: Resolved,
    },
    Symlink {
        text: Vec<u8>,
        at: Resolved,
    },
    Unlink {
        at: Resolved,
        dir: bool,
    },
    Make {
        at: Resolved,
        mode: u32,
        dev: Option<u64>,
    },
    Truncate {
        resolved: Resolved,
        length: i64,
    },
    /// `bind` on our copy of the caller's socket: `address` as the caller gave it, or (a Unix
    /// socket's path) its last name in the directory resolved, made with the caller's `umask`.
    Bind {
        socket: OwnedFd,
        address: Vec<u8>,
        at: Option<Resolved>,
        umask: u32,
    },
}

/// The name part of a resolved path, or the errno of naming `.`/`..` where a name is needed.
fn entry(resolved: &Resolved, errno: i32) -> Result<(BorrowedFd<'_>, Vec<u8>), i32> {
    match resolved {
        Resolved::Entry { dir, name, .. } => {
            let mut c = name.clone();
            c.push(0);
            Ok((dir.as_fd(), c))
        }
        Resolved::Object(_) => Err(errno),
    }
}

fn check(r: libc::c_int) -> Result<(), i32> {
    match r {
        0 => Ok(()),
        _ => Err(notify::errno_now()),
    }
}

impl Job {
    /// Performs the call; an open's descriptor is returned.
    fn perform(self) -> Result<Option<OwnedFd>, i32> {
        // SAFETY (every block below): system calls on our own descriptors and NUL-terminated
        // names and buffers.
        match self {
            Job::Open {
                resolved,
                flags,
                mode,
            } => {
                let flags = flags & !libc::O_CLOEXEC;
                let fd = match &resolved {
                    Resolved::Entry { dir, name, .. } => {
                        openat_mode(dir.as_fd(), name, flags | libc::O_NOFOLLOW, mode)?
                    }
                    Resolved::Object(object) => {
                        let path = notify::proc_fd(object.as_fd());
                        // SAFETY: see above.
                        let fd = unsafe {
                            libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC, mode)
                        };
                        if fd < 0 {
                            return Err(notify::errno_now());
                        }
                        // SAFETY: just opened, ours.
                        unsafe { OwnedFd::from_raw_fd(fd) }
                    }
                };
                Ok(Some(fd))
            }
            Job::Rename { from, to, flags } => {
                let (fdir, fname) = entry(&from, libc::EBUSY)?;
                let (tdir, tname) = entry(&to, libc::EBUSY)?;
                // SAFETY: see above.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        fdir.as_raw_fd(),
                        fname.as_ptr(),
                        tdir.as_raw_fd(),
                        tname.as_ptr(),
                        flags,
                    )
                };
                check(r as libc::c_int).map(|_| None)
            }
            Job::Link { from, to } => {
                let (tdir, tname) = entry(&to, libc::EEXIST)?;
                let r = match &from {
                    Resolved::Entry { dir, name, .. } => {
                        let mut c = name.clone();
                        c.push(0);
                        // SAFETY: see above.
                        unsafe {
                            libc::linkat(
                                dir.as_raw_fd(),
                                c.as_ptr().cast(),
                                tdir.as_raw_fd(),
                                tname.as_ptr().cast(),
                                0,
                            )
                        }
                    }
                    Resolved::Object(object) => {
                        let path = notify::proc_fd(object.as_fd());
                        // SAFETY: see above.
                        unsafe {
                            libc::linkat(
                                libc::AT_FDCWD,
                                path.as_ptr().cast(),
                                tdir.as_raw_fd(),
                                tname.as_ptr().cast(),
                                libc::AT_SYMLINK_FOLLOW,
                            )
                        }
                    }
                };
                check(r).map(|_| None)
            }
            Job::Symlink { text, at } => {
                let (dir, name) = entry(&at, libc::EEXIST)?;
                let mut text = text;
                text.push(0);
                // SAFETY: see above.
                let r = unsafe {
                    libc::symlinkat(text.as_ptr().cast(), dir.as_raw_fd(), name.as_ptr().cast())
                };
                check(r).map(|_| None)
            }
            Job::Unlink { at, dir: is_dir } => {
                let (dir, name) = entry(&at, if is_dir { libc::EBUSY } else { libc::EISDIR })?;
                let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
                // SAFETY: see above.
                let r = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr().cast(), flags) };
                check(r).map(|_| None)
            }
            Job::Make { at, mode, dev } => {
                let (dir, name) = entry(&at, libc::EEXIST)?;
                // SAFETY: see above.
                let r = unsafe {
                    match dev {
                        None => libc::mkdirat(dir.as_raw_fd(), name.as_ptr().cast(), mode),
                        Some(dev) => libc::mknodat(
                            dir.as_raw_fd(),
                            name.as_ptr().cast(),
                            mode,
                            dev as libc::dev_t,
                        ),
                    }
                };
                check(r).map(|_| None)
            }
            Job::Truncate { resolved, length } => {
                let object = match resolved {
                    Resolved::Object(object) => object,
                    Resolved::Entry { dir, name, .. } => {
                        openat(dir.as_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW)?
                    }
                };
                let path = notify::proc_fd(object.as_fd());
                // SAFETY: see above.
                let r = unsafe { libc::truncate(path.as_ptr().cast(), length) };
                check(r).map(|_| None)
            }
            Job::Bind {
                socket,
                address,
                at,
                umask,
            } => bind(socket.as_fd(), &address, at.as_ref(), umask).map(|_| None),
        }
    }
}

/// `sun_path`'s offset in `sockaddr_un` (after `sun_family`).
const SUN_PATH_AT: usize = std::mem::offset_of!(libc::sockaddr_un, sun_path);

/// The path of a Unix socket address as the kernel reads it (up to its first NUL), when it names
/// one in the file system: not an abstract name (a leading NUL), not autobind (no path at all).
fn unix_path(address: &[u8]) -> Option<&[u8]> {
    let family = u16::from_ne_bytes([*address.first()?, *address.get(1)?]);
    let path = address.get(SUN_PATH_AT..)?;
    if family != libc::AF_UNIX as u16 || path.first().is_none_or(|&b| b == 0) {
        return None;
    }
    Some(path.split(|&b| b == 0).next().unwrap_or(path))
}

/// Binds `socket`: to `address` as given, or to the name `at` resolved (from within its
/// directory: the performing thread's working directory is its own, `unshare(CLONE_FS)`).
fn bind(
    socket: BorrowedFd<'_>,
    address: &[u8],
    at: Option<&Resolved>,
    umask: u32,
) -> Result<(), i32> {
    let Some(at) = at else {
        // SAFETY: bind of our socket copy to the caller's address bytes, of their length.
        let r = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                address.as_ptr().cast(),
                address.len() as libc::socklen_t,
            )
        };
        return check(r);
    };
    let (dir, name) = entry(at, libc::EADDRINUSE)?;
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // `name` holds its NUL; it is no longer than the caller's path, which fit.
    if name.len() > sun.sun_path.len() {
        return Err(libc::ENAMETOOLONG);
    }
    for (slot, &b) in sun.sun_path.iter_mut().zip(name.iter()) {
        *slot = b as libc::c_char;
    }
    // SAFETY: fchdir to our directory descriptor, umask on this thread's own fs state, bind of our
    // socket copy to our address, then umask and cwd back (`/`: no directory of the sandbox kept).
    unsafe {
        check(libc::fchdir(dir.as_raw_fd()))?;
        libc::umask(umask as libc::mode_t);
        let r = libc::bind(
            socket.as_raw_fd(),
            (&sun as *const libc::sockaddr_un).cast(),
            (SUN_PATH_AT + name.len()) as libc::socklen_t,
        );
        let code = notify::errno_now();
        libc::umask(0);
        libc::chdir(c"/".as_ptr());
        match r {
            0 => Ok(()),
            _ => Err(code),
        }
    }
}

fn openat_mode(dir: BorrowedFd<'_>, name: &[u8], flags: i32, mode: u32) -> Result<OwnedFd, i32> {
    let mut c = name.to_vec();
    c.push(0);
    // SAFETY: openat on our descriptor with a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr().cast(),
            flags | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(notify::errno_now());
    }
    // SAFETY: just opened, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The FIFO `resolved` names, opened `O_PATH`, when opening it with `flags` would wait for the
/// other end (`O_RDONLY` or `O_WRONLY` without `O_NONBLOCK`): that wait must not hold the handler.
fn blocking_fifo(resolved: &Resolved, flags: i32) -> Option<OwnedFd> {
    let mode = flags & libc::O_ACCMODE;
    if flags & libc::O_NONBLOCK != 0 || mode == libc::O_RDWR {
        return None;
    }
    let object = match resolved {
        Resolved::Entry { dir, name, seen } => {
            // What the checks saw there: no FIFO (or nothing), no open to wait on.
            if let Some(seen) = seen.get() {
                if seen.is_none_or(|st| st.mode & libc::S_IFMT != libc::S_IFIFO) {
                    return None;
                }
            }
            openat(dir.as_fd(), name, libc::O_PATH | libc::O_NOFOLLOW).ok()?
        }
        Resolved::Object(object) => dup(object.as_fd()).ok()?,
    };
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor into our buffer.
    let known = unsafe { libc::fstat(object.as_raw_fd(), &mut st) } == 0;
    (known && st.st_mode & libc::S_IFMT == libc::S_IFIFO).then_some(object)
}

/// FIFO opens of one command waiting for their other end at once: past this many, another is
/// refused with `EAGAIN` (each wait holds two descriptors; a command has no use for hundreds).
pub(super) const MAX_FIFO_WAITS: usize = 256;

/// The FIFO opens of one command that wait for their other end: one thread (confined as the
/// shell in Landlock mode) retries them all without blocking, at growing intervals, while each
/// caller still waits, and answers each notification itself.
struct FifoWaiter {
    waits: std::sync::mpsc::Sender<FifoWait>,
    /// Waits handed over and not yet answered (or given up).
    pending: Arc<std::sync::atomic::AtomicUsize>,
}

/// One FIFO open that waits.
struct FifoWait {
    listener: Arc<OwnedFd>,
    id: u64,
    /// The FIFO, `O_PATH`.
    fifo: OwnedFd,
    flags: i32,
    /// Opened (a reader's open succeeds at once; it waits for data or a writer's close).
    opened: Option<OwnedFd>,
}

impl FifoWaiter {
    fn start(ruleset: Option<&OwnedFd>) -> io::Result<FifoWaiter> {
        /// Retries start this far apart and grow to the second.
        const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(1);
        const RETRY_MAX: std::time::Duration = std::time::Duration::from_millis(50);
        let ruleset = ruleset.map(|r| r.try_clone()).transpose()?;
        let (waits, incoming) = std::sync::mpsc::channel::<FifoWait>();
        let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&pending);
        std::thread::Builder::new()
            .name("pi-sandbox-fifo".into())
            .stack_size(notify::HANDLER_STACK_BYTES)
            .spawn(move || {
                notify::drop_own_capabilities();
                // SAFETY: per-thread no_new_privs, then the ruleset on this thread only.
                let confined = ruleset.as_ref().is_none_or(|ruleset| unsafe {
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                        && libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0)
                            == 0
                });
                drop(ruleset);
                let mut waiting: Vec<FifoWait> = Vec::new();
                let mut delay = RETRY_FIRST;
                let mut open = true;
                loop {
                    let next = match (waiting.is_empty(), open) {
                        (true, true) => incoming.recv().map_err(|_| true),
                        (true, false) => return,
                        (false, true) => incoming
                            .recv_timeout(delay)
                            .map_err(|e| e == std::sync::mpsc::RecvTimeoutError::Disconnected),
                        (false, false) => {
                            std::thread::sleep(delay);
                            Err(false)
                        }
                    };
                    match next {
                        Ok(wait) => {
                            waiting.push(wait);
                            delay = RETRY_FIRST;
                            while let Ok(wait) = incoming.try_recv() {
                                waiting.push(wait);
                            }
                        }
                        Err(gone) => {
                            open &= !gone;
                            delay = (delay * 2).min(RETRY_MAX);
                        }
                    }
                    let before = waiting.len();
                    waiting.retain_mut(|wait| match confined {
                        true => !wait.step(),
                        false => {
                            notify::respond(wait.listener.as_fd(), wait.id, Reply::Errno(REFUSED));
                            false
                        }
                    });
                    count.fetch_sub(before - waiting.len(), std::sync::atomic::Ordering::AcqRel);
                }
            })?;
        Ok(FifoWaiter { waits, pending })
    }

    /// Hands `fifo`'s open to the waiter thread, which answers it; `EAGAIN` past
    /// `MAX_FIFO_WAITS`.
    fn wait(&self, target: &Target<'_>, fifo: OwnedFd, flags: i32) -> Reply {
        use std::sync::atomic::Ordering;
        if self.pending.fetch_add(1, Ordering::AcqRel) >= MAX_FIFO_WAITS {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            return Reply::Errno(libc::EAGAIN);
        }
        let wait = FifoWait {
            listener: Arc::clone(target.listener),
            id: target.id,
            fifo,
            flags,
            opened: None,
        };
        match self.waits.send(wait) {
            Ok(()) => Reply::Later,
            Err(_) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                Reply::Errno(libc::EAGAIN)
            }
        }
    }
}

impl FifoWait {
    /// One retry: `true` once the call is answered or its caller no longer waits.
    fn step(&mut self) -> bool {
        let listener = self.listener.as_fd();
        if !notify::id_valid(listener, self.id) {
            return true; // the caller went (a signal, a kill)
        }
        if self.opened.is_none() {
            let path = notify::proc_fd(self.fifo.as_fd());
            let flags = (self.flags & !libc::O_CLOEXEC) | libc::O_NONBLOCK | libc::O_CLOEXEC;
            // SAFETY: open of our NUL-terminated path.
            let fd = unsafe { libc::open(path.as_ptr().cast(), flags) };
            if fd >= 0 {
                // SAFETY: just opened, ours.
                self.opened = Some(unsafe { OwnedFd::from_raw_fd(fd) });
            } else if notify::errno_now() != libc::ENXIO {
                notify::respond(listener, self.id, Reply::Errno(notify::errno_now()));
                return true;
            }
        }
        let Some(fd) = &self.opened else {
            return false;
        };
        // A writer opens once a reader is there; a reader waits for data or a writer's close, as
        // its blocking open and first read would.
        let ready = self.flags & libc::O_ACCMODE != libc::O_RDONLY || {
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
        };
        if !ready {
            return false;
        }
        // SAFETY: F_GETFL/F_SETFL on our descriptor: blocking, as asked.
        unsafe {
            let now = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, now & !libc::O_NONBLOCK);
        }
        let cloexec = self.flags & libc::O_CLOEXEC != 0;
        let reply = send_fd_to(listener, self.id, fd.as_fd(), cloexec);
        if reply != Reply::Later {
            notify::respond(listener, self.id, reply);
        }
        true
    }
}

/// Hands `fd` to the caller as the result of its open (`SECCOMP_ADDFD_FLAG_SEND`: installing it
/// answers the notification).
fn send_fd(target: &Target<'_>, fd: Option<OwnedFd>, cloexec: bool) -> Reply {
    let Some(fd) = fd else {
        return Reply::Errno(libc::EIO);
    };
    send_fd_to(target.listener.as_fd(), target.id, fd.as_fd(), cloexec)
}

/// `send_fd` on `listener` for notification `id`.
fn send_fd_to(listener: BorrowedFd<'_>, id: u64, fd: BorrowedFd<'_>, cloexec: bool) -> Reply {
    let addfd = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: ADDFD reads our struct; our descriptor stays ours (the kernel installs a copy).
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD as _,
            &addfd,
        )
    };
    match r {
        r if r >= 0 => Reply::Later, // answered by the kernel
        _ => Reply::Errno(notify::errno_now()),
    }
}

type Answer = Result<Option<OwnedFd>, i32>;

/// Where the guard's calls are performed: with umask 0 (the caller's is applied to each mode) and,
/// in Landlock mode, under the shell's own ruleset.
enum Performer {
    /// Namespaces mode: the handler thread itself, its fs state (umask) unshared from Node's.
    Inline,
    /// Landlock mode: a thread confined by the shell's ruleset (the handler cannot be: it reads
    /// the shell's memory and descriptors).
    Thread {
        jobs: std::sync::mpsc::Sender<Job>,
        answers: std::sync::mpsc::Receiver<Answer>,
    },
}

impl Performer {
    fn start(ruleset: Option<BorrowedFd<'_>>) -> io::Result<Performer> {
        // SAFETY: unshare and umask on the calling (handler) thread's own fs state, which after
        // the unshare is no longer Node's.
        if ruleset.is_none() && unsafe { libc::unshare(libc::CLONE_FS) } == 0 {
            // SAFETY: see above.
            unsafe { libc::umask(0) };
            return Ok(Performer::Inline);
        }
        let ruleset = ruleset.map(|r| r.try_clone_to_owned()).transpose()?;
        let (jobs, job_rx) = std::sync::mpsc::channel::<Job>();
        let (answer_tx, answers) = std::sync::mpsc::channel::<Answer>();
        std::thread::Builder::new()
            .name("pi-sandbox-guard".into())
            .stack_size(notify::HANDLER_STACK_BYTES)
            .spawn(move || {
                notify::drop_own_capabilities();
                // SAFETY: unshare and umask on this thread's own fs state (no longer shared with
                // Node's threads after the unshare), then per-thread no_new_privs and Landlock.
                let ready = unsafe {
                    libc::unshare(libc::CLONE_FS) == 0 && {
                        libc::umask(0);
                        match &ruleset {
                            None => true,
                            Some(ruleset) => {
                                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                                    && libc::syscall(
                                        libc::SYS_landlock_restrict_self,
                                        ruleset.as_raw_fd(),
                                        0,
                                    ) == 0
                            }
                        }
                    }
                };
                drop(ruleset);
                for job in job_rx {
                    let answer = match ready {
                        true => job.perform(),
                        false => Err(REFUSED), // fail closed
                    };
                    if answer_tx.send(answer).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Performer::Thread { jobs, answers })
    }

    fn run(&self, job: Job) -> Result<Option<OwnedFd>, Refusal> {
        match self {
            Performer::Inline => job.perform().map_err(Refusal::Errno),
            Performer::Thread { jobs, answers } => {
                jobs.send(job).map_err(|_| Refusal::Errno(REFUSED))?;
                answers
                    .recv()
                    .unwrap_or(Err(REFUSED))
                    .map_err(Refusal::Errno)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySpec;

    fn policy(read: &[&str], write: &[&str]) -> Policy {
        Policy::new(&PolicySpec {
            deny_read: read.iter().map(|s| s.to_string()).collect(),
            deny_write: write.iter().map(|s| s.to_string()).collect(),
            protect: true,
        })
        .unwrap()
    }

    fn open(p: &Policy, rel: &str, flags: i32, kind: Kind) -> Option<(bool, String)> {
        decide(p, None, Path::new(rel), Access::Open { flags, kind }).map(|(r, d)| (r, d.rule))
    }

    fn name(p: &Policy, rel: &str, kind: Kind, moves: bool) -> Option<String> {
        decide(p, None, Path::new(rel), Access::Name { kind, moves }).map(|(_, d)| d.rule)
    }

    /// The notification program's answer to one call.
    fn verdict(program: &[libc::sock_filter], nr: u32, args: [u32; 6]) -> u32 {
        super::super::super::bpf::run(program, nr.into(), args.map(u64::from))
    }

    #[test]
    fn the_filter_sends_writes_and_name_changes_and_reads_only_when_asked() {
        let allow = super::super::super::bpf::RET_ALLOW;
        let openat = libc::SYS_openat as u32;
        let flags = |f: i32| [0, 0, f as u32, 0, 0, 0];
        for reads in [false, true] {
            let program = notify::program(false, Some(Filter { reads })).unwrap();
            for &nr in NAME_CALLS {
                assert_eq!(verdict(&program, nr as u32, [0; 6]), RET_USER_NOTIF, "{nr}");
            }
            for f in [
                libc::O_WRONLY,
                libc::O_RDWR,
                libc::O_CREAT,
                libc::O_TRUNC | libc::O_RDONLY,
            ] {
                assert_eq!(
                    verdict(&program, openat, flags(f)),
                    RET_USER_NOTIF,
                    "{f:#x}"
                );
            }
            let read = verdict(&program, openat, flags(libc::O_RDONLY | libc::O_CLOEXEC));
            assert_eq!(read, if reads { RET_USER_NOTIF } else { allow });
            // O_PATH ignores the access flags: never notified.
            for f in [libc::O_PATH, libc::O_PATH | libc::O_WRONLY | libc::O_CREAT] {
                assert_eq!(verdict(&program, openat, flags(f)), allow, "{f:#x}");
            }
            // The rest of the program still sees the call's number: flock is notified, read not.
            assert_eq!(
                verdict(&program, libc::SYS_flock as u32, [0; 6]),
                RET_USER_NOTIF
            );
            assert_eq!(
                verdict(&program, libc::SYS_read as u32, flags(libc::O_WRONLY)),
                allow
            );
        }
    }

    #[test]
    fn opens_ask_writes_and_reads_by_their_flags() {
        let p = policy(&[".env", "secrets/**"], &["locked/"]);
        let w = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
        assert_eq!(
            open(&p, ".git/hooks/pre-commit", w, Kind::File),
            Some((false, "**/.git/hooks/".into()))
        );
        assert_eq!(
            open(&p, ".git/hooks/pre-commit", libc::O_RDONLY, Kind::File),
            None
        );
        assert_eq!(open(&p, ".git/index", w, Kind::File), None);
        assert_eq!(
            open(&p, "locked/a", libc::O_APPEND | libc::O_WRONLY, Kind::File).map(|d| d.0),
            Some(false)
        );
        // A denied-read file may be written, not read; O_RDWR reads.
        assert_eq!(open(&p, "a/.env", w, Kind::File), None);
        assert_eq!(
            open(&p, "a/.env", libc::O_RDWR, Kind::File),
            Some((true, ".env".into()))
        );
        assert_eq!(
            open(&p, "a/.env", libc::O_RDONLY, Kind::File),
            Some((true, ".env".into()))
        );
        // O_PATH reads nothing.
        assert_eq!(open(&p, "a/.env", libc::O_PATH, Kind::File), None);
        // Listing a directory whose every entry is denied is a denied read; one with a denied
        // basename in it is not.
        assert_eq!(
            open(&p, "secrets", libc::O_RDONLY | libc::O_DIRECTORY, Kind::Dir),
            Some((true, "secrets/**".into()))
        );
        assert_eq!(
            open(&p, "a", libc::O_RDONLY | libc::O_DIRECTORY, Kind::Dir),
            None
        );
    }

    #[test]
    fn names_ask_renames_for_moves_and_symlinks_as_directories() {
        let p = policy(&["*.pem"], &[]);
        // A symlink named like a protected directory would stand in for it.
        assert_eq!(
            name(&p, ".git/hooks", Kind::Symlink, false).as_deref(),
            Some("**/.git/hooks/")
        );
        assert_eq!(name(&p, ".git/hooks", Kind::File, false), None);
        assert_eq!(
            name(&p, ".git/hooks", Kind::Dir, false).as_deref(),
            Some("**/.git/hooks/")
        );
        // Moving a directory rules name, or a denied-read file, is refused; a plain one is not.
        assert_eq!(
            name(&p, ".git", Kind::Dir, true).as_deref(),
            Some("**/.git/hooks/")
        );
        assert_eq!(
            name(&p, ".git", Kind::Dir, false),
            None,
            "rmdir of .git is a write of .git only"
        );
        assert_eq!(
            name(&p, "k/x.pem", Kind::File, true).as_deref(),
            Some("*.pem")
        );
        assert_eq!(name(&p, "k/x.pem", Kind::File, false), None);
        assert_eq!(
            name(&p, ".git/config", Kind::File, true).as_deref(),
            Some("**/.git/config")
        );
        assert_eq!(name(&p, ".git/config.lock", Kind::File, true), None);
        assert_eq!(name(&p, "src/main.rs", Kind::File, true), None);
    }

    #[test]
    fn places_descriptors_in_the_workspace_by_identity() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let fd = |p: &Path| notify::open_path(None, p.as_os_str().as_bytes(), true).unwrap();
        let root_fd = fd(&root);
        let guard = Guard::new(
            Arc::new(policy(&[], &[])),
            (&root, root_fd.as_fd()),
            Path::new("/workspace"),
            None,
        )
        .unwrap()
        .expect("the protected defaults restrict writes");
        assert_eq!(
            guard.place(fd(&root.join("a/b")).as_fd()),
            Place::Inside("a/b".into())
        );
        assert_eq!(guard.place(root_fd.as_fd()), Place::Inside("".into()));
        assert_eq!(guard.place(fd(outside.path()).as_fd()), Place::Outside);
        // A directory renamed since it was opened is placed by its current name, not the old one.
        let a = fd(&root.join("a"));
        std::fs::rename(root.join("a"), root.join("moved")).unwrap();
        std::fs::create_dir(root.join("a")).unwrap();
        assert_eq!(
            guard.place(a.as_fd()),
            Place::Inside("moved".into()),
            "the kernel's current name"
        );
        // A policy that restricts nothing needs no guard.
        let open = Policy::new(&PolicySpec::from_raw(None, None, Some(false))).unwrap();
        assert!(
            Guard::new(Arc::new(open), (&root, root_fd.as_fd()), &root, None)
                .unwrap()
                .is_none()
        );
        assert_eq!(guard.runtime_path(Path::new("x/.env")), "/workspace/x/.env");
        // The workspace's own directory by identity, whatever path reached it: a bind mount
        // elsewhere (namespaces mode shows it at the runtime root too) is still the workspace.
        let alias = tempfile::tempdir().unwrap();
        let mounted = {
            let (src, dst) = (cstr(&root), cstr(alias.path()));
            // SAFETY: a bind mount of our own temp directory onto another (the tests run as root).
            unsafe {
                libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) == 0
            }
        };
        if mounted {
            let through = fd(alias.path());
            assert_eq!(guard.place(through.as_fd()), Place::Inside("".into()));
            // Beneath it, a path that is not the workspace's: not placed inside by name.
            std::fs::create_dir_all(root.join("sub")).unwrap();
            let sub = fd(&alias.path().join("sub"));
            assert_eq!(guard.place(sub.as_fd()), Place::Outside);
            drop((through, sub));
            // SAFETY: unmounting what we mounted above.
            unsafe { libc::umount2(cstr(alias.path()).as_ptr(), libc::MNT_DETACH) };
        }
    }

    fn cstr(p: &Path) -> std::ffi::CString {
        std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    #[test]
    fn an_entry_is_looked_at_once_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let at = notify::open_path(None, dir.path().as_os_str().as_bytes(), true).unwrap();
        // What the walk saw is what every check of the call sees, even after the name changed.
        let resolved = Resolved::entry(dup(at.as_fd()).unwrap(), b"f".to_vec(), None);
        std::fs::write(dir.path().join("f"), "").unwrap();
        assert_eq!(resolved.stat(), None, "the walk saw nothing there");
        assert!(blocking_fifo(&resolved, libc::O_WRONLY).is_none());
        // Looked at on first ask when the walk did not, then kept.
        let unseen = |name: &[u8]| Resolved::Entry {
            dir: dup(at.as_fd()).unwrap(),
            name: name.to_vec(),
            seen: std::cell::OnceCell::new(),
        };
        let fresh = unseen(b"f");
        assert_eq!(fresh.kind(), Some(Kind::File));
        std::fs::remove_file(dir.path().join("f")).unwrap();
        std::fs::create_dir(dir.path().join("f")).unwrap();
        assert_eq!(fresh.kind(), Some(Kind::File), "one answer per call");
        // The next call (a new resolution) sees the change.
        let next = unseen(b"f");
        assert_eq!(next.kind(), Some(Kind::Dir));
        // A FIFO the look saw is still opened to check (its open would wait).
        let fifo = dir.path().join("p");
        let c = cstr(&fifo);
        // SAFETY: mkfifo of a NUL-terminated path in our temp directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let seen = stat_at(at.as_fd(), b"p");
        assert!(seen.is_some());
        let resolved = Resolved::entry(dup(at.as_fd()).unwrap(), b"p".to_vec(), seen);
        assert!(blocking_fifo(&resolved, libc::O_WRONLY).is_some());
        assert!(blocking_fifo(&resolved, libc::O_WRONLY | libc::O_NONBLOCK).is_none());
    }

    #[test]
    fn the_hooks_directory_is_protected_like_the_defaults() {
        let p = policy(&[], &[]);
        let hooks = Some(Path::new("tools/hooks"));
        let w = libc::O_WRONLY | libc::O_CREAT;
        let open = |rel: &str, flags| {
            decide(
                &p,
                hooks,
                Path::new(rel),
                Access::Open {
                    flags,
                    kind: Kind::File,
                },
            )
            .map(|(_, d)| (d.rule, d.guard))
        };
        let refused = Some((
            super::super::hooks_path::RULE.to_string(),
            crate::policy::Guard::Protected,
        ));
        assert_eq!(open("tools/hooks/pre-commit", w), refused);
        assert_eq!(open("tools/hooks/pre-commit", libc::O_RDONLY), None);
        assert_eq!(open("tools/hooksx/pre-commit", w), None);
        assert_eq!(open("tools/other", w), None);
        let name = |rel: &str, kind, moves| {
            decide(&p, hooks, Path::new(rel), Access::Name { kind, moves }).map(|(_, d)| d.rule)
        };
        // The directory itself and anything made in it; a directory above moved or replaced by a
        // symlink; a directory above made (the hooks directory's own creation stays refused).
        assert!(name("tools/hooks", Kind::Dir, false).is_some());
        assert!(name("tools/hooks/x", Kind::File, false).is_some());
        assert!(name("tools", Kind::Dir, true).is_some());
        assert!(name("tools", Kind::Symlink, false).is_some());
        assert_eq!(name("tools", Kind::Dir, false), None);
        assert_eq!(name("tools/x", Kind::File, true), None);
        assert_eq!(
            name("tools/hooks", Kind::Dir, false),
            name("tools/hooks/y", Kind::File, false)
        );
    }

    #[test]
    fn proc_is_entered_only_at_the_callers_own_directory() {
        // The decision: procfs's root and the caller's own directory; never another process's,
        // nor a file on procfs reached as an object (whose it is cannot be told).
        assert!(proc_decision(ProcEntry::Root));
        assert!(proc_decision(ProcEntry::Own));
        assert!(
            proc_decision(ProcEntry::Other { process: false }),
            "sys, bus"
        );
        assert!(!proc_decision(ProcEntry::Other { process: true }));
        assert!(!proc_decision(ProcEntry::File));
        assert!(
            proc_decision(ProcEntry::Named(true)),
            "a thread of the caller"
        );
        assert!(!proc_decision(ProcEntry::Named(false)));
        // Where a procfs directory lies: the walk up finds the root and the top directory.
        let open = |p: &str| notify::open_path(None, p.as_bytes(), true).unwrap();
        assert!(proc_top(open("/proc").as_fd()).unwrap().is_none());
        let me = std::process::id();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let (root, top) = proc_top(open(&format!("/proc/{me}/task/{tid}/fd")).as_fd())
            .unwrap()
            .expect("beneath the root");
        assert!(is_proc_root(root.as_fd()));
        assert_eq!(
            notify::identity(top.as_fd()),
            notify::identity(open(&format!("/proc/{me}")).as_fd())
        );
        assert!(
            stat_at(top.as_fd(), b"task").is_some(),
            "a process directory"
        );
        let (_, sys) = proc_top(open("/proc/sys/kernel").as_fd()).unwrap().unwrap();
        assert!(
            stat_at(sys.as_fd(), b"task").is_none(),
            "not a process directory"
        );
        assert!(is_number(b"123") && !is_number(b"") && !is_number(b"12a") && !is_number(b"self"));
    }

    #[test]
    fn a_unix_socket_address_names_a_path_unless_abstract_or_autobind() {
        let address = |family: i32, path: &[u8]| {
            let mut a = (family as u16).to_ne_bytes().to_vec();
            a.extend_from_slice(path);
            a
        };
        assert_eq!(
            unix_path(&address(libc::AF_UNIX, b"a/sock\0")),
            Some(&b"a/sock"[..])
        );
        // The kernel reads up to the first NUL, or the address's end.
        assert_eq!(
            unix_path(&address(libc::AF_UNIX, b"s\0junk")),
            Some(&b"s"[..])
        );
        assert_eq!(unix_path(&address(libc::AF_UNIX, b"s")), Some(&b"s"[..]));
        assert_eq!(unix_path(&address(libc::AF_UNIX, b"\0abstract")), None);
        assert_eq!(unix_path(&address(libc::AF_UNIX, b"")), None, "autobind");
        assert_eq!(
            unix_path(&address(libc::AF_INET, b"\0\x50\x7f\0\0\x01")),
            None
        );
        assert_eq!(unix_path(&[1]), None);
        assert!(matches!(
            decode(libc::SYS_bind, [3, 0x1000, 12, 0, 0, 0]).unwrap(),
            Call::Bind {
                fd: 3,
                addr: 0x1000,
                len: 12
            }
        ));
        assert!(Session::handles(libc::SYS_bind));
    }

    #[test]
    fn decodes_the_guarded_calls() {
        let flags = (libc::O_WRONLY | libc::O_CREAT) as u64;
        match decode(libc::SYS_openat, [3, 0x1000, flags, 0o644, 0, 0]).unwrap() {
            Call::Open { at, flags: f, mode } => {
                assert_eq!(
                    (at.dirfd, at.path, f as u64, mode),
                    (3, 0x1000, flags, 0o644)
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode(libc::SYS_renameat2, [1, 2, 3, 4, libc::RENAME_EXCHANGE as u64, 0]).unwrap(),
            Call::Rename { flags, .. } if flags == libc::RENAME_EXCHANGE
        ));
        assert!(matches!(
            decode(libc::SYS_linkat, [1, 2, 3, 4, libc::AT_EMPTY_PATH as u64, 0]).unwrap(),
            Call::Link { from, follow: false, .. } if from.empty
        ));
        assert_eq!(
            decode(libc::SYS_linkat, [1, 2, 3, 4, 0x8000, 0]).unwrap_err(),
            libc::EINVAL
        );
        assert!(matches!(
            decode(
                libc::SYS_unlinkat,
                [1, 2, libc::AT_REMOVEDIR as u64, 0, 0, 0]
            )
            .unwrap(),
            Call::Unlink { dir: true, .. }
        ));
        assert!(Session::handles(libc::SYS_openat));
        assert!(Session::handles(libc::SYS_renameat2));
        assert!(!Session::handles(libc::SYS_read));
        assert!(!Session::handles(libc::SYS_fchmodat));
    }
}
