//! The shell's process until `execve`: created by the supervisor (or a sandbox's init), it sets up
//! its stdio, cwd and session, applies a sandbox's confinement, and executes the shell. It shares
//! its creator's memory until `execve`, so this file makes raw system calls on memory prepared
//! before only: no allocation, no locks, nothing that may panic.

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::ptr;

#[cfg(target_os = "linux")]
use super::child::ChildSandbox;
use crate::sys::errno;

/// Off Linux there is no sandbox helper: no sandbox reaches a supervisor.
#[cfg(not(target_os = "linux"))]
pub(super) enum ChildSandbox {}

#[cfg(not(target_os = "linux"))]
impl ChildSandbox {
    pub(super) fn kept_fds(&self) -> [RawFd; 4] {
        match *self {}
    }
}

/// The shell's exit code when it fails between fork and `execve`, the shell
/// convention for "could not run". Node never sees it: the errno goes to the
/// supervisor first, which reports a spawn error.
const EXIT_CANNOT_EXEC: i32 = 127;
/// The classic signals (1 to 31) whose actions and mask are reset; Node sets
/// none of the real-time ones above them.
const CLASSIC_SIGNALS: std::ops::Range<libc::c_int> = 1..32;
/// Stack the shell's process runs on from `clone` to `execve` (Linux): a
/// few frames of raw system calls need far less.
pub(super) const SHELL_STACK_BYTES: usize = 64 << 10;

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
pub(super) unsafe fn start_shell(start: &ShellStart) -> libc::pid_t {
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
        if let Err(code) = unsafe { super::helper::confine::confine(plan, command.notify_channel) }
        {
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
