//! How a sandbox's setup fails: the steps of the helper's processes that can fail, the one number a
//! failed step travels as to Node, and the errors of a sandbox that cannot be made here.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::Error;

/// Exit code of a sandbox process that failed during setup; nobody reads it (the error pipe
/// carries the step and errno).
pub(in crate::exec) const EXIT_SETUP_FAILED: i32 = 127;
/// A setup failure travels as `STEP_BASE * (step + 1) + errno` where a plain spawn error is an
/// errno: errnos stay below the kernel's `MAX_ERRNO` (4095), so the two never collide.
pub(super) const STEP_BASE: i32 = 4096;

/// A step of the setup that can fail, reported with its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::exec) enum Step {
    NoNewPrivs,
    Capabilities,
    Landlock,
    Seccomp,
    Clone,
    Setgroups,
    UidMap,
    GidMap,
    Private,
    SetupTmpfs,
    PivotSetup,
    NewRoot,
    PivotNew,
    DetachHost,
    StartShell,
    JoinTemplate,
    Notify,
    ProxyListen,
    Helper,
    /// The n-th action of the namespaces plan.
    Action(usize),
}

/// The fixed steps in the order of their numbers, with what each does (for the error's text).
pub(super) const FIXED_STEPS: &[(Step, &str)] = &[
    (Step::NoNewPrivs, "setting no_new_privs"),
    (Step::Capabilities, "dropping capabilities"),
    (Step::Landlock, "applying the Landlock ruleset"),
    (Step::Seccomp, "installing the seccomp filter"),
    (Step::Clone, "creating the namespaces"),
    (Step::Setgroups, "writing /proc/self/setgroups"),
    (Step::UidMap, "writing /proc/self/uid_map"),
    (Step::GidMap, "writing /proc/self/gid_map"),
    (Step::Private, "making the mounts private"),
    (Step::SetupTmpfs, "mounting the setup tmpfs on /tmp"),
    (Step::PivotSetup, "pivot_root into the setup tmpfs"),
    (Step::NewRoot, "mounting the new root's tmpfs"),
    (Step::PivotNew, "pivot_root into the new root"),
    (Step::DetachHost, "detaching the host's root"),
    (Step::StartShell, "starting the shell"),
    (Step::JoinTemplate, "joining the sandbox's namespaces"),
    (Step::Notify, "installing the seccomp notification filter"),
    (
        Step::ProxyListen,
        "listening for the network proxy inside the sandbox",
    ),
    (Step::Helper, "starting the sandbox helper"),
];

/// The number of `step`: its place in `FIXED_STEPS`, the namespaces plan's actions after them.
pub(super) fn step_index(step: Step) -> usize {
    match step {
        Step::Action(n) => FIXED_STEPS.len() + n,
        fixed => FIXED_STEPS
            .iter()
            .position(|(s, _)| *s == fixed)
            .expect("every fixed step is listed"),
    }
}

/// The value reporting that `step` failed with `errno`. Async-signal-safe.
pub(in crate::exec) fn step_error(step: Step, errno: i32) -> i32 {
    let step = i32::try_from(step_index(step)).unwrap_or(i32::MAX / STEP_BASE - 1);
    STEP_BASE.saturating_mul(step + 1).saturating_add(errno)
}

/// A sandbox spec this machine or this sandbox cannot honour (the core's `SandboxUnavailable`).
pub(super) fn invalid_spec(why: String) -> io::Error {
    unavailable(why)
}

/// This machine cannot make the sandbox (the core's `SandboxUnavailable`).
pub(super) fn unavailable(why: String) -> io::Error {
    io::Error::other(Error::sandbox_unavailable(why))
}

/// `path` for a system call; a path holding a NUL byte is an invalid spec.
pub(super) fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| invalid_spec(format!("{} contains a NUL byte", path.display())))
}

/// The sysctl that restricts unprivileged user namespaces here, if one does.
pub(super) fn userns_hint() -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        " (kernel.apparmor_restrict_unprivileged_userns=1)".into()
    } else if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        " (kernel.unprivileged_userns_clone=0)".into()
    } else if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        " (user.max_user_namespaces=0)".into()
    } else {
        String::new()
    }
}
