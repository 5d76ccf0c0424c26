//! Streaming shell execution whose whole process tree can be killed.
//!
//! `spawn` forks a small **supervisor** process that starts the shell and stays its parent:
//!
//! ```text
//! node ──fork──▶ supervisor (own session; Linux: child subreaper) ──fork+exec──▶ shell (own session)
//! ```
//!
//! - stdout and stderr of the shell are the write end of one pipe, so chunks keep their arrival order.
//! - Node talks to the supervisor over a control pipe: `K` kills the tree, `D` detaches (the command
//!   finished; background children are left running, as pi does, except in a sandbox, where the tree
//!   is killed as soon as the shell exits). End-of-file on that pipe means Node
//!   is gone (exit, crash, SIGKILL), and the supervisor kills the tree before exiting.
//! - On Linux the supervisor is a child subreaper, so every descendant whose parent dies is
//!   re-parented to it, even one that left the process group with `setsid`. Killing the tree is:
//!   SIGKILL the shell's group, then SIGKILL every child of the supervisor and reap, until it has no
//!   children left. Elsewhere only the shell's process group is killed.
//! - The supervisor reports the shell's wait status over a status pipe and exits once the tree is
//!   reaped, so end-of-file there means "nothing of the tree is left" after a kill.
//!
//! Node's side is `spawn` (pipes, fork, the output pump) and, on Linux, `procfs` (finding the
//! supervisor's children to kill). What runs in the forked children, between `fork` and
//! `exec`/`_exit`, keeps one rule: raw system calls on memory prepared before the fork, no
//! allocation, no locks, and it reads only plain data (`child`), `sys` and the setup's step codes
//! (`sandbox::setup`); the notification filter is installed by `sandbox::notify`. That is `supervisor`,
//! `shell` (the shell's process until `execve`) and, for a sandbox, `helper` (confinement, and
//! namespaces mode's builder and init), which Node's side of the sandbox (`sandbox`) never calls.
//!
//! On Windows, `windows` gives the same API on a Job object (the shell created suspended, assigned,
//! resumed; kill-on-close) and one overlapped named pipe; `cmdline` quotes its command line.
//!
//! ```
//! use pi_native_ops_core::exec::{self, ExecRequest};
//!
//! let request = ExecRequest {
//!     shell: Some("/bin/sh".into()),
//!     command: "echo hi; exit 3".into(),
//!     cwd: "/".into(),
//!     cwd_map: None,
//!     env: None,
//!     sandbox: None,
//!     events: None,
//! };
//! let mut execution = exec::spawn(&request)?;
//! let mut output = Vec::new();
//! let outcome = execution.pump(&mut |chunk| {
//!     output.extend(chunk);
//!     true
//! });
//! assert_eq!((output.as_slice(), outcome.exit_code), (&b"hi\n"[..], Some(3)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

#[cfg(target_os = "linux")]
mod child;
pub mod cmdline;
#[cfg(target_os = "linux")]
pub mod helper;
#[cfg(target_os = "linux")]
mod launch;
pub mod preflight;
#[cfg(target_os = "linux")]
mod procfs;
pub mod sandbox;
#[cfg(unix)]
mod shell;
#[cfg(unix)]
mod spawn;
#[cfg(unix)]
mod supervisor;
#[cfg(target_os = "linux")]
pub mod view;
#[cfg(windows)]
mod windows;

pub use preflight::ShellKind;

/// After the shell has exited, output that keeps arriving re-arms this grace; silence ends the exec.
pub const OUTPUT_IDLE_GRACE: Duration = Duration::from_millis(100);

/// Bytes the output pipe is made to hold on Linux (`F_SETPIPE_SZ`): a flood
/// then arrives in few large chunks, each costing one wake-up of the reader
/// and of Node. 1 MiB is the most an unprivileged process may ask for by
/// default (`/proc/sys/fs/pipe-max-size`).
const PIPE_BYTES: usize = 1 << 20;

/// Largest chunk handed to the consumer at once: on Linux what the pipe
/// holds; elsewhere pipes hold far less (64 KiB on macOS), and 256 KiB
/// gathers a few of their reads into one delivery.
pub const MAX_CHUNK: usize = if cfg!(target_os = "linux") {
    PIPE_BYTES
} else {
    256 << 10
};

/// The exit code of a shell killed by a signal is this plus the signal's
/// number (the POSIX shell convention: SIGKILL gives 137).
#[cfg(unix)]
pub(crate) const SIGNAL_EXIT_BASE: i32 = 128;

// The status pipe carries fixed-size messages from the supervisor: a tag in
// the first byte, an `i32` (native endian) in the last four.
#[cfg(unix)]
const MESSAGE_BYTES: usize = 8;
/// The shell is running; the value is its pid.
#[cfg(unix)]
const MSG_STARTED: u8 = b'S';
/// The shell could not be started; the value is the errno.
#[cfg(unix)]
const MSG_SPAWN_ERROR: u8 = b'E';
/// The shell exited; the value is its raw wait status.
#[cfg(unix)]
const MSG_EXITED: u8 = b'X';
/// After a kill: every process of the tree was reaped.
#[cfg(unix)]
const MSG_TREE_REAPED: u8 = b'R';
// The control pipe carries one-byte commands from Node.
/// Kill the whole tree.
#[cfg(unix)]
const CMD_KILL: u8 = b'K';
/// Leave without killing (the command finished; background jobs stay).
#[cfg(unix)]
const CMD_DETACH: u8 = b'D';

/// What to run: `[shell, "-c", command]` in `cwd`. `spawn` first runs the preflight
/// (`preflight::check`): which shell, and whether `cwd` exists.
pub struct ExecRequest {
    /// The custom shell (pi's `shellPath`); `None` or empty: found as pi finds one.
    pub shell: Option<String>,
    /// The command line handed to `-c`.
    pub command: String,
    /// As the agent gave it: mapped to the host through the sandbox's root, else `cwd_map`.
    pub cwd: String,
    /// `KEY=VALUE` entries forming the whole environment; `None` inherits this process's environment.
    pub env: Option<Vec<String>>,
    /// Where the agent's root is on the host, when the agent sees it elsewhere (the remote
    /// server's `--runtime-root`); ignored with a sandbox, whose root maps `cwd`.
    pub cwd_map: Option<crate::root::RuntimeMap>,
    /// Run the shell sandboxed (then `env` is ignored: the sandbox's clean environment applies,
    /// and `cwd` is in the sandbox's runtime form). `None`: exactly today's unsandboxed exec.
    /// A `Sandbox` converts (`.into()`); reuse one `Prepared` for many execs.
    pub sandbox: Option<sandbox::Prepared>,
    /// Where the policy's events of this command go (`onPolicyEvent`): a sandbox's allowed and
    /// refused connections through its network allow-list.
    pub events: Option<crate::policy::EventSink>,
}

/// How an exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The shell's exit code, `128 + signal` when a signal killed it, `None` when it was never learnt.
    pub exit_code: Option<i32>,
    /// Whether the tree was killed (abort, timeout, consumer failure or drop).
    pub killed: bool,
}

/// Exit code of a raw `waitpid` status, shell style.
#[cfg(unix)]
pub fn exit_code_of(wait_status: i32) -> Option<i32> {
    if libc::WIFEXITED(wait_status) {
        Some(libc::WEXITSTATUS(wait_status))
    } else if libc::WIFSIGNALED(wait_status) {
        Some(SIGNAL_EXIT_BASE + libc::WTERMSIG(wait_status))
    } else {
        None
    }
}

/// The first executable named `name` on a `:`-separated search path, as `execvp` would pick it.
#[cfg(unix)]
pub fn find_on_path(name: &str, search_path: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    /// Any of the owner, group and other execute bits.
    const EXECUTABLE: u32 = 0o111;
    search_path
        .split(':')
        .filter(|dir| !dir.is_empty())
        .find_map(|dir| {
            let candidate = std::path::Path::new(dir).join(name);
            let meta = std::fs::metadata(&candidate).ok()?;
            (meta.is_file() && meta.permissions().mode() & EXECUTABLE != 0)
                .then(|| candidate.to_string_lossy().into_owned())
        })
}

#[cfg(unix)]
pub use spawn::{spawn, Control, Execution};

/// As `spawn`, for pi's shell tool `kind`: PowerShell exists on Windows only, and is refused
/// here as pi refuses it (after nothing else is checked, as pi's `getPowerShellConfig` comes first).
#[cfg(unix)]
pub fn spawn_shell(request: &ExecRequest, kind: ShellKind) -> crate::Result<Execution> {
    match kind {
        ShellKind::Bash => spawn(request),
        ShellKind::PowerShell => Err(crate::Error::no_shell(
            preflight::POWERSHELL_ONLY_ON_WINDOWS,
        )),
    }
}

#[cfg(windows)]
pub use windows::{spawn, spawn_shell, Control, Execution};

#[cfg(not(any(unix, windows)))]
pub use unsupported::{spawn, spawn_shell, Control, Execution};

#[cfg(not(any(unix, windows)))]
mod unsupported {
    use super::*;

    /// Executions cannot exist on this platform.
    pub enum Execution {}
    /// Controls cannot exist on this platform.
    pub enum Control {}

    /// Fails with `ENOTSUP` (as Node names a call it cannot make here) after the preflight.
    pub fn spawn(request: &ExecRequest) -> crate::Result<Execution> {
        spawn_shell(request, ShellKind::Bash)
    }

    /// As `spawn`, for pi's shell tool `kind`.
    pub fn spawn_shell(request: &ExecRequest, kind: ShellKind) -> crate::Result<Execution> {
        let ready = super::preflight::check_kind(request, kind)?;
        Err(crate::Error::spawn(&ready.shell, libc::ENOTSUP))
    }

    impl Execution {
        /// Unreachable: no `Execution` exists.
        pub fn shell(&self) -> &str {
            match *self {}
        }
        /// Unreachable: no `Execution` exists.
        pub fn control(&self) -> std::sync::Arc<Control> {
            match *self {}
        }
        /// Unreachable: no `Execution` exists.
        pub fn pump(&mut self, _sink: &mut dyn FnMut(Vec<u8>) -> bool) -> Outcome {
            match *self {}
        }
    }

    impl Control {
        /// Unreachable: no `Control` exists.
        pub fn kill(&self) {
            match *self {}
        }
    }
}

#[cfg(all(test, unix))]
mod tests;
