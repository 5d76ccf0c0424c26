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
//!   finished; background children are left running, as pi does). End-of-file on that pipe means Node
//!   is gone (exit, crash, SIGKILL), and the supervisor kills the tree before exiting.
//! - On Linux the supervisor is a child subreaper, so every descendant whose parent dies is
//!   re-parented to it, even one that left the process group with `setsid`. Killing the tree is:
//!   SIGKILL the shell's group, then SIGKILL every child of the supervisor and reap, until it has no
//!   children left. Elsewhere only the shell's process group is killed.
//! - The supervisor reports the shell's wait status over a status pipe and exits once the tree is
//!   reaped, so end-of-file there means "nothing of the tree is left" after a kill.
//!
//! The code that runs between `fork` and `exec`/`_exit` lives in a copy of a multi-threaded process,
//! so it only makes raw system calls on memory prepared before the fork: no allocation, no locks.

#[cfg(unix)]
use std::ffi::CString;
use std::io;
use std::time::Duration;

/// After the shell has exited, output that keeps arriving re-arms this grace; silence ends the exec.
pub const OUTPUT_IDLE_GRACE: Duration = Duration::from_millis(100);

/// Largest chunk handed to the consumer at once. On Linux the pipe's size (set
/// in `spawn`), so a flood arrives in few large chunks (each costs a wake-up
/// of the reader and of Node: 1 GiB took 1.0 s in 1 MiB chunks, 1.3 s in
/// 256 KiB, 1.75 s in 64 KiB); elsewhere pipes hold far less.
pub const MAX_CHUNK: usize = if cfg!(target_os = "linux") {
    1024 * 1024
} else {
    256 * 1024
};

/// What to run: `[shell, "-c", command]` in `cwd`.
pub struct ExecRequest {
    pub shell: String,
    pub command: String,
    pub cwd: String,
    /// `KEY=VALUE` entries forming the whole environment; `None` inherits this process's environment.
    pub env: Option<Vec<String>>,
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
        Some(128 + libc::WTERMSIG(wait_status))
    } else {
        None
    }
}

#[cfg(unix)]
fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} must not contain NUL bytes"),
    )
}

#[cfg(unix)]
fn c_string(value: &str, what: &str) -> io::Result<CString> {
    CString::new(value).map_err(|_| invalid(what))
}

/// The first executable named `name` on a `:`-separated search path, as `execvp` would pick it.
#[cfg(unix)]
pub fn find_on_path(name: &str, search_path: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    search_path
        .split(':')
        .filter(|dir| !dir.is_empty())
        .find_map(|dir| {
            let candidate = std::path::Path::new(dir).join(name);
            let meta = std::fs::metadata(&candidate).ok()?;
            (meta.is_file() && meta.permissions().mode() & 0o111 != 0)
                .then(|| candidate.to_string_lossy().into_owned())
        })
}

#[cfg(unix)]
pub use unix::{spawn, Control, Execution};

#[cfg(not(unix))]
pub use unsupported::{spawn, Control, Execution};

#[cfg(not(unix))]
mod unsupported {
    use super::*;

    /// Executions cannot exist on this platform.
    pub enum Execution {}
    pub enum Control {}

    pub fn spawn(_request: &ExecRequest) -> io::Result<Execution> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "bash exec is not supported on this platform",
        ))
    }

    impl Execution {
        pub fn control(&self) -> std::sync::Arc<Control> {
            match *self {}
        }
        pub fn pump(&mut self, _sink: &mut dyn FnMut(Vec<u8>) -> bool) -> Outcome {
            match *self {}
        }
    }

    impl Control {
        pub fn kill(&self) {
            match *self {}
        }
    }
}

#[cfg(unix)]
mod unix {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::ptr;
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    const MSG_STARTED: u8 = b'S';
    const MSG_SPAWN_ERROR: u8 = b'E';
    const MSG_EXITED: u8 = b'X';
    const MSG_TREE_REAPED: u8 = b'R';
    const CMD_KILL: u8 = b'K';
    const CMD_DETACH: u8 = b'D';
    const SHELL_STACK_SIZE: usize = 64 * 1024;
    /// A read shorter than this waits (at most `BATCH_LINGER_MS`) for more output to join it.
    const BATCH_TARGET: usize = 64 * 1024;
    const BATCH_LINGER_MS: i32 = 1;

    /// Everything the forked processes need, built before forking.
    struct Prepared {
        shell: CString,
        cwd: CString,
        _argv_storage: Vec<CString>,
        argv: Vec<*const libc::c_char>,
        _envp_storage: Vec<CString>,
        envp: Vec<*const libc::c_char>,
        /// Stack the shell's process runs on until `execve` (Linux `clone`).
        #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
        shell_stack: Vec<u8>,
    }

    impl Prepared {
        fn new(request: &ExecRequest) -> io::Result<Self> {
            let env_storage: Vec<CString> = match &request.env {
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
            let shell = if request.shell.contains('/') {
                request.shell.clone()
            } else {
                let search_path = env_value(&env_storage, "PATH")
                    .or_else(|| std::env::var("PATH").ok())
                    .unwrap_or_else(|| "/usr/bin:/bin".to_string());
                find_on_path(&request.shell, &search_path)
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?
            };
            let argv_storage = vec![
                c_string(&request.shell, "the shell path")?,
                CString::new("-c").expect("static"),
                c_string(&request.command, "command")?,
            ];
            let argv = null_terminated(&argv_storage);
            let envp = null_terminated(&env_storage);
            Ok(Prepared {
                shell: c_string(&shell, "the shell path")?,
                cwd: c_string(&request.cwd, "cwd")?,
                _argv_storage: argv_storage,
                argv,
                _envp_storage: env_storage,
                envp,
                shell_stack: vec![0; SHELL_STACK_SIZE],
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

    /// A pipe whose ends close on exec: (read, write).
    fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` is a valid two-element buffer.
        if unsafe { raw_cloexec_pipe(&mut fds) } != 0 {
            return Err(last_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// `pipe2(O_CLOEXEC)` where it exists; async-signal-safe.
    unsafe fn raw_cloexec_pipe(fds: &mut [RawFd; 2]) -> libc::c_int {
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

    /// Reads one 8-byte supervisor message: (tag, value). `None` on end-of-file.
    fn read_message(fd: RawFd) -> Option<(u8, i32)> {
        let mut message = [0u8; 8];
        let mut filled = 0;
        while filled < message.len() {
            // SAFETY: writes at most the remaining bytes of `message`.
            let n = unsafe {
                libc::read(
                    fd,
                    message[filled..].as_mut_ptr().cast(),
                    message.len() - filled,
                )
            };
            if n == 0 {
                return None;
            }
            if n < 0 {
                if last_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return None;
            }
            filled += n as usize;
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
    }

    /// Starts `[shell, "-c", command]` under a supervisor. Fails like `spawn` does (ENOENT, EACCES, a
    /// missing cwd as ENOENT) before anything runs.
    pub fn spawn(request: &ExecRequest) -> io::Result<Execution> {
        let prepared = Prepared::new(request)?;
        let (output_read, output_write) = pipe()?;
        let (status_read, status_write) = pipe()?;
        let (control_read, control_write) = pipe()?;
        #[cfg(target_os = "linux")]
        // A larger pipe means fewer, larger reads; a failure only costs throughput.
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe {
            libc::fcntl(output_write.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
        }

        // SAFETY: the child only runs `supervise`, which never returns and sticks to raw system
        // calls on memory prepared above.
        let supervisor = unsafe { libc::fork() };
        if supervisor < 0 {
            return Err(last_error());
        }
        if supervisor == 0 {
            let fds = SupervisorFds {
                control: control_read.as_raw_fd(),
                status: status_write.as_raw_fd(),
                output: output_write.as_raw_fd(),
            };
            // SAFETY: see above.
            unsafe { supervise(&prepared, fds) }
        }
        drop((output_write, status_write, control_read));
        let execution = Execution {
            output: output_read,
            status: status_read,
            control: Arc::new(Control {
                fd: Mutex::new(Some(control_write)),
                killed: AtomicBool::new(false),
            }),
            supervisor,
        };
        match read_message(execution.status.as_raw_fd()) {
            Some((MSG_STARTED, _)) => Ok(execution),
            Some((MSG_SPAWN_ERROR, errno)) => Err(io::Error::from_raw_os_error(errno)),
            _ => Err(io::Error::other(
                "the exec supervisor failed to start the shell",
            )),
        }
    }

    impl Execution {
        /// The handle that kills this execution from any thread.
        pub fn control(&self) -> Arc<Control> {
            Arc::clone(&self.control)
        }

        /// Streams output to `sink` until the exec is over, then returns how it ended. `sink` may
        /// block (that is the backpressure); returning `false` kills the tree and stops delivery.
        pub fn pump(&mut self, sink: &mut dyn FnMut(Vec<u8>) -> bool) -> Outcome {
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
                    left.as_millis().min(10_000) as i32 + 1
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
                    match read_message(self.status.as_raw_fd()) {
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
                    match read_chunk(self.output.as_raw_fd()) {
                        Some(chunk) => {
                            if shell_exited {
                                idle_deadline = Instant::now() + OUTPUT_IDLE_GRACE;
                            }
                            if !self.control.killed() && !sink(chunk) {
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
    /// to `BATCH_LINGER` for more, so a producer writing small pieces costs few, larger deliveries.
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

    // ---- Everything below runs in forked children: raw system calls only. ----

    struct SupervisorFds {
        control: RawFd,
        status: RawFd,
        output: RawFd,
    }

    /// Write end of the supervisor's self-pipe, written by its SIGCHLD handler.
    static CHILD_WAKE_FD: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn on_child_signal(_: libc::c_int) {
        let fd = CHILD_WAKE_FD.load(Ordering::Relaxed);
        // SAFETY: write(2) is async-signal-safe; a full pipe already means "wake up".
        unsafe { libc::write(fd, [0u8].as_ptr().cast(), 1) };
    }

    unsafe fn report(fd: RawFd, tag: u8, value: i32) {
        let mut message = [0u8; 8];
        message[0] = tag;
        message[4..].copy_from_slice(&value.to_ne_bytes());
        libc::write(fd, message.as_ptr().cast(), message.len());
    }

    unsafe fn errno() -> i32 {
        *errno_location()
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    unsafe fn errno_location() -> *mut libc::c_int {
        libc::__errno_location()
    }

    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    unsafe fn errno_location() -> *mut libc::c_int {
        libc::__error()
    }

    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    )))]
    unsafe fn errno_location() -> *mut libc::c_int {
        libc::__errno()
    }

    /// Every signal back to its default action and unblocked (Node ignores SIGPIPE, for one).
    unsafe fn reset_signals() {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::sigaction(signal, &action, ptr::null_mut());
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
    }

    /// Closes every descriptor above 2 except `keep` (sorted ascending).
    unsafe fn close_all_except(keep: &[RawFd]) {
        let mut next = 3;
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
            (limit.rlim_cur as u64).min(65_536) as RawFd
        } else {
            4096
        };
        let mut fd = first;
        while fd <= last && fd < max {
            libc::close(fd);
            fd += 1;
        }
    }

    unsafe fn supervise(prepared: &Prepared, fds: SupervisorFds) -> ! {
        reset_signals();
        libc::signal(libc::SIGPIPE, libc::SIG_IGN); // a vanished Node must not kill us before cleanup
        libc::setsid(); // out of Node's group: a terminal's Ctrl-C is Node's business
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

        let mut keep = [fds.control, fds.status, fds.output];
        keep.sort_unstable();
        close_all_except(&keep);
        let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if devnull >= 0 {
            // Do not hold Node's stdio open while we wait.
            libc::dup2(devnull, 0);
            libc::dup2(devnull, 1);
            libc::dup2(devnull, 2);
        }

        let mut wake = [-1; 2];
        let mut exec_error = [-1; 2];
        if raw_cloexec_pipe(&mut wake) != 0 || raw_cloexec_pipe(&mut exec_error) != 0 {
            report(fds.status, MSG_SPAWN_ERROR, errno());
            libc::_exit(1);
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
            prepared,
            supervisor: libc::getpid(),
            devnull,
            output: fds.output,
            exec_error: exec_error[1],
        };
        let shell = start_shell(&shell_start);
        let spawn_errno = errno();
        libc::close(fds.output);
        libc::close(exec_error[1]);
        if shell < 0 {
            report(fds.status, MSG_SPAWN_ERROR, spawn_errno);
            libc::_exit(1);
        }
        let mut child_errno = [0u8; 4];
        if read_exact_raw(exec_error[0], &mut child_errno) {
            let mut status = 0;
            libc::waitpid(shell, &mut status, 0);
            report(fds.status, MSG_SPAWN_ERROR, i32::from_ne_bytes(child_errno));
            libc::_exit(1);
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
                let mut sink = [0u8; 64];
                while libc::read(wake[0], sink.as_mut_ptr().cast(), sink.len()) > 0 {}
                reap_finished(shell, &mut shell_reaped, fds.status);
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

    unsafe fn read_exact_raw(fd: RawFd, buf: &mut [u8]) -> bool {
        let mut filled = 0;
        while filled < buf.len() {
            let n = libc::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled);
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                return false;
            }
            filled += n as usize;
        }
        true
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
            kill_children();
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

    /// SIGKILLs every child of this (single-threaded) process.
    #[cfg(target_os = "linux")]
    unsafe fn kill_children() {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            kill_children_by_scan();
            return;
        }
        let mut buf = [0u8; 4096];
        let mut pid: libc::pid_t = 0;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            for &byte in &buf[..n as usize] {
                if byte.is_ascii_digit() {
                    pid = pid * 10 + (byte - b'0') as libc::pid_t;
                } else {
                    if pid > 0 {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    pid = 0;
                }
            }
        }
        if pid > 0 {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::close(fd);
    }

    /// Kernels without CONFIG_PROC_CHILDREN: find our children by the parent field of /proc/<pid>/stat.
    #[cfg(target_os = "linux")]
    unsafe fn kill_children_by_scan() {
        let me = libc::getpid();
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return;
        }
        let mut entries = [0u8; 8192];
        loop {
            let n = libc::syscall(
                libc::SYS_getdents64,
                dir,
                entries.as_mut_ptr(),
                entries.len(),
            );
            if n <= 0 {
                break;
            }
            let mut offset = 0usize;
            while offset < n as usize {
                // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name[]
                let record = &entries[offset..];
                let reclen = u16::from_ne_bytes([record[16], record[17]]) as usize;
                let name = &record[19..reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if let Some(pid) = parse_pid(name) {
                    if parent_of(pid) == Some(me) {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
                offset += reclen.max(1);
            }
        }
        libc::close(dir);
    }

    #[cfg(target_os = "linux")]
    fn parse_pid(digits: &[u8]) -> Option<libc::pid_t> {
        if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0, |acc, &d| acc * 10 + (d - b'0') as libc::pid_t),
        )
    }

    /// The parent pid from /proc/<pid>/stat: "pid (comm) state ppid ...", comm may hold ')'.
    #[cfg(target_os = "linux")]
    unsafe fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
        let mut path = *b"/proc/0000000000/stat\0";
        let mut digits = [0u8; 10];
        let mut len = 0;
        let mut rest = pid;
        loop {
            digits[len] = b'0' + (rest % 10) as u8;
            len += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let mut at = 6;
        for i in (0..len).rev() {
            path[at] = digits[i];
            at += 1;
        }
        path[at..at + 6].copy_from_slice(b"/stat\0");
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut stat = [0u8; 512];
        let n = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        if n <= 0 {
            return None;
        }
        let stat = &stat[..n as usize];
        let close_paren = stat.iter().rposition(|&b| b == b')')?;
        let mut fields = stat[close_paren + 1..]
            .split(|&b| b == b' ')
            .filter(|f| !f.is_empty());
        fields.next()?; // state
        parse_pid(fields.next()?)
    }

    /// What the shell's process needs between its creation and `execve`.
    struct ShellStart<'a> {
        prepared: &'a Prepared,
        supervisor: libc::pid_t,
        devnull: RawFd,
        output: RawFd,
        exec_error: RawFd,
    }

    /// Creates the shell's process. On Linux it shares our memory until `execve` (like `vfork`, on a
    /// stack of its own), so a big Node heap is not copied a second time; elsewhere plain `fork`.
    #[cfg(target_os = "linux")]
    unsafe fn start_shell(start: &ShellStart) -> libc::pid_t {
        extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
            // SAFETY: `arg` is the `ShellStart` of our suspended parent.
            unsafe {
                let start = &*(arg as *const ShellStart);
                run_shell(start)
            }
        }
        let stack = start.prepared.shell_stack.as_ptr() as usize + start.prepared.shell_stack.len();
        let stack_top = (stack & !15) as *mut libc::c_void;
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
            prepared,
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
                libc::_exit(127);
            }
        }
        let _ = supervisor;
        let fail = |exec_error: RawFd| -> ! {
            let code = errno().to_ne_bytes();
            libc::write(exec_error, code.as_ptr().cast(), code.len());
            libc::_exit(127)
        };
        if devnull < 0
            || libc::dup2(devnull, 0) < 0
            || libc::dup2(output, 1) < 0
            || libc::dup2(output, 2) < 0
        {
            fail(exec_error);
        }
        if libc::chdir(prepared.cwd.as_ptr()) != 0 {
            fail(exec_error);
        }
        libc::execve(
            prepared.shell.as_ptr(),
            prepared.argv.as_ptr(),
            prepared.envp.as_ptr(),
        );
        fail(exec_error)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn request(command: &str) -> ExecRequest {
            ExecRequest {
                shell: "/bin/sh".into(),
                command: command.into(),
                cwd: "/".into(),
                env: Some(vec!["PATH=/usr/bin:/bin".into()]),
            }
        }

        fn run(command: &str) -> (Vec<u8>, Outcome) {
            let mut execution = spawn(&request(command)).expect("spawn");
            let mut output = Vec::new();
            let outcome = execution.pump(&mut |chunk| {
                output.extend_from_slice(&chunk);
                true
            });
            (output, outcome)
        }

        fn alive(pid: libc::pid_t) -> bool {
            // Zombies count as gone: read the state letter from /proc where available.
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Ok(stat) => !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z'),
                Err(_) => unsafe { libc::kill(pid, 0) == 0 },
            }
        }

        #[test]
        fn streams_stdout_then_stderr_in_order() {
            let (output, outcome) = run("echo out; echo err >&2; exit 3");
            assert_eq!(output, b"out\nerr\n");
            assert_eq!(
                outcome,
                Outcome {
                    exit_code: Some(3),
                    killed: false
                }
            );
        }

        #[test]
        fn signal_death_is_128_plus_signal() {
            let (_, outcome) = run("kill -9 $$");
            assert_eq!(outcome.exit_code, Some(137));
        }

        #[test]
        fn environment_is_exactly_the_given_one() {
            let (output, _) = run("echo \"[$PATH][$HOME]\"");
            assert_eq!(output, b"[/usr/bin:/bin][]\n");
        }

        #[test]
        fn missing_cwd_and_shell_fail_at_spawn() {
            let mut bad_cwd = request("true");
            bad_cwd.cwd = "/definitely/not/here".into();
            assert_eq!(
                spawn(&bad_cwd).err().unwrap().raw_os_error(),
                Some(libc::ENOENT)
            );
            let mut bad_shell = request("true");
            bad_shell.shell = "/no/such/shell".into();
            assert_eq!(
                spawn(&bad_shell).err().unwrap().raw_os_error(),
                Some(libc::ENOENT)
            );
            let mut nul = request("a\0b");
            nul.command = "a\0b".into();
            assert_eq!(
                spawn(&nul).err().unwrap().kind(),
                io::ErrorKind::InvalidInput
            );
        }

        #[test]
        fn background_holder_does_not_block_settling() {
            let started = Instant::now();
            let (output, outcome) = run("echo hi; sleep 5 & echo $! ");
            assert!(started.elapsed() < Duration::from_secs(2));
            assert_eq!(outcome.exit_code, Some(0));
            let text = String::from_utf8(output).unwrap();
            let pid: libc::pid_t = text.lines().nth(1).unwrap().trim().parse().unwrap();
            assert!(alive(pid), "background child is left running");
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }

        #[test]
        fn kill_reaches_setsid_descendants() {
            let mut execution = spawn(&request(
                "setsid sh -c 'trap \"\" TERM; sleep 30' & echo $!; wait",
            ))
            .expect("spawn");
            let control = execution.control();
            let mut pids = Vec::new();
            let outcome = execution.pump(&mut |chunk| {
                pids.extend(
                    String::from_utf8_lossy(&chunk)
                        .split_whitespace()
                        .filter_map(|p| p.parse::<libc::pid_t>().ok()),
                );
                control.kill();
                true
            });
            assert!(outcome.killed);
            assert!(!pids.is_empty());
            for pid in pids {
                assert!(!alive(pid), "pid {pid} survived the kill");
            }
        }

        #[test]
        fn refusing_sink_kills_a_flood() {
            let mut execution = spawn(&request("yes")).expect("spawn");
            let mut calls = 0;
            let outcome = execution.pump(&mut |_| {
                calls += 1;
                calls < 3
            });
            assert!(outcome.killed);
            assert_eq!(calls, 3);
        }

        #[test]
        fn exit_codes_follow_the_shell_convention() {
            assert_eq!(exit_code_of(7 << 8), Some(7));
            assert_eq!(exit_code_of(libc::SIGKILL), Some(137));
        }
    }
}
