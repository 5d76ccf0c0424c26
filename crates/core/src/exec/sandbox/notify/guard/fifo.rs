//! FIFO opens that wait for their other end: retried off the handler thread.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use super::super::answer::{id_valid, respond, send_fd};
use super::super::caller::Target;
use super::super::objects::{dup, openat, proc_fd};
use super::super::resolve::Resolved;
use super::super::{drop_own_capabilities, Reply, HANDLER_STACK_BYTES};
use super::REFUSED;
use crate::sys::errno;

/// The FIFO `resolved` names, opened `O_PATH`, when opening it with `flags` would wait for the
/// other end (`O_RDONLY` or `O_WRONLY` without `O_NONBLOCK`): that wait must not hold the handler.
pub(super) fn blocking_fifo(resolved: &Resolved, flags: i32) -> Option<OwnedFd> {
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
pub(super) struct FifoWaiter {
    waits: std::sync::mpsc::Sender<FifoWait>,
    /// Waits handed over and not yet answered (or given up).
    pending: Arc<std::sync::atomic::AtomicUsize>,
}

/// One FIFO open that waits.
struct FifoWait {
    listener: Arc<OwnedFd>,
    pub(super) id: u64,
    /// The FIFO, `O_PATH`.
    fifo: OwnedFd,
    flags: i32,
    /// Opened (a reader's open succeeds at once; it waits for data or a writer's close).
    opened: Option<OwnedFd>,
}

impl FifoWaiter {
    pub(super) fn start(ruleset: Option<&OwnedFd>) -> io::Result<FifoWaiter> {
        /// Retries start this far apart and grow to the second.
        const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(1);
        const RETRY_MAX: std::time::Duration = std::time::Duration::from_millis(50);
        let ruleset = ruleset.map(|r| r.try_clone()).transpose()?;
        let (waits, incoming) = std::sync::mpsc::channel::<FifoWait>();
        let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&pending);
        std::thread::Builder::new()
            .name("pi-sandbox-fifo".into())
            .stack_size(HANDLER_STACK_BYTES)
            .spawn(move || {
                drop_own_capabilities();
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
                            respond(wait.listener.as_fd(), wait.id, Reply::Errno(REFUSED));
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
    pub(super) fn wait(&self, target: &Target<'_>, fifo: OwnedFd, flags: i32) -> Reply {
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
        if !id_valid(listener, self.id) {
            return true; // the caller went (a signal, a kill)
        }
        if self.opened.is_none() {
            let path = proc_fd(self.fifo.as_fd());
            let flags = (self.flags & !libc::O_CLOEXEC) | libc::O_NONBLOCK | libc::O_CLOEXEC;
            // SAFETY: open of our NUL-terminated path.
            let fd = unsafe { libc::open(path.as_ptr().cast(), flags) };
            if fd >= 0 {
                // SAFETY: just opened, ours.
                self.opened = Some(unsafe { OwnedFd::from_raw_fd(fd) });
            } else if errno() != libc::ENXIO {
                respond(listener, self.id, Reply::Errno(errno()));
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
        let reply = send_fd(listener, self.id, fd.as_fd(), cloexec);
        if reply != Reply::Later {
            respond(listener, self.id, reply);
        }
        true
    }
}
