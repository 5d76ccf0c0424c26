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

// The guard's block of the notification filter.
mod filter;
// The policy's answer for a resolved path.
mod decide;
// The calls performed for the caller once allowed.
mod perform;
// FIFO opens that wait for their other end.
mod fifo;
#[cfg(test)]
mod tests;

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::answer::send_fd;
use super::decode::{At, GuardCall};
use super::objects::{dup, fd_path, identity, openat, reopen_beneath};
use super::resolve::{Caller, Kind, Resolved};
use super::PATH_MAX;
use super::{Reply, Target};
use crate::policy::{Denial, EventSink, EventTarget, Policy, PolicyEvent};
use crate::root::RuntimeMap;
use fifo::{blocking_fifo, FifoWaiter};
pub(super) use filter::block;
pub(in crate::exec) use filter::Filter;
use perform::unix_path;
use perform::{Job, Performer};

/// What a refused call fails with: "permission denied", as for a file the caller may not write.
pub(super) const REFUSED: i32 = libc::EACCES;
/// The open flags that can change a file (the filter notifies these opens).
pub(super) const WRITE_FLAGS: u32 =
    (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;
/// A name no rule names itself: a directory is unreadable when this name inside it would be
/// (`secrets/**` denies listing `secrets`; `*.pem` does not deny listing anything).
pub(super) const PROBE: &str = "\u{1}pi-native-ops-probe";

/// Events one command may report: a command that runs into the policy in a loop must not fill the
/// agent's queue (each event is a JS object); refusals past this are still refused, unreported.
const MAX_EVENTS_PER_COMMAND: usize = 1000;

/// The policy of one prepared sandbox, with the workspace it is relative to.
pub(in crate::exec) struct Guard {
    policy: Arc<Policy>,
    /// The workspace on the host (`O_PATH`), held since the sandbox was prepared.
    root: OwnedFd,
    /// Its identity (device, inode): a held descriptor's object does not change.
    root_id: (u64, u64),
    /// Its real path on the host, and where the shell sees it (`runtime_root`; the host path in
    /// Landlock mode).
    paths: RuntimeMap,
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
        let root_id = identity(root.1).ok_or_else(io::Error::last_os_error)?;
        Ok(Some(Guard {
            policy,
            root_id,
            root: root.1.try_clone_to_owned()?,
            paths: RuntimeMap::new(root.0, runtime),
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
        self.paths.runtime_path(rel).to_string_lossy().into_owned()
    }

    /// Where `fd`'s object lies: `rel` beneath the workspace, outside it, or somewhere that
    /// names the workspace but is not what the workspace holds there (refused).
    fn place(&self, fd: BorrowedFd<'_>) -> Place {
        let Some(object) = identity(fd) else {
            return Place::Unknown;
        };
        // The workspace's own directory, wherever it shows (a command's usual cwd): its path
        // needs no reading.
        if object == self.root_id {
            return Place::Inside(PathBuf::new());
        }
        let Some(at) = fd_path(fd) else {
            return Place::Outside;
        };
        let at = Path::new(OsStr::from_bytes(&at));
        let mut named = false;
        for rel in [
            self.paths.runtime_relative(at),
            self.paths.host_relative(at),
        ] {
            let Some(rel) = rel else {
                continue;
            };
            named = true;
            let same = if rel.as_os_str().is_empty() {
                self.root_id == object
            } else {
                reopen_beneath(self.root.as_fd(), rel.as_os_str().as_bytes())
                    .and_then(|again| identity(again.as_fd()))
                    == Some(object)
            };
            if same {
                return Place::Inside(rel);
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
pub(super) enum Place {
    Inside(PathBuf),
    Outside,
    Unknown,
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
                true => super::hooks_path::hooks_dir(&guard.paths.host),
                false => None,
            },
            fifo: std::cell::OnceCell::new(),
            guard,
        }
    }

    /// Answers one notification of a guarded call. `ruleset`: Landlock mode's, which the
    /// performer confines itself with.
    pub(super) fn handle(
        &mut self,
        target: &Target<'_>,
        call: GuardCall,
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
                let id = reopen_beneath(self.guard.root.as_fd(), upto.as_os_str().as_bytes())
                    .and_then(|fd| identity(fd.as_fd()));
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

    pub(super) fn serve(&self, target: &Target<'_>, call: GuardCall) -> Result<Reply, Refusal> {
        let caller = Caller::new(target);
        let performer = self.performer.as_ref().ok_or(Refusal::Errno(REFUSED))?;
        let guard = &*self.guard;
        match call {
            GuardCall::Open { at, flags, mode } => {
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
                Ok(match fd {
                    Some(fd) => send_fd(target.listener.as_fd(), target.id, fd.as_fd(), cloexec),
                    None => Reply::Errno(libc::EIO),
                })
            }
            GuardCall::Rename { from, to, flags } => {
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
            GuardCall::Link { from, to, follow } => {
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
            GuardCall::Symlink { text, at } => {
                let text = target
                    .string(text, PATH_MAX, libc::ENAMETOOLONG)
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
            GuardCall::Unlink { at, dir } => {
                let at = caller.resolve(at, false)?;
                if !target.valid() {
                    return Err(Refusal::Errno(libc::ENOENT));
                }
                self.waived(guard.check_name(&at, None, false, self.hooks.as_deref()))?;
                performer
                    .run(Job::Unlink { at, dir })
                    .map(|_| Reply::Value(0))
            }
            GuardCall::Make { at, mode, dev } => {
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
                        if let Some(id) = identity(made.as_fd()) {
                            self.new_repositories.borrow_mut().push(id);
                        }
                    }
                }
                Ok(Reply::Value(0))
            }
            GuardCall::Bind { fd, addr, len } => {
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
            GuardCall::Truncate { at, length } => {
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
pub(super) enum Refusal {
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

/// `/dev/tty`'s device number (5, 0): whoever opens it gets their own controlling terminal.
const TTY_DEVICE: (u32, u32) = (5, 0);

/// Whether `resolved` is `/dev/tty` (any node of its number).
fn is_controlling_tty(resolved: &Resolved) -> bool {
    resolved.stat().is_some_and(|st| {
        st.mode & libc::S_IFMT == libc::S_IFCHR
            && (libc::major(st.rdev), libc::minor(st.rdev)) == TTY_DEVICE
    })
}

pub(super) fn is_tmpfile(flags: i32) -> bool {
    flags & libc::O_TMPFILE == libc::O_TMPFILE
}
