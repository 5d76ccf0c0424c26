//! The listener: the filter installed in the shell's process and its listener sent to Node
//! (`SCM_RIGHTS` over a socket pair made per exec), the handler thread that receives it, and the
//! loop that answers each notification (`respond`, or a descriptor handed over with `send_fd`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use libc::sock_filter;

use super::super::bpf::{Asm, RET_ALLOW};
use super::answer::respond;
use super::caller::{Pidfds, Target};
use super::decode::{decode, Call, Notified, Op};
use super::watch::{watch, Watcher};
use super::{drop_own_capabilities, guard, metadata, Policy, Reply, HANDLER_STACK_BYTES};
use crate::sys::{self, errno, Readiness};

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): the handler runs on the waiting caller's CPU.
const NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

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
    // SAFETY: `channel` is the caller's socket, `listener` ours.
    let sent = unsafe { sys::send_fds(channel, &[0], &[listener]) };
    // SAFETY: the listener is ours; the handler got its copy.
    unsafe { libc::close(listener) };
    sent
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
            if r >= 0 || errno() != libc::EINTR {
                break;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    })
}

/// A socket pair for one exec's listener: (Node's end, the children's end), both close-on-exec.
pub(in crate::exec) fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    crate::sys::seqpacket_pair()
}

/// Starts the handler thread of one exec: it waits for the listener on `channel` (none comes when
/// the shell failed before `execve`: the children's ends close), then answers until the listener
/// hangs up.
pub(in crate::exec) fn serve(
    policy: Arc<Policy>,
    channel: OwnedFd,
    guard: Option<guard::Session>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("pi-sandbox-notify".into())
        .stack_size(HANDLER_STACK_BYTES)
        .spawn(move || {
            drop_own_capabilities();
            if let Some(listener) = receive(&channel) {
                drop(channel);
                run(&policy, Arc::new(listener), guard);
            }
        })
        .map(drop)
}

/// The listener sent over `channel`, or `None` at end-of-file.
fn receive(channel: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    match sys::recv_fds(channel.as_fd(), &mut byte) {
        Ok(received) if received.len > 0 => received.fds.into_iter().next(),
        _ => None,
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
            match sys::wait_readable(listener.as_fd(), None, -1) {
                Readiness::Readable => {}
                Readiness::Interrupted | Readiness::TimedOut | Readiness::Stopped => continue,
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
                    if sync && sys::wait_readable(listener.as_fd(), None, 0) == Readiness::HungUp {
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
