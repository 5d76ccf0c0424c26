//! Namespaces mode's forked children: the template's builder (a fork of Node) and each command's
//! init (a clone of the supervisor). They run in a copy of a multi-threaded process, so this file
//! makes raw system calls on memory prepared before the fork only (`Script`): no allocation, no
//! locks, nothing that may panic.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicPtr, Ordering};

use super::super::paths::open_no_symlinks;
use super::super::setup::{step_error, Step, EXIT_SETUP_FAILED};
use crate::exec::supervisor::{reset_signals, start_shell, ShellStart};
use crate::sys::{errno, set_errno};

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

/// One step of building a root: the template's on paths under `/oldroot` (the host) and
/// `/newroot`, a command's on its final paths.
#[derive(Debug)]
pub(super) enum Action {
    /// `mkdir` (an existing directory is fine).
    Mkdir(CString),
    /// An empty file or directory with no permissions, a source of masks.
    Empty {
        path: CString,
        dir: bool,
    },
    /// Bind `src` (recursively) at `dst`, created as a directory or an empty file first.
    Bind {
        src: CString,
        dst: CString,
        dir: bool,
        read_only: bool,
    },
    /// Bind the host file `src` (a path under `/oldroot` with no symlink) at `dst` if it is still
    /// the inode (`dev`, `ino`) resolved when the sandbox was made, found again without following
    /// symlinks (else ESTALE); `dst` is opened so too when `dst_checked` (it lies in a bind a
    /// command may write), else created as a directory or an empty file first.
    Verified {
        src: CString,
        dev: u64,
        ino: u64,
        dst: CString,
        dir: bool,
        read_only: bool,
        dst_checked: bool,
    },
    Symlink {
        target: CString,
        dst: CString,
    },
    Tmpfs {
        dst: CString,
        data: CString,
        flags: libc::c_ulong,
    },
    /// A proc of the PID namespace of the process mounting it.
    Proc(CString),
    /// Make one of our own tmpfs mounts read-only (not recursive).
    ReadOnly(CString),
    /// Move the mount at `src` (with everything under it) to `dst`, created as a directory or an
    /// empty file first.
    Move {
        src: CString,
        dst: CString,
        dir: bool,
    },
}

/// Descriptors of the template's namespaces: holding them keeps the namespaces alive.
pub(super) struct Template {
    pub(super) user: OwnedFd,
    pub(super) mnt: OwnedFd,
    pub(super) net: Option<OwnedFd>,
}

/// What the forked children carry out, prepared before the forks (`NsPlan::new`) and never changed
/// after the template is built.
pub(super) struct Script {
    /// Each command's own namespaces, inside the template's user namespace.
    pub(super) clone_flags: libc::c_int,
    pub(super) deny_setgroups: bool,
    pub(super) uid_map: CString,
    pub(super) gid_map: CString,
    /// The template's root, built once.
    pub(super) template_actions: Vec<Action>,
    /// Each command's additions, on the template's finished root.
    pub(super) command_actions: Vec<Action>,
    pub(super) network: bool,
    /// Listen for the network proxy inside the template's network namespace and send the
    /// listening sockets to Node (`network_allow`).
    pub(super) proxy_listen: bool,
    /// The new PID namespace's `pid_max` (Linux 6.14 namespaces it): a bound for every caller.
    pub(super) pid_max: CString,
    /// RLIMIT_NPROC inside (the exact limit), when the kernel counts it per user namespace and
    /// the caller is not root (the kernel exempts root).
    pub(super) nproc: Option<libc::rlim_t>,
    /// Where this process's command line and initial environment lie in memory (`/proc/self/stat`'s
    /// arg_start, arg_end, env_start, env_end): the init, a copy of Node, blanks them, so the
    /// sandbox's `/proc/1/cmdline` shows none of pi's (and its environ holds no key even if the
    /// kernel's ptrace check, which guards it today, were passed).
    pub(super) argv_area: Option<(usize, usize)>,
    pub(super) env_area: Option<(usize, usize)>,
    /// The stack the init runs on (it shares the supervisor's memory).
    pub(super) init_stack: Vec<u8>,
    /// The template, once built (`NsPlan::build_template`).
    pub(super) template: Option<Template>,
}

impl Script {
    /// The descriptors of the template's user, mount and network namespaces (-1: none).
    pub(super) fn template_fds(&self) -> [RawFd; 3] {
        match &self.template {
            Some(t) => [
                t.user.as_raw_fd(),
                t.mnt.as_raw_fd(),
                t.net.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            ],
            None => [-1; 3],
        }
    }
}

/// The script of the init the supervisor clones next: `clone` passes the init one pointer (the
/// supervisor's `ShellStart`), so the script goes beside it. Set by `start` in the supervisor,
/// which is single-threaded, before the `clone`; the init shares its memory (`CLONE_VM`).
static INIT_SCRIPT: AtomicPtr<Script> = AtomicPtr::new(std::ptr::null_mut());

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

/// The template's builder (a fork of Node in the template's new namespaces): writes its id maps,
/// builds the root and pivots into it, brings the loopback up, with the allow-list sends the
/// proxy's listening sockets on `proxy` (`send_listeners`), reports 0 (or the failed step) on
/// `ready`, and waits for Node to have opened its namespaces (end-of-file on `release`).
///
/// # Safety
///
/// Only in the child of `NsPlan::build_template`'s `clone`, in the new user, mount and (without
/// network) network namespaces: a single-threaded copy of Node that may only make
/// async-signal-safe calls, and whose mounts are its own namespace's. `ready` and `release` are
/// its open ends of the two pipes with Node, `proxy` its end of the socket pair (-1 without the
/// allow-list); `script` was built before the fork.
pub(super) unsafe fn builder(script: &Script, ready: RawFd, release: RawFd, proxy: RawFd) -> ! {
    // Node's handlers would run in this copy of Node.
    // SAFETY: a forked child (our contract) may replace the handlers it inherited.
    unsafe { reset_signals() };
    // Only while Node waits for us; a dead Node also closes `release`.
    // SAFETY: plain integers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let fail = |step: Step| -> ! {
        let code = step_error(step, errno()).to_ne_bytes();
        // SAFETY: `code` is valid for its length; `ready` is our end (our contract); `_exit` runs
        // no handler.
        unsafe {
            libc::write(ready, code.as_ptr().cast(), code.len());
            libc::_exit(EXIT_SETUP_FAILED)
        }
    };
    // A non-dumpable process's /proc files are root's: its own maps, which it writes next, and the
    // namespaces its parent opens through /proc/PID/ns. The process that forked this one may be
    // non-dumpable (the server is), so this copy of it is made dumpable, as any forked child of a
    // dumpable parent is.
    // SAFETY: plain integers.
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
    for (index, action) in script.template_actions.iter().enumerate() {
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
    // SAFETY: in the template's own network namespace (`proxy_listen` implies no network);
    // `proxy` is our end of the channel to Node.
    if script.proxy_listen && !unsafe { send_listeners(proxy) } {
        fail(Step::ProxyListen);
    }
    let done = 0i32.to_ne_bytes();
    // SAFETY: `done` is valid for its length; `ready` is our end (our contract).
    unsafe { libc::write(ready, done.as_ptr().cast(), done.len()) };
    let mut byte = [0u8; 1];
    // SAFETY: reads at most one byte into `byte` from our end of `release`.
    while unsafe { libc::read(release, byte.as_mut_ptr().cast(), 1) } != 0 {
        if errno() != libc::EINTR {
            break;
        }
    }
    // SAFETY: ends this process without running any handler.
    unsafe { libc::_exit(0) }
}

/// Joins the template and creates the init of the command's own namespaces; returns its pid (in
/// our namespace) or -1 with errno holding the encoded failed step. Runs in the supervisor, which
/// stays in the template's namespaces (it only waits and kills from there on).
///
/// The init shares the supervisor's memory (`CLONE_VM`) on a stack of its own: the supervisor is
/// a copy of Node, and a second copy of Node's page tables (a plain fork) cost more than all the
/// namespaces and mounts together. The two processes never write the same memory but `errno`,
/// which each reads only right after a call of its own failed, while the other is blocked: the
/// supervisor in its read of the exec-error pipe until the shell has exec'd or the init failed,
/// the init (after that) in `waitpid`, which cannot fail while the shell lives.
///
/// # Safety
///
/// Only in the supervisor (a forked, single-threaded child of Node), once per process: it joins
/// the template's namespaces for good. `start` and `script` stay valid and unchanged for as long
/// as the supervisor runs (they live in its never-returning `supervise` and in the plan it holds),
/// and no one else uses `script.init_stack`, which the init runs on.
pub(super) unsafe fn start(script: &Script, start: &ShellStart) -> libc::pid_t {
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
    let [user, mnt, net] = script.template_fds();
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
    INIT_SCRIPT.store(script as *const Script as *mut Script, Ordering::Relaxed);
    let stack = script.init_stack.as_ptr() as usize + script.init_stack.len();
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
/// it writes is only its stack, errno and Node's argument and environment areas, which nothing
/// else reads). `script` and `start` are the supervisor's, valid while it runs.
unsafe fn init(script: &Script, start: &ShellStart) -> ! {
    // SAFETY: a new process (our contract) may replace the handlers it inherited; setsid and
    // prctl take integers.
    unsafe {
        reset_signals();
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
    let first = script.template_actions.len();
    for (index, action) in script.command_actions.iter().enumerate() {
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
            rlim_cur: max,
            rlim_max: max,
        };
        // SAFETY: `limit` is a valid rlimit.
        unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit) };
    }
    if let Some((start, end)) = script.env_area {
        // SAFETY: the initial environment's bytes of this process's memory, as the kernel reports
        // them (`/proc/self/stat`, read before the fork): mapped and writable; nothing in this
        // process reads them again (our contract).
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
    }
    if let Some((start, end)) = script.argv_area {
        // Our own copy of Node's memory (the supervisor's, shared): pi's command line stays pi's.
        let name = b"pi-sandbox-init";
        // SAFETY: as for the environment: the command line's `end - start` bytes (at least one,
        // `stat_area` checks), then the name within them, keeping the last byte a NUL.
        unsafe {
            std::ptr::write_bytes(start as *mut u8, 0, end - start);
            std::ptr::copy_nonoverlapping(
                name.as_ptr(),
                start as *mut u8,
                name.len().min(end - start - 1),
            );
        }
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
    // The shell has exec'd (or reported its failure): let the supervisor's read end.
    // SAFETY: our copies of the two ends, not used again.
    unsafe {
        libc::close(start.exec_error);
        libc::close(start.output);
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

/// The control buffer of the listeners' `SCM_RIGHTS` message, in 8-byte words: room for
/// `CMSG_SPACE(2 * sizeof(int))` (24 bytes on 64-bit Linux), aligned as `cmsghdr`.
pub(super) const LISTENER_CMSG_WORDS: usize = 4;

/// Listens on `127.0.0.1:<port>` (a port the kernel picks) and, where IPv6 is on, `[::1]:<port>`
/// in this network namespace, and sends the listening sockets to Node over `channel`; false with
/// errno set when the IPv4 one fails. Our copies are closed afterwards.
///
/// # Safety
///
/// Only in the template's builder, in the template's own network namespace, with `channel` its
/// end of the socket pair with Node.
unsafe fn send_listeners(channel: RawFd) -> bool {
    // SAFETY: plain integers and a `sockaddr_in` valid for the size passed; the sockets are ours.
    let v4 = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
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
            return false;
        }
        fd
    };
    // SAFETY: as above; `getsockname` fills at most `len` bytes of `bound`.
    let port = unsafe {
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::getsockname(v4, (&mut bound as *mut libc::sockaddr_in).cast(), &mut len) != 0 {
            return false;
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
    let fds = [v4, v6];
    let count = if v6 >= 0 { 2 } else { 1 };
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; LISTENER_CMSG_WORDS];
    // SAFETY: `msghdr` and the control buffer are plain data on our stack; the CMSG macros stay
    // within `control` (sized for two descriptors); `sendmsg` copies what it is given.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        let payload = (count * size_of::<libc::c_int>()) as libc::c_uint;
        msg.msg_controllen = libc::CMSG_SPACE(payload) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<libc::c_int>(),
            count,
        );
        libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL) == 1
    };
    let failed = errno();
    // SAFETY: our copies; Node holds its own now.
    unsafe {
        libc::close(v4);
        if v6 >= 0 {
            libc::close(v6);
        }
    }
    set_errno(failed);
    sent
}
