//! Namespaces mode's per-command init, in the sandbox helper: a clone of the helper's supervisor
//! (sharing its memory) in the command's own mount and PID namespaces that adds the command's part
//! of the root and starts the shell. The init and the shell's process it clones share memory, so
//! this file makes raw system calls on memory prepared before (the decoded `CommandScript`): no
//! allocation, no locks, nothing that may panic.

use std::sync::atomic::{AtomicPtr, Ordering};

use super::builder::write_file;
use super::mount::perform;
use crate::exec::child::{Action, CommandScript};
use crate::exec::sandbox::setup::{step_error, Step, EXIT_SETUP_FAILED};
use crate::exec::shell::{start_shell, ShellStart};
use crate::sys::{close_all_except, errno, set_errno};

/// The script of the init the supervisor clones next: `clone` passes the init one pointer (the
/// supervisor's `ShellStart`), so the script goes beside it. Set by `start` in the supervisor,
/// which is single-threaded, before the `clone`; the init shares its memory (`CLONE_VM`).
static INIT_SCRIPT: AtomicPtr<CommandScript> = AtomicPtr::new(std::ptr::null_mut());

/// Joins the template and creates the init of the command's own namespaces; returns its pid (in
/// our namespace) or -1 with errno holding the encoded failed step. Runs in the supervisor, which
/// stays in the template's namespaces (it only waits and kills from there on).
///
/// The init shares the supervisor's memory (`CLONE_VM`) on a stack of its own: the helper's, which
/// holds nothing of Node's. The two processes never write the same memory but `errno`, which each
/// reads only right after a call of its own failed, while the other is blocked: the supervisor in
/// its read of the exec-error pipe until the shell has exec'd or the init failed, the init (after
/// that) in `waitpid`, which cannot fail while the shell lives.
///
/// # Safety
///
/// Only in the helper's supervisor (single-threaded), once per process: it joins the template's
/// namespaces for good. `start` and `script` stay valid and unchanged for as long as the
/// supervisor runs (they live in its never-returning `supervise`), and no one else uses
/// `start.command.init_stack`, which the init runs on.
pub(in crate::exec) unsafe fn start(script: &CommandScript, start: &ShellStart) -> libc::pid_t {
    /// The ABI's stack alignment at a call (x86-64 and AArch64: 16 bytes).
    const STACK_ALIGN: usize = 16;
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the supervisor's `ShellStart` and `INIT_SCRIPT` its script, both alive
        // while the supervisor runs (`start`'s contract), and we are the new, single-threaded
        // init in the command's own namespaces, as `init` needs.
        unsafe {
            let start = &*(arg as *const ShellStart);
            match INIT_SCRIPT.load(Ordering::Relaxed).as_ref() {
                Some(script) => init(script, start),
                None => libc::_exit(EXIT_SETUP_FAILED),
            }
        }
    }
    let [user, mnt, net] = script.template_fds;
    // The user namespace first: it gives the capabilities the other two need.
    // SAFETY: descriptors of the template's namespaces, open in the supervisor; joining them is
    // the supervisor's to do (our contract).
    let joined = user >= 0
        && unsafe {
            libc::setns(user, libc::CLONE_NEWUSER) == 0
                && libc::setns(mnt, libc::CLONE_NEWNS) == 0
                && (net < 0 || libc::setns(net, libc::CLONE_NEWNET) == 0)
        };
    if !joined {
        let code = if user < 0 { libc::EINVAL } else { errno() };
        set_errno(step_error(Step::JoinTemplate, code));
        return -1;
    }
    for fd in [user, mnt, net] {
        if fd >= 0 {
            // SAFETY: the supervisor's copies, not used again (the init needs none of them).
            unsafe { libc::close(fd) };
        }
    }
    INIT_SCRIPT.store(
        script as *const CommandScript as *mut CommandScript,
        Ordering::Relaxed,
    );
    let stack = start.command.init_stack.as_ptr() as usize + start.command.init_stack.len();
    let stack_top = (stack & !(STACK_ALIGN - 1)) as *mut libc::c_void;
    // SAFETY: `stack_top` is the aligned end of a stack no one else uses (our contract); `entry`
    // never returns into it (`init` exits); `start` outlives the init (our contract).
    let pid = unsafe {
        libc::clone(
            entry,
            stack_top,
            script.clone_flags | libc::CLONE_VM | libc::SIGCHLD,
            start as *const ShellStart as *mut libc::c_void,
        )
    };
    if pid < 0 {
        set_errno(step_error(Step::Clone, errno()));
        return -1;
    }
    pid
}

/// Reports `step` (with errno) on the exec-error pipe and exits.
///
/// # Safety
///
/// Only in the init (a process of its own, which may exit); `start.exec_error` is open.
unsafe fn fail(start: &ShellStart, step: Step) -> ! {
    let code = step_error(step, errno()).to_ne_bytes();
    // SAFETY: `code` is valid for its length; `_exit` runs no handler.
    unsafe {
        libc::write(start.exec_error, code.as_ptr().cast(), code.len());
        libc::_exit(EXIT_SETUP_FAILED)
    }
}

/// PID 1 of the sandbox: adds the command's part of the root, starts the shell, and exits with its
/// status.
///
/// # Safety
///
/// Only in the init cloned by `start`: single-threaded, in the command's own mount and PID
/// namespaces, sharing the supervisor's memory (so async-signal-safe calls only, and the memory
/// it writes is only its stack and errno). `script` and `start` are the supervisor's, valid while
/// it runs.
unsafe fn init(script: &CommandScript, start: &ShellStart) -> ! {
    // Non-dumpable (the helper's memory is already, this says so again where it matters most):
    // no process of the sandbox, root in its user namespace included, may open our /proc files
    // or trace us. Then nothing of the supervisor's: its pipe ends with Node stay out of the
    // sandbox's /proc/1/fd.
    let command = start.command;
    let sandbox_fds = command.sandbox.map_or([-1; 4], |s| s.kept_fds());
    let mut keep = [
        start.devnull,
        start.output,
        start.exec_error,
        command.notify_channel,
        sandbox_fds[0],
    ];
    keep.sort_unstable();
    // SAFETY: integers; then our own descriptor table (no CLONE_FILES), of which we use only `keep`
    // from here on.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        close_all_except(&keep);
        libc::setsid(); // its own group: the supervisor's kill(-pid) reaches it
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    }
    // The supervisor died before the line above: nobody reads the error pipe any more.
    let mut alive = libc::pollfd {
        fd: start.exec_error,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut alive, 1, 0) } < 0 || alive.revents & libc::POLLERR != 0 {
        // SAFETY: ends this process without running any handler.
        unsafe { libc::_exit(EXIT_SETUP_FAILED) };
    }
    let first = script.first_action as usize;
    for (index, action) in script.actions.iter().enumerate() {
        // SAFETY: the init, in the command's own mount namespace (our contract).
        if !unsafe { perform(action) } {
            // SAFETY: the init (our contract).
            unsafe { fail(start, Step::Action(first + index)) };
        }
        // The process bound: pid_max of our PID namespace where the kernel namespaces it
        // (6.14), written before /proc/sys turns read-only. Older kernels refuse the write:
        // then only RLIMIT_NPROC (not for root) limits.
        if matches!(action, Action::Proc(_)) {
            write_file(c"/proc/sys/kernel/pid_max", script.pid_max.as_bytes());
        }
    }
    if let Some(max) = script.nproc {
        let limit = libc::rlimit {
            rlim_cur: max as libc::rlim_t,
            rlim_max: max as libc::rlim_t,
        };
        // SAFETY: `limit` is a valid rlimit.
        unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit) };
    }
    // SAFETY: a static NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"pi-sandbox-init".as_ptr(), 0, 0, 0) };
    let shell_start = ShellStart {
        // SAFETY: a plain getter.
        supervisor: unsafe { libc::getpid() },
        ..*start
    };
    // SAFETY: we are a single-threaded child; `shell_start` lives in this frame, which never
    // returns, and the shell's stack is the supervisor's, which waits meanwhile (blocked in its
    // read of the exec-error pipe).
    let shell = unsafe { start_shell(&shell_start) };
    if shell < 0 {
        // SAFETY: the init (our contract).
        unsafe { fail(start, Step::StartShell) };
    }
    // The shell has exec'd (or reported its failure): let the supervisor's read end, and hold
    // nothing the shell has (the init keeps only its /dev/null stdio).
    // SAFETY: our copies, not used again.
    unsafe {
        for fd in keep {
            if fd > libc::STDERR_FILENO {
                libc::close(fd);
            }
        }
    }
    loop {
        let mut status = 0;
        // SAFETY: `status` is valid; reaps our own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == shell {
            // The shell's code, `128 + signal` for a signal: what the supervisor would report.
            let code = if libc::WIFSIGNALED(status) {
                crate::exec::SIGNAL_EXIT_BASE + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            };
            // SAFETY: ends this process without running any handler.
            unsafe { libc::_exit(code) };
        }
        if pid < 0 && errno() != libc::EINTR {
            // SAFETY: as above.
            unsafe { libc::_exit(EXIT_SETUP_FAILED) };
        }
    }
}
