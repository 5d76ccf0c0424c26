//! `inotify_add_watch` (Landlock mode): a watch is added only on what the shell could read.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::caller::Target;
use super::decode::Object;
use super::objects::proc_fd;
use super::{drop_own_capabilities, Policy, HANDLER_STACK_BYTES};
use crate::sys::errno;

/// Refused watches: "permission denied", what the kernel answers a caller that may not read
/// what it would watch.
const REFUSED_WATCH: i32 = libc::EACCES;

/// A thread confined by the shell's own Landlock ruleset (`landlock_restrict_self` is
/// per-thread), which opens what a watch names as the shell would: a watch is added only on what
/// the shell could read. The handler itself stays unconfined: Landlock would keep a confined
/// thread from reading the shell's memory and descriptors (a sibling domain).
pub(super) struct Watcher {
    jobs: std::sync::mpsc::Sender<(OwnedFd, OwnedFd, u32)>,
    answers: std::sync::mpsc::Receiver<Result<i64, i32>>,
}

impl Watcher {
    pub(super) fn start(ruleset: BorrowedFd<'_>) -> Result<Watcher, i32> {
        let ruleset = ruleset.try_clone_to_owned().map_err(|_| REFUSED_WATCH)?;
        let (jobs, job_rx) = std::sync::mpsc::channel::<(OwnedFd, OwnedFd, u32)>();
        let (answer_tx, answers) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("pi-sandbox-watch".into())
            .stack_size(HANDLER_STACK_BYTES)
            .spawn(move || {
                drop_own_capabilities();
                // SAFETY: per-thread no_new_privs (what landlock_restrict_self requires without
                // CAP_SYS_ADMIN), then the ruleset on this thread only.
                let confined = unsafe {
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                        && libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0)
                            == 0
                };
                drop(ruleset);
                for (object, inotify, mask) in job_rx {
                    let answer = if confined {
                        watch_as_shell(object.as_fd(), inotify.as_fd(), mask)
                    } else {
                        Err(REFUSED_WATCH) // fail closed
                    };
                    if answer_tx.send(answer).is_err() {
                        return;
                    }
                }
            })
            .map_err(|_| REFUSED_WATCH)?;
        Ok(Watcher { jobs, answers })
    }
}

/// Opens `object` for reading as the confined thread may (Landlock decides), and watches what it
/// opened on the caller's inotify instance. Directories and regular files only: opening anything
/// else can have effects (a FIFO, a device).
fn watch_as_shell(object: BorrowedFd<'_>, inotify: BorrowedFd<'_>, mask: u32) -> Result<i64, i32> {
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into our buffer.
    if unsafe { libc::fstat(object.as_raw_fd(), &mut st) } != 0 {
        return Err(errno());
    }
    let flags = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => libc::O_RDONLY | libc::O_DIRECTORY,
        libc::S_IFREG => libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        _ => return Err(REFUSED_WATCH),
    };
    let path = proc_fd(object);
    // SAFETY: open of a NUL-terminated path.
    let readable = unsafe { libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC) };
    if readable < 0 {
        return Err(errno());
    }
    // SAFETY: just opened, ours.
    let readable = unsafe { OwnedFd::from_raw_fd(readable) };
    let path = proc_fd(readable.as_fd());
    // SAFETY: inotify_add_watch on our copy of the caller's instance, through our descriptor.
    let wd = unsafe {
        libc::inotify_add_watch(
            inotify.as_raw_fd(),
            path.as_ptr().cast(),
            mask & !libc::IN_DONT_FOLLOW,
        )
    };
    if wd < 0 {
        return Err(errno());
    }
    Ok(i64::from(wd))
}

/// `inotify_add_watch`: added only on what the shell could read (Landlock mode), or on a special
/// file or a symlink itself inside the writable areas.
pub(super) fn watch(
    policy: &Policy,
    target: &Target<'_>,
    object: Object,
    inotify: i32,
    mask: u32,
    watcher: &mut Option<Watcher>,
) -> Result<i64, i32> {
    let object = target.resolve(object)?;
    let instance = target.fd(inotify)?;
    if !target.valid() {
        return Err(libc::ENOENT);
    }
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into our buffer.
    if unsafe { libc::fstat(object.as_raw_fd(), &mut st) } != 0 {
        return Err(errno());
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFDIR && kind != libc::S_IFREG {
        if !policy.inside(object.as_fd()) {
            return Err(REFUSED_WATCH);
        }
        let path = proc_fd(object.as_fd());
        // SAFETY: inotify_add_watch on our copy of the caller's instance, through our descriptor.
        let wd = unsafe {
            libc::inotify_add_watch(
                instance.as_raw_fd(),
                path.as_ptr().cast(),
                mask & !libc::IN_DONT_FOLLOW,
            )
        };
        return if wd < 0 {
            Err(errno())
        } else {
            Ok(i64::from(wd))
        };
    }
    let Some(ruleset) = policy.ruleset.as_ref() else {
        return Err(REFUSED_WATCH);
    };
    if watcher.is_none() {
        *watcher = Some(Watcher::start(ruleset.as_fd())?);
    }
    let helper = watcher.as_ref().expect("started above");
    if helper.jobs.send((object, instance, mask)).is_err() {
        *watcher = None;
        return Err(REFUSED_WATCH);
    }
    helper.answers.recv().unwrap_or(Err(REFUSED_WATCH))
}
