//! Namespaces mode's processes, in the sandbox helper (never a copy of Node): the template's
//! builder (a child of the helper in the template's new namespaces) and each command's init (a
//! clone of the helper's supervisor, sharing its memory). The init and the shell's process it
//! clones share memory, so this file makes raw system calls on memory prepared before (the
//! decoded `TemplateScript` and `CommandScript`): no allocation, no locks, nothing that may panic.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::super::paths::open_no_symlinks;
use super::super::setup::{step_error, Step, EXIT_SETUP_FAILED};
use crate::exec::child::{Action, CommandScript, TemplateScript};
use crate::exec::supervisor::{start_shell, ShellStart};
use crate::sys::{close_all_except, errno, set_errno};

/// Where the setup tmpfs is mounted before the first `pivot_root`: a directory every Linux system
/// has. Once pivoted, the host's root (and its `/tmp`) is reached again under `/oldroot`.
const SETUP_BASE: &std::ffi::CStr = c"/tmp";
/// `mount_setattr`'s `struct mount_attr` and flags (Linux 5.12).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const AT_EMPTY_PATH: libc::c_uint = 0x1000;
/// `open_tree`'s and `move_mount`'s flags (Linux 5.2).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
/// The mount flags `statvfs` reports as `ST_*` with the same values as `MS_*`, which a remount of a
/// bind must repeat (the kernel refuses to clear a locked one).
const KEPT_MOUNT_FLAGS: libc::c_ulong = libc::MS_NOSUID
    | libc::MS_NODEV
    | libc::MS_NOEXEC
    | libc::MS_SYNCHRONOUS
    | libc::MS_MANDLOCK
    | libc::MS_NOATIME
    | libc::MS_NODIRATIME
    | libc::MS_RELATIME;

/// The script of the init the supervisor clones next: `clone` passes the init one pointer (the
/// supervisor's `ShellStart`), so the script goes beside it. Set by `start` in the supervisor,
/// which is single-threaded, before the `clone`; the init shares its memory (`CLONE_VM`).
static INIT_SCRIPT: AtomicPtr<CommandScript> = AtomicPtr::new(std::ptr::null_mut());

/// Writes `data` to the file at `path`; async-signal-safe.
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> bool {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `data` is valid for its length; `fd` is ours, closed right after.
    unsafe {
        let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
        libc::close(fd);
        ok
    }
}

/// The template's builder (a child of the helper in the template's new namespaces): writes its id
/// maps, builds the root and pivots into it, brings the loopback up, with the allow-list listens
/// for the proxy, and sends Node one report on `channel` (`send_report`): 0 with descriptors of
/// its namespaces (user, mount, and network unless `network`) and the proxy's listening sockets,
/// or the failed step with none. Then it exits: Node's descriptors keep the namespaces alive.
///
/// # Safety
///
/// Only in the child of the helper's `clone` with `script.flags`: single-threaded, in the new
/// namespaces, whose mounts are its own. `channel` is its end of the socket pair with Node.
pub(in crate::exec) unsafe fn builder(script: &TemplateScript, channel: RawFd) -> ! {
    let fail = |step: Step| -> ! {
        // SAFETY: `channel` is our end (our contract); `_exit` runs no handler.
        unsafe {
            send_report(channel, step_error(step, errno()), &[]);
            libc::_exit(EXIT_SETUP_FAILED)
        }
    };
    // The kernel makes a non-dumpable process's /proc files root's, so an unprivileged builder
    // could not open its own maps: dumpable only while it writes them, before any command exists.
    // SAFETY: plain integers, on this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    if script.deny_setgroups && !write_file(c"/proc/self/setgroups", b"deny") {
        fail(Step::Setgroups);
    }
    if !write_file(c"/proc/self/uid_map", script.uid_map.as_bytes()) {
        fail(Step::UidMap);
    }
    if !write_file(c"/proc/self/gid_map", script.gid_map.as_bytes()) {
        fail(Step::GidMap);
    }
    // SAFETY: plain integers, on this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // Our own namespaces, while the host's /proc still shows us.
    let open_ns = |name: &std::ffi::CStr| -> RawFd {
        // SAFETY: a NUL-terminated path; the descriptor is ours.
        unsafe { libc::open(name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
    };
    let user = open_ns(c"/proc/self/ns/user");
    let mnt = open_ns(c"/proc/self/ns/mnt");
    let net = if script.network {
        -1
    } else {
        open_ns(c"/proc/self/ns/net")
    };
    if user < 0 || mnt < 0 || (!script.network && net < 0) {
        fail(Step::Clone);
    }
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: static NUL-terminated strings and null pointers where `mount` takes none; the
    // mounts are our own namespace's (our contract).
    if unsafe {
        libc::mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            null.cast(),
        )
    } != 0
    {
        fail(Step::Private);
    }
    // SAFETY: as above.
    if unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            SETUP_BASE.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755".as_ptr().cast(),
        )
    } != 0
    {
        fail(Step::SetupTmpfs);
    }
    // SAFETY: static NUL-terminated paths, in the setup tmpfs of our own namespace.
    if unsafe {
        libc::chdir(SETUP_BASE.as_ptr()) != 0
            || libc::mkdir(c"newroot".as_ptr(), 0o755) != 0
            || libc::mkdir(c"oldroot".as_ptr(), 0o755) != 0
            || libc::mkdir(c"emptydir".as_ptr(), 0o000) != 0
    } {
        fail(Step::SetupTmpfs);
    }
    // SAFETY: as above.
    let empty = unsafe {
        libc::open(
            c"empty".as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o000,
        )
    };
    if empty < 0 {
        fail(Step::SetupTmpfs);
    }
    // SAFETY: ours, not used again.
    unsafe { libc::close(empty) };
    // SAFETY: static NUL-terminated paths; the root pivoted is our own namespace's.
    if unsafe {
        libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c"oldroot".as_ptr()) != 0
            || libc::chdir(c"/".as_ptr()) != 0
    } {
        fail(Step::PivotSetup);
    }
    // SAFETY: as for the setup tmpfs.
    if unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c"/newroot".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755".as_ptr().cast(),
        )
    } != 0
    {
        fail(Step::NewRoot);
    }
    for (index, action) in script.actions.iter().enumerate() {
        // SAFETY: the builder, in its own mount namespace (our contract).
        if !unsafe { perform(action) } {
            fail(Step::Action(index));
        }
    }
    // SAFETY: as for the first pivot.
    if unsafe {
        libc::chdir(c"/newroot".as_ptr()) != 0
            || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
    } {
        fail(Step::PivotNew);
    }
    // The host's root now lies over ours at "/": detach it (and everything under it).
    // SAFETY: static NUL-terminated paths, in our own namespace.
    if unsafe {
        libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 || libc::chdir(c"/".as_ptr()) != 0
    } {
        fail(Step::DetachHost);
    }
    if !script.network {
        // SAFETY: we are in the template's new network namespace (`network` is off).
        unsafe { loopback_up() };
    }
    let mut listeners = [-1; 2];
    if script.proxy_listen {
        // SAFETY: in the template's own network namespace (`proxy_listen` implies no network).
        match unsafe { listen_for_proxy() } {
            Some(fds) => listeners = fds,
            None => fail(Step::ProxyListen),
        }
    }
    let mut fds = [user, mnt, net, listeners[0], listeners[1]];
    let mut count = 0;
    for i in 0..fds.len() {
        if fds[i] >= 0 {
            fds[count] = fds[i];
            count += 1;
        }
    }
    // SAFETY: our end of the channel and our open descriptors; `_exit` runs no handler.
    unsafe {
        if !send_report(channel, 0, &fds[..count]) {
            libc::_exit(EXIT_SETUP_FAILED);
        }
        libc::_exit(0)
    }
}

/// The most descriptors a report carries: three namespaces and two listening sockets.
pub(super) const REPORT_MAX_FDS: usize = 5;

/// Sends the builder's report: `code` (0 or the encoded failed step) and `fds` (at most
/// `REPORT_MAX_FDS`) in one message. False when it could not be sent (Node is gone).
///
/// # Safety
///
/// `channel` is an open socket of this process and `fds` open descriptors of it.
unsafe fn send_report(channel: RawFd, code: i32, fds: &[RawFd]) -> bool {
    let count = fds.len().min(REPORT_MAX_FDS);
    // SAFETY: the caller's contract, passed on.
    unsafe { crate::sys::send_fds(channel, &code.to_ne_bytes(), &fds[..count]) }.is_ok()
}

/// The helper's template role: creates the builder in the template's new namespaces (`flags`),
/// waits for it and returns its exit code; a failed `clone` is reported on `channel` at once.
///
/// # Safety
///
/// Only in the helper (single-threaded), with `channel` the socket pair's end Node handed it.
pub(in crate::exec) unsafe fn template(script: &TemplateScript, channel: RawFd) -> i32 {
    // SAFETY: a fork of this single-threaded helper into new namespaces (raw `clone` for the
    // flags); the child runs `builder`, which never returns.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (script.flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    } as libc::pid_t;
    if pid < 0 {
        // SAFETY: our contract.
        unsafe { report_failure(channel, Step::Clone, errno()) };
        return EXIT_SETUP_FAILED;
    }
    if pid == 0 {
        // SAFETY: the child of the clone above, in the new namespaces (`builder`'s contract).
        unsafe { builder(script, channel) }
    }
    let mut status = 0;
    // SAFETY: reaps our own child into a valid `status`.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        EXIT_SETUP_FAILED
    }
}

/// Reports to Node that the template's `step` failed with `errno`.
///
/// # Safety
///
/// `channel` is an open socket of this process (the template's channel).
pub(in crate::exec) unsafe fn report_failure(channel: RawFd, step: Step, errno: i32) {
    // SAFETY: our contract.
    unsafe { send_report(channel, step_error(step, errno), &[]) };
}

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

/// Carries out one action of the script on this process's mount namespace; false with errno set
/// when it fails.
///
/// # Safety
///
/// Only in the template's builder or a command's init (`builder`'s and `init`'s contracts): a
/// single-threaded forked child whose mount namespace is its own, never Node's or the host's.
/// The actions were built before the fork.
unsafe fn perform(action: &Action) -> bool {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: every call below takes the action's NUL-terminated strings (built before the fork),
    // static strings or null pointers where it takes none, and descriptors it opens and closes
    // itself; the mounts it changes are the caller's own namespace's (our contract).
    unsafe {
        match action {
            Action::Mkdir(path) => {
                libc::mkdir(path.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST
            }
            Action::Bind {
                src,
                dst,
                dir,
                read_only,
            } => {
                if !*dir {
                    let fd = libc::open(
                        dst.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
                if libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    null.cast(),
                ) != 0
                {
                    return false;
                }
                !*read_only || make_read_only(dst)
            }
            Action::Verified {
                src,
                dev,
                ino,
                dst,
                dir,
                read_only,
                dst_checked,
            } => bind_verified(src, (*dev, *ino), dst, *dir, *read_only, *dst_checked),
            Action::Symlink { target, dst } => libc::symlink(target.as_ptr(), dst.as_ptr()) == 0,
            Action::Tmpfs { dst, data, flags } => {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    dst.as_ptr(),
                    c"tmpfs".as_ptr(),
                    *flags,
                    data.as_ptr().cast(),
                ) == 0
            }
            Action::Empty { path, dir } => {
                if *dir {
                    libc::mkdir(path.as_ptr(), 0o000) == 0
                } else {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o000,
                    );
                    fd >= 0 && libc::close(fd) == 0
                }
            }
            Action::Proc(dst) => {
                libc::mount(
                    c"proc".as_ptr(),
                    dst.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    null.cast(),
                ) == 0
            }
            Action::ReadOnly(dst) => remount_read_only(dst),
            Action::Move { src, dst, dir } => {
                let made = if *dir {
                    libc::mkdir(dst.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST
                } else {
                    let fd = libc::open(
                        dst.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    fd >= 0 && libc::close(fd) == 0
                };
                made && libc::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_MOVE, null.cast())
                    == 0
            }
        }
    }
}

/// `Action::Verified`: the bind of a configured path, only of the inode `id` (device, inode) found
/// at `src` without following symlinks, through a detached copy of its mount tree (`open_tree`,
/// Linux 5.2) made read-only before it is attached, so no path is looked up twice. Before 5.2,
/// `mount` binds the descriptors through `/proc/self/fd`.
///
/// # Safety
///
/// As `perform`.
unsafe fn bind_verified(
    src: &CString,
    id: (u64, u64),
    dst: &CString,
    dir: bool,
    read_only: bool,
    dst_checked: bool,
) -> bool {
    let source = open_no_symlinks(src);
    if source < 0 {
        return false;
    }
    // SAFETY: `stat` is a plain C struct: all-zero bytes are valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `source` is ours and `st` valid; closed here when it is not the file asked for.
    if unsafe { libc::fstat(source, &mut st) } != 0 || (st.st_dev, st.st_ino) != id {
        // SAFETY: ours, not used again.
        unsafe { libc::close(source) };
        set_errno(libc::ESTALE);
        return false;
    }
    let target = if dst_checked {
        open_no_symlinks(dst)
    } else {
        // SAFETY: `dst` is NUL-terminated; the descriptors opened here are ours (the first
        // closed at once, the second below).
        unsafe {
            if !dir {
                let fd = libc::open(
                    dst.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            libc::open(dst.as_ptr(), libc::O_PATH | libc::O_CLOEXEC)
        }
    };
    // SAFETY: our open descriptors, in the caller's own mount namespace (our contract).
    let bound = target >= 0 && unsafe { attach(source, target, dst, read_only) };
    let failed = errno();
    // SAFETY: ours, not used again.
    unsafe {
        libc::close(source);
        if target >= 0 {
            libc::close(target);
        }
    }
    set_errno(failed);
    bound
}

/// Binds what `source` is open on at what `target` is open on (`dst` names it), read-only if asked.
///
/// # Safety
///
/// As `perform`; `source` and `target` are open descriptors of this process.
unsafe fn attach(source: RawFd, target: RawFd, dst: &CString, read_only: bool) -> bool {
    // SAFETY: `source` is open (our contract); the empty path is static.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            source,
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_EMPTY_PATH | AT_RECURSIVE,
        )
    } as libc::c_int;
    if tree < 0 {
        // SAFETY: our contract, passed on.
        return errno() == libc::ENOSYS
            && unsafe { attach_by_fd_paths(source, target, dst, read_only) };
    }
    let mut set = true;
    if read_only {
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: `tree` is our detached mount; `attr` is valid for the size passed.
        set = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree,
                c"".as_ptr(),
                AT_EMPTY_PATH | AT_RECURSIVE,
                &attr as *const MountAttr,
                size_of::<MountAttr>(),
            )
        } == 0;
        // Before 5.12: the bind itself, once attached.
        if !set && errno() != libc::ENOSYS {
            let failed = errno();
            // SAFETY: ours, not used again.
            unsafe { libc::close(tree) };
            set_errno(failed);
            return false;
        }
    }
    // SAFETY: `tree` is ours and `target` open (our contract); the mount lands in the caller's own
    // namespace.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    } == 0;
    let failed = errno();
    // SAFETY: ours, not used again.
    unsafe { libc::close(tree) };
    set_errno(failed);
    // SAFETY: our contract, passed on.
    moved && (set || unsafe { remount_attached(dst) })
}

/// `attach` before Linux 5.2: `mount` of the host's `/proc/self/fd` names of the two descriptors
/// (both opened in this mount namespace, as a bind requires).
///
/// # Safety
///
/// As `attach`.
unsafe fn attach_by_fd_paths(source: RawFd, target: RawFd, dst: &CString, read_only: bool) -> bool {
    let (mut from, mut to) = ([0u8; FD_PATH_BYTES], [0u8; FD_PATH_BYTES]);
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: `fd_path` fills NUL-terminated paths in `from` and `to`, alive across the call; the
    // mount lands in the caller's own namespace (our contract).
    let bound = unsafe {
        libc::mount(
            fd_path(source, &mut from),
            fd_path(target, &mut to),
            null,
            libc::MS_BIND | libc::MS_REC,
            null.cast(),
        )
    } == 0;
    // SAFETY: our contract, passed on.
    bound && (!read_only || unsafe { remount_attached(dst) })
}

/// Makes the bind just attached at `dst` read-only: the mount found there again without following
/// symlinks, remounted through its `/proc/self/fd` name.
///
/// # Safety
///
/// As `perform`.
unsafe fn remount_attached(dst: &CString) -> bool {
    let fd = open_no_symlinks(dst);
    if fd < 0 {
        return false;
    }
    let mut name = [0u8; FD_PATH_BYTES];
    // SAFETY: `fd_path` returns `name`'s start, NUL-terminated, alive for this function.
    let path = unsafe { std::ffi::CStr::from_ptr(fd_path(fd, &mut name)) };
    // SAFETY: our contract, passed on.
    let done = unsafe { make_read_only(path) };
    let failed = errno();
    // SAFETY: ours, not used again.
    unsafe { libc::close(fd) };
    set_errno(failed);
    done
}

/// `/oldroot/proc/self/fd/` and the digits of a descriptor, and its NUL.
const FD_PATH_BYTES: usize = 48;

/// `/oldroot/proc/self/fd/<fd>` in `buf` (the host's proc, which shows this process too): a path
/// naming the file `fd` is open on, NUL-terminated, at `buf`'s start. No allocation.
fn fd_path(fd: RawFd, buf: &mut [u8; FD_PATH_BYTES]) -> *const libc::c_char {
    const PREFIX: &[u8] = b"/oldroot/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (fd.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr().cast()
}

/// Read-only, nosuid and nodev for the bind at `dst` and every mount under it (`mount_setattr`,
/// Linux 5.12); on older kernels only the bind itself.
///
/// # Safety
///
/// As `perform`.
unsafe fn make_read_only(dst: &std::ffi::CStr) -> bool {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `dst` is NUL-terminated and `attr` valid for the size passed; the mounts are the
    // caller's own namespace's (our contract).
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            dst.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    };
    // SAFETY: our contract, passed on.
    r == 0 || (errno() == libc::ENOSYS && unsafe { remount_read_only(dst) })
}

/// Remounts the bind at `dst` read-only, keeping the flags it has (a locked one cannot be cleared).
///
/// # Safety
///
/// As `perform`.
unsafe fn remount_read_only(dst: &std::ffi::CStr) -> bool {
    // SAFETY: `statvfs` is a plain C struct: all-zero bytes are valid.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `dst` is NUL-terminated, `fs` valid.
    let kept = if unsafe { libc::statvfs(dst.as_ptr(), &mut fs) } == 0 {
        fs.f_flag as libc::c_ulong & KEPT_MOUNT_FLAGS
    } else {
        0
    };
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: `dst` is NUL-terminated, null pointers where `mount` takes none; the mount is the
    // caller's own namespace's (our contract).
    unsafe {
        libc::mount(
            null,
            dst.as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | kept,
            null.cast(),
        ) == 0
    }
}

/// Brings the new network namespace's loopback up, so servers the shell starts on localhost work.
/// A failure only costs that.
///
/// # Safety
///
/// Only in the template's builder, in its new network namespace (never Node's or the host's,
/// whose loopback it would change).
unsafe fn loopback_up() {
    /// `struct ifreq` as `SIOCSIFFLAGS` reads it: the name, then the flags in the union (40 bytes).
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    // SAFETY: plain integers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return;
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: `req` has `struct ifreq`'s layout and size; `fd` is our socket, closed right after;
    // the interface is our own namespace's (our contract).
    unsafe {
        libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &mut req as *mut IfReq);
        libc::close(fd);
    }
}

/// Listens on `127.0.0.1:<port>` (a port the kernel picks) and, where IPv6 is on, `[::1]:<port>`
/// in this network namespace: the listening sockets (IPv6's -1 when it is off), or `None` with
/// errno set when the IPv4 one fails.
///
/// # Safety
///
/// Only in the template's builder, in the template's own network namespace.
unsafe fn listen_for_proxy() -> Option<[RawFd; 2]> {
    // SAFETY: plain integers and a `sockaddr_in` valid for the size passed; the sockets are ours.
    let v4 = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        if libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(fd, super::super::proxy::LISTEN_BACKLOG) != 0
        {
            return None;
        }
        fd
    };
    // SAFETY: as above; `getsockname` fills at most `len` bytes of `bound`.
    let port = unsafe {
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::getsockname(v4, (&mut bound as *mut libc::sockaddr_in).cast(), &mut len) != 0 {
            return None;
        }
        bound.sin_port
    };
    // SAFETY: as above, for IPv6 on the same port; a failure (IPv6 off) leaves IPv4 alone.
    let v6 = unsafe {
        let fd = libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let mut addr: libc::sockaddr_in6 = std::mem::zeroed();
        addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        addr.sin6_port = port;
        addr.sin6_addr.s6_addr[15] = 1;
        let one: libc::c_int = 1;
        if fd >= 0
            && libc::setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
            && libc::bind(
                fd,
                (&addr as *const libc::sockaddr_in6).cast(),
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ) == 0
            && libc::listen(fd, super::super::proxy::LISTEN_BACKLOG) == 0
        {
            fd
        } else {
            if fd >= 0 {
                libc::close(fd);
            }
            -1
        }
    };
    Some([v4, v6])
}
