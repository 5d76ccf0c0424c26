//! What runs in the forked children: the supervisor, and the shell's process
//! until `execve`. They live in a copy of a multi-threaded process, so this
//! file makes raw system calls on memory prepared before the fork only: no
//! allocation, no locks, nothing that may panic.

use std::ffi::CStr;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use super::sandbox::Plan;
use super::{CMD_DETACH, MESSAGE_BYTES, MSG_EXITED, MSG_SPAWN_ERROR, MSG_STARTED, MSG_TREE_REAPED};
use crate::sys::{errno, read_full};

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
/// Descriptors closed one by one where `close_range` is missing: up to the
/// open-files limit, but at most this many (a huge limit would cost a system
/// call each), or `FD_SCAN_DEFAULT` when the limit is unknown.
const FD_SCAN_MAX: u64 = 65_536;
const FD_SCAN_DEFAULT: RawFd = 4096;
/// Bytes drained from the SIGCHLD self-pipe per read: any size works, it
/// only holds wake-up bytes.
const WAKE_DRAIN_BYTES: usize = 64;

/// What the forked children read: built before the fork (`spawn`) in memory that stays put and
/// unchanged until the supervisor exits.
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
    /// The sandbox, when the request asks for one.
    pub(super) sandbox: Option<&'a Plan>,
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
unsafe fn report(fd: RawFd, tag: u8, value: i32) {
    let mut message = [0u8; MESSAGE_BYTES];
    message[0] = tag;
    message[4..].copy_from_slice(&value.to_ne_bytes());
    libc::write(fd, message.as_ptr().cast(), message.len());
}

/// `pipe2(O_CLOEXEC)` where it exists; async-signal-safe.
pub(super) unsafe fn raw_cloexec_pipe(fds: &mut [RawFd; 2]) -> libc::c_int {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return -1;
        }
        libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(fds[1], libc::F_SETFD, libc::FD_CLOEXEC);
        0
    }
}

/// Every signal back to its default action and unblocked (Node ignores SIGPIPE, for one).
pub(super) unsafe fn reset_signals() {
    let mut action: libc::sigaction = std::mem::zeroed();
    action.sa_sigaction = libc::SIG_DFL;
    libc::sigemptyset(&mut action.sa_mask);
    for signal in CLASSIC_SIGNALS {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            libc::sigaction(signal, &action, ptr::null_mut());
        }
    }
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
}

/// Closes every descriptor above stderr except `keep` (sorted ascending; -1 entries are ignored).
/// A fork of a multi-threaded process holds every descriptor the parent had, other threads' pipes
/// included (close-on-exec does not help a child that never execs or has not yet): each forked
/// child of Node calls this first, or another spawn's end-of-file waits for it.
pub(super) unsafe fn close_all_except(keep: &[RawFd]) {
    let mut next = libc::STDERR_FILENO + 1;
    for &fd in keep.iter().chain(std::iter::once(&RawFd::MAX)) {
        if fd >= next {
            close_range(next, fd - 1);
            next = fd.saturating_add(1);
        }
    }
}

unsafe fn close_range(first: RawFd, last: RawFd) {
    if first > last {
        return;
    }
    #[cfg(target_os = "linux")]
    if libc::syscall(
        libc::SYS_close_range,
        first as libc::c_uint,
        last as libc::c_uint,
        0,
    ) == 0
    {
        return;
    }
    let mut limit: libc::rlimit = std::mem::zeroed();
    let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
        (limit.rlim_cur as u64).min(FD_SCAN_MAX) as RawFd
    } else {
        FD_SCAN_DEFAULT
    };
    let mut fd = first;
    while fd <= last && fd < max {
        libc::close(fd);
        fd += 1;
    }
}

/// The supervisor: starts the shell, reports its exit, and kills the tree on
/// Node's command or when Node is gone. Never returns.
pub(super) unsafe fn supervise(command: &Command, fds: SupervisorFds) -> ! {
    reset_signals();
    libc::signal(libc::SIGPIPE, libc::SIG_IGN); // a vanished Node must not kill us before cleanup
    libc::setsid(); // out of Node's group: a terminal's Ctrl-C is Node's business
    #[cfg(target_os = "linux")]
    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

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
    close_all_except(&keep);
    let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
    if devnull >= 0 {
        // Do not hold Node's stdio open while we wait.
        libc::dup2(devnull, libc::STDIN_FILENO);
        libc::dup2(devnull, libc::STDOUT_FILENO);
        libc::dup2(devnull, libc::STDERR_FILENO);
    }

    let mut wake = [-1; 2];
    let mut exec_error = [-1; 2];
    if raw_cloexec_pipe(&mut wake) != 0 || raw_cloexec_pipe(&mut exec_error) != 0 {
        report(fds.status, MSG_SPAWN_ERROR, errno());
        libc::_exit(EXIT_SUPERVISOR_FAILED);
    }
    libc::fcntl(wake[1], libc::F_SETFL, libc::O_NONBLOCK);
    libc::fcntl(wake[0], libc::F_SETFL, libc::O_NONBLOCK);
    CHILD_WAKE_FD.store(wake[1], Ordering::Relaxed);
    let mut action: libc::sigaction = std::mem::zeroed();
    action.sa_sigaction = on_child_signal as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
    libc::sigemptyset(&mut action.sa_mask);
    libc::sigaction(libc::SIGCHLD, &action, ptr::null_mut());

    let shell_start = ShellStart {
        command,
        supervisor: libc::getpid(),
        devnull,
        output: fds.output,
        exec_error: exec_error[1],
    };
    let shell = match command.sandbox {
        #[cfg(target_os = "linux")]
        Some(plan) if plan.namespaces().is_some() => {
            super::sandbox::start_in_namespaces(plan.namespaces().expect("checked"), &shell_start)
        }
        _ => start_shell(&shell_start),
    };
    // Read at once, and only on failure: a sandbox's init shares our memory, errno included.
    let spawn_errno = if shell < 0 { errno() } else { 0 };
    libc::close(fds.output);
    libc::close(exec_error[1]);
    if shell < 0 {
        report(fds.status, MSG_SPAWN_ERROR, spawn_errno);
        libc::_exit(EXIT_SUPERVISOR_FAILED);
    }
    // The shell's errno if it failed before `execve`; end-of-file (the pipe
    // closed on exec) when it started.
    let mut child_errno = [0u8; size_of::<i32>()];
    let exec_failed = read_full(BorrowedFd::borrow_raw(exec_error[0]), &mut child_errno)
        .is_ok_and(|n| n == child_errno.len());
    if exec_failed {
        let mut status = 0;
        libc::waitpid(shell, &mut status, 0);
        report(fds.status, MSG_SPAWN_ERROR, i32::from_ne_bytes(child_errno));
        libc::_exit(EXIT_SUPERVISOR_FAILED);
    }
    libc::close(exec_error[0]);
    report(fds.status, MSG_STARTED, shell);

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
        if libc::poll(poll_fds.as_mut_ptr(), 2, -1) < 0 {
            continue;
        }
        if poll_fds[1].revents != 0 {
            let mut sink = [0u8; WAKE_DRAIN_BYTES];
            while libc::read(wake[0], sink.as_mut_ptr().cast(), sink.len()) > 0 {}
            reap_finished(shell, &mut shell_reaped, fds.status);
            // In a sandbox everything the command started ends with it (namespaces mode: the PID
            // namespace dies with its init; Landlock mode has none, so the tree is killed here).
            if shell_reaped && command.sandbox.is_some() {
                kill_tree(shell, &mut shell_reaped, fds.status);
            }
        }
        if poll_fds[0].revents != 0 {
            let mut command = [0u8; 1];
            let n = libc::read(fds.control, command.as_mut_ptr().cast(), 1);
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n == 1 && command[0] == CMD_DETACH {
                libc::_exit(0);
            }
            // CMD_KILL, or end-of-file: Node is gone and takes the tree with it.
            kill_tree(shell, &mut shell_reaped, fds.status);
            report(fds.status, MSG_TREE_REAPED, 0);
            libc::_exit(0);
        }
    }
}

unsafe fn note_reaped(
    pid: libc::pid_t,
    status: i32,
    shell: libc::pid_t,
    shell_reaped: &mut bool,
    out: RawFd,
) {
    if pid == shell && !*shell_reaped {
        *shell_reaped = true;
        report(out, MSG_EXITED, status);
    }
}

unsafe fn reap_finished(shell: libc::pid_t, shell_reaped: &mut bool, out: RawFd) {
    loop {
        let mut status = 0;
        let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
        if pid <= 0 {
            return;
        }
        note_reaped(pid, status, shell, shell_reaped, out);
    }
}

/// SIGKILL the shell's group and (Linux) every process re-parented to us, reaping until no child
/// is left.
unsafe fn kill_tree(shell: libc::pid_t, shell_reaped: &mut bool, out: RawFd) {
    #[cfg(target_os = "macos")]
    // macOS signals group members one by one; stop them first so none runs on meanwhile.
    libc::kill(-shell, libc::SIGSTOP);
    libc::kill(-shell, libc::SIGKILL);
    loop {
        #[cfg(target_os = "linux")]
        super::procfs::kill_children();
        let mut status = 0;
        let pid = libc::waitpid(-1, &mut status, 0);
        if pid < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return; // ECHILD: nothing of the tree is left under us
        }
        note_reaped(pid, status, shell, shell_reaped, out);
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
#[cfg(target_os = "linux")]
pub(super) unsafe fn start_shell(start: &ShellStart) -> libc::pid_t {
    /// The ABI's stack alignment at a call (x86-64 and AArch64: 16 bytes).
    const STACK_ALIGN: usize = 16;
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `ShellStart` of our suspended parent.
        unsafe {
            let start = &*(arg as *const ShellStart);
            run_shell(start)
        }
    }
    let stack = start.command.shell_stack.as_ptr() as usize + start.command.shell_stack.len();
    let stack_top = (stack & !(STACK_ALIGN - 1)) as *mut libc::c_void;
    libc::clone(
        entry,
        stack_top,
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        start as *const ShellStart as *mut libc::c_void,
    )
}

#[cfg(not(target_os = "linux"))]
unsafe fn start_shell(start: &ShellStart) -> libc::pid_t {
    let pid = libc::fork();
    if pid == 0 {
        run_shell(start);
    }
    pid
}

unsafe fn run_shell(start: &ShellStart) -> ! {
    let ShellStart {
        command,
        supervisor,
        devnull,
        output,
        exec_error,
    } = *start;
    reset_signals();
    libc::setsid(); // the shell leads its own group: kill(-shell) reaches the whole job
    #[cfg(target_os = "linux")]
    {
        // A supervisor killed from outside takes the shell with it.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != supervisor {
            libc::_exit(EXIT_CANNOT_EXEC);
        }
    }
    let _ = supervisor;
    let fail = |exec_error: RawFd| -> ! {
        let code = errno().to_ne_bytes();
        libc::write(exec_error, code.as_ptr().cast(), code.len());
        libc::_exit(EXIT_CANNOT_EXEC)
    };
    if devnull < 0
        || libc::dup2(devnull, libc::STDIN_FILENO) < 0
        || libc::dup2(output, libc::STDOUT_FILENO) < 0
        || libc::dup2(output, libc::STDERR_FILENO) < 0
    {
        fail(exec_error);
    }
    if libc::chdir(command.cwd.as_ptr()) != 0 {
        fail(exec_error);
    }
    #[cfg(target_os = "linux")]
    if let Some(plan) = command.sandbox {
        if let Err(code) = super::sandbox::confine(plan, command.notify_channel) {
            let code = code.to_ne_bytes();
            libc::write(exec_error, code.as_ptr().cast(), code.len());
            libc::_exit(EXIT_CANNOT_EXEC);
        }
    }
    libc::execve(
        command.shell.as_ptr(),
        command.argv.as_ptr(),
        command.envp.as_ptr(),
    );
    fail(exec_error)
}
