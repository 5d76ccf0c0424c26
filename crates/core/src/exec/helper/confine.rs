//! The confinement the shell's process applies to itself just before `execve`: no_new_privs, no
//! capabilities, the Landlock ruleset, the seccomp filter, the notification filter. Raw system
//! calls on the decoded `ChildSandbox`: no allocation, no locks, nothing that may panic.

use std::os::fd::RawFd;

use crate::exec::child::ChildSandbox;
use crate::exec::sandbox::setup::{step_error, Step};
use crate::sys::errno;

/// `seccomp(2)`'s `SECCOMP_MODE_FILTER` for `PR_SET_SECCOMP`.
const SECCOMP_MODE_FILTER: libc::c_ulong = 2;
/// `capset`'s `_LINUX_CAPABILITY_VERSION_3` (two 32-bit words of each set).
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// Capability numbers tried when emptying the bounding set: above the highest the kernel knows
/// (40 in 6.x), `PR_CAPBSET_DROP` fails harmlessly.
const CAP_NUMBERS: std::ops::Range<libc::c_ulong> = 0..64;

/// The confinement of the shell's own process, just before `execve`: no_new_privs, no
/// capabilities, the Landlock ruleset, the seccomp filter. Async-signal-safe; `Err` carries the
/// encoded failed step.
/// `notify_channel`: the socket the notification filter's listener is sent over.
///
/// # Safety
///
/// Only in the shell's own process (a clone of the sandbox helper, single-threaded) just before
/// `execve`: what it sets cannot be undone and holds for this process and everything it runs.
/// `plan` was decoded before; `notify_channel` is the helper's end of the plan's notification
/// socket pair (or -1 when the plan has no handler), and `plan.ruleset` an open ruleset (or -1).
pub(in crate::exec) unsafe fn confine(
    plan: &ChildSandbox,
    notify_channel: RawFd,
) -> Result<(), i32> {
    // SAFETY: plain integers; the caller's process is the one to confine.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(step_error(Step::NoNewPrivs, errno()));
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { drop_capabilities() }.map_err(|e| step_error(Step::Capabilities, e))?;
    if plan.ruleset >= 0 {
        // SAFETY: the caller's contract, passed on: the shell's process, before `execve`, with
        // `plan.ruleset` an open ruleset.
        unsafe { restrict_self(plan.ruleset) }.map_err(|e| step_error(Step::Landlock, e))?;
    }
    let program = libc::sock_fprog {
        len: plan.seccomp.len() as libc::c_ushort,
        filter: plan.seccomp.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `program` points to the plan's filter, valid for `len` instructions; the kernel
    // copies it.
    if unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            SECCOMP_MODE_FILTER,
            &program as *const libc::sock_fprog,
            0,
            0,
        )
    } != 0
    {
        return Err(step_error(Step::Seccomp, errno()));
    }
    if let Some(program) = &plan.notify {
        // SAFETY: the caller's contract, passed on (`notify_channel` the plan's channel).
        unsafe { crate::exec::sandbox::notify::install(program, notify_channel) }
            .map_err(|e| step_error(Step::Notify, e))?;
    }
    Ok(())
}

/// Empties the bounding, ambient, effective, permitted and inheritable sets, so neither this
/// process nor what it executes (root included) holds a capability.
///
/// # Safety
///
/// As `confine`: only in the shell's own process before `execve` (it cannot be undone).
unsafe fn drop_capabilities() -> Result<(), i32> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // Without CAP_SETPCAP (an unprivileged caller in Landlock mode) the bounding set cannot be
    // changed; such a caller has no capability to lose, and no_new_privs stops setuid gains.
    // SAFETY: plain integers, on the caller's process.
    unsafe {
        for cap in CAP_NUMBERS {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    // SAFETY: `header` and the two `data` words are the `_LINUX_CAPABILITY_VERSION_3` layout
    // capset reads.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Confines the calling process (and what it executes) with the ruleset `fd`.
/// Async-signal-safe; `Err` is the errno.
///
/// # Safety
///
/// Only in the shell's own process before `execve` (as `confine`): the confinement cannot be
/// undone, and Node's process must never get it. `fd` is an open ruleset.
unsafe fn restrict_self(fd: RawFd) -> Result<(), i32> {
    // SAFETY: the caller's contract: an open ruleset, the caller's process the one to confine.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) } != 0 {
        return Err(errno());
    }
    Ok(())
}
