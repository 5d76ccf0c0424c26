//! Namespaces mode's template builder, in the sandbox helper: a child of the helper in the
//! template's new namespaces that writes its id maps, builds the root and pivots into it, and
//! reports the namespaces' descriptors to Node. Raw system calls on the decoded `TemplateScript`
//! only: no allocation, no locks, nothing that may panic.

use std::os::fd::RawFd;

use super::mount::perform;
use super::net::{listen_for_proxy, loopback_up};
use crate::exec::child::{TemplateScript, REPORT_MAX_FDS};
use crate::exec::sandbox::setup::{step_error, Step, EXIT_SETUP_FAILED};
use crate::sys::errno;

/// Where the setup tmpfs is mounted before the first `pivot_root`: a directory every Linux system
/// has. Once pivoted, the host's root (and its `/tmp`) is reached again under `/oldroot`.
const SETUP_BASE: &std::ffi::CStr = c"/tmp";

/// Writes `data` to the file at `path`; async-signal-safe.
pub(super) fn write_file(path: &std::ffi::CStr, data: &[u8]) -> bool {
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
