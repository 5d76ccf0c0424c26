//! The sandbox helper: the processes that serve a sandboxed command (its supervisor, its init in
//! namespaces mode, the namespaces template's builder) run a freshly executed image, never a copy
//! of Node. The image is the platform's static `pi-native-ops-server` (the server's own `main`
//! dispatches here first, `main_if_helper`); Node starts it with an empty environment and only
//! the descriptors it needs (`exec::launch`), and hands it plain data (`exec::child`) on a
//! descriptor it reads at start. Its first act makes it non-dumpable: no process of a sandbox,
//! root in its user namespace included, can read or write it through `/proc` or trace it.
//!
//! ```text
//! node ─launch─▶ helper "supervisor" ─clone─▶ init (namespaces mode) ─clone─▶ shell ─exec─▶ bash
//! node ─launch─▶ helper "template"  ─clone(new namespaces)─▶ builder ─▶ namespaces' fds to Node
//! node ─launch─▶ helper "view" (new user and mount namespaces) ─▶ a root's view to Node
//! ```
//!
//! This module is the helper's side only: nothing of Node's side depends on it (`exec::child` holds
//! what both sides share, `exec::launch` Node's side). Its files: `confine` (the shell's process
//! confining itself before `execve`), and namespaces mode's `builder` (the template), `init` (each
//! command's PID 1), `mount` (the steps of their scripts) and `net` (loopback, the proxy's
//! listening sockets), and `view` (a workspace root's view for the file tools). Like `supervisor`
//! and `shell`, everything here runs between fork and `execve`: raw system calls on the decoded
//! plan, no allocation, no locks, nothing that may panic.

mod builder;
pub(super) mod confine;
pub(super) mod init;
mod mount;
mod net;
mod view;

use std::io::Read;
use std::os::fd::FromRawFd;

pub use super::launch::{set_path, use_current_exe};

use super::child::{
    decode_template, ChildPlan, Role, ARG0, CHANNEL_FD, CONTROL_FD, FIRST_FD, MAX_PLAN_BYTES,
    OUTPUT_FD, PLAN_FD, STATUS_FD, VIEW_ROOT_FD,
};

use super::sandbox::setup::{step_error, Step};
use super::shell::{reset_signals, Command, SHELL_STACK_BYTES};
use super::supervisor::{supervise, SupervisorFds};
use super::{MESSAGE_BYTES, MSG_SPAWN_ERROR};

/// The most descriptors any role is handed (the supervisor: three pipes, the notify channel, the
/// ruleset, three namespaces; and the image's own).
const MAX_HANDED: std::os::fd::RawFd = 10;
/// Stack of a namespaces sandbox's init: a few frames of raw system calls (its deepest, the
/// `clone` of the shell, uses a stack of its own), far less than this.
const INIT_STACK_BYTES: usize = 64 << 10;
/// The helper's exit code when its role or plan is not one it knows.
const EXIT_BAD_PLAN: i32 = 2;

/// When this process was started as a sandbox helper (`argv[0]` is `ARG0`), runs its role and
/// exits; otherwise returns at once. Call it first in `main` of the helper's image.
pub fn main_if_helper() {
    let mut args = std::env::args_os();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(ARG0.to_str().unwrap_or_default())) {
        return;
    }
    let role = args.next();
    let role = [Role::Supervisor, Role::Template, Role::View]
        .into_iter()
        .find(|r| {
            role.as_deref() == Some(std::ffi::OsStr::new(r.arg().to_str().unwrap_or_default()))
        });
    std::process::exit(run(role));
}

fn run(role: Option<Role>) -> i32 {
    // SAFETY: integers, on this process: non-dumpable before anything else.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // SAFETY: a fresh single-threaded process: default handlers, nothing blocked (the launcher
    // blocked every signal).
    unsafe { reset_signals() };
    // The handed descriptors stay out of what the helper executes (the shell gets its stdio only).
    for fd in FIRST_FD..FIRST_FD + MAX_HANDED {
        // SAFETY: flags of our own descriptors; a number not open only fails.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    let Some(role) = role else {
        return EXIT_BAD_PLAN;
    };
    let plan = read_plan();
    // SAFETY: /dev/null (stdout, placed by the launcher) where the plan was: stdin stays taken.
    unsafe { libc::dup2(libc::STDOUT_FILENO, PLAN_FD) };
    match role {
        Role::Supervisor => {
            let plan = plan.and_then(|bytes| ChildPlan::decode(&bytes).ok());
            match plan {
                Some(plan) => supervise_plan(&plan),
                None => {
                    let mut message = [0u8; MESSAGE_BYTES];
                    message[0] = MSG_SPAWN_ERROR;
                    message[4..]
                        .copy_from_slice(&step_error(Step::Helper, libc::EINVAL).to_ne_bytes());
                    // SAFETY: `message` is valid for its length; the status pipe Node handed us.
                    unsafe { libc::write(STATUS_FD, message.as_ptr().cast(), message.len()) };
                    EXIT_BAD_PLAN
                }
            }
        }
        Role::Template => match plan.and_then(|bytes| decode_template(&bytes).ok()) {
            // SAFETY: a fresh single-threaded process; `CHANNEL_FD` is the channel Node handed us.
            Some(script) => unsafe { builder::template(&script, CHANNEL_FD) },
            None => {
                // SAFETY: as above.
                unsafe { builder::report_failure(CHANNEL_FD, Step::Helper, libc::EINVAL) };
                EXIT_BAD_PLAN
            }
        },
        // SAFETY: a fresh single-threaded process; both descriptors are the ones Node handed us.
        Role::View => unsafe { view::view(CHANNEL_FD, VIEW_ROOT_FD) },
    }
}

/// The plan on `PLAN_FD`, at most `MAX_PLAN_BYTES`.
fn read_plan() -> Option<Vec<u8>> {
    // SAFETY: `PLAN_FD` is the plan Node placed there, ours alone; the `File` closes it.
    let file = unsafe { std::fs::File::from_raw_fd(PLAN_FD) };
    let mut bytes = Vec::new();
    file.take(MAX_PLAN_BYTES + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_PLAN_BYTES).then_some(bytes)
}

/// Runs the supervisor of `plan`'s command: what a fork of Node runs for an unsandboxed one.
fn supervise_plan(plan: &ChildPlan) -> ! {
    let pointers = |strings: &[std::ffi::CString]| -> Vec<*const libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (argv, envp) = (pointers(&plan.argv), pointers(&plan.envp));
    let shell_stack = vec![0u8; SHELL_STACK_BYTES];
    let init_stack = if plan.sandbox.namespaces.is_some() {
        vec![0u8; INIT_STACK_BYTES]
    } else {
        Vec::new()
    };
    let command = Command {
        shell: &plan.shell,
        cwd: &plan.cwd,
        argv: &argv,
        envp: &envp,
        shell_stack: &shell_stack,
        init_stack: &init_stack,
        sandbox: Some(&plan.sandbox),
        notify_channel: plan.sandbox.notify_channel,
    };
    let fds = SupervisorFds {
        control: CONTROL_FD,
        status: STATUS_FD,
        output: OUTPUT_FD,
    };
    // SAFETY: a single-threaded process (nothing of ours starts a thread), as `supervise` needs;
    // `command` lives in this frame, which never returns; the three pipes are Node's.
    unsafe { supervise(&command, fds) }
}
