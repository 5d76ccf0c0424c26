//! Node's side of an exec: the pipes, the fork of the supervisor, and the
//! pump that streams output until the command is over.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::preflight::{self, Ready};
use super::sandbox::{Plan, TempDir};
use super::shell::{Command, SHELL_STACK_BYTES};
use super::supervisor::{supervise, SupervisorFds};
use super::{
    exit_code_of, find_on_path, ExecRequest, Outcome, CMD_DETACH, CMD_KILL, MAX_CHUNK,
    MESSAGE_BYTES, MSG_EXITED, MSG_SPAWN_ERROR, MSG_STARTED, MSG_TREE_REAPED, OUTPUT_IDLE_GRACE,
};
use crate::error::{errno_of, Error};
use crate::sys::{pipe, read_full};

/// A read shorter than this waits (at most `BATCH_LINGER_MS`) for more
/// output to join it. A pipe's default capacity: a read that size means
/// output is flowing faster than it is read, and waiting gains nothing.
const BATCH_TARGET: usize = 64 << 10;
/// How long a short read waits for more, in milliseconds: unnoticeable for
/// an interactive command, and enough for a producer writing line by line
/// to fill a larger chunk.
const BATCH_LINGER_MS: i32 = 1;
/// Longest single `poll` wait while the idle grace runs, in milliseconds:
/// keeps the wait in `poll`'s `int`; the loop polls again until the deadline.
const POLL_MAX_MS: u128 = 10_000;
/// `PATH` for finding the shell when neither the request's environment nor
/// this process has one (the default `execvp` uses).
const DEFAULT_PATH: &str = "/usr/bin:/bin";

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} must not contain NUL bytes"),
    )
}

fn c_string(value: &str, what: &str) -> io::Result<CString> {
    CString::new(value).map_err(|_| invalid(what))
}

/// Everything the forked processes need, built before forking.
pub(super) struct Prepared {
    pub(super) shell: CString,
    pub(super) cwd: CString,
    /// What `argv` points into (and, sandboxed, what the helper is handed).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    argv_storage: Vec<CString>,
    pub(super) argv: Vec<*const libc::c_char>,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    envp_storage: Vec<CString>,
    pub(super) envp: Vec<*const libc::c_char>,
    /// Stack the shell's process runs on until `execve` (Linux `clone`).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) shell_stack: Vec<u8>,
    /// The sandbox, when the request asks for one.
    pub(super) sandbox: Option<Arc<Plan>>,
    /// A sandbox's private temp dir, removed once the exec is over (Landlock mode).
    sandbox_temp: Option<TempDir>,
    /// The socket pair the shell's process sends its notification listener over (Node's end,
    /// the children's end), when the sandbox has a notification handler.
    notify: Option<(OwnedFd, OwnedFd)>,
    /// The children's end of `notify` (-1: none).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) notify_channel: RawFd,
    /// The command's registration with its sandbox's proxy: its connections' events.
    #[cfg(target_os = "linux")]
    proxy: Option<super::sandbox::proxy::Registration>,
}

impl Prepared {
    fn new(request: &ExecRequest, ready: &Ready) -> io::Result<Self> {
        let (sandbox, sandbox_temp) = match &request.sandbox {
            Some(prepared) => {
                let (plan, temp) = prepared.plan()?;
                (Some(plan), temp)
            }
            None => (None, None),
        };
        let env = match &sandbox {
            Some(plan) => Some(plan.env()),
            None => request.env.as_deref(),
        };
        let env_storage: Vec<CString> = match env {
            Some(entries) => entries
                .iter()
                .map(|entry| c_string(entry, "environment entries"))
                .collect::<io::Result<_>>()?,
            None => std::env::vars_os()
                .filter_map(|(key, value)| {
                    let mut entry = key.as_bytes().to_vec();
                    entry.push(b'=');
                    entry.extend_from_slice(value.as_bytes());
                    CString::new(entry).ok()
                })
                .collect(),
        };
        let shell = if ready.shell.contains('/') {
            ready.shell.clone()
        } else {
            let search_path = env_value(&env_storage, "PATH")
                .or_else(|| std::env::var("PATH").ok())
                .unwrap_or_else(|| DEFAULT_PATH.to_string());
            find_on_path(&ready.shell, &search_path)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?
        };
        let argv_storage = vec![
            c_string(&ready.shell, "the shell path")?,
            CString::new("-c").expect("static"),
            c_string(&request.command, "command")?,
        ];
        let argv = null_terminated(&argv_storage);
        let envp = null_terminated(&env_storage);
        #[cfg(target_os = "linux")]
        let notify = match sandbox.as_ref().and_then(|plan| plan.notify()) {
            Some(_) => Some(super::sandbox::notify::channel()?),
            None => None,
        };
        #[cfg(not(target_os = "linux"))]
        let notify: Option<(OwnedFd, OwnedFd)> = None;
        let notify_channel = notify.as_ref().map_or(-1, |(_, child)| child.as_raw_fd());
        #[cfg(target_os = "linux")]
        let proxy = sandbox
            .as_ref()
            .and_then(|plan| plan.proxy())
            .map(|proxy| proxy.register(&request.command, request.events.clone()));
        Ok(Prepared {
            shell: c_string(&shell, "the shell path")?,
            cwd: c_string(&ready.cwd, "cwd")?,
            argv_storage,
            argv,
            envp_storage: env_storage,
            envp,
            shell_stack: vec![0; SHELL_STACK_BYTES],
            sandbox,
            sandbox_temp,
            notify,
            notify_channel,
            #[cfg(target_os = "linux")]
            proxy,
        })
    }
}

fn env_value(entries: &[CString], key: &str) -> Option<String> {
    entries.iter().find_map(|entry| {
        let bytes = entry.as_bytes();
        let rest = bytes.strip_prefix(key.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(rest).into_owned())
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// Reads one supervisor message: (tag, value). `None` on end-of-file.
fn read_message(fd: &OwnedFd) -> Option<(u8, i32)> {
    let mut message = [0u8; MESSAGE_BYTES];
    if read_full(fd.as_fd(), &mut message).ok()? < message.len() {
        return None;
    }
    let value = i32::from_ne_bytes([message[4], message[5], message[6], message[7]]);
    Some((message[0], value))
}

/// Node's side of the control pipe. Dropping it without `detach` kills the tree.
pub struct Control {
    fd: Mutex<Option<OwnedFd>>,
    killed: AtomicBool,
}

impl Control {
    /// Kill the whole tree (idempotent; a no-op once the exec has finished).
    pub fn kill(&self) {
        if self.killed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(guard) = self.fd.lock() {
            if let Some(fd) = guard.as_ref() {
                send_command(fd.as_raw_fd(), CMD_KILL);
            }
        }
    }

    fn killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// Let the supervisor go without killing anything.
    fn detach(&self) {
        if let Ok(mut guard) = self.fd.lock() {
            if let Some(fd) = guard.take() {
                if !self.killed() {
                    send_command(fd.as_raw_fd(), CMD_DETACH);
                }
            }
        }
    }
}

fn send_command(fd: RawFd, command: u8) {
    // A failed write means the supervisor is gone already; nothing is left to kill.
    // SAFETY: writes one byte from a valid buffer.
    unsafe { libc::write(fd, [command].as_ptr().cast(), 1) };
}

/// A running command.
pub struct Execution {
    output: OwnedFd,
    status: OwnedFd,
    control: Arc<Control>,
    supervisor: libc::pid_t,
    /// The shell as resolved (what a spawn error names).
    shell: String,
    /// A sandbox's private temp dir, removed after the supervisor is reaped (fields drop last).
    _sandbox_temp: Option<TempDir>,
    /// Reports the command's connections until the tree is reaped.
    #[cfg(target_os = "linux")]
    _proxy: Option<super::sandbox::proxy::Registration>,
}

/// Starts `[shell, "-c", command]` under a supervisor, after the preflight (`preflight::check`:
/// pi's missing-shell and missing-cwd refusals). Fails before anything runs as Node's `spawn`
/// does (`spawn <shell> ENOENT`, `EACCES`; a directory that vanished since the preflight as
/// `ENOENT`), or with the sandbox's own error.
pub fn spawn(request: &ExecRequest) -> Result<Execution, Error> {
    let ready = preflight::check(request)?;
    start(request, &ready).map_err(|e| start_error(&ready.shell, e))
}

/// What a failure to start is to the caller: the sandbox's own error (carried inside the I/O
/// error by the sandbox's setup), else Node's `spawn <shell> <CODE>`.
fn start_error(shell: &str, e: io::Error) -> Error {
    let errno = errno_of(&e);
    match e.into_inner().map(|inner| inner.downcast::<Error>()) {
        Some(Ok(core)) => *core,
        _ => Error::spawn(shell, errno),
    }
}

/// An unsandboxed command's supervisor: a fork of this process (its shell runs with this
/// process's rights anyway).
fn fork_supervisor(
    prepared: &Prepared,
    control: &OwnedFd,
    status: &OwnedFd,
    output: &OwnedFd,
) -> io::Result<libc::pid_t> {
    // SAFETY: the child only runs `supervise`, which never returns and sticks to raw system
    // calls on memory prepared before.
    let supervisor = unsafe { libc::fork() };
    if supervisor < 0 {
        return Err(last_error());
    }
    if supervisor == 0 {
        let fds = SupervisorFds {
            control: control.as_raw_fd(),
            status: status.as_raw_fd(),
            output: output.as_raw_fd(),
        };
        let command = Command {
            shell: &prepared.shell,
            cwd: &prepared.cwd,
            argv: &prepared.argv,
            envp: &prepared.envp,
            shell_stack: &prepared.shell_stack,
            init_stack: &[],
            sandbox: None,
            notify_channel: -1,
        };
        // SAFETY: see above.
        unsafe { supervise(&command, fds) }
    }
    Ok(supervisor)
}

/// A sandboxed command's supervisor: the sandbox helper, handed the command and its sandbox as
/// plain data, the three `pipes` (status, control, output: the helper's `STATUS_FD`,
/// `CONTROL_FD`, `OUTPUT_FD`) and the sandbox's descriptors.
#[cfg(target_os = "linux")]
fn launch_supervisor(
    prepared: &Prepared,
    plan: &Plan,
    pipes: [BorrowedFd<'_>; 3],
) -> io::Result<libc::pid_t> {
    use super::child::{ChildPlan, Role, FIRST_FD};
    let mut handed: Vec<BorrowedFd<'_>> = pipes.to_vec();
    let mut hand = |fd: RawFd| -> RawFd {
        if fd < 0 {
            return -1;
        }
        // SAFETY: `fd` is one of the plan's or `prepared`'s descriptors, open for this call.
        handed.push(unsafe { BorrowedFd::borrow_raw(fd) });
        FIRST_FD + handed.len() as RawFd - 1
    };
    let sandbox = plan.child_sandbox(prepared.notify_channel, &mut hand);
    let child = ChildPlan {
        shell: prepared.shell.clone(),
        cwd: prepared.cwd.clone(),
        argv: prepared.argv_storage.clone(),
        envp: prepared.envp_storage.clone(),
        sandbox,
    };
    super::launch::launch(Role::Supervisor, &child.encode(), &handed)
}

fn start(request: &ExecRequest, ready: &Ready) -> io::Result<Execution> {
    let mut prepared = Prepared::new(request, ready)?;
    let sandbox_temp = prepared.sandbox_temp.take();
    let (output_read, output_write) = pipe()?;
    let (status_read, status_write) = pipe()?;
    let (control_read, control_write) = pipe()?;
    #[cfg(target_os = "linux")]
    // A larger pipe means fewer, larger reads; a failure only costs throughput.
    // SAFETY: plain fcntl on a descriptor we own.
    unsafe {
        libc::fcntl(
            output_write.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            super::PIPE_BYTES as libc::c_int,
        );
    }

    let supervisor = match &prepared.sandbox {
        // A sandboxed command's supervisor is the sandbox helper: nothing of Node's goes with it.
        #[cfg(target_os = "linux")]
        Some(plan) => launch_supervisor(
            &prepared,
            plan,
            [
                status_write.as_fd(),
                control_read.as_fd(),
                output_write.as_fd(),
            ],
        )?,
        _ => fork_supervisor(&prepared, &control_read, &status_write, &output_write)?,
    };
    drop((output_write, status_write, control_read));
    #[cfg(target_os = "linux")]
    if let Some(registration) = &prepared.proxy {
        registration.started(supervisor);
    }
    let notify = prepared.notify.take();
    let execution = Execution {
        output: output_read,
        status: status_read,
        control: Arc::new(Control {
            fd: Mutex::new(Some(control_write)),
            killed: AtomicBool::new(false),
        }),
        supervisor,
        shell: ready.shell.clone(),
        _sandbox_temp: sandbox_temp,
        #[cfg(target_os = "linux")]
        _proxy: prepared.proxy.take(),
    };
    #[cfg(target_os = "linux")]
    if let (Some((node_end, child_end)), Some(policy)) = (
        notify,
        prepared.sandbox.as_ref().and_then(|plan| plan.notify()),
    ) {
        drop(child_end);
        // Without its handler the shell would wait forever on its first notified call: a thread
        // that cannot start fails the spawn (dropping the execution kills the tree and reaps).
        let guard = request
            .sandbox
            .as_ref()
            .and_then(|sandbox| sandbox.guard_session(&request.command));
        super::sandbox::notify::serve(Arc::clone(policy), node_end, guard)?;
    }
    #[cfg(not(target_os = "linux"))]
    drop(notify);
    match read_message(&execution.status) {
        Some((MSG_STARTED, _)) => Ok(execution),
        Some((MSG_SPAWN_ERROR, errno)) => Err(prepared
            .sandbox
            .as_ref()
            .and_then(|plan| plan.setup_error(errno))
            .unwrap_or_else(|| io::Error::from_raw_os_error(errno))),
        _ => Err(io::Error::other(
            "the exec supervisor failed to start the shell",
        )),
    }
}

impl Execution {
    /// The shell as resolved by the preflight: what Node's `spawn <shell> <CODE>` names for a
    /// failure to follow the command (e.g. no thread to pump its output).
    pub fn shell(&self) -> &str {
        &self.shell
    }

    /// The handle that kills this execution from any thread.
    pub fn control(&self) -> Arc<Control> {
        Arc::clone(&self.control)
    }

    /// Streams output to `sink` until the exec is over, then returns how it ended. `sink` may
    /// block (that is the backpressure); returning `false` kills the tree and stops delivery.
    pub fn pump(&mut self, sink: &mut dyn FnMut(Vec<u8>) -> bool) -> Outcome {
        let control = Arc::clone(&self.control);
        self.pump_with(&mut |fd| read_chunk(fd.as_raw_fd()).map(|c| control.killed() || sink(c)))
    }

    /// As `pump`, for a consumer that takes the output from the pipe itself (e.g. `splice`s it
    /// on without reading it): `take` is called when the pipe is readable and answers `None` at
    /// end-of-file, else whether to go on (`false` kills the tree).
    pub fn pump_with(&mut self, take: &mut dyn FnMut(BorrowedFd<'_>) -> Option<bool>) -> Outcome {
        let mut exit_code = None;
        let mut shell_exited = false;
        let mut tree_reaped = false;
        let mut supervisor_gone = false;
        let mut output_open = true;
        // Once the shell has exited: settle when output has been idle until this instant.
        let mut idle_deadline = Instant::now();
        loop {
            let killed = self.control.killed();
            let done = if killed {
                tree_reaped || supervisor_gone
            } else {
                (shell_exited && (!output_open || Instant::now() >= idle_deadline))
                    || (supervisor_gone && !shell_exited) // died without reporting
            };
            if done {
                break;
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.output.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.status.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            if !output_open || killed {
                fds[0].fd = -1; // a killed tree's leftovers are not delivered
            }
            if supervisor_gone {
                fds[1].fd = -1;
            }
            let timeout_ms = if shell_exited && !killed {
                let left = idle_deadline.saturating_duration_since(Instant::now());
                // Rounded up: waking a fraction of a millisecond early would spin.
                left.as_millis().min(POLL_MAX_MS) as i32 + 1
            } else {
                -1
            };
            // SAFETY: `fds` is a valid array of two pollfd.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
            if ready < 0 {
                if last_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.control.kill();
                break;
            }
            if fds[1].revents != 0 {
                match read_message(&self.status) {
                    Some((MSG_EXITED, wait_status)) => {
                        exit_code = exit_code_of(wait_status);
                        shell_exited = true;
                        idle_deadline = Instant::now() + OUTPUT_IDLE_GRACE;
                    }
                    Some((MSG_TREE_REAPED, _)) => tree_reaped = true,
                    Some(_) => {}
                    None => supervisor_gone = true,
                }
            }
            if fds[0].revents != 0 {
                match take(self.output.as_fd()) {
                    Some(go_on) => {
                        if shell_exited {
                            idle_deadline = Instant::now() + OUTPUT_IDLE_GRACE;
                        }
                        if !go_on {
                            self.control.kill();
                        }
                    }
                    None => output_open = false,
                }
            }
        }
        let killed = self.control.killed();
        self.control.detach();
        Outcome { exit_code, killed }
    }
}

impl Drop for Execution {
    /// Reaps the supervisor. Unless `pump` finished (and detached), closing our control end
    /// first makes it kill the tree.
    fn drop(&mut self) {
        if let Ok(mut guard) = self.control.fd.lock() {
            guard.take();
        }
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child.
            let r = unsafe { libc::waitpid(self.supervisor, &mut status, 0) };
            if r >= 0 || last_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
    }
}

/// Reads what the pipe holds, up to `MAX_CHUNK`; `None` at end-of-file. A short read lingers up
/// to `BATCH_LINGER_MS` for more, so a producer writing small pieces costs few, larger deliveries.
fn read_chunk(fd: RawFd) -> Option<Vec<u8>> {
    let mut chunk: Vec<u8> = Vec::with_capacity(MAX_CHUNK);
    loop {
        let spare = MAX_CHUNK - chunk.len();
        // SAFETY: reads at most `spare` bytes into the vector's spare capacity.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().add(chunk.len()).cast(), spare) };
        if n < 0 && last_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return (!chunk.is_empty()).then_some(chunk);
        }
        // SAFETY: the kernel initialised `n` more bytes.
        unsafe { chunk.set_len(chunk.len() + n as usize) };
        if chunk.len() >= BATCH_TARGET {
            return Some(chunk);
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, BATCH_LINGER_MS) };
        if ready <= 0 || pfd.revents & libc::POLLIN == 0 {
            return Some(chunk);
        }
    }
}
