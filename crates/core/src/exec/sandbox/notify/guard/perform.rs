//! The guard's calls performed once allowed, on the descriptors resolved: on the handler thread
//! (namespaces mode) or on a thread confined by the shell's own ruleset (Landlock mode).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::super::objects::{openat, proc_fd};
use super::super::resolve::Resolved;
use super::super::{drop_own_capabilities, HANDLER_STACK_BYTES};
use super::{Refusal, REFUSED};
use crate::sys::errno;

/// One call to perform on the performer thread.
pub(super) enum Job {
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
pub(super) fn entry(resolved: &Resolved, errno: i32) -> Result<(BorrowedFd<'_>, Vec<u8>), i32> {
    match resolved {
        Resolved::Entry { dir, name, .. } => {
            let mut c = name.clone();
            c.push(0);
            Ok((dir.as_fd(), c))
        }
        Resolved::Object(_) => Err(errno),
    }
}

pub(super) fn check(r: libc::c_int) -> Result<(), i32> {
    match r {
        0 => Ok(()),
        _ => Err(errno()),
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
                        let path = proc_fd(object.as_fd());
                        // SAFETY: see above.
                        let fd = unsafe {
                            libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC, mode)
                        };
                        if fd < 0 {
                            return Err(errno());
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
                        let path = proc_fd(object.as_fd());
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
                let path = proc_fd(object.as_fd());
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
pub(super) fn unix_path(address: &[u8]) -> Option<&[u8]> {
    let family = u16::from_ne_bytes([*address.first()?, *address.get(1)?]);
    let path = address.get(SUN_PATH_AT..)?;
    if family != libc::AF_UNIX as u16 || path.first().is_none_or(|&b| b == 0) {
        return None;
    }
    Some(path.split(|&b| b == 0).next().unwrap_or(path))
}

/// Binds `socket`: to `address` as given, or to the name `at` resolved (from within its
/// directory: the performing thread's working directory is its own, `unshare(CLONE_FS)`).
pub(super) fn bind(
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
        let code = errno();
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
        return Err(errno());
    }
    // SAFETY: just opened, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

type Answer = Result<Option<OwnedFd>, i32>;

/// Where the guard's calls are performed: with umask 0 (the caller's is applied to each mode) and,
/// in Landlock mode, under the shell's own ruleset.
pub(super) enum Performer {
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
    pub(super) fn start(ruleset: Option<BorrowedFd<'_>>) -> io::Result<Performer> {
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
            .stack_size(HANDLER_STACK_BYTES)
            .spawn(move || {
                drop_own_capabilities();
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

    pub(super) fn run(&self, job: Job) -> Result<Option<OwnedFd>, Refusal> {
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
