//! The supervisor, and the shell's process until `execve`. An unsandboxed command's supervisor
//! is a fork of Node, a copy of a multi-threaded process; a sandboxed one's is the sandbox helper
//! (`helper`), whose init and shell's process share its memory. So this file makes raw system
//! calls on memory prepared before only: no allocation, no locks, nothing that may panic.

use std::ffi::CStr;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

#[cfg(target_os = "linux")]
use super::child::ChildSandbox;

/// Off Linux there is no sandbox helper: no sandbox reaches a supervisor.
#[cfg(not(target_os = "linux"))]
pub(super) enum ChildSandbox {}

#[cfg(not(target_os = "linux"))]
impl ChildSandbox {
    fn kept_fds(&self) -> [RawFd; 4] {
        match *self {}
    }
}
use super::{CMD_DETACH, MESSAGE_BYTES, MSG_EXITED, MSG_SPAWN_ERROR, MSG_STARTED, MSG_TREE_REAPED};
use crate::sys::{close_all_except, errno, raw_cloexec_pipe, read_full};

/// The shell's exit code when it fails between fork and `execve`, the shell
/// convention for "could not run". Node never sees it: the errno goes to the
/// supervisor first, which reports a spawn error.
const EXIT_CANNOT_EXEC: i32 = 127;
/// The supervisor's exit code when it could not start the shell; nobody
/// reads it (the status pipe carries the errno).
const EXIT_SUPERVISOR_FAILED: i32 = 1;
/// The classic signals (1 to 31) whose actions and mask are reset; Node sets
/// none of the real-time ones above them.
const CLASSIC_SIGNALS: std::ops::Range<libc::c_int> = 1..32;
/// Stack the shell's process runs on from `clone` to `execve` (Linux): a
/// few frames of raw system calls need far less.
pub(super) const SHELL_STACK_BYTES: usize = 64 << 10;
/// Bytes drained from the SIGCHLD self-pipe per read: any size works, it
/// only holds wake-up bytes.
const WAKE_DRAIN_BYTES: usize = 64;

/// What the supervisor and the shell's process read: built before (`spawn` before its fork, the
/// helper from its plan) in memory that stays put and unchanged until the supervisor exits.
#[derive(Clone, Copy)]
pub(super) struct Command<'a> {
    /// The shell's path, resolved.
    pub(super) shell: &'a CStr,
    pub(super) cwd: &'a CStr,
    /// `execve`'s arguments and environment, each ending with a null pointer.
    pub(super) argv: &'a [*const libc::c_char],
    pub(super) envp: &'a [*const libc::c_char],
    /// Stack the shell's process runs on until `execve` (Linux `clone`).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) shell_stack: &'a [u8],
    /// Stack a namespaces sandbox's init runs on (empty without one).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) init_stack: &'a [u8],
    /// The sandbox (only in the helper), when the request asks for one.
    pub(super) sandbox: Option<&'a ChildSandbox>,
    /// The socket the shell's process sends its notification listener over (-1: none).
    pub(super) notify_channel: RawFd,
}

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

/// Every signal back to its default action and unblocked (Node ignores SIGPIPE, for one).
///
/// # Safety
///
/// Only in a forked child of Node (the supervisor, the template's builder, a sandbox's init, the
/// shell's process): it replaces the process's signal handlers, which Node's own code relies on.
pub(super) unsafe fn reset_signals() {
    // SAFETY: `sigaction` and `sigset_t` are plain C structs, for which all-zero bytes are valid.
    let (mut action, mut empty): (libc::sigaction, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    action.sa_sigaction = libc::SIG_DFL;
    // SAFETY: the set is a valid, writable `sigset_t` of ours.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    for signal in CLASSIC_SIGNALS {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: `action` is initialised (SIG_DFL, an empty mask); the caller allows this
            // process's handlers to change.
            unsafe { libc::sigaction(signal, &action, ptr::null_mut()) };
        }
    }
    // SAFETY: `empty` is a valid, writable `sigset_t`, then read by `sigprocmask`.
    unsafe {
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
    }
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
            unsafe { super::sandbox::start_init(script, &shell_start) }
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

/// What the shell's process needs between its creation and `execve`.
#[derive(Clone, Copy)]
pub(super) struct ShellStart<'a> {
    pub(super) command: &'a Command<'a>,
    /// The pid the shell's parent must have (its own namespace's view).
    pub(super) supervisor: libc::pid_t,
    pub(super) devnull: RawFd,
    pub(super) output: RawFd,
    pub(super) exec_error: RawFd,
}

/// Creates the shell's process. On Linux it shares our memory until `execve` (like `vfork`, on a
/// stack of its own), so a big Node heap is not copied a second time; elsewhere plain `fork`.
///
/// # Safety
///
/// In a forked child of Node (the supervisor or a sandbox's init), single-threaded. `start` and
/// what it points to stay valid and unchanged until the shell has exec'd or exited (Linux: we are
/// suspended until then, `CLONE_VFORK`), and no one else uses `start.command.shell_stack`, which
/// the new process runs on.
#[cfg(target_os = "linux")]
pub(super) unsafe fn start_shell(start: &ShellStart) -> libc::pid_t {
    /// The ABI's stack alignment at a call (x86-64 and AArch64: 16 bytes).
    const STACK_ALIGN: usize = 16;
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `ShellStart` of our suspended parent (CLONE_VFORK), alive and
        // unchanged until we exec or exit; we are its single-threaded child, as `run_shell` needs.
        unsafe {
            let start = &*(arg as *const ShellStart);
            run_shell(start)
        }
    }
    let stack = start.command.shell_stack.as_ptr() as usize + start.command.shell_stack.len();
    let stack_top = (stack & !(STACK_ALIGN - 1)) as *mut libc::c_void;
    // SAFETY: `stack_top` is the aligned end of a stack no one else uses (our contract); `entry`
    // never returns into it (it execs or exits); CLONE_VFORK keeps `start` alive meanwhile.
    unsafe {
        libc::clone(
            entry,
            stack_top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            start as *const ShellStart as *mut libc::c_void,
        )
    }
}

/// `start_shell` where there is no `clone`: a plain `fork`.
///
/// # Safety
///
/// As on Linux: in a single-threaded forked child, `start` valid.
#[cfg(not(target_os = "linux"))]
unsafe fn start_shell(start: &ShellStart) -> libc::pid_t {
    // SAFETY: we are single-threaded (our contract): the child may run on.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: the new process, single-threaded, with its own copy of `start`.
        unsafe { run_shell(start) };
    }
    pid
}

/// The shell's process from its creation to `execve`: its stdio, cwd, session, a sandbox's
/// confinement, then the shell.
///
/// # Safety
///
/// Only in the new process of `start_shell`: single-threaded, async-signal-safe calls only, with
/// `start` valid until `execve` or `_exit`.
unsafe fn run_shell(start: &ShellStart) -> ! {
    let ShellStart {
        command,
        supervisor,
        devnull,
        output,
        exec_error,
    } = *start;
    // SAFETY: a new process (our contract) may reset the handlers it inherited; setsid takes
    // nothing.
    unsafe {
        reset_signals();
        libc::setsid(); // the shell leads its own group: kill(-shell) reaches the whole job
    }
    #[cfg(target_os = "linux")]
    {
        // A supervisor killed from outside takes the shell with it.
        // SAFETY: plain integers; `_exit` ends this process without running handlers.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != supervisor {
                libc::_exit(EXIT_CANNOT_EXEC);
            }
        }
    }
    let _ = supervisor;
    let fail = |exec_error: RawFd| -> ! {
        let code = errno().to_ne_bytes();
        // SAFETY: `code` is valid for its length; `_exit` ends this process without handlers.
        unsafe {
            libc::write(exec_error, code.as_ptr().cast(), code.len());
            libc::_exit(EXIT_CANNOT_EXEC)
        }
    };
    let stdio_set = devnull >= 0
        // SAFETY: descriptors this process holds (devnull, the output pipe) onto its stdio.
        && unsafe {
            libc::dup2(devnull, libc::STDIN_FILENO) >= 0
                && libc::dup2(output, libc::STDOUT_FILENO) >= 0
                && libc::dup2(output, libc::STDERR_FILENO) >= 0
        };
    if !stdio_set {
        fail(exec_error);
    }
    // SAFETY: `cwd` is a NUL-terminated string prepared before the fork.
    if unsafe { libc::chdir(command.cwd.as_ptr()) } != 0 {
        fail(exec_error);
    }
    #[cfg(target_os = "linux")]
    if let Some(plan) = command.sandbox {
        // SAFETY: the shell's own process, just before `execve` (`confine`'s contract).
        if let Err(code) = unsafe { super::sandbox::confine(plan, command.notify_channel) } {
            let code = code.to_ne_bytes();
            // SAFETY: as in `fail`.
            unsafe {
                libc::write(exec_error, code.as_ptr().cast(), code.len());
                libc::_exit(EXIT_CANNOT_EXEC);
            }
        }
    }
    // SAFETY: the path, and argv and envp (each ending with a null pointer), point to strings
    // prepared before the fork, valid until `execve` replaces this process.
    unsafe {
        libc::execve(
            command.shell.as_ptr(),
            command.argv.as_ptr(),
            command.envp.as_ptr(),
        )
    };
    fail(exec_error)
}
