//! Node's side: starting a sandbox helper with nothing of Node's. A child sharing Node's memory
//! for a moment (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does: no copy of Node's page tables)
//! places the plan and the handed descriptors at fixed numbers, closes every other descriptor and
//! executes the helper's image with an empty environment. It runs no Rust code that allocates,
//! locks or may panic, with every signal blocked (Node's handlers never run in it).

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

mod image;

pub(in crate::exec) use image::image;
pub use image::{set_path, use_current_exe};

use super::child::{Role, ARG0, FIRST_FD, PLAN_FD};
use crate::sys::{close_all_except, errno};

/// Stack of the launching child: a few frames of raw system calls.
const LAUNCH_STACK_BYTES: usize = 32 << 10;
/// The ABI's stack alignment at a call (x86-64 and AArch64: 16 bytes).
const STACK_ALIGN: usize = 16;
/// The launching child's exit code when it could not execute the helper (the errno goes to Node
/// through shared memory first).
const EXIT_CANNOT_EXEC: libc::c_int = 127;

/// What the launching child reads (and its errno, written back), prepared before the `clone`.
struct Launch {
    /// Copies of the descriptors to place, all at or above `keep`'s last entry + 1: the plan,
    /// /dev/null, the handed ones, the image.
    plan: RawFd,
    devnull: RawFd,
    handed: Vec<RawFd>,
    image: RawFd,
    /// The helper's descriptors above stderr, ascending: the handed ones and the image's.
    keep: Vec<RawFd>,
    argv: [*const libc::c_char; 3],
    envp: [*const libc::c_char; 1],
    errno: AtomicI32,
}

/// Starts the helper in `role` with `plan` on its descriptor `PLAN_FD` and `handed` from
/// `FIRST_FD` on, in order; /dev/null on its stdout and stderr. Returns its pid (our child).
/// Every failure is the sandbox's (`SandboxUnavailable`): no helper, or it could not start.
pub(in crate::exec) fn launch(
    role: Role,
    plan: &[u8],
    handed: &[BorrowedFd<'_>],
) -> io::Result<libc::pid_t> {
    let image = image().map_err(io::Error::other)?;
    start(&image, role, plan, handed).map_err(|e| {
        io::Error::other(crate::error::Error::sandbox_unavailable(format!(
            "cannot start the sandbox helper: {e}"
        )))
    })
}

fn start(
    image: &OwnedFd,
    role: Role,
    plan: &[u8],
    handed: &[BorrowedFd<'_>],
) -> io::Result<libc::pid_t> {
    let plan_file = plan_memfd(plan)?;
    // SAFETY: a static NUL-terminated path; the descriptor is ours.
    let devnull = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if devnull < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, ours.
    let devnull = unsafe { OwnedFd::from_raw_fd(devnull) };
    // Every source is copied above the helper's last number, so placing one never overwrites
    // another.
    let image_slot = FIRST_FD + handed.len() as RawFd;
    let above = image_slot + 1;
    let copy = |fd: RawFd| -> io::Result<OwnedFd> {
        // SAFETY: duplicates a descriptor we hold; the copy is ours.
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, above) };
        if copy < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just made, ours.
        Ok(unsafe { OwnedFd::from_raw_fd(copy) })
    };
    let copies = (
        copy(plan_file.as_raw_fd())?,
        copy(devnull.as_raw_fd())?,
        handed
            .iter()
            .map(|fd| copy(fd.as_raw_fd()))
            .collect::<io::Result<Vec<_>>>()?,
        copy(image.as_raw_fd())?,
    );
    let launch = Launch {
        plan: copies.0.as_raw_fd(),
        devnull: copies.1.as_raw_fd(),
        handed: copies.2.iter().map(AsRawFd::as_raw_fd).collect(),
        image: copies.3.as_raw_fd(),
        keep: (FIRST_FD..=image_slot).collect(),
        argv: [ARG0.as_ptr(), role.arg().as_ptr(), std::ptr::null()],
        envp: [std::ptr::null()],
        errno: AtomicI32::new(0),
    };
    let mut stack = vec![0u8; LAUNCH_STACK_BYTES];
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !(STACK_ALIGN - 1);
    // SAFETY: `sigset_t` is plain data; `sigfillset` and `pthread_sigmask` fill and read it.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: valid sets; blocks every signal in this thread until the child has executed the
    // helper (the child inherits the mask: no handler of Node's runs in it).
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: `top` is the aligned end of a stack only the child uses; `child` never returns
    // into it (it executes or exits); CLONE_VFORK suspends this thread until then, so `launch`
    // and the copies stay alive and unchanged while the child reads them.
    let pid = unsafe {
        libc::clone(
            child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &launch as *const Launch as *mut libc::c_void,
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores this thread's mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    let failed = launch.errno.load(Ordering::Relaxed);
    if failed != 0 {
        wait(pid);
        return Err(io::Error::from_raw_os_error(failed));
    }
    Ok(pid)
}

/// The launching child: places the descriptors, closes the rest, executes the helper.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Launch` of our parent, suspended until we execute or exit
    // (CLONE_VFORK): valid and unchanged meanwhile.
    let launch = unsafe { &*(arg as *const Launch) };
    let fail = || -> libc::c_int {
        launch.errno.store(errno().max(1), Ordering::Relaxed);
        // SAFETY: ends this process without running any handler.
        unsafe { libc::_exit(EXIT_CANNOT_EXEC) }
    };
    // SAFETY: every source is an open copy above every target (`launch`'s contract), so no dup2
    // overwrites a source still to be placed; the targets are this process's own table (no
    // CLONE_FILES).
    unsafe {
        if libc::dup2(launch.plan, PLAN_FD) < 0
            || libc::dup2(launch.devnull, libc::STDOUT_FILENO) < 0
            || libc::dup2(launch.devnull, libc::STDERR_FILENO) < 0
        {
            return fail();
        }
        for (i, &fd) in launch.handed.iter().enumerate() {
            if libc::dup2(fd, FIRST_FD + i as RawFd) < 0 {
                return fail();
            }
        }
        let image = FIRST_FD + launch.handed.len() as RawFd;
        if libc::dup3(launch.image, image, libc::O_CLOEXEC) < 0 {
            return fail();
        }
        close_all_except(&launch.keep);
        libc::syscall(
            libc::SYS_execveat,
            image,
            c"".as_ptr(),
            launch.argv.as_ptr(),
            launch.envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
    }
    fail()
}

/// The plan in an anonymous file the helper reads from its start.
fn plan_memfd(plan: &[u8]) -> io::Result<std::fs::File> {
    // SAFETY: a static NUL-terminated name; the descriptor is ours.
    let fd = unsafe { libc::memfd_create(c"pi-sandbox-plan".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, ours.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(plan)?;
    // SAFETY: our descriptor; the helper reads from the start.
    if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Reaps the helper `pid` (our child).
pub(in crate::exec) fn wait(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: reaps our own child into a valid `status`.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

/// A helper's one report on `channel` (`sys::send_fds`): `payload` filled whole, and the
/// descriptors sent with it. End-of-file (`who` died without reporting) or a report of another
/// size is an error.
pub(in crate::exec) fn receive_report(
    channel: &OwnedFd,
    payload: &mut [u8],
    who: &str,
) -> io::Result<Vec<OwnedFd>> {
    let died = || io::Error::other(format!("{who} died"));
    let report = crate::sys::recv_fds(channel.as_fd(), payload).map_err(|_| died())?;
    if report.len != payload.len() || report.truncated {
        return Err(died());
    }
    Ok(report.fds)
}
