//! The listener: the filter installed in the shell's process and its listener sent to Node
//! (`SCM_RIGHTS` over a socket pair made per exec), the handler thread that receives it, and the
//! loop that answers each notification (`respond`, or a descriptor handed over with `send_fd`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use libc::sock_filter;

use super::super::bpf::{Asm, RET_ALLOW};
use super::answer::respond;
use super::caller::{Pidfds, Target};
use super::decode::{decode, Call, Notified, Op};
use super::watch::{watch, Watcher};
use super::{
    drop_own_capabilities, errno_now, guard, metadata, Policy, Reply, HANDLER_STACK_BYTES,
};
use crate::sys::errno;

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): the handler runs on the waiting caller's CPU.
pub(super) const NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

/// Installs the notification filter `program` (a `Policy`'s) on the calling process and sends
/// its listener over `channel`. Runs in the shell's process after `confine` (no_new_privs is
/// set), just before `execve`. Async-signal-safe; `Err` is the errno.
///
/// # Safety
///
/// Call only in a process about to `execve`: the filter stays for good. `channel` is an open
/// socket of this process (the children's end of the plan's pair).
pub(in crate::exec) unsafe fn install(program: &[sock_filter], channel: RawFd) -> Result<(), i32> {
    let program = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut sock_filter,
    };
    // SAFETY: `program` points to the policy's filter, valid for `len` instructions (the kernel
    // copies it); the caller's process is the one to filter.
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &program as *const libc::sock_fprog,
        )
    };
    if listener < 0 {
        return Err(errno());
    }
    let listener = listener as RawFd;
    /// Room for one descriptor's control message (CMSG_SPACE(4) on 64-bit Linux).
    const CONTROL_BYTES: usize = 24;
    let mut control = [0u64; CONTROL_BYTES / 8];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: `msghdr` is a plain C struct: all-zero bytes are valid.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = CONTROL_BYTES as _;
    // SAFETY: `control` (8-byte aligned, CONTROL_BYTES long) holds one header and one descriptor,
    // so CMSG_FIRSTHDR is non-null and the header and its data lie inside it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), listener);
    }
    // SAFETY: `message` and the buffers it points to are valid; `channel` is the caller's socket.
    let sent = unsafe { libc::sendmsg(channel, &message, libc::MSG_NOSIGNAL) };
    let code = errno();
    // SAFETY: the listener is ours; the handler got its copy.
    unsafe { libc::close(listener) };
    if sent != 1 {
        return Err(code);
    }
    Ok(())
}

/// Whether seccomp user notification works here: a forked child installs an allow-all filter with
/// a listener (the kernel may lack it, or a container's own filter may hold the one listener a
/// process may have). Probed once per process.
pub(in crate::exec) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let mut asm = Asm::new();
        asm.ret(RET_ALLOW);
        let Ok(allow) = asm.finish() else {
            return false;
        };
        let program = libc::sock_fprog {
            len: allow.len() as libc::c_ushort,
            filter: allow.as_ptr() as *mut sock_filter,
        };
        // SAFETY: the child makes raw system calls on memory prepared above and exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: raw calls in the child; `program` outlives them.
            unsafe {
                let ok = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                    && libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                        &program as *const libc::sock_fprog,
                    ) >= 0;
                libc::_exit(if ok { 0 } else { 1 })
            }
        }
        if child < 0 {
            return false;
        }
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child.
            let r = unsafe { libc::waitpid(child, &mut status, 0) };
            if r >= 0 || errno_now() != libc::EINTR {
                break;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    })
}

/// A socket pair for one exec's listener: (Node's end, the children's end), both close-on-exec.
pub(in crate::exec) fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: a valid two-element buffer.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both just created and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts the handler thread of one exec: it waits for the listener on `channel` (none comes when
/// the shell failed before `execve`: the children's ends close), then answers until the listener
/// hangs up. `plan` keeps the policy alive.
pub(in crate::exec) fn serve(
    plan: Arc<super::super::Plan>,
    channel: OwnedFd,
    guard: Option<guard::Session>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("pi-sandbox-notify".into())
        .stack_size(HANDLER_STACK_BYTES)
        .spawn(move || {
            if let Some(policy) = plan.notify() {
                drop_own_capabilities();
                if let Some(listener) = receive(&channel) {
                    drop(channel);
                    run(policy, Arc::new(listener), guard);
                }
            }
        })
        .map(drop)
}

/// The listener sent over `channel`, or `None` at end-of-file.
pub(super) fn receive(channel: &OwnedFd) -> Option<OwnedFd> {
    const CONTROL_BYTES: usize = 24;
    let mut control = [0u64; CONTROL_BYTES / 8];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a zeroed msghdr is valid; we point it at our buffers.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = CONTROL_BYTES as _;
    loop {
        // SAFETY: recvmsg into the buffers above.
        let n = unsafe { libc::recvmsg(channel.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return None;
        }
        break;
    }
    // SAFETY: the kernel filled `message`; the header and data lie within `control`.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null()
            || (*header).cmsg_level != libc::SOL_SOCKET
            || (*header).cmsg_type != libc::SCM_RIGHTS
        {
            return None;
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<RawFd>());
        Some(OwnedFd::from_raw_fd(fd))
    }
}

pub(super) fn run(policy: &Policy, listener: Arc<OwnedFd>, mut guard: Option<guard::Session>) {
    let mut watcher = None;
    let pidfds = Pidfds::default();
    // SAFETY: an ioctl on our listener with a valid flags value; older kernels refuse it harmlessly.
    let sync = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            NOTIF_FD_SYNC_WAKE_UP,
        )
    } == 0;
    // Where the flag exists (Linux 6.6), RECV itself waits, and returns ENOENT once no process
    // uses the filter any more: no poll before each notification. Before, RECV would wait past
    // that, so poll says when a notification is there or the listener hung up.
    loop {
        if !sync {
            match wait_readable(listener.as_fd(), -1) {
                Readiness::Readable => {}
                Readiness::Other => continue,
                Readiness::HungUp => return, // no process of the tree uses the filter any more
            }
        }
        // SAFETY: the kernel requires a zeroed notification buffer.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV fills our buffer.
        if unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut notif,
            )
        } != 0
        {
            match io::Error::last_os_error().raw_os_error() {
                // The caller went (killed, or a signal ended its call) before we read it, or
                // (waiting in RECV) the filter has no process left.
                Some(libc::ENOENT) | Some(libc::EINTR) => {
                    if sync && wait_readable(listener.as_fd(), 0) == Readiness::HungUp {
                        return;
                    }
                    continue;
                }
                _ => return,
            }
        }
        let target = Target::new(&listener, &pidfds, notif.pid as libc::pid_t, notif.id);
        let reply = match decode(notif.data.nr as libc::c_long, notif.data.args) {
            Err(code) => Reply::Errno(code),
            Ok(Notified::Handler(call)) => handle(policy, &target, call, &mut watcher),
            Ok(Notified::Guard(call)) => match guard.as_mut() {
                Some(session) => {
                    let ruleset = policy.ruleset.as_ref().map(|r| r.as_fd());
                    session.handle(&target, call, ruleset)
                }
                None => Reply::Errno(libc::ENOSYS),
            },
        };
        respond(listener.as_fd(), notif.id, reply);
    }
}

/// What `poll` says of the listener.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Readiness {
    /// A notification waits.
    Readable,
    /// No process uses the filter any more (or the listener is unusable).
    HungUp,
    /// Interrupted, or nothing yet (a zero timeout).
    Other,
}

/// Polls the listener for at most `timeout_ms` (-1: no limit).
pub(super) fn wait_readable(listener: BorrowedFd<'_>, timeout_ms: libc::c_int) -> Readiness {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if ready < 0 {
        return if errno_now() == libc::EINTR {
            Readiness::Other
        } else {
            Readiness::HungUp
        };
    }
    if pfd.revents & libc::POLLIN != 0 {
        Readiness::Readable
    } else if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Readiness::HungUp
    } else {
        Readiness::Other
    }
}

pub(super) fn handle(
    policy: &Policy,
    target: &Target<'_>,
    call: Call,
    watcher: &mut Option<Watcher>,
) -> Reply {
    if let Op::Watch { inotify, mask } = call.op {
        return watch(policy, target, call.object, inotify, mask, watcher)
            .map_or_else(Reply::Errno, Reply::Value);
    }
    match metadata::perform(policy, target, call) {
        Ok(reply) => reply,
        Err(code) => Reply::Errno(code),
    }
}
