//! The caller of one notification, as the handler reaches it: a pidfd (kept across calls),
//! copies of its descriptors (`pidfd_getfd`), its memory (`process_vm_readv`), its cwd and root
//! through its `/proc/<pid>` directory, and (for the guard's walks) its pid as its own `/proc`
//! shows it and its umask. Whatever is read by pid is the caller's only once `Target::valid` says
//! so.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;

use super::answer::id_valid;
use super::PATH_MAX;
use crate::sys::errno;

/// `pidfd_open`'s flag for a thread's pid (Linux 6.9; `O_EXCL`'s value).
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

/// The caller of one notification: its pid (in our namespace), a pidfd, the listener and id.
pub(super) struct Target<'a> {
    pub(super) pid: libc::pid_t,
    /// Taken from `pidfds` or opened on first use: a path relative to the cwd needs none.
    /// With it, whether it was kept from an earlier call (not opened for this one).
    pidfd: std::cell::OnceCell<Result<(Rc<OwnedFd>, bool), i32>>,
    pub(super) pidfds: &'a Pidfds,
    /// `fd` copied the caller's descriptor through a pidfd kept from an earlier call.
    fd_by_kept_pidfd: std::cell::Cell<bool>,
    /// `cwd_into` read the cwd through a `/proc/<pid>` directory kept from an earlier call.
    cwd_by_kept_dir: std::cell::Cell<bool>,
    pub(super) listener: &'a Arc<OwnedFd>,
    pub(super) id: u64,
}

/// The pidfd of the last caller, kept across notifications: a shell's metadata calls come in runs
/// from one process (`touch` and `chmod` make one call per file), and a pidfd_open and close per
/// call are a fifth of the handler's system calls. Safe to keep: a pidfd names one process for
/// good, so once that process has gone it answers `ESRCH` and a fresh one is opened (`Target::fd`).
#[derive(Default)]
pub(super) struct Pidfds {
    last: std::cell::RefCell<Option<(libc::pid_t, Rc<OwnedFd>)>>,
    /// The last caller's `/proc/<pid>` directory (`Target::cwd_into`), kept on the same terms: it
    /// names one process for good and answers `ENOENT` once that process has gone.
    pub(super) proc_dir: std::cell::RefCell<Option<(libc::pid_t, OwnedFd)>>,
    /// The buffers a path-based call reads into.
    pub(super) scratch: std::cell::RefCell<Scratch>,
}

/// Buffers reused from call to call (a `touch` or `chmod` of many files makes one call each).
#[derive(Default)]
pub(super) struct Scratch {
    /// A path read from the caller.
    pub(super) path: Vec<u8>,
    /// The same made absolute (the caller's cwd, `/`, the path), NUL-terminated.
    pub(super) joined: Vec<u8>,
}

impl Pidfds {
    pub(super) fn get(&self, pid: libc::pid_t) -> Option<Rc<OwnedFd>> {
        match &*self.last.borrow() {
            Some((last, fd)) if *last == pid => Some(Rc::clone(fd)),
            _ => None,
        }
    }

    pub(super) fn keep(&self, pid: libc::pid_t, fd: &Rc<OwnedFd>) {
        *self.last.borrow_mut() = Some((pid, Rc::clone(fd)));
    }

    fn forget(&self, pid: libc::pid_t) {
        let mut last = self.last.borrow_mut();
        if matches!(&*last, Some((p, _)) if *p == pid) {
            *last = None;
        }
    }
}

impl<'a> Target<'a> {
    pub(super) fn new(
        listener: &'a Arc<OwnedFd>,
        pidfds: &'a Pidfds,
        pid: libc::pid_t,
        id: u64,
    ) -> Self {
        Target {
            pid,
            pidfd: std::cell::OnceCell::new(),
            pidfds,
            fd_by_kept_pidfd: std::cell::Cell::new(false),
            cwd_by_kept_dir: std::cell::Cell::new(false),
            listener,
            id,
        }
    }

    /// A pidfd of the caller (checked against pid reuse by `valid` before anything is done).
    fn pidfd(&self) -> Result<BorrowedFd<'_>, i32> {
        let fd = self.pidfd.get_or_init(|| {
            if let Some(kept) = self.pidfds.get(self.pid) {
                return Ok((kept, true));
            }
            let open = |flags: libc::c_uint| {
                // SAFETY: pidfd_open takes a pid and flags.
                unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid, flags) }
            };
            let mut fd = open(0);
            if fd < 0 && errno() == libc::EINVAL {
                fd = open(PIDFD_THREAD); // a thread of the caller, not its leader
            }
            let mut exact = true;
            if fd < 0 {
                // Before Linux 6.9 a thread has no pidfd: its thread group's leader shares its
                // descriptors (the same `valid` check covers the pid read here). Not kept: it
                // would outlive the thread, whose pid another process may then get.
                exact = false;
                if let Some(leader) = thread_group(self.pid) {
                    // SAFETY: pidfd_open takes a pid and flags.
                    fd = unsafe { libc::syscall(libc::SYS_pidfd_open, leader, 0) };
                }
            }
            if fd < 0 {
                return Err(libc::ESRCH);
            }
            // SAFETY: just opened, ours.
            let fd = Rc::new(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
            if exact {
                self.pidfds.keep(self.pid, &fd);
            }
            Ok((fd, false))
        });
        fd.as_ref().map(|(fd, _)| fd.as_fd()).map_err(|e| *e)
    }

    /// Whether the caller still waits: what we read by pid was its.
    pub(super) fn valid(&self) -> bool {
        id_valid(self.listener.as_fd(), self.id)
    }

    /// Whether a descriptor copied by `fd` is the caller's without asking `valid`: the pidfd it
    /// went through was kept from an earlier call and names exactly this pid (a process, or a
    /// thread), and the copy succeeded, so that process was alive then. A live process keeps its
    /// pid to itself, so it is the caller. Only for a call that read nothing else by pid.
    pub(super) fn fd_proven(&self) -> bool {
        self.fd_by_kept_pidfd.get()
    }

    /// Whether what this call read by pid up to and including its cwd (`cwd_into`) was the
    /// caller's without asking `valid`: the cwd was read through a `/proc/<pid>` directory kept
    /// from an earlier call, and a kept directory answers only while its process lives. Alive, that
    /// process has held the pid since it was kept, so the caller is it, and the reads by pid
    /// before (the path) were its. Only for a call that reads nothing by pid afterwards.
    pub(super) fn cwd_proven(&self) -> bool {
        self.cwd_by_kept_dir.get()
    }

    /// Our copy of the caller's descriptor `fd` (the same open file).
    pub(super) fn fd(&self, fd: i32) -> Result<OwnedFd, i32> {
        if fd < 0 {
            return Err(libc::EBADF);
        }
        let getfd = |pidfd: BorrowedFd<'_>| {
            // SAFETY: pidfd_getfd on our pidfd; the copy it makes is close-on-exec.
            let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
            if copy < 0 {
                return Err(errno());
            }
            // SAFETY: a descriptor we just got.
            Ok(unsafe { OwnedFd::from_raw_fd(copy as RawFd) })
        };
        let pidfd = self.pidfd()?;
        let by_kept = matches!(self.pidfd.get(), Some(Ok((_, true))));
        self.fd_by_kept_pidfd.set(false);
        match getfd(pidfd) {
            Err(libc::ESRCH) if by_kept => {
                // The kept pidfd named an earlier process with this pid: open the caller's own.
                self.pidfds.forget(self.pid);
                let fresh = Target::new(self.listener, self.pidfds, self.pid, self.id);
                getfd(fresh.pidfd()?)
            }
            Ok(copy) => {
                self.fd_by_kept_pidfd.set(by_kept);
                Ok(copy)
            }
            copy => copy,
        }
    }

    /// `len` bytes of the caller's memory at `addr`.
    pub(super) fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let local = libc::iovec {
                iov_base: buf[done..].as_mut_ptr().cast(),
                iov_len: len - done,
            };
            let remote = libc::iovec {
                iov_base: (addr as usize + done) as *mut libc::c_void,
                iov_len: len - done,
            };
            // SAFETY: reads into our buffer's remaining part.
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            if n <= 0 {
                return Err(libc::EFAULT);
            }
            done += n as usize;
        }
        Ok(buf)
    }

    /// A NUL-terminated string of the caller (at most `max` bytes with the NUL), without the NUL;
    /// `too_long` is the errno when there is no NUL within `max`.
    pub(super) fn string(&self, addr: u64, max: usize, too_long: i32) -> Result<Vec<u8>, i32> {
        /// Reads stop at page boundaries: a string may end just before an unmapped page.
        const PAGE: usize = 4096;
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        let mut out = Vec::new();
        while out.len() < max {
            let at = addr as usize + out.len();
            let chunk = (PAGE - at % PAGE).min(max - out.len());
            let bytes = self.read(at as u64, chunk)?;
            if let Some(end) = bytes.iter().position(|&b| b == 0) {
                out.extend_from_slice(&bytes[..end]);
                return Ok(out);
            }
            out.extend_from_slice(&bytes);
        }
        Err(too_long)
    }

    /// A path of the caller (at most `PATH_MAX` bytes with the NUL), read into `out` (kept from
    /// call to call): its length without the NUL. One read when the path ends within the page it
    /// starts in (the common case).
    pub(super) fn string_into(&self, addr: u64, out: &mut Vec<u8>) -> Result<usize, i32> {
        /// Reads stop at page boundaries: a string may end just before an unmapped page.
        const PAGE: usize = 4096;
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        if out.len() < PATH_MAX {
            out.resize(PATH_MAX, 0);
        }
        let mut done = 0;
        while done < PATH_MAX {
            let at = addr as usize + done;
            let chunk = (PAGE - at % PAGE).min(PATH_MAX - done);
            let local = libc::iovec {
                iov_base: out[done..].as_mut_ptr().cast(),
                iov_len: chunk,
            };
            let remote = libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: chunk,
            };
            // SAFETY: reads at most `chunk` bytes into our buffer, which has that many from `done`.
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            if n <= 0 {
                return Err(libc::EFAULT);
            }
            let n = n as usize;
            if let Some(end) = out[done..done + n].iter().position(|&b| b == 0) {
                return Ok(done + end);
            }
            done += n;
        }
        Err(libc::ENAMETOOLONG)
    }

    /// Appends the caller's cwd (`/proc/<pid>/cwd`) to `out`: read through the last caller's kept
    /// `/proc/<pid>` directory, opened anew for another caller or when the kept one names a
    /// process that has gone. What it read is the caller's only once `valid` (or `cwd_proven`)
    /// says so.
    pub(super) fn cwd_into(&self, out: &mut Vec<u8>) -> Option<()> {
        self.through_proc_dir(|dir| {
            let start = out.len();
            out.resize(start + PATH_MAX + 1, 0);
            // SAFETY: readlinkat into our buffer's tail of the length given.
            let n = unsafe {
                libc::readlinkat(
                    dir.as_raw_fd(),
                    c"cwd".as_ptr(),
                    out[start..].as_mut_ptr().cast(),
                    PATH_MAX + 1,
                )
            };
            if n <= 0 || n as usize > PATH_MAX {
                out.truncate(start);
                return Err(if n < 0 { errno() } else { libc::ENAMETOOLONG });
            }
            out.truncate(start + n as usize);
            Ok(())
        })
        .ok()
    }

    /// The caller's `/proc/<pid>/<name>` (`cwd`, `root`: the magic link followed), opened `O_PATH`
    /// through the kept `/proc/<pid>` directory as `cwd_into` reads. What it opened is the caller's
    /// only once `valid` (or `cwd_proven`) says so.
    pub(super) fn proc_open(&self, name: &std::ffi::CStr) -> Result<OwnedFd, i32> {
        self.through_proc_dir(|dir| {
            // SAFETY: openat on our descriptor with a NUL-terminated name.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_PATH | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(errno());
            }
            // SAFETY: just opened, ours.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        })
    }

    /// `read` on the last caller's kept `/proc/<pid>` directory, opened anew (and kept) for
    /// another caller or when the kept one names a process that has gone.
    fn through_proc_dir<T>(
        &self,
        mut read: impl FnMut(BorrowedFd<'_>) -> Result<T, i32>,
    ) -> Result<T, i32> {
        self.cwd_by_kept_dir.set(false);
        let mut kept = self.pidfds.proc_dir.borrow_mut();
        if let Some((pid, dir)) = &*kept {
            if *pid == self.pid {
                match read(dir.as_fd()) {
                    Ok(value) => {
                        self.cwd_by_kept_dir.set(true);
                        return Ok(value);
                    }
                    // The kept directory's process has gone: this caller only shares its pid.
                    Err(libc::ENOENT | libc::ESRCH) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        *kept = None;
        let path = format!("/proc/{}\0", self.pid);
        // SAFETY: open of a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(libc::ESRCH);
        }
        // SAFETY: just opened, ours.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        let value = read(dir.as_fd())?;
        *kept = Some((self.pid, dir));
        Ok(value)
    }
}

/// The thread group (process) of thread `tid`, from `/proc/<tid>/status`.
fn thread_group(tid: libc::pid_t) -> Option<libc::pid_t> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|value| value.trim().parse().ok())
}
