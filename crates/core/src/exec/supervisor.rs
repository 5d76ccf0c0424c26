//! The supervisor: starts the shell (`shell`), reports its exit, kills the tree. An unsandboxed
//! command's supervisor is a fork of Node, a copy of a multi-threaded process; a sandboxed one's is
//! the sandbox helper (`helper`), whose init and shell's process share its memory. So this file
//! makes raw system calls on memory prepared before only: no allocation, no locks, nothing that
//! may panic.

use std::os::fd::{BorrowedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use super::shell::{reset_signals, start_shell, Command, ShellStart};
use super::{CMD_DETACH, MESSAGE_BYTES, MSG_EXITED, MSG_SPAWN_ERROR, MSG_STARTED, MSG_TREE_REAPED};
use crate::sys::{close_all_except, errno, raw_cloexec_pipe, read_full};

/// The supervisor's exit code when it could not start the shell; nobody
/// reads it (the status pipe carries the errno).
const EXIT_SUPERVISOR_FAILED: i32 = 1;
/// Bytes drained from the SIGCHLD self-pipe per read: any size works, it
/// only holds wake-up bytes.
const WAKE_DRAIN_BYTES: usize = 64;

/// The supervisor's ends of its three pipes with Node.
pub(super) struct SupervisorFds {
    pub(super) control: RawFd,
    pub(super) status: RawFd,
    pub(super) output: RawFd,
}

/// Write end of the supervisor's self-pipe, written by its SIGCHLD handler.
static CHILD_WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_child_signal(_: libc::c_int) {
    let fd = CHILD_WAKE_FD.load(Ordering::Relaxed);
    // SAFETY: write(2) is async-signal-safe; a full pipe already means "wake up".
    unsafe { libc::write(fd, [0u8].as_ptr().cast(), 1) };
}

/// Sends one message to Node over the status pipe: the tag, then `value`.
///
/// # Safety
///
/// `fd` is the supervisor's end of the status pipe (or -1), open in this process. Async-signal-safe.
unsafe fn report(fd: RawFd, tag: u8, value: i32) {
    let mut message = [0u8; MESSAGE_BYTES];
    message[0] = tag;
    message[4..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: `message` is valid for its length; a write to a closed status pipe only fails.
    unsafe { libc::write(fd, message.as_ptr().cast(), message.len()) };
}

/// The supervisor: starts the shell, reports its exit, and kills the tree on
/// Node's command or when Node is gone. Never returns.
///
/// # Safety
///
/// Only in the child of `fork` in `spawn`, right after it: the process is a copy of a
/// multi-threaded Node with one thread, so it may only make async-signal-safe calls (no
/// allocation, no locks, no panics), which this function and everything it calls keep to. `fds`
/// are open descriptors of the three pipes with Node; `command`'s memory was prepared before the
/// fork and stays unchanged (this function never returns, so it outlives every use).
pub(super) unsafe fn supervise(command: &Command, fds: SupervisorFds) -> ! {
    // SAFETY: a forked child (our contract) may replace the handlers it inherited.
    unsafe { reset_signals() };
    // SAFETY: plain calls on this process: SIG_IGN is a valid disposition, setsid and prctl take
    // integers.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN); // a vanished Node must not kill us before cleanup
        libc::setsid(); // out of Node's group: a terminal's Ctrl-C is Node's business
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }

    // A sandbox's descriptors (-1 when none): the Landlock ruleset the shell's process applies,
    // the template's namespaces we join.
    let [ruleset, user, mnt, net] = command.sandbox.map_or([-1; 4], |p| p.kept_fds());
    let mut keep = [
        fds.control,
        fds.status,
        fds.output,
        ruleset,
        user,
        mnt,
        net,
        command.notify_channel,
    ];
    keep.sort_unstable();
    // SAFETY: a forked child; everything it still uses is in `keep`.
    unsafe { close_all_except(&keep) };
    // SAFETY: a static NUL-terminated path.
    let devnull = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if devnull >= 0 {
        // Do not hold Node's stdio open while we wait.
        // SAFETY: `devnull` is ours; the stdio descriptors are replaced, and nothing in this
        // process uses Node's.
        unsafe {
            libc::dup2(devnull, libc::STDIN_FILENO);
            libc::dup2(devnull, libc::STDOUT_FILENO);
            libc::dup2(devnull, libc::STDERR_FILENO);
        }
    }

    let mut wake = [-1; 2];
    let mut exec_error = [-1; 2];
    // SAFETY: two valid buffers.
    if unsafe { raw_cloexec_pipe(&mut wake) != 0 || raw_cloexec_pipe(&mut exec_error) != 0 } {
        // SAFETY: `fds.status` is the status pipe (our contract); `_exit` skips every handler.
        unsafe {
            report(fds.status, MSG_SPAWN_ERROR, errno());
            libc::_exit(EXIT_SUPERVISOR_FAILED);
        }
    }
    // SAFETY: flags of the self-pipe we just made.
    unsafe {
        libc::fcntl(wake[1], libc::F_SETFL, libc::O_NONBLOCK);
        libc::fcntl(wake[0], libc::F_SETFL, libc::O_NONBLOCK);
    }
    CHILD_WAKE_FD.store(wake[1], Ordering::Relaxed);
    // SAFETY: `sigaction` is a plain C struct: all-zero bytes are valid.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_child_signal as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
    // SAFETY: `action` is initialised and its handler, `on_child_signal`, is async-signal-safe
    // (one atomic load and a `write`).
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGCHLD, &action, ptr::null_mut());
    }

    let shell_start = ShellStart {
        command,
        // SAFETY: a plain getter.
        supervisor: unsafe { libc::getpid() },
        devnull,
        output: fds.output,
        exec_error: exec_error[1],
    };
    #[cfg(target_os = "linux")]
    let init_script = command.sandbox.and_then(|s| s.namespaces.as_ref());
    #[cfg(not(target_os = "linux"))]
    let init_script: Option<()> = None;
    let shell = match init_script {
        #[cfg(target_os = "linux")]
        Some(script) => {
            // SAFETY: we are the helper's supervisor, and `shell_start` lives in this frame,
            // which never returns.
            unsafe { super::helper::init::start(script, &shell_start) }
        }
        // SAFETY: as above; the shell's stack in `command` is used by no one else.
        _ => unsafe { start_shell(&shell_start) },
    };
    // Read at once, and only on failure: a sandbox's init shares our memory, errno included.
    let spawn_errno = if shell < 0 { errno() } else { 0 };
    // SAFETY: the shell's process (or the init) holds its own copies of these ends.
    unsafe {
        libc::close(fds.output);
        libc::close(exec_error[1]);
    }
    if shell < 0 {
        // SAFETY: as for the pipes' failure above.
        unsafe {
            report(fds.status, MSG_SPAWN_ERROR, spawn_errno);
            libc::_exit(EXIT_SUPERVISOR_FAILED);
        }
    }
    // The shell's errno if it failed before `execve`; end-of-file (the pipe
    // closed on exec) when it started.
    let mut child_errno = [0u8; size_of::<i32>()];
    // SAFETY: `exec_error[0]` is our open read end, closed only below.
    let exec_error_read = unsafe { BorrowedFd::borrow_raw(exec_error[0]) };
    let exec_failed =
        read_full(exec_error_read, &mut child_errno).is_ok_and(|n| n == child_errno.len());
    if exec_failed {
        let mut status = 0;
        // SAFETY: reaps our own child into a valid `status`; then as for the failures above.
        unsafe {
            libc::waitpid(shell, &mut status, 0);
            report(fds.status, MSG_SPAWN_ERROR, i32::from_ne_bytes(child_errno));
            libc::_exit(EXIT_SUPERVISOR_FAILED);
        }
    }
    // SAFETY: our read end, not used again.
    unsafe { libc::close(exec_error[0]) };
    // SAFETY: the status pipe (our contract).
    unsafe { report(fds.status, MSG_STARTED, shell) };

    let mut shell_reaped = false;
    loop {
        let mut poll_fds = [
            libc::pollfd {
                fd: fds.control,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake[0],
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `poll_fds` is a valid array of two pollfd.
        if unsafe { libc::poll(poll_fds.as_mut_ptr(), 2, -1) } < 0 {
            continue;
        }
        if poll_fds[1].revents != 0 {
            let mut sink = [0u8; WAKE_DRAIN_BYTES];
            // SAFETY: reads at most `sink.len()` bytes into `sink` from our self-pipe.
            while unsafe { libc::read(wake[0], sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
            // SAFETY: the status pipe (our contract).
            unsafe { reap_finished(shell, &mut shell_reaped, fds.status) };
            // In a sandbox everything the command started ends with it (namespaces mode: the PID
            // namespace dies with its init; Landlock mode has none, so the tree is killed here).
            if shell_reaped && command.sandbox.is_some() {
                // SAFETY: we are the supervisor; the status pipe (our contract).
                unsafe { kill_tree(shell, &mut shell_reaped, fds.status) };
            }
        }
        if poll_fds[0].revents != 0 {
            let mut command = [0u8; 1];
            // SAFETY: reads at most one byte into `command` from the control pipe.
            let n = unsafe { libc::read(fds.control, command.as_mut_ptr().cast(), 1) };
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n == 1 && command[0] == CMD_DETACH {
                // SAFETY: ends this process without running any handler.
                unsafe { libc::_exit(0) };
            }
            // CMD_KILL, or end-of-file: Node is gone and takes the tree with it.
            // SAFETY: we are the supervisor; the status pipe (our contract); then as above.
            unsafe {
                kill_tree(shell, &mut shell_reaped, fds.status);
                report(fds.status, MSG_TREE_REAPED, 0);
                libc::_exit(0);
            }
        }
    }
}

/// Reports the shell's wait `status` if `pid` is the shell and it was not reported yet.
///
/// # Safety
///
/// `out` is the status pipe (as `report`).
unsafe fn note_reaped(
    pid: libc::pid_t,
    status: i32,
    shell: libc::pid_t,
    shell_reaped: &mut bool,
    out: RawFd,
) {
    if pid == shell && !*shell_reaped {
        *shell_reaped = true;
        // SAFETY: the caller's `out`.
        unsafe { report(out, MSG_EXITED, status) };
    }
}

/// Reaps every child that has exited, without waiting.
///
/// # Safety
///
/// In the supervisor (reaping its own children); `out` is the status pipe (as `report`).
unsafe fn reap_finished(shell: libc::pid_t, shell_reaped: &mut bool, out: RawFd) {
    loop {
        let mut status = 0;
        // SAFETY: `status` is valid; reaps our own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        // SAFETY: the caller's `out`.
        unsafe { note_reaped(pid, status, shell, shell_reaped, out) };
    }
}

/// SIGKILL the shell's group and (Linux) every process re-parented to us, reaping until no child
/// is left.
///
/// # Safety
///
/// In the supervisor, `shell` its shell's pid (the leader of the group killed); `out` is the
/// status pipe (as `report`).
unsafe fn kill_tree(shell: libc::pid_t, shell_reaped: &mut bool, out: RawFd) {
    #[cfg(target_os = "macos")]
    // macOS signals group members one by one; stop them first so none runs on meanwhile.
    // SAFETY: signals the shell's own group.
    unsafe {
        libc::kill(-shell, libc::SIGSTOP)
    };
    // SAFETY: signals the shell's own group.
    unsafe { libc::kill(-shell, libc::SIGKILL) };
    loop {
        #[cfg(target_os = "linux")]
        // SAFETY: we are the supervisor (a child subreaper): its children are the tree's.
        unsafe {
            super::procfs::kill_children()
        };
        let mut status = 0;
        // SAFETY: `status` is valid; reaps our own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return; // ECHILD: nothing of the tree is left under us
        }
        // SAFETY: the caller's `out`.
        unsafe { note_reaped(pid, status, shell, shell_reaped, out) };
    }
}
